/* lora_io.c - a LoRA plan's adapters in and out in PEFT's format, and the policy merged into its
 * base as a Hugging Face model directory.
 *
 * A LoRA plan (ops/nn/nn_lora.c) keeps the model's weights as frozen STATEs of role base_model
 * under their Hugging Face names and its adapters as PARAMs "<module>.lora_A.weight" (r, in) and
 * "<module>.lora_B.weight" (out, r). PEFT's save_pretrained writes the same tensors as
 * "base_model.model.<module>.lora_A.weight" (the PeftModel wraps the Hugging Face model, whose
 * GPT-2 modules sit under "transformer.") in adapter_model.safetensors, next to
 * adapter_config.json. The scale alpha / r (alpha / sqrt(r) with use_rslora) lives in the config,
 * so a loaded adapter must have the plan's r, alpha and use_rslora: the same tensors under another
 * scale would be another model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../../ops/dfg_ops.h"
#include "../../ops/dtype.h"
#include "../../ops/nn/nn_internal.h"
#include "../formats/fileio.h"
#include "weights_internal.h"

#define LORA_MAX_CONFIG (1u << 20)
#define LORA_A ".lora_A.weight"
#define LORA_B ".lora_B.weight"

static const dfg_program *prog(const dfg_runtime *rt) { return dfg_runtime_program(rt); }

/* GPT-2's Conv1D weights are (in, out): PEFT's fan_in_fan_out, and a merge adds (B A)^T */
static bool conv1d(const dfg_runtime *rt) { return dfg_wt_arch(dfg_runtime_program(rt))->conv1d; }

static dfg_status need_lora(dfg_runtime *rt, const char *what) {
    if (dfg_wt_lora_plan(dfg_runtime_program(rt))) return DFG_OK;
    return dfg_wt_fail(rt, DFG_ERR_ARG, false, "%s: the plan has no adapters (compile it with --set lora_r=R)", what);
}

/* The plan's LoRA settings as parsed when they were set (the typed getters: use_rslora=1, =yes
 * and =true are one value), and its scale by the builder's own formula (ops/nn/nn_lora.c). */
static dfg_lora_config plan_lora(const dfg_runtime *rt) {
    return (dfg_lora_config){.r = (int)dfg_program_int(prog(rt), "lora_r"),
                             .alpha = (float)dfg_program_float(prog(rt), "lora_alpha"),
                             .rslora = dfg_program_bool(prog(rt), "use_rslora")};
}

/* ---------------------------------------------------------------- reading an adapter */
/* The config's facts that change what the tensors compute must be the plan's. */
static dfg_status check_config(dfg_runtime *rt, const char *path, const cJSON *o) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA")))
        return dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: peft_type must be LORA", path);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r"), *alpha = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    if (!cJSON_IsNumber(r) || !cJSON_IsNumber(alpha))
        return dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: needs the numbers r and lora_alpha", path);
    dfg_lora_config plan = plan_lora(rt);
    double plan_r = plan.r, plan_alpha = plan.alpha;
    if (r->valuedouble != plan_r || (float)alpha->valuedouble != (float)plan_alpha)
        return dfg_wt_fail(rt, DFG_ERR_ARG, false,
                           "%s: the adapter has r=%g, lora_alpha=%g; the plan lora_r=%g, lora_alpha=%g (compile with "
                           "those --set values)", path, r->valuedouble, alpha->valuedouble, plan_r, plan_alpha);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "use_rslora");
    bool plan_rs = plan.rslora;
    if ((cJSON_IsTrue(rs) ? true : false) != plan_rs)
        return dfg_wt_fail(rt, DFG_ERR_ARG, false, "%s: use_rslora is %s in the adapter and %s in the plan", path,
                           cJSON_IsTrue(rs) ? "true" : "false", plan_rs ? "true" : "false");
    static const char *const unsupported[] = {"use_dora", "modules_to_save", "rank_pattern", "alpha_pattern",
                                              "layers_to_transform"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, unsupported[i]);
        bool set = v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) &&
                   !((cJSON_IsObject(v) || cJSON_IsArray(v)) && cJSON_GetArraySize(v) == 0);
        if (set) return dfg_wt_fail(rt, DFG_ERR_UNSUPPORTED, false, "%s: %s is set; dfg's adapters have none", path, unsupported[i]);
    }
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "bias");
    if (bias && (!cJSON_IsString(bias) || strcmp(bias->valuestring, "none")))
        return dfg_wt_fail(rt, DFG_ERR_UNSUPPORTED, false, "%s: bias must be \"none\" (dfg trains the adapters alone)", path);
    return DFG_OK;
}

