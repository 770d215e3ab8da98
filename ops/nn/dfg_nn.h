/* dfg_nn.h - the layer above the op core (ops/nn/): autodiff, metrics, and composite builders
 * (GPT-2 and the Llama family with Hugging Face's names, the training helpers, GRPO) written only
 * with the public calls of dfg_ops.h. */
#ifndef DFG_NN_H
#define DFG_NN_H

#include "dfg_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- autodiff
 * Appends the gradient of the scalar `loss` with respect to each wrt[i] to the graph and
 * stores it in grads[i] (a TEMP of wrt[i]'s shape; zeros when loss does not depend on it). */
DFG_API dfg_status dfg_backward(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n, dfg_tensor **grads);
/* As dfg_backward, then accumulates each gradient into the STATE accum[i] (micro-batching). */
DFG_API dfg_status dfg_backward_accumulate(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n,
                                   dfg_tensor *const *accum);


/* ---------------------------------------------------------------- metrics
 * Copies a scalar into the persistent metric "name" (an f32 STATE "metric.<name>" of role
 * METRIC), reported after every step. */
DFG_API dfg_status dfg_metric(dfg_graph *g, const char *name, dfg_tensor *scalar);
/* As dfg_metric, for a value a step may not have (NaN: none), e.g. the mean of a reward function
 * over the rows it applies to when it applies to none (TRL logs NaN there too): such a NaN is
 * logged as null, left out of averages, and never stops a run the way a NaN loss does. */
DFG_API dfg_status dfg_metric_nullable(dfg_graph *g, const char *name, dfg_tensor *scalar);

/* ---------------------------------------------------------------- models
 * Decoder-only transformers as Hugging Face writes them: GPT-2 (GPT2LMHeadModel) and the Llama
 * family (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM). Parameters carry Hugging Face's
 * names and layouts, so a checkpoint loads as it is:
 *   GPT-2   wte.weight, wpe.weight, h.N.ln_1.weight, h.N.attn.c_attn.weight (C, 3C) (Conv1D:
 *           (in, out)), ..., ln_f.weight; the lm_head is tied to wte.
 *   Llama   model.embed_tokens.weight (V, C), model.layers.N.input_layernorm.weight,
 *           model.layers.N.self_attn.{q,k,v,o}_proj.weight (nn.Linear: (out, in)), q/k/v biases
 *           (Qwen2; Llama with attention_bias, which biases o_proj too), model.layers.N.self_attn.{q,k}_norm.weight (Qwen3),
 *           model.layers.N.post_attention_layernorm.weight, model.layers.N.mlp.{gate,up,down}_proj
 *           .weight, model.norm.weight, lm_head.weight (V, C) unless tie_word_embeddings.
 * The Llama family: pre-RMSNorm blocks, rotary positions (rope_theta, rotate_half), grouped-query
 * attention (num_key_value_heads), the SwiGLU MLP down(silu(gate(x)) * up(x)); Qwen2 adds q/k/v
 * biases, Qwen3 drops them and RMS-normalises every query and key head before the rotation. */
typedef enum {
#define DFG_ARCH(id, type, cls, family, bias, qk_norm) DFG_ARCH_##id,
#include "arch.def"
#undef DFG_ARCH
    DFG_ARCH_COUNT
} dfg_arch;

/* Parameter-efficient fine-tuning (ops/nn/nn_lora.c), as PEFT's LoraConfig and bitsandbytes'
 * BitsAndBytesConfig name it. With r > 0 every weight of the model is frozen (a STATE of role
 * BASE_MODEL under its Hugging Face name: no gradient, no optimizer state, no master copy) and
 * each targeted linear y = x W^T + b gains y += scale (x A^T) B^T with trained adapters A (r, in)
 * and B (out, r), named "<module>.lora_A.weight" and "<module>.lora_B.weight" (module: the Hugging
 * Face module path, e.g. "model.layers.0.self_attn.q_proj", "h.0.attn.c_attn"), initialised as
 * PEFT does: A kaiming-uniform U(-1/sqrt(in), 1/sqrt(in)), B zeros. The model's params are then
 * the adapters alone; dfg_model_adapter_off gives the base model (a reference model for free). */
#define DFG_LORA_TARGETS_MAX 256
typedef struct {
    int r;          /* lora_r: the adapters' rank; 0: no adapters, every weight trains */
    float alpha;    /* lora_alpha: scale = alpha / r, or alpha / sqrt(r) with rslora */
    bool rslora;    /* use_rslora */
    /* lora_target_modules: comma-separated module names, each matching a module whose path is
     * the name or ends in "." + the name (PEFT's rule), or "all-linear" (every linear of the
     * blocks: PEFT leaves out the output layer); empty: PEFT's default for the architecture
     * (q_proj,v_proj; GPT-2's c_attn) */
    char targets[DFG_LORA_TARGETS_MAX];
    /* load_in_4bit: the frozen linears of the blocks are stored as NF4 (blocks of 64, an f32
     * absmax each; bnb_4bit_use_double_quant: the absmax values 8-bit, blocks of 256) and
     * dequantised where they are read */
    bool load_in_4bit, double_quant;
} dfg_lora_config;

typedef struct {
    int n_layer, n_head, n_embd, vocab_size, block_size; /* block_size: the positions (n_positions) */
    float ln_eps;                                         /* layer_norm_epsilon / rms_norm_eps */
    dfg_dtype dtype;
    dfg_arch arch;
    /* 0 means derived: n_kv_head = n_head, head_dim = n_embd / n_head, n_inner = 4 n_embd */
    int n_kv_head; /* num_key_value_heads: n_head / n_kv_head query heads share one key/value head */
    int head_dim;  /* the Llama family may have n_head * head_dim != n_embd (Qwen3) */
    int n_inner;   /* the MLP's width (GPT-2 n_inner, Llama intermediate_size) */
    float rope_theta;
    bool tie_word_embeddings; /* the Llama family's lm_head is embed_tokens (GPT-2's always is) */
    bool attention_bias;      /* q/k/v projection biases (Qwen2; Llama's attention_bias, which adds o_proj's) */
    bool qk_norm;             /* per-head RMSNorm of queries and keys (Qwen3) */
    dfg_lora_config lora;     /* zero: a fully trained model */
} dfg_model_config;

/* The linears of a block an adapter (and 4-bit storage) can sit on. */
typedef enum {
    DFG_LIN_Q, DFG_LIN_K, DFG_LIN_V, DFG_LIN_O,   /* Llama: q/k/v/o_proj; GPT-2: attn.c_proj is O */
    DFG_LIN_GATE, DFG_LIN_UP, DFG_LIN_DOWN,       /* Llama: mlp.gate/up/down_proj */
    DFG_LIN_C_ATTN, DFG_LIN_C_FC, DFG_LIN_MLP_PROJ, /* GPT-2: attn.c_attn, mlp.c_fc, mlp.c_proj */
    DFG_LIN_COUNT
} dfg_linear_slot;

/* One LoRA adapter: y += scale (x A^T) B^T. */
typedef struct {
    dfg_tensor *a, *b; /* (r, in), (out, r) PARAMs */
    float scale;       /* alpha / r (alpha / sqrt(r) with rslora) */
} dfg_lora_adapter;

/* A linear's weight stored as NF4 (load_in_4bit): STATEs of role BASE_MODEL named after the
 * weight, "<weight>.nf4" (out, in/2) u8 two codes a byte and "<weight>.absmax" (blocks) f32, or
 * with double quantisation "<weight>.absmax_q" (blocks) u8, "<weight>.absmax2" f32 and
 * "<weight>.absmax_offset" () f32. A Hugging Face checkpoint's "<weight>" fills them quantised. */
typedef struct {
    dfg_tensor *packed, *absmax, *absmax_q, *absmax2, *offset;
    dfg_shape shape; /* the weight's: (out, in), or GPT-2's Conv1D (in, out) */
} dfg_nf4_weight;

typedef struct {
    dfg_tensor *ln_1_w, *ln_1_b;         /* (C): ln_1 / input_layernorm (b: GPT-2 only) */
    dfg_tensor *c_attn_w, *c_attn_b;     /* GPT-2: (C, 3C), (3C) */
    dfg_tensor *q_w, *k_w, *v_w;         /* Llama: (H*D, C), (Hkv*D, C), (Hkv*D, C) */
    dfg_tensor *q_b, *k_b, *v_b;         /* (H*D), (Hkv*D), (Hkv*D) or NULL */
    dfg_tensor *q_norm_w, *k_norm_w;     /* Qwen3: (D) or NULL */
    dfg_tensor *attn_proj_w, *attn_proj_b; /* GPT-2 c_proj (C, C), (C); o_proj (C, H*D), (C) (Llama's attention_bias) or NULL */
    dfg_tensor *ln_2_w, *ln_2_b;         /* (C): ln_2 / post_attention_layernorm */
    dfg_tensor *c_fc_w, *c_fc_b;         /* GPT-2: (C, 4C), (4C) */
    dfg_tensor *mlp_proj_w, *mlp_proj_b; /* GPT-2: (4C, C), (C) */
    dfg_tensor *gate_w, *up_w, *down_w;  /* Llama: (I, C), (I, C), (C, I) */
    dfg_lora_adapter lora[DFG_LIN_COUNT]; /* adapters by slot (a == NULL: none) */
    dfg_nf4_weight nf4[DFG_LIN_COUNT];    /* 4-bit weights by slot (packed == NULL: the weight itself) */
} dfg_model_block;

#define DFG_MODEL_PARAMS_PER_BLOCK 12
#define DFG_MODEL_MAX_LAYERS 128
/* the most params a model has: every weight (4 + 12 a block), or two adapters a linear */
#define DFG_MODEL_MAX_PARAMS (2 * DFG_LIN_COUNT * DFG_MODEL_MAX_LAYERS)

typedef struct {
    dfg_model_config cfg;         /* resolved: no derived field left 0 */
    dfg_tensor *wte;              /* (V, C) wte / embed_tokens, the lm_head when tied */
    dfg_tensor *wpe;              /* (block_size, C): GPT-2 only */
    dfg_tensor *ln_f_w, *ln_f_b;  /* (C): ln_f / model.norm (b: GPT-2 only) */
    dfg_tensor *lm_head;          /* (V, C) an untied lm_head, or NULL */
    dfg_model_block h[DFG_MODEL_MAX_LAYERS];
    /* the trained tensors, in HF order: every weight, or with LoRA the adapters (A, B of each
     * adapted linear, layer by layer) */
    dfg_tensor *params[DFG_MODEL_MAX_PARAMS];
    int n_params;
} dfg_model;

/* The GPT-2 124M preset (L=12, H=12, C=768, V=50257, T=1024) the examples start from. */
DFG_API dfg_model_config dfg_gpt2_config_default(void);
DFG_API const char *dfg_arch_name(dfg_arch a); /* "gpt2", "llama", "qwen2", "qwen3" (model_type) */

/* ---------------------------------------------------------------- the architecture table
 * One row per architecture (ops/nn/arch.def) and one layout per family (ops/nn/nn_arch.c): every
 * fact of Hugging Face's format that dfg reads or writes. config.json's reader
 * (runtime/formats/model_config.c), the model builder (nn_config.c, nn_model.c), and the weights
 * in and out (runtime/weights: checkpoints, model export, PEFT adapters) all read it. */
typedef enum { DFG_FAMILY_GPT2, DFG_FAMILY_LLAMA } dfg_arch_family;
typedef enum { DFG_ARCH_BIAS_ALL, DFG_ARCH_BIAS_CONFIG, DFG_ARCH_BIAS_QKV, DFG_ARCH_BIAS_NONE } dfg_arch_bias;

/* A config.json key dfg reads into a setting of the same name. */
typedef enum { DFG_ARCH_KEY_INT, DFG_ARCH_KEY_FLOAT, DFG_ARCH_KEY_BOOL, DFG_ARCH_KEY_IDS, DFG_ARCH_KEY_ID } dfg_arch_key_kind;
typedef struct {
    const char *key;
    dfg_arch_key_kind kind;     /* INT: positive int32; FLOAT: finite, > 0; IDS: 1..8 token ids ("1,2,3"); ID: one */
    const char *field;          /* the dfg_model_config field it fills ("n_layer"); NULL: none (token ids) */
    bool null_skips;            /* null means "derived" (n_inner: 4 n_embd; head_dim: hidden / heads): not set */
    const char *absent;         /* the value set when the file lacks it (the config class's default), or NULL */
    const char *absent_as;      /* or: it takes this setting's value (num_key_value_heads) */
    const char *from;           /* export only: written from this setting (GPT-2's n_ctx from n_positions); not read */
} dfg_arch_key;

/* A config.json value of a model dfg would compute differently: such a config is refused. */
typedef enum {
    DFG_ARCH_RULE_STRING, /* a string, one of `allowed` ('|'-separated) */
    DFG_ARCH_RULE_BOOL,   /* true or false, but not `refused` */
    DFG_ARCH_RULE_ZERO,   /* a number equal to 0 */
    DFG_ARCH_RULE_NULL,   /* null (rope_scaling) */
} dfg_arch_rule_kind;
typedef struct {
    const char *key;
    dfg_arch_rule_kind kind;
    const char *allowed;
    bool refused;
    const char *why; /* what dfg computes instead */
} dfg_arch_rule;

typedef struct {
    dfg_arch arch;
    const char *model_type, *hf_class;
    dfg_arch_family family;
    dfg_arch_bias bias;
    bool qk_norm;
    /* the layout: tensor names (Hugging Face's, inside the base model) and their quirks */
    bool conv1d;              /* GPT-2's Conv1D: linear weights stored (in, out), PEFT's fan_in_fan_out */
    bool tied_head;           /* the output head is always the embedding (no lm_head.weight to load) */
    bool learned_positions;   /* a position embedding (pos_embed) instead of RoPE */
    bool layernorm;           /* LayerNorm with biases instead of RMSNorm */
    const char *hf_prefix;    /* the base model's module inside the LM-head class ("transformer."): files name tensors with it */
    const char *embed, *pos_embed, *blocks, *norm_1, *norm_2, *final_norm, *lm_head; /* module paths */
    const char *q_norm, *k_norm;        /* a block's per-head norms (qk_norm), under "<blocks>.N." */
    const char *linears[DFG_LIN_COUNT]; /* a block's linear by slot, under "<blocks>.N."; NULL: none */
    const char *buffers;      /* '|'-separated endings of file tensors that are buffers, not weights */
    const char *lora_targets; /* PEFT's default target_modules for the architecture */
    const char *config_extra; /* JSON object merged into a config.json written from settings alone */
} dfg_arch_info;

/* The row of architecture a; NULL when there is none. */
DFG_API const dfg_arch_info *dfg_arch_info_of(dfg_arch a);
/* The row whose model_type (by_class false) or hf_class (true) is name; NULL when none. */
DFG_API const dfg_arch_info *dfg_arch_find(const char *name, bool by_class);
/* The config.json keys architecture a reads (and an export writes back), in reading order, and
 * the rules its configs must pass: pointers into the table, at most max; returns how many. */
DFG_API int dfg_arch_config_keys(dfg_arch a, const dfg_arch_key **keys, int max);
DFG_API int dfg_arch_config_rules(dfg_arch a, const dfg_arch_rule **rules, int max);
/* The config.json key (and setting) that fills dfg_model_config's `field` in architecture a
 * ("n_layer" in gpt2, "num_hidden_layers" in llama); NULL when a has none. */
DFG_API const char *dfg_arch_key_for(dfg_arch a, const char *field);
/* "GPT2LMHeadModel, LlamaForCausalLM, ..." and "gpt2, llama, ..." for messages. */
DFG_API const char *dfg_arch_class_list(void);
DFG_API const char *dfg_arch_type_list(void);
/* cfg with every derived field (n_kv_head, head_dim, n_inner) filled in. */
DFG_API dfg_model_config dfg_model_config_resolve(dfg_model_config cfg);

/* Reads a pipeline's model settings with Hugging Face's config.json names, each default from
 * `defaults` (`dfg compile --set model=DIR` turns DIR/config.json into these settings):
 *   "model_type"  gpt2 | llama | qwen2 | qwen3 (default: defaults.arch)
 *   gpt2          "n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "layer_norm_epsilon",
 *                 "n_inner" (0: 4 n_embd)
 *   llama, qwen*  "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
 *                 "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
 *                 "rms_norm_eps", "rope_theta", "tie_word_embeddings", "attention_bias" (llama;
 *                 qwen2 always has the biases, qwen3 never, with QK-norm instead)
 *   "torch_dtype" bfloat16 or float32: the weights' and activations' dtype; bfloat16 by default
 *                 when the setting "target" is "cuda" (f32 masters and moments come from
 *                 dfg_nn_adamw_step), float32 on the CPU
 * and "model" (the directory the settings came from; read so that the plan records it).
 * Out-of-range values are a program error naming the setting. */
DFG_API dfg_status dfg_model_config_from_settings(dfg_program *p, dfg_model_config defaults, dfg_model_config *out);
/* AdamW's hyper-parameters from the settings (Hugging Face TrainingArguments' names)
 * "learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay". */
DFG_API dfg_status dfg_adamw_config_from_settings(dfg_program *p, dfg_adamw_config defaults, dfg_adamw_config *out);

/* Creates the model's PARAMs named prefix + HF name (prefix "" for the policy; a frozen copy
 * comes from dfg_model_frozen below), with Hugging Face's init: weights N(0, 0.02) (GPT-2's
 * residual projections N(0, 0.02/sqrt(2L))), biases 0, norm weights 1. */
DFG_API dfg_status dfg_model_params(dfg_program *p, const char *prefix, dfg_model_config cfg, dfg_model *out);
/* PEFT's settings (lora_r, lora_alpha, lora_dropout: 0 only, lora_target_modules, use_rslora) and
 * bitsandbytes' (load_in_4bit, bnb_4bit_quant_type: nf4 only, bnb_4bit_use_double_quant) for a
 * model of architecture arch; out-of-range values are a program error naming the setting. */
DFG_API dfg_status dfg_lora_config_from_settings(dfg_program *p, dfg_arch arch, dfg_lora_config *out);
/* m's base model: the same tensors with every adapter switched off (PEFT's disable_adapter()),
 * the reference model of a LoRA policy at no memory cost. */
DFG_API void dfg_model_adapter_off(const dfg_model *m, dfg_model *out);
/* The Hugging Face module path of a block's linear: "model.layers.3.self_attn.q_proj",
 * "h.3.attn.c_attn"; false when the architecture has no such linear. */
DFG_API bool dfg_model_linear_path(const dfg_model_config *cfg, int layer, dfg_linear_slot slot, char *buf, size_t len);

/* The same tensors for a frozen copy of the model (GRPO's reference model): STATEs of role
 * REF_MODEL, named prefix + HF name (e.g. "ref.wte.weight"), with the same init specs. Not
 * PARAMs, because a frozen copy is not trained: it is not counted as parameters, `dfg run
 * --weights` of a Hugging Face checkpoint does not ask for it (a strict load requires every
 * PARAM), `--save` leaves it out and checkpoints with state keep it. Never pass it to
 * dfg_backward or an optimizer: it needs no gradients, moments or master weights. Make it start as
 * the policy with dfg_nn_init_copy (no graph work; weights loaded into the policy reach it). */
DFG_API dfg_status dfg_model_frozen(dfg_program *p, const char *prefix, dfg_model_config cfg, dfg_model *out);

DFG_API dfg_tensor *dfg_nn_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b); /* x @ w + b */
DFG_API dfg_tensor *dfg_nn_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps);
/* The block's attention, given the normalised input x (..., C) and each token's position pos
 * (x's leading dims, i32; the rotary models use it, GPT-2 has added wpe already): returns the
 * attention's projected output, of x's shape. */
