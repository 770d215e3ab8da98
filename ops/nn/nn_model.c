/* nn_model.c - GPT-2 and the Llama family (Llama, Qwen2, Qwen3) from public DSL calls only: their
 * parameters under Hugging Face's names, and the pieces every forward form shares (embedding,
 * q/k/v projection with rotary positions and grouped-query heads, the pre-norm block, the head).
 * The forms themselves: dfg_model_hidden here, the KV-cache forms in nn_decode.c, the
 * shared-prompt form in nn_shared.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

/* ---------------------------------------------------------------- parameters */
typedef struct {
    dfg_program *p;
    dfg_model *m;
    const char *prefix;
    dfg_dtype dt;
    bool frozen; /* STATEs of role REF_MODEL instead of PARAMs */
    bool base;   /* LoRA: STATEs of role BASE_MODEL, the adapters being the params */
    const dfg_arch_info *arch; /* the names (ops/nn/arch.def) */
} param_ctx;

static dfg_tensor *param(param_ctx *c, const char *name, dfg_shape s, dfg_init init) {
    char full[256];
    snprintf(full, sizeof(full), "%s%s", c->prefix, name);
    if (c->base) return dfg_state(c->p, full, c->dt, s, DFG_ROLE_BASE_MODEL, init);
    dfg_tensor *t = c->frozen ? dfg_state(c->p, full, c->dt, s, DFG_ROLE_REF_MODEL, init)
                              : dfg_param(c->p, full, c->dt, s, init);
    if (t && c->m->n_params < (int)(sizeof(c->m->params) / sizeof(c->m->params[0]))) c->m->params[c->m->n_params++] = t;
    return t;
}

/* "<where>.<layer>.<name>": h.N. for GPT-2, model.layers.N. for the Llama family */
static dfg_tensor *block_param(param_ctx *c, const char *where, int layer, const char *name, dfg_shape s,
                               dfg_init init) {
    char nm[224];
    snprintf(nm, sizeof(nm), "%s.%d.%s", where, layer, name);
    return param(c, nm, s, init);
}

/* load_in_4bit: the weight "<where>.<layer>.<name>" (d0, d1) as NF4 STATEs of role base_model
 * (dfg_nf4_weight): "<...>.nf4" (d0, d1/2) u8 (flat (ceil(n/2)) for an odd d1), "<...>.absmax" or,
 * double-quantised, "<...>.absmax_q", "<...>.absmax2", "<...>.absmax_offset". Zeros until a
 * checkpoint fills them (the loader quantises a Hugging Face weight of that name). */
static void nf4_param(param_ctx *c, const char *where, int layer, const char *name, dfg_linear_slot slot, dfg_shape s) {
    char nm[200];
    int64_t n = dfg_shape_numel(s), nb = dfg_nf4_blocks(n);
    dfg_nf4_weight *q = &c->m->h[layer].nf4[slot];
    q->shape = s;
    snprintf(nm, sizeof(nm), "%s.%d.%s.nf4", where, layer, name);
    dfg_shape ps = s.d[1] % 2 ? DFG_SHAPE(dfg_nf4_packed_bytes(n)) : DFG_SHAPE(s.d[0], s.d[1] / 2);
    q->packed = dfg_state(c->p, nm, DFG_U8, ps, DFG_ROLE_BASE_MODEL, dfg_init_zeros());
    if (!c->m->cfg.lora.double_quant) {
        snprintf(nm, sizeof(nm), "%s.%d.%s.absmax", where, layer, name);
        q->absmax = dfg_state(c->p, nm, DFG_F32, DFG_SHAPE(nb), DFG_ROLE_BASE_MODEL, dfg_init_zeros());
        return;
    }
    snprintf(nm, sizeof(nm), "%s.%d.%s.absmax_q", where, layer, name);
    q->absmax_q = dfg_state(c->p, nm, DFG_U8, DFG_SHAPE(nb), DFG_ROLE_BASE_MODEL, dfg_init_zeros());
    snprintf(nm, sizeof(nm), "%s.%d.%s.absmax2", where, layer, name);
    q->absmax2 = dfg_state(c->p, nm, DFG_F32, DFG_SHAPE(dfg_nf4_dq_blocks(n)), DFG_ROLE_BASE_MODEL, dfg_init_zeros());
    snprintf(nm, sizeof(nm), "%s.%d.%s.absmax_offset", where, layer, name);
    q->offset = dfg_state(c->p, nm, DFG_F32, DFG_SCALAR, DFG_ROLE_BASE_MODEL, dfg_init_zeros());
}

