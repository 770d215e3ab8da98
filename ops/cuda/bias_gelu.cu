// bias_gelu.cu - gelu(x + bias) and its backward on the GPU, as ops/cpu/bias_gelu.c computes them
// (the tanh approximation with fastmath.h's rational tanh, f32 arithmetic on f32/bf16/f16
// storage). The fuse pass makes these from bias_add -> gelu, so the pre-activation x + bias is
// never stored: the backward recomputes it.
//
// Both are pointwise over x (rows, N) with the bias broadcast along the rows. Threads walk the
// (rows, N / V) grid of V-element vectors in grid-stride order: consecutive threads take
// consecutive vectors of a row (coalesced x, dy, y; the bias row stays in L1/L2), and the walk
// advances without a division per step. V = 16 bytes of the type (f32x4, bf16x8) when N is a
// multiple of it and every pointer is aligned, else 1.
//
// bias_gelu_bwd has a single output, d(x + bias): the bias gradient is a separate sum node over
// its rows (ops/bias_gelu.c's gradient rule), so this kernel needs no reduction and no scratch.
#include "common.cuh"
#include "gelu.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float gelu_f(float x) { return gelu_tanh::gelu(x); }
__device__ __forceinline__ float gelu_grad(float x) { return gelu_tanh::grad(x); } // d gelu / dx

// y (rows, N) = gelu(x + b)
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_kernel(T *y /* (rows, N) */, const T *x /* (rows, N) */, const T *b /* (N) */, int64_t rows, int64_t N) {
    for (DfgWalk w(N / V); w.r < rows; w.next()) {
        const int64_t col = w.c * V, at = w.r * N + col;
        DfgVec<T, V> vx = dfg_ldv<V>(x + at);
        const DfgVec<T, V> vb = dfg_ldv<V>(b + col);
#pragma unroll
        for (int j = 0; j < V; j++) vx.v[j] = dfg_from_f<T>(gelu_f(dfg_to_f(vx.v[j]) + dfg_to_f(vb.v[j])));
        dfg_stv<V>(y + at, vx);
    }
}

// du (rows, N) = dy * gelu'(x + b)
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_bwd_kernel(T *du /* (rows, N) */, const T *dy /* (rows, N) */, const T *x /* (rows, N) */,
                         const T *b /* (N) */, int64_t rows, int64_t N) {
    for (DfgWalk w(N / V); w.r < rows; w.next()) {
        const int64_t col = w.c * V, at = w.r * N + col;
        DfgVec<T, V> g = dfg_ldv<V>(dy + at);
        const DfgVec<T, V> vx = dfg_ldv<V>(x + at), vb = dfg_ldv<V>(b + col);
#pragma unroll
        for (int j = 0; j < V; j++)
            g.v[j] = dfg_from_f<T>(dfg_to_f(g.v[j]) * gelu_grad(dfg_to_f(vx.v[j]) + dfg_to_f(vb.v[j])));
        dfg_stv<V>(du + at, g);
    }
}

template <class T>
dfg_status launch_fwd(const dfg_node *n, void *y, const void *x, const void *b, int64_t rows, int64_t N,
                      dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(T);
    cudaError_t e;
    if (N % V == 0 && dfg_aligned16(y) && dfg_aligned16(x) && dfg_aligned16(b))
        e = DFG_LAUNCH((bias_gelu_kernel<T, V>), dfg_grid_for(rows * (N / V), kThreads, ctx), kThreads, 0,
                       (cudaStream_t)ctx->stream, (T *)y, (const T *)x, (const T *)b, rows, N);
    else
        e = DFG_LAUNCH((bias_gelu_kernel<T, 1>), dfg_grid_for(rows * N, kThreads, ctx), kThreads, 0,
                       (cudaStream_t)ctx->stream, (T *)y, (const T *)x, (const T *)b, rows, N);
    return dfg_cuda_launched(ctx, n, e, "bias_gelu_kernel");
}

template <class T>
dfg_status launch_bwd(const dfg_node *n, void *du, const void *dy, const void *x, const void *b, int64_t rows,
                      int64_t N, dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(T);
    cudaError_t e;
    if (N % V == 0 && dfg_aligned16(du) && dfg_aligned16(dy) && dfg_aligned16(x) && dfg_aligned16(b))
        e = DFG_LAUNCH((bias_gelu_bwd_kernel<T, V>), dfg_grid_for(rows * (N / V), kThreads, ctx), kThreads, 0,
                       (cudaStream_t)ctx->stream, (T *)du, (const T *)dy, (const T *)x, (const T *)b, rows, N);
    else
        e = DFG_LAUNCH((bias_gelu_bwd_kernel<T, 1>), dfg_grid_for(rows * N, kThreads, ctx), kThreads, 0,
                       (cudaStream_t)ctx->stream, (T *)du, (const T *)dy, (const T *)x, (const T *)b, rows, N);
    return dfg_cuda_launched(ctx, n, e, "bias_gelu_bwd_kernel");
}

} // namespace

// inputs x (..., N), bias (N) -> y (..., N)
DFG_CUDA_LAUNCHER(bias_gelu) {
    const dfg_shape xs = n->in[0]->shape;
    const int64_t N = xs.d[xs.rank - 1], rows = N ? dfg_shape_numel(xs) / N : 0;
    if (rows == 0) return DFG_OK;
    switch (n->in[0]->dtype) {
    case DFG_F32: return launch_fwd<float>(n, out[0], in[0], in[1], rows, N, ctx);
    case DFG_BF16: return launch_fwd<__nv_bfloat16>(n, out[0], in[0], in[1], rows, N, ctx);
    case DFG_F16: return launch_fwd<__half>(n, out[0], in[0], in[1], rows, N, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "x of %s", dfg_dtype_name(n->in[0]->dtype));
    }
}

// inputs dy (..., N), x (..., N), bias (N) -> d(x + bias) (..., N)
DFG_CUDA_LAUNCHER(bias_gelu_bwd) {
    const dfg_shape xs = n->in[1]->shape;
    const int64_t N = xs.d[xs.rank - 1], rows = N ? dfg_shape_numel(xs) / N : 0;
    if (rows == 0) return DFG_OK;
    switch (n->in[1]->dtype) {
    case DFG_F32: return launch_bwd<float>(n, out[0], in[0], in[1], in[2], rows, N, ctx);
    case DFG_BF16: return launch_bwd<__nv_bfloat16>(n, out[0], in[0], in[1], in[2], rows, N, ctx);
    case DFG_F16: return launch_bwd<__half>(n, out[0], in[0], in[1], in[2], rows, N, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "x of %s", dfg_dtype_name(n->in[1]->dtype));
    }
}
