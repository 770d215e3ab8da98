/* nn_decode.c - generation with a KV cache (GPT-2, the Llama family), from public DSL calls only: a prefill over the
 * prompt that fills the caches, and one-position decode steps that append to them. Left-padded
 * prompts (kv->start, each cache row's first real column): positions count from it and attention
 * skips the pads (the prompts' own with dfg_attention_padded, the decode steps' with
 * dfg_attention_cached_padded); the pads' keys and values still go to the caches, unread. A
 * prefill given the columns from kv->col0 on (a prompt bucket) writes cache rows col0 .. on;
 * the rows before are never read (each row's real columns start at or after col0). A decode
 * step's column is one for every row, or one a row (pos (N)): rows of a multi-turn rollout that
 * waited for a tool, or had its tokens appended, stand at different columns.
 *
 * The shared form (dfg_model_kv_cache_shared) stores each group's prompt once: prefill writes
 * the prompt part (P rows, not P*G copies), a decode step writes its column c into the row's own
 * part at c - Tp and attends with dfg_attention_shared_cached, which reads the prompt part once
 * for the group's rows. Decode's columns are then >= Tp (GRPO: the prompt's last token on). */
#include <stdio.h>

#include "dfg_nn.h"

/* "<prefix>kv.<l>.<what>" of shape s, role KV_CACHE, zeros */
static dfg_tensor *cache_tensor(dfg_program *p, const char *prefix, int l, const char *what, dfg_dtype dt, dfg_shape s) {
    char name[256];
    snprintf(name, sizeof(name), "%skv.%d.%s", prefix ? prefix : "", l, what);
    return dfg_state(p, name, dt, s, DFG_ROLE_KV_CACHE, dfg_init_zeros());
}

dfg_status dfg_model_kv_cache(dfg_program *p, const char *prefix, const dfg_model *m, int64_t N, int64_t Tmax,
                              dfg_model_kv *out) {
    if (!p || !m || !out) return DFG_ERR_ARG;
    *out = (dfg_model_kv){.n_layer = m->cfg.n_layer};
    int64_t width = (int64_t)m->cfg.n_kv_head * m->cfg.head_dim; /* grouped-query models keep Hkv heads */
    for (int l = 0; l < m->cfg.n_layer && !dfg_program_status(p); l++) {
        out->k[l] = cache_tensor(p, prefix, l, "k", m->cfg.dtype, DFG_SHAPE(N, Tmax, width));
        out->v[l] = cache_tensor(p, prefix, l, "v", m->cfg.dtype, DFG_SHAPE(N, Tmax, width));
    }
    return dfg_program_status(p);
}

dfg_status dfg_model_kv_cache_shared(dfg_program *p, const char *prefix, const dfg_model *m, int64_t N, int64_t G,
                                     int64_t Tp, int64_t Tc, dfg_model_kv *out) {
    if (!p || !m || !out) return DFG_ERR_ARG;
    if (G < 1 || N % G || Tp < 1 || Tc < 1)
        return dfg_program_fail(p, DFG_ERR_ARG, "dfg_model_kv_cache_shared: %lld rows in groups of %lld, %lld prompt and "
                                "%lld own columns (groups must divide the rows, both parts >= 1)", (long long)N,
                                (long long)G, (long long)Tp, (long long)Tc);
    *out = (dfg_model_kv){.n_layer = m->cfg.n_layer};
    int64_t width = (int64_t)m->cfg.n_kv_head * m->cfg.head_dim;
    dfg_dtype dt = m->cfg.dtype;
    for (int l = 0; l < m->cfg.n_layer && !dfg_program_status(p); l++) {
        out->k_prompt[l] = cache_tensor(p, prefix, l, "k_prompt", dt, DFG_SHAPE(N / G, Tp, width));
        out->v_prompt[l] = cache_tensor(p, prefix, l, "v_prompt", dt, DFG_SHAPE(N / G, Tp, width));
        out->k[l] = cache_tensor(p, prefix, l, "k", dt, DFG_SHAPE(N, Tc, width));
        out->v[l] = cache_tensor(p, prefix, l, "v", dt, DFG_SHAPE(N, Tc, width));
    }
    return dfg_program_status(p);
}

