/* gpt_decode.c - a seed pipeline for the plan-file fuzzer (tests/fuzz/make_plan_corpus.sh): a
 * one-layer GPT-2 of width 8 that generates with a KV cache; no training (accum.c trains).
 *
 * Uses: the dfg_nn GPT-2 builders (embeddings, layernorm, cached attention, gelu MLP, tied
 * lm_head), scoped KV caches and rollout state, a repeated decode stage with sampling (Philox
 * RNG state), slice_assign at a run-time position, a frozen reference copy (dfg_init_from)
 * scored by a third graph, and a CONST. Stages: prefill, decode x (T - Tp), score. */
#include <stdlib.h>

#include "dfg.h"
#include "dfg_nn.h"

typedef struct {
    dfg_tensor *tokens, *rng, *pos, *tok, *done;
} rollout;

static dfg_tensor *state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape s, dfg_role role) {
    return dfg_state(p, name, dt, s, role, dfg_init_zeros());
}

/* Writes the prompt's keys and values and its last token. */
static void prefill(dfg_program *p, const dfg_model *m, const dfg_model_kv *kv, const rollout *r, int64_t N, int64_t Tp) {
    dfg_graph *g = dfg_graph_new(p, "prefill");
    dfg_tensor *prompt = dfg_input(g, "prompt", DFG_I32, DFG_SHAPE(N, Tp)); /* (N, Tp) */
    dfg_set_scope(p, prompt, "prefill", "prefill");
    dfg_model_prefill(g, m, kv, prompt);
    dfg_slice_assign(g, r->tokens, prompt, 1, 0);
    dfg_assign(g, r->tok, dfg_slice(g, prompt, 1, Tp - 1, 1));
    dfg_assign_fill(g, r->pos, (float)(Tp - 1));
    dfg_stage_graph(p, g, 1);
}

/* One token per repeat: sample from the last position's logits, write it after pos. */
static void decode(dfg_program *p, const dfg_model *m, const dfg_model_kv *kv, const rollout *r, int repeat) {
    dfg_graph *g = dfg_graph_new(p, "decode");
    dfg_tensor *hid = dfg_model_decode(g, m, kv, r->tok, r->pos);                     /* (N, 1, C) */
    dfg_tensor *logits = dfg_model_lm_head(g, m, hid);                                 /* (N, 1, V) */
    dfg_tensor *next = dfg_sample(g, dfg_cast(g, logits, DFG_F32), r->rng, 0.8f, 4); /* (N, 1) */
    dfg_assign(g, r->tok, next);
    dfg_assign(g, r->pos, dfg_add_scalar(g, r->pos, 1.0f));
    dfg_slice_assign_at(g, r->tokens, next, 1, r->pos);
    /* ends early once the first row draws token 0 (a stage's end flag in the file) */
    dfg_tensor *first = dfg_reshape(g, dfg_cast(g, dfg_slice(g, next, 0, 0, 1), DFG_F32), DFG_SHAPE(1)); /* (1) */
    dfg_assign(g, r->done, dfg_equal(g, first, dfg_fill(g, DFG_F32, DFG_SHAPE(1), 0.0f)));
    dfg_stage_graph(p, g, repeat);
    dfg_stage_until(p, "decode", r->done);
}

/* The frozen copy's mean log-prob of the generated rows (no gradients). */
static void score(dfg_program *p, const dfg_model *ref, const rollout *r, int64_t T) {
    (void)T;
    dfg_graph *g = dfg_graph_new(p, "score");
    dfg_tensor *logp = dfg_grpo_token_logp(g, ref, r->tokens, 1.0f, NULL); /* (N, T-1) */
    dfg_tensor *mean = dfg_mean(g, dfg_mean(g, logp, 1), 0);
    dfg_metric(g, "ref_logp", mean);
    dfg_output(g, dfg_slice(g, r->tokens, 1, 0, T), "generated");
    dfg_stage_graph(p, g, 1);
    dfg_stage_when(p, "score", r->done, -1.0, 1.0); /* a condition (always true here) */
}

dfg_status dfg_pipeline(dfg_program *p) {
    dfg_model_config d = dfg_gpt2_config_default(), c;
    d.n_layer = 1, d.n_head = 2, d.n_embd = 8, d.vocab_size = 12, d.block_size = 8;
    if (dfg_model_config_from_settings(p, d, &c)) return dfg_program_status(p);
    int64_t N = dfg_setting_int(p, "rollouts", 2), Tp = 3, T = 6;
    if (N < 1 || N > 64 || T > c.block_size) return dfg_program_fail(p, DFG_ERR_ARG, "bad rollouts or n_positions");

    dfg_model *m = calloc(2, sizeof(*m)); /* the model and its frozen copy: too big for the stack */
    if (!m) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    dfg_model_kv kv;
    rollout r = {
        .tokens = state(p, "rollout.tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT),
        .rng = state(p, "rollout.rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG),
        .pos = state(p, "rollout.pos", DFG_I32, DFG_SCALAR, DFG_ROLE_ROLLOUT),
        .tok = state(p, "rollout.tok", DFG_I32, DFG_SHAPE(N, 1), DFG_ROLE_ROLLOUT),
        .done = state(p, "rollout.done", DFG_F32, DFG_SHAPE(1), DFG_ROLE_ROLLOUT),
    };
    static const int32_t eos_ids[2] = {0, 1};
    dfg_const(p, "eos_ids", DFG_I32, DFG_SHAPE(2), eos_ids);
    if (!dfg_model_params(p, "", c, &m[0]) && !dfg_model_frozen(p, "ref.", c, &m[1]) &&
        !dfg_nn_init_copy(p, m[1].params, m[0].params, m[0].n_params) && !dfg_model_kv_cache(p, "", &m[0], N, T, &kv)) {
        for (int l = 0; l < c.n_layer; l++) {
            dfg_set_scope(p, kv.k[l], "prefill", "decode");
            dfg_set_scope(p, kv.v[l], "prefill", "decode");
        }
        dfg_set_scope(p, r.tok, "prefill", "decode");
        dfg_set_scope(p, r.pos, "prefill", "decode");
        prefill(p, &m[0], &kv, &r, N, Tp);
        decode(p, &m[0], &kv, &r, (int)(T - Tp));
        score(p, &m[1], &r, T);
    }
    free(m);
    return dfg_program_status(p);
}
