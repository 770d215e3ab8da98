/* nn_lora.c - parameter-efficient fine-tuning as PEFT and bitsandbytes set it up: the settings
 * (LoraConfig's and BitsAndBytesConfig's names), which linears an adapter sits on (PEFT's
 * target_modules rule), the adapters' tensors and initialisation, the linear with its adapter, and
 * the base model as the adapters switched off. nn_model.c calls these while it builds a model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_internal.h"

/* ---------------------------------------------------------------- settings */
dfg_status dfg_lora_config_from_settings(dfg_program *p, dfg_arch arch, dfg_lora_config *out) {
    if (!p || !out) return DFG_ERR_ARG;
    dfg_lora_config c = {0};
    int64_t r = dfg_setting_int(p, "lora_r", 0);
    /* PEFT's LoraConfig defaults: lora_alpha 8, lora_dropout 0 (TRL's examples set 0.05; dfg
     * runs adapters without dropout, so a request for it is refused, not ignored) */
    double alpha = dfg_setting_float(p, "lora_alpha", 8.0);
    double dropout = dfg_setting_float(p, "lora_dropout", 0.0);
    c.rslora = dfg_setting_bool(p, "use_rslora", false);
    int n_targets = dfg_setting_list(p, "lora_target_modules", ""); /* checked, blanks dropped, as "a,b" */
    const char *targets = n_targets > 0 ? dfg_program_str(p, "lora_target_modules") : "";
    c.load_in_4bit = dfg_setting_bool(p, "load_in_4bit", false);
    const char *qtype = dfg_setting_str(p, "bnb_4bit_quant_type", "nf4");
    c.double_quant = dfg_setting_bool(p, "bnb_4bit_use_double_quant", false);
    dfg_status st = dfg_program_status(p);
    if (st) return st;
    if (r < 0 || r > 65536) return dfg_program_fail(p, DFG_ERR_ARG, "lora_r must be in 0..65536 (0: no adapters), got %lld", (long long)r);
    if (!(alpha > 0) || alpha > 1e6) return dfg_program_fail(p, DFG_ERR_ARG, "lora_alpha must be > 0, got %g", alpha);
    if (dropout != 0.0)
        return dfg_program_fail(p, DFG_ERR_UNSUPPORTED, "lora_dropout = %g: dfg's adapters run without dropout (set 0)", dropout);
    if (strcmp(qtype, "nf4"))
        return dfg_program_fail(p, DFG_ERR_UNSUPPORTED, "bnb_4bit_quant_type must be nf4, got '%s'", qtype);
    if (c.load_in_4bit && r == 0)
        return dfg_program_fail(p, DFG_ERR_ARG, "load_in_4bit needs lora_r > 0: 4-bit weights are frozen, so only adapters can train");
    if (strlen(targets) >= sizeof(c.targets))
        return dfg_program_fail(p, DFG_ERR_ARG, "lora_target_modules is longer than %d characters", DFG_LORA_TARGETS_MAX - 1);
    c.r = (int)r;
    c.alpha = (float)alpha;
    /* PEFT's default targets for the architecture (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING) */
    const dfg_arch_info *info = dfg_arch_info_of(arch);
    if (!targets[0] && !info)
        return dfg_program_fail(p, DFG_ERR_ARG, "lora_target_modules: no default for architecture %d", (int)arch);
    snprintf(c.targets, sizeof(c.targets), "%s", targets[0] ? targets : info->lora_targets);
    *out = c;
    return DFG_OK;
}

float dfg_lora_scale(const dfg_lora_config *c) {
    return c->rslora ? c->alpha / sqrtf((float)c->r) : c->alpha / (float)c->r;
}

/* ---------------------------------------------------------------- which linears */
/* "<blocks>.<layer>.<linear>" from the architecture's table (arch.def, nn_arch.c) */
bool dfg_model_linear_path(const dfg_model_config *cfg, int layer, dfg_linear_slot slot, char *buf, size_t len) {
    const dfg_arch_info *a = cfg ? dfg_arch_info_of(cfg->arch) : NULL;
    if (!a || (unsigned)slot >= DFG_LIN_COUNT || !a->linears[slot]) return false;
    snprintf(buf, len, "%s.%d.%s", a->blocks, layer, a->linears[slot]);
    return true;
}

/* "q_proj, k_proj, ...": the last part of each linear's path in the architecture's table, once
 * each (GPT-2's attn.c_proj and mlp.c_proj are both c_proj), for a message */
static void linear_names(const dfg_arch_info *a, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; a && k < DFG_LIN_COUNT; k++) {
        if (!a->linears[k]) continue;
        const char *dot = strrchr(a->linears[k], '.'), *name = dot ? dot + 1 : a->linears[k];
        bool seen = false;
        for (int j = 0; j < k && !seen; j++) {
            const char *d = a->linears[j] ? strrchr(a->linears[j], '.') : NULL;
            seen = a->linears[j] && !strcmp(d ? d + 1 : a->linears[j], name);
        }
        if (!seen) at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s", at ? ", " : "", name);
    }
}

