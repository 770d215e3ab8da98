/* nn_config.c - model and optimizer configurations from a pipeline's settings, with Hugging Face's
 * names (config.json's for the model, TrainingArguments' for AdamW). `dfg compile --set model=DIR`
 * turns DIR/config.json into these settings before the pipeline runs (runtime/formats/model_config.c), so
 * this layer never reads a file: a plan records every value it was built with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"

dfg_model_config dfg_gpt2_config_default(void) {
    return (dfg_model_config){.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .block_size = 1024,
                              .ln_eps = 1e-5f, .dtype = DFG_F32, .arch = DFG_ARCH_GPT2, .rope_theta = 10000.0f,
                              .tie_word_embeddings = true};
}

dfg_model_config dfg_model_config_resolve(dfg_model_config c) {
    if (c.n_kv_head <= 0) c.n_kv_head = c.n_head;
    if (c.head_dim <= 0 && c.n_head > 0) c.head_dim = c.n_embd / c.n_head;
    if (c.n_inner <= 0) c.n_inner = 4 * c.n_embd;
    const dfg_arch_info *a = dfg_arch_info_of(c.arch);
    if (!a) return c;
    if (a->tied_head) c.tie_word_embeddings = true;
    if (a->learned_positions) /* GPT-2's heads split n_embd, none grouped */
        c.n_kv_head = c.n_head, c.head_dim = c.n_head > 0 ? c.n_embd / c.n_head : 0;
    if (a->bias == DFG_ARCH_BIAS_ALL || a->bias == DFG_ARCH_BIAS_QKV) c.attention_bias = true;
    if (a->bias == DFG_ARCH_BIAS_NONE) c.attention_bias = false;
    c.qk_norm = a->qk_norm;
    return c;
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

static int setting_i(dfg_program *p, const char *key, int def) {
    int64_t v = dfg_setting_int(p, key, def);
    if (v < -(1ll << 30) || v > (1ll << 30)) {
        dfg_program_fail(p, DFG_ERR_ARG, "%s = %lld is out of range", key, (long long)v);
        return def;
    }
    return (int)v;
}

/* The setting that fills field `f` in m's architecture (the table's config.json key). */
static const char *key(const dfg_model_config *m, const char *f) {
    const char *k = dfg_arch_key_for(m->arch, f);
    return k ? k : f;
}

/* The GPT-2 family's keys (GPT2Config's names) */
static void read_gpt2(dfg_program *p, dfg_model_config d, dfg_model_config *m) {
    m->n_layer = setting_i(p, key(m, "n_layer"), d.n_layer);
    m->n_head = setting_i(p, key(m, "n_head"), d.n_head);
    m->n_embd = setting_i(p, key(m, "n_embd"), d.n_embd);
    m->vocab_size = setting_i(p, key(m, "vocab_size"), d.vocab_size);
    m->block_size = setting_i(p, key(m, "block_size"), d.block_size);
    m->ln_eps = setting_f(p, key(m, "ln_eps"), d.ln_eps > 0 ? d.ln_eps : 1e-5f);
    m->n_inner = setting_i(p, key(m, "n_inner"), d.arch == DFG_ARCH_GPT2 ? d.n_inner : 0);
}

/* The Llama family's keys (LlamaConfig's, Qwen2Config's, Qwen3Config's names); a GPT-2 default
 * (the examples' presets) stands in for the same sizes */
static void read_llama(dfg_program *p, dfg_model_config d, dfg_model_config *m) {
    m->n_layer = setting_i(p, key(m, "n_layer"), d.n_layer);
    m->n_head = setting_i(p, key(m, "n_head"), d.n_head);
    m->n_kv_head = setting_i(p, key(m, "n_kv_head"), d.n_kv_head > 0 ? d.n_kv_head : m->n_head);
    m->n_embd = setting_i(p, key(m, "n_embd"), d.n_embd);
    m->head_dim = setting_i(p, key(m, "head_dim"), d.head_dim > 0 ? d.head_dim : (m->n_head > 0 ? m->n_embd / m->n_head : 0));
    m->n_inner = setting_i(p, key(m, "n_inner"), d.n_inner > 0 ? d.n_inner : 4 * m->n_embd);
    m->vocab_size = setting_i(p, key(m, "vocab_size"), d.vocab_size);
    m->block_size = setting_i(p, key(m, "block_size"), d.block_size);
    m->ln_eps = setting_f(p, key(m, "ln_eps"), d.arch == DFG_ARCH_GPT2 ? 1e-6f : d.ln_eps);
    m->rope_theta = setting_f(p, key(m, "rope_theta"), d.rope_theta > 0 ? d.rope_theta : 10000.0f);
    m->tie_word_embeddings =
        dfg_setting_bool(p, key(m, "tie_word_embeddings"), d.arch == DFG_ARCH_GPT2 ? false : d.tie_word_embeddings);
    if (dfg_arch_key_for(m->arch, "attention_bias")) /* the architectures whose config says (Llama's) */
        m->attention_bias = dfg_setting_bool(p, key(m, "attention_bias"), d.arch == m->arch && d.attention_bias);
}

