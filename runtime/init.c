/* init.c - fills PARAM and STATE tensors from their init specs, CONSTs from their data, and
 * zeroes INPUTs. Values come from the Philox stream keyed by the run's seed and counted by
 * (element, hash of the tensor's name), so they do not depend on creation order or backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/dtype.h"
#include "../ops/philox.h"
#include "runtime_internal.h"

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Four uniforms in (0, 1] for block q of the tensor. */
static void uniforms(uint64_t seed, uint64_t h, int64_t q, float u[4]) {
    dfg_philox_ctr c = {{(uint32_t)q, (uint32_t)((uint64_t)q >> 32), (uint32_t)h, (uint32_t)(h >> 32)}};
    c = dfg_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    for (int i = 0; i < 4; i++) u[i] = ((float)(c.v[i] >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

/* Element i of a tensor initialised with `init` (Box-Muller pairs for the normal). */
static double init_value(dfg_init init, uint64_t seed, uint64_t h, int64_t i) {
    float u[4];
    switch (init.kind) {
    case DFG_INIT_ZEROS: return 0.0;
    case DFG_INIT_ONES: return 1.0;
    case DFG_INIT_CONSTANT: return init.a;
    case DFG_INIT_UNIFORM:
        uniforms(seed, h, i / 4, u);
        return init.a + (double)(init.b - init.a) * (1.0 - u[i % 4]);
    case DFG_INIT_NORMAL: {
        uniforms(seed, h, i / 4, u);
        int pair = (int)(i % 4) / 2;
        double r = sqrt(-2.0 * log((double)u[2 * pair])), th = 2.0 * 3.14159265358979323846 * u[2 * pair + 1];
        double z = (i % 2) ? r * sin(th) : r * cos(th);
        return init.a + (double)init.b * z;
    }
    default: return 0.0;
    }
}

/* An RNG state (i32 (4)) gets a key derived from the seed and its name, and counter 0. */
static void init_rng(const dfg_tensor *t, uint64_t seed, int32_t *v) {
    uint64_t k = seed ^ name_hash(t->name);
    v[0] = (int32_t)(uint32_t)k, v[1] = (int32_t)(uint32_t)(k >> 32), v[2] = 0, v[3] = 0;
}

/* Host staging for one upload: values are made and uploaded at most this many bytes at a time,
 * so a run's peak memory is its arena plus a small buffer, not plus its largest tensor (a 0.5B
 * model's embedding is 519 MiB in f32: a quarter of the LoRA bench's arena). A program whose
 * tensors are all smaller stages through a buffer of its largest tensor's size, as before. */
enum { INIT_CHUNK_BYTES = 16 << 20 };

static size_t staging_bytes(size_t largest) {
    return largest < 16 ? 16 : largest < INIT_CHUNK_BYTES ? largest : INIT_CHUNK_BYTES;
}

static char *at(void *p, int64_t bytes) { return (char *)p + bytes; }

static dfg_status fill_tensor(dfg_runtime *rt, const dfg_tensor *t, void *host, size_t host_bytes) {
    const int64_t n = dfg_shape_numel(t->shape), es = (int64_t)dfg_dtype_size(t->dtype), per = (int64_t)host_bytes / es;
    if (t->role == DFG_ROLE_RNG && t->dtype == DFG_I32 && n == 4 && t->kind != DFG_CONST && t->kind != DFG_INPUT) {
        init_rng(t, rt->opt.seed, host);
        return rt->be->upload(rt->be_state, dfg_rt_ptr(rt, t), host, dfg_tensor_bytes(t));
    }
    const uint64_t h = name_hash(t->name);
    for (int64_t i0 = 0; i0 < n; i0 += per) {
        const int64_t m = n - i0 < per ? n - i0 : per; /* elements i0 .. i0+m */
        if (t->kind == DFG_CONST) memcpy(host, at(t->data, i0 * es), (size_t)(m * es));
        else if (t->kind == DFG_INPUT) memset(host, 0, (size_t)(m * es));
        else {
            /* every element is a pure function of (seed, name, index): all threads, the same values
             * (a 0.5B model's random init took a minute on one thread) */
#pragma omp parallel for schedule(static) if (m > 65536)
            for (int64_t i = 0; i < m; i++) dfg_store(host, t->dtype, i, init_value(t->init, rt->opt.seed, h, i0 + i));
        }
        dfg_status st = rt->be->upload(rt->be_state, at(dfg_rt_ptr(rt, t), i0 * es), host, (size_t)(m * es));
        if (st) return st;
    }
    return DFG_OK;
}

/* dst = src converted to dst's dtype (dfg_init_from), through host memory a chunk at a time. */
dfg_status dfg_rt_derive_init(dfg_runtime *rt, const dfg_tensor *dst) {
    const dfg_tensor *src = dst->init_from;
    const size_t host_bytes = staging_bytes(dfg_tensor_bytes(src) > dfg_tensor_bytes(dst) ? dfg_tensor_bytes(src)
                                                                                           : dfg_tensor_bytes(dst));
    const int64_t n = dfg_shape_numel(dst->shape), ses = (int64_t)dfg_dtype_size(src->dtype),
                  des = (int64_t)dfg_dtype_size(dst->dtype), per = (int64_t)host_bytes / (ses > des ? ses : des);
    void *a = malloc(host_bytes), *b = malloc(host_bytes);
    dfg_status st = a && b ? DFG_OK : DFG_ERR_NOMEM;
    for (int64_t i0 = 0; i0 < n && !st; i0 += per) {
        const int64_t m = n - i0 < per ? n - i0 : per;
        st = rt->be->download(rt->be_state, a, at(dfg_rt_ptr(rt, src), i0 * ses), (size_t)(m * ses));
        if (st) break;
#pragma omp parallel for schedule(static) if (m > 65536)
        for (int64_t i = 0; i < m; i++) dfg_store(b, dst->dtype, i, dfg_load(a, src->dtype, i));
        st = rt->be->upload(rt->be_state, at(dfg_rt_ptr(rt, dst), i0 * des), b, (size_t)(m * des));
    }
    free(a), free(b);
    return st;
}

dfg_status dfg_runtime_follow_init(dfg_runtime *rt, const char *name) {
    if (!rt) return DFG_ERR_ARG;
    const dfg_tensor *t = dfg_rt_lookup(rt, name);
    if (!t) return DFG_ERR_ARG;
    if (!t->init_from) return dfg_rt_fail(rt, DFG_ERR_ARG, false, "'%s' is no copy of another tensor (dfg_init_from)", t->name);
    dfg_status st = dfg_rt_derive_init(rt, t);
    if (st) dfg_rt_fail(rt, st, true, "setting '%s' from '%s' failed", t->name, t->init_from->name);
    return st;
}

dfg_status dfg_runtime_init_state(dfg_runtime *rt) {
    if (!rt) return DFG_ERR_ARG;
    const dfg_program *p = rt->p;
    size_t largest = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind != DFG_TEMP && dfg_tensor_bytes(p->tensors[i]) > largest)
            largest = dfg_tensor_bytes(p->tensors[i]);
    const size_t host_bytes = staging_bytes(largest);
    void *host = malloc(host_bytes);
    if (!host) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory initialising state");
    dfg_status st = DFG_OK;
    for (int i = 0; i < p->n_tensors && !st; i++)
        if (p->tensors[i]->kind != DFG_TEMP) st = fill_tensor(rt, p->tensors[i], host, host_bytes);
    for (int i = 0; i < p->n_tensors && !st; i++) /* after every source has its value */
        if (p->tensors[i]->init_from) st = dfg_rt_derive_init(rt, p->tensors[i]);
    free(host);
    if (st) return dfg_rt_fail(rt, st, true, "initialising state failed");
    rt->step = 0;
    rt->status = DFG_OK;
    return DFG_OK;
}