/* "<module>.<what>" of the architecture's table (ops/nn/arch.def, nn_arch.c) */
static dfg_tensor *named(param_ctx *c, const char *module, const char *what, dfg_shape s, dfg_init init) {
    char nm[160];
    snprintf(nm, sizeof(nm), "%s.%s", module, what);
    return param(c, nm, s, init);
}

/* A block's module "<blocks>.<layer>.<module>.<what>" */
static dfg_tensor *block_named(param_ctx *c, int layer, const char *module, const char *what, dfg_shape s, dfg_init init) {
    char nm[128];
    snprintf(nm, sizeof(nm), "%s.%s", module, what);
    return block_param(c, c->arch->blocks, layer, nm, s, init);
}

/* A block's linear weight (NULL when stored as NF4: blk->nf4[slot]), and its adapter when LoRA
 * targets it: GPT-2's Conv1D weights are (in, out), nn.Linear's (out, in) */
static dfg_tensor *linear_param(param_ctx *c, int layer, dfg_linear_slot slot, dfg_shape s, dfg_init init) {
    char name[128];
    snprintf(name, sizeof(name), "%s.weight", c->arch->linears[slot]);
    dfg_tensor *w = NULL;
    if (c->base && c->m->cfg.lora.load_in_4bit) nf4_param(c, c->arch->blocks, layer, name, slot, s);
    else w = block_param(c, c->arch->blocks, layer, name, s, init);
    bool conv1d = c->arch->conv1d;
    if (c->base) dfg_lora_add(c->p, c->m, layer, slot, conv1d ? s.d[0] : s.d[1], conv1d ? s.d[1] : s.d[0]);
    return w;
}

/* A block's linear's bias "<blocks>.<layer>.<linear>.bias" */
static dfg_tensor *linear_bias(param_ctx *c, int layer, dfg_linear_slot slot, dfg_shape s) {
    return block_named(c, layer, c->arch->linears[slot], "bias", s, dfg_init_zeros());
}

static void gpt2_params(param_ctx *c, const dfg_model_config *cfg) {
    const dfg_arch_info *a = c->arch;
    dfg_model *m = c->m;
    int64_t C = cfg->n_embd, V = cfg->vocab_size, I = cfg->n_inner;
    dfg_init w = dfg_init_normal(0.0f, 0.02f), zero = dfg_init_zeros(), one = dfg_init_ones();
    dfg_init proj = dfg_init_normal(0.0f, 0.02f / sqrtf(2.0f * (float)cfg->n_layer)); /* GPT-2's residual scaling */
    m->wte = named(c, a->embed, "weight", DFG_SHAPE(V, C), w);
    m->wpe = named(c, a->pos_embed, "weight", DFG_SHAPE(cfg->block_size, C), dfg_init_normal(0.0f, 0.01f));
    for (int l = 0; l < cfg->n_layer; l++) {
        dfg_model_block *b = &m->h[l];
        b->ln_1_w = block_named(c, l, a->norm_1, "weight", DFG_SHAPE(C), one);
        b->ln_1_b = block_named(c, l, a->norm_1, "bias", DFG_SHAPE(C), zero);
        b->c_attn_w = linear_param(c, l, DFG_LIN_C_ATTN, DFG_SHAPE(C, 3 * C), w);
        b->c_attn_b = linear_bias(c, l, DFG_LIN_C_ATTN, DFG_SHAPE(3 * C));
        b->attn_proj_w = linear_param(c, l, DFG_LIN_O, DFG_SHAPE(C, C), proj);
        b->attn_proj_b = linear_bias(c, l, DFG_LIN_O, DFG_SHAPE(C));
        b->ln_2_w = block_named(c, l, a->norm_2, "weight", DFG_SHAPE(C), one);
        b->ln_2_b = block_named(c, l, a->norm_2, "bias", DFG_SHAPE(C), zero);
        b->c_fc_w = linear_param(c, l, DFG_LIN_C_FC, DFG_SHAPE(C, I), w);
        b->c_fc_b = linear_bias(c, l, DFG_LIN_C_FC, DFG_SHAPE(I));
        b->mlp_proj_w = linear_param(c, l, DFG_LIN_MLP_PROJ, DFG_SHAPE(I, C), proj);
        b->mlp_proj_b = linear_bias(c, l, DFG_LIN_MLP_PROJ, DFG_SHAPE(C));
    }
    m->ln_f_w = named(c, a->final_norm, "weight", DFG_SHAPE(C), one);
    m->ln_f_b = named(c, a->final_norm, "bias", DFG_SHAPE(C), zero);
}

