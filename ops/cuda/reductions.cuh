// reductions.cuh - the kernels' one reduction toolkit (common.cuh includes it): warp and block
// reductions of any value a combine function merges, a scalar or a small struct of values (a
// running (max, sum of exp) pair, (value, index), (sum, sum of squares)...), generic over the
// combine (a functor or a lambda: op(mine, other) returns the merge).
//
//   dfg_shfl_xor(v, o), dfg_shfl(v, lane)       lane ^ o's (lane's) v: a scalar in one shuffle, a
//                                               struct 4 bytes at a time
//   dfg_warp_reduce<W, UP>(v, op)               op over the W lanes of each group of W (a power of
//                                               two, 32: the warp), in every lane: a xor butterfly,
//                                               offsets W/2 down to 1 (UP: 1 up to W/2), the same
//                                               order in every lane; 32-bit integer sum, min and max
//                                               over a warp in one redux.sync
//   dfg_block_reduce<WARPS>(v, shm, id, op)     op over the block in every thread: each warp's value
//                                               to a slot, then a butterfly over the slots
//   dfg_block_reduce_each<WARPS>(v[N], n, ...)  the same for v[0 .. n-1] at once, sharing the barriers
//   dfg_block_fold<WARPS>(v, shm, init, op)     each warp's value to a slot, then every thread folds
//                                               the slots in warp order from init (which may be wider)
//   dfg_column_fold<Y>(v, sh, init, op)         a (32, Y) block's columns, each folded in y order
//   DfgSum, DfgMax, DfgMin; DfgSum2<A>          combines; two sums at once
//
// The orders are fixed, so a result depends on the block's geometry only: a kernel whose bits must
// equal the CPU's (sample.cu) mirrors them there. A block's size is a multiple of 32 (at most
// 1024); WARPS is its warps when the kernel fixes them (0: from blockDim); shm holds 32 values (32
// * N for _each) and is free again on return (a barrier ends every block reduction). Every thread
// of the block calls a block reduction; every lane of the group a warp reduction.
#ifndef DFG_CUDA_REDUCTIONS_CUH
#define DFG_CUDA_REDUCTIONS_CUH

#include "simt/dfg_simt.h"

#include <string.h>

#include <type_traits>

// ---------------------------------------------------------------- combine functions
struct DfgSum {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct DfgMax { // floats as fmaxf (a NaN loses to a number)
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a < b ? b : a; }
};
struct DfgMin {
    __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return b < a ? b : a; }
};

// two sums taken at once (sum and sum of squares, two row sums): DfgSum adds member by member
template <class A> struct DfgSum2 {
    A a, b;
};
template <class A> static __device__ __forceinline__ DfgSum2<A> operator+(DfgSum2<A> x, DfgSum2<A> y) {
    return {x.a + y.a, x.b + y.b};
}

// ---------------------------------------------------------------- shuffles of any value
template <class A> static __device__ __forceinline__ A dfg_shfl_words(A v, int src, bool xor_lane) {
    static_assert(sizeof(A) % 4 == 0 && std::is_trivially_copyable<A>::value,
                  "a reduced struct is trivially copyable, whole 32-bit words");
    unsigned w[sizeof(A) / 4];
    memcpy(w, &v, sizeof(A));
#pragma unroll
    for (int k = 0; k < (int)(sizeof(A) / 4); k++)
        w[k] = xor_lane ? __shfl_xor_sync(0xffffffffu, w[k], src) : __shfl_sync(0xffffffffu, w[k], src);
    memcpy(&v, w, sizeof(A));
    return v;
}
template <class A> static __device__ __forceinline__ A dfg_shfl_xor(A v, int o) {
    if constexpr (std::is_arithmetic<A>::value) return __shfl_xor_sync(0xffffffffu, v, o);
    else return dfg_shfl_words(v, o, true);
}
template <class A> static __device__ __forceinline__ A dfg_shfl(A v, int lane) {
    if constexpr (std::is_arithmetic<A>::value) return __shfl_sync(0xffffffffu, v, lane);
    else return dfg_shfl_words(v, lane, false);
}

