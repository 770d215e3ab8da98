// rows.cuh - the row kernels' dispatch (softmax.cu, norm_rows.cuh's layernorm and rmsnorm): a row
// of len elements is walked by one warp when len <= kWarpRowMax (8 rows per block, shuffles only,
// no block barrier) and by one block of kThreads otherwise; VEC elements at a time, VEC 1 or the
// 16-byte vector (common.cuh's dfg_ldn / dfg_stn) when len is a multiple of it and the pointers
// are aligned. Blocks take their rows (or groups of 8) in grid-stride order.
#pragma once

#include "common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kWarpRowMax = 1024;

// The rows of this thread's warp (WARP) or block, in grid-stride order, and its elements of a row:
//   for (RowWalk<VEC, WARP> w(rows); w.more(); w.next()) {
//       const int64_t r = w.row();
//       if (w.past(r)) break;
//       for (int64_t i = w.i0(); i < len; i += w.di) ... elements i .. i + VEC - 1 of row r
// t is the thread's index among the row's threads (lane, or thread of the block). The loop has the
// shape of the hand-written one it replaced (row and first element recomputed where used, the break
// in the body): ptxas then allocates the same registers.
template <int VEC, bool WARP> struct RowWalk {
    static constexpr int64_t di = (int64_t)(WARP ? 32 : kThreads) * VEC;
    int64_t rows, groups, g;
    int t;
    __device__ __forceinline__ explicit RowWalk(int64_t rows_)
        : rows(rows_), groups(dfg_cdiv(rows_, WARP ? kWarps : 1)), g(blockIdx.x),
          t(WARP ? (threadIdx.x & 31) : threadIdx.x) {}
    __device__ __forceinline__ int64_t row() const { return WARP ? g * kWarps + (threadIdx.x >> 5) : g; }
    __device__ __forceinline__ int64_t i0() const { return (int64_t)t * VEC; }
    __device__ __forceinline__ bool more() const { return g < groups; }
    // row r is past the last: the warp leaves as a whole (the warp variant has no block barrier)
    __device__ __forceinline__ bool past(int64_t r) const { return WARP && r >= rows; }
    __device__ __forceinline__ void next() { g += gridDim.x; }
};

// op over a row's threads, in every one of them (id: op's identity; sh: 32 values, free again on
// return); row_sum: the sum
template <bool WARP, class A, class Op> __device__ __forceinline__ A row_reduce(A v, A *sh, A id, Op op) {
    if constexpr (WARP) return dfg_warp_reduce(v, op);
    else return dfg_block_reduce<kWarps>(v, sh, id, op);
}
template <bool WARP, class A> __device__ __forceinline__ A row_sum(A v, A *sh) {
    return row_reduce<WARP>(v, sh, A(0), DfgSum());
}

// The variant launch(cfg, grid) is asked for: cfg's type T (the tensor's dtype), vec elements at a
// time, a warp a row (warp)
template <class T, int VEC, bool WARP> struct RowCfg {
    typedef T type;
    static constexpr int vec = VEC;
    static constexpr bool warp = WARP;
};

// Launches a row kernel over `rows` rows of len elements of x's dtype (f32 or bf16), and checks the
// launch (named `kernel` in an error): launch(RowCfg<T, VEC, WARP>(), grid) returns the launch's
// error, for a warp per row when len <= warp_max, and VEC the 16-byte vector when len is a multiple
// of it and the pointers are `aligned` (else 1).
template <class Launch>
dfg_status row_launch(const dfg_node *n, dfg_cuda_ctx *ctx, const dfg_tensor *x, int64_t rows, int64_t len,
                      bool aligned, const char *kernel, Launch launch, int64_t warp_max = kWarpRowMax) {
    cudaError_t e = cudaSuccess;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        constexpr int V = dfg_vec16<T>::n;
        const bool vec = aligned && len % V == 0;
        if (len <= warp_max) {
            const unsigned grid = dfg_grid_units(dfg_cdiv(rows, kWarps), ctx);
            e = vec ? launch(RowCfg<T, V, true>(), grid) : launch(RowCfg<T, 1, true>(), grid);
        } else {
            const unsigned grid = dfg_grid_units(rows, ctx);
            e = vec ? launch(RowCfg<T, V, false>(), grid) : launch(RowCfg<T, 1, false>(), grid);
        }
    });
    return dfg_cuda_launched(ctx, n, e, kernel);
}

// The rows and the row length of a tensor reduced over its last axis
inline void rows_of(dfg_shape s, int64_t *rows, int64_t *len) {
    *len = s.d[s.rank - 1];
    *rows = dfg_shape_numel(s) / (*len ? *len : 1);
}

} // namespace