typedef dfg_tensor *(*dfg_nn_attention_fn)(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                           const dfg_model_config *cfg, void *ctx);
/* Pre-norm block: x + attention(norm_1(x)), then + mlp(norm_2(.)): LayerNorm and the GELU MLP for
 * GPT-2, RMSNorm and SwiGLU for the Llama family. dfg_nn_block is causal self-attention over x
 * (B, T, C); dfg_nn_block_with takes another attention (the KV-cache and shared-prompt forms). */
DFG_API dfg_tensor *dfg_nn_block(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                 const dfg_model_config *cfg);
DFG_API dfg_tensor *dfg_nn_block_with(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                      const dfg_model_config *cfg, dfg_nn_attention_fn attention, void *ctx);

/* The pieces of an attention every form shares. q (..., H*D), k and v (..., Hkv*D) of x (..., C)
 * at positions pos: rotated (and QK-normed) for the Llama family; GPT-2's slices of c_attn. */
typedef struct {
    dfg_tensor *q, *k, *v;
} dfg_nn_qkv;
DFG_API dfg_nn_qkv dfg_nn_qkv_project(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                      const dfg_model_config *cfg);
/* [q | k | v] (..., 3*H*D) for dfg_attention and dfg_attention_prefix, every key/value head
 * repeated for the n_head / n_kv_head query heads that share it (transformers' repeat_kv).
 * GPT-2's c_attn output is that already (no copy). parts (or NULL) receives q, k, v as
 * dfg_nn_qkv_project gives them, for a KV cache, from the same projection. */