typedef struct {
    const dfg_model_kv *kv;
    int layer;
    dfg_tensor *own_col; /* decode with the shared form: the column in the rows' own part (pos - Tp) */
    dfg_tensor *pos;   /* decode: the column (i32 scalar, or (N) one a row); prefill: NULL */
    dfg_tensor *start; /* the attention's rows' start among its columns: prefill (P), decode (N); NULL: no padding */
} cache_ctx;

/* Prefill attention: causal attention over the prompts, their keys and values copied into the
 * caches' first rows; with P prompts for N = P*G cache rows, each prompt's into its G rows. */
static dfg_tensor *prefill_attention(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                     const dfg_model_config *cfg, void *ctx) {
    cache_ctx *c = ctx;
    dfg_nn_qkv a;
    dfg_tensor *qkv = dfg_nn_qkv_packed(g, x, pos, blk, cfg, &a); /* (P, Tp, 3*H*D); a.k, a.v (P, Tp, Hkv*D) */
    dfg_tensor *kc = c->kv->k_prompt[c->layer] ? c->kv->k_prompt[c->layer] : c->kv->k[c->layer];
    dfg_tensor *vc = c->kv->k_prompt[c->layer] ? c->kv->v_prompt[c->layer] : c->kv->v[c->layer];
    dfg_shape s = dfg_tensor_shape(a.k), cache = dfg_tensor_shape(kc);
    int64_t P = s.d[0], Tp = s.d[1], W = s.d[2], N = cache.d[0];
    for (int kv = 0; kv < 2; kv++) {
        dfg_tensor *part = kv ? a.v : a.k;
        if (N != P && !c->kv->k_prompt[c->layer]) /* the copied form: (P, 1, Tp, W) -> (P, G, Tp, W) */
            part = dfg_reshape(g, dfg_expand(g, dfg_reshape(g, part, DFG_SHAPE(P, 1, Tp, W)), DFG_SHAPE(P, N / P, Tp, W)),
                               DFG_SHAPE(N, Tp, W));
        dfg_slice_assign(g, kv ? vc : kc, part, 1, c->kv->col0); /* rows col0 .. */
    }
    c->layer++;
    return dfg_nn_attention_out(g, dfg_attention_padded(g, qkv, c->start, cfg->n_head), blk);
}

/* Decode attention: the new position's key and value go to row pos (row b's: pos[b]), its query
 * attends to rows 0 .. pos of the caches (grouped-query heads read their shared key/value head). */
static dfg_tensor *decode_attention(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                    const dfg_model_config *cfg, void *ctx) {
    cache_ctx *c = ctx;
    dfg_nn_qkv a = dfg_nn_qkv_project(g, x, pos, blk, cfg); /* q (N, 1, H*D), k, v (N, 1, Hkv*D) */
    dfg_tensor *kc = c->kv->k[c->layer], *vc = c->kv->v[c->layer], *kp = c->kv->k_prompt[c->layer];
    dfg_tensor *at = kp ? c->own_col : c->pos;
    dfg_slice_assign_at(g, kc, a.k, 1, at);
    dfg_slice_assign_at(g, vc, a.v, 1, at);
    /* kc, vc now name the caches after the writes (the builder reads the newest value) */
    dfg_tensor *y = kp ? dfg_attention_shared_cached(g, a.q, kp, c->kv->v_prompt[c->layer], kc, vc, c->pos, c->start,
                                                     c->kv->prompt_of, cfg->n_head)
                       : dfg_attention_cached_padded(g, a.q, kc, vc, c->pos, c->start, cfg->n_head); /* (N, 1, H*D) */
    c->layer++;
    return dfg_nn_attention_out(g, y, blk);
}

static dfg_tensor *blocks(dfg_graph *g, const dfg_model *m, dfg_tensor *x, dfg_tensor *pos, cache_ctx *c,
                          dfg_nn_attention_fn attn) {
    for (int l = 0; l < m->cfg.n_layer; l++) x = dfg_nn_block_with(g, x, pos, &m->h[l], &m->cfg, attn, c);
    return dfg_model_final_norm(g, m, x);
}

/* The prompts' start (P) of the caches' start (N): with groups of G rows per prompt, every G-th */
static dfg_tensor *prompt_start(dfg_graph *g, const dfg_model_kv *kv, int64_t P) {
    int64_t N = dfg_tensor_numel(kv->start);
    if (N == P || P < 1 || N % P) return kv->start; /* N % P: the caches' shape rule names the mismatch */
    return dfg_reshape(g, dfg_slice(g, dfg_reshape(g, kv->start, DFG_SHAPE(P, N / P)), 1, 0, 1), DFG_SHAPE(P));
}

