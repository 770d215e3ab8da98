/* staging.c - host stages on a device backend: the persistent tensors a host stage asks for
 * (dfg_host_buffer) are copied into pinned host memory, the stage reads and writes them there,
 * and they are copied back when it returns. The pinned area is allocated when the runtime is
 * created, sized for every persistent tensor a host stage may touch (inputs, rollouts, metrics,
 * RNG and other unlabelled state; not the model's weights, gradients, optimizer moments or KV
 * caches), so nothing is allocated while steps run. */
#include <string.h>

#include "runtime_internal.h"

#define STAGING_ALIGN 64

static bool stageable(const dfg_tensor *t) {
    if (t->kind == DFG_TEMP || t->kind == DFG_PARAM || t->kind == DFG_CONST) return false;
    switch (t->role) {
    case DFG_ROLE_GRAD: case DFG_ROLE_OPTIM: case DFG_ROLE_REF_MODEL: case DFG_ROLE_BASE_MODEL:
    case DFG_ROLE_KV_CACHE: return false;
    default: return true;
    }
}

static size_t aligned(size_t n) { return (n + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN; }

dfg_status dfg_rt_staging_create(dfg_runtime *rt) {
    if (rt->be->host_memory) return DFG_OK;
    size_t bytes = 0;
    for (int i = 0; i < rt->p->n_tensors; i++)
        if (stageable(rt->p->tensors[i])) bytes += aligned(dfg_tensor_bytes(rt->p->tensors[i]));
    size_t n = rt->p->n_tensors > 0 ? (size_t)rt->p->n_tensors : 1;
    rt->staged = calloc(n, sizeof(*rt->staged));
    rt->staged_at = calloc(n, sizeof(*rt->staged_at));
    rt->staging = rt->be->alloc_host(rt->be_state, bytes ? bytes : STAGING_ALIGN);
    rt->staging_bytes = bytes;
    if (!rt->staged || !rt->staged_at || !rt->staging)
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "cannot allocate %zu bytes of pinned host staging", bytes);
    return DFG_OK;
}

void dfg_rt_staging_free(dfg_runtime *rt) {
    if (rt->staging) rt->be->free_host(rt->be_state, rt->staging);
    free(rt->staged);
    free(rt->staged_at);
}

dfg_status dfg_rt_staging_buffer(dfg_runtime *rt, const dfg_tensor *t, void **host) {
    for (int i = 0; i < rt->n_staged; i++)
        if (rt->staged[i] == t) return *host = rt->staged_at[i], DFG_OK;
    if (!rt->in_host_stage)
        return dfg_rt_fail(rt, DFG_ERR_UNSUPPORTED, false,
                           "'%s' lives in device memory: outside a host stage, copy it with dfg_runtime_read/write",
                           t->name);
    if (!stageable(t))
        return dfg_rt_fail(rt, DFG_ERR_UNSUPPORTED, false,
                           "host stages on the %s backend see inputs, rollouts, metrics and other state, not '%s' (%s)",
                           rt->be->name, t->name, dfg_role_name(t->role));
    size_t bytes = dfg_tensor_bytes(t);
    if (rt->staging_used + aligned(bytes) > rt->staging_bytes)
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "host staging is full (%zu bytes)", rt->staging_bytes);
    void *at = rt->staging + rt->staging_used;
    dfg_status st = rt->be->download(rt->be_state, at, dfg_rt_ptr(rt, t), bytes);
    if (st) return dfg_rt_fail(rt, st, false, "copying '%s' to the host failed", t->name);
    rt->staging_used += aligned(bytes);
    rt->staged[rt->n_staged] = t;
    rt->staged_at[rt->n_staged++] = at;
    *host = at;
    return DFG_OK;
}

dfg_status dfg_rt_staging_flush(dfg_runtime *rt) {
    dfg_status st = DFG_OK;
    for (int i = 0; i < rt->n_staged && !st; i++) {
        const dfg_tensor *t = rt->staged[i];
        st = rt->be->upload(rt->be_state, dfg_rt_ptr(rt, t), rt->staged_at[i], dfg_tensor_bytes(t));
        if (st) dfg_rt_fail(rt, st, true, "copying '%s' back to the device failed", t->name);
    }
    rt->n_staged = 0;
    rt->staging_used = 0;
    return st;
}