DFG_API dfg_tensor *dfg_nn_qkv_packed(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, const dfg_model_block *blk,
                                      const dfg_model_config *cfg, dfg_nn_qkv *parts);
/* The attention heads y (..., H*D) -> (..., C): c_proj / o_proj. */
DFG_API dfg_tensor *dfg_nn_attention_out(dfg_graph *g, dfg_tensor *y, const dfg_model_block *blk);
/* Positions start .. start+T-1 for B rows: (B, T) i32 (a CONST of T values, expanded). */
DFG_API dfg_tensor *dfg_nn_positions(dfg_graph *g, int64_t B, int64_t start, int64_t T);
/* Left-padded rows: the positions of columns col0 .. col0+T-1 of rows whose first real column is
 * start[b] (start (B) i32): (B, T) i32 max(col0 + t - start[b], 0), so a row's first real token is
 * at position 0 and its pads at 0 too (transformers' position_ids = cumsum(mask) - 1, clamped at 0).
 * Built from public ops in f32 (positions < 2^24). */
DFG_API dfg_tensor *dfg_nn_positions_from(dfg_graph *g, dfg_tensor *start /* (B) i32 */, int64_t col0, int64_t T);
/* The same for one column read at run time: col an i32 scalar -> (B, 1) i32 max(col - start[b], 0);
 * or col (B) i32 one column a row -> (B, 1) max(col[b] - start[b], 0). */
