/* comm_nccl.c - a data-parallel run's communicator on the GPU: NCCL collectives on the device's
 * one stream, so that a stage's capture holds them (NCCL 2.9+ supports CUDA Graph capture) and
 * replays launch them with the stage's kernels. The unique id that joins the ranks is broadcast
 * by the run's host communicator (MPI). comm_wait replaces a plain stream synchronisation: it
 * polls the stream against the run's timeout and NCCL's asynchronous error, and on a timeout asks
 * the host communicator which rank did not arrive (dfg_dist_diagnose), then aborts the NCCL
 * communicator so nothing waits on it any more.
 *
 * The gradient buckets (dfg_allreduce_last) go on a side stream forked from the device's stream
 * when their gradients are final (an event recorded there, waited for on the side), so that the
 * rest of the backward runs beside them; the backend joins it back (the reverse) at the stage's
 * end. In a capture, fork and join are the edges of a branch of the stage's CUDA Graph.
 *
 * The communicator is nonblocking (config.blocking = 0) so that no NCCL call can wait forever on
 * a rank that never comes: its set-up (ncclCommInitRankConfig, which waits for every rank) and
 * each enqueue may return ncclInProgress, and settle() polls the communicator's state against
 * the same timeout, as NCCL asks before the next call on it.
 *
 * Written for NCCL 2.x as the CUDA 13 toolkit ships it; built here, run only where a GPU is
 * (the emulated device's communicator, comm_emu.c, runs the same orchestration in CI). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../dist.h"
#include "device.h"

typedef struct {
    dfg_comm self;   /* what the launchers call */
    dfg_comm *host;  /* the run's MPI communicator */
    ncclComm_t nccl;
    cudaStream_t stream;
    cudaStream_t side;          /* the gradient buckets' stream (fork/join) */
    cudaEvent_t forked, joined; /* side waits for stream at forked; stream waits for side at joined */
    bool aborted;
} nccl_comm;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dfg_status nccl_failed(ncclResult_t r, const char *what, char *err, size_t len) {
    snprintf(err, len, "%s: %s", what, ncclGetErrorString(r));
    return DFG_ERR_RUNTIME;
}

/* A call on the nonblocking communicator returned r: ncclInProgress until NCCL's own threads are
 * done with it (connecting to peers, at set-up). Polls its state up to the run's timeout; then
 * the host communicator names the rank that is missing and the communicator is aborted. */
static dfg_status settle(nccl_comm *c, ncclResult_t r, const char *what, char *err, size_t len) {
    double t0 = now_s(), limit = dfg_dist_timeout(c->host->impl);
    struct timespec pause = {0, 100000};
    while (r == ncclInProgress) {
        if (now_s() - t0 > limit) {
            dfg_status st = dfg_dist_diagnose(c->host->impl, what, err, len);
            c->aborted = true;
            ncclCommAbort(c->nccl);
            return st;
        }
        nanosleep(&pause, NULL);
        if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess) break;
    }
    return r == ncclSuccess ? DFG_OK : nccl_failed(r, what, err, len);
}

static bool nccl_type(dfg_dtype dt, ncclDataType_t *t) {
    switch (dt) {
    case DFG_F32: *t = ncclFloat32; return true;
    case DFG_BF16: *t = ncclBfloat16; return true;
    case DFG_F16: *t = ncclFloat16; return true;
    case DFG_I32: *t = ncclInt32; return true;
    default: return false;
    }
}

static dfg_status nccl_allreduce(dfg_comm *self, void *buf, int64_t count, dfg_dtype dt, int op, void *stream, char *err,
                                 size_t len) {
    nccl_comm *c = self->impl;
    ncclDataType_t t;
    if (!nccl_type(dt, &t)) return snprintf(err, len, "NCCL all-reduce of %s", dfg_dtype_name(dt)), DFG_ERR_UNSUPPORTED;
    ncclRedOp_t o = op == DFG_COLL_MIN ? ncclMin : op == DFG_COLL_MAX ? ncclMax : ncclSum;
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)count, t, o, c->nccl, (cudaStream_t)stream);
    return settle(c, r, "an NCCL all-reduce", err, len);
}

static dfg_status nccl_all_gather(dfg_comm *self, const void *send, void *recv, size_t bytes, void *stream, char *err,
                                  size_t len) {
    nccl_comm *c = self->impl;
    ncclResult_t r = ncclAllGather(send, recv, bytes, ncclUint8, c->nccl, (cudaStream_t)stream);
    return settle(c, r, "an NCCL all-gather", err, len);
}

static dfg_status nccl_broadcast(dfg_comm *self, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    nccl_comm *c = self->impl;
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->nccl, (cudaStream_t)stream);
    return settle(c, r, "an NCCL broadcast", err, len);
}