dfg_status dfg_runtime_load_adapter(dfg_runtime *rt, const char *dir, int *n_loaded) {
    if (n_loaded) *n_loaded = 0;
    if (!rt) return DFG_ERR_ARG;
    if (!dir || !*dir) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "--adapter: the directory is empty");
    dfg_status s = need_lora(rt, dir);
    if (s) return s;
    char path[4200], err[1024], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    if ((s = dfg_file_read(path, NULL, LORA_MAX_CONFIG, "an adapter_config.json", &text, &len, err, sizeof(err))))
        return dfg_wt_fail(rt, s, false, "%s (a PEFT adapter directory has adapter_config.json)", err);
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    s = o && cJSON_IsObject(o) ? check_config(rt, path, o) : dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: not a JSON object", path);
    cJSON_Delete(o);
    if (s) return s;
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    return dfg_wt_load_adapter_file(rt, path, n_loaded);
}

/* ---------------------------------------------------------------- reading tensors out */
static bool has_role(const dfg_tensor *t, const void *role) { return t->role == *(const dfg_role *)role; }

/* The persistent tensors of one role (PARAMs: role param), read into host memory. */
static dfg_status gather_role(dfg_runtime *rt, dfg_role role, dfg_wt_set *out) {
    return dfg_wt_gather(rt, has_role, &role, out);
}

/* ---------------------------------------------------------------- writing an adapter */
/* PEFT's target_modules as the plan names them: the list given, or for all-linear the distinct
 * last names of the adapted modules (PEFT saves all-linear expanded too). */
static cJSON *target_list(const dfg_wt_set *a) {
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list && i < a->n; i++) {
        const char *name = a->ts[i].name, *end = strstr(name, LORA_A);
        if (!end) continue;
        const char *dot = end;
        while (dot > name && dot[-1] != '.') dot--;
        char leaf[128];
        snprintf(leaf, sizeof(leaf), "%.*s", (int)(end - dot), dot);
        bool seen = false;
        for (int k = 0; k < cJSON_GetArraySize(list) && !seen; k++) seen = !strcmp(cJSON_GetArrayItem(list, k)->valuestring, leaf);
        if (!seen) cJSON_AddItemToArray(list, cJSON_CreateString(leaf));
    }
    return list;
}

static dfg_status write_adapter_config(dfg_runtime *rt, const char *dir, const dfg_wt_set *a) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    const char *model = dfg_program_str(prog(rt), "model");
    dfg_lora_config plan = plan_lora(rt);
    if (*model) cJSON_AddStringToObject(o, "base_model_name_or_path", model);
    else cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(o, "r", plan.r);
    cJSON_AddNumberToObject(o, "lora_alpha", dfg_program_float(prog(rt), "lora_alpha"));
    cJSON_AddNumberToObject(o, "lora_dropout", dfg_program_float(prog(rt), "lora_dropout"));
    cJSON_AddBoolToObject(o, "use_rslora", plan.rslora);
    cJSON_AddBoolToObject(o, "use_dora", false);
    cJSON_AddBoolToObject(o, "fan_in_fan_out", conv1d(rt));
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "inference_mode", true);
    cJSON_AddBoolToObject(o, "init_lora_weights", true);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddItemToObject(o, "target_modules", target_list(a));
    dfg_status s = dfg_wt_write_json(rt, dir, "adapter_config.json", o);
    cJSON_Delete(o);
    return s;
}