dfg_tensor *dfg_model_prefill(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tokens) {
    dfg_shape ts = dfg_tensor_shape(tokens);
    int64_t B = ts.rank == 2 ? ts.d[0] : 0, T = ts.rank == 2 ? ts.d[1] : 0;
    dfg_tensor *x, *pos = NULL, *start = kv->start ? prompt_start(g, kv, B) : NULL;
    if (kv->col0 && !start) { /* leaving columns out is for the pads of left-padded rows alone */
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "dfg_model_prefill: col0 %lld needs the rows' start",
                         (long long)kv->col0);
        return NULL;
    }
    if (start) /* positions from each prompt's first real column (GPT-2: wpe read at them) */
        x = dfg_model_embed(g, m, tokens, pos = dfg_nn_positions_from(g, start, kv->col0, T));
    else if (m->wpe) x = dfg_add(g, dfg_embed(g, m->wte, tokens), dfg_slice(g, m->wpe, 0, 0, T)); /* (P, Tp, C) */
    else x = dfg_model_embed(g, m, tokens, pos = dfg_nn_positions(g, B, 0, T));
    if (m->wpe) pos = NULL; /* added already */
    if (start) start = dfg_nn_start_from(g, start, kv->col0); /* the attention's start among the columns given */
    if (kv->k_prompt[0] && dfg_tensor_shape(kv->k_prompt[0]).d[0] != B) {
        dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE, "dfg_model_prefill: %lld prompts for a cache that holds "
                         "%lld (one a group)", (long long)B, (long long)dfg_tensor_shape(kv->k_prompt[0]).d[0]);
        return NULL;
    }
    cache_ctx c = {kv, 0, NULL, NULL, start};
    return blocks(g, m, x, pos, &c, prefill_attention);
}

/* pos of a decode step: one i32 for every row, or (N) one a row */
static bool decode_positions_ok(dfg_graph *g, dfg_tensor *pos, int64_t N) {
    dfg_shape s = dfg_tensor_shape(pos);
    if (dfg_graph_status(g)) return true; /* an earlier error: the graph's poison carries it */
    if (pos && dfg_tensor_dtype(pos) == DFG_I32 && (dfg_shape_numel(s) == 1 || (s.rank == 1 && s.d[0] == N)))
        return true;
    char buf[96];
    dfg_program_fail(dfg_graph_program(g), DFG_ERR_SHAPE,
                     "dfg_model_decode: pos '%s' must be an i32 scalar or of shape (%lld), one column a row; got %s",
                     pos ? dfg_tensor_name(pos) : "NULL", (long long)N, dfg_shape_str(s, buf, sizeof(buf)));
    return false;
}

dfg_tensor *dfg_model_decode(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tok, dfg_tensor *pos) {
    int64_t N = dfg_tensor_shape(tok).d[0];
    if (!decode_positions_ok(g, pos, N)) return NULL;
    int64_t P = dfg_tensor_numel(pos); /* 1: one column for every row; N: one a row */
    dfg_tensor *x, *where = NULL;
    if (kv->start) { /* each row at max(pos - start, 0) */
        where = dfg_nn_positions_at(g, kv->start, pos); /* (N, 1) */
        x = dfg_model_embed(g, m, tok, where);
        if (m->wpe) where = NULL;
    } else if (m->wpe)
        x = dfg_add(g, dfg_embed(g, m->wte, tok), dfg_embed(g, m->wpe, dfg_reshape(g, pos, DFG_SHAPE(P, 1))));
    else x = dfg_embed(g, m->wte, tok), where = dfg_expand(g, dfg_reshape(g, pos, DFG_SHAPE(P, 1)), DFG_SHAPE(N, 1));
    dfg_tensor *own_col = NULL; /* the shared form: column pos of a row is pos - Tp of its own part */
    if (kv->k_prompt[0]) {
        float Tp = (float)dfg_tensor_shape(kv->k_prompt[0]).d[1];
        own_col = dfg_cast(g, dfg_add_scalar(g, dfg_cast(g, pos, DFG_F32), -Tp), DFG_I32);
    }
    cache_ctx c = {kv, 0, own_col, pos, kv->start};
    return blocks(g, m, x, where, &c, decode_attention); /* (N, 1, C) */
}