/* PEFT's rule for a list of target names: the module's path is the name, or ends in "." + name. */
static bool path_matches(const char *path, const char *name, size_t n) {
    size_t k = strlen(path);
    if (k == n && !strncmp(path, name, n)) return true;
    return k > n && path[k - n - 1] == '.' && !strncmp(path + k - n, name, n);
}

bool dfg_lora_targets(const dfg_lora_config *c, const char *path) {
    if (!strcmp(c->targets, "all-linear")) return true;
    for (const char *s = c->targets; *s;) {
        size_t n = strcspn(s, ",");
        while (n && *s == ' ') s++, n--;
        size_t m = n;
        while (m && s[m - 1] == ' ') m--;
        if (m && path_matches(path, s, m)) return true;
        s += n;
        if (*s == ',') s++;
    }
    return false;
}

/* Every name of lora_target_modules must match some linear of the model (PEFT raises "Target
 * modules ... not found in the base model" too): a misspelt name would train nothing there. */
dfg_status dfg_lora_check_targets(dfg_program *p, const dfg_model_config *cfg) {
    const dfg_lora_config *c = &cfg->lora;
    if (!strcmp(c->targets, "all-linear")) return DFG_OK;
    for (const char *s = c->targets; *s;) {
        size_t n = strcspn(s, ",");
        char name[DFG_LORA_TARGETS_MAX];
        snprintf(name, sizeof(name), "%.*s", (int)n, s);
        dfg_lora_config one = *c;
        snprintf(one.targets, sizeof(one.targets), "%s", name);
        bool hit = false;
        char path[160];
        for (int l = 0; l < cfg->n_layer && !hit; l++)
            for (int k = 0; k < DFG_LIN_COUNT && !hit; k++)
                hit = dfg_model_linear_path(cfg, l, (dfg_linear_slot)k, path, sizeof(path)) && dfg_lora_targets(&one, path);
        if (!hit) {
            char names[200];
            linear_names(dfg_arch_info_of(cfg->arch), names, sizeof(names));
            return dfg_program_fail(p, DFG_ERR_ARG, "lora_target_modules: '%s' matches no linear of this %s model (%s, or all-linear)",
                                    name, dfg_arch_name(cfg->arch), names);
        }
        s += n;
        if (*s == ',') s++;
    }
    return DFG_OK;
}

/* ---------------------------------------------------------------- adapters */
dfg_status dfg_lora_add(dfg_program *p, dfg_model *m, int layer, dfg_linear_slot slot, int64_t in, int64_t out) {
    const dfg_lora_config *c = &m->cfg.lora;
    char path[160], name[200];
    if (c->r <= 0 || !dfg_model_linear_path(&m->cfg, layer, slot, path, sizeof(path)) || !dfg_lora_targets(c, path))
        return DFG_OK;
    /* PEFT's reset_lora_parameters: kaiming_uniform_(A, a=sqrt(5)), a bound of
     * sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(in); B zeros, so the adapted model starts as the base */
    float bound = 1.0f / sqrtf((float)in);
    dfg_lora_adapter *ad = &m->h[layer].lora[slot];
    snprintf(name, sizeof(name), "%s.lora_A.weight", path);
    ad->a = dfg_param(p, name, m->cfg.dtype, DFG_SHAPE(c->r, in), dfg_init_uniform(-bound, bound));
    snprintf(name, sizeof(name), "%s.lora_B.weight", path);
    ad->b = dfg_param(p, name, m->cfg.dtype, DFG_SHAPE(out, c->r), dfg_init_zeros());
    ad->scale = dfg_lora_scale(c);
    if (ad->a && ad->b && m->n_params + 2 <= (int)(sizeof(m->params) / sizeof(m->params[0])))
        m->params[m->n_params++] = ad->a, m->params[m->n_params++] = ad->b;
    return dfg_program_status(p);
}

dfg_tensor *dfg_lora_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, const dfg_lora_adapter *ad,
                            bool conv1d) {
    dfg_tensor *y = dfg_matmul(g, x, w, false, !conv1d); /* (..., out): Conv1D's w is (in, out), Linear's (out, in) */
    if (b) y = dfg_bias_add(g, y, b);
    if (!ad || !ad->a) return y;
    dfg_tensor *h = dfg_scale(g, dfg_matmul(g, x, ad->a, false, true), ad->scale); /* (..., r) */
    return dfg_add(g, y, dfg_matmul(g, h, ad->b, false, true));                  /* (..., out) */
}

void dfg_model_adapter_off(const dfg_model *m, dfg_model *out) {
    *out = *m;
    for (int l = 0; l < DFG_MODEL_MAX_LAYERS; l++) memset(out->h[l].lora, 0, sizeof(out->h[l].lora));
    out->n_params = 0; /* the base trains nothing */
}
