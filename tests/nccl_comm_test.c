/* nccl_comm_test.c - runtime/cuda/comm_nccl.c's own logic against a scripted NCCL (ctest
 * "nccl_comm", label "c"). No GPU has run this project, so NCCL's real library cannot be called
 * here; this test links comm_nccl.c with stand-ins for the NCCL and CUDA calls it makes and for
 * the host communicator, each scripted per case, and checks what dfg does with NCCL's answers:
 *   - the communicator is made nonblocking (config.blocking = 0), so no call can block for ever;
 *   - a set-up that never completes (a rank that never joins) fails within the run's timeout,
 *     asks the host communicator which rank is missing, and aborts the communicator;
 *   - an asynchronous error during set-up fails with NCCL's message and aborts;
 *   - a set-up and collectives that report ncclInProgress a few times succeed once NCCL is done;
 *   - a group's end that stays in progress past the timeout fails naming the group;
 *   - a good communicator is destroyed at close, an aborted one is not touched again;
 *   - the gradient buckets' side stream: fork makes it wait for the main stream's work so far,
 *     join makes the main stream wait for it (the order of the event records and waits).
 * What NCCL itself does (rings, kernels, capture) is not tested here: only where a GPU is. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "../runtime/cuda/device.h"
#include "../runtime/dist.h"

/* ---------------------------------------------------------------- the script */
static struct {
    int init_polls;     /* polls of the async state before set-up completes; -1: never */
    ncclResult_t init_error; /* the async state's value once set-up ends (ncclSuccess: made) */
    int call_polls;     /* polls before an enqueue completes; -1: never */
    int polls;          /* async-state polls left in the current call */
    int blocking_seen;  /* config.blocking of the set-up call */
    int aborts, destroys, diagnoses, inits;
} nc;

/* streams and events: handles are addresses in these arrays (one communicator's at a time); a
 * log of what ordered what */
static char streams[4], events[4];
static int n_streams, n_events, n_destroyed;
static char order_log[256];

static void script(int init_polls, ncclResult_t init_error, int call_polls) {
    memset(&nc, 0, sizeof(nc));
    n_streams = n_events = n_destroyed = 0;
    nc.init_polls = init_polls, nc.init_error = init_error, nc.call_polls = call_polls, nc.blocking_seen = -7;
}

static ncclComm_t fake_comm(void) { return (ncclComm_t)(void *)&nc; }

/* a call that is in progress for n polls (-1: for ever) */
static ncclResult_t start_call(int n) {
    nc.polls = n;
    return n == 0 ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0x5a, sizeof(*id));
    return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    (void)nranks, (void)id, (void)rank;
    nc.inits++;
    nc.blocking_seen = config->blocking;
    *comm = fake_comm();
    ncclResult_t r = start_call(nc.init_polls);
    return r == ncclSuccess ? nc.init_error : r;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state) {
    (void)comm;
    if (nc.polls > 0) nc.polls--;
    *state = nc.polls != 0 ? ncclInProgress : nc.inits == 1 && nc.init_error ? nc.init_error : ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    (void)comm;
    nc.aborts++;
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    (void)comm;
    nc.destroys++;
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
                           cudaStream_t st) {
    (void)s, (void)r, (void)n, (void)t, (void)o, (void)c, (void)st;
    return start_call(nc.call_polls);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    (void)s, (void)r, (void)n, (void)t, (void)c, (void)st;
    return start_call(nc.call_polls);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st) {
    (void)s, (void)r, (void)n, (void)t, (void)root, (void)c, (void)st;
    return start_call(nc.call_polls);
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return start_call(nc.call_polls); }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclRemoteError ? "remote process exited or there was a network error" : "some NCCL error"; }
cudaError_t cudaStreamQuery(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) {
    (void)e;
    return "a CUDA error";
}
const char *dfg_dtype_name(dfg_dtype dt) { return dt == DFG_F32 ? "f32" : "other"; }

