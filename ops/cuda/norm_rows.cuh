// norm_rows.cuh - what the row-normalising kernels (layernorm.cu, rmsnorm.cu) share: a row of
// C elements walked by one warp (C <= kWarpRowMax) or one block, 16-byte vector loads and stores
// of f32 and bf16 rows with f32 arithmetic, and the sum over a row's threads.
#pragma once

#include "common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kWarpRowMax = 1024;

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------- 16-byte vectors (VEC elements)
template <class T>
struct Vec {
    static constexpr int n = 16 / (int)sizeof(T);
};
__device__ __forceinline__ void ld_vec(const float *p, int64_t i, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4 *>(p + i);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void ld_vec(const __nv_bfloat16 *p, int64_t i, float (&v)[8]) {
    const uint4 q = *reinterpret_cast<const uint4 *>(p + i);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) { // little-endian: element 2k is the low half
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ __forceinline__ void st_vec(float *p, int64_t i, const float (&v)[4]) {
    *reinterpret_cast<float4 *>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}
__device__ __forceinline__ void st_vec(__nv_bfloat16 *p, int64_t i, const float (&v)[8]) {
    *reinterpret_cast<uint4 *>(p + i) = make_uint4(bf16x2(v[0], v[1]), bf16x2(v[2], v[3]), bf16x2(v[4], v[5]),
                                                   bf16x2(v[6], v[7]));
}
// VEC == 1 or the 16-byte width: the same loops serve the generic and the vector path
template <int VEC, class T>
__device__ __forceinline__ void ld(const T *p, int64_t i, float (&v)[VEC]) {
    if constexpr (VEC == 1) v[0] = dfg_ld(p, i);
    else ld_vec(p, i, v);
}
template <int VEC, class T>
__device__ __forceinline__ void st(T *p, int64_t i, const float (&v)[VEC]) {
    if constexpr (VEC == 1) dfg_st(p, i, v[0]);
    else st_vec(p, i, v);
}

// ---------------------------------------------------------------- one row per warp or per block
// WARP: lanes of a warp share a row (8 rows per block); else the whole block does. The sum over the
// row's threads, in every one of them.
template <bool WARP, class A>
__device__ __forceinline__ A row_sum(A v, A *sh /* (32) */) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if constexpr (!WARP) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) sh[warp] = v;
        __syncthreads();
        v = lane < kWarps ? sh[lane] : A(0);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        __syncthreads(); // sh is free again
    }
    return v;
}

} // namespace