/* LlamaPreTrainedModel._init_weights: linear and embedding weights N(0, initializer_range 0.02),
 * biases 0, RMSNorm weights 1 */
static void llama_params(param_ctx *c, const dfg_model_config *cfg) {
    const dfg_arch_info *a = c->arch;
    dfg_model *m = c->m;
    int64_t C = cfg->n_embd, V = cfg->vocab_size, I = cfg->n_inner, D = cfg->head_dim;
    int64_t Q = cfg->n_head * D, KV = cfg->n_kv_head * D;
    dfg_init w = dfg_init_normal(0.0f, 0.02f), one = dfg_init_ones();
    /* Llama's attention_bias covers o_proj too; Qwen2's biases are q/k/v's */
    bool o_bias = cfg->attention_bias && a->bias == DFG_ARCH_BIAS_CONFIG;
    m->wte = named(c, a->embed, "weight", DFG_SHAPE(V, C), w);
    for (int l = 0; l < cfg->n_layer; l++) {
        dfg_model_block *b = &m->h[l];
        b->ln_1_w = block_named(c, l, a->norm_1, "weight", DFG_SHAPE(C), one);
        b->q_w = linear_param(c, l, DFG_LIN_Q, DFG_SHAPE(Q, C), w);
        if (cfg->attention_bias) b->q_b = linear_bias(c, l, DFG_LIN_Q, DFG_SHAPE(Q));
        b->k_w = linear_param(c, l, DFG_LIN_K, DFG_SHAPE(KV, C), w);
        if (cfg->attention_bias) b->k_b = linear_bias(c, l, DFG_LIN_K, DFG_SHAPE(KV));
        b->v_w = linear_param(c, l, DFG_LIN_V, DFG_SHAPE(KV, C), w);
        if (cfg->attention_bias) b->v_b = linear_bias(c, l, DFG_LIN_V, DFG_SHAPE(KV));
        b->attn_proj_w = linear_param(c, l, DFG_LIN_O, DFG_SHAPE(C, Q), w);
        if (o_bias) b->attn_proj_b = linear_bias(c, l, DFG_LIN_O, DFG_SHAPE(C));
        if (cfg->qk_norm) {
            b->q_norm_w = block_named(c, l, a->q_norm, "weight", DFG_SHAPE(D), one);
            b->k_norm_w = block_named(c, l, a->k_norm, "weight", DFG_SHAPE(D), one);
        }
        b->ln_2_w = block_named(c, l, a->norm_2, "weight", DFG_SHAPE(C), one);
        b->gate_w = linear_param(c, l, DFG_LIN_GATE, DFG_SHAPE(I, C), w);
        b->up_w = linear_param(c, l, DFG_LIN_UP, DFG_SHAPE(I, C), w);
        b->down_w = linear_param(c, l, DFG_LIN_DOWN, DFG_SHAPE(C, I), w);
    }
    m->ln_f_w = named(c, a->final_norm, "weight", DFG_SHAPE(C), one);
    if (!cfg->tie_word_embeddings) m->lm_head = named(c, a->lm_head, "weight", DFG_SHAPE(V, C), w);
}

