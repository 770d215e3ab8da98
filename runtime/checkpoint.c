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

#include "../ops/dtype.h"
#include "runtime_internal.h"
#include "formats/safetensors.h"
#include "formats/weights_dir.h"

#define CKPT_PREFIX "transformer."
#define CKPT_PEFT_PREFIX "base_model.model." /* PEFT's names: the PeftModel around the HF model */
#define CKPT_MAX_LISTED 4 /* missing names listed in one message */

/* ---------------------------------------------------------------- matching file names to tensors */

static bool ckpt_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* GPT-2 buffers that are not weights: the causal masks, and lm_head.weight (tied to wte). */
static bool ckpt_is_skipped_buffer(const char *name) {
    const char *s = strncmp(name, CKPT_PREFIX, strlen(CKPT_PREFIX)) == 0 ? name + strlen(CKPT_PREFIX) : name;
    return ckpt_ends_with(s, ".attn.bias") || ckpt_ends_with(s, ".attn.masked_bias") || strcmp(s, "lm_head.weight") == 0;
}

/* The PARAM or STATE a file name loads into: the exact name, else without "transformer.", after
 * PEFT's "base_model.model." (an adapter file's names). */
static const dfg_tensor *ckpt_match(const dfg_program *p, const char *name) {
    if (!strncmp(name, CKPT_PEFT_PREFIX, strlen(CKPT_PEFT_PREFIX))) name += strlen(CKPT_PEFT_PREFIX);
    const dfg_tensor *t = dfg_find(p, name);
    if ((!t || (t->kind != DFG_PARAM && t->kind != DFG_STATE)) && strncmp(name, CKPT_PREFIX, strlen(CKPT_PREFIX)) == 0)
        t = dfg_find(p, name + strlen(CKPT_PREFIX));
    if (t && (t->kind == DFG_PARAM || t->kind == DFG_STATE)) return t;
    /* a load_in_4bit plan's weight: its NF4 form, quantised as it loads (nf4_load.c) */
    t = dfg_rt_nf4_for(p, name);
    if (!t && strncmp(name, CKPT_PREFIX, strlen(CKPT_PREFIX)) == 0) t = dfg_rt_nf4_for(p, name + strlen(CKPT_PREFIX));
    return t;
}

static bool ckpt_is_float(dfg_dtype dt) { return dt == DFG_F32 || dt == DFG_BF16 || dt == DFG_F16; }

/* A file tensor may fill t when the shapes are equal and the dtypes are equal or both float. */
static dfg_status ckpt_check_fit(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *t) {
    char fs[96], ts[96];
    if (dfg_rt_nf4_packed(t) && strcmp(f->name, t->name)) return dfg_rt_nf4_check(rt, path, f, t); /* quantised */
    if (f->shape.rank != t->shape.rank || memcmp(f->shape.d, t->shape.d, sizeof(int64_t) * (size_t)f->shape.rank) != 0)
        return dfg_rt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' has shape %s in the file but %s in the program", path,
                           f->name, dfg_shape_str(f->shape, fs, sizeof(fs)), dfg_shape_str(t->shape, ts, sizeof(ts)));
    bool ok = f->dtype == t->dtype || (ckpt_is_float(f->dtype) && ckpt_is_float(t->dtype));
    if (!ok)
        return dfg_rt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' is %s in the file and cannot load into the program's %s",
                           path, f->name, f->dtype_name, dfg_dtype_name(t->dtype));
    return DFG_OK;
}

/* What a load is for: a model's weights (a LoRA plan's frozen base, else its PARAMs) or a PEFT
 * adapter (a LoRA plan's PARAMs). */
typedef enum { CKPT_MODEL, CKPT_ADAPTER } ckpt_kind;

static bool ckpt_lora_plan(const dfg_program *p) {
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL) return true;
    return false;
}

/* The tensors a strict load must fill. */
static bool ckpt_required(const dfg_tensor *t, ckpt_kind kind, bool lora) {
    if (kind == CKPT_MODEL && lora) return t->role == DFG_ROLE_BASE_MODEL && !dfg_rt_nf4_part(t); /* set with its codes */
    return t->kind == DFG_PARAM;
}

/* Pairs every tensor of one file with its program tensor (target[i], NULL when skipped) and
 * applies the strict rules. owner[t->id] remembers which file tensor claimed t (over all the
 * files of a directory), to refuse two. */
