/* padded_stages.h - the left-padded forms that padded_logp (the golden driver) and
 * tests/test_padded_prompts.c both build, over tokens (N, T): rows of P = N / G prompts left-padded
 * to Lp columns (each group's G rows share their prompt), then Tc = T - Lp completion tokens;
 * start (N): each row's first real column. */
#ifndef PADDED_STAGES_H
#define PADDED_STAGES_H

#include "dfg.h"
#include "dfg_nn.h"

typedef struct {
    int64_t P, G, N, T, Lp, Tc, V;
} padded_dims;

/* In g: the completion columns' token_logp (N, Tc) as output a, completion_logp (N, Tc) of the
 * group's prompt and each row's completion as output b. */
static inline void padded_scores(dfg_graph *g, dfg_model *m, dfg_tensor *tok, dfg_tensor *start, padded_dims d,
                                 float temp, const char *a, const char *b) {
    dfg_output(g, dfg_slice(g, dfg_grpo_token_logp(g, m, tok, temp, start), 1, d.Lp - 1, d.Tc), a);
    dfg_tensor *prompts = dfg_reshape(g, dfg_slice(g, dfg_reshape(g, tok, DFG_SHAPE(d.P, d.G, d.T)), 1, 0, 1),
                                      DFG_SHAPE(d.P, d.T));
    dfg_tensor *pstart = dfg_reshape(g, dfg_slice(g, dfg_reshape(g, start, DFG_SHAPE(d.P, d.G)), 1, 0, 1), DFG_SHAPE(d.P));
    dfg_output(g,
               dfg_grpo_completion_logp(g, m, dfg_slice(g, prompts, 1, 0, d.Lp), dfg_slice(g, tok, 1, d.Lp, d.Tc), temp,
                                        pstart),
               b);
}

/* Stage "prefill": the padded prompts into the KV caches (kv->start set), each into its G rows; the
 * logits of completion token 0 to cached[:, 0]. Stage "decode", Tc - 1 steps: the logits at column
 * Lp + k - 1 (pos, from Lp) to cached[:, k] (j, from 1). cached (N, Tc, V), pos and j scalar i32. */
static inline void padded_prefill_decode(dfg_program *p, dfg_model *m, dfg_model_kv *kv, dfg_tensor *tok,
                                         dfg_tensor *cached, dfg_tensor *pos, dfg_tensor *j, padded_dims d) {
    dfg_graph *pre = dfg_graph_new(p, "prefill");
    dfg_tensor *pp = dfg_reshape(pre, dfg_slice(pre, dfg_reshape(pre, tok, DFG_SHAPE(d.P, d.G, d.T)), 1, 0, 1),
                                 DFG_SHAPE(d.P, d.T));
    dfg_tensor *h = dfg_model_prefill(pre, m, kv, dfg_slice(pre, pp, 1, 0, d.Lp)); /* (P, Lp, C) */
    dfg_tensor *last = dfg_model_lm_head(pre, m, dfg_slice(pre, h, 1, d.Lp - 1, 1)); /* (P, 1, V) */
    last = dfg_reshape(pre, dfg_expand(pre, dfg_reshape(pre, last, DFG_SHAPE(d.P, 1, 1, d.V)), DFG_SHAPE(d.P, d.G, 1, d.V)),
                       DFG_SHAPE(d.N, 1, d.V));
    dfg_slice_assign(pre, cached, last, 1, 0);
    dfg_assign_fill(pre, pos, (float)d.Lp);
    dfg_assign_fill(pre, j, 1.0f);
    dfg_stage_graph(p, pre, 1);
    if (d.Tc < 2) return;
    dfg_graph *dec = dfg_graph_new(p, "decode");
    dfg_tensor *logit = dfg_model_lm_head(dec, m, dfg_model_decode(dec, m, kv, dfg_slice_at(dec, tok, 1, pos, 1), pos));
    dfg_slice_assign_at(dec, cached, logit, 1, j); /* (N, 1, V) */
    dfg_assign(dec, pos, dfg_add_scalar(dec, pos, 1.0f));
    dfg_assign(dec, j, dfg_add_scalar(dec, j, 1.0f));
    dfg_stage_graph(p, dec, (int)(d.Tc - 1));
}

#endif