DFG_API dfg_tensor *dfg_nn_positions_at(dfg_graph *g, dfg_tensor *start /* (B) i32 */, dfg_tensor *col);
/* The rows' start (B) i32 among the columns from col0 on: start - col0 (every start >= col0). */
DFG_API dfg_tensor *dfg_nn_start_from(dfg_graph *g, dfg_tensor *start /* (B) i32 */, int64_t col0);
/* tokens (...) at positions pos (tokens' shape) -> the first block's input (..., C): the token
 * embeddings, plus GPT-2's learned position embeddings (T > block_size fails naming wpe). */
DFG_API dfg_tensor *dfg_model_embed(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, dfg_tensor *pos);
/* x (..., C) -> the final norm's output (ln_f / model.norm). */
DFG_API dfg_tensor *dfg_model_final_norm(dfg_graph *g, const dfg_model *m, dfg_tensor *x);

/* ---------------------------------------------------------------- generation with a KV cache */
typedef struct {
    dfg_tensor *k[DFG_MODEL_MAX_LAYERS], *v[DFG_MODEL_MAX_LAYERS]; /* (N, Tmax, Hkv*D) each */
    int n_layer;
    dfg_tensor *start; /* (N) i32 or NULL: the rows' first real column (left padding) */
    /* dfg_model_prefill: the column its tokens' first one stands at (0: the first). A prompt
     * bucket narrower than the prompt columns leaves out the leading pads: the caches' rows
     * stay the columns, and start stays the row's column (>= col0 for every row). */
    int64_t col0;
    /* The shared form (dfg_model_kv_cache_shared): each group's prompt once, columns 0 .. Tp-1,
     * (P, Tp, Hkv*D) each, and k, v the rows' own columns from Tp on, (N, Tc, Hkv*D); NULL: k
     * and v hold every column of every row. prompt_of (N) i32 or NULL: each row's prompt (NULL:
     * row b's is b / (N / P)). */
    dfg_tensor *k_prompt[DFG_MODEL_MAX_LAYERS], *v_prompt[DFG_MODEL_MAX_LAYERS];
    dfg_tensor *prompt_of;
} dfg_model_kv;

/* The caches of N sequences of up to Tmax positions: STATEs "<prefix>kv.<l>.k" / ".v" of the
 * model's dtype, role KV_CACHE, at key/value-head size (Hkv*D per position). Scope them (dfg_set_scope) to the generation stages so that the
 * training stages reuse their bytes. */
