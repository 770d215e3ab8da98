/* runtime_internal.h - the runtime object, shared by the runtime's own files. */
#ifndef DFG_RUNTIME_INTERNAL_H
#define DFG_RUNTIME_INTERNAL_H

#include "backend.h"
#include "memplan.h"

struct dfg_runtime {
    const dfg_program *p;
    dfg_run_options opt;
    const dfg_backend *be;
    void *be_state;
    dfg_memplan plan; /* a copy of the program's plan: offsets by tensor id, arena size */
    char *arena;
    void **in_ptrs, **out_ptrs; /* per-node pointer arrays, sized for the widest node */
    dfg_host_fn *host;          /* [stage] resolved host functions */
    const dfg_tensor **metrics;
    int n_metrics;
    int64_t step;
    dfg_status status; /* sticky: a failed step leaves the state half-updated */
    char error[1024];
};

struct dfg_host_ctx {
    dfg_runtime *rt;
    int stage;
};

/* Records a message (and returns s); with sticky, later steps refuse to run. */
dfg_status dfg_rt_fail(dfg_runtime *rt, dfg_status s, bool sticky, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The arena address of tensor t. */
static inline void *dfg_rt_ptr(const dfg_runtime *rt, const dfg_tensor *t) {
    return rt->arena + rt->plan.offset[t->id];
}
/* A persistent or output tensor by name, or NULL with the runtime's message set. */
const dfg_tensor *dfg_rt_lookup(dfg_runtime *rt, const char *name);

#endif
