/* runtime_internal.h - the runtime object, shared by the runtime's own files. */
#ifndef DFG_RUNTIME_INTERNAL_H
#define DFG_RUNTIME_INTERNAL_H

#include "backend.h"
#include "../passes/memplan.h"

/* The checking mode (runtime/check.c): per-buffer liveness and checksums along the plan's
 * timeline, poison in dead bytes. NULL in a runtime without DFG_CHECK. */
typedef struct dfg_check dfg_check;

/* What check mode writes over a buffer whose lifetime ended: read as f32 it is a NaN (payload
 * 0x40C4EC), as i32 a negative index, so a kernel that reads it fails or spreads NaN. */
#define DFG_CHECK_POISON 0xFFC0C4ECu

struct dfg_runtime {
    const dfg_program *p;
    dfg_run_options opt;
    const dfg_backend *be;
    void *be_state;
    dfg_memplan plan; /* a copy of the program's plan: offsets by tensor id, arena size */
    char *arena;
    void **in_ptrs, **out_ptrs; /* per-node pointer arrays, sized for the widest node */
    dfg_host_fn *host;          /* [stage] resolved host functions */
    void *host_user;            /* what the pipeline's host-state init made (dfg_host_state) */
    void (*host_release)(void *user);
    bool *skip;                 /* [stage] switched off with dfg_runtime_skip_stage */
    const dfg_tensor **metrics;
    int *metric_stage;          /* [metric] the stage that writes it; -1: none found */
    int *stage_runs;            /* [stage] its runs in the last step (0: it did not run; host stages 1) */
    bool *stage_updates;        /* [stage] writes a PARAM or an optimizer state */
    double *stage_ms;           /* [stage] its time in the last step */
    bool updated;               /* this step ran a stage_updates stage */
    int n_metrics;
    int64_t step;
    dfg_check *check; /* DFG_CHECK=1 or opt.check; NULL otherwise */
    bool *captured;   /* [2 x stage] its graphs exist (backends with graphs; step.c's slots) */
    double wait_s;    /* this step: seconds blocked on the device (synchronisation, flag reads) */
    double last_wait_ms, last_step_ms, step_t0;
    /* host stages on a device backend see tensors through pinned staging (staging.c) */
    bool in_host_stage;
    char *staging;                  /* pinned host memory */
    size_t staging_bytes, staging_used;
    const dfg_tensor **staged;      /* [n_staged] tensors a host stage asked for */
    void **staged_at;
    int n_staged;
    dfg_status status; /* sticky: a failed step leaves the state half-updated */
    char error[1024];
};

struct dfg_host_ctx {
    dfg_runtime *rt;
    int stage;
};

/* Records a message (and returns s); with sticky, later steps refuse to run (dfg_runtime_fail). */
#define dfg_rt_fail dfg_runtime_fail
/* The arena address of tensor t. */
static inline void *dfg_rt_ptr(const dfg_runtime *rt, const dfg_tensor *t) {
    return rt->arena + rt->plan.offset[t->id];
}
/* A persistent or output tensor by name, or NULL with the runtime's message set. */
const dfg_tensor *dfg_rt_lookup(dfg_runtime *rt, const char *name);

/* Check mode. Each failing call sets the runtime's sticky error to a message starting with
 * "DFG_CHECK:" and returns DFG_ERR_STATE (DFG_ERR_NOMEM from create when out of memory).
 * A stage's plan step `index` is a node index for graph stages, 0 for host stages; an empty
 * graph's one step is index 0 too. */
bool dfg_check_wanted(const dfg_run_options *o); /* opt.check, or DFG_CHECK set and not "0" */
dfg_status dfg_check_create(dfg_runtime *rt);     /* sets rt->check; checks the plan's overlaps */
void dfg_check_free(dfg_check *c);
dfg_status dfg_check_step_begin(dfg_runtime *rt);
dfg_status dfg_check_before(dfg_runtime *rt, int stage, int run, int index); /* before a kernel or host stage */
dfg_status dfg_check_after(dfg_runtime *rt, int stage, int run, int index);
dfg_status dfg_check_step_end(dfg_runtime *rt);
void dfg_check_stage_end(dfg_runtime *rt, int stage, bool ran); /* after its runs, or in its place when it did not run */
void dfg_check_loop_end(dfg_runtime *rt, int stage); /* after a loop's last stage, when the step goes on past it */
void dfg_check_loop_back(dfg_runtime *rt, int stage); /* after a loop's last stage, when the step goes back */

/* Staging (staging.c): the pinned host memory host stages read and write persistent tensors in on
 * a backend whose arena is device memory; create sizes it, buffer downloads a tensor into it
 * (once per stage), flush uploads what a stage saw and forgets it. */
dfg_status dfg_rt_staging_create(dfg_runtime *rt);
void dfg_rt_staging_free(dfg_runtime *rt);
dfg_status dfg_rt_staging_buffer(dfg_runtime *rt, const dfg_tensor *t, void **host);
dfg_status dfg_rt_staging_flush(dfg_runtime *rt);

/* Sets dst from dst->init_from (dfg_init_from), converting the dtype. */
dfg_status dfg_rt_derive_init(dfg_runtime *rt, const dfg_tensor *dst);

#endif
