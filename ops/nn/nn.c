/* nn.c - GPT-2 and its training helpers (frozen copy, mixed-precision AdamW) built only from
 * public DSL calls: what a user of dfg would write. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"

dfg_status dfg_gpt2_config_from_settings(dfg_program *p, dfg_gpt2_config d, dfg_gpt2_config *out) {
    if (!p || !out) return DFG_ERR_ARG;
    dfg_gpt2_config m = d;
    m.n_layer = (int)dfg_setting_int(p, "n_layer", d.n_layer);
    m.n_head = (int)dfg_setting_int(p, "n_head", d.n_head);
    m.n_embd = (int)dfg_setting_int(p, "n_embd", d.n_embd);
    m.vocab_size = (int)dfg_setting_int(p, "vocab_size", d.vocab_size);
    m.block_size = (int)dfg_setting_int(p, "n_positions", d.block_size);
    /* Hugging Face's torch_dtype: bf16 weights and activations on the GPU by default (f32 masters
     * and moments come from dfg_nn_adamw_step); float32 there computes as the CPU does, so an
     * emulated GPU run can be compared tightly with a CPU run */
    bool cuda = !strcmp(dfg_setting_str(p, "target", "cpu"), "cuda");
    const char *dt = dfg_setting_str(p, "torch_dtype", cuda ? "bfloat16" : "float32");
    if (!strcmp(dt, "float32") || !strcmp(dt, "f32")) m.dtype = DFG_F32;
    else if (!strcmp(dt, "bfloat16") || !strcmp(dt, "bf16")) m.dtype = DFG_BF16;
    else return dfg_program_fail(p, DFG_ERR_ARG, "torch_dtype must be bfloat16 or float32, got '%s'", dt);
    if (!cuda && m.dtype != DFG_F32)
        return dfg_program_fail(p, DFG_ERR_ARG, "torch_dtype %s needs --target cuda: the CPU kernels compute in float32", dt);
    *out = m;
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (m.n_layer < 1 || m.n_layer > DFG_GPT2_MAX_LAYERS)
        return dfg_program_fail(p, DFG_ERR_ARG, "n_layer must be in 1..%d, got %d", DFG_GPT2_MAX_LAYERS, m.n_layer);
    if (m.n_head < 1 || m.n_embd < 1 || m.n_embd % m.n_head)
        return dfg_program_fail(p, DFG_ERR_ARG, "n_head (%d) must divide n_embd (%d)", m.n_head, m.n_embd);
    if (m.vocab_size < 3 || m.vocab_size > (1 << 24))
        return dfg_program_fail(p, DFG_ERR_ARG, "vocab_size must be in 3..%d, got %d", 1 << 24, m.vocab_size);
    if (m.block_size < 1 || m.block_size > (1 << 20))
        return dfg_program_fail(p, DFG_ERR_ARG, "n_positions must be in 1..%d, got %d", 1 << 20, m.block_size);
    return DFG_OK;
}

/* The shortest decimal that reads back as f: a float default recorded as "0.003", not as the
 * double 0.003000000026077032 it widens to. */
