/* comm_mpi.c - the MPI module (libdfg-mpi.so, runtime/module.h): a data-parallel run's host
 * communicator over MPI (Debian's OpenMPI), opened by runtime/dist.c only in a process an MPI
 * launcher started. The collectives of the CPU kernels (ops/comm.h) run on host memory, each a
 * nonblocking MPI call waited on with a deadline, so that a rank that hangs or dies is named
 * instead of stopping the run forever. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <mpi.h>

#include "dist.h"
#include "module.h"

typedef struct {
    bool inited;    /* MPI_Init ran here */
    MPI_Comm world; /* a duplicate of MPI_COMM_WORLD whose errors return instead of aborting */
} mpi_state;

static MPI_Comm world_of(const dfg_dist *d) { return ((const mpi_state *)d->mpi_state)->world; }

static dfg_status diagnose(dfg_dist *d, const char *what, char *err, size_t len);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static MPI_Datatype mpi_type(dfg_dtype dt) {
    switch (dt) {
    case DFG_F32: return MPI_FLOAT;
    case DFG_I32: return MPI_INT32_T;
    default: return MPI_DATATYPE_NULL; /* the host collectives reduce f32 (the CPU's dtype) */
    }
}

static MPI_Op mpi_op(int op) { return op == DFG_COLL_MIN ? MPI_MIN : op == DFG_COLL_MAX ? MPI_MAX : MPI_SUM; }

static void mpi_message(int rc, char *buf, size_t len) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof(s), "MPI error %d", rc);
    snprintf(buf, len, "%s", s);
}

/* Waits for req until the deadline. MPI progresses a nonblocking collective only inside MPI
 * calls, so the first 20 ms test it back to back (yielding the core between tests: ranks may
 * share cores under mpirun --oversubscribe), then with pauses that grow to 1 ms. */
static dfg_status wait_for(dfg_dist *d, MPI_Request *req, const char *what, char *err, size_t len) {
    double t0 = now_s();
    long pause_ns = 1000;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char m[256];
            mpi_message(rc, m, sizeof(m));
            snprintf(err, len, "%s failed on rank %d: %s (a peer rank is gone?)", what, d->comm.rank, m);
            return DFG_ERR_RUNTIME;
        }
        if (done) return DFG_OK;
        double waited = now_s() - t0;
        if (waited > d->timeout_s) return diagnose(d, what, err, len);
        if (waited < 0.02) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000) pause_ns *= 2;
    }
}

static dfg_status started(dfg_dist *d, int rc, MPI_Request *req, const char *what, char *err, size_t len) {
    d->calls++;
    if (rc == MPI_SUCCESS) return wait_for(d, req, what, err, len);
    char m[256];
    mpi_message(rc, m, sizeof(m));
    snprintf(err, len, "%s could not start on rank %d: %s", what, d->comm.rank, m);
    return DFG_ERR_RUNTIME;
}

static dfg_status mpi_allreduce(dfg_comm *c, void *buf, int64_t count, dfg_dtype dt, int op, void *stream, char *err,
                                size_t len) {
    (void)stream;
    dfg_dist *d = c->impl;
    if (mpi_type(dt) == MPI_DATATYPE_NULL || count > INT32_MAX)
        return snprintf(err, len, "the host all-reduce takes f32 or i32, at most 2^31 elements"), DFG_ERR_UNSUPPORTED;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), mpi_op(op), world_of(d), &req);
    return started(d, rc, &req, "the all-reduce", err, len);
}

static dfg_status mpi_all_gather(dfg_comm *c, const void *send, void *recv, size_t bytes, void *stream, char *err,
                                 size_t len) {
    (void)stream;
    dfg_dist *d = c->impl;
    if (bytes > INT32_MAX) return snprintf(err, len, "the host all-gather takes at most 2 GiB per rank"), DFG_ERR_UNSUPPORTED;
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, world_of(d), &req);
    return started(d, rc, &req, "the all-gather", err, len);
}

static dfg_status mpi_broadcast(dfg_comm *c, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    (void)stream;
    dfg_dist *d = c->impl;
    for (size_t off = 0; off < bytes || (off == 0 && bytes == 0); off += (size_t)1 << 30) { /* 1 GiB pieces */
        size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, world_of(d), &req);
        dfg_status st = started(d, rc, &req, "the broadcast", err, len);
        if (st || bytes == 0) return st;
    }
    return DFG_OK;
}

