/* dfg_simt.h - the first header of every .cu kernel file: real CUDA under nvcc, a SIMT emulator
 * under the host C++ compiler.
 *
 * The same .cu source is built twice. nvcc (sm_80, sm_90) sees ordinary CUDA: the macros below
 * become `<<<...>>>`, `extern __shared__` and cudaFuncSetAttribute. g++ sees the CUDA headers'
 * host half (dim3, uint3, float4, __nv_bfloat16) and, from this header, emulated built-ins: the
 * grid runs on the CPU, blocks one at a time, each thread a fiber (simt.cpp, fiber.cpp).
 *
 * Kernel author's API (both builds):
 *   DFG_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)  -> cudaError_t
 *       A kernel name with template commas goes in parentheses: DFG_LAUNCH((k<float, 4>), ...).
 *       grid/block: an integer or dim3(...) (not dim3{...}: braces do not protect commas).
 *   DFG_SET_MAX_DYNAMIC_SMEM(kernel, bytes)                      -> cudaError_t
 *       the opt-in to more than 48 KB of dynamic shared memory.
 *   DFG_SHARED_DYNAMIC(T, name);   inside a kernel: `T *name` = the block's dynamic shared memory.
 *   DFG_SIMT_EMULATED              1 under the emulator, 0 under nvcc.
 * Status and messages of emulated launches: dfg_simt_ctl.h.
 *
 * Rules the emulator enforces (CUDA's own rules, made strict so that bugs fail here):
 *   - every thread of a block reaches every __syncthreads (same source line, same variant); a
 *     thread that exited while others wait, or before a barrier others reach, is an error;
 *   - a warp operation's mask names only lanes that exist and have not exited, includes the
 *     calling lane, and every lane named calls the same operation with the same mask;
 *   - launch limits of sm_90: 1024 threads per block, block (1024,1024,64), grid.y/z <= 65535,
 *     no zero dimension, dynamic shared memory <= 48 KB or <= the opt-in (<= 227 KB).
 * Between synchronisation points (barriers, warp operations, fences, and in fuzz mode atomics)
 * each thread runs without interruption; which ready thread runs next is drawn from the seed
 * (dfg_simt_set_seed or DFG_SIMT_SEED; 0 = in order). */
#ifndef DFG_SIMT_H
#define DFG_SIMT_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

/* `(a<b, c>)` -> `a<b, c>`, and `a` -> `a`: lets a template kernel with commas pass through one
 * macro argument. */
#define DFG_SIMT_DEPAREN(x) DFG_SIMT_ESC_(DFG_SIMT_ISH_ x)
#define DFG_SIMT_ISH_(...) DFG_SIMT_ISH_ __VA_ARGS__
#define DFG_SIMT_ESC_(...) DFG_SIMT_ESC2_(__VA_ARGS__)
#define DFG_SIMT_ESC2_(...) DFG_SIMT_VAN_##__VA_ARGS__
#define DFG_SIMT_VAN_DFG_SIMT_ISH_

#if defined(__CUDACC__)
/* ------------------------------------------------------------------------------ real CUDA */
#define DFG_SIMT_EMULATED 0
/* one byte array for every kernel of a file: arrays of different element types under the same
 * extern name would conflict */
#define DFG_SHARED_DYNAMIC(T, name)                                        \
    extern __shared__ __align__(16) unsigned char dfg_simt_dynamic_smem_[]; \
    T *const name = reinterpret_cast<T *>(dfg_simt_dynamic_smem_)
#define DFG_LAUNCH(kernel, grid, block, smem, stream, ...) \
    (DFG_SIMT_DEPAREN(kernel)<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__), cudaGetLastError())
#define DFG_SET_MAX_DYNAMIC_SMEM(kernel, bytes) \
    cudaFuncSetAttribute(DFG_SIMT_DEPAREN(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))

#else
/* ------------------------------------------------------------------------------ emulation */
#define DFG_SIMT_EMULATED 1

/* standard headers before the qualifiers are redefined, so none of them sees the new meanings */
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dfg_simt_ctl.h"

