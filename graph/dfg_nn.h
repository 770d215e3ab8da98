/* dfg_nn.h - composite builders (GPT-2) written only with the public DSL of dfg.h.
 *
 * Parameters carry Hugging Face GPT-2 names (wte.weight, h.0.attn.c_attn.weight, ...) and
 * layouts: linear weights are stored (in, out) as HF's Conv1D, so a checkpoint loads as is.
 * The lm_head is tied to wte.
 */
#ifndef DFG_NN_H
#define DFG_NN_H

#include "dfg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n_layer, n_head, n_embd, vocab_size, block_size;
    float ln_eps; /* 1e-5 as GPT-2 */
    dfg_dtype dtype;
} dfg_gpt2_config;

typedef struct {
    dfg_tensor *ln_1_w, *ln_1_b;       /* (C) */
    dfg_tensor *c_attn_w, *c_attn_b;   /* (C, 3C), (3C) */
    dfg_tensor *attn_proj_w, *attn_proj_b; /* (C, C), (C) */
    dfg_tensor *ln_2_w, *ln_2_b;       /* (C) */
    dfg_tensor *c_fc_w, *c_fc_b;       /* (C, 4C), (4C) */
    dfg_tensor *mlp_proj_w, *mlp_proj_b; /* (4C, C), (C) */
} dfg_gpt2_block;

#define DFG_GPT2_PARAMS_PER_BLOCK 12
#define DFG_GPT2_MAX_LAYERS 64

typedef struct {
    dfg_gpt2_config cfg;
    dfg_tensor *wte;              /* (V, C), also the lm_head */
    dfg_tensor *wpe;              /* (block_size, C) */
    dfg_tensor *ln_f_w, *ln_f_b;  /* (C) */
    dfg_gpt2_block h[DFG_GPT2_MAX_LAYERS];
    dfg_tensor *params[4 + DFG_GPT2_PARAMS_PER_BLOCK * DFG_GPT2_MAX_LAYERS]; /* all, in HF order */
    int n_params;
} dfg_gpt2;

/* The GPT-2 tiny/small presets used by the examples and benchmarks. */
dfg_gpt2_config dfg_gpt2_config_default(void); /* 124M: L=12, H=12, C=768, V=50257, T=1024 */

/* Creates the model's PARAMs named prefix + HF name (prefix "" for the policy, e.g. "ref." for
 * a frozen copy), with GPT-2's init: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, layernorm weights 1. */
dfg_status dfg_gpt2_params(dfg_program *p, const char *prefix, dfg_gpt2_config cfg, dfg_gpt2 *out);

dfg_tensor *dfg_nn_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b); /* x @ w + b */
dfg_tensor *dfg_nn_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps);
/* x (B, T, C) -> (B, T, C): c_attn, causal attention, c_proj. */
dfg_tensor *dfg_nn_self_attention(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, int n_head);
/* x (..., C) -> (..., C): c_fc, gelu, c_proj. */
dfg_tensor *dfg_nn_mlp(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk);
/* Pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(.)). */
dfg_tensor *dfg_nn_gpt2_block(dfg_graph *g, dfg_tensor *x, const dfg_gpt2_block *blk, const dfg_gpt2_config *cfg);
/* tokens (B, T) i32 -> hidden states after ln_f (B, T, C). Positions are 0 .. T-1. */
dfg_tensor *dfg_gpt2_hidden(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *tokens);
/* hidden (..., C) -> logits (..., V) through the tied lm_head (hidden @ wte^T). */
dfg_tensor *dfg_gpt2_lm_head(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *hidden);
/* tokens (B, T) -> logits (B, T, V). */
dfg_tensor *dfg_gpt2_logits(dfg_graph *g, const dfg_gpt2 *m, dfg_tensor *tokens);

#ifdef __cplusplus
}
#endif
#endif