DFG_API dfg_status dfg_model_kv_cache(dfg_program *p, const char *prefix, const dfg_model *m, int64_t N, int64_t Tmax,
                             dfg_model_kv *out);
/* The caches of N sequences in groups of G that share a prompt of Tp columns, each prompt's keys
 * and values stored once: "<prefix>kv.<l>.k_prompt" / ".v_prompt" (N / G, Tp, Hkv*D) and the rows'
 * own columns Tp .. Tp+Tc-1, "<prefix>kv.<l>.k" / ".v" (N, Tc, Hkv*D); role KV_CACHE. Prefill
 * writes the prompt part once per group, decode writes the own part and attends to both
 * (dfg_attention_shared_cached). The copied cache of Tp + Tc columns a row holds G copies. */
DFG_API dfg_status dfg_model_kv_cache_shared(dfg_program *p, const char *prefix, const dfg_model *m, int64_t N,
                                             int64_t G, int64_t Tp, int64_t Tc, dfg_model_kv *out);
/* tokens (P, Tp) at positions 0 .. Tp-1: writes their keys and values into rows 0 .. Tp-1 of the
 * caches and returns the hidden states after ln_f (P, Tp, C). P is the caches' N, or N / G for
 * groups of G sequences that share a prompt: prompt i then fills cache rows i*G .. i*G+G-1, and
 * its positions are computed once, not G times. With kv->start (left-padded prompts) a prompt's
 * positions count from its first real column (dfg_nn_positions_from; the start of a group is its
 * first row's, kv->start[i*G]) and its real tokens attend to its real tokens only. */
DFG_API dfg_tensor *dfg_model_prefill(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tokens);
/* One new position for every sequence: tok (N, 1) i32 at column pos, read at run time: an i32
 * scalar (every row at one column), or (N) i32 one column a row (the rows of a multi-turn rollout
 * stand at different columns). Row b writes its token's key and value at cache row pos[b], attends
 * to rows 0 .. pos[b], and returns the hidden state after ln_f (N, 1, C). With kv->start: at
 * position max(pos[b] - start[b], 0), attending to cache rows start[b] .. pos[b]. A column outside
 * the caches fails the step. With pos (N) all equal the results are the scalar form's, bit for bit. */
DFG_API dfg_tensor *dfg_model_decode(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tok, dfg_tensor *pos);
/* Several known tokens a row at once (ops/nn/nn_extend.c): tokens (N, E) i32, row b's in the
 * columns col[b] .. col[b]+E-1 (col (N) i32, read at run time). Their keys and values go into
 * the caches at those columns from from[b] on ((N) i32); the window's columns before from[b] keep
 * what the caches hold, exactly. Query i of row b attends to cache rows 0 .. col[b]+i (with
 * kv->start: start[b] ..), after the writes, as dfg_model_decode's one; returns the hidden
 * states after ln_f (N, E, C). A window outside the caches fails the step. With the shared form
 * (dfg_model_kv_cache_shared) the window must lie in the rows' own part (col[b] >= Tp, E at most
 * its columns): the prompt part is read, never written. A multi-turn rollout
 * puts a tool's answer into its rows' context with it, in one pass instead of a decode run a token. */
DFG_API dfg_tensor *dfg_model_extend(dfg_graph *g, const dfg_model *m, const dfg_model_kv *kv, dfg_tensor *tokens,
                                     dfg_tensor *col, dfg_tensor *from);
/* tokens (B, T) i32 -> hidden states after ln_f (B, T, C). Positions are 0 .. T-1. */
DFG_API dfg_tensor *dfg_model_hidden(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens);
/* The same for left-padded rows: start (B) i32 each row's first real column (NULL: none). Row b's
 * real tokens sit at positions 0, 1, .. from start[b] and attend to its real tokens only, so they
 * get the states of the row unpadded; its pad columns get finite states nothing real reads. */
DFG_API dfg_tensor *dfg_model_hidden_padded(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, dfg_tensor *start);
/* n = P*G sequences in groups of G that share a prompt: rows i*G .. i*G+G-1 are prompts[i]
 * (P, Tp) followed by their own completions (n, Tc), at positions 0 .. Tp+Tc-1. The prompt
 * positions are computed once per group, not G times (ops/nn/nn_shared.c); the result equals
 * dfg_model_hidden of the n whole sequences, kept where it predicts a completion token: entry j of
 * (n, Tc, C) is the state at position Tp-1+j, after ln_f. start (P) i32 or NULL: left-padded
 * prompts, prompt i's first real column (as dfg_model_hidden_padded of the whole sequences). */
DFG_API dfg_tensor *dfg_model_hidden_grouped(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts, dfg_tensor *completions,
                                             dfg_tensor *start);
/* hidden (..., C) -> logits (..., V): hidden @ lm_head^T (wte^T when tied). */
DFG_API dfg_tensor *dfg_model_lm_head(dfg_graph *g, const dfg_model *m, dfg_tensor *hidden);
/* tokens (B, T) -> logits (B, T, V). */
DFG_API dfg_tensor *dfg_model_logits(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens);

/* ---------------------------------------------------------------- training helpers */

/* Persistent gradient buffers, as PyTorch's .grad: one zero-initialised STATE of role GRAD per
 * parameter ("<prefix>grad.<param>", the parameter's dtype and shape), for
 * dfg_backward_accumulate (micro-batches), in-place clipping and the optimizer; zero them with
 * dfg_assign_fill after the update. */
DFG_API dfg_status dfg_nn_grad_buffers(dfg_program *p, dfg_tensor *const *params, int n, const char *prefix, dfg_tensor **out);
/* dst[i] starts as src[i] (dfg_init_from for each i): e.g. a frozen reference model that starts
 * as the policy, also when the policy's weights come from `dfg run --weights`. */
DFG_API dfg_status dfg_nn_init_copy(dfg_program *p, dfg_tensor *const *dst, dfg_tensor *const *src, int n);

/* Data parallel (ops/nn/nn_dp.c): averages the n gradient buffers over the world's ranks in
 * place, before clipping and the optimizer, so that every rank takes the step of one process on
 * the whole batch (each rank's loss being normalised as its share of it). The buffers travel in
 * buckets of about bucket_bytes (0: 25 MiB, PyTorch DDP's default), last parameter first: the
 * order in which a backward pass finishes them. grads[i] become the buffers' new versions. A
 * no-op for world 1. Build it in the graph of the backward that finishes the buffers: in a
 * repeated stage (gradient accumulation) the buckets run on its last repeat only, and the
 * scheduler issues each as soon as its gradients are final (dfg_allreduce_last), so on a GPU the
 * communication overlaps the backward of the earlier layers. */
