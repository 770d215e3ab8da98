/* nn_arch.c - the architecture table (dfg_arch_info, dfg_nn.h): arch.def's rows, each with its
 * family's layout, config.json keys and refusal rules. Everything dfg knows of Hugging Face's
 * names for a model is here; the readers and writers of files (runtime/formats/model_config.c,
 * runtime/weights) and the builders (nn_config.c, nn_model.c) look it up. */
#include <string.h>

#include "dfg_nn.h"

/* ---------------------------------------------------------------- the families' layouts */
/* GPT2LMHeadModel: GPT2Model under "transformer.", Conv1D weights (in, out), the head tied to wte;
 * its files also hold the causal masks attn.bias and attn.masked_bias (buffers). PEFT's default
 * targets are TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING's. dfg's GPT-2 has no dropout: a
 * model exported for more training should not grow one. */
#define LAYOUT_GPT2                                                                                                   \
    .conv1d = true, .tied_head = true, .learned_positions = true, .layernorm = true, .hf_prefix = "transformer.",     \
    .embed = "wte", .pos_embed = "wpe", .blocks = "h", .norm_1 = "ln_1", .norm_2 = "ln_2", .final_norm = "ln_f",      \
    .lm_head = "lm_head", .q_norm = NULL, .k_norm = NULL,                                                             \
    .linears = {[DFG_LIN_C_ATTN] = "attn.c_attn", [DFG_LIN_O] = "attn.c_proj", [DFG_LIN_C_FC] = "mlp.c_fc",          \
                [DFG_LIN_MLP_PROJ] = "mlp.c_proj"},                                                                   \
    .buffers = ".attn.bias|.attn.masked_bias", .lora_targets = "c_attn",                                              \
    .config_extra = "{\"n_inner\":null,\"activation_function\":\"gelu_new\",\"resid_pdrop\":0.0,"                    \
                    "\"embd_pdrop\":0.0,\"attn_pdrop\":0.0,\"tie_word_embeddings\":true}"
