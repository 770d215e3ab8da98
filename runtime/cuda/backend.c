/* backend.c - the CUDA backend over a device layer (device.h): a GPU, or the SIMT emulator.
 *
 * One device allocation holds the planned arena and, after it, the kernels' workspace (the
 * largest any node's launcher asks for), the GEMM library's workspace and the device flag word
 * kernels set on bad values: nothing is allocated after start-up. A batch-invariant plan
 * (dfg_declare_batch_invariant) sets the context's `invariant`: its forward matmuls, attention
 * and log-prob logits then run ops/cuda/invariant.cu's kernels, not cuBLASLt's or cuDNN's. Nodes run through the launcher
 * table of ops/cuda; a stage's nodes (every repeat, unrolled) are captured once as a graph and
 * replayed after that. The orchestration is the same for both devices; only the device layer
 * differs. Built into each of the backend's modules (runtime/module.h): with DFG_BACKEND_EMU the
 * emulated device's backend, with DFG_BACKEND_GPU the GPU's. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../dist.h"
#include "device.h"

typedef struct {
    const dfg_device *d;
    void *dev;
    dfg_cuda_ctx ctx;
    char desc[256];
    dfg_device_workspace ws; /* the workspace after the arena: the largest node scratch, the GEMM's */
    size_t arena_bytes; /* of the last alloc: the workspace follows it */
    char *base;         /* the one device allocation */
    int n_slots;
    void **graphs;      /* [slot] its graph once captured: a stage's, or the last chunk of one that ends early */
    dfg_comm *comm;     /* a data-parallel run's device communicator (ctx.comm); NULL alone */
} cuda_state;

/* The tail of the one allocation: workspace, GEMM workspace, flag word (256-byte aligned). */
#define ALIGN_UP(x) (((x) + 255) & ~(size_t)255)
static size_t tail_bytes(size_t scratch, size_t gemm) { return ALIGN_UP(scratch) + ALIGN_UP(gemm) + 256; }

/* Every node has a kernel on the device; the largest scratch a node asks for, and which node. */
static dfg_status check_kernels(const dfg_device *d, const dfg_program *p, dfg_device_workspace *w, char *err,
                                size_t len) {
    *w = (dfg_device_workspace){0};
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *n = p->graphs[gi]->nodes[i];
            if (n->op >= DFG_OP_COUNT || !d->kernels[n->op]) {
                snprintf(err, len, "cuda backend: op '%s' (node '%s' in graph '%s') has no CUDA kernel in this build",
                         dfg_op_name(n->op), n->name, p->graphs[gi]->name);
                return DFG_ERR_UNSUPPORTED;
            }
            size_t s = d->scratch_bytes(n);
            if (s > w->kernel_bytes)
                w->kernel_bytes = s, w->largest_node = n->name, w->largest_op = dfg_op_name(n->op),
                w->largest_graph = p->graphs[gi]->name;
        }
    w->library_bytes = d->gemm_workspace;
    w->total_bytes = tail_bytes(w->kernel_bytes, w->library_bytes);
    return DFG_OK;
}

/* The device communicator of a data-parallel run (NULL alone): NCCL, or the emulated device's. */
static dfg_status open_comm(cuda_state *st, const dfg_run_options *o, char *err, size_t len) {
    dfg_comm *host = o ? dfg_dist_comm(o->dist) : NULL;
    if (!host || host->size == 1) return DFG_OK;
    if (!st->d->comm_open)
        return snprintf(err, len, "cuda backend: this build has no NCCL, so a data-parallel cuda plan runs only on the "
                                  "emulated device (--emulate-gpu)"),
               DFG_ERR_UNSUPPORTED;
    dfg_status s = st->d->comm_open(st->dev, host, &st->comm, err, len);
    st->ctx.comm = st->comm;
    return s;
}

static dfg_status create_on(const dfg_device *d, const dfg_program *p, const dfg_run_options *o, void **state, char *err,
                            size_t len) {
    cuda_state *st = calloc(1, sizeof(*st));
    if (!st) return snprintf(err, len, "cuda backend: out of memory"), DFG_ERR_NOMEM;
    st->d = d;
    dfg_status s = check_kernels(d, p, &st->ws, err, len);
    int sm = 0;
    if (!s) s = d->open(&st->dev, &sm, st->desc, sizeof(st->desc), err, len);
    st->n_slots = 2 * p->n_stages; /* a graph per stage, and the last chunk of one that ends early */
    st->graphs = calloc((size_t)(st->n_slots ? st->n_slots : 1), sizeof(*st->graphs));
    if (!s && !st->graphs) s = (snprintf(err, len, "cuda backend: out of memory"), DFG_ERR_NOMEM);
    if (s) {
        if (st->dev) d->close(st->dev);
        free(st->graphs);
        free(st);
        return s;
    }
    st->ctx = (dfg_cuda_ctx){.stream = d->stream(st->dev), .gemm = d->gemm, .gemm_state = d->gemm_state(st->dev),
                             .sm_count = sm, .invariant = dfg_program_batch_invariant(p)};
    if (d->sdpa) st->ctx.sdpa = d->sdpa(st->dev, &st->ctx.sdpa_state);
    *state = st;
    return open_comm(st, o, err, len); /* on failure the runtime destroys the state */
}