// ---------------------------------------------------------------- warp
// a warp's op in one redux.sync (sm_80+): 32-bit integers, exact in any order
template <class A, class Op> struct DfgRedux {
    static constexpr bool ok = false;
};
#define DFG_REDUX(A, OP, FN)                                                                                  \
    template <> struct DfgRedux<A, OP> {                                                                      \
        static constexpr bool ok = true;                                                                      \
        static __device__ __forceinline__ A run(A v) { return FN(0xffffffffu, v); }                           \
    }
DFG_REDUX(unsigned, DfgSum, __reduce_add_sync);
DFG_REDUX(unsigned, DfgMin, __reduce_min_sync);
DFG_REDUX(unsigned, DfgMax, __reduce_max_sync);
DFG_REDUX(int, DfgSum, __reduce_add_sync);
DFG_REDUX(int, DfgMin, __reduce_min_sync);
DFG_REDUX(int, DfgMax, __reduce_max_sync);
#undef DFG_REDUX

template <int W = 32, bool UP = false, class A, class Op>
static __device__ __forceinline__ A dfg_warp_reduce(A v, Op op) {
    static_assert(W >= 2 && W <= 32 && (W & (W - 1)) == 0, "a group of lanes is a power of two");
    if constexpr (W == 32 && DfgRedux<A, Op>::ok) {
        return DfgRedux<A, Op>::run(v);
    } else if constexpr (UP) {
#pragma unroll
        for (int o = 1; o < W; o <<= 1) v = op(v, dfg_shfl_xor(v, o));
    } else {
#pragma unroll
        for (int o = W / 2; o > 0; o >>= 1) v = op(v, dfg_shfl_xor(v, o));
    }
    return v;
}
template <class A> static __device__ __forceinline__ A dfg_warp_sum(A v) { return dfg_warp_reduce(v, DfgSum()); }
static __device__ __forceinline__ float dfg_warp_max(float v) { return dfg_warp_reduce(v, DfgMax()); }

// ---------------------------------------------------------------- block
template <int WARPS> static __device__ __forceinline__ int dfg_block_warps() {
    return WARPS ? WARPS : (int)(blockDim.x >> 5);
}

template <int WARPS = 0, int N, class A, class Op>
static __device__ __forceinline__ void dfg_block_reduce_each(A (&v)[N], int n, A *shm /* (N, 32) */, A id, Op op) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = dfg_block_warps<WARPS>();
#pragma unroll
    for (int g = 0; g < N; g++)
        if (g < n) {
            const A x = dfg_warp_reduce(v[g], op);
            if (lane == 0) shm[g * 32 + warp] = x;
        }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < N; g++)
        if (g < n) v[g] = dfg_warp_reduce(lane < warps ? shm[g * 32 + lane] : id, op);
    __syncthreads();
}
template <int WARPS = 0, class A, class Op>
static __device__ __forceinline__ A dfg_block_reduce(A v, A *shm, A id, Op op) {
    A a[1] = {v};
    dfg_block_reduce_each<WARPS>(a, 1, shm, id, op);
    return a[0];
}
template <int WARPS = 0, class A> static __device__ __forceinline__ A dfg_block_sum(A v, A *shm) {
    return dfg_block_reduce<WARPS>(v, shm, A(0), DfgSum());
}
static __device__ __forceinline__ float dfg_block_max(float v, float *shm) {
    return dfg_block_reduce(v, shm, -INFINITY, DfgMax());
}

template <int WARPS = 0, class R, class A, class Op>
static __device__ __forceinline__ R dfg_block_fold(A v, A *shm, R init, Op op) {
    const int warps = dfg_block_warps<WARPS>();
    v = dfg_warp_reduce(v, op);
    if ((threadIdx.x & 31) == 0) shm[threadIdx.x >> 5] = v;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < (WARPS ? WARPS : 32); w++)
        if (w < warps) init = op(init, (R)shm[w]);
    __syncthreads();
    return init;
}

// ---------------------------------------------------------------- columns
// op over the Y threads of each column of a (32, Y) block, in y order from init, in the column's
// thread y == 0 (the others get init); sh: (Y, 33), the padding column spares bank conflicts
template <int Y, class A, class Op>
static __device__ __forceinline__ A dfg_column_fold(A v, A (*sh)[33], A init, Op op) {
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0)
#pragma unroll
        for (int k = 0; k < Y; k++) init = op(init, sh[k][threadIdx.x]);
    __syncthreads();
    return init;
}

#endif