static double float_default(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

static float setting_f(dfg_program *p, const char *key, float def) {
    return (float)dfg_setting_float(p, key, float_default(def));
}

dfg_status dfg_adamw_config_from_settings(dfg_program *p, dfg_adamw_config d, dfg_adamw_config *out) {
    if (!p || !out) return DFG_ERR_ARG;
    *out = (dfg_adamw_config){
        .lr = setting_f(p, "learning_rate", d.lr),
        .beta1 = setting_f(p, "adam_beta1", d.beta1),
        .beta2 = setting_f(p, "adam_beta2", d.beta2),
        .eps = setting_f(p, "adam_epsilon", d.eps),
        .weight_decay = setting_f(p, "weight_decay", d.weight_decay),
    };
    return dfg_program_status(p); /* the ranges are checked where the AdamW node is built */
}

dfg_gpt2_config dfg_gpt2_config_default(void) {
    return (dfg_gpt2_config){.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .block_size = 1024,
                             .ln_eps = 1e-5f, .dtype = DFG_F32};
}

typedef struct {
    dfg_program *p;
    dfg_gpt2 *m;
    const char *prefix;
    dfg_dtype dt;
    bool frozen; /* STATEs of role REF_MODEL instead of PARAMs */
} param_ctx;

static dfg_tensor *param(param_ctx *c, const char *name, dfg_shape s, dfg_init init) {
    char full[256];
    snprintf(full, sizeof(full), "%s%s", c->prefix, name);
    dfg_tensor *t = c->frozen ? dfg_state(c->p, full, c->dt, s, DFG_ROLE_REF_MODEL, init)
                              : dfg_param(c->p, full, c->dt, s, init);
    if (t && c->m->n_params < (int)(sizeof(c->m->params) / sizeof(c->m->params[0]))) c->m->params[c->m->n_params++] = t;
    return t;
}

static dfg_tensor *block_param(param_ctx *c, int layer, const char *name, dfg_shape s, dfg_init init) {
    char nm[128];
    snprintf(nm, sizeof(nm), "h.%d.%s", layer, name);
    return param(c, nm, s, init);
}

static dfg_status make_params(dfg_program *p, const char *prefix, dfg_gpt2_config cfg, bool frozen, dfg_gpt2 *out) {
    if (!p || !out) return DFG_ERR_ARG;
    *out = (dfg_gpt2){.cfg = cfg};
    if (cfg.n_layer < 1 || cfg.n_layer > DFG_GPT2_MAX_LAYERS || cfg.n_head < 1 || cfg.n_embd < 1 ||
        cfg.n_embd % cfg.n_head || cfg.vocab_size < 1 || cfg.block_size < 1 || !(cfg.ln_eps > 0))
        return dfg_program_status(p) ? dfg_program_status(p) : DFG_ERR_ARG;
    param_ctx c = {p, out, prefix ? prefix : "", cfg.dtype, frozen};
    int64_t C = cfg.n_embd, V = cfg.vocab_size;
    dfg_init w = dfg_init_normal(0.0f, 0.02f), zero = dfg_init_zeros(), one = dfg_init_ones();
    dfg_init proj = dfg_init_normal(0.0f, 0.02f / sqrtf(2.0f * (float)cfg.n_layer)); /* GPT-2's residual scaling */
    out->wte = param(&c, "wte.weight", DFG_SHAPE(V, C), w);
    out->wpe = param(&c, "wpe.weight", DFG_SHAPE(cfg.block_size, C), dfg_init_normal(0.0f, 0.01f));
    for (int l = 0; l < cfg.n_layer; l++) {
        dfg_gpt2_block *b = &out->h[l];
        b->ln_1_w = block_param(&c, l, "ln_1.weight", DFG_SHAPE(C), one);
        b->ln_1_b = block_param(&c, l, "ln_1.bias", DFG_SHAPE(C), zero);
        b->c_attn_w = block_param(&c, l, "attn.c_attn.weight", DFG_SHAPE(C, 3 * C), w);
        b->c_attn_b = block_param(&c, l, "attn.c_attn.bias", DFG_SHAPE(3 * C), zero);
        b->attn_proj_w = block_param(&c, l, "attn.c_proj.weight", DFG_SHAPE(C, C), proj);
        b->attn_proj_b = block_param(&c, l, "attn.c_proj.bias", DFG_SHAPE(C), zero);
        b->ln_2_w = block_param(&c, l, "ln_2.weight", DFG_SHAPE(C), one);
        b->ln_2_b = block_param(&c, l, "ln_2.bias", DFG_SHAPE(C), zero);
        b->c_fc_w = block_param(&c, l, "mlp.c_fc.weight", DFG_SHAPE(C, 4 * C), w);
        b->c_fc_b = block_param(&c, l, "mlp.c_fc.bias", DFG_SHAPE(4 * C), zero);
        b->mlp_proj_w = block_param(&c, l, "mlp.c_proj.weight", DFG_SHAPE(4 * C, C), proj);
        b->mlp_proj_b = block_param(&c, l, "mlp.c_proj.bias", DFG_SHAPE(C), zero);
    }
    out->ln_f_w = param(&c, "ln_f.weight", DFG_SHAPE(C), one);
    out->ln_f_b = param(&c, "ln_f.bias", DFG_SHAPE(C), zero);
    return dfg_program_status(p);
}

dfg_status dfg_gpt2_params(dfg_program *p, const char *prefix, dfg_gpt2_config cfg, dfg_gpt2 *out) {
    return make_params(p, prefix, cfg, false, out);
}

dfg_status dfg_gpt2_frozen(dfg_program *p, const char *prefix, dfg_gpt2_config cfg, dfg_gpt2 *out) {
    return make_params(p, prefix, cfg, true, out);
}

dfg_tensor *dfg_nn_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b) {
    dfg_tensor *y = dfg_matmul(g, x, w, false, false); /* (..., in) @ (in, out) */
    return b ? dfg_bias_add(g, y, b) : y;
}