static dfg_status make_params(dfg_program *p, const char *prefix, dfg_model_config cfg, bool frozen, dfg_model *out) {
    if (!p || !out) return DFG_ERR_ARG;
    cfg = dfg_model_config_resolve(cfg);
    if (frozen) cfg.lora = (dfg_lora_config){0}; /* a frozen copy has nothing to adapt */
    *out = (dfg_model){.cfg = cfg};
    bool bad = cfg.n_layer < 1 || cfg.n_layer > DFG_MODEL_MAX_LAYERS || cfg.n_head < 1 || cfg.n_embd < 1 ||
               cfg.vocab_size < 1 || cfg.block_size < 1 || !(cfg.ln_eps > 0) || cfg.arch < 0 ||
               cfg.arch >= DFG_ARCH_COUNT || cfg.n_kv_head < 1 || cfg.n_head % cfg.n_kv_head || cfg.head_dim < 1 ||
               (cfg.arch == DFG_ARCH_GPT2 ? cfg.n_embd % cfg.n_head != 0 : (cfg.head_dim % 2 || !(cfg.rope_theta > 0)));
    if (bad) return dfg_program_status(p) ? dfg_program_status(p) : DFG_ERR_ARG;
    bool lora = cfg.lora.r > 0;
    if (lora && (dfg_lora_check_targets(p, &cfg) || (prefix && prefix[0])))
        return dfg_program_status(p) ? dfg_program_status(p)
                                     : dfg_program_fail(p, DFG_ERR_ARG, "a LoRA model's weights keep their Hugging Face names (prefix '')");
    param_ctx c = {p, out, prefix ? prefix : "", cfg.dtype, frozen, lora, dfg_arch_info_of(cfg.arch)};
    if (c.arch->family == DFG_FAMILY_GPT2) gpt2_params(&c, &cfg);
    else llama_params(&c, &cfg);
    return dfg_program_status(p);
}

dfg_status dfg_model_params(dfg_program *p, const char *prefix, dfg_model_config cfg, dfg_model *out) {
    return make_params(p, prefix, cfg, false, out);
}

dfg_status dfg_model_frozen(dfg_program *p, const char *prefix, dfg_model_config cfg, dfg_model *out) {
    return make_params(p, prefix, cfg, true, out);
}

/* ---------------------------------------------------------------- layers */
dfg_tensor *dfg_nn_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b) {
    dfg_tensor *y = dfg_matmul(g, x, w, false, false); /* (..., in) @ (in, out) */
    return b ? dfg_bias_add(g, y, b) : y;
}

/* The weight of a block's linear: w, or its NF4 form dequantised into x's dtype (a planned
 * temporary that lives until the matmul reads it; the backward makes its own, ops/nn/autodiff.c) */
static dfg_tensor *weight(dfg_graph *g, dfg_tensor *x, const dfg_model_block *blk, dfg_linear_slot slot, dfg_tensor *w) {
    const dfg_nf4_weight *q = &blk->nf4[slot];
    if (!q->packed) return w;
    dfg_dtype dt = dfg_tensor_dtype(x);
    return q->absmax_q ? dfg_nf4_dequant_dq(g, q->packed, q->absmax_q, q->absmax2, q->offset, q->shape, dt)
                       : dfg_nf4_dequant(g, q->packed, q->absmax, q->shape, dt); /* (out, in) or Conv1D's (in, out) */
}

/* A block's nn.Linear: x (..., in) @ w^T, w (out, in), + b (out), + its adapter's share */
static dfg_tensor *linear_t(dfg_graph *g, dfg_tensor *x, const dfg_model_block *blk, dfg_linear_slot slot, dfg_tensor *w,
                            dfg_tensor *b) {
    return dfg_lora_linear(g, x, weight(g, x, blk, slot, w), b, &blk->lora[slot], false);
}

/* A GPT-2 block's Conv1D: x (..., in) @ w, w (in, out), + b (out), + its adapter's share */
static dfg_tensor *conv1d(dfg_graph *g, dfg_tensor *x, const dfg_model_block *blk, dfg_linear_slot slot, dfg_tensor *w,
                          dfg_tensor *b) {
    return dfg_lora_linear(g, x, weight(g, x, blk, slot, w), b, &blk->lora[slot], true);
}

/* GPT-2's blocks (c_attn, Conv1D) against the Llama family's, whichever form their weights take */
static bool gpt2_block(const dfg_model_block *blk) { return blk->c_attn_w || blk->nf4[DFG_LIN_C_ATTN].packed; }