/* host_defines.h gives these GCC attributes or CUDA annotations the host compiler does not know */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __forceinline__
#undef __launch_bounds__
#undef __grid_constant__
#undef __maxnreg__
#undef __cluster_dims__
#define __global__
#define __device__
#define __host__
/* blocks run one at a time, so one static copy per kernel is each block's shared memory.
 * It is not poisoned between blocks (dynamic shared memory is). */
#define __shared__ static
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __maxnreg__(n)
#define __cluster_dims__(...)

/* The built-in variables: real variables the scheduler sets before it resumes a thread (macros
 * would break driver_types.h's struct fields of the same names). */
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
static constexpr int warpSize = 32;
/* the running block's dynamic shared memory (poisoned with 0xff bytes, a NaN, at block start) */
extern unsigned char *dfg_simt_dynamic_smem;
/* nonzero while a fuzzed launch runs: atomics then offer the scheduler a switch */
extern int dfg_simt_fuzzing;

#define DFG_SHARED_DYNAMIC(T, name) T *const name = reinterpret_cast<T *>(dfg_simt_dynamic_smem)

/* ---- the scheduler's entry points (simt.cpp) */
enum {
    DFG_SIMT_OP_SHFL_IDX = 1,
    DFG_SIMT_OP_SHFL_UP,
    DFG_SIMT_OP_SHFL_DOWN,
    DFG_SIMT_OP_SHFL_XOR,
    DFG_SIMT_OP_BALLOT,
    DFG_SIMT_OP_ANY,
    DFG_SIMT_OP_ALL,
    DFG_SIMT_OP_UNI,
    DFG_SIMT_OP_SYNCWARP,
    DFG_SIMT_OP_MATCH_ANY,
    DFG_SIMT_OP_MATCH_ALL,
    DFG_SIMT_OP_REDUCE_ADD,
    DFG_SIMT_OP_REDUCE_MIN,
    DFG_SIMT_OP_REDUCE_MAX,
    DFG_SIMT_OP_REDUCE_AND,
    DFG_SIMT_OP_REDUCE_OR,
    DFG_SIMT_OP_REDUCE_XOR,
    DFG_SIMT_OP_REDUCE_MIN_S, /* the int overloads of __reduce_min/max_sync */
    DFG_SIMT_OP_REDUCE_MAX_S,
};
enum { DFG_SIMT_BAR_PLAIN = 0, DFG_SIMT_BAR_COUNT, DFG_SIMT_BAR_AND, DFG_SIMT_BAR_OR };

/* Waits until every lane of `mask` has arrived with the same op and mask, then returns this
 * lane's result: the shuffled value's bits (all ones when the source lane is not in the mask:
 * CUDA leaves it undefined), or the vote/match/reduce result (match_all: bit 32 = pred). */
uint64_t dfg_simt_warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line);
/* the block barrier; returns the count/and/or of `pred` for the _count/_and/_or variants */
int dfg_simt_barrier(int kind, int pred, const char *file, int line);
/* lanes of the calling warp that exist and have not exited */
unsigned dfg_simt_activemask(void);
/* a fence or a spin hint: lets another ready thread run, so spin-waits make progress */
void dfg_simt_yield(void);
/* called by atomics when dfg_simt_fuzzing: maybe switches, so atomics interleave */
void dfg_simt_atomic_point(void);
/* __trap(): the launch stops and reports an error naming the thread */
void dfg_simt_trap(const char *file, int line);
long long dfg_simt_clock64(void);

/* ---- launching */
struct dfg_simt_kernel_desc {
    const char *name;     /* as written in DFG_LAUNCH */
    const char *file;     /* launch site */
    int line;
    const void *fn;       /* the kernel, the key of DFG_SET_MAX_DYNAMIC_SMEM */
    void (*invoke)(const void *args);  /* runs the kernel body once for the current thread */
    const void *args;
};
/* runs the grid; returns DFG_SIMT_OK or the failure (also kept as the sticky last status) */
int dfg_simt_run(const dfg_simt_kernel_desc *k, dim3 grid, dim3 block, size_t dynamic_smem);
cudaError_t dfg_simt_cuda_error(int status);
/* While capturing (graph.cpp): keeps the launch for the graph; args is a heap copy the graph
 * frees with free_args. */