dfg_status dfg_runtime_save_adapter(dfg_runtime *rt, const char *dir) {
    if (!rt) return DFG_ERR_ARG;
    dfg_status s = need_lora(rt, "save");
    if (!s) s = dfg_wt_make_dir(rt, dir);
    if (s) return s;
    dfg_wt_set a = {0};
    s = gather_role(rt, DFG_ROLE_PARAM, &a);
    char prefix[128]; /* PEFT's names: the PeftModel around the class, whose base model may be a module of it */
    snprintf(prefix, sizeof(prefix), "base_model.model.%s", dfg_wt_arch(dfg_runtime_program(rt))->hf_prefix);
    for (int i = 0; i < a.n && !s; i++) {
        size_t len = strlen(prefix) + strlen(a.ts[i].name) + 1;
        if (!(a.names[i] = malloc(len))) s = dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
        else snprintf(a.names[i], len, "%s%s", prefix, a.ts[i].name), a.ts[i].name = a.names[i];
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    if (!s) s = dfg_wt_write_tensors(rt, path, a.ts, a.n);
    if (!s) s = write_adapter_config(rt, dir, &a);
    dfg_wt_set_free(&a);
    /* what a trainer's save_model leaves beside the adapter: the model card and the tokenizer */
    if (!s) s = dfg_wt_write_adapter_card(rt, dir);
    if (!s) s = dfg_wt_copy_source_files(rt, dir, true);
    return s;
}

/* ---------------------------------------------------------------- merging */
static size_t aligned(size_t n) { return (n + 15) & ~(size_t)15; }

/* The part "<stem>.<part>" of base among the gathered tensors, or NULL. */
static const dfg_st_tensor *nf4_part(const dfg_wt_set *base, const char *stem, size_t len, const char *part) {
    char name[512];
    snprintf(name, sizeof(name), "%.*s.%s", (int)len, stem, part);
    for (int i = 0; i < base->n; i++)
        if (!strcmp(base->ts[i].name, name)) return &base->ts[i];
    return NULL;
}

/* base with every NF4 weight (load_in_4bit: "<w>.nf4" and its absmax tensors) replaced by "<w>"
 * dequantised (the kernels' values) in dt, the dtype of the plan's other base weights, at the
 * shape the plan's dequantisations give it (packed codes of an odd row length are flat). */
static dfg_status dense_base(dfg_runtime *rt, const dfg_wt_set *base, dfg_dtype dt, dfg_wt_set *out) {
    size_t total = 1;
    for (int i = 0; i < base->n; i++) /* a packed weight's 2 values a byte in dt */
        total += aligned(base->ts[i].dtype == DFG_U8 ? 2 * base->ts[i].bytes * dfg_dtype_size(dt) : base->ts[i].bytes);
    out->ts = calloc((size_t)base->n + 1, sizeof(*out->ts));
    out->names = calloc((size_t)base->n + 1, sizeof(*out->names));
    out->host = malloc(total);
    if (!out->ts || !out->names || !out->host) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save --merge: out of memory");
    size_t off = 0;
    for (int i = 0; i < base->n; i++) {
        const dfg_st_tensor *t = &base->ts[i];
        const char *nf4 = strstr(t->name, ".nf4");
        if (strstr(t->name, ".absmax")) continue; /* read with its codes */
        if (!nf4 || nf4[4] || t->dtype != DFG_U8) { /* a weight kept as it is */
            memcpy(out->host + off, t->data, t->bytes);
            out->ts[out->n] = *t, out->ts[out->n++].data = out->host + off, off += aligned(t->bytes);
            continue;
        }
        size_t stem = (size_t)(nf4 - t->name);
        const dfg_st_tensor *am = nf4_part(base, t->name, stem, "absmax"), *q = nf4_part(base, t->name, stem, "absmax_q");
        const dfg_st_tensor *a2 = nf4_part(base, t->name, stem, "absmax2"), *o = nf4_part(base, t->name, stem, "absmax_offset");
        dfg_shape s;
        const dfg_tensor *pt = dfg_find(dfg_runtime_program(rt), t->name);
        if (!pt || !dfg_wt_nf4_shape(dfg_runtime_program(rt), pt, &s) || (!am && !(q && a2 && o)))
            return dfg_wt_fail(rt, DFG_ERR_STATE, false, "save --merge: '%s' is not a 4-bit weight this plan can rebuild", t->name);
        int64_t n = dfg_shape_numel(s);
        float *v = malloc(sizeof(float) * (size_t)n);
        if (!v) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save --merge: out of memory");
        float offset = 0;
        if (o) memcpy(&offset, o->data, sizeof(offset));
        dfg_nf4_dequantize((const uint8_t *)t->data, am ? (const float *)am->data : NULL, q ? (const uint8_t *)q->data : NULL,
                           a2 ? (const float *)a2->data : NULL, offset, n, v);
        int k = out->n++;
        if (!(out->names[k] = malloc(stem + 1))) return free(v), dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "out of memory");
        snprintf(out->names[k], stem + 1, "%s", t->name);
        for (int64_t e = 0; e < n; e++) dfg_store(out->host + off, dt, e, v[e]);
        free(v);
        size_t bytes = (size_t)n * dfg_dtype_size(dt);
        out->ts[k] = (dfg_st_tensor){.name = out->names[k], .dtype = dt, .shape = s, .data = out->host + off, .bytes = bytes};
        off += aligned(bytes);
    }
    return DFG_OK;
}