#define DFG_NN_BUCKET_BYTES ((int64_t)25 << 20)
DFG_API dfg_status dfg_nn_allreduce_grads(dfg_graph *g, dfg_tensor **grads, int n, int world, int64_t bucket_bytes);

/* One AdamW step on n parameters, built from dfg_adamw, with the state it needs (names start
 * with prefix, "" for the policy):
 *   "adamw.m.<param>", "adamw.v.<param>"  f32 moments (role OPTIM, zeros);
 *   "adamw.step"                          i32 scalar, the 1-based step count (+1 before the update);
 *   "master.<param>"                      for a bf16/f16 parameter only: its f32 master copy
 *                                         (role OPTIM), as a mixed-precision GPU run keeps.
 * A low-precision parameter is updated through its master: AdamW updates the master in f32 from
 * the 16-bit gradient (the kernel widens it), and the parameter becomes the master rounded back
 * to its dtype. The master starts as the parameter (dfg_init_from), so weights loaded into the
 * parameter with --weights reach the master too. Weight decay applies to matrices only (rank >=
 * 2: embeddings and linear weights), not to biases and LayerNorm gains, as Hugging Face's Trainer
 * and nanoGPT group them. */
DFG_API dfg_status dfg_nn_adamw_step(dfg_program *p, dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, int n,
                             dfg_adamw_config cfg, const char *prefix);

/* ---------------------------------------------------------------- learning-rate schedules (ops/nn/nn_schedule.c)
 * transformers' schedules (optimization.py), TRL's lr_scheduler_type: the rate of 0-based
 * optimizer step k is learning_rate x lambda(k) over `total` steps with `warmup` steps of warm-up:
 *   linear                k / max(1, warmup) while k < warmup, then max(0, (total - k) / max(1, total - warmup))
 *   cosine                the warm-up, then max(0, (1 + cos(pi progress)) / 2),
 *                         progress = (k - warmup) / max(1, total - warmup) (num_cycles 0.5)
 *   constant              1 (no warm-up, as get_scheduler builds it)
 *   constant_with_warmup  the warm-up, then 1 */
typedef enum { DFG_LR_LINEAR, DFG_LR_COSINE, DFG_LR_CONSTANT, DFG_LR_CONSTANT_WITH_WARMUP } dfg_lr_scheduler;
typedef struct {
    dfg_lr_scheduler type;
    int64_t total;  /* num_training_steps: the optimizer steps the schedule spans (0: not known) */
    int64_t warmup; /* num_warmup_steps */
    int64_t offset; /* optimizer steps before the schedule's first (a warm-up of another kind, at lr) */
    double lr;      /* the base rate, in double as transformers multiplies it */
    bool on;        /* the rate changes: AdamW reads it each step (dfg_nn_lr); else lr throughout */
    bool log;       /* log it as the metric learning_rate (on, or a schedule asked for by name) */
} dfg_lr_schedule;
DFG_API double dfg_lr_lambda(const dfg_lr_schedule *s, int64_t k);
DFG_API const char *dfg_lr_scheduler_name(dfg_lr_scheduler t);
/* Reads "lr_scheduler_type" (default linear when total > 0, else constant), "warmup_steps" and
 * "warmup_ratio" (transformers' get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio x
 * total)). total: the optimizer steps max_steps makes (0: max_steps not set); a schedule that
 * needs it without it is a program error that says to set max_steps. */
DFG_API dfg_status dfg_lr_schedule_from_settings(dfg_program *p, double lr, int64_t total, int64_t offset,
                                                 dfg_lr_schedule *out);
/* () f32, the rate of the optimizer step whose 1-based count `step` holds (offset steps before
 * the schedule's first): a lookup in the program's const table "<prefix>adamw.lr_schedule" of
 * each step's rate, rounded to f32 once; past its end the last rate holds (0 for linear and
 * cosine, transformers' linear's value there). NULL when the schedule is not on. */
DFG_API dfg_tensor *dfg_nn_lr(dfg_program *p, dfg_graph *g, const dfg_lr_schedule *s, dfg_tensor *step, const char *prefix);
/* dfg_nn_adamw_step with the schedule's rate (sched NULL or not on: dfg_nn_adamw_step itself);
 * *lr_out (may be NULL): the rate this step used, () f32, for the metric learning_rate. */
DFG_API dfg_status dfg_nn_adamw_step_scheduled(dfg_program *p, dfg_graph *g, dfg_tensor *const *params,
                                               dfg_tensor *const *grads, int n, dfg_adamw_config cfg,
                                               const dfg_lr_schedule *sched, const char *prefix, dfg_tensor **lr_out);

/* ---------------------------------------------------------------- GRPO (ops/nn/nn_grpo.c) */
/* Per-token log-probs of tokens (n, T) under the model: entry t of the result (n, T-1) is
 * log p(tokens[:, t+1] | tokens[:, <= t]) at the given sampling temperature, computed in f32. The
 * fuse pass turns it into linear_logprob: the logits never exist. start (n) i32 or NULL: left-padded
 * rows, each row's first real column (dfg_model_hidden_padded); entries before it are finite and
 * mean nothing. */
DFG_API dfg_tensor *dfg_grpo_token_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, float temperature,
                                        dfg_tensor *start);

/* The same log-probs for the completion tokens only, of groups that share their prompt (see
 * dfg_model_hidden_grouped): prompts (P, Tp), completions (n = P*G, Tc) -> (n, Tc), entry j is
 * log p(completions[:, j] | prompt, completions[:, < j]). start (P) i32 or NULL: left-padded prompts. */
DFG_API dfg_tensor *dfg_grpo_completion_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts, dfg_tensor *completions,
                                     float temperature, dfg_tensor *start);
/* The same two, also giving *entropy (the result's shape, f32): the entropy of the sampling
 * distribution softmax(logits / temperature) at each scored position, differentiable. It reads the
 * logits the log-probs read, so the fuse pass gives both from one linear_logprob: no logits either. */
DFG_API dfg_tensor *dfg_grpo_token_logp_entropy(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, float temperature,
                                                dfg_tensor *start, dfg_tensor **entropy);
