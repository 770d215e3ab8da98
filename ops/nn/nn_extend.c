/* nn_extend.c - several known tokens a row put into a KV cache in one forward pass (GPT-2, the
 * Llama family), from public DSL calls only. A multi-turn rollout appends a tool's answer to a
 * row's context: decode would read it one token a run (a run of the whole batch for each token);
 * here every row's tokens go through the model at once, each attending to its row's cached keys
 * and causally to the new ones before it (dfg_attention_cached with Tq > 1, per-row columns).
 *
 * A row's tokens stand in a window of E columns, col[b] .. col[b]+E-1: the window may start
 * before the row's new tokens (a row near the caches' end has no E columns after them), and its
 * columns before from[b] keep the keys and values the caches hold (each is read back and written
 * again: where(kept, cache, new)); only columns from from[b] on take this pass's. A query at a
 * kept column attends to rows that are all kept, so what the caches held stays as it was, bit for
 * bit; a query at column c >= from[b] attends to rows that are kept or written by this pass, never
 * to one written before and not since. Its outputs past the row's real tokens are finite and
 * unread.
 *
 * The shared form (dfg_model_kv_cache_shared) holds each group's prompt once, columns 0 .. Tp-1,
 * and each row's own part from Tp on: the window then lies in the own part (its columns are
 * >= Tp, which the caller keeps: a row's tokens come after its prompt, and E <= the own part's
 * columns), is read and written there at col - Tp, and the queries attend with
 * dfg_attention_shared_cached, which reads the prompt part once for the group's rows; the
 * prompt part is only read. */
#include "dfg_nn.h"

typedef struct {
    const dfg_model_kv *kv;
    int layer;
    dfg_tensor *col;   /* (N) i32 each row's window's first column */
    dfg_tensor *at;    /* (N) i32 where the window starts in k and v: col, or col - Tp (the shared form) */
    dfg_tensor *kept;  /* (N, E, 1) f32 1 on the window's columns before the row's `from` */
    dfg_tensor *start; /* (N) i32 or NULL: left padding */
} extend_ctx;

/* The window's keys or values as the caches will hold them: the cache's on kept columns, new ones after */
static dfg_tensor *window_values(dfg_graph *g, dfg_tensor *cache, const extend_ctx *c, dfg_tensor *fresh) {
    dfg_tensor *now = dfg_slice_at(g, cache, 1, c->at, dfg_tensor_shape(fresh).d[1]); /* (N, E, W) */
    return dfg_where(g, c->kept, now, fresh);
}

static dfg_tensor *extend_attention(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                    const dfg_model_config *cfg, void *ctx) {
    extend_ctx *c = ctx;
    dfg_nn_qkv a = dfg_nn_qkv_project(g, x, pos, blk, cfg); /* q (N, E, H*D), k, v (N, E, Hkv*D) */
    dfg_tensor *kc = c->kv->k[c->layer], *vc = c->kv->v[c->layer], *kp = c->kv->k_prompt[c->layer];
    dfg_slice_assign_at(g, kc, window_values(g, kc, c, a.k), 1, c->at);
    dfg_slice_assign_at(g, vc, window_values(g, vc, c, a.v), 1, c->at);
    /* query i of row b at column col[b] + i reads cache rows start[b] .. col[b] + i, after the writes */
    dfg_tensor *y = kp ? dfg_attention_shared_cached(g, a.q, kp, c->kv->v_prompt[c->layer], kc, vc, c->col, c->start,
                                                     c->kv->prompt_of, cfg->n_head)
                       : dfg_attention_cached_padded(g, a.q, kc, vc, c->col, c->start, cfg->n_head); /* (N, E, H*D) */
    c->layer++;
    return dfg_nn_attention_out(g, y, blk);
}