static void log_op(const char *fmt, const void *a, const void *b) {
    size_t k = strlen(order_log);
    snprintf(order_log + k, sizeof(order_log) - k, fmt, a == (void *)&streams[3] ? "main" : a == (void *)&streams[0] ? "side"
             : a == (void *)&events[0] ? "forked" : a == (void *)&events[1] ? "joined" : "?",
             b == (void *)&streams[3] ? "main" : b == (void *)&streams[0] ? "side" : b == (void *)&events[0] ? "forked"
             : b == (void *)&events[1] ? "joined" : "?");
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    if (n_streams == 3) return cudaErrorMemoryAllocation; /* streams[3] is the main stream */
    *s = (cudaStream_t)(void *)&streams[n_streams++];
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    if (n_events == 4) return cudaErrorMemoryAllocation;
    *e = (cudaEvent_t)(void *)&events[n_events++];
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    log_op("record %s on %s; ", e, s);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    log_op("%s waits for %s; ", s, e);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    (void)e;
    n_destroyed++;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    n_destroyed++;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- the host communicator
 * (struct dfg_dist is runtime/dist.h's; the test fills only the deadline) */
double dfg_dist_timeout(const dfg_dist *d) { return d->timeout_s; }
dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
    nc.diagnoses++;
    snprintf(err, len, "rank 1 did not reach %s within %.1f s", what, d->timeout_s);
    return DFG_ERR_RUNTIME;
}
static dfg_status host_broadcast(dfg_comm *c, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    (void)c, (void)buf, (void)bytes, (void)root, (void)stream, (void)err, (void)len;
    return DFG_OK;
}

/* ---------------------------------------------------------------- checks */
static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (cond) printf("ok - " __VA_ARGS__);                                                                         \
        else printf("FAIL - " __VA_ARGS__), failures++;                                                                \
        printf("\n");                                                                                                  \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct dfg_dist dist = {.timeout_s = 0.3};
static dfg_comm host = {.rank = 0, .size = 2, .impl = &dist, .broadcast = host_broadcast};

static void never_joins(void) {
    script(-1, ncclSuccess, 0);
    dfg_comm *c = NULL;
    char err[256] = "";
    double t0 = now_s();
    dfg_status st = dfg_comm_nccl_open(NULL, &host, &c, err, sizeof(err));
    double took = now_s() - t0;
    CHECK(nc.blocking_seen == 0, "the communicator is made nonblocking (config.blocking = %d)", nc.blocking_seen);
    CHECK(st != DFG_OK && c == NULL, "a set-up that never completes fails (status %d)", (int)st);
    CHECK(took >= 0.3 && took < 2.0, "... after the run's timeout of 0.3 s (%.2f s)", took);
    CHECK(nc.diagnoses == 1 && strstr(err, "rank 1") && strstr(err, "set-up"),
          "... naming the missing rank and what it missed: %s", err);
    CHECK(nc.aborts == 1 && nc.destroys == 0, "... and aborts the communicator (%d aborts, %d destroys)", nc.aborts,
          nc.destroys);
}

static void error_at_setup(void) {
    script(3, ncclRemoteError, 0);
    dfg_comm *c = NULL;
    char err[256] = "";
    dfg_status st = dfg_comm_nccl_open(NULL, &host, &c, err, sizeof(err));
    CHECK(st != DFG_OK && strstr(err, "remote process exited") && nc.diagnoses == 0,
          "an asynchronous error at set-up fails with NCCL's message: %s", err);
    CHECK(nc.aborts == 1, "... and aborts the communicator (%d)", nc.aborts);
}

static void settles(void) {
    script(5, ncclSuccess, 4);
    dfg_comm *c = NULL;
    char err[256] = "";
    float buf[4] = {1, 2, 3, 4};
    dfg_status st = dfg_comm_nccl_open(NULL, &host, &c, err, sizeof(err));
    CHECK(st == DFG_OK && c && c->rank == 0 && c->size == 2, "a set-up in progress for 5 polls completes (%s)", err);
    if (!c) return;
    st = c->allreduce(c, buf, 4, DFG_F32, DFG_COLL_SUM, NULL, err, sizeof(err));
    CHECK(st == DFG_OK && nc.polls == 0, "an all-reduce in progress for 4 polls is enqueued (%s)", err);
    st = c->all_gather(c, buf, buf, 8, NULL, err, sizeof(err));
    CHECK(st == DFG_OK && nc.polls == 0, "an all-gather likewise (%s)", err);
    st = c->group(c, true, err, sizeof(err));
    if (!st) st = c->allreduce(c, buf, 4, DFG_F32, DFG_COLL_SUM, NULL, err, sizeof(err));
    if (!st) st = c->group(c, false, err, sizeof(err));
    CHECK(st == DFG_OK && nc.polls == 0, "a group whose end is in progress for 4 polls is enqueued (%s)", err);
    nc.call_polls = -1;
    double t0 = now_s();
    st = c->group(c, true, err, sizeof(err));
    if (!st) st = c->group(c, false, err, sizeof(err));
    double took = now_s() - t0;
    CHECK(st != DFG_OK && strstr(err, "group") && took >= 0.3 && took < 2.0 && nc.aborts == 1,
          "a group's end that never completes fails after %.2f s and aborts: %s", took, err);
    dfg_comm_nccl_close(c);
    CHECK(nc.destroys == 0, "an aborted communicator is not destroyed again at close (%d)", nc.destroys);
}

static void destroyed_at_close(void) {
    script(0, ncclSuccess, 0);
    dfg_comm *c = NULL;
    char err[256] = "";
    dfg_status st = dfg_comm_nccl_open(NULL, &host, &c, err, sizeof(err));
    dfg_comm_nccl_close(c);
    CHECK(st == DFG_OK && nc.destroys == 1 && nc.aborts == 0, "a good communicator is destroyed at close (%d, %d)",
          nc.destroys, nc.aborts);
    CHECK(n_streams == 1 && n_events == 2 && n_destroyed == 3, "... with its side stream and 2 events (%d made, %d destroyed)",
          n_streams + n_events, n_destroyed);
}

/* The gradient buckets' side stream: fork orders it after the main stream's work so far, join
 * orders the main stream after everything on it. */
static void fork_and_join(void) {
    script(0, ncclSuccess, 0);
    dfg_comm *c = NULL;
    char err[256] = "";
    void *main_stream = &streams[3];
    dfg_status st = dfg_comm_nccl_open(main_stream, &host, &c, err, sizeof(err));
    CHECK(st == DFG_OK && c, "open for fork and join: %s", err);
    if (st || !c) return;
    order_log[0] = '\0';
    void *side = c->fork ? c->fork(c, main_stream, err, sizeof(err)) : NULL;
    CHECK(side == (void *)&streams[0] && !strcmp(order_log, "record forked on main; side waits for forked; "),
          "fork returns the side stream, after the main stream's work: %s", order_log);
    order_log[0] = '\0';
    st = c->join ? c->join(c, main_stream, err, sizeof(err)) : DFG_ERR_ARG;
    CHECK(st == DFG_OK && !strcmp(order_log, "record joined on side; main waits for joined; "),
          "join orders the main stream after the side stream: %s", order_log);
    dfg_comm_nccl_close(c);
}

int main(void) {
    never_joins();
    error_at_setup();
    settles();
    destroyed_at_close();
    fork_and_join();
    if (failures) printf("\n%d check(s) failed\n", failures);
    else printf("\nall checks passed\n");
    return failures ? 1 : 0;
}
