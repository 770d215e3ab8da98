// common.cuh - what every kernel family file (ops/cuda/<family>.cu) shares: the emulator
// header first (dfg_simt.h: real CUDA under nvcc, the SIMT emulator under the host compiler),
// the launcher naming of the two builds, element loads and stores (f32 arithmetic on f32, bf16
// and f16 storage), 16-byte vector loads and stores, the grid-stride walks, grid sizing and the
// check after a launch. Warp and block reductions are reductions.cuh's (included here); the row
// kernels' dispatch (a warp or a block per row) is rows.cuh's.
//
// Rules of a family file (so that the nvcc build and the emulated build can share a process):
// kernels and device helpers are `static` (or in an anonymous namespace); only the launchers,
// named DFG_CUDA_FN(name), have external (C) linkage.
#ifndef DFG_CUDA_COMMON_CUH
#define DFG_CUDA_COMMON_CUH

#include "simt/dfg_simt.h" // first: the CUDA headers, then the emulated built-ins

#include <stdint.h>
#include <stdio.h>

#include "cuda.h"
#include "reductions.cuh"

// dfg_cuda_<name> in the nvcc build, dfg_emu_<name> in the emulated one (cuda.h)
#if DFG_SIMT_EMULATED
#define DFG_CUDA_FN(name) dfg_emu_##name
#else
#define DFG_CUDA_FN(name) dfg_cuda_##name
#endif
// a launcher's definition: extern "C" dfg_status DFG_CUDA_FN(name)(node, in, out, ctx)
#define DFG_CUDA_LAUNCHER(name)                                                                            \
    extern "C" dfg_status DFG_CUDA_FN(name)(const dfg_node *n, void *const *in, void *const *out,       \
                                            dfg_cuda_ctx *ctx)
#define DFG_CUDA_SCRATCH(name) extern "C" size_t DFG_CUDA_FN(scratch_##name)(const dfg_node *n)

// dst (bytes) = src (bytes) on ctx->stream, by the widest word size and alignment allow (state.cu)
extern "C" cudaError_t DFG_CUDA_FN(copy_bytes)(void *dst, const void *src, size_t bytes, const dfg_cuda_ctx *ctx);

// ---------------------------------------------------------------- values: f32 arithmetic on f32, bf16, f16 storage
static __device__ __forceinline__ float dfg_to_f(float v) { return v; }
static __device__ __forceinline__ float dfg_to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ float dfg_to_f(__half v) { return __half2float(v); }
template <class T> static __device__ __forceinline__ T dfg_from_f(float v);
template <> __device__ __forceinline__ float dfg_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 dfg_from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half dfg_from_f<__half>(float v) { return __float2half_rn(v); }
// element i of p as f32, and back (rounded to nearest even)
template <class T> static __device__ __forceinline__ float dfg_ld(const T *p, int64_t i) { return dfg_to_f(p[i]); }
template <class T> static __device__ __forceinline__ void dfg_st(T *p, int64_t i, float v) { p[i] = dfg_from_f<T>(v); }

// ---------------------------------------------------------------- vectors: V elements in one access
// V elements moved as one access of V * sizeof(T) bytes (16: ld.global.v4), in their storage type
template <class T, int V> struct alignas(sizeof(T) * V) DfgVec { T v[V]; };
template <int V, class T> static __device__ __forceinline__ DfgVec<T, V> dfg_ldv(const T *p) {
    return *reinterpret_cast<const DfgVec<T, V> *>(p);
}
template <int V, class T> static __device__ __forceinline__ void dfg_stv(T *p, const DfgVec<T, V> &v) {
    *reinterpret_cast<DfgVec<T, V> *>(p) = v;
}

