// collective.cu - the CUDA launchers of the collectives (allreduce, all_gather, rank). The
// communication itself is the communicator's (ops/comm.h: NCCL on a GPU, enqueued on ctx->stream
// so a captured stage holds it; MPI as a node of the emulator's stream under emulation); the
// kernels here are the copies and scalings around it. Without a communicator (one process) the
// node must have been built for world 1 and is a copy.
#include "common.cuh"

#include "../comm.h"

namespace {

constexpr int kThreads = 256;

// y (count) *= s: the mean after the sum (f32 arithmetic on f32 or bf16 storage)
template <class T>
__global__ void scale_k(T *y, float s, int64_t count) {
    for (int64_t i = dfg_thread_index(); i < count; i += dfg_grid_threads())
        dfg_st(y, i, dfg_ld(y, i) * s);
}

// out (scalar i32) = rank
__global__ void set_rank(int32_t *out, int32_t rank) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = rank;
}

dfg_status comm_for(const dfg_node *n, dfg_cuda_ctx *ctx, dfg_comm **out) {
    int world = n->attr->collective.world, size = ctx->comm ? ctx->comm->size : 1;
    *out = world > 1 ? ctx->comm : nullptr;
    if (world != size)
        return dfg_cuda_fail(ctx, n, DFG_ERR_STATE, "built for %d rank%s, running in %d process%s", world, world == 1 ? "" : "s", size,
                             size == 1 ? "" : "es");
    return DFG_OK;
}

static dfg_status failed(const dfg_node *n, dfg_cuda_ctx *ctx, dfg_status st, const char *why) {
    char what[160];
    dfg_coll_describe(n, what, sizeof(what));
    return dfg_cuda_fail(ctx, n, st, "%s: %s", what, why);
}

} // namespace

// A bucket in three passes: the temporaries' copies, the all-reduces as one group (one NCCL
// launch for the bucket; nothing else may be enqueued inside a group), then a mean's scaling.
// A gradient bucket (dfg_allreduce_last) goes on the communicator's side stream when it has one:
// the backward's later kernels run beside its communication; the backend joins the side stream
// back at the stage's end, before anything after the stage reads the gradients.
DFG_CUDA_LAUNCHER(allreduce) {
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    const int op = n->attr->collective.op;
    for (int i = 0; !st && i < n->n_in; i++)
        if (out[i] != in[i])
            st = dfg_cuda_launched(ctx, n, DFG_CUDA_FN(copy_bytes)(out[i], in[i], dfg_tensor_bytes(n->in[i]), ctx), "copy_bytes");
    if (st || !c) return st;
    char why[512] = "";
    void *stream = ctx->stream;
    if (dfg_node_is_late_allreduce(n) && c->fork && !(stream = c->fork(c, ctx->stream, why, sizeof(why))))
        return failed(n, ctx, DFG_ERR_RUNTIME, why);
    if (c->group && (st = c->group(c, true, why, sizeof(why)))) return failed(n, ctx, st, why);
    for (int i = 0; !st && i < n->n_in; i++)
        st = c->allreduce(c, out[i], dfg_shape_numel(n->in[i]->shape), n->in[i]->dtype,
                          op == DFG_COLL_MEAN ? DFG_COLL_SUM : op, stream, why, sizeof(why));
    if (c->group) { // closed even after a failure, so the communicator is not left inside a group
        char end_why[256] = "";
        dfg_status end = c->group(c, false, end_why, sizeof(end_why));
        if (!st && end) st = end, snprintf(why, sizeof(why), "%s", end_why);
    }
    if (st) return failed(n, ctx, st, why);
    for (int i = 0; !st && op == DFG_COLL_MEAN && i < n->n_in; i++) {
        const dfg_tensor *t = n->in[i];
        const int64_t cnt = dfg_shape_numel(t->shape);
        const float inv = 1.0f / (float)c->size;
        const unsigned grid = dfg_grid_for(cnt, kThreads, ctx);
        DFG_CUDA_FLOAT_DISPATCH(ctx, n, t, T,
                                st = dfg_cuda_launched(ctx, n,
                                                       DFG_LAUNCH(scale_k<T>, grid, kThreads, 0, (cudaStream_t)stream,
                                                                  (T *)out[i], inv, cnt),
                                                       "scale_k"));
    }
    return st;
}

DFG_CUDA_LAUNCHER(all_gather) {
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    if (st) return st;
    const size_t bytes = dfg_tensor_bytes(n->in[0]);
    if (!c) return dfg_cuda_launched(ctx, n, DFG_CUDA_FN(copy_bytes)(out[0], in[0], bytes, ctx), "copy_bytes");
    char why[512] = "";
    st = c->all_gather(c, in[0], out[0], bytes, ctx->stream, why, sizeof(why));
    return st ? failed(n, ctx, st, why) : DFG_OK;
}

DFG_CUDA_LAUNCHER(rank) {
    (void)in;
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    if (st) return st;
    return dfg_cuda_launched(ctx, n,
                             DFG_LAUNCH(set_rank, 1, 32, 0, (cudaStream_t)ctx->stream, (int32_t *)out[0],
                                        (int32_t)(c ? c->rank : 0)),
                             "set_rank");
}