/* In a group the calls only record; ncclGroupEnd enqueues them (ncclInProgress until it has). */
static dfg_status nccl_group(dfg_comm *self, bool begin, char *err, size_t len) {
    ncclResult_t r = begin ? ncclGroupStart() : ncclGroupEnd();
    return settle(self->impl, r, begin ? "an NCCL group's start" : "an NCCL group of collectives", err, len);
}

static dfg_status cuda_failed(cudaError_t e, const char *what, char *err, size_t len) {
    snprintf(err, len, "%s: %s", what, cudaGetErrorString(e));
    return DFG_ERR_RUNTIME;
}

/* The side stream, after the work enqueued on `stream` so far. Inside a capture the event's
 * record and wait become the graph's edges (the fork of a CUDA Graph branch). */
static void *nccl_fork(dfg_comm *self, void *stream, char *err, size_t len) {
    nccl_comm *c = self->impl;
    cudaError_t e = cudaEventRecord(c->forked, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->side, c->forked, 0);
    if (e != cudaSuccess) return cuda_failed(e, "forking the gradient buckets' stream", err, len), NULL;
    return c->side;
}

static dfg_status nccl_join(dfg_comm *self, void *stream, char *err, size_t len) {
    nccl_comm *c = self->impl;
    cudaError_t e = cudaEventRecord(c->joined, c->side);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, c->joined, 0);
    return e == cudaSuccess ? DFG_OK : cuda_failed(e, "joining the gradient buckets' stream", err, len);
}

/* The side stream and its two events (no timing: they only order). */
static dfg_status open_side(nccl_comm *c, char *err, size_t len) {
    cudaError_t e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming);
    return e == cudaSuccess ? DFG_OK : cuda_failed(e, "the gradient buckets' stream", err, len);
}

static void close_side(nccl_comm *c) {
    if (c->joined) cudaEventDestroy(c->joined);
    if (c->forked) cudaEventDestroy(c->forked);
    if (c->side) cudaStreamDestroy(c->side);
}

dfg_status dfg_comm_nccl_open(void *stream, dfg_comm *host, dfg_comm **out, char *err, size_t len) {
    nccl_comm *c = calloc(1, sizeof(*c));
    if (!c) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (host->rank == 0) r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        free(c);
        return nccl_failed(r, "NCCL's unique id", err, len); /* the other ranks time out in the broadcast, naming rank 0 */
    }
    c->host = host;
    c->stream = (cudaStream_t)stream;
    dfg_status st = host->broadcast(host, &id, sizeof(id), 0, NULL, err, len);
    if (!st) st = open_side(c, err, len);
    if (!st) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0; /* see the top of the file */
        r = ncclCommInitRankConfig(&c->nccl, host->size, id, host->rank, &config);
        st = r == ncclInProgress || r == ncclSuccess ? settle(c, r, "the NCCL communicator's set-up", err, len)
                                                     : nccl_failed(r, "the NCCL communicator's set-up", err, len);
        if (st && r != ncclInProgress && r != ncclSuccess) c->aborted = true; /* none was made */
        if (st && !c->aborted) ncclCommAbort(c->nccl);                      /* a failed one is aborted */
    }
    if (st) {
        close_side(c);
        free(c);
        return st;
    }
    c->self = (dfg_comm){.rank = host->rank, .size = host->size, .impl = c, .allreduce = nccl_allreduce,
                         .all_gather = nccl_all_gather, .broadcast = nccl_broadcast,
                         .group = nccl_group, .fork = nccl_fork, .join = nccl_join};
    *out = &c->self;
    return DFG_OK;
}

void dfg_comm_nccl_close(dfg_comm *self) {
    if (!self) return;
    nccl_comm *c = self->impl;
    if (!c->aborted) ncclCommDestroy(c->nccl); /* an aborted one is gone already */
    close_side(c);
    free(c);
}

/* The stream's work done, or NCCL's asynchronous error, or the timeout: then the host
 * communicator names the rank that did not arrive, and the NCCL communicator is aborted (its
 * kernels stop spinning, so the process can leave). */
dfg_status dfg_comm_nccl_wait(dfg_comm *self, char *err, size_t len) {
    nccl_comm *c = self->impl;
    double t0 = now_s(), limit = dfg_dist_timeout(c->host->impl);
    struct timespec pause = {0, 100000};
    for (;;) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return DFG_OK;
        if (e != cudaErrorNotReady) return snprintf(err, len, "CUDA: %s", cudaGetErrorString(e)), DFG_ERR_RUNTIME;
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(c->nccl, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            c->aborted = true;
            ncclCommAbort(c->nccl);
            return nccl_failed(async, "an NCCL collective", err, len);
        }
        if (now_s() - t0 > limit) {
            dfg_status st = dfg_dist_diagnose(c->host->impl, "a collective on the GPU", err, len);
            c->aborted = true;
            ncclCommAbort(c->nccl);
            return st;
        }
        nanosleep(&pause, NULL);
    }
}
