/* padded_logp.c - the dfg side of the left-padding golden test (tests/golden/hf_padded_golden.py).
 *
 *   padded_logp MODEL_DIR BATCH OUT [--break-start]
 *
 * Builds the model of a Hugging Face directory (config.json through dfg_model_dir_settings, the
 * weights with a strict load) and reads BATCH (safetensors): tokens (N, T) i32, rows of P = N / G
 * prompts left-padded to Lp columns (each group's G rows share their prompt) followed by Tc = T - Lp
 * completion tokens, and start (N) i32, each row's first real column. Its metadata holds
 * "prompt_length" (Lp), "group" (G) and "temperature". Writes to OUT, all f32:
 *   token_logp       (N, Tc) dfg_grpo_token_logp(tokens, temperature, start), the completion columns
 *   completion_logp  (N, Tc) dfg_grpo_completion_logp(prompts, completions, temperature, start (P))
 *   cached_logits    (N, Tc, V) the logits that predict each completion token from a prefill of the
 *                    prompts into KV caches with kv.start and one decode step per completion token
 * --break-start runs the same with every nonzero start lowered by one (one pad counted as a real
 * token): the golden test requires that to disagree with transformers, so that it can fail.
 * Any failure prints one line and exits 1. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "safetensors.h"

#define GOLDEN_DRIVER "padded_logp"
#include "golden_dump.h"
#include "padded_stages.h"

/* A number from the batch's metadata; NAN when absent or malformed. */
static double meta_num(const dfg_safetensors *st, const char *key) {
    const char *s = dfg_st_metadata(st, key);
    if (!s || !*s) return NAN;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    return errno || *end ? NAN : v;
}

static const char *const OUTS[] = {"token_logp", "completion_logp", "cached_logits"};

/* The program: the three padded forms over the batch's shapes. */
static dfg_program *build(const char *dir, int64_t N, int64_t T, int64_t Lp, int64_t G, float temp, dfg_model *m) {
    dfg_program *p = dfg_program_new("padded_golden");
    char err[1024] = "";
    if (dfg_model_dir_settings(p, dir, err, sizeof(err))) {
        fail("%s", err);
        return NULL;
    }
    dfg_model_config cfg;
    if (dfg_model_config_from_settings(p, (dfg_model_config){.dtype = DFG_F32}, &cfg) || dfg_model_params(p, "", cfg, m)) {
        fail("the model of %s: %s", dir, dfg_program_error(p));
        return NULL;
    }
    int64_t P = N / G, Tc = T - Lp, V = cfg.vocab_size;
    dfg_model_kv kv;
    dfg_model_kv_cache(p, "", m, N, T, &kv);
    dfg_tensor *tok = dfg_state(p, "tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *start = dfg_state(p, "start", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *j = dfg_state(p, "j", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *cached = dfg_state(p, OUTS[2], DFG_F32, DFG_SHAPE(N, Tc, V), DFG_ROLE_NONE, dfg_init_zeros());
    kv.start = start;

    const padded_dims d = {.P = P, .G = G, .N = N, .T = T, .Lp = Lp, .Tc = Tc, .V = V};
    dfg_graph *g = dfg_graph_new(p, "score");
    padded_scores(g, m, tok, start, d, temp, OUTS[0], OUTS[1]);
    dfg_stage_graph(p, g, 1);
    padded_prefill_decode(p, m, &kv, tok, cached, pos, j, d);
    if (dfg_program_status(p)) {
        fail("building: %s", dfg_program_error(p));
        return NULL;
    }
    return p;
}

int main(int argc, char **argv) {
    bool brk = argc == 5 && !strcmp(argv[4], "--break-start");
    if (argc != 4 && !brk) return fail("usage: padded_logp MODEL_DIR BATCH OUT [--break-start]");
    char err[512] = "";
    dfg_safetensors *bs = NULL;
    if (dfg_st_open(argv[2], &bs, err, sizeof(err))) return fail("%s", err);
    const dfg_st_tensor *tok = dfg_st_find(bs, "tokens"), *st = dfg_st_find(bs, "start");
    if (!tok || !st || tok->dtype != DFG_I32 || st->dtype != DFG_I32 || tok->shape.rank != 2 || st->shape.rank != 1 ||
        st->shape.d[0] != tok->shape.d[0])
        return fail("%s: needs tokens (N, T) i32 and start (N) i32", argv[2]);
    int64_t N = tok->shape.d[0], T = tok->shape.d[1];
    double Lp = meta_num(bs, "prompt_length"), G = meta_num(bs, "group"), temp = meta_num(bs, "temperature");
    if (!(Lp >= 1 && Lp < (double)T && G >= 1 && (int64_t)N % (int64_t)G == 0 && temp > 0))
        return fail("%s: metadata prompt_length (1 .. T-1), group (dividing N) and temperature (> 0) are needed", argv[2]);

    dfg_model m;
    dfg_program *p = build(argv[1], N, T, (int64_t)Lp, (int64_t)G, (float)temp, &m);
    if (!p) return 1;
    dfg_run_options opt = dfg_run_options_default();
    dfg_runtime *rt = NULL;
    if (dfg_runtime_create(p, &opt, &rt)) return fail("dfg_runtime_create: %s", dfg_runtime_error(rt));
    int n_loaded = 0;
    if (dfg_runtime_load_safetensors(rt, argv[1], true, &n_loaded)) return fail("strict load: %s", dfg_runtime_error(rt));
    int32_t *start = malloc(st->bytes);
    memcpy(start, st->data, st->bytes);
    for (int64_t r = 0; r < N && brk; r++) start[r] -= start[r] > 0;
    if (dfg_runtime_write(rt, "tokens", tok->data, tok->bytes) || dfg_runtime_write(rt, "start", start, st->bytes))
        return fail("writing the batch: %s", dfg_runtime_error(rt));
    if (dfg_runtime_step(rt)) return fail("dfg_runtime_step: %s", dfg_runtime_error(rt));

    dfg_st_tensor out[3];
    for (int i = 0; i < 3; i++) {
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, OUTS[i], &b)) return fail("output '%s': %s", OUTS[i], dfg_runtime_error(rt));
        out[i] = (dfg_st_tensor){.name = OUTS[i], .dtype = DFG_F32, .dtype_name = "F32", .shape = b.shape, .data = b.data,
                                 .bytes = b.bytes};
    }
    if (dfg_st_write(argv[3], out, 3, NULL, 0, err, sizeof(err))) return fail("writing %s: %s", argv[3], err);
    printf("padded_logp: %d parameters from %s, N=%lld T=%lld prompt_length=%g group=%g%s -> %s\n", n_loaded, argv[1],
           (long long)N, (long long)T, Lp, G, brk ? " (start broken: one pad counted as real)" : "", argv[3]);
    free(start);
    dfg_runtime_free(rt);
    dfg_st_free(bs);
    dfg_program_free(p);
    return 0;
}