dfg_tensor *dfg_nn_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps) {
    return dfg_layernorm(g, x, w, b, eps);
}

static dfg_tensor *norm(dfg_graph *g, const dfg_model_config *cfg, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b) {
    return cfg->arch == DFG_ARCH_GPT2 ? dfg_layernorm(g, x, w, b, cfg->ln_eps) : dfg_rmsnorm(g, x, w, cfg->ln_eps);
}

/* (B, T) i32 max(cols - start[b], 0) of cols (1, T) f32 and start (B) i32, in f32 (positions < 2^24) */
static dfg_tensor *shifted(dfg_graph *g, dfg_tensor *cols, dfg_tensor *start) {
    int64_t B = dfg_tensor_numel(start);
    dfg_tensor *s = dfg_reshape(g, dfg_cast(g, start, DFG_F32), DFG_SHAPE(B, 1));
    return dfg_cast(g, dfg_clamp(g, dfg_sub(g, cols, s), 0.0f, 16777216.0f), DFG_I32); /* (B, T) */
}

dfg_tensor *dfg_nn_positions_from(dfg_graph *g, dfg_tensor *start, int64_t col0, int64_t T) {
    return shifted(g, dfg_cast(g, dfg_nn_positions(g, 1, col0, T), DFG_F32), start);
}

dfg_tensor *dfg_nn_start_from(dfg_graph *g, dfg_tensor *start, int64_t col0) {
    if (!col0) return start;
    return dfg_cast(g, dfg_add_scalar(g, dfg_cast(g, start, DFG_F32), -(float)col0), DFG_I32); /* columns < 2^24 */
}

dfg_tensor *dfg_nn_positions_at(dfg_graph *g, dfg_tensor *start, dfg_tensor *col) {
    /* col: one element (1, 1), or one a row (B, 1) */
    return shifted(g, dfg_reshape(g, dfg_cast(g, col, DFG_F32), DFG_SHAPE(dfg_tensor_numel(col), 1)), start);
}

dfg_tensor *dfg_nn_positions(dfg_graph *g, int64_t B, int64_t start, int64_t T) {
    dfg_program *p = dfg_graph_program(g);
    if (B < 1 || T < 1 || start < 0 || start + T > INT32_MAX) {
        dfg_program_fail(p, DFG_ERR_SHAPE, "dfg_nn_positions: %lld rows of positions %lld .. %lld", (long long)B,
                         (long long)start, (long long)(start + T - 1));
        return dfg_fill(g, DFG_I32, DFG_SHAPE(0), 0.0f); /* fails too: the graph's error names the call */
    }
    char name[64];
    snprintf(name, sizeof(name), "positions.%lld+%lld", (long long)start, (long long)T);
    dfg_tensor *row = dfg_find(p, name); /* one CONST per range, shared by every graph */
    if (!row) {
        int32_t *v = malloc(sizeof(*v) * (size_t)T);
        if (!v) {
            dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (int64_t t = 0; t < T; t++) v[t] = (int32_t)(start + t);
        row = dfg_const(p, name, DFG_I32, DFG_SHAPE(T), v);
        free(v);
    }
    return dfg_expand(g, dfg_reshape(g, row, DFG_SHAPE(1, T)), DFG_SHAPE(B, T)); /* (B, T) */
}

/* x (..., H*D) -> the same, each head of D RMS-normalised with w (D): Qwen3's q_norm, k_norm */
static dfg_tensor *head_norm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, int64_t D, float eps) {
    dfg_shape s = dfg_tensor_shape(x), heads = s;
    heads.d[heads.rank - 1] /= D;
    heads.d[heads.rank++] = D;
    return dfg_reshape(g, dfg_rmsnorm(g, dfg_reshape(g, x, heads), w, eps), s);
}

static dfg_tensor *repeat_kv(dfg_graph *g, dfg_tensor *kv, const dfg_model_config *cfg);

