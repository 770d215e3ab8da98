// matmul.cu - matmul through the GEMM of the context (cuBLASLt on a GPU, the column-major
// interpreter under emulation), from the node's pure descriptor (gemm.h); and bias_add.
#include "common.cuh"
#include "invariant.cuh"

DFG_CUDA_LAUNCHER(matmul) {
    // a batch-invariant plan: the forward products (A not transposed) in invariant.cu's order
    if (ctx->invariant && !n->attr->matmul.trans_a) return DFG_CUDA_FN(inv_matmul)(n, in, out, ctx);
    dfg_gemm_desc d;
    const char *why = "";
    if (!dfg_gemm_matmul(n, &d, &why)) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "%s", why);
    if (!ctx->gemm) return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "no GEMM implementation in this context");
    // in the descriptor A is dfg's b and B is dfg's a (row-major C = a b is column-major C^T = b^T a^T)
    dfg_status st = ctx->gemm(ctx, &d, in[1], in[0], out[0], NULL);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", ctx->err ? ctx->err : "");
        return dfg_cuda_fail(ctx, n, st, "%s", msg);
    }
    return DFG_OK;
}

// y (rows, C) = x (rows, C) + b (C): one thread per element, grid-stride; 16-byte vectors when
// the rows are a multiple of 4 floats and the pointers aligned.
template <class T>
static __global__ void bias_add_kernel(T *y, const T *x, const T *b, int64_t total, int64_t c) {
    for (int64_t i = dfg_thread_index(); i < total; i += dfg_grid_threads())
        dfg_st(y, i, dfg_ld(x, i) + dfg_ld(b, i % c));
}

static __global__ void bias_add_f32x4(float4 *y, const float4 *x, const float4 *b, int64_t total4, int64_t c4) {
    for (int64_t i = dfg_thread_index(); i < total4; i += dfg_grid_threads()) {
        float4 v = x[i], w = b[i % c4];
        y[i] = make_float4(v.x + w.x, v.y + w.y, v.z + w.z, v.w + w.w);
    }
}

DFG_CUDA_LAUNCHER(bias_add) {
    const dfg_shape xs = n->in[0]->shape;
    int64_t c = xs.d[xs.rank - 1], total = dfg_shape_numel(xs);
    const int threads = 256;
    cudaError_t e;
    bool aligned = ((uintptr_t)in[0] | (uintptr_t)in[1] | (uintptr_t)out[0]) % 16 == 0;
    if (n->in[0]->dtype == DFG_F32 && c % 4 == 0 && aligned) {
        e = DFG_LAUNCH(bias_add_f32x4, dfg_grid_for(total / 4, threads, ctx), threads, 0, (cudaStream_t)ctx->stream,
                       (float4 *)out[0], (const float4 *)in[0], (const float4 *)in[1], total / 4, c / 4);
        return dfg_cuda_launched(ctx, n, e, "bias_add_f32x4");
    }
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T,
                            e = DFG_LAUNCH(bias_add_kernel<T>, dfg_grid_for(total, threads, ctx), threads, 0,
                                           (cudaStream_t)ctx->stream, (T *)out[0], (const T *)in[0],
                                           (const T *)in[1], total, c));
    return dfg_cuda_launched(ctx, n, e, "bias_add");
}
