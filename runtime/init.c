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

static dfg_status fill_tensor(dfg_runtime *rt, const dfg_tensor *t, void *host) {
    int64_t n = dfg_shape_numel(t->shape);
    size_t bytes = dfg_tensor_bytes(t);
    if (t->kind == DFG_CONST) memcpy(host, t->data, bytes);
    else if (t->kind == DFG_INPUT) memset(host, 0, bytes);
    else if (t->role == DFG_ROLE_RNG && t->dtype == DFG_I32 && n == 4) init_rng(t, rt->opt.seed, host);
    else {
        uint64_t h = name_hash(t->name);
        /* every element is a pure function of (seed, name, index): all threads, the same values
         * (a 0.5B model's random init took a minute on one thread) */
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) dfg_store(host, t->dtype, i, init_value(t->init, rt->opt.seed, h, i));
    }
    return rt->be->upload(rt->be_state, dfg_rt_ptr(rt, t), host, bytes);
}

/* dst = src converted to dst's dtype (dfg_init_from), through host memory. */
dfg_status dfg_rt_derive_init(dfg_runtime *rt, const dfg_tensor *dst) {
    const dfg_tensor *src = dst->init_from;
    size_t sb = dfg_tensor_bytes(src), db = dfg_tensor_bytes(dst);
    void *a = malloc(sb ? sb : 1), *b = malloc(db ? db : 1);
    dfg_status st = a && b ? rt->be->download(rt->be_state, a, dfg_rt_ptr(rt, src), sb) : DFG_ERR_NOMEM;
    int64_t n = dfg_shape_numel(dst->shape);
    if (!st) {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) dfg_store(b, dst->dtype, i, dfg_load(a, src->dtype, i));
    }
    if (!st) st = rt->be->upload(rt->be_state, dfg_rt_ptr(rt, dst), b, db);
    free(a), free(b);
    return st;
}

dfg_status dfg_runtime_init_state(dfg_runtime *rt) {
    if (!rt) return DFG_ERR_ARG;
    const dfg_program *p = rt->p;
    size_t max_bytes = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind != DFG_TEMP && dfg_tensor_bytes(p->tensors[i]) > max_bytes)
            max_bytes = dfg_tensor_bytes(p->tensors[i]);
    void *host = malloc(max_bytes ? max_bytes : 1);
    if (!host) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory initialising state");
    dfg_status st = DFG_OK;
    for (int i = 0; i < p->n_tensors && !st; i++)
        if (p->tensors[i]->kind != DFG_TEMP) st = fill_tensor(rt, p->tensors[i], host);
    for (int i = 0; i < p->n_tensors && !st; i++) /* after every source has its value */
        if (p->tensors[i]->init_from) st = dfg_rt_derive_init(rt, p->tensors[i]);
    free(host);
    if (st) return dfg_rt_fail(rt, st, true, "initialising state failed");
    rt->step = 0;
    rt->status = DFG_OK;
    return DFG_OK;
}
