/* nn_decode.c - GPT-2 generation with a KV cache, from public DSL calls only: a prefill over the
 * prompt that fills the caches, and one-position decode steps that append to them. */
#include <stdio.h>

#include "dfg_nn.h"

dfg_status dfg_gpt2_kv_cache(dfg_program *p, const char *prefix, const dfg_gpt2 *m, int64_t N, int64_t Tmax,
                             dfg_gpt2_kv *out) {
    if (!p || !m || !out) return DFG_ERR_ARG;
    *out = (dfg_gpt2_kv){.n_layer = m->cfg.n_layer};
    char name[256];
    for (int l = 0; l < m->cfg.n_layer && !dfg_program_status(p); l++)
        for (int kv = 0; kv < 2; kv++) {
            snprintf(name, sizeof(name), "%skv.%d.%c", prefix ? prefix : "", l, kv ? 'v' : 'k');
            dfg_tensor *t = dfg_state(p, name, m->cfg.dtype, DFG_SHAPE(N, Tmax, m->cfg.n_embd), DFG_ROLE_KV_CACHE,
                                      dfg_init_zeros());
            if (kv) out->v[l] = t;
            else out->k[l] = t;
        }
    return dfg_program_status(p);
}

typedef struct {
    const dfg_gpt2_kv *kv;
    int layer, n_head;
    dfg_tensor *pos; /* decode: the position (i32 scalar); prefill: NULL */
} cache_ctx;

/* Prefill attention: causal attention over the prompts, their keys and values copied into the
 * caches' first rows; with P prompts for N = P*G cache rows, each prompt's into its G rows. */
static dfg_tensor *prefill_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, void *ctx) {
    cache_ctx *c = ctx;
    dfg_tensor *qkv = dfg_nn_linear(g, x, blk->c_attn_w, blk->c_attn_b); /* (P, Tp, 3C) */
    dfg_shape s = dfg_tensor_shape(x), cache = dfg_tensor_shape(c->kv->k[c->layer]);
    int64_t P = s.d[0], Tp = s.d[1], C = s.d[2], N = cache.d[0];
    for (int kv = 0; kv < 2; kv++) {
        dfg_tensor *part = dfg_slice(g, qkv, 2, (1 + kv) * C, C); /* k or v: (P, Tp, C) */
        if (N != P)                                                /* (P, 1, Tp, C) -> (P, G, Tp, C) */
            part = dfg_reshape(g, dfg_expand(g, dfg_reshape(g, part, DFG_SHAPE(P, 1, Tp, C)), DFG_SHAPE(P, N / P, Tp, C)),
                               DFG_SHAPE(N, Tp, C));
        dfg_slice_assign(g, kv ? c->kv->v[c->layer] : c->kv->k[c->layer], part, 1, 0); /* rows 0 .. Tp-1 */
    }
    c->layer++;
    return dfg_nn_linear(g, dfg_attention(g, qkv, c->n_head), blk->attn_proj_w, blk->attn_proj_b);
}

/* Decode attention: the new position's key and value go to row pos, its query attends to
 * rows 0 .. pos of the caches. */
static dfg_tensor *decode_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, void *ctx) {
    cache_ctx *c = ctx;
    dfg_tensor *qkv = dfg_nn_linear(g, x, blk->c_attn_w, blk->c_attn_b); /* (N, 1, 3C) */
    int64_t C = dfg_tensor_shape(x).d[2];
    dfg_tensor *kc = c->kv->k[c->layer], *vc = c->kv->v[c->layer];
    dfg_slice_assign_at(g, kc, dfg_slice(g, qkv, 2, C, C), 1, c->pos);
    dfg_slice_assign_at(g, vc, dfg_slice(g, qkv, 2, 2 * C, C), 1, c->pos);
    /* kc, vc now name the caches after the writes (the builder reads the newest value) */
    dfg_tensor *y = dfg_attention_cached(g, dfg_slice(g, qkv, 2, 0, C), kc, vc, c->pos, c->n_head); /* (N, 1, C) */
    c->layer++;
    return dfg_nn_linear(g, y, blk->attn_proj_w, blk->attn_proj_b);
}

static dfg_tensor *blocks(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *x, cache_ctx *c, dfg_nn_attention_fn attn) {
    for (int l = 0; l < m->cfg.n_layer; l++) x = dfg_nn_gpt2_block_with(g, x, &m->h[l], &m->cfg, attn, c);
    return dfg_nn_layernorm(g, x, m->ln_f_w, m->ln_f_b, m->cfg.ln_eps);
}

dfg_tensor *dfg_gpt2_prefill(dfg_graph *g, const dfg_gpt2 *m, const dfg_gpt2_kv *kv, dfg_tensor *tokens) {
    dfg_shape ts = dfg_tensor_shape(tokens);
    int64_t T = ts.rank == 2 ? ts.d[1] : 0;
    dfg_tensor *x = dfg_add(g, dfg_embed(g, m->wte, tokens), dfg_slice(g, m->wpe, 0, 0, T)); /* (N, Tp, C) */
    cache_ctx c = {kv, 0, m->cfg.n_head, NULL};
    return blocks(g, m, x, &c, prefill_attention);
}

dfg_tensor *dfg_gpt2_decode(dfg_graph *g, const dfg_gpt2 *m, const dfg_gpt2_kv *kv, dfg_tensor *tok, dfg_tensor *pos) {
    dfg_tensor *where = dfg_embed(g, m->wpe, dfg_reshape(g, pos, DFG_SHAPE(1, 1))); /* (1, 1, C) */
    dfg_tensor *x = dfg_add(g, dfg_embed(g, m->wte, tok), where);                   /* (N, 1, C) */
    cache_ctx c = {kv, 0, m->cfg.n_head, pos};
    return blocks(g, m, x, &c, decode_attention);
}