static const dfg_st_tensor *find_in(const dfg_wt_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->ts[i].name, name)) return &s->ts[i];
    return NULL;
}

/* w += scale B A for nn.Linear's w (out, in), or (B A)^T for GPT-2's Conv1D w (in, out); in float64,
 * rounded once into w's dtype. */
static void merge_one(dfg_st_tensor *w, const dfg_st_tensor *a /* (r, in) */, const dfg_st_tensor *b /* (out, r) */,
                      float scale, bool conv1d) {
    int64_t r = a->shape.d[0], in = a->shape.d[1], out = b->shape.d[0];
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int64_t k = 0; k < r; k++) d += dfg_load(b->data, b->dtype, o * r + k) * dfg_load(a->data, a->dtype, k * in + i);
            int64_t at = conv1d ? i * out + o : o * in + i;
            dfg_store((void *)w->data, w->dtype, at, dfg_load(w->data, w->dtype, at) + (double)scale * d);
        }
}

dfg_status dfg_runtime_save_merged(dfg_runtime *rt, const char *dir, size_t max_shard_bytes) {
    if (!rt) return DFG_ERR_ARG;
    dfg_status s = need_lora(rt, "save --merge");
    if (!s) s = dfg_wt_make_dir(rt, dir);
    if (s) return s;
    dfg_wt_set packed = {0}, base = {0}, ad = {0};
    s = gather_role(rt, DFG_ROLE_BASE_MODEL, &packed);
    const dfg_program *p = dfg_runtime_program(rt);
    dfg_dtype dt = DFG_F32; /* the plan's weights' dtype: its adapters' */
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind == DFG_PARAM) dt = p->tensors[i]->dtype;
    if (!s) s = dense_base(rt, &packed, dt, &base);
    dfg_wt_set_free(&packed);
    if (!s) s = gather_role(rt, DFG_ROLE_PARAM, &ad);
    dfg_lora_config plan = plan_lora(rt);
    float scale = dfg_lora_scale(&plan);
    bool conv = conv1d(rt);
    for (int i = 0; i < ad.n && !s; i++) {
        const char *name = ad.ts[i].name, *end = strstr(name, LORA_A);
        if (!end || end[strlen(LORA_A)]) continue;
        char wname[512], bname[512];
        snprintf(wname, sizeof(wname), "%.*s.weight", (int)(end - name), name);
        snprintf(bname, sizeof(bname), "%.*s" LORA_B, (int)(end - name), name);
        dfg_st_tensor *w = (dfg_st_tensor *)find_in(&base, wname);
        const dfg_st_tensor *b = find_in(&ad, bname);
        if (!w || !b)
            s = dfg_wt_fail(rt, DFG_ERR_STATE, false, "save --merge: adapter '%s' has no %s '%s'", name, w ? "partner" : "base weight",
                            w ? bname : wname);
        else merge_one(w, &ad.ts[i], b, scale, conv);
    }
    if (!s) s = dfg_wt_write_model_dir(rt, dir, base.ts, base.n, max_shard_bytes);
    dfg_wt_set_free(&base);
    dfg_wt_set_free(&ad);
    return s;
}
