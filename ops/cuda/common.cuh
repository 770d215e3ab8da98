// common.cuh - what every kernel family file (ops/cuda/<family>.cu) shares: the emulator
// header first (dfg_simt.h: real CUDA under nvcc, the SIMT emulator under the host compiler),
// the launcher naming of the two builds, f32/bf16 loads and stores, warp and block reductions,
// grid sizing and the check after a launch.
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

// ---------------------------------------------------------------- values: f32 arithmetic on f32 or bf16 storage
static __device__ __forceinline__ float dfg_ld(const float *p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float dfg_ld(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void dfg_st(float *p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void dfg_st(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// ---------------------------------------------------------------- reductions
// The sum/max over the 32 lanes of a full warp, in every lane (butterfly: the same order in every
// lane, so the result is bit-identical everywhere).
static __device__ __forceinline__ float dfg_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float dfg_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// The sum over a block whose size is a multiple of 32 (at most 1024), in every thread. shm holds
// 32 floats; a barrier at the end lets the caller reuse it at once.
static __device__ __forceinline__ float dfg_block_sum(float v, float *shm) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = dfg_warp_sum(v);
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    v = lane < warps ? shm[lane] : 0.0f;
    v = dfg_warp_sum(v);
    __syncthreads();
    return v;
}
static __device__ __forceinline__ float dfg_block_max(float v, float *shm) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = dfg_warp_max(v);
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    v = lane < warps ? shm[lane] : -INFINITY;
    v = dfg_warp_max(v);
    __syncthreads();
    return v;
}

// ---------------------------------------------------------------- launch helpers
// Blocks for a grid-stride loop over `count` items with `threads` per block: enough to fill the
// machine a few times over, never more than the items need.
static inline unsigned dfg_grid_for(int64_t count, int threads, const dfg_cuda_ctx *ctx) {
    int64_t need = (count + threads - 1) / threads;
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (need > cap) need = cap;
    return (unsigned)(need > 0 ? need : 1);
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
