/* fuzz_safetensors.c - libFuzzer entry point for the safetensors reader.
 *
 * Any input must either fail cleanly (no tensor set, a status the reader documents, a one-line
 * message) or parse into tensors whose every byte can be read and whose header facts agree:
 * rank <= 6, non-negative dims, bytes = numel x element size for dfg dtypes, lookups by name
 * return the same entry. A violated fact aborts, which the fuzzer reports as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "runtime/formats/safetensors.h"

static void fuzz_fail(const char *why) {
    fprintf(stderr, "fuzz_safetensors: invariant violated: %s\n", why);
    abort();
}

/* Reads every byte of the tensor (a sanitizer flags any that lies outside the input's copy). */
static unsigned fuzz_touch(const dfg_st_tensor *t) {
    unsigned sum = 0;
    const unsigned char *p = t->data;
    for (size_t i = 0; i < t->bytes; i++) sum += p[i];
    return sum;
}

static void fuzz_check_tensor(const dfg_safetensors *st, const dfg_st_tensor *t) {
    if (!t || !t->name || !t->dtype_name || (t->bytes && !t->data)) fuzz_fail("incomplete entry");
    if (t->shape.rank < 0 || t->shape.rank > DFG_MAX_RANK) fuzz_fail("rank out of range");
    uint64_t numel = 1;
    for (int d = 0; d < t->shape.rank; d++) {
        if (t->shape.d[d] < 0) fuzz_fail("negative dim");
        numel *= (uint64_t)t->shape.d[d]; /* bounded: the reader checked for overflow */
    }
    if (t->dtype < DFG_DTYPE_COUNT && numel * dfg_dtype_size(t->dtype) != t->bytes) fuzz_fail("bytes != numel x size");
    if ((int)t->dtype < 0 || t->dtype > DFG_DTYPE_COUNT) fuzz_fail("dtype out of range");
    if (dfg_st_find(st, t->name) != t) fuzz_fail("find(name) does not return the entry");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dfg_safetensors *st = (dfg_safetensors *)&size; /* the reader must reset it on failure */
    char err[512];
    err[0] = '\0';
    dfg_status s = dfg_st_parse(data, size, &st, err, sizeof(err));
    if (s != DFG_OK) {
        if (st) fuzz_fail("*out not NULL after a failure");
        if (s != DFG_ERR_FORMAT && s != DFG_ERR_NOMEM) fuzz_fail("unexpected status");
        if (!err[0] || strchr(err, '\n')) fuzz_fail("message missing or not one line");
        return 0;
    }
    volatile unsigned sink = 0;
    for (int i = 0; i < dfg_st_count(st); i++) {
        const dfg_st_tensor *t = dfg_st_get(st, i);
        fuzz_check_tensor(st, t);
        sink += fuzz_touch(t);
    }
    if (dfg_st_get(st, dfg_st_count(st)) != NULL || dfg_st_get(st, -1) != NULL) fuzz_fail("get out of range");
    const char *fmt = dfg_st_metadata(st, "format");
    if (fmt) sink += (unsigned)strlen(fmt);
    (void)sink;
    dfg_st_free(st);
    return 0;
}

static bool fuzz_st_accepts(const uint8_t *data, size_t size) {
    dfg_safetensors *st = NULL;
    char err[64];
    dfg_status s = dfg_st_parse(data, size, &st, err, sizeof(err));
    dfg_st_free(st);
    return s == DFG_OK;
}

/* For the replay: JSON-significant bytes, and the u64 header length at offset 0. */
static const char st_tokens[] = "\"{}[],:-.0123456789eE\\ \x00\xff\xc3\x80nulltruefalse";
const fuzz_target fuzz_this_target = {"fuzz_safetensors", st_tokens, sizeof(st_tokens) - 1, 0, 8, fuzz_st_accepts};
