/* comm_emu.c - the emulated device's communicator: the run's host communicator (MPI) called in
 * the emulated stream's order. Outside a capture a collective runs when it is enqueued, as every
 * emulated launch does; inside one it is recorded as a host node of the graph (as NCCL's kernels
 * are captured into a CUDA Graph on a GPU) and runs at each replay. A failure met at replay (a
 * rank that did not arrive) is kept and reported by comm_wait after the stage, the way an
 * asynchronous NCCL error is. bf16 and f16 tensors travel as f32 (MPI has no 16-bit floats): each
 * rank's values are widened, summed once and rounded once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../ops/dtype.h"
#include "../device.h"
#include "simt/dfg_simt_ctl.h"

typedef struct {
    dfg_comm self;   /* what the launchers call */
    dfg_comm *host;  /* the run's MPI communicator */
    dfg_status failed;
    char error[768];
    int unjoined; /* forks of the gradient buckets' side stream not joined back yet */
} emu_comm;

typedef enum { TASK_ALLREDUCE, TASK_ALL_GATHER, TASK_BROADCAST } task_kind;

typedef struct {
    emu_comm *c;
    task_kind kind;
    void *buf;        /* allreduce, broadcast: in place; all_gather: the output */
    const void *send; /* all_gather's input */
    int64_t count;    /* allreduce: elements; the others: bytes */
    dfg_dtype dtype;
    int op, root;
} comm_task;

static dfg_status allreduce_wide(emu_comm *c, const comm_task *t, char *err, size_t len) {
    float *wide = malloc(sizeof(float) * (size_t)(t->count ? t->count : 1));
    if (!wide) return snprintf(err, len, "out of memory widening the all-reduce"), DFG_ERR_NOMEM;
    for (int64_t i = 0; i < t->count; i++) wide[i] = dfg_load(t->buf, t->dtype, i);
    dfg_status st = c->host->allreduce(c->host, wide, t->count, DFG_F32, t->op, NULL, err, len);
    for (int64_t i = 0; !st && i < t->count; i++) dfg_store(t->buf, t->dtype, i, wide[i]);
    free(wide);
    return st;
}

static void run_task(void *arg) {
    const comm_task *t = arg;
    emu_comm *c = t->c;
    if (c->failed) return; /* a collective already failed: the run is stopping */
    char *err = c->error;
    size_t len = sizeof(c->error);
    dfg_status st;
    if (t->kind == TASK_ALL_GATHER) st = c->host->all_gather(c->host, t->send, t->buf, (size_t)t->count, NULL, err, len);
    else if (t->kind == TASK_BROADCAST) st = c->host->broadcast(c->host, t->buf, (size_t)t->count, t->root, NULL, err, len);
    else if (t->dtype == DFG_F32 || t->dtype == DFG_I32)
        st = c->host->allreduce(c->host, t->buf, t->count, t->dtype, t->op, NULL, err, len);
    else st = allreduce_wide(c, t, err, len);
    if (st) c->failed = st;
}

/* Runs t now, or records it while the stream is captured. */
static dfg_status enqueue(emu_comm *c, const comm_task *t, char *err, size_t len) {
    if (dfg_simt_capturing()) {
        if (dfg_simt_host_task(run_task, t, sizeof(*t)))
            return snprintf(err, len, "recording a collective: %s", dfg_simt_last_message()), DFG_ERR_NOMEM;
        return DFG_OK;
    }
    run_task((void *)t);
    if (c->failed) snprintf(err, len, "%s", c->error);
    return c->failed;
}

static dfg_status emu_allreduce(dfg_comm *self, void *buf, int64_t count, dfg_dtype dt, int op, void *stream, char *err,
                                size_t len) {
    (void)stream;
    emu_comm *c = self->impl;
    comm_task t = {.c = c, .kind = TASK_ALLREDUCE, .buf = buf, .count = count, .dtype = dt, .op = op};
    return enqueue(c, &t, err, len);
}

static dfg_status emu_all_gather(dfg_comm *self, const void *send, void *recv, size_t bytes, void *stream, char *err,
                                 size_t len) {
    (void)stream;
    emu_comm *c = self->impl;
    comm_task t = {.c = c, .kind = TASK_ALL_GATHER, .buf = recv, .send = send, .count = (int64_t)bytes};
    return enqueue(c, &t, err, len);
}

static dfg_status emu_broadcast(dfg_comm *self, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    (void)stream;
    emu_comm *c = self->impl;
    comm_task t = {.c = c, .kind = TASK_BROADCAST, .buf = buf, .count = (int64_t)bytes, .root = root};
    return enqueue(c, &t, err, len);
}

/* The side stream of the gradient buckets: the emulated stream runs everything in the order it
 * was enqueued, so the side stream is that stream (one of the orders a GPU may run them in); the
 * forks not joined back are counted, so that a stage left unjoined is caught (comm_wait). */
static void *emu_fork(dfg_comm *self, void *stream, char *err, size_t len) {
    (void)err, (void)len;
    emu_comm *c = self->impl;
    c->unjoined++;
    return stream ? stream : (void *)c; /* never NULL: NULL means failure */
}

static dfg_status emu_join(dfg_comm *self, void *stream, char *err, size_t len) {
    (void)stream, (void)err, (void)len;
    emu_comm *c = self->impl;
    c->unjoined = 0;
    return DFG_OK;
}

dfg_status dfg_comm_emu_open(void *dev, dfg_comm *host, dfg_comm **out, char *err, size_t len) {
    (void)dev;
    emu_comm *c = calloc(1, sizeof(*c));
    if (!c) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    c->host = host;
    c->self = (dfg_comm){.rank = host->rank, .size = host->size, .impl = c, .allreduce = emu_allreduce,
                         .all_gather = emu_all_gather, .broadcast = emu_broadcast, .fork = emu_fork,
                         .join = emu_join};
    *out = &c->self;
    return DFG_OK;
}

void dfg_comm_emu_close(dfg_comm *self) {
    if (self) free(self->impl);
}

/* The emulated stream has run everything by now; what remains is a failure to report. */
dfg_status dfg_comm_emu_wait(dfg_comm *self, char *err, size_t len) {
    emu_comm *c = self->impl;
    if (!c->failed && c->unjoined)
        c->failed = DFG_ERR_STATE, snprintf(c->error, sizeof(c->error), "the gradient buckets' side stream was "
                                            "forked %d times and not joined back before the device was waited for",
                                            c->unjoined);
    if (c->failed) snprintf(err, len, "%s", c->error);
    return c->failed;
}
