/* accum.c - a seed pipeline for the plan-file fuzzer (tests/fuzz/make_plan_corpus.sh): a tiny
 * attention model trained on micro-batches with gradient accumulation.
 *
 * Uses: embedding, layernorm, causal attention and their backward, a repeated stage that slices
 * its micro-batch at a run-time row (dfg_slice_at of a counter STATE), dfg_backward_accumulate
 * into persistent gradient buffers, an update stage (clipping, AdamW with f32 masters when the
 * target is cuda and the weights bf16, buffer resets) that runs from step 1 on, a scoped INPUT,
 * and a run count (dfg_stage_runs: the micro-batches to run, which the update stage sets).
 * Stages: micro x M, update. */
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"

#define NP 5

dfg_status dfg_pipeline(dfg_program *p) {
    int64_t B = 4, T = 4, C = 8, V = 10, M = dfg_setting_int(p, "micro_batches", 2), n = B / (M > 0 ? M : 1);
    bool cuda = !strcmp(dfg_setting_str(p, "target", "cpu"), "cuda");
    if (M < 1 || B % M) return dfg_program_fail(p, DFG_ERR_ARG, "micro_batches must divide %lld", (long long)B);
    dfg_dtype dt = cuda ? DFG_BF16 : DFG_F32;

    dfg_tensor *params[NP] = {
        dfg_param(p, "wte", dt, DFG_SHAPE(V, C), dfg_init_normal(0.0f, 0.02f)),       /* (V, C) */
        dfg_param(p, "ln.w", dt, DFG_SHAPE(C), dfg_init_ones()),                      /* (C) */
        dfg_param(p, "ln.b", dt, DFG_SHAPE(C), dfg_init_zeros()),                     /* (C) */
        dfg_param(p, "qkv.w", dt, DFG_SHAPE(C, 3 * C), dfg_init_normal(0.0f, 0.02f)), /* (C, 3C) */
        dfg_param(p, "head.w", dt, DFG_SHAPE(C, V), dfg_init_uniform(-0.1f, 0.1f)),  /* (C, V) */
    };
    dfg_tensor *grads[NP];
    dfg_nn_grad_buffers(p, params, NP, "", grads);
    dfg_tensor *micro = dfg_state(p, "micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *acc = dfg_state(p, "acc_loss", DFG_F32, DFG_SCALAR, DFG_ROLE_METRIC, dfg_init_zeros());
    dfg_tensor *runs = dfg_state(p, "micro_runs", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());

    dfg_graph *g = dfg_graph_new(p, "micro");
    dfg_tensor *tokens = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(B, T + 1)); /* (B, T+1) */
    dfg_set_scope(p, tokens, "micro", "micro");
    dfg_tensor *rows = dfg_slice_at(g, tokens, 0, dfg_scale(g, micro, (float)n), n); /* (n, T+1) */
    dfg_tensor *in = dfg_slice(g, rows, 1, 0, T), *tgt = dfg_slice(g, rows, 1, 1, T); /* (n, T) */
    dfg_tensor *x = dfg_layernorm(g, dfg_embed(g, params[0], in), params[1], params[2], 1e-5f); /* (n, T, C) */
    dfg_tensor *a = dfg_attention(g, dfg_matmul(g, x, params[3], false, false), 2);           /* (n, T, C) */
    dfg_tensor *logits = dfg_matmul(g, dfg_add(g, x, a), params[4], false, false);           /* (n, T, V) */
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, dfg_cast(g, logits, DFG_F32)), tgt);   /* (n, T) */
    dfg_tensor *loss = dfg_scale(g, dfg_mean(g, dfg_mean(g, logp, 1), 0), -1.0f / (float)M);
    dfg_backward_accumulate(g, loss, params, NP, grads);
    dfg_accumulate(g, acc, loss);
    dfg_assign(g, micro, dfg_add_scalar(g, micro, 1.0f));
    dfg_stage_graph(p, g, (int)M);
    dfg_stage_runs(p, "micro", runs);

    dfg_graph *u = dfg_graph_new(p, "update");
    dfg_tensor *norm = dfg_clip_grad_norm(u, grads, NP, 0.5f);
    dfg_adamw_config cfg = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
    dfg_nn_adamw_step(p, u, params, grads, NP, cfg, "");
    dfg_metric(u, "loss", acc);
    dfg_metric(u, "grad_norm", norm);
    for (int i = 0; i < NP; i++) dfg_assign_fill(u, grads[i], 0.0f);
    dfg_assign_fill(u, micro, 0.0f);
    dfg_assign_fill(u, acc, 0.0f);
    dfg_assign_fill(u, runs, (float)M);
    dfg_stage_graph(p, u, 1);
    dfg_stage_steps(p, "update", 1, -1);
    return dfg_program_status(p);
}