/* Hugging Face's torch_dtype: bf16 weights and activations on the GPU by default (f32 masters and
 * moments come from dfg_nn_adamw_step); float32 there computes as the CPU does, so an emulated GPU
 * run can be compared tightly with a CPU run */
static dfg_status read_dtype(dfg_program *p, dfg_model_config *m) {
    bool cuda = !strcmp(dfg_setting_str(p, "target", "cpu"), "cuda");
    const char *dt = dfg_setting_str(p, "torch_dtype", cuda ? "bfloat16" : "float32");
    if (!strcmp(dt, "float32") || !strcmp(dt, "f32")) m->dtype = DFG_F32;
    else if (!strcmp(dt, "bfloat16") || !strcmp(dt, "bf16")) m->dtype = DFG_BF16;
    else return dfg_program_fail(p, DFG_ERR_ARG, "torch_dtype must be bfloat16 or float32, got '%s'", dt);
    if (!cuda && m->dtype != DFG_F32)
        return dfg_program_fail(p, DFG_ERR_ARG, "torch_dtype %s needs --target cuda: the CPU kernels compute in float32", dt);
    return DFG_OK;
}

static dfg_status check_ranges(dfg_program *p, const dfg_model_config *m) {
    bool gpt2 = dfg_arch_info_of(m->arch)->learned_positions; /* GPT-2's heads split n_embd; no RoPE */
    const char *layers = key(m, "n_layer"), *heads = key(m, "n_head"), *width = key(m, "n_embd");
    if (m->n_layer < 1 || m->n_layer > DFG_MODEL_MAX_LAYERS)
        return dfg_program_fail(p, DFG_ERR_ARG, "%s must be in 1..%d, got %d", layers, DFG_MODEL_MAX_LAYERS, m->n_layer);
    if (m->n_head < 1 || m->n_embd < 1 || (gpt2 && m->n_embd % m->n_head))
        return dfg_program_fail(p, DFG_ERR_ARG, "%s (%d) must divide %s (%d)", heads, m->n_head, width, m->n_embd);
    if (m->vocab_size < 3 || m->vocab_size > (1 << 24))
        return dfg_program_fail(p, DFG_ERR_ARG, "vocab_size must be in 3..%d, got %d", 1 << 24, m->vocab_size);
    if (m->block_size < 1 || m->block_size > (1 << 20))
        return dfg_program_fail(p, DFG_ERR_ARG, "%s must be in 1..%d, got %d", key(m, "block_size"),
                                1 << 20, m->block_size);
    if (!(m->ln_eps > 0))
        return dfg_program_fail(p, DFG_ERR_ARG, "%s must be > 0", key(m, "ln_eps"));
    if (m->n_inner < 1 || m->n_inner > (1 << 24))
        return dfg_program_fail(p, DFG_ERR_ARG, "%s must be in 1..%d, got %d", key(m, "n_inner"),
                                1 << 24, m->n_inner);
    if (gpt2) return DFG_OK;
    if (m->n_kv_head < 1 || m->n_head % m->n_kv_head)
        return dfg_program_fail(p, DFG_ERR_ARG, "num_key_value_heads (%d) must divide num_attention_heads (%d)",
                                m->n_kv_head, m->n_head);
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > (1 << 16))
        return dfg_program_fail(p, DFG_ERR_ARG, "head_dim must be even and in 2..%d (rotary positions rotate pairs), got %d",
                                1 << 16, m->head_dim);
    if (!(m->rope_theta > 0) || m->rope_theta > 1e30f)
        return dfg_program_fail(p, DFG_ERR_ARG, "rope_theta must be finite and > 0");
    return DFG_OK;
}

dfg_status dfg_model_config_from_settings(dfg_program *p, dfg_model_config d, dfg_model_config *out) {
    if (!p || !out) return DFG_ERR_ARG;
    dfg_setting_str(p, "model", ""); /* the directory config.json came from, when it did */
    const char *type = dfg_setting_str(p, "model_type", dfg_arch_name(d.arch));
    const dfg_arch_info *a = dfg_arch_find(type, false);
    if (!a) return dfg_program_fail(p, DFG_ERR_ARG, "model_type must be one of %s, got '%s'", dfg_arch_type_list(), type);
    dfg_model_config m = d;
    m.arch = a->arch;
    if (a->family == DFG_FAMILY_GPT2) read_gpt2(p, d, &m);
    else read_llama(p, d, &m);
    dfg_status st = read_dtype(p, &m);
    if (st || (st = dfg_program_status(p))) return st;
    m = dfg_model_config_resolve(m);
    *out = m;
    return check_ranges(p, &m);
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