static bool extend_args_ok(dfg_graph *g, const dfg_model_kv *kv, dfg_tensor *tokens, dfg_tensor *col, dfg_tensor *from) {
    if (dfg_graph_status(g)) return true; /* an earlier error: the graph's poison carries it */
    dfg_shape ts = dfg_tensor_shape(tokens);
    int64_t N = ts.rank == 2 ? ts.d[0] : -1;
    bool rows_ok = ts.rank == 2 && dfg_tensor_dtype(tokens) == DFG_I32;
    for (int i = 0; i < 2 && rows_ok; i++) {
        dfg_shape s = dfg_tensor_shape(i ? from : col);
        rows_ok = dfg_tensor_dtype(i ? from : col) == DFG_I32 && s.rank == 1 && s.d[0] == N;
    }
    if (!rows_ok) {
        char buf[96];
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE,
                         "dfg_model_extend: tokens '%s' %s must be (N, E) i32, col and from (N) i32 one a row",
                         dfg_tensor_name(tokens), dfg_shape_str(ts, buf, sizeof(buf)));
        return false;
    }
    int64_t own = kv->k_prompt[0] ? dfg_tensor_shape(kv->k[0]).d[1] : -1;
    if (kv->k_prompt[0] && ts.d[1] > own) { /* a window wider than the own part would reach into the prompt's */
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE,
                         "dfg_model_extend: a window of %lld columns does not fit the rows' own part of the shared "
                         "cache (%lld columns)", (long long)ts.d[1], (long long)own);
        return false;
    }
    return true;
}

dfg_tensor *dfg_model_extend(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tokens,
                             dfg_tensor *col, dfg_tensor *from) {
    if (!extend_args_ok(g, kv, tokens, col, from)) return NULL;
    dfg_shape ts = dfg_tensor_shape(tokens);
    int64_t N = ts.d[0], E = ts.d[1];
    /* the window's columns (N, E) in f32 (columns < 2^24): col[b] + i */
    dfg_tensor *first = dfg_reshape(g, dfg_cast(g, col, DFG_F32), DFG_SHAPE(N, 1));
    dfg_tensor *cols = dfg_add(g, first, dfg_cast(g, dfg_nn_positions(g, 1, 0, E), DFG_F32));
    /* kept: from[b] - column >= 1 (integers: clamped to 0 or 1) */
    dfg_tensor *ahead = dfg_sub(g, dfg_reshape(g, dfg_cast(g, from, DFG_F32), DFG_SHAPE(N, 1)), cols);
    dfg_tensor *kept = dfg_reshape(g, dfg_clamp(g, ahead, 0.0f, 1.0f), DFG_SHAPE(N, E, 1));
    /* positions: the column, or with left padding max(column - start[b], 0) */
    dfg_tensor *at = cols;
    if (kv->start)
        at = dfg_clamp(g, dfg_sub(g, cols, dfg_reshape(g, dfg_cast(g, kv->start, DFG_F32), DFG_SHAPE(N, 1))), 0.0f,
                       16777216.0f);
    dfg_tensor *pos = dfg_cast(g, at, DFG_I32); /* (N, E) */
    dfg_tensor *x = dfg_model_embed(g, m, tokens, pos); /* GPT-2's wpe read at those positions */
    if (m->wpe) pos = NULL;                              /* added already; the blocks do not rotate */
    dfg_tensor *own_col = col; /* the shared form: column c of a row is c - Tp of its own part */
    if (kv->k_prompt[0])
        own_col = dfg_cast(g, dfg_add_scalar(g, dfg_cast(g, col, DFG_F32), -(float)dfg_tensor_shape(kv->k_prompt[0]).d[1]),
                           DFG_I32);
    extend_ctx c = {kv, 0, col, own_col, kept, kv->start};
    for (int l = 0; l < m->cfg.n_layer; l++) x = dfg_nn_block_with(g, x, pos, &m->h[l], &m->cfg, extend_attention, &c);
    return dfg_model_final_norm(g, m, x); /* (N, E, C) */
}
