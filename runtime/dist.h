/* dist.h - the runtime's side of a data-parallel run (runtime/comm_mpi.c): the host
 * communicator the CPU kernels call, and what the CUDA backend's device communicators (NCCL, or
 * the emulated device's) build on: the launcher's rank and size, the broadcast of NCCL's unique
 * id, and the diagnosis of a collective that timed out. */
#ifndef DFG_DIST_H
#define DFG_DIST_H

#include "../ops/comm.h"
#include "dfg_runtime.h"

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
