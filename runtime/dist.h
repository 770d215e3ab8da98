/* dist.h - the runtime's side of a data-parallel run (runtime/dist.c): the host communicator
 * the CPU kernels call, and what the CUDA backend's device communicators (NCCL, or the emulated
 * device's) build on: the launcher's rank and size, the broadcast of NCCL's unique id, and the
 * diagnosis of a collective that timed out. The MPI calls are in a module (runtime/comm_mpi.c,
 * libdfg-mpi.so: module.h), opened only in a process an MPI launcher started. */
#ifndef DFG_DIST_H
#define DFG_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "../ops/comm.h"
#include "dfg_runtime.h"

/* The MPI module's functions (dfg_mpi_module). */
typedef struct {
    /* MPI_Init unless it ran, and the run's communicator: sets d->comm's rank, size and
     * collectives and d->mpi_state; one line in err on failure. */
    dfg_status (*open)(dfg_dist *d, char *err, size_t len);
    dfg_status (*sum)(dfg_dist *d, double *v, int n, char *err, size_t len); /* doubles, over the ranks */
    dfg_status (*diagnose)(dfg_dist *d, const char *what, char *err, size_t len); /* dfg_dist_diagnose's */
    void (*close)(dfg_dist *d, int exit_code); /* dfg_dist_close's MPI half; frees d->mpi_state */
} dfg_mpi_ops;
/* The module's export: its functions, or NULL for another DFG_MODULE_ABI. */
typedef const dfg_mpi_ops *(*dfg_mpi_module_fn)(int abi);
#define DFG_MPI_MODULE_SYMBOL "dfg_mpi_module"
#define DFG_MODULE_MPI "libdfg-mpi.so"

struct dfg_dist {
    dfg_comm comm;          /* rank, size and the collectives the kernels call */
    double timeout_s;       /* a collective's deadline */
    bool quiet;             /* a timed-out collective that a lower live rank reports */
    uint64_t calls;         /* collectives so far */
    const dfg_mpi_ops *mpi; /* NULL: a world of one */
    void *mpi_state;        /* the module's */
};

/* The host communicator (MPI on host memory); NULL for a NULL dist. */
dfg_comm *dfg_dist_comm(dfg_dist *d);
/* Seconds a collective may wait for the other ranks (dfg_dist_open's timeout). */
double dfg_dist_timeout(const dfg_dist *d);
/* After a collective waited past the timeout: which ranks did not arrive. Every rank that timed
 * out tells every other that it is alive; the ranks not heard from within the grace period are
 * named in err ("rank 1 did not reach <what> within 30 s (hung, or dead without its launcher
 * noticing)"). Returns DFG_ERR_RUNTIME. The lowest live rank is the one that reports. */
dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len);

#endif