int dfg_simt_record_launch(const dfg_simt_kernel_desc *k, dim3 grid, dim3 block, size_t dynamic_smem,
                           void (*free_args)(const void *args));

template <class Pack>
void dfg_simt_invoke(const void *p) {
    const Pack *k = static_cast<const Pack *>(p);
    std::apply(k->fn, k->args);
}

/* The arguments are converted to the kernel's parameter types and stored by value before the
 * grid runs, as cudaLaunchKernel copies them: an expression like v.data() is evaluated once here,
 * never captured. */
template <class... P, class... A>
cudaError_t dfg_simt_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, const char *file, int line, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "DFG_LAUNCH: argument count differs from the kernel's");
    (void)stream; /* one in-order stream: the launch has finished when this returns */
    struct Pack {
        void (*fn)(P...);
        std::tuple<std::remove_cv_t<P>...> args;
    };
    const Pack pack{kernel, std::tuple<std::remove_cv_t<P>...>(std::forward<A>(args)...)};
    if (dfg_simt_capturing()) { /* a graph node: the arguments as they are now, run at each replay */
        const dfg_simt_kernel_desc desc{name, file, line, reinterpret_cast<const void *>(kernel),
                                        &dfg_simt_invoke<Pack>, new Pack(pack)};
        return dfg_simt_cuda_error(dfg_simt_record_launch(
            &desc, grid, block, smem, [](const void *a) { delete static_cast<const Pack *>(a); }));
    }
    const dfg_simt_kernel_desc desc{name, file, line, reinterpret_cast<const void *>(kernel),
                                    &dfg_simt_invoke<Pack>, &pack};
    return dfg_simt_cuda_error(dfg_simt_run(&desc, grid, block, smem));
}

