/* checkpoint.c - loading PARAM/STATE tensors from safetensors files (Hugging Face weights, one
 * file or a sharded model directory, or dfg's own checkpoints) and saving them atomically.
 *
 * Loading checks every file against the program first (names, shapes, dtypes, strictness; the
 * shards of a directory together, as if they were one file) and only then writes tensors, so
 * a rejected file or directory leaves the runtime as it was. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/dtype.h"
#include "../formats/weights_dir.h"
#include "weights_internal.h"

#define CKPT_PEFT_PREFIX "base_model.model." /* PEFT's names: the PeftModel around the HF model */
#define CKPT_MAX_LISTED 4 /* missing names listed in one message */

/* ---------------------------------------------------------------- matching file names to tensors */

/* name without an architecture's module prefix ("transformer."), or NULL when it has none */
static const char *ckpt_unprefixed(const char *name, int arch) {
    const char *pre = dfg_arch_info_of((dfg_arch)arch)->hf_prefix;
    return *pre && !strncmp(name, pre, strlen(pre)) ? name + strlen(pre) : NULL;
}

/* A file tensor that is no weight: an architecture's buffer (GPT-2's causal masks) or its tied
 * head, which the embedding already is. */
static bool ckpt_is_skipped_buffer(const char *name) {
    for (int a = 0; a < DFG_ARCH_COUNT; a++) {
        const dfg_arch_info *info = dfg_arch_info_of((dfg_arch)a);
        const char *s = ckpt_unprefixed(name, a) ? ckpt_unprefixed(name, a) : name;
        for (const char *b = info->buffers; *b;) { /* the '|'-separated endings */
            size_t k = strcspn(b, "|"), n = strlen(s);
            if (k && n >= k && !strncmp(s + n - k, b, k)) return true;
            b += k + (b[k] == '|');
        }
        char head[64];
        snprintf(head, sizeof(head), "%s.weight", info->lm_head);
        if (info->tied_head && !strcmp(s, head)) return true;
    }
    return false;
}

static bool ckpt_persistent(const dfg_tensor *t) { return t && (t->kind == DFG_PARAM || t->kind == DFG_STATE); }

/* The PARAM or STATE a file name loads into: the exact name, else without an architecture's
 * prefix, after PEFT's "base_model.model." (an adapter file's names); or a load_in_4bit plan's
 * weight in its NF4 form, quantised as it loads (nf4_load.c). */
static const dfg_tensor *ckpt_match(const dfg_program *p, const char *name) {
    if (!strncmp(name, CKPT_PEFT_PREFIX, strlen(CKPT_PEFT_PREFIX))) name += strlen(CKPT_PEFT_PREFIX);
    const dfg_tensor *t = dfg_find(p, name);
    for (int a = 0; a < DFG_ARCH_COUNT && !ckpt_persistent(t); a++)
        if (ckpt_unprefixed(name, a)) t = dfg_find(p, ckpt_unprefixed(name, a));
    if (ckpt_persistent(t)) return t;
    t = dfg_wt_nf4_for(p, name);
    for (int a = 0; a < DFG_ARCH_COUNT && !t; a++)
        if (ckpt_unprefixed(name, a)) t = dfg_wt_nf4_for(p, ckpt_unprefixed(name, a));
    return t;
}

static bool ckpt_is_float(dfg_dtype dt) { return dt == DFG_F32 || dt == DFG_BF16 || dt == DFG_F16; }

/* A file tensor may fill t when the shapes are equal and the dtypes are equal or both float. */
static dfg_status ckpt_check_fit(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *t) {
    char fs[96], ts[96];
    if (dfg_wt_nf4_packed(t) && strcmp(f->name, t->name)) return dfg_wt_nf4_check(rt, path, f, t); /* quantised */
    if (f->shape.rank != t->shape.rank || memcmp(f->shape.d, t->shape.d, sizeof(int64_t) * (size_t)f->shape.rank) != 0)
        return dfg_wt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' has shape %s in the file but %s in the program", path,
                           f->name, dfg_shape_str(f->shape, fs, sizeof(fs)), dfg_shape_str(t->shape, ts, sizeof(ts)));
    bool ok = f->dtype == t->dtype || (ckpt_is_float(f->dtype) && ckpt_is_float(t->dtype));
    if (!ok)
        return dfg_wt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' is %s in the file and cannot load into the program's %s",
                           path, f->name, f->dtype_name, dfg_dtype_name(t->dtype));
    return DFG_OK;
}