DFG_API dfg_tensor *dfg_grpo_completion_logp_entropy(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts,
                                                     dfg_tensor *completions, float temperature, dfg_tensor *start,
                                                     dfg_tensor **entropy);

/* The state of a rollout in progress (all STATEs; N sequences of T positions), generated n rows
 * at a time (n = N: all at once): rows row0 .. row0+n-1 of tokens and mask are this call's. */
typedef struct {
    dfg_tensor *tokens; /* (N, T) i32: the prompts, then the tokens written so far */
    dfg_tensor *mask;   /* (N, T) f32: 1 on generated tokens that count (up to and with the first EOS) */
    dfg_tensor *done;   /* (n) f32: 1 once a sequence has produced its EOS */
    dfg_tensor *token;  /* (n, 1) i32: the last token of every sequence (the next step's input) */
    dfg_tensor *pos;    /* i32 scalar: the position of `token` */
    dfg_tensor *rng;    /* i32 (4): the Philox state sampling draws from */
    int64_t row0;       /* the rows' first index in tokens; row r draws as row row0 + r of one batch */
    /* i32 scalar or NULL: added to row0 for the draws only (a data-parallel rank's first row in the
     * whole batch, so that its rows draw as they would in one process) */
    dfg_tensor *draw_row0;
    int32_t pad;          /* the token a row gets after its EOS (transformers' pad_token_id there too) */
    dfg_tensor *finished; /* f32 scalar or NULL: set to 1 once every row is done (a decode loop's end) */
    /* (N, T) f32 or NULL: each written token's log-prob under the distribution it was drawn from
     * (TRL's sampling log-probs; 0 where the row was done): logits / temperature over the whole
     * vocabulary (what training computes, computed as training does) unless the settings penalise or
     * truncate it, then the penalised, truncated, renormalised one */
    dfg_tensor *logp;
    /* (n) i32 or NULL: each row's index in the whole batch, for its draws (rows gathered from the
     * batch: the rows still generating, decoded apart); draw_row0 is added to each */
    dfg_tensor *draw_rows;
    /* > 0: the last column a step may write. A step at pos = last_col writes nothing and leaves
     * pos there, and `finished` is set once pos reaches it: a loop whose run count is not bounded
     * by the columns left (dfg_stage_until in chunks) cannot write past them */
    int64_t last_col;
} dfg_grpo_rollout;
/* The token each row draws from logits (N, 1, V) under s (the repetition penalty counts each row's
 * tokens of r->tokens up to its r->pos: one column for every row, or one a row), as the step
 * below draws it; and when logp is not NULL, *logp (N): each token's sampling log-prob, under the
 * distribution it was drawn from when s truncates or penalises, else the whole distribution's at
 * the temperature (what training computes, bit for bit under batch_invariant). */
DFG_API dfg_tensor *dfg_grpo_draw(dfg_graph *g, const dfg_grpo_rollout *r, dfg_tensor *logits, dfg_sampling s,
                                  dfg_tensor **logp);
/* One generation step given the next-token logits (N, 1, V): samples with s (dfg_sample_with; the
 * repetition penalty counts the row's tokens of columns 0 .. pos of `tokens`, but the pad id;
 * temperature <= 0 is greedy), writes the token at position pos + 1 (pad in a row already done)
 * with its mask (1 - done), marks sequences that produced any of the n_eos ids eos[] (1 ..
 * DFG_GRPO_MAX_EOS; a model's config may name several, e.g. Llama 3's) as done, and advances
 * token and pos. Ids are compared in f32: exact below 2^24. A step after every row is done
 * writes pad and mask 0 only: a loop that stops there (dfg_stage_until on `finished`) leaves the
 * tensors a full loop would, when the completion columns start as pad. */
#define DFG_GRPO_MAX_EOS 8
DFG_API dfg_status dfg_grpo_sample_step(dfg_graph *g, const dfg_grpo_rollout *r, dfg_tensor *logits, dfg_sampling s,
                                const int32_t *eos, int n_eos);

typedef enum { DFG_GRPO_SCALE_GROUP, DFG_GRPO_SCALE_BATCH, DFG_GRPO_SCALE_NONE } dfg_grpo_scale;
/* rewards (N), rows g*G .. g*G+G-1 one prompt's group (G >= 2) -> advantages (N):
 * (r - group mean) / (std + 1e-4) with torch.std's unbiased std of the group (GROUP) or of the
 * whole batch (BATCH), or r - group mean (NONE), as TRL's scale_rewards. */
DFG_API dfg_tensor *dfg_grpo_advantages(dfg_graph *g, dfg_tensor *rewards, int64_t group, dfg_grpo_scale scale);

/* TRL's loss types (GRPOConfig.loss_type, TRL 1.9 / main of 2026-07): the grpo family clips the
 * ratio (PPO's min), cispo clips the importance weight and keeps every token's gradient (MiniMax-M1),
 * sapo replaces the clip by a sigmoid gate (Soft Adaptive Policy Optimization). */
typedef enum {
    DFG_GRPO_LOSS_GRPO,
    DFG_GRPO_LOSS_BNPO,
    DFG_GRPO_LOSS_DR_GRPO,
    DFG_GRPO_LOSS_DAPO,
    DFG_GRPO_LOSS_CISPO,
    DFG_GRPO_LOSS_SAPO,
    DFG_GRPO_LOSS_LUSPO, /* the grpo family's clipped loss, each sequence's weighted by its length (LUSPO) */
    DFG_GRPO_LOSS_VESPO  /* -phi(w) A logp: a gamma-shaped weight of the sequence's ratio w, no clipping (VESPO) */
} dfg_grpo_loss_type;
/* importance_sampling_level: one ratio per token, or per sequence (GSPO: exp of the mean log-ratio
 * over the sequence's scored tokens) */
