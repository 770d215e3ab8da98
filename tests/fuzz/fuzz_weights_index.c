/* fuzz_weights_index.c - libFuzzer entry point for the parser of model.safetensors.index.json
 * (runtime/formats/weights_dir.c: the index of a sharded model directory, read by dfg run --weights DIR).
 *
 * Any input must either fail cleanly (a status the parser documents, a one-line message naming
 * the index) or parse into a weight_map of at least one tensor spread over 1..n_tensors shard
 * files. A violated fact aborts, which the fuzzer reports as a crash. Opening the shards is the
 * safetensors reader's part, fuzzed by fuzz_safetensors.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "runtime/formats/weights_dir.h"

static void fuzz_fail(const char *why) {
    fprintf(stderr, "fuzz_weights_index: invariant violated: %s\n", why);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    err[0] = '\0';
    int n_tensors = -1, n_shards = -1;
    dfg_status s = dfg_wd_parse_index((const char *)data, size, &n_tensors, &n_shards, err, sizeof(err));
    if (s != DFG_OK) {
        if (s != DFG_ERR_FORMAT && s != DFG_ERR_NOMEM) fuzz_fail("unexpected status");
        if (!err[0] || strchr(err, '\n')) fuzz_fail("message missing or not one line");
        if (strncmp(err, DFG_WD_INDEX " buffer: ", strlen(DFG_WD_INDEX " buffer: ")) != 0) fuzz_fail("message does not name the index");
        if (n_tensors != 0 || n_shards != 0) fuzz_fail("counts not 0 after a failure");
        return 0;
    }
    if (n_tensors < 1 || n_shards < 1 || n_shards > n_tensors) fuzz_fail("counts out of range");
    return 0;
}

static bool fuzz_index_accepts(const uint8_t *data, size_t size) {
    char err[64];
    return dfg_wd_parse_index((const char *)data, size, NULL, NULL, err, sizeof(err)) == DFG_OK;
}

/* For the replay: JSON-significant bytes and the characters of shard paths. */
static const char wi_tokens[] = "\"{}[],:\\ ./\x00\xff\xc3\x80nulltrue0123456789";
const fuzz_target fuzz_this_target = {"fuzz_weights_index", wi_tokens, sizeof(wi_tokens) - 1, -1, 0, fuzz_index_accepts};