// 16 bytes as floats: dfg_vec16<T>::n elements (4 f32, 8 bf16) widened on load, rounded on store.
// bf16 is the high half of an f32: widened by shifting; little-endian, so element 2k is the low half.
template <class T> struct dfg_vec16 {
    static constexpr int n = 16 / (int)sizeof(T);
};
static __device__ __forceinline__ float dfg_bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float dfg_bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
static __device__ __forceinline__ unsigned dfg_bf16x2(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}
static __device__ __forceinline__ void dfg_ld16(const float *p, float *v /* (4) */) {
    const float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
static __device__ __forceinline__ void dfg_ld16(const __nv_bfloat16 *p, float *v /* (8) */) {
    const uint4 q = *reinterpret_cast<const uint4 *>(p);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) v[2 * k] = dfg_bf16_lo(w[k]), v[2 * k + 1] = dfg_bf16_hi(w[k]);
}
static __device__ __forceinline__ void dfg_st16(float *p, const float *v /* (4) */) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void dfg_st16(__nv_bfloat16 *p, const float *v /* (8) */) {
    *reinterpret_cast<uint4 *>(p) =
        make_uint4(dfg_bf16x2(v[0], v[1]), dfg_bf16x2(v[2], v[3]), dfg_bf16x2(v[4], v[5]), dfg_bf16x2(v[6], v[7]));
}
// VEC elements from p + i: VEC == 1 (one element) or the 16-byte width, so that the same loops
// serve a kernel's generic and vector paths
template <int VEC, class T> static __device__ __forceinline__ void dfg_ldn(const T *p, int64_t i, float (&v)[VEC]) {
    if constexpr (VEC == 1) v[0] = dfg_ld(p, i);
    else dfg_ld16(p + i, v);
}
template <int VEC, class T> static __device__ __forceinline__ void dfg_stn(T *p, int64_t i, const float (&v)[VEC]) {
    if constexpr (VEC == 1) dfg_st(p, i, v[0]);
    else dfg_st16(p + i, v);
}
// Elements of a row before its first 16-byte boundary (the row starts at an element boundary).
template <class T>
static __device__ __forceinline__ int64_t dfg_row_head(const T *row, int64_t v) {
    int64_t h = (int64_t)((16 - ((uintptr_t)row & 15)) & 15) / (int64_t)sizeof(T);
    return h < v ? h : v;
}

// Thread g of a group of G threads visits its elements of row (v), in increasing j: VEC, a scalar
// head up to the first 16-byte boundary, 16-byte vectors, a scalar tail; else plain strided.
// f(j, x) gets x = row[j] as float.
template <class T, int G, bool VEC, class F>
static __device__ __forceinline__ void dfg_row_visit(const T *row, int64_t v, int g, F f) {
    if (!VEC) {
        for (int64_t j = g; j < v; j += G) f(j, dfg_ld(row, j));
        return;
    }
    constexpr int N = dfg_vec16<T>::n;
    const int64_t head = dfg_row_head(row, v), nv = (v - head) / N;
    if (g < head) f(g, dfg_ld(row, g)); // head < N <= G
    for (int64_t q = g; q < nv; q += G) {
        float x[N];
        dfg_ld16(row + head + q * N, x);
#pragma unroll
        for (int i = 0; i < N; i++) f(head + q * N + i, x[i]);
    }
    for (int64_t j = head + nv * N + g; j < v; j += G) f(j, dfg_ld(row, j));
}

// y[j] = f(j, x[j]) over a row, same visiting as dfg_row_visit; VEC needs x and y equally misaligned.
template <class T, int G, bool VEC, class F>
static __device__ __forceinline__ void dfg_row_map(const T *x, T *y, int64_t v, int g, F f) {
    if (!VEC) {
        for (int64_t j = g; j < v; j += G) dfg_st(y, j, f(j, dfg_ld(x, j)));
        return;
    }
    constexpr int N = dfg_vec16<T>::n;
    const int64_t head = dfg_row_head(x, v), nv = (v - head) / N;
    if (g < head) dfg_st(y, g, f(g, dfg_ld(x, g)));
    for (int64_t q = g; q < nv; q += G) {
        float a[N];
        dfg_ld16(x + head + q * N, a); // read before write: y may be x
#pragma unroll
        for (int i = 0; i < N; i++) a[i] = f(head + q * N + i, a[i]);
        dfg_st16(y + head + q * N, a);
    }
    for (int64_t j = head + nv * N + g; j < v; j += G) dfg_st(y, j, f(j, dfg_ld(x, j)));
}

// 4 elements as one 16-byte (f32) or 8-byte (bf16) access
static __device__ __forceinline__ float4 dfg_ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
static __device__ __forceinline__ float4 dfg_ld4(const __nv_bfloat16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    return make_float4(dfg_bf16_lo(u.x), dfg_bf16_hi(u.x), dfg_bf16_lo(u.y), dfg_bf16_hi(u.y));
}
static __device__ __forceinline__ void dfg_st4(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }
static __device__ __forceinline__ void dfg_st4(__nv_bfloat16 *p, float4 v) {
    *reinterpret_cast<uint2 *>(p) = make_uint2(dfg_bf16x2(v.x, v.y), dfg_bf16x2(v.z, v.w));
}

// ---------------------------------------------------------------- grid-stride walks
// for (int64_t i = dfg_thread_index(); i < n; i += dfg_grid_threads()): every item once, in
// grid-stride order (consecutive threads on consecutive items: coalesced)
static __device__ __forceinline__ int64_t dfg_thread_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ __forceinline__ int64_t dfg_grid_threads() { return (int64_t)gridDim.x * blockDim.x; }