dfg_tensor *dfg_nn_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps) {
    return dfg_layernorm(g, x, w, b, eps);
}

dfg_tensor *dfg_nn_self_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, int n_head) {
    dfg_tensor *qkv = dfg_nn_linear(g, x, blk->c_attn_w, blk->c_attn_b); /* (B, T, 3C) */
    dfg_tensor *y = dfg_attention(g, qkv, n_head);                       /* (B, T, C) */
    return dfg_nn_linear(g, y, blk->attn_proj_w, blk->attn_proj_b);
}

dfg_tensor *dfg_nn_mlp(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk) {
    dfg_tensor *h = dfg_gelu(g, dfg_nn_linear(g, x, blk->c_fc_w, blk->c_fc_b)); /* (..., 4C) */
    return dfg_nn_linear(g, h, blk->mlp_proj_w, blk->mlp_proj_b);
}

dfg_tensor *dfg_nn_gpt2_block_with(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, const dfg_gpt2_config *cfg,
                                   dfg_nn_attention_fn attention, void *ctx) {
    dfg_tensor *a = attention(g, dfg_nn_layernorm(g, x, blk->ln_1_w, blk->ln_1_b, cfg->ln_eps), blk, ctx);
    x = dfg_add(g, x, a);
    dfg_tensor *m = dfg_nn_mlp(g, dfg_nn_layernorm(g, x, blk->ln_2_w, blk->ln_2_b, cfg->ln_eps), blk);
    return dfg_add(g, x, m);
}

static dfg_tensor *causal_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, void *ctx) {
    return dfg_nn_self_attention(g, x, blk, *(const int *)ctx);
}

dfg_tensor *dfg_nn_gpt2_block(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, const dfg_gpt2_config *cfg) {
    return dfg_nn_gpt2_block_with(g, x, blk, cfg, causal_attention, (void *)&cfg->n_head);
}

dfg_tensor *dfg_gpt2_hidden(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *tokens) {
    dfg_shape ts = dfg_tensor_shape(tokens);
    /* T > block_size (or tokens not 2-D) fails in the slice of wpe, naming wpe's size */
    int64_t T = ts.rank == 2 ? ts.d[1] : 0;
    dfg_tensor *x = dfg_add(g, dfg_embed(g, m->wte, tokens), dfg_slice(g, m->wpe, 0, 0, T)); /* (B, T, C) */
    for (int l = 0; l < m->cfg.n_layer; l++) x = dfg_nn_gpt2_block(g, x, &m->h[l], &m->cfg);
    return dfg_nn_layernorm(g, x, m->ln_f_w, m->ln_f_b, m->cfg.ln_eps);
}

dfg_tensor *dfg_gpt2_lm_head(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *hidden) {
    return dfg_matmul(g, hidden, m->wte, false, true); /* (..., C) @ (V, C)^T */
}

dfg_tensor *dfg_gpt2_logits(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *tokens) {
    return dfg_gpt2_lm_head(g, m, dfg_gpt2_hidden(g, m, tokens));
}

/* ---------------------------------------------------------------- training helpers */
/* dst = first ? src : dst, src rounded to dst's dtype; first is an f32 scalar (0 or 1). */

/* A zero-initialised f32 optimizer STATE shaped as param, named prefix + what + param's name. */
/* The STATE `name`: the existing one when an earlier call made it (several graphs of one program
 * share an optimizer: a warm-up and the RL update), else a new one. */