/* What a load is for: a model's weights (a LoRA plan's frozen base, else its PARAMs) or a PEFT
 * adapter (a LoRA plan's PARAMs). */
typedef enum { CKPT_MODEL, CKPT_ADAPTER } ckpt_kind;

/* The tensors a strict load must fill. */
static bool ckpt_required(const dfg_tensor *t, ckpt_kind kind, bool lora) {
    if (kind == CKPT_MODEL && lora) return t->role == DFG_ROLE_BASE_MODEL && !dfg_wt_nf4_part(t); /* set with its codes */
    return t->kind == DFG_PARAM;
}

/* Pairs every tensor of one file with its program tensor (target[i], NULL when skipped) and
 * applies the strict rules. owner[t->id] remembers which file tensor claimed t (over all the
 * files of a directory), to refuse two. */
static dfg_status ckpt_plan(dfg_runtime *rt, const char *path, const dfg_safetensors *st, bool strict, ckpt_kind kind,
                            const dfg_tensor **target, const dfg_st_tensor **owner) {
    for (int i = 0; i < dfg_st_count(st); i++) {
        const dfg_st_tensor *f = dfg_st_get(st, i);
        const dfg_tensor *t = ckpt_match(dfg_runtime_program(rt), f->name);
        if (t && kind == CKPT_ADAPTER && t->kind != DFG_PARAM)
            return dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: tensor '%s' is no adapter of the plan (it names '%s')", path,
                               f->name, t->name);
        target[i] = t;
        if (!t) {
            if (strict && !ckpt_is_skipped_buffer(f->name))
                return dfg_wt_fail(rt, DFG_ERR_FORMAT, false,
                                   "%s: tensor '%s' matches no param or state of the program (strict load)", path, f->name);
            continue;
        }
        if (owner[t->id])
            return dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: tensors '%s' and '%s' both load into '%s'", path,
                               owner[t->id]->name, f->name, t->name);
        owner[t->id] = f;
        dfg_status s = ckpt_check_fit(rt, path, f, t);
        if (s) return s;
    }
    return DFG_OK;
}

/* With strict, every required tensor (ckpt_required) must have come from the file; lists the
 * first few missing. */
static dfg_status ckpt_check_missing(dfg_runtime *rt, const char *path, const dfg_st_tensor **owner, bool sharded,
                                     ckpt_kind kind) {
    const dfg_program *p = dfg_runtime_program(rt);
    char list[512] = "";
    int missing = 0;
    bool lora = dfg_wt_lora_plan(p);
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!ckpt_required(t, kind, lora) || owner[t->id]) continue;
        if (++missing <= CKPT_MAX_LISTED) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof(list) - n, "%s'%s'", missing > 1 ? ", " : "", t->name);
        }
    }
    if (!missing) return DFG_OK;
    if (missing > CKPT_MAX_LISTED)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), " and %d more", missing - CKPT_MAX_LISTED);
    const char *what = kind == CKPT_ADAPTER ? "adapter" : lora ? "base weight" : "param";
    return dfg_wt_fail(rt, DFG_ERR_FORMAT, false, "%s: %d %s%s missing from the %s (strict load): %s", path, missing, what,
                       missing > 1 ? "s" : "", sharded ? "shards" : "file", list);
}

/* ---------------------------------------------------------------- moving the bytes */

/* Element i of unaligned file data of a float dtype (file data has no alignment guarantee). */
static double ckpt_load_float(const unsigned char *p, dfg_dtype dt, int64_t i) {
    union {
        float f;
        uint16_t h;
    } u;
    size_t es = dfg_dtype_size(dt);
    memcpy(&u, p + (size_t)i * es, es);
    return dfg_load(&u, dt, 0);
}

/* Fills host (t's bytes) from f: a copy when the dtypes agree (bit-exact), else a float
 * conversion with round-to-nearest-even. */
