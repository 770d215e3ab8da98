/* comm_mpi.c - a data-parallel run's membership and host communicator over MPI (Debian's
 * OpenMPI): the collectives of the CPU kernels (ops/comm.h) on host memory, each a nonblocking MPI
 * call waited on with a deadline, so that a rank that hangs or dies is named instead of stopping
 * the run forever; the broadcast of the starting state; the end of the run.
 *
 * Without MPI in the build, or in a process no launcher started, the run is a world of one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "dist.h"
#include "runtime_internal.h"

#ifdef DFG_HAVE_MPI
#include <mpi.h>
#endif

struct dfg_dist {
    dfg_comm comm;     /* rank, size and the collectives the kernels call */
    double timeout_s;  /* a collective's deadline */
    bool mpi;          /* MPI_Init ran here */
    bool quiet;        /* a timed-out collective that a lower live rank reports */
    uint64_t calls;    /* collectives so far */
#ifdef DFG_HAVE_MPI
    MPI_Comm world;    /* a duplicate of MPI_COMM_WORLD whose errors return instead of aborting */
#endif
};

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

#ifdef DFG_HAVE_MPI
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
        if (waited > d->timeout_s) return dfg_dist_diagnose(d, what, err, len);
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
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), mpi_op(op), d->world, &req);
    return started(d, rc, &req, "the all-reduce", err, len);
}

static dfg_status mpi_all_gather(dfg_comm *c, const void *send, void *recv, size_t bytes, void *stream, char *err,
                                 size_t len) {
    (void)stream;
    dfg_dist *d = c->impl;
    if (bytes > INT32_MAX) return snprintf(err, len, "the host all-gather takes at most 2 GiB per rank"), DFG_ERR_UNSUPPORTED;
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, d->world, &req);
    return started(d, rc, &req, "the all-gather", err, len);
}

static dfg_status mpi_broadcast(dfg_comm *c, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    (void)stream;
    dfg_dist *d = c->impl;
    for (size_t off = 0; off < bytes || (off == 0 && bytes == 0); off += (size_t)1 << 30) { /* 1 GiB pieces */
        size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, d->world, &req);
        dfg_status st = started(d, rc, &req, "the broadcast", err, len);
        if (st || bytes == 0) return st;
    }
    return DFG_OK;
}

/* Every rank that timed out sends "alive" to every other and listens for theirs; a rank not heard
 * from within the grace period did not arrive. Point-to-point messages on the run's own
 * communicator, tagged apart from anything else. */
#define DIAG_TAG 7301
dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
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
        MPI_Irecv(&in[r], 1, MPI_INT, r, DIAG_TAG, d->world, &req[2 * r]);
        MPI_Isend(&out, 1, MPI_INT, r, DIAG_TAG, d->world, &req[2 * r + 1]);
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
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, d->world, &req);
    return started(d, rc, &req, "the all-reduce after the step", err, len);
}

static dfg_status open_mpi(dfg_dist *d, char *err, size_t len) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* only this thread calls MPI (OpenMP's threads never do) */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return snprintf(err, len, "MPI_Init failed"), DFG_ERR_RUNTIME;
        d->mpi = true;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &d->world);
    MPI_Comm_set_errhandler(d->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->world, &d->comm.rank);
    MPI_Comm_size(d->world, &d->comm.size);
    d->comm.allreduce = mpi_allreduce;
    d->comm.all_gather = mpi_all_gather;
    d->comm.broadcast = mpi_broadcast;
    return DFG_OK;
}
#else
dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
    snprintf(err, len, "%s did not complete within %.0f s", what, dfg_dist_timeout(d));
    return DFG_ERR_RUNTIME;
}
#endif

dfg_status dfg_dist_open(dfg_dist **out, double timeout_s, char *err, size_t len) {
    if (!out) return DFG_ERR_ARG;
    dfg_dist *d = calloc(1, sizeof(*d));
    if (!d) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    d->comm = (dfg_comm){.rank = 0, .size = 1, .impl = d};
    d->timeout_s = timeout_s > 0 ? timeout_s : 600.0;
    *out = d;
    if (!started_by_launcher()) return DFG_OK;
#ifdef DFG_HAVE_MPI
    return open_mpi(d, err, len);
#else
    snprintf(err, len, "this process was started by an MPI launcher, but this dfg was built without MPI (install "
                       "libopenmpi-dev and rebuild)");
    return DFG_ERR_UNSUPPORTED;
#endif
}

dfg_status dfg_dist_sum(dfg_dist *d, double *v, int n, char *err, size_t len) {
    if (!d || d->comm.size == 1) return DFG_OK;
    if (!v || n < 1) return DFG_ERR_ARG;
#ifdef DFG_HAVE_MPI
    return host_sum(d, v, n, err, len);
#else
    (void)err, (void)len;
    return DFG_ERR_UNSUPPORTED;
#endif
}

void dfg_dist_close(dfg_dist *d, int exit_code) {
    if (!d) return;
#ifdef DFG_HAVE_MPI
    if (d->comm.size > 1 && exit_code) {
        fflush(stdout), fflush(stderr);
        MPI_Abort(d->world, exit_code); /* the other ranks may be waiting in a collective */
    }
    if (d->comm.size > 1 || d->mpi) MPI_Comm_free(&d->world);
    if (d->mpi) MPI_Finalize();
#else
    (void)exit_code;
#endif
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
