/* fuzz_model_config.c - libFuzzer entry point for the reader of a model directory's config.json
 * (runtime/formats/model_config.c: `dfg compile --set model=DIR` turns it into pipeline settings).
 *
 * The program starts with two settings as the user's --set would leave them. Any input must
 * either fail cleanly (a status the reader documents, one line naming the file, the program's
 * settings untouched and no sticky error) or add settings that are all of the reader's keys,
 * with a model_type dfg runs and values a pipeline's typed accessors accept, leaving the user's
 * two as they were. A violated fact aborts, which the fuzzer reports as a crash. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "runtime/formats/model_config.h"

#define FUZZ_LABEL "fuzz/config.json"

static void fuzz_fail(const char *why, const char *detail) {
    fprintf(stderr, "fuzz_model_config: invariant violated: %s (%s)\n", why, detail ? detail : "");
    abort();
}

/* The keys the reader may set and the kind of each value: i integer > 0, f finite float > 0,
 * b boolean, t the model type, d token ids (1 .. 8 integers in 0 .. INT32_MAX joined by ','),
 * e one token id. */
static const struct {
    const char *key;
    char kind;
} fuzz_keys[] = {
    {"model_type", 't'},          {"n_layer", 'i'},           {"n_head", 'i'},
    {"n_embd", 'i'},              {"vocab_size", 'i'},        {"n_positions", 'i'},
    {"layer_norm_epsilon", 'f'},  {"n_inner", 'i'},           {"hidden_size", 'i'},
    {"num_hidden_layers", 'i'},   {"num_attention_heads", 'i'}, {"num_key_value_heads", 'i'},
    {"intermediate_size", 'i'},   {"head_dim", 'i'},          {"max_position_embeddings", 'i'},
    {"rms_norm_eps", 'f'},        {"rope_theta", 'f'},        {"tie_word_embeddings", 'b'},
    {"attention_bias", 'b'},      {"eos_token_id", 'd'},      {"pad_token_id", 'e'},
};

/* "1,2,3": 1 .. max ids in 0 .. INT32_MAX */
static void check_ids(const char *v, int max) {
    const char *p = v;
    for (int n = 1;; n++) {
        char *end = NULL;
        long long x = strtoll(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || x < 0 || x > INT32_MAX || n > max) fuzz_fail("token ids out of range", v);
        if (!*end) return;
        if (*end != ',') fuzz_fail("token ids not joined by ','", v);
        p = end + 1;
    }
}

static void check_value(const char *key, const char *v) {
    size_t n = sizeof(fuzz_keys) / sizeof(fuzz_keys[0]);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fuzz_keys[i].key, key)) continue;
        char *end = NULL;
        switch (fuzz_keys[i].kind) {
        case 'i': {
            long long x = strtoll(v, &end, 10);
            if (!*v || *end || x <= 0 || x > INT32_MAX) fuzz_fail("an integer setting out of range", v);
            return;
        }
        case 'f': {
            double x = strtod(v, &end);
            if (!*v || *end || !(x > 0) || !isfinite(x)) fuzz_fail("a float setting not finite and positive", v);
            return;
        }
        case 'b':
            if (strcmp(v, "true") && strcmp(v, "false")) fuzz_fail("a boolean setting not true/false", v);
            return;
        case 'd':
        case 'e':
            check_ids(v, fuzz_keys[i].kind == 'd' ? 8 : 1);
            return;
        default:
            if (strcmp(v, "gpt2") && strcmp(v, "llama") && strcmp(v, "qwen2") && strcmp(v, "qwen3"))
                fuzz_fail("model_type not one dfg runs", v);
            return;
        }
    }
    fuzz_fail("a setting the reader does not make", key);
}

static dfg_program *fuzz_program(void) {
    dfg_program *p = dfg_program_new("fuzz");
    if (!p) return NULL;
    dfg_program_set(p, "model", "fuzz");
    dfg_program_set(p, "hidden_size", "7"); /* a user value, kept whatever the file says */
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dfg_program *p = fuzz_program();
    if (!p) return 0;
    char err[512];
    err[0] = '\0';
    dfg_status s = dfg_mc_settings_from_text(p, (const char *)data, size, FUZZ_LABEL, err, sizeof(err));
    int n = dfg_program_setting_count(p);
    if (dfg_program_status(p)) fuzz_fail("the program has an error", dfg_program_error(p));
    if (strcmp(dfg_program_setting(p, "model"), "fuzz") || strcmp(dfg_program_setting(p, "hidden_size"), "7"))
        fuzz_fail("a user setting changed", NULL);
    if (s != DFG_OK) {
        if (s != DFG_ERR_FORMAT && s != DFG_ERR_UNSUPPORTED && s != DFG_ERR_NOMEM) fuzz_fail("unexpected status", err);
        if (!err[0] || strchr(err, '\n')) fuzz_fail("message missing or not one line", err);
        if (strncmp(err, FUZZ_LABEL ": ", strlen(FUZZ_LABEL ": ")) != 0) fuzz_fail("message does not name the file", err);
        if (n != 2) fuzz_fail("settings changed by a refused file", err);
    } else {
        if (err[0]) fuzz_fail("a message after success", err);
        if (n < 3 || !dfg_program_setting(p, "model_type")) fuzz_fail("accepted without a model_type", NULL);
        for (int i = 2; i < n; i++) {
            const char *key = dfg_program_setting_key(p, i);
            check_value(key, dfg_program_setting(p, key));
        }
    }
    dfg_program_free(p);
    return 0;
}

static bool fuzz_config_accepts(const uint8_t *data, size_t size) {
    dfg_program *p = fuzz_program();
    bool ok = p && dfg_mc_settings_from_text(p, (const char *)data, size, FUZZ_LABEL, NULL, 0) == DFG_OK;
    dfg_program_free(p);
    return ok;
}

/* For the replay: JSON-significant bytes, digits and signs of numbers, and the literals. */
static const char mc_tokens[] = "\"{}[],:\\ .-+eE0123456789\x00\xff\xc3\x80nulltruefalse";
const fuzz_target fuzz_this_target = {"fuzz_model_config", mc_tokens, sizeof(mc_tokens) - 1, -1, 0, fuzz_config_accepts};