static void ckpt_convert(const dfg_st_tensor *f, const dfg_tensor *t, void *host) {
    if (f->dtype == t->dtype) {
        memcpy(host, f->data, f->bytes);
        return;
    }
    int64_t n = dfg_shape_numel(t->shape);
    for (int64_t i = 0; i < n; i++) dfg_store(host, t->dtype, i, ckpt_load_float(f->data, f->dtype, i));
}

static dfg_status ckpt_apply(dfg_runtime *rt, const char *path, const dfg_safetensors *st, const dfg_tensor **target,
                             int *n_loaded) {
    size_t max_bytes = 1;
    for (int i = 0; i < dfg_st_count(st); i++)
        if (target[i] && dfg_tensor_bytes(target[i]) > max_bytes) max_bytes = dfg_tensor_bytes(target[i]);
    void *host = malloc(max_bytes);
    if (!host) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "%s: out of memory (%zu bytes) loading", path, max_bytes);
    dfg_status s = DFG_OK;
    for (int i = 0; i < dfg_st_count(st) && !s; i++) {
        if (!target[i]) continue;
        const dfg_st_tensor *f = dfg_st_get(st, i);
        if (dfg_wt_nf4_packed(target[i]) && strcmp(f->name, target[i]->name)) { /* a weight to quantise */
            if (!(s = dfg_wt_nf4_load(rt, path, f, target[i])) && n_loaded) (*n_loaded)++;
            continue;
        }
        ckpt_convert(f, target[i], host);
        s = dfg_runtime_write(rt, target[i]->name, host, dfg_tensor_bytes(target[i]));
        /* a half-written set of weights must not be trained on */
        if (s) dfg_wt_fail(rt, s, true, "%s: uploading '%s' failed; the runtime's state is now partly loaded", path,
                           target[i]->name);
        else if (n_loaded) (*n_loaded)++;
    }
    free(host);
    return s;
}

/* Plans every file of the set against the program (target[i] for the i-th tensor over all
 * files in order), then, with nothing refused, sets the tensors. */
static dfg_status ckpt_load_set(dfg_runtime *rt, const char *path, const dfg_wd_set *w, bool strict, ckpt_kind kind,
                                const dfg_tensor **target, const dfg_st_tensor **owner, int *n_loaded) {
    dfg_status s = DFG_OK;
    for (int f = 0, at = 0; f < w->n && !s; at += dfg_st_count(w->files[f].st), f++)
        s = ckpt_plan(rt, w->files[f].path, w->files[f].st, strict, kind, target + at, owner);
    if (!s && strict) s = ckpt_check_missing(rt, w->sharded ? path : w->files[0].path, owner, w->sharded, kind);
    for (int f = 0, at = 0; f < w->n && !s; at += dfg_st_count(w->files[f].st), f++)
        s = ckpt_apply(rt, w->files[f].path, w->files[f].st, target + at, n_loaded);
    /* copies that start from a loaded tensor follow it, unless the file set them too */
    const dfg_program *p = dfg_runtime_program(rt);
    for (int i = 0; i < p->n_tensors && !s; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->init_from && owner[t->init_from->id] && !owner[i]) s = dfg_runtime_follow_init(rt, t->name);
    }
    return s;
}

static dfg_status ckpt_load(dfg_runtime *rt, const char *path, bool strict, ckpt_kind kind, int *n_loaded) {
    if (n_loaded) *n_loaded = 0;
    if (!rt) return DFG_ERR_ARG;
    if (!path) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "load: path is NULL");
    char err[1024];
    dfg_wd_set w;
    dfg_status s = dfg_wd_open(path, &w, err, sizeof(err));
    if (s) return dfg_wt_fail(rt, s, false, "%s", err);
    int n = 0;
    for (int f = 0; f < w.n; f++) n += dfg_st_count(w.files[f].st);
    const dfg_tensor **target = calloc((size_t)(n ? n : 1), sizeof(*target));
    int n_tensors = dfg_runtime_program(rt)->n_tensors;
    const dfg_st_tensor **owner = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof(*owner));
    if (!target || !owner) s = dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "%s: out of memory", path);
    else s = ckpt_load_set(rt, path, &w, strict, kind, target, owner, n_loaded);
    free(target);
    free(owner);
    dfg_wd_close(&w);
    return s;
}

