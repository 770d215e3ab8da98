/* dist.c - a data-parallel run's membership (dfg_runtime.h's dfg_dist_*): a world of one, or,
 * in a process an MPI launcher started, the ranks of the MPI module (libdfg-mpi.so, opened
 * only then: a run of one process maps no MPI library); and the broadcast of the starting
 * state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "module.h"
#include "runtime_internal.h"

/* A launcher that starts MPI processes sets one of these (OpenMPI's mpirun, MPICH's hydra, PMIx). */
static bool started_by_launcher(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i])) return true;
    return false;
}

int dfg_dist_rank(const dfg_dist *d) { return d ? d->comm.rank : 0; }
int dfg_dist_size(const dfg_dist *d) { return d ? d->comm.size : 1; }
bool dfg_dist_reports(const dfg_dist *d) { return !d || !d->quiet; }
dfg_comm *dfg_dist_comm(dfg_dist *d) { return d ? &d->comm : NULL; }
double dfg_dist_timeout(const dfg_dist *d) { return d ? d->timeout_s : 600.0; }

dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
    if (d && d->mpi) return d->mpi->diagnose(d, what, err, len);
    snprintf(err, len, "%s did not complete within %.0f s", what, dfg_dist_timeout(d));
    return DFG_ERR_RUNTIME;
}

/* The MPI module's functions; one line in err when it is not there or does not load. */
static dfg_status open_module(const dfg_mpi_ops **ops, char *err, size_t len) {
    dfg_mpi_module_fn entry = NULL;
    char why[1200];
    if (dfg_module_open(DFG_MODULE_MPI, DFG_MPI_MODULE_SYMBOL, (void **)&entry, why, sizeof(why)))
        return snprintf(err, len, "this process was started by an MPI launcher, but %s (build dfg with libopenmpi-dev)",
                        why),
               DFG_ERR_UNSUPPORTED;
    if (!(*ops = entry(DFG_MODULE_ABI)))
        return snprintf(err, len, "%s was built for another dfg (module ABI): rebuild dfg", DFG_MODULE_MPI),
               DFG_ERR_UNSUPPORTED;
    return DFG_OK;
}

dfg_status dfg_dist_open(dfg_dist **out, double timeout_s, char *err, size_t len) {
    if (!out) return DFG_ERR_ARG;
    dfg_dist *d = calloc(1, sizeof(*d));
    if (!d) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    d->comm = (dfg_comm){.rank = 0, .size = 1, .impl = d};
    d->timeout_s = timeout_s > 0 ? timeout_s : 600.0;
    *out = d;
    if (!started_by_launcher()) return DFG_OK;
    const dfg_mpi_ops *mpi = NULL;
    dfg_status st = open_module(&mpi, err, len);
    if (st) return st;
    d->mpi = mpi;
    return mpi->open(d, err, len);
}

dfg_status dfg_dist_sum(dfg_dist *d, double *v, int n, char *err, size_t len) {
    if (!d || d->comm.size == 1) return DFG_OK;
    if (!v || n < 1) return DFG_ERR_ARG;
    return d->mpi ? d->mpi->sum(d, v, n, err, len) : DFG_ERR_UNSUPPORTED;
}

void dfg_dist_close(dfg_dist *d, int exit_code) {
    if (!d) return;
    if (d->mpi) d->mpi->close(d, exit_code);
    free(d);
}

/* ---------------------------------------------------------------- the starting state */
dfg_status dfg_runtime_broadcast_state(dfg_runtime *rt) {
    if (!rt) return DFG_ERR_ARG;
    dfg_comm *c = dfg_dist_comm(rt->opt.dist);
    if (!c || c->size == 1) return DFG_OK;
    const dfg_program *p = rt->p;
    size_t most = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (dfg_is_persistent(p->tensors[i]) && dfg_tensor_bytes(p->tensors[i]) > most) most = dfg_tensor_bytes(p->tensors[i]);
    char *host = rt->be->host_memory ? NULL : malloc(most ? most : 1);
    if (!rt->be->host_memory && !host) return dfg_rt_fail(rt, DFG_ERR_NOMEM, false, "out of memory for the broadcast");
    dfg_status st = DFG_OK;
    for (int i = 0; !st && i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!dfg_is_persistent(t) || (t->kind != DFG_PARAM && t->kind != DFG_STATE)) continue;
        size_t bytes = dfg_tensor_bytes(t);
        void *at = host ? host : dfg_rt_ptr(rt, t);
        if (host) st = rt->be->download(rt->be_state, host, dfg_rt_ptr(rt, t), bytes);
        char why[512] = "";
        if (!st) st = c->broadcast(c, at, bytes, 0, NULL, why, sizeof(why));
        if (st) dfg_rt_fail(rt, st, false, "broadcasting '%s' from rank 0: %s", t->name, why[0] ? why : dfg_status_name(st));
        if (!st && host) st = rt->be->upload(rt->be_state, dfg_rt_ptr(rt, t), host, bytes);
    }
    free(host);
    return st;
}