typedef enum { DFG_GRPO_IS_TOKEN, DFG_GRPO_IS_SEQUENCE } dfg_grpo_is_level;
/* vllm_importance_sampling_mode, in the settings table's order */
typedef enum {
    DFG_GRPO_SAMPLING_TOKEN_TRUNCATE,
    DFG_GRPO_SAMPLING_TOKEN_MASK,
    DFG_GRPO_SAMPLING_SEQUENCE_TRUNCATE,
    DFG_GRPO_SAMPLING_SEQUENCE_MASK
} dfg_grpo_sampling_mode;
typedef struct {
    float beta, epsilon_low, epsilon_high;
    dfg_grpo_loss_type loss_type;
    int64_t n_total;               /* sequences in the whole step (all micro-batches) */
    int64_t max_completion_length; /* dr_grpo's normaliser */
    int micro_batches;             /* bnpo averages the micro-batches' token means */
    dfg_grpo_is_level is_level;
    float delta;                   /* > 0: the unclipped ratio's upper bound (INTELLECT-2's two-sided clipping); 0: none */
    float sapo_temperature_pos, sapo_temperature_neg; /* sapo's gate temperatures for A > 0 and A <= 0 */
    float top_entropy_quantile;    /* < 1: only tokens whose entropy is at or above the micro-batch's
                                      (1 - this) quantile train (needs entropy); 1: every token */
    int world;                     /* data parallel: the ranks whose micro-batches share the entropy
                                      quantile (gathered, as TRL's get_high_entropy_mask); 0 or 1: one */
    float entropy_coef;            /* the entropy bonus: loss - entropy_coef * mean entropy (needs entropy) */
    /* vllm_importance_sampling_*: the sampler's log-probs against the policy's before this step's
     * updates (TRL's old_per_token_logps), d = (old - sampling) m per token; rho = exp(d) (token
     * modes) or exp(sum of d over the sequence) (sequence modes), truncated to [clip_min, clip_max]
     * or set to 0 outside it (mask modes); -INFINITY / INFINITY: no bound (TRL's None). The
     * per-token loss is multiplied by rho (vespo: rho enters w instead). Off: sampling_correction false. */
    bool sampling_correction;
    dfg_grpo_sampling_mode sampling_mode;
    float sampling_clip_min, sampling_clip_max;
    /* off_policy_mask_threshold (DeepSeek-V3.2): a sequence with A < 0 whose mean over its scored
     * tokens of sampling - logp exceeds the threshold leaves the loss. Off: off_policy_mask false. */
    bool off_policy_mask;
    float off_policy_threshold;
    float vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg; /* vespo's gamma weight, by the sign of A */
    bool bias_correction_kl;       /* use_bias_correction_kl: the KL term times the ratio rho (DeepSeek-V3.2) */
} dfg_grpo_loss_config;

typedef struct {
    dfg_tensor *logp;          /* (n, T') the policy's per-token log-probs (differentiated) */
    dfg_tensor *old_logp;      /* (n, T') the policy before this step's updates, or NULL: detached logp */
    dfg_tensor *ref_logp;      /* (n, T') the reference model's, or NULL (beta 0) */
    dfg_tensor *advantages;    /* (n) */
    dfg_tensor *mask;          /* (n, T') f32: 1 on the scored completion tokens */
    dfg_tensor *active_tokens; /* f32 scalar: scored tokens in the whole step (dapo, cispo), or NULL */
    dfg_tensor *entropy;       /* (n, T') the policy's per-token entropy (differentiated), or NULL */
    /* (n, T') the sampler's log-prob of each token (TRL's sampling_per_token_logps), or NULL: no
     * sampler (no correction; the off-policy mask compares with old_logp) */
    dfg_tensor *sampling_logp;
    dfg_tensor *has_sampling;  /* f32 scalar or NULL (1): 0 for a step whose rollout has no sampler's log-probs */
} dfg_grpo_inputs;

/* This micro-batch's loss share and its metrics, each as TRL's _compute_loss logs it for one
 * micro-batch (a token mean over the scored tokens; with sequence-level ratios, a mean over the
 * sequences); NULL where the loss type has no such metric. */
typedef struct {
    dfg_tensor *loss;        /* scalar: this micro-batch's share (the shares of a step add up to its loss) */
    dfg_tensor *kl_sum;      /* scalar: sum of the KL term over the scored tokens (0 when beta is 0) */
    dfg_tensor *tokens;      /* scalar: scored tokens */
    dfg_tensor *entropy;     /* entropy (needs in->entropy) */
    dfg_tensor *clip_low_mean, *clip_low_min, *clip_high_mean, *clip_high_max, *clip_region_mean; /* the grpo family */
    dfg_tensor *cispo_clip_ratio; /* cispo */
    dfg_tensor *phi_seq_mean;     /* vespo: the mean over the sequences of phi */
    /* the importance-sampling correction (sampling_correction and a sampler), no gradient: rho as
     * the loss used it and before truncation or masking ((n, T') token modes, (n, 1) sequence
     * modes), and 1 where the two differ; each already 1 (0 for modified) for a step without a
     * sampler. NULL without the correction. */
    dfg_tensor *is_ratio, *is_raw, *is_modified;
    dfg_tensor *off_policy_mask; /* (n, 1) 1 = kept, no gradient; NULL without the mask */
} dfg_grpo_terms;

/* Per token, with rho = exp(logp - old) (token level) or exp(mean over the sequence of logp - old)
 * (sequence level), TRL's per-token loss: grpo family (and luspo) -min(min(rho, delta) A, clamp(rho,
 * 1 - eps_low, 1 + eps_high) A); cispo -sg(min(rho, eps_high)) A logp; sapo -sigmoid(tau (rho - 1)) 4
 * / tau A with tau by the sign of A; vespo -sg(phi) A logp, phi = exp(lambda + k log w - lambda w)
 * of the sequence's w = exp(sum of clamped logp - old, plus log of the sampling correction); times
 * the off-policy mask, the entropy mask (top_entropy_quantile) and the sampling correction (not
 * vespo); + beta (exp(ref - logp) - (ref - logp) - 1) (times rho with bias_correction_kl). loss_type
 * grpo, sapo: mean over the step's sequences of sum(l m) / max(sum(m), 1); bnpo: this micro-batch's
 * sum(l m) / max(sum(m), 1), divided by the number of micro-batches (TRL's per-batch
 * normalisation); dr_grpo: sum(l m) / (N max_new); luspo: sum(l m) / N (each sequence's mean times
 * its length); dapo, cispo, vespo: sum(l m) / the step's active tokens. An entropy bonus subtracts
 * entropy_coef times the mean entropy of the trained tokens, normalised as TRL does (by the active
 * tokens for dapo, cispo and vespo). */
DFG_API dfg_status dfg_grpo_loss(dfg_graph *g, const dfg_grpo_inputs *in, dfg_grpo_loss_config cfg, dfg_grpo_terms *out);

#ifdef __cplusplus
}
#endif
#endif