#ifdef DFG_BACKEND_EMU
/* The emulated device's GEMMs run on OpenBLAS, whose sums depend on its thread count: the run's
 * thread count fixes them, as it does the CPU backend's. */
static dfg_status create_emulated(const dfg_program *p, const dfg_run_options *o, void **state, char *err, size_t len) {
    if (o && o->n_threads > 0) {
        omp_set_num_threads(o->n_threads);
        openblas_set_num_threads(o->n_threads);
    }
    return create_on(&dfg_device_emulated, p, o, state, err, len);
}
#endif

static void destroy(void *state) {
    cuda_state *st = state;
    if (!st) return;
    if (st->comm) st->d->comm_close(st->comm);
    for (int s = 0; s < st->n_slots; s++)
        if (st->graphs[s]) st->d->graph_destroy(st->dev, st->graphs[s]);
    st->d->close(st->dev);
    free(st->graphs);
    free(st);
}

static void *alloc(void *state, size_t bytes) {
    cuda_state *st = state;
    size_t arena = ALIGN_UP(bytes), scratch = ALIGN_UP(st->ws.kernel_bytes), gemm = ALIGN_UP(st->ws.library_bytes);
    st->base = st->d->alloc(st->dev, arena + st->ws.total_bytes);
    if (!st->base) return NULL;
    st->arena_bytes = arena;
    st->ctx.scratch = scratch ? st->base + arena : NULL;
    st->ctx.gemm_workspace = gemm ? st->base + arena + scratch : NULL;
    st->ctx.gemm_workspace_bytes = st->d->gemm_workspace;
    st->ctx.flags = (int *)(st->base + arena + scratch + gemm);
    char err[256];
    if (st->d->fill(st->dev, st->ctx.flags, 0, sizeof(int), err, sizeof(err))) return NULL;
    return st->base;
}

static void release(void *state, void *ptr) {
    cuda_state *st = state;
    if (ptr) st->d->release(st->dev, ptr);
}

static dfg_status upload(void *state, void *dst, const void *src, size_t bytes) {
    cuda_state *st = state;
    char err[256];
    return st->d->to_device(st->dev, dst, src, bytes, err, sizeof(err));
}

static dfg_status download(void *state, void *dst, const void *src, size_t bytes) {
    cuda_state *st = state;
    char err[256];
    return st->d->to_host(st->dev, dst, src, bytes, err, sizeof(err));
}

static dfg_status exec(void *state, const dfg_node *n, void *const *in, void *const *out, char *err, size_t len) {
    cuda_state *st = state;
    st->ctx.err = err;
    st->ctx.err_len = len;
    st->ctx.scratch_bytes = st->d->scratch_bytes(n);
    return st->d->kernels[n->op](n, in, out, &st->ctx);
}

/* The communicator's side stream (the gradient buckets') joined back into the device's stream:
 * at the end of every stage's launches, before its capture ends or the device is waited for. */
static dfg_status join_comm(cuda_state *st, char *err, size_t len) {
    return st->comm && st->comm->join ? st->comm->join(st->comm, st->d->stream(st->dev), err, len) : DFG_OK;
}

/* With a communicator the stream is waited for with the run's timeout first (a rank that does
 * not arrive must not stop this one forever). */
static dfg_status wait_comm(cuda_state *st, char *err, size_t len) {
    dfg_status s = join_comm(st, err, len);
    return s || !st->comm ? s : st->d->comm_wait(st->comm, err, len);
}

static dfg_status sync(void *state) {
    cuda_state *st = state;
    char err[768];
    dfg_status s = wait_comm(st, err, sizeof(err));
    return s ? s : st->d->sync(st->dev, err, sizeof(err));
}

static void *alloc_host(void *state, size_t bytes) {
    cuda_state *st = state;
    return st->d->alloc_host(st->dev, bytes);
}

static void free_host(void *state, void *ptr) {
    cuda_state *st = state;
    if (ptr) st->d->release_host(st->dev, ptr);
}

