/* nn_shared.c - GPT-2 over groups of sequences that share their prompt, from public DSL calls
 * only. GRPO scores G completions of every prompt: computing the prompt's positions G times
 * repeats the same arithmetic (causal attention means a prompt position never sees what follows
 * it). Here the prompt positions are computed once per group and the completions attend to their
 * group's prompt keys and values (dfg_attention_prefix). Backward is the same graph
 * differentiated: the prompt's key and value gradients sum over its group, which is exactly the
 * gradient the G copies would have added up.
 *
 * Rows are packed: P*Tp prompt rows, then n*Tc completion rows, one (R, C) matrix, so every
 * per-token op (layernorm, the linears, GELU) runs once over both; only attention unpacks them. */
#include "dfg_nn.h"

typedef struct {
    int64_t P, G, Tp, Tc; /* prompts, group size, prompt and completion lengths */
    int n_head;
} shared_ctx;

/* x (P*Tp + n*Tc, C) -> (P*Tp + n*Tc, C): c_attn; causal attention of the prompts among
 * themselves and of each completion over its prompt and its own earlier tokens; c_proj. */
static dfg_tensor *shared_prefix_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, void *ctx) {
    const shared_ctx *c = ctx;
    int64_t n = c->P * c->G, C = dfg_tensor_shape(x).d[1];
    dfg_tensor *qkv = dfg_nn_linear(g, x, blk->c_attn_w, blk->c_attn_b); /* (R, 3C) */
    dfg_tensor *qkv_p = dfg_reshape(g, dfg_slice(g, qkv, 0, 0, c->P * c->Tp), DFG_SHAPE(c->P, c->Tp, 3 * C));
    dfg_tensor *qkv_c = dfg_reshape(g, dfg_slice(g, qkv, 0, c->P * c->Tp, n * c->Tc), DFG_SHAPE(n, c->Tc, 3 * C));
    dfg_tensor *y_p = dfg_attention(g, qkv_p, c->n_head);              /* (P, Tp, C) */
    dfg_tensor *y_c = dfg_attention_prefix(g, qkv_c, qkv_p, c->n_head); /* (n, Tc, C) */
    dfg_tensor *y = dfg_concat(g,
                               (dfg_tensor *[]){dfg_reshape(g, y_p, DFG_SHAPE(c->P * c->Tp, C)),
                                                dfg_reshape(g, y_c, DFG_SHAPE(n * c->Tc, C))},
                               2, 0); /* (R, C) */
    return dfg_nn_linear(g, y, blk->attn_proj_w, blk->attn_proj_b);
}

dfg_tensor *dfg_gpt2_hidden_grouped(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *prompts, dfg_tensor *completions) {
    dfg_shape ps = dfg_tensor_shape(prompts), cs = dfg_tensor_shape(completions);
    if (ps.rank != 2 || cs.rank != 2 || ps.d[0] < 1 || cs.d[0] % ps.d[0]) {
        char a[96], b[96];
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE,
                         "dfg_gpt2_hidden_grouped: prompts %s and completions %s must be (P, Tp) and (P*G, Tc)",
                         dfg_shape_str(ps, a, sizeof(a)), dfg_shape_str(cs, b, sizeof(b)));
        return dfg_reshape(g, prompts, DFG_SHAPE(0)); /* fails too: the graph's error names the call */
    }
    shared_ctx c = {ps.d[0], cs.d[0] / ps.d[0], ps.d[1], cs.d[1], m->cfg.n_head};
    int64_t n = c.P * c.G, C = m->cfg.n_embd, Tp = c.Tp, Tc = c.Tc;
    /* T > block_size fails in the slices of wpe, naming wpe's size */
    dfg_tensor *x_p = dfg_add(g, dfg_embed(g, m->wte, prompts), dfg_slice(g, m->wpe, 0, 0, Tp));      /* (P, Tp, C) */
    dfg_tensor *x_c = dfg_add(g, dfg_embed(g, m->wte, completions), dfg_slice(g, m->wpe, 0, Tp, Tc)); /* (n, Tc, C) */
    dfg_tensor *x = dfg_concat(g,
                               (dfg_tensor *[]){dfg_reshape(g, x_p, DFG_SHAPE(c.P * Tp, C)),
                                                dfg_reshape(g, x_c, DFG_SHAPE(n * Tc, C))},
                               2, 0); /* (R, C) */
    for (int l = 0; l < m->cfg.n_layer; l++)
        x = dfg_nn_gpt2_block_with(g, x, &m->h[l], &m->cfg, shared_prefix_attention, &c);
    x = dfg_nn_layernorm(g, x, m->ln_f_w, m->ln_f_b, m->cfg.ln_eps);
    /* the state that predicts completion token j: the last prompt position for j = 0 (one per
     * prompt, the same for its G rows), then completion position j - 1 */
    dfg_tensor *last = dfg_reshape(g, dfg_slice(g, x, 0, 0, c.P * Tp), DFG_SHAPE(c.P, Tp, C));
    last = dfg_slice(g, last, 1, Tp - 1, 1);                                               /* (P, 1, C) */
    last = dfg_reshape(g, dfg_expand(g, dfg_reshape(g, last, DFG_SHAPE(c.P, 1, 1, C)), DFG_SHAPE(c.P, c.G, 1, C)),
                       DFG_SHAPE(n, 1, C));                                                /* (n, 1, C) */
    if (Tc == 1) return last;
    dfg_tensor *h_c = dfg_reshape(g, dfg_slice(g, x, 0, c.P * Tp, n * Tc), DFG_SHAPE(n, Tc, C));
    return dfg_concat(g, (dfg_tensor *[]){last, dfg_slice(g, h_c, 1, 0, Tc - 1)}, 2, 1); /* (n, Tc, C) */
}