#define DFG_LAUNCH(kernel, grid, block, smem, stream, ...)                                                 \
    dfg_simt_launch(#kernel, DFG_SIMT_DEPAREN(kernel), (grid), (block), (size_t)(smem), (stream), __FILE__, \
                    __LINE__, ##__VA_ARGS__)
#define DFG_SET_MAX_DYNAMIC_SMEM(kernel, bytes)                                                        \
    dfg_simt_cuda_error(dfg_simt_set_max_dynamic_smem(reinterpret_cast<const void *>(DFG_SIMT_DEPAREN(kernel)), \
                                                      (size_t)(bytes)))

/* ---- barriers and warp operations. The call site (default arguments) names the barrier, so
 * threads waiting at different __syncthreads lines are reported as divergent. */
inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    dfg_simt_barrier(DFG_SIMT_BAR_PLAIN, 0, file, line);
}
inline int __syncthreads_count(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return dfg_simt_barrier(DFG_SIMT_BAR_COUNT, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return dfg_simt_barrier(DFG_SIMT_BAR_AND, pred != 0, file, line);
}
inline int __syncthreads_or(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return dfg_simt_barrier(DFG_SIMT_BAR_OR, pred != 0, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
    dfg_simt_warp_op(DFG_SIMT_OP_SYNCWARP, mask, 0, 0, 32, file, line);
}
inline unsigned __activemask(void) { return dfg_simt_activemask(); }

template <class T>
inline uint64_t dfg_simt_to_bits(const T &v) {
    /* __nv_bfloat162 has a user-defined assignment, so is not "trivially copyable"; bytes do */
    static_assert(sizeof(T) <= 8, "warp operand: at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T dfg_simt_from_bits(uint64_t b) {
    T v;
    std::memcpy(static_cast<void *>(&v), &b, sizeof(T));
    return v;
}

/* Shuffles of any type of at most 8 bytes (CUDA: int, unsigned, long long, float, double,
 * __half, __nv_bfloat16 and their pairs); the lane arithmetic is PTX shfl.sync's. */
template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32, const char *file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
    return dfg_simt_from_bits<T>(
        dfg_simt_warp_op(DFG_SIMT_OP_SHFL_IDX, mask, dfg_simt_to_bits(var), srcLane, width, file, line));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char *file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    return dfg_simt_from_bits<T>(
        dfg_simt_warp_op(DFG_SIMT_OP_SHFL_UP, mask, dfg_simt_to_bits(var), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return dfg_simt_from_bits<T>(
        dfg_simt_warp_op(DFG_SIMT_OP_SHFL_DOWN, mask, dfg_simt_to_bits(var), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32, const char *file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
    return dfg_simt_from_bits<T>(
        dfg_simt_warp_op(DFG_SIMT_OP_SHFL_XOR, mask, dfg_simt_to_bits(var), laneMask, width, file, line));
}

inline unsigned __ballot_sync(unsigned mask, int pred, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    return (unsigned)dfg_simt_warp_op(DFG_SIMT_OP_BALLOT, mask, pred != 0, 0, 32, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)dfg_simt_warp_op(DFG_SIMT_OP_ANY, mask, pred != 0, 0, 32, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)dfg_simt_warp_op(DFG_SIMT_OP_ALL, mask, pred != 0, 0, 32, file, line);
}
inline int __uni_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)dfg_simt_warp_op(DFG_SIMT_OP_UNI, mask, pred != 0, 0, 32, file, line);
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, const char *file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    return (unsigned)dfg_simt_warp_op(DFG_SIMT_OP_MATCH_ANY, mask, dfg_simt_to_bits(value), 0, 32, file, line);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int *pred, const char *file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    uint64_t r = dfg_simt_warp_op(DFG_SIMT_OP_MATCH_ALL, mask, dfg_simt_to_bits(value), 0, 32, file, line);
    *pred = (int)(r >> 32);
    return (unsigned)r;
}
#define DFG_SIMT_REDUCE_(fn, op, T)                                                                            \
    inline T fn(unsigned mask, T value, const char *file = __builtin_FILE(), int line = __builtin_LINE()) { \
        return (T)dfg_simt_warp_op(op, mask, (uint32_t)value, 0, 32, file, line);                            \
    }
DFG_SIMT_REDUCE_(__reduce_add_sync, DFG_SIMT_OP_REDUCE_ADD, unsigned)
DFG_SIMT_REDUCE_(__reduce_add_sync, DFG_SIMT_OP_REDUCE_ADD, int)
DFG_SIMT_REDUCE_(__reduce_min_sync, DFG_SIMT_OP_REDUCE_MIN, unsigned)
DFG_SIMT_REDUCE_(__reduce_min_sync, DFG_SIMT_OP_REDUCE_MIN_S, int)
DFG_SIMT_REDUCE_(__reduce_max_sync, DFG_SIMT_OP_REDUCE_MAX, unsigned)
DFG_SIMT_REDUCE_(__reduce_max_sync, DFG_SIMT_OP_REDUCE_MAX_S, int)
DFG_SIMT_REDUCE_(__reduce_and_sync, DFG_SIMT_OP_REDUCE_AND, unsigned)
DFG_SIMT_REDUCE_(__reduce_or_sync, DFG_SIMT_OP_REDUCE_OR, unsigned)
DFG_SIMT_REDUCE_(__reduce_xor_sync, DFG_SIMT_OP_REDUCE_XOR, unsigned)
#undef DFG_SIMT_REDUCE_

inline void __threadfence(void) { dfg_simt_yield(); }
inline void __threadfence_block(void) { dfg_simt_yield(); }
inline void __threadfence_system(void) { dfg_simt_yield(); }
inline void __nanosleep(unsigned ns) {
    (void)ns;
    dfg_simt_yield();
}
inline void __trap(const char *file = __builtin_FILE(), int line = __builtin_LINE()) { dfg_simt_trap(file, line); }
inline void __brkpt(const char *file = __builtin_FILE(), int line = __builtin_LINE()) { dfg_simt_trap(file, line); }
inline long long clock64(void) { return dfg_simt_clock64(); }

#include "dfg_simt_intrin.h"

#endif /* __CUDACC__ */
#endif /* DFG_SIMT_H */
