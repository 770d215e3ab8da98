/* comm.h - the collectives a data-parallel run's kernels call: one communicator per rank, made by
 * the runtime and handed to the kernels in their context (dfg_cpu_ctx, dfg_cuda_ctx).
 *
 * Implementations (the runtime's): MPI on host memory for the CPU backend (runtime/comm_mpi.c);
 * for the CUDA backend NCCL on device memory, enqueued on the stage's stream so a captured stage
 * holds its collectives (runtime/cuda/comm_nccl.c), or, on the emulated device, the MPI
 * communicator run as a node of the emulator's stream (runtime/cuda/emu/device_emu.c). A kernel sees
 * only this struct, so the ops layer stays below the runtime.
 *
 * Every call is made by every rank in the same order (the ranks run one plan). Failures (a rank
 * that does not arrive within the run's timeout, a transport error) return a status with one line
 * in err naming the rank; nothing aborts. */
#ifndef DFG_COMM_H
#define DFG_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "op.h" /* dfg_coll_op (dfg_ops.h), dfg_dtype */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dfg_comm dfg_comm;
struct dfg_comm {
    int rank, size;
    void *impl;
    /* In place over count elements of dt at buf: the sum, min or max over the ranks (op is
     * DFG_COLL_SUM, _MIN or _MAX; a mean is the kernel's sum and scale). stream: the device
     * stream the call is ordered on (NULL for host memory). */
    dfg_status (*allreduce)(dfg_comm *c, void *buf, int64_t count, dfg_dtype dt, int op, void *stream, char *err,
                            size_t len);
    /* recv (size x bytes) = every rank's send (bytes), in rank order. */
    dfg_status (*all_gather)(dfg_comm *c, const void *send, void *recv, size_t bytes, void *stream, char *err,
                             size_t len);
    /* buf (bytes) = root's buf on every rank. */
    dfg_status (*broadcast)(dfg_comm *c, void *buf, size_t bytes, int root, void *stream, char *err, size_t len);
    /* Optional (NULL: calls run as made): the calls between begin (true) and end (false) are one
     * group, launched together at the end (NCCL's ncclGroupStart/End: a bucket of tensors in one
     * launch). Nothing but collectives may be enqueued inside a group. */
    dfg_status (*group)(dfg_comm *c, bool begin, char *err, size_t len);
    /* Optional (NULL: every call is ordered on the stream it is given): a side stream for the
     * gradient buckets, so that their communication overlaps the kernels enqueued after them.
     * fork returns the side stream, made to wait for everything enqueued on `stream` so far (NULL
     * with err on failure); join makes `stream` wait for everything enqueued on the side stream.
     * The backend joins before a stage's capture ends and before it waits for the device, so a
     * stage's buckets are done before anything after the stage reads them. */
    void *(*fork)(dfg_comm *c, void *stream, char *err, size_t len);
    dfg_status (*join)(dfg_comm *c, void *stream, char *err, size_t len);
};

/* For a collective's failure message: "gathering 'x'", "reducing 'x' and 3 more tensors" (ops/collective.c). */
void dfg_coll_describe(const dfg_node *n, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
