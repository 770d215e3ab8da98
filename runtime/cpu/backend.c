/* backend.c - the CPU backend: one aligned host allocation for the arena, the fp32 reference
 * kernels of ops/cpu, OpenMP and OpenBLAS sharing one thread count. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/cpu/cpu.h"
#include "../backend.h"
#include "../dist.h"

typedef struct {
    dfg_cpu_ctx ctx;
} cpu_state;

static const dfg_tensor *non_f32_float(const dfg_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (dfg_is_float(n->in[i]->dtype) && n->in[i]->dtype != DFG_F32) return n->in[i];
    for (int k = 0; k < n->n_out; k++)
        if (dfg_is_float(n->out[k]->dtype) && n->out[k]->dtype != DFG_F32) return n->out[k];
    return NULL;
}

static dfg_status cpu_create(const dfg_program *p, const dfg_run_options *o, void **state, char *err, size_t len) {
    size_t scratch = 0;
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        for (int i = 0; i < g->n_nodes; i++) {
            const dfg_node *n = g->nodes[i];
            const dfg_tensor *bad = dfg_ops[n->op].dtypes == DFG_DTYPES_ANY ? NULL : non_f32_float(n);
            if (bad) {
                snprintf(err, len,
                         "cpu backend: %s '%s' in graph '%s' computes in %s ('%s'); the CPU runs f32 programs "
                         "(compile with --target cpu)",
                         dfg_op_name(n->op), n->name, g->name, dfg_dtype_name(bad->dtype), bad->name);
                return DFG_ERR_UNSUPPORTED;
            }
            size_t s = dfg_cpu_scratch_bytes(n);
            if (s > scratch) scratch = s;
        }
    }
    cpu_state *st = calloc(1, sizeof(*st));
    int threads = o->n_threads > 0 ? o->n_threads : omp_get_max_threads();
    if (st && scratch) st->ctx.scratch = malloc(scratch * (size_t)threads);
    if (!st || (scratch && !st->ctx.scratch)) {
        if (st) free(st);
        snprintf(err, len, "cpu backend: out of memory for %zu bytes of kernel scratch", scratch * (size_t)threads);
        return DFG_ERR_NOMEM;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    st->ctx.n_threads = threads;
    st->ctx.scratch_per_thread = scratch;
    st->ctx.comm = dfg_dist_comm(o->dist); /* MPI between the ranks of a data-parallel run */
    st->ctx.invariant = p->decl.batch_invariant;
    *state = st;
    return DFG_OK;
}

static void cpu_destroy(void *state) {
    cpu_state *st = state;
    if (!st) return;
    free(st->ctx.scratch);
    free(st);
}

static void *cpu_alloc(void *state, size_t bytes) {
    (void)state;
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    return p;
}

static void cpu_free(void *state, void *ptr) {
    (void)state;
    free(ptr);
}

static dfg_status cpu_copy(void *state, void *dst, const void *src, size_t bytes) {
    (void)state;
    if (dst != src) memmove(dst, src, bytes);
    return DFG_OK;
}

static dfg_status cpu_exec(void *state, const dfg_node *n, void *const *in, void *const *out, char *err, size_t len) {
    cpu_state *st = state;
    st->ctx.err = err;
    st->ctx.err_len = len;
    return dfg_cpu_kernels[n->op](n, in, out, &st->ctx);
}

static dfg_status cpu_sync(void *state) {
    (void)state;
    return DFG_OK;
}

const dfg_backend dfg_backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .exec = cpu_exec,
    .sync = cpu_sync,
    .host_memory = true,
};
