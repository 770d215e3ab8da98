/* fuzz_target.h - what a fuzz harness (fuzz_safetensors.c, fuzz_plan.c) defines: the libFuzzer
 * entry point, and for the replay driver (fuzz_replay.c, which runs the entry point as a ctest
 * without libFuzzer) its name, the bytes its mutations should favour and whether the reader
 * accepts an input. */
#ifndef DFG_FUZZ_TARGET_H
#define DFG_FUZZ_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;      /* "fuzz_plan": the replay's messages start with it */
    const char *tokens;    /* bytes that mean something in the format, written over random ones */
    size_t n_tokens;
    long int_field;        /* offset of a little-endian integer worth tweaking often (-1: none) */
    int int_width;         /* its bytes */
    /* Whether the reader accepts the input, or the copy the harness also tries (fuzz_plan.c
     * repairs the section checksums): the replay requires both outcomes among its mutants. */
    bool (*accepts)(const uint8_t *data, size_t size);
} fuzz_target;

extern const fuzz_target fuzz_this_target;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
