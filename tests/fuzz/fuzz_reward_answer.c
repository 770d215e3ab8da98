/* fuzz_reward_answer.c - libFuzzer entry point for a reward program's answer line
 * (runtime/host/reward_program.c, dfg run --reward-cmd; docs/rewards.md): bytes a user's program
 * writes, read before any reward is used.
 *
 * The input is parsed as the answer for 1 .. 4 rows of two reward functions (the row count from
 * the input's length, so every seed is tried against the count it was written for and others).
 * Any input must either be refused (DFG_ERR_FORMAT, one line naming the step) with the output
 * left to the caller, or fill every value with a finite float or NaN (null). A violated fact
 * aborts, which the fuzzer reports as a crash. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "runtime/host/reward_internal.h"

#define FUZZ_F 2

static void fuzz_fail(const char *why, const char *detail) {
    fprintf(stderr, "fuzz_reward_answer: invariant violated: %s (%s)\n", why, detail ? detail : "");
    abort();
}

static dfg_status parse(const uint8_t *data, size_t size, int64_t n, float *out, char *err, size_t len) {
    dfg_reward_source s = {.kind = DFG_REWARD_PROGRAM, .prog = {.fd = -1}};
    const char *names[FUZZ_F] = {"correct", "format"};
    char why[128];
    if (dfg_reward_set_names(&s, names, FUZZ_F, why, sizeof(why))) fuzz_fail("names refused", why);
    char *line = malloc(size + 1); /* the reader NUL-terminates what it read */
    if (!line) return DFG_ERR_NOMEM;
    memcpy(line, data, size);
    line[size] = '\0';
    dfg_status st = dfg_reward_parse_answer(&s, line, size, n, 7, out, err, len);
    free(line);
    for (int i = 0; i < FUZZ_F; i++) free(s.names[i]);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t n = 1 + (int64_t)(size % 4);
    float out[4 * FUZZ_F];
    char err[512];
    for (int i = 0; i < 4 * FUZZ_F; i++) out[i] = INFINITY; /* poison: every value must be written */
    err[0] = '\0';
    dfg_status st = parse(data, size, n, out, err, sizeof(err));
    if (st == DFG_OK) {
        for (int64_t i = 0; i < n * FUZZ_F; i++)
            if (isinf(out[i])) fuzz_fail("an accepted answer left a value unwritten or infinite", NULL);
    } else {
        if (st != DFG_ERR_FORMAT && st != DFG_ERR_NOMEM) fuzz_fail("unexpected status", err);
        if (st == DFG_ERR_FORMAT && (strncmp(err, "step 7", 6) || strchr(err, '\n')))
            fuzz_fail("the message is not one line naming the step", err);
    }
    return 0;
}

/* For the replay: whether the answer is accepted for the row count its length gives. */
static bool fuzz_reward_answer_accepts(const uint8_t *data, size_t size) {
    float out[4 * FUZZ_F];
    char err[512];
    return parse(data, size, 1 + (int64_t)(size % 4), out, err, sizeof(err)) == DFG_OK;
}

static const char ra_tokens[] = "\"{}[],:\\ .-+eE0123456789nulltruefalserewardserror";
const fuzz_target fuzz_this_target = {"fuzz_reward_answer", ra_tokens, sizeof(ra_tokens) - 1, -1, 0,
                                      fuzz_reward_answer_accepts};