dfg_nn_qkv dfg_nn_qkv_project(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                              const dfg_model_config *cfg) {
    if (cfg->arch == DFG_ARCH_GPT2) { /* slices of the one fused c_attn (..., 3C) */
        dfg_nn_qkv a;
        dfg_nn_qkv_packed(g, x, pos, blk, cfg, &a);
        return a;
    }
    int64_t D = cfg->head_dim;
    dfg_tensor *q = linear_t(g, x, blk, DFG_LIN_Q, blk->q_w, blk->q_b); /* (..., H*D) */
    dfg_tensor *k = linear_t(g, x, blk, DFG_LIN_K, blk->k_w, blk->k_b); /* (..., Hkv*D) */
    dfg_tensor *v = linear_t(g, x, blk, DFG_LIN_V, blk->v_w, blk->v_b); /* (..., Hkv*D) */
    if (cfg->qk_norm) { /* Qwen3 normalises each head, then rotates it */
        q = head_norm(g, q, blk->q_norm_w, D, cfg->ln_eps);
        k = head_norm(g, k, blk->k_norm_w, D, cfg->ln_eps);
    }
    q = dfg_rope(g, q, pos, (int)D, cfg->rope_theta);
    k = dfg_rope(g, k, pos, (int)D, cfg->rope_theta);
    return (dfg_nn_qkv){q, k, v};
}

/* kv (..., Hkv*D) -> (..., H*D): KV head j serves query heads j*rep .. j*rep+rep-1 (repeat_kv);
 * the expand's gradient sums the group's contributions back into the one head */
static dfg_tensor *repeat_kv(dfg_graph *g, dfg_tensor *kv, const dfg_model_config *cfg) {
    int64_t rep = cfg->n_head / cfg->n_kv_head, D = cfg->head_dim;
    if (rep == 1) return kv;
    dfg_shape s = dfg_tensor_shape(kv), grouped = s, wide = s, out = s;
    int r = s.rank - 1; /* the heads' axis */
    grouped.d[r] = cfg->n_kv_head, grouped.d[r + 1] = 1, grouped.d[r + 2] = D, grouped.rank = r + 3;
    wide = grouped, wide.d[r + 1] = rep;
    out.d[r] = cfg->n_head * D;
    return dfg_reshape(g, dfg_expand(g, dfg_reshape(g, kv, grouped), wide), out);
}

dfg_tensor *dfg_nn_qkv_packed(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                              const dfg_model_config *cfg, dfg_nn_qkv *parts) {
    if (cfg->arch == DFG_ARCH_GPT2) {
        dfg_tensor *qkv = conv1d(g, x, blk, DFG_LIN_C_ATTN, blk->c_attn_w, blk->c_attn_b); /* (..., 3C) */
        int axis = dfg_tensor_shape(qkv).rank - 1;
        int64_t C = cfg->n_embd;
        if (parts)
            *parts = (dfg_nn_qkv){dfg_slice(g, qkv, axis, 0, C), dfg_slice(g, qkv, axis, C, C),
                                  dfg_slice(g, qkv, axis, 2 * C, C)};
        return qkv;
    }
    dfg_nn_qkv a = dfg_nn_qkv_project(g, x, pos, blk, cfg);
    if (parts) *parts = a;
    int axis = dfg_tensor_shape(a.q).rank - 1;
    return dfg_concat(g, (dfg_tensor *[]){a.q, repeat_kv(g, a.k, cfg), repeat_kv(g, a.v, cfg)}, 3, axis);
}

dfg_tensor *dfg_nn_attention_out(dfg_graph *g, dfg_tensor *y, const dfg_model_block *blk) {
    if (gpt2_block(blk)) return conv1d(g, y, blk, DFG_LIN_O, blk->attn_proj_w, blk->attn_proj_b); /* GPT-2's c_proj */
    return linear_t(g, y, blk, DFG_LIN_O, blk->attn_proj_w, blk->attn_proj_b);                 /* o_proj */
}