static dfg_status ckpt_plan(dfg_runtime *rt, const char *path, const dfg_safetensors *st, bool strict, ckpt_kind kind,
                            const dfg_tensor **target, const dfg_st_tensor **owner) {
    for (int i = 0; i < dfg_st_count(st); i++) {
        const dfg_st_tensor *f = dfg_st_get(st, i);
        const dfg_tensor *t = ckpt_match(rt->p, f->name);
        if (t && kind == CKPT_ADAPTER && t->kind != DFG_PARAM)
            return dfg_rt_fail(rt, DFG_ERR_FORMAT, false, "%s: tensor '%s' is no adapter of the plan (it names '%s')", path,
                               f->name, t->name);
        target[i] = t;
        if (!t) {
            if (strict && !ckpt_is_skipped_buffer(f->name))
                return dfg_rt_fail(rt, DFG_ERR_FORMAT, false,
                                   "%s: tensor '%s' matches no param or state of the program (strict load)", path, f->name);
            continue;
        }
        if (owner[t->id])
            return dfg_rt_fail(rt, DFG_ERR_FORMAT, false, "%s: tensors '%s' and '%s' both load into '%s'", path,
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
    const dfg_program *p = rt->p;
    char list[512] = "";
    int missing = 0;
    bool lora = ckpt_lora_plan(p);
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
    return dfg_rt_fail(rt, DFG_ERR_FORMAT, false, "%s: %d %s%s missing from the %s (strict load): %s", path, missing, what,
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
    if (!host) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "%s: out of memory (%zu bytes) loading", path, max_bytes);
    dfg_status s = DFG_OK;
    for (int i = 0; i < dfg_st_count(st) && !s; i++) {
        if (!target[i]) continue;
        const dfg_st_tensor *f = dfg_st_get(st, i);
        if (dfg_rt_nf4_packed(target[i]) && strcmp(f->name, target[i]->name)) { /* a weight to quantise */
            if (!(s = dfg_rt_nf4_load(rt, path, f, target[i])) && n_loaded) (*n_loaded)++;
            continue;
        }
        ckpt_convert(f, target[i], host);
        s = rt->be->upload(rt->be_state, dfg_rt_ptr(rt, target[i]), host, dfg_tensor_bytes(target[i]));
        /* a half-written set of weights must not be trained on */
        if (s) dfg_rt_fail(rt, s, true, "%s: uploading '%s' failed; the runtime's state is now partly loaded", path,
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
    for (int i = 0; i < rt->p->n_tensors && !s; i++) {
        const dfg_tensor *t = rt->p->tensors[i];
        if (t->init_from && owner[t->init_from->id] && !owner[i]) s = dfg_rt_derive_init(rt, t);
    }
    return s;
}

static dfg_status ckpt_load(dfg_runtime *rt, const char *path, bool strict, ckpt_kind kind, int *n_loaded) {
    if (n_loaded) *n_loaded = 0;
    if (!rt) return DFG_ERR_ARG;
    if (!path) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "load: path is NULL");
    char err[1024];
    dfg_wd_set w;
    dfg_status s = dfg_wd_open(path, &w, err, sizeof(err));
    if (s) return dfg_rt_fail(rt, s, false, "%s", err);
    int n = 0;
    for (int f = 0; f < w.n; f++) n += dfg_st_count(w.files[f].st);
    const dfg_tensor **target = calloc((size_t)(n ? n : 1), sizeof(*target));
    const dfg_st_tensor **owner = calloc((size_t)(rt->p->n_tensors ? rt->p->n_tensors : 1), sizeof(*owner));
    if (!target || !owner) s = dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "%s: out of memory", path);
    else s = ckpt_load_set(rt, path, &w, strict, kind, target, owner, n_loaded);
    free(target);
    free(owner);
    dfg_wd_close(&w);
    return s;
}

dfg_status dfg_runtime_load_safetensors(dfg_runtime *rt, const char *path, bool strict, int *n_loaded) {
    return ckpt_load(rt, path, strict, CKPT_MODEL, n_loaded);
}

dfg_status dfg_rt_load_adapter_file(dfg_runtime *rt, const char *path, int *n_loaded) {
    return ckpt_load(rt, path, true, CKPT_ADAPTER, n_loaded);
}

/* ---------------------------------------------------------------- saving */

static bool ckpt_saved(const dfg_tensor *t, bool with_state) {
    return t->kind == DFG_PARAM || (with_state && t->kind == DFG_STATE);
}

/* Downloads every saved tensor into one host buffer and describes it for the writer. */
dfg_status dfg_rt_gather(dfg_runtime *rt, bool with_state, dfg_st_tensor *ts, int *n, char **host) {
    const dfg_program *p = rt->p;
    size_t total = 1;
    for (int i = 0; i < p->n_tensors; i++)
        if (ckpt_saved(p->tensors[i], with_state)) total += dfg_tensor_bytes(p->tensors[i]);
    *host = malloc(total);
    if (!*host) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory (%zu bytes)", total);
    size_t off = 0;
    *n = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!ckpt_saved(t, with_state)) continue;
        size_t bytes = dfg_tensor_bytes(t);
        dfg_status s = rt->be->download(rt->be_state, *host + off, dfg_rt_ptr(rt, t), bytes);
        if (s) return dfg_rt_fail(rt, s, false, "save: reading '%s' from the device failed", t->name);
        ts[(*n)++] = (dfg_st_tensor){.name = t->name, .dtype = t->dtype, .dtype_name = NULL, .shape = t->shape,
                                     .data = *host + off, .bytes = bytes};
        off += bytes;
    }
    return DFG_OK;
}

dfg_status dfg_runtime_save_safetensors(dfg_runtime *rt, const char *path, bool with_state) {
    if (!rt) return DFG_ERR_ARG;
    if (!path) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "save: path is NULL");
    dfg_st_tensor *ts = calloc((size_t)(rt->p->n_tensors ? rt->p->n_tensors : 1), sizeof(*ts));
    char *host = NULL;
    int n = 0;
    dfg_status s = ts ? dfg_rt_gather(rt, with_state, ts, &n, &host)
                      : dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "save: out of memory");
    if (!s) {
        char step[32], err[1024];
        snprintf(step, sizeof(step), "%" PRId64, rt->step);
        const char *meta[] = {"format", "pt", "producer", "dfg", "dfg.step", step};
        s = dfg_st_write(path, ts, n, meta, 3, err, sizeof(err));
        if (s) dfg_rt_fail(rt, s, false, "%s", err);
    }
    free(ts);
    free(host);
    return s;
}