/* LlamaForCausalLM and its kin: the model under "model." (part of the names), nn.Linear (out, in) */
#define LAYOUT_LLAMA                                                                                                  \
    .conv1d = false, .tied_head = false, .learned_positions = false, .layernorm = false, .hf_prefix = "",           \
    .embed = "model.embed_tokens", .pos_embed = NULL, .blocks = "model.layers", .norm_1 = "input_layernorm",          \
    .norm_2 = "post_attention_layernorm", .final_norm = "model.norm", .lm_head = "lm_head",                           \
    .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm",                                                       \
    .linears = {[DFG_LIN_Q] = "self_attn.q_proj", [DFG_LIN_K] = "self_attn.k_proj", [DFG_LIN_V] = "self_attn.v_proj", \
                [DFG_LIN_O] = "self_attn.o_proj", [DFG_LIN_GATE] = "mlp.gate_proj", [DFG_LIN_UP] = "mlp.up_proj",     \
                [DFG_LIN_DOWN] = "mlp.down_proj"},                                                                    \
    .buffers = "", .lora_targets = "q_proj,v_proj", .config_extra = "{\"hidden_act\":\"silu\",\"attention_dropout\":0.0}"

/* ---------------------------------------------------------------- the rows */
static const dfg_arch_info rows[DFG_ARCH_COUNT] = {
#define DFG_ARCH(id, type, cls, fam, b, qk)                                                                         \
    [DFG_ARCH_##id] = {.arch = DFG_ARCH_##id, .model_type = type, .hf_class = cls, .family = DFG_FAMILY_##fam,       \
                       .bias = DFG_ARCH_BIAS_##b, .qk_norm = qk, LAYOUT_##fam},
#include "arch.def"
#undef DFG_ARCH
};

/* ---------------------------------------------------------------- config.json
 * When a key applies: to a family, to every architecture, or by the row's bias. */
typedef enum { WHEN_GPT2, WHEN_LLAMA, WHEN_ALL, WHEN_BIAS_CONFIG, WHEN_BIAS_NONE } arch_when;

typedef struct {
    arch_when when;
    dfg_arch_key k;
} arch_key_row;

#define K(when, key, kind, field, null_skips, absent, absent_as) \
    {when, {key, DFG_ARCH_KEY_##kind, field, null_skips, absent, absent_as, NULL}}
static const arch_key_row key_rows[] = {
    /* GPT2Config */
    K(WHEN_GPT2, "n_layer", INT, "n_layer", false, NULL, NULL),
    K(WHEN_GPT2, "n_head", INT, "n_head", false, NULL, NULL),
    K(WHEN_GPT2, "n_embd", INT, "n_embd", false, NULL, NULL),
    K(WHEN_GPT2, "vocab_size", INT, "vocab_size", false, NULL, NULL),
    K(WHEN_GPT2, "n_positions", INT, "block_size", false, NULL, NULL),
    K(WHEN_GPT2, "layer_norm_epsilon", FLOAT, "ln_eps", false, NULL, NULL),
    K(WHEN_GPT2, "n_inner", INT, "n_inner", true, NULL, NULL),
    /* LlamaConfig, Qwen2Config, Qwen3Config */
    K(WHEN_LLAMA, "hidden_size", INT, "n_embd", false, NULL, NULL),
    K(WHEN_LLAMA, "num_hidden_layers", INT, "n_layer", false, NULL, NULL),
    K(WHEN_LLAMA, "num_attention_heads", INT, "n_head", false, NULL, NULL),
    /* absent or null: as many key/value heads as query heads (no grouping), as the configs do */
    K(WHEN_LLAMA, "num_key_value_heads", INT, "n_kv_head", true, NULL, "num_attention_heads"),
    K(WHEN_LLAMA, "intermediate_size", INT, "n_inner", false, NULL, NULL),
    K(WHEN_LLAMA, "head_dim", INT, "head_dim", true, NULL, NULL),
    K(WHEN_LLAMA, "vocab_size", INT, "vocab_size", false, NULL, NULL),
    K(WHEN_LLAMA, "max_position_embeddings", INT, "block_size", false, NULL, NULL),
    K(WHEN_LLAMA, "rms_norm_eps", FLOAT, "ln_eps", false, NULL, NULL),
    K(WHEN_LLAMA, "rope_theta", FLOAT, "rope_theta", false, NULL, NULL),
    K(WHEN_LLAMA, "tie_word_embeddings", BOOL, "tie_word_embeddings", false, "false", NULL),
    K(WHEN_BIAS_CONFIG, "attention_bias", BOOL, "attention_bias", false, "false", NULL),
    /* every architecture: the token ids generation stops at and pads with (null: not set) */
    K(WHEN_ALL, "eos_token_id", IDS, NULL, true, NULL, NULL),
    K(WHEN_ALL, "pad_token_id", ID, NULL, true, NULL, NULL),
    /* export only: GPT2Config's n_ctx, the positions again */
    {WHEN_GPT2, {"n_ctx", DFG_ARCH_KEY_INT, NULL, false, NULL, NULL, "n_positions"}},
};
#undef K
#define N_KEY_ROWS (int)(sizeof(key_rows) / sizeof(key_rows[0]))

typedef struct {
    arch_when when;
    dfg_arch_rule r;
} arch_rule_row;

static const arch_rule_row rule_rows[] = {
    {WHEN_GPT2, {"activation_function", DFG_ARCH_RULE_STRING, "gelu_new|gelu_pytorch_tanh", false,
                 "dfg's GPT-2 MLP uses the tanh GELU: \"gelu_new\" or \"gelu_pytorch_tanh\""}},
    {WHEN_GPT2, {"tie_word_embeddings", DFG_ARCH_RULE_BOOL, NULL, false, "dfg's GPT-2 output head is tied to wte"}},
    {WHEN_GPT2, {"scale_attn_weights", DFG_ARCH_RULE_BOOL, NULL, false, "dfg's attention scales scores by 1/sqrt(head size)"}},
    {WHEN_GPT2, {"scale_attn_by_inverse_layer_idx", DFG_ARCH_RULE_BOOL, NULL, true,
                 "dfg's GPT-2 attention does not scale scores by the layer index"}},
    {WHEN_LLAMA, {"hidden_act", DFG_ARCH_RULE_STRING, "silu", false, "dfg's Llama/Qwen MLP is SwiGLU: \"silu\" only"}},
    {WHEN_LLAMA, {"rope_scaling", DFG_ARCH_RULE_NULL, NULL, false, "dfg runs plain RoPE with rope_theta, no scaled RoPE"}},
    {WHEN_LLAMA, {"mlp_bias", DFG_ARCH_RULE_BOOL, NULL, true, "dfg's Llama/Qwen MLP has no biases"}},
    {WHEN_LLAMA, {"use_sliding_window", DFG_ARCH_RULE_BOOL, NULL, true,
                  "dfg's attention is full causal attention, no sliding window"}},
    /* Qwen3's q/k/v/o projections take their bias from this key (Qwen2's always have one) */
    {WHEN_BIAS_NONE, {"attention_bias", DFG_ARCH_RULE_BOOL, NULL, true, "dfg's attention for this model has no biases"}},
    {WHEN_LLAMA, {"attention_dropout", DFG_ARCH_RULE_ZERO, NULL, false, "dfg runs without dropout"}},
};
#define N_RULE_ROWS (int)(sizeof(rule_rows) / sizeof(rule_rows[0]))

static bool applies(arch_when when, const dfg_arch_info *a) {
    switch (when) {
    case WHEN_GPT2: return a->family == DFG_FAMILY_GPT2;
    case WHEN_LLAMA: return a->family == DFG_FAMILY_LLAMA;
    case WHEN_ALL: return true;
    case WHEN_BIAS_CONFIG: return a->bias == DFG_ARCH_BIAS_CONFIG;
    case WHEN_BIAS_NONE: return a->bias == DFG_ARCH_BIAS_NONE;
    }
    return false;
}

/* ---------------------------------------------------------------- lookups */

const dfg_arch_info *dfg_arch_info_of(dfg_arch a) { return a >= 0 && a < DFG_ARCH_COUNT ? &rows[a] : NULL; }

const dfg_arch_info *dfg_arch_find(const char *name, bool by_class) {
    for (int a = 0; name && a < DFG_ARCH_COUNT; a++)
        if (!strcmp(name, by_class ? rows[a].hf_class : rows[a].model_type)) return &rows[a];
    return NULL;
}

const char *dfg_arch_name(dfg_arch a) { return a >= 0 && a < DFG_ARCH_COUNT ? rows[a].model_type : "?"; }

int dfg_arch_config_keys(dfg_arch a, const dfg_arch_key **keys, int max) {
    const dfg_arch_info *info = dfg_arch_info_of(a);
    int n = 0;
    for (int i = 0; info && i < N_KEY_ROWS; i++)
        if (applies(key_rows[i].when, info) && n < max) keys[n++] = &key_rows[i].k;
    return n;
}

int dfg_arch_config_rules(dfg_arch a, const dfg_arch_rule **rules, int max) {
    const dfg_arch_info *info = dfg_arch_info_of(a);
    int n = 0;
    for (int i = 0; info && i < N_RULE_ROWS; i++)
        if (applies(rule_rows[i].when, info) && n < max) rules[n++] = &rule_rows[i].r;
    return n;
}

const char *dfg_arch_key_for(dfg_arch a, const char *field) {
    const dfg_arch_info *info = dfg_arch_info_of(a);
    for (int i = 0; info && field && i < N_KEY_ROWS; i++)
        if (applies(key_rows[i].when, info) && key_rows[i].k.field && !key_rows[i].k.from &&
            !strcmp(key_rows[i].k.field, field))
            return key_rows[i].k.key;
    return NULL;
}

/* ", " before every name, the first one's skipped */
static const char class_list[] = ""
#define DFG_ARCH(id, type, cls, family, b, qk) ", " cls
#include "arch.def"
#undef DFG_ARCH
    ;
static const char type_list[] = ""
#define DFG_ARCH(id, type, cls, family, b, qk) ", " type
#include "arch.def"
#undef DFG_ARCH
    ;

const char *dfg_arch_class_list(void) { return class_list + 2; }
const char *dfg_arch_type_list(void) { return type_list + 2; }