// The grid-stride walk over the items (r, c) of a (rows, n) grid in row-major order: the step is
// split once into whole rows and a remainder, so moving on needs no division.
//   for (DfgWalk w(n); w.r < rows; w.next()) ... item (w.r, w.c)
struct DfgWalk {
    int64_t r, c, n, dq, dr;
    __device__ __forceinline__ explicit DfgWalk(int64_t n_) : n(n_) {
        const int64_t i = dfg_thread_index(), s = dfg_grid_threads();
        r = i / n, c = i - r * n, dq = s / n, dr = s - dq * n;
    }
    __device__ __forceinline__ void next() {
        c += dr, r += dq;
        if (c >= n) c -= n, r++;
    }
};

// The offset of row r of an outer grid: the sum over dims d < nd of r's index along d times st[d],
// r split row-major over dims[0 .. nd-1]. Unrolled with constant indices, so that dims and st stay
// in the kernel's parameter space (a run-time index would copy them to local memory); narrow (r <
// 2^32): 32-bit divisions, a few instructions where a 64-bit one is a long subroutine.
static __device__ __forceinline__ int64_t dfg_outer_offset(const int64_t (&dims)[DFG_MAX_RANK - 1],
                                                           const int64_t (&st)[DFG_MAX_RANK - 1], int nd, int narrow,
                                                           int64_t r) {
    constexpr int kMaxOuter = DFG_MAX_RANK - 1;
    int64_t off = 0;
    if (narrow) {
        uint32_t i = (uint32_t)r;
#pragma unroll
        for (int d = kMaxOuter - 1; d > 0; d--)
            if (d < nd) {
                uint32_t q = i / (uint32_t)dims[d];
                off += (int64_t)(i - q * (uint32_t)dims[d]) * st[d];
                i = q;
            }
        return off + (int64_t)i * st[0];
    }
#pragma unroll
    for (int d = kMaxOuter - 1; d > 0; d--)
        if (d < nd) {
            int64_t q = r / dims[d];
            off += (r - q * dims[d]) * st[d];
            r = q;
        }
    return off + r * st[0];
}

// ---------------------------------------------------------------- launch helpers
static __host__ __device__ __forceinline__ int64_t dfg_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline bool dfg_aligned(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }
static inline bool dfg_aligned16(const void *p) { return dfg_aligned(p, 16); }

// Blocks for a grid-stride loop over `count` items with `threads` per block: enough to fill the
// machine a few times over, never more than the items need.
static inline unsigned dfg_grid_for(int64_t count, int threads, const dfg_cuda_ctx *ctx) {
    int64_t need = (count + threads - 1) / threads;
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (need > cap) need = cap;
    return (unsigned)(need > 0 ? need : 1);
}
// Blocks for `units` blocks of work (rows, row groups, tiles) taken in grid-stride order: at most
// 16 per SM.
static inline unsigned dfg_grid_units(int64_t units, const dfg_cuda_ctx *ctx) {
    const int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 16;
    return (unsigned)(units < cap ? (units > 0 ? units : 1) : cap);
}

// After DFG_LAUNCH: DFG_OK, or the launch's error in ctx->err (the emulator's message names the
// kernel, block and thread).
static inline dfg_status dfg_cuda_launched(dfg_cuda_ctx *ctx, const dfg_node *n, cudaError_t e, const char *kernel) {
    if (e == cudaSuccess) return DFG_OK;
#if DFG_SIMT_EMULATED
    return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "kernel %s: %s", kernel, dfg_simt_last_message());
#else
    return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "kernel %s: %s", kernel, cudaGetErrorString(e));
#endif
}

// The dtype of a float tensor as the kernels' template argument: calls body with T = float or
// __nv_bfloat16 (other dtypes: an error naming the tensor).
#define DFG_CUDA_FLOAT_DISPATCH(ctx, n, t, T, ...)                                                        \
    do {                                                                                                  \
        if ((t)->dtype == DFG_F32) {                                                                      \
            typedef float T;                                                                              \
            __VA_ARGS__;                                                                                  \
        } else if ((t)->dtype == DFG_BF16) {                                                              \
            typedef __nv_bfloat16 T;                                                                      \
            __VA_ARGS__;                                                                                  \
        } else {                                                                                          \
            return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "'%s' is %s; the CUDA kernels take f32 and bf16", \
                                 (t)->name, dfg_dtype_name((t)->dtype));                                  \
        }                                                                                                 \
    } while (0)

#endif