/* x (..., C) -> (..., C): GPT-2's c_fc, GELU, c_proj; the Llama family's down(silu(gate) * up) */
static dfg_tensor *mlp(dfg_graph *g, dfg_tensor *x, const dfg_model_block *blk) {
    if (gpt2_block(blk)) {
        dfg_tensor *h = dfg_gelu(g, conv1d(g, x, blk, DFG_LIN_C_FC, blk->c_fc_w, blk->c_fc_b)); /* (..., I) */
        return conv1d(g, h, blk, DFG_LIN_MLP_PROJ, blk->mlp_proj_w, blk->mlp_proj_b);
    }
    dfg_tensor *h = dfg_mul(g, dfg_silu(g, linear_t(g, x, blk, DFG_LIN_GATE, blk->gate_w, NULL)),
                            linear_t(g, x, blk, DFG_LIN_UP, blk->up_w, NULL)); /* (..., I) */
    return linear_t(g, h, blk, DFG_LIN_DOWN, blk->down_w, NULL);
}

dfg_tensor *dfg_nn_block_with(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                              const dfg_model_config *cfg, dfg_nn_attention_fn attention, void *ctx) {
    dfg_tensor *a = attention(g, norm(g, cfg, x, blk->ln_1_w, blk->ln_1_b), pos, blk, cfg, ctx);
    x = dfg_add(g, x, a);
    return dfg_add(g, x, mlp(g, norm(g, cfg, x, blk->ln_2_w, blk->ln_2_b), blk));
}

/* ctx: the rows' start (B) for left-padded rows, or NULL */
static dfg_tensor *causal_attention(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                    const dfg_model_config *cfg, void *ctx) {
    dfg_tensor *qkv = dfg_nn_qkv_packed(g, x, pos, blk, cfg, NULL);
    dfg_tensor *y = dfg_attention_padded(g, qkv, (dfg_tensor *)ctx, cfg->n_head); /* (B, T, H*D) */
    return dfg_nn_attention_out(g, y, blk);
}

dfg_tensor *dfg_nn_block(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                         const dfg_model_config *cfg) {
    return dfg_nn_block_with(g, x, pos, blk, cfg, causal_attention, NULL);
}

/* ---------------------------------------------------------------- the model */
dfg_tensor *dfg_model_embed(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, dfg_tensor *pos) {
    dfg_tensor *x = dfg_embed(g, m->wte, tokens); /* (..., C) */
    return m->wpe ? dfg_add(g, x, dfg_embed(g, m->wpe, pos)) : x;
}

dfg_tensor *dfg_model_final_norm(dfg_graph *g, const dfg_model *m, dfg_tensor *x) {
    return norm(g, &m->cfg, x, m->ln_f_w, m->ln_f_b);
}

dfg_tensor *dfg_model_hidden_padded(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, dfg_tensor *start) {
    dfg_shape ts = dfg_tensor_shape(tokens);
    int64_t B = ts.rank == 2 ? ts.d[0] : 0, T = ts.rank == 2 ? ts.d[1] : 0;
    dfg_tensor *x, *pos = NULL;
    if (start) { /* positions count from each row's first real column */
        pos = dfg_nn_positions_from(g, start, 0, T); /* (B, T) */
        x = dfg_model_embed(g, m, tokens, pos);       /* GPT-2's wpe read at those positions */
    } else if (m->wpe) /* T > block_size (or tokens not 2-D) fails in the slice of wpe, naming wpe's size */
        x = dfg_add(g, dfg_embed(g, m->wte, tokens), dfg_slice(g, m->wpe, 0, 0, T)); /* (B, T, C) */
    else {
        pos = dfg_nn_positions(g, B, 0, T); /* (B, T) */
        x = dfg_model_embed(g, m, tokens, pos);
    }
    if (m->wpe) pos = NULL; /* added already; the blocks do not rotate */
    for (int l = 0; l < m->cfg.n_layer; l++) x = dfg_nn_block_with(g, x, pos, &m->h[l], &m->cfg, causal_attention, start);
    return dfg_model_final_norm(g, m, x);
}

dfg_tensor *dfg_model_hidden(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens) {
    return dfg_model_hidden_padded(g, m, tokens, NULL);
}

dfg_tensor *dfg_model_lm_head(dfg_graph *g, const dfg_model *m, dfg_tensor *hidden) {
    return dfg_matmul(g, hidden, m->lm_head ? m->lm_head : m->wte, false, true); /* (..., C) @ (V, C)^T */
}

dfg_tensor *dfg_model_logits(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens) {
    return dfg_model_lm_head(g, m, dfg_model_hidden(g, m, tokens));
}