dfg_status dfg_runtime_load_safetensors(dfg_runtime *rt, const char *path, bool strict, int *n_loaded) {
    return ckpt_load(rt, path, strict, CKPT_MODEL, n_loaded);
}

dfg_status dfg_wt_load_adapter_file(dfg_runtime *rt, const char *path, int *n_loaded) {
    return ckpt_load(rt, path, true, CKPT_ADAPTER, n_loaded);
}

/* ---------------------------------------------------------------- saving */

static size_t ckpt_aligned(size_t n) { return (n + 15) & ~(size_t)15; }

void dfg_wt_set_free(dfg_wt_set *s) {
    for (int i = 0; s->names && i < s->n; i++) free(s->names[i]);
    free(s->names);
    free(s->ts);
    free(s->host);
    *s = (dfg_wt_set){0};
}

dfg_status dfg_wt_gather(dfg_runtime *rt, dfg_wt_pick pick, const void *arg, dfg_wt_set *out) {
    const dfg_program *p = dfg_runtime_program(rt);
    size_t total = 1;
    int n = 0;
    *out = (dfg_wt_set){0};
    for (int i = 0; i < p->n_tensors; i++)
        if (ckpt_persistent(p->tensors[i]) && pick(p->tensors[i], arg)) total += ckpt_aligned(dfg_tensor_bytes(p->tensors[i])), n++;
    out->ts = calloc((size_t)n + 1, sizeof(*out->ts));
    out->names = calloc((size_t)n + 1, sizeof(*out->names));
    out->host = malloc(total);
    if (!out->ts || !out->names || !out->host) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory (%zu bytes)", total);
    size_t off = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!ckpt_persistent(t) || !pick(t, arg)) continue;
        size_t bytes = dfg_tensor_bytes(t);
        if (dfg_runtime_read(rt, t->name, out->host + off, bytes))
            return dfg_wt_fail(rt, DFG_ERR_IO, false, "save: reading '%s' from the device failed: %s", t->name,
                               dfg_runtime_error(rt));
        out->ts[out->n++] = (dfg_st_tensor){.name = t->name, .dtype = t->dtype, .shape = t->shape, .data = out->host + off,
                                            .bytes = bytes};
        off += ckpt_aligned(bytes); /* lora_io.c's merge reads and writes the values in place */
    }
    return DFG_OK;
}

dfg_status dfg_wt_write_tensors(dfg_runtime *rt, const char *path, const dfg_st_tensor *ts, int n) {
    char step[32], err[1024];
    snprintf(step, sizeof(step), "%" PRId64, dfg_runtime_steps_done(rt));
    const char *meta[] = {"format", "pt", "producer", "dfg", "dfg.step", step};
    dfg_status s = dfg_st_write(path, ts, n, meta, 3, err, sizeof(err));
    return s ? dfg_wt_fail(rt, s, false, "%s", err) : DFG_OK;
}

static bool ckpt_saved(const dfg_tensor *t, const void *with_state) {
    return t->kind == DFG_PARAM || (*(const bool *)with_state && t->kind == DFG_STATE);
}

dfg_status dfg_runtime_save_safetensors(dfg_runtime *rt, const char *path, bool with_state) {
    if (!rt) return DFG_ERR_ARG;
    if (!path) return dfg_wt_fail(rt, DFG_ERR_ARG, false, "save: path is NULL");
    dfg_wt_set set;
    dfg_status s = dfg_wt_gather(rt, ckpt_saved, &with_state, &set);
    if (!s) s = dfg_wt_write_tensors(rt, path, set.ts, set.n);
    dfg_wt_set_free(&set);
    return s;
}

/* ---------------------------------------------------------------- the plan's architecture */

const dfg_arch_info *dfg_wt_arch(const dfg_program *p) {
    const dfg_arch_info *a = dfg_arch_find(dfg_program_str(p, "model_type"), false);
    return a ? a : dfg_arch_info_of(DFG_ARCH_GPT2);
}

bool dfg_wt_lora_plan(const dfg_program *p) {
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL) return true;
    return false;
}