static dfg_tensor *state_once(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_role role,
                              bool *made) {
    dfg_tensor *t = dfg_find(p, name);
    if (made) *made = !t;
    if (!t) return dfg_state(p, name, dt, shape, role, dfg_init_zeros());
    if (dfg_tensor_kind(t) != DFG_STATE || dfg_tensor_dtype(t) != dt || !dfg_shape_equal(dfg_tensor_shape(t), shape)) {
        dfg_program_fail(p, DFG_ERR_ARG, "'%s' exists already with another kind, dtype or shape", name);
        return NULL;
    }
    return t;
}

static dfg_tensor *optim_state(dfg_program *p, const char *prefix, const char *what, const dfg_tensor *param,
                               bool *made) {
    char name[320];
    snprintf(name, sizeof(name), "%s%s%s", prefix, what, dfg_tensor_name(param));
    return state_once(p, name, DFG_F32, dfg_tensor_shape(param), DFG_ROLE_OPTIM, made);
}

dfg_status dfg_nn_grad_buffers(dfg_program *p, dfg_tensor *const *params, int n, const char *prefix, dfg_tensor **out) {
    if (!p || n < 1 || !params || !out) return DFG_ERR_ARG;
    char name[320];
    for (int i = 0; i < n && !dfg_program_status(p); i++) {
        snprintf(name, sizeof(name), "%sgrad.%s", prefix ? prefix : "", dfg_tensor_name(params[i]));
        out[i] = state_once(p, name, dfg_tensor_dtype(params[i]), dfg_tensor_shape(params[i]), DFG_ROLE_GRAD, NULL);
    }
    return dfg_program_status(p);
}

dfg_status dfg_nn_init_copy(dfg_program *p, dfg_tensor *const *dst, dfg_tensor *const *src, int n) {
    if (!p || n < 0 || (n > 0 && (!dst || !src))) return DFG_ERR_ARG;
    for (int i = 0; i < n && !dfg_program_status(p); i++) dfg_init_from(p, dst[i], src[i]);
    return dfg_program_status(p);
}

dfg_status dfg_nn_adamw_step(dfg_program *p, dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, int n,
                             dfg_adamw_config cfg, const char *prefix) {
    if (!p || !g || n < 1 || !params || !grads) return DFG_ERR_ARG;
    if (dfg_program_status(p)) return dfg_program_status(p);
    const char *pre = prefix ? prefix : "";
    char name[320];
    snprintf(name, sizeof(name), "%sadamw.step", pre);
    dfg_tensor *step = state_once(p, name, DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, NULL);
    if (!step) return dfg_program_status(p);
    /* += 1 before the update: the bias correction counts steps from 1 */
    dfg_assign(g, step, dfg_add(g, step, dfg_fill(g, DFG_I32, DFG_SCALAR, 1.0f)));
    for (int i = 0; i < n; i++) {
        dfg_tensor *param = params[i], *grad = grads[i];
        dfg_tensor *m = optim_state(p, pre, "adamw.m.", param, NULL), *v = optim_state(p, pre, "adamw.v.", param, NULL);
        if (!m || !v) return dfg_program_status(p);
        dfg_dtype dt = dfg_tensor_dtype(param);
        dfg_adamw_config c = cfg;
        if (dfg_tensor_shape(param).rank < 2) c.weight_decay = 0.0f; /* biases, LayerNorm */
        if (dt == DFG_F32) { /* full precision: the parameter is its own master */
            dfg_adamw(g, &param, &grad, &m, &v, 1, step, c);
            continue;
        }
        bool made = false;
        dfg_tensor *master = optim_state(p, pre, "master.", param, &made);
        /* the master starts as the parameter, widened (also after --weights loads the parameter) */
        if (!master || (made && dfg_init_from(p, master, param))) return dfg_program_status(p);
        /* the update in f32: a bf16 step of lr * m / sqrt(v) would round away against the weight.
         * The 16-bit gradient goes in as it is; the AdamW kernel widens it element by element,
         * so no f32 copy of a parameter-sized gradient is ever stored. */
        dfg_adamw(g, &master, &grad, &m, &v, 1, step, c);
        dfg_assign(g, param, master); /* rounds to the parameter's dtype, no temporary */
    }
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_program_status(p);
}
