/* fuzz_dataset.c - libFuzzer entry point for the prompt dataset reader (runtime/host/dataset.c:
 * `--set dataset=PATH.jsonl`, a JSONL file of prompts as token ids).
 *
 * The input is read twice, with GPT-2's vocabulary and with none (any int32 id). Any input must
 * either be refused cleanly (a status the reader documents, no dataset, one line naming the file
 * and, for a line's fault, a line number within the input) or give rows whose facts hold: at
 * least one row, line numbers increasing within the input, non-empty prompts of ids in range, the
 * longest prompt as max_prompt_len, fields that are one line of JSON text (no control byte: they
 * go to a reward program inside one JSON line) parsing back to an object without "prompt_ids",
 * the same hash when read again, and an epoch order that is a permutation. A vocabulary only
 * refuses more: what it accepts is read the same without it. A violated fact aborts, which the
 * fuzzer reports as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz_target.h"
#include "runtime/host/dataset.h"

#define FUZZ_LABEL "fuzz/data.jsonl"
#define FUZZ_VOCAB 50257

static void fuzz_fail(const char *why, const char *detail) {
    fprintf(stderr, "fuzz_dataset: invariant violated: %s (%s)\n", why, detail ? detail : "");
    abort();
}

/* A refusal: its status, no dataset, one line "LABEL: ..." or "LABEL:LINE: ..." with LINE in
 * 1 .. the input's lines. */
static void check_refusal(dfg_status s, const dfg_dataset *ds, const char *err, size_t lines) {
    if (s != DFG_ERR_FORMAT && s != DFG_ERR_NOMEM) fuzz_fail("unexpected status", err);
    if (ds) fuzz_fail("a dataset after a refusal", err);
    if (!err[0] || strchr(err, '\n')) fuzz_fail("message missing or not one line", err);
    size_t n = strlen(FUZZ_LABEL);
    if (strncmp(err, FUZZ_LABEL, n) || (err[n] != ':')) fuzz_fail("message does not name the file", err);
    if (err[n + 1] != ' ') {
        char *end = NULL;
        long long line = strtoll(err + n + 1, &end, 10);
        if (*end != ':' || line < 1 || (size_t)line > lines) fuzz_fail("message names a line outside the input", err);
    }
}

/* Fields as the reward gets them: one line of compact JSON, an object without prompt_ids, which
 * cJSON prints back as the same text. */
static void check_fields(const char *f) {
    for (const char *c = f; *c; c++)
        if ((unsigned char)*c < 0x20) fuzz_fail("fields hold a control byte", f);
    cJSON *o = cJSON_Parse(f);
    if (!cJSON_IsObject(o)) fuzz_fail("fields are not a JSON object", f);
    if (cJSON_GetObjectItemCaseSensitive(o, "prompt_ids")) fuzz_fail("fields hold prompt_ids", f);
    char *again = cJSON_PrintUnformatted(o);
    if (again && strcmp(again, f)) fuzz_fail("fields do not print back as themselves", f);
    free(again);
    cJSON_Delete(o);
}

static void check_dataset(dfg_dataset *ds, int64_t vocab, size_t lines) {
    int64_t rows = dfg_dataset_rows(ds), longest = 0, last_line = 0;
    if (rows < 1) fuzz_fail("accepted without rows", NULL);
    int64_t hi = vocab > 0 ? vocab - 1 : INT32_MAX;
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = 0, line = dfg_dataset_line(ds, r);
        const int32_t *ids = dfg_dataset_prompt(ds, r, &len);
        if (!ids || len < 1) fuzz_fail("an empty prompt", NULL);
        for (int64_t i = 0; i < len; i++)
            if (ids[i] < 0 || ids[i] > hi) fuzz_fail("an id outside the vocabulary", NULL);
        if (len > longest) longest = len;
        if (line <= last_line || (size_t)line > lines) fuzz_fail("line numbers not increasing within the input", NULL);
        last_line = line;
        check_fields(dfg_dataset_fields(ds, r));
    }
    if (longest != dfg_dataset_max_prompt_len(ds)) fuzz_fail("max_prompt_len is not the longest prompt", NULL);
    if (dfg_dataset_prompt(ds, rows, NULL) || dfg_dataset_fields(ds, -1) || dfg_dataset_line(ds, rows) != -1)
        fuzz_fail("a row outside the dataset", NULL);
    /* the order: a permutation in two epochs (the cached one replaced), the identity unshuffled */
    unsigned char *seen = calloc((size_t)rows, 1);
    if (!seen) return;
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, (size_t)rows);
        for (int64_t k = 0; k < rows; k++) {
            int64_t r = dfg_dataset_order(ds, (uint64_t)rows * 7919u, epoch, k, true);
            if (r < 0 || r >= rows || seen[r]++) fuzz_fail("the order is not a permutation", NULL);
        }
    }
    free(seen);
    if (dfg_dataset_order(ds, 1, 0, rows - 1, false) != rows - 1 || dfg_dataset_order(ds, 1, 0, rows, true) != -1)
        fuzz_fail("the order outside or unshuffled", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    char err[512], err_any[512];
    dfg_dataset *ds = (dfg_dataset *)1, *any = (dfg_dataset *)1;
    dfg_status s = dfg_dataset_from_text((const char *)data, size, FUZZ_LABEL, FUZZ_VOCAB, &ds, err, sizeof(err));
    dfg_status s_any = dfg_dataset_from_text((const char *)data, size, FUZZ_LABEL, 0, &any, err_any, sizeof(err_any));
    if (s) check_refusal(s, ds, err, lines);
    else if (err[0]) fuzz_fail("a message after success", err);
    else check_dataset(ds, FUZZ_VOCAB, lines);
    if (s_any) check_refusal(s_any, any, err_any, lines);
    else check_dataset(any, 0, lines);
    if (s_any && !s) fuzz_fail("refused without a vocabulary, accepted with one", err_any);
    if (!s && (s_any || dfg_dataset_hash(ds) != dfg_dataset_hash(any) || dfg_dataset_rows(ds) != dfg_dataset_rows(any)))
        fuzz_fail("read differently without a vocabulary", err_any);
    if (!s_any) { /* the same input, the same hash */
        dfg_dataset *again = NULL;
        dfg_dataset_from_text((const char *)data, size, FUZZ_LABEL, 0, &again, NULL, 0);
        if (!again || dfg_dataset_hash(again) != dfg_dataset_hash(any)) fuzz_fail("read again, another hash", NULL);
        dfg_dataset_free(again);
    }
    if (!s) dfg_dataset_free(ds);
    if (!s_any) dfg_dataset_free(any);
    return 0;
}

static bool fuzz_dataset_accepts(const uint8_t *data, size_t size) {
    dfg_dataset *ds = NULL;
    bool ok = dfg_dataset_from_text((const char *)data, size, FUZZ_LABEL, FUZZ_VOCAB, &ds, NULL, 0) == DFG_OK;
    dfg_dataset_free(ds);
    return ok;
}

/* For the replay: JSON-significant bytes, digits and signs of numbers, line ends, a byte order
 * mark's and UTF-8's lead bytes, NUL. */
static const char ds_tokens[] = "\"{}[],:\\ .-+eE0123456789\r\n\t\x00\xef\xbb\xbf\xc3\x80\xffnulltruefalse";
const fuzz_target fuzz_this_target = {"fuzz_dataset", ds_tokens, sizeof(ds_tokens) - 1, -1, 0, fuzz_dataset_accepts};