/* Every rank that timed out sends "alive" to every other and listens for theirs; a rank not heard
 * from within the grace period did not arrive. Point-to-point messages on the run's own
 * communicator, tagged apart from anything else. */
#define DIAG_TAG 7301
static dfg_status diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
    int W = d->comm.size, me = d->comm.rank;
    MPI_Request *req = calloc((size_t)W * 2, sizeof(*req));
    int *in = calloc((size_t)W, sizeof(int)), out = me;
    char *heard = calloc((size_t)W, 1);
    if (!req || !in || !heard) {
        free(req), free(in), free(heard);
        snprintf(err, len, "%s: no rank arrived within %.0f s (and no memory to ask which)", what, d->timeout_s);
        return DFG_ERR_RUNTIME;
    }
    for (int r = 0; r < W; r++) {
        req[2 * r] = req[2 * r + 1] = MPI_REQUEST_NULL;
        if (r == me) continue;
        MPI_Irecv(&in[r], 1, MPI_INT, r, DIAG_TAG, world_of(d), &req[2 * r]);
        MPI_Isend(&out, 1, MPI_INT, r, DIAG_TAG, world_of(d), &req[2 * r + 1]);
    }
    heard[me] = 1;
    double t0 = now_s(), grace = d->timeout_s < 30.0 ? d->timeout_s : 30.0;
    for (int pending = W - 1; pending > 0 && now_s() - t0 < grace;) {
        pending = 0;
        for (int r = 0; r < W; r++) {
            if (heard[r]) continue;
            int done = 0;
            if (MPI_Test(&req[2 * r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) heard[r] = 1;
            else pending++;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    int lowest_live = me, n_missing = 0;
    char missing[256] = "";
    for (int r = 0; r < W; r++) {
        if (heard[r] && r < lowest_live) lowest_live = r;
        if (heard[r]) continue;
        size_t used = strlen(missing);
        if (used < sizeof(missing) - 16) snprintf(missing + used, sizeof(missing) - used, "%s%d", n_missing ? ", " : "", r);
        n_missing++;
    }
    d->quiet = lowest_live != me; /* the ranks that waited agree on who is missing: one of them says so */
    if (n_missing)
        snprintf(err, len, "rank%s %s did not reach %s within %.0f s (hung, or dead without its launcher noticing); "
                 "stopping the run", n_missing > 1 ? "s" : "", missing, what, d->timeout_s);
    else
        snprintf(err, len, "%s did not complete within %.0f s although every rank is alive (a transport stall)", what,
                 d->timeout_s);
    free(req), free(in), free(heard); /* requests left pending: the run is being stopped */
    return DFG_ERR_RUNTIME;
}

static dfg_status host_sum(dfg_dist *d, double *v, int n, char *err, size_t len) {
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, world_of(d), &req);
    return started(d, rc, &req, "the all-reduce after the step", err, len);
}

static dfg_status open_mpi(dfg_dist *d, char *err, size_t len) {
    mpi_state *m = calloc(1, sizeof(*m));
    if (!m) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    d->mpi_state = m;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* only this thread calls MPI (OpenMP's threads never do) */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return snprintf(err, len, "MPI_Init failed"), DFG_ERR_RUNTIME;
        m->inited = true;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->world, &d->comm.rank);
    MPI_Comm_size(m->world, &d->comm.size);
    d->comm.allreduce = mpi_allreduce;
    d->comm.all_gather = mpi_all_gather;
    d->comm.broadcast = mpi_broadcast;
    return DFG_OK;
}

/* After a failure every rank is stopped (the others may be waiting in a collective); after
 * success, MPI_Finalize where MPI_Init ran here. */
static void close_mpi(dfg_dist *d, int exit_code) {
    mpi_state *m = d->mpi_state;
    if (!m) return;
    if (d->comm.size > 1 && exit_code) {
        fflush(stdout), fflush(stderr);
        MPI_Abort(m->world, exit_code);
    }
    MPI_Comm_free(&m->world);
    if (m->inited) MPI_Finalize();
    free(m);
    d->mpi_state = NULL;
}

static const dfg_mpi_ops ops = {.open = open_mpi, .sum = host_sum, .diagnose = diagnose, .close = close_mpi};

__attribute__((visibility("default"))) const dfg_mpi_ops *dfg_mpi_module(int abi);
const dfg_mpi_ops *dfg_mpi_module(int abi) { return abi == DFG_MODULE_ABI ? &ops : NULL; }