static dfg_status capture_begin(void *state, int stage, char *err, size_t len) {
    cuda_state *st = state;
    if (stage < 0 || stage >= st->n_slots || st->graphs[stage])
        return snprintf(err, len, "stage %d is captured already", stage), DFG_ERR_STATE;
    return st->d->capture_begin(st->dev, err, len);
}

static dfg_status capture_end(void *state, int stage, char *err, size_t len) {
    cuda_state *st = state;
    dfg_status joined = join_comm(st, err, len); /* a capture must end on the stream it began on */
    dfg_status s = st->d->capture_end(st->dev, &st->graphs[stage], err + strlen(err), len - strlen(err));
    return joined ? joined : s;
}

static dfg_status replay(void *state, int stage, char *err, size_t len) {
    cuda_state *st = state;
    if (stage < 0 || stage >= st->n_slots || !st->graphs[stage])
        return snprintf(err, len, "stage %d has no graph", stage), DFG_ERR_STATE;
    return st->d->graph_launch(st->dev, st->graphs[stage], err, len);
}

/* The flag word: kernels set it to a nonzero code when they meet a value the CPU kernel would
 * refuse (an id out of range, a NaN row in sampling); it is read, and cleared, after a stage. */
static dfg_status check_flags(void *state, char *err, size_t len) {
    cuda_state *st = state;
    int flag = 0;
    dfg_status s = wait_comm(st, err, len);
    if (!s) s = st->d->to_host(st->dev, &flag, st->ctx.flags, sizeof(flag), err, len);
    if (s || !flag) return s;
    char ignored[128];
    st->d->fill(st->dev, st->ctx.flags, 0, sizeof(int), ignored, sizeof(ignored));
    snprintf(err, len, "a kernel found a value out of range on the device (flag %d): a token id outside the vocabulary, "
                       "a position past the cache, a padded row's start outside its columns, or a row of NaN logits",
             flag);
    return DFG_ERR_RANGE;
}

static const char *describe(void *state) { return ((cuda_state *)state)->desc; }

static size_t device_bytes(void *state) {
    cuda_state *st = state;
    return st->d->allocated(st->dev);
}

/* Everything of the one allocation after the arena: kernel workspace, GEMM workspace, flags. */
static size_t workspace_bytes(void *state) { return ((cuda_state *)state)->ws.total_bytes; }

static dfg_status workspace_on(const dfg_device *d, const dfg_program *p, dfg_device_workspace *w) {
    char err[256];
    return check_kernels(d, p, w, err, sizeof(err));
}

/* Opens the device and closes it again: the device's own line when it is there, its reason when not. */
static dfg_status probe_on(const dfg_device *d, char *msg, size_t len) {
    void *dev = NULL;
    int sm_count = 0;
    char desc[256] = "";
    dfg_status st = d->open(&dev, &sm_count, desc, sizeof(desc), msg, len);
    if (st) return st;
    d->close(dev);
    snprintf(msg, len, "%s", desc);
    return DFG_OK;
}

#define DFG_CUDA_BACKEND(create_fn, workspace_fn, probe_fn, label)                                    \
    {.probe = probe_fn, .name = label, .create = create_fn, .destroy = destroy, .alloc = alloc, .free = release,          \
     .upload = upload, .download = download, .exec = exec, .sync = sync, .host_memory = false,          \
     .alloc_host = alloc_host, .free_host = free_host, .capture_begin = capture_begin,                   \
     .capture_end = capture_end, .replay = replay, .check_flags = check_flags, .describe = describe,    \
     .device_bytes = device_bytes, .workspace_bytes = workspace_bytes, .workspace_of = workspace_fn}

#ifdef DFG_BACKEND_EMU
static dfg_status workspace_emulated(const dfg_program *p, dfg_device_workspace *w) {
    return workspace_on(&dfg_device_emulated, p, w);
}
static dfg_status probe_emulated(char *msg, size_t len) { return probe_on(&dfg_device_emulated, msg, len); }
const dfg_backend dfg_backend_cuda_emulated =
    DFG_CUDA_BACKEND(create_emulated, workspace_emulated, probe_emulated, "cuda (emulated)");
#endif

#ifdef DFG_BACKEND_GPU
static dfg_status create_gpu(const dfg_program *p, const dfg_run_options *o, void **state, char *err, size_t len) {
    return create_on(&dfg_device_cuda, p, o, state, err, len);
}
static dfg_status workspace_gpu(const dfg_program *p, dfg_device_workspace *w) {
    return workspace_on(&dfg_device_cuda, p, w);
}
static dfg_status probe_gpu(char *msg, size_t len) { return probe_on(&dfg_device_cuda, msg, len); }
const dfg_backend dfg_backend_cuda = DFG_CUDA_BACKEND(create_gpu, workspace_gpu, probe_gpu, "cuda");
#endif
