/* nn_shared.c - a model (GPT-2, the Llama family) over groups of sequences that share their
 * prompt, from public DSL calls only. GRPO scores G completions of every prompt: computing the prompt's positions G times
 * repeats the same arithmetic (causal attention means a prompt position never sees what follows
 * it). Here the prompt positions are computed once per group and the completions attend to their
 * group's prompt keys and values (dfg_attention_prefix). Backward is the same graph
 * differentiated: the prompt's key and value gradients sum over its group, which is exactly the
 * gradient the G copies would have added up.
 *
 * Rows are packed: P*Tp prompt rows, then n*Tc completion rows, one (R, C) matrix, so every
 * per-token op (the norms, the linears, the MLP, the rotary positions) runs once over both; only
 * attention unpacks them.
 *
 * Left-padded prompts (start (P): prompt p's first real column): positions count from it in the
 * prompt and its completions (the completion column Tp + j is at position Tp + j - start[p]), the
 * prompt's attention masks its pads (dfg_attention_padded) and the completions see its keys from
 * start[p] on (dfg_attention_prefix_padded). */
#include "dfg_nn.h"

typedef struct {
    int64_t P, G, Tp, Tc; /* prompts, group size, prompt and completion lengths */
    dfg_tensor *start;    /* (P) i32: left-padded prompts' first real columns, or NULL */
} shared_ctx;

/* x (P*Tp + n*Tc, C) -> (P*Tp + n*Tc, C): the q/k/v projection; causal attention of the prompts
 * among themselves and of each completion over its prompt and its own earlier tokens; c_proj /
 * o_proj. */
static dfg_tensor *shared_prefix_attention(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                           const dfg_model_config *cfg, void *ctx) {
    const shared_ctx *c = ctx;
    int64_t n = c->P * c->G, C3 = 3 * (int64_t)cfg->n_head * cfg->head_dim;
    dfg_tensor *qkv = dfg_nn_qkv_packed(g, x, pos, blk, cfg, NULL); /* (R, 3*H*D) */
    dfg_tensor *qkv_p = dfg_reshape(g, dfg_slice(g, qkv, 0, 0, c->P * c->Tp), DFG_SHAPE(c->P, c->Tp, C3));
    dfg_tensor *qkv_c = dfg_reshape(g, dfg_slice(g, qkv, 0, c->P * c->Tp, n * c->Tc), DFG_SHAPE(n, c->Tc, C3));
    dfg_tensor *y_p = dfg_attention_padded(g, qkv_p, c->start, cfg->n_head);              /* (P, Tp, H*D) */
    dfg_tensor *y_c = dfg_attention_prefix_padded(g, qkv_c, qkv_p, c->start, cfg->n_head); /* (n, Tc, H*D) */
    dfg_tensor *y = dfg_concat(g,
                               (dfg_tensor *[]){dfg_reshape(g, y_p, DFG_SHAPE(c->P * c->Tp, C3 / 3)),
                                                dfg_reshape(g, y_c, DFG_SHAPE(n * c->Tc, C3 / 3))},
                               2, 0); /* (R, H*D) */
    return dfg_nn_attention_out(g, y, blk);
}

/* The packed rows' first block input (R, C) and, for the rotary models, their positions (R) */
static dfg_tensor *packed_input(dfg_graph *g, const dfg_model *m, const shared_ctx *c, dfg_tensor *prompts,
                                dfg_tensor *completions, dfg_tensor **pos) {
    int64_t n = c->P * c->G, C = m->cfg.n_embd, Tp = c->Tp, Tc = c->Tc;
    dfg_tensor *x_p, *x_c;
    *pos = NULL;
    if (c->start) { /* positions from each prompt's first real column; a group's rows share it */
        dfg_tensor *rows = dfg_reshape(g, dfg_expand(g, dfg_reshape(g, c->start, DFG_SHAPE(c->P, 1)), DFG_SHAPE(c->P, c->G)),
                                       DFG_SHAPE(n)); /* (n) */
        dfg_tensor *pos_p = dfg_nn_positions_from(g, c->start, 0, Tp), *pos_c = dfg_nn_positions_from(g, rows, Tp, Tc);
        x_p = dfg_model_embed(g, m, prompts, pos_p);     /* (P, Tp, C): GPT-2's wpe at those positions */
        x_c = dfg_model_embed(g, m, completions, pos_c); /* (n, Tc, C) */
        if (!m->wpe)
            *pos = dfg_concat(g,
                              (dfg_tensor *[]){dfg_reshape(g, pos_p, DFG_SHAPE(c->P * Tp)), dfg_reshape(g, pos_c, DFG_SHAPE(n * Tc))},
                              2, 0); /* (R) */
    } else if (m->wpe) { /* T > block_size fails in the slices of wpe, naming wpe's size */
        x_p = dfg_add(g, dfg_embed(g, m->wte, prompts), dfg_slice(g, m->wpe, 0, 0, Tp));      /* (P, Tp, C) */
        x_c = dfg_add(g, dfg_embed(g, m->wte, completions), dfg_slice(g, m->wpe, 0, Tp, Tc)); /* (n, Tc, C) */
    } else {
        x_p = dfg_embed(g, m->wte, prompts);
        x_c = dfg_embed(g, m->wte, completions);
        *pos = dfg_concat(g,
                          (dfg_tensor *[]){dfg_reshape(g, dfg_nn_positions(g, c->P, 0, Tp), DFG_SHAPE(c->P * Tp)),
                                           dfg_reshape(g, dfg_nn_positions(g, n, Tp, Tc), DFG_SHAPE(n * Tc))},
                          2, 0); /* (R) */
    }
    return dfg_concat(g,
                      (dfg_tensor *[]){dfg_reshape(g, x_p, DFG_SHAPE(c->P * Tp, C)), dfg_reshape(g, x_c, DFG_SHAPE(n * Tc, C))},
                      2, 0); /* (R, C) */
}

dfg_tensor *dfg_model_hidden_grouped(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts, dfg_tensor *completions,
                                     dfg_tensor *start) {
    dfg_shape ps = dfg_tensor_shape(prompts), cs = dfg_tensor_shape(completions);
    if (ps.rank != 2 || cs.rank != 2 || ps.d[0] < 1 || cs.d[0] % ps.d[0]) {
        char a[96], b[96];
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE,
                         "dfg_model_hidden_grouped: prompts %s and completions %s must be (P, Tp) and (P*G, Tc)",
                         dfg_shape_str(ps, a, sizeof(a)), dfg_shape_str(cs, b, sizeof(b)));
        return dfg_reshape(g, prompts, DFG_SHAPE(0)); /* fails too: the graph's error names the call */
    }
    shared_ctx c = {ps.d[0], cs.d[0] / ps.d[0], ps.d[1], cs.d[1], start};
    int64_t n = c.P * c.G, C = m->cfg.n_embd, Tp = c.Tp, Tc = c.Tc;
    dfg_tensor *pos, *x = packed_input(g, m, &c, prompts, completions, &pos); /* (R, C) */
    for (int l = 0; l < m->cfg.n_layer; l++)
        x = dfg_nn_block_with(g, x, pos, &m->h[l], &m->cfg, shared_prefix_attention, &c);
    x = dfg_model_final_norm(g, m, x);
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
