// quantile.cu - torch.quantile(x[mask != 0], q) with linear interpolation, as a scalar (ops/reduce.c
// has the op; the reference kernel is ops/cpu/reduce.c's dfg_cpu_quantile).
//
// Bit-identical to the CPU by construction: both find the k-th smallest selected value as the least
// u32 key (ops/quantile.h's order-preserving map of an f32) with more than k selected keys at or
// below it, by the same binary search over the 2^32 keys, and rank and interpolate with the same
// float32 arithmetic as torch (dfg_quantile_rank, dfg_quantile_lerp). Counting is exact, so the element found does
// not depend on how the counts are summed, and NaNs, -0.0 and ties come out as on the CPU.
//
// One block of 1024 threads, no scratch (the result is one value a loss reads once per step): a
// pass counts the selected elements, 32 counting passes (each a block reduction) find the rank lo
// value a, and when the interpolation needs rank lo + 1, one more pass gives it without a second
// search: it is a again when more than lo + 1 selected keys are <= key(a), else the least selected
// key above key(a) (the CPU's search for lo + 1 lands on the same key). Each pass reads x and the
// mask with 16-byte loads when both are aligned; the data of a pass (a few MB at most) stays in L2.
#include "common.cuh"

#include "../quantile.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// ---------------------------------------------------------------- block reductions (every thread gets the result)
// dfg_block_fold: a warp's 32-bit sum or min in one redux.sync, a slot per warp, then every thread
// folds the 32 slots (broadcast reads): one warp operation and two barriers a pass. A thread's
// count is below 2^32 (n / 1024 of them); the block's total is summed in 64 bits.
__device__ __forceinline__ unsigned long long block_sum(unsigned v, unsigned *sh) {
    return dfg_block_fold<kWarps>(v, sh, 0ull, DfgSum());
}
__device__ __forceinline__ unsigned block_min(unsigned v, unsigned *sh) {
    return dfg_block_fold<kWarps>(v, sh, 0xffffffffu, DfgMin());
}

// ---------------------------------------------------------------- one pass over the selected elements
// f(key) for each element whose mask is not 0 (the CPU's test: a NaN mask entry selects), in the
// thread's share of the n elements: float4 pairs when VEC, the scalar tail after them.
template <bool VEC, class F>
__device__ __forceinline__ void for_selected(const float *x, const float *mask, int64_t n, F f) {
    int64_t i0 = 0;
    if constexpr (VEC) {
        const int64_t nv = n / 4;
        for (int64_t q = threadIdx.x; q < nv; q += kThreads) {
            const float4 xv = reinterpret_cast<const float4 *>(x)[q], mv = reinterpret_cast<const float4 *>(mask)[q];
            if (mv.x != 0.0f) f(dfg_quantile_key(xv.x));
            if (mv.y != 0.0f) f(dfg_quantile_key(xv.y));
            if (mv.z != 0.0f) f(dfg_quantile_key(xv.z));
            if (mv.w != 0.0f) f(dfg_quantile_key(xv.w));
        }
        i0 = nv * 4;
    }
    for (int64_t i = i0 + threadIdx.x; i < n; i += kThreads)
        if (mask[i] != 0.0f) f(dfg_quantile_key(x[i]));
}

// selected elements with key <= k, over the block
template <bool VEC>
__device__ __forceinline__ unsigned long long count_le(const float *x, const float *mask, int64_t n, uint32_t k,
                                                       unsigned *sh) {
    unsigned c = 0;
    for_selected<VEC>(x, mask, n, [&](uint32_t key) { c += key <= k; });
    return block_sum(c, sh);
}

// y = quantile(x[mask != 0], q); +inf when nothing is selected
template <bool VEC>
__global__ __launch_bounds__(kThreads) void quantile_kernel(const float *x,    // (n) any shape, flat
                                                            const float *mask, // (n) x's shape
                                                            int64_t n, float q,
                                                            float *y) {        // (1)
    __shared__ unsigned sh[kWarps];
    const unsigned long long sel = count_le<VEC>(x, mask, n, 0xffffffffu, sh); // every key is <= the top one
    if (sel == 0) {
        if (threadIdx.x == 0) *y = INFINITY;
        return; // the whole block: sel is the same in every thread
    }
    int64_t lo;
    float w;
    dfg_quantile_rank((int64_t)sel, q, &lo, &w);
    // the least key with more than lo selected keys <= it (ops/cpu/reduce.c's select_rank); the
    // bounds are the same in every thread, so the loop and its barriers are block-uniform
    uint32_t klo = 0, khi = 0xffffffffu;
    while (klo < khi) {
        const uint32_t mid = klo + (khi - klo) / 2;
        if (count_le<VEC>(x, mask, n, mid, sh) > (unsigned long long)lo) khi = mid;
        else klo = mid + 1;
    }
    const float a = dfg_quantile_value(klo);
    if (!(w > 0.0f)) {
        if (threadIdx.x == 0) *y = a;
        return;
    }
    // rank lo + 1: a when more than lo + 1 keys are <= klo, else the least selected key above klo
    // (lo + 1 < sel, so one exists then: the top key as the min's start stands for none only when
    // it is not read, or is the answer itself)
    unsigned c = 0, above = 0xffffffffu;
    for_selected<VEC>(x, mask, n, [&](uint32_t key) {
        c += key <= klo;
        if (key > klo && key < above) above = key;
    });
    const unsigned long long le = block_sum(c, sh);
    above = block_min(above, sh);
    const float b = le > (unsigned long long)(lo + 1) ? a : dfg_quantile_value(above);
    if (threadIdx.x == 0) *y = dfg_quantile_lerp(a, b, w);
}

} // namespace

// x (any shape) f32, mask (x's shape) f32 -> scalar f32
DFG_CUDA_LAUNCHER(quantile) {
    const int64_t count = dfg_shape_numel(n->in[0]->shape);
    if (n->in[0]->dtype != DFG_F32 || n->in[1]->dtype != DFG_F32 || n->out[0]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "x, mask and the result must be f32");
    const float q = n->attr->quantile.q;
    const bool vec = (uintptr_t)in[0] % 16 == 0 && (uintptr_t)in[1] % 16 == 0;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e;
    if (vec)
        e = DFG_LAUNCH(quantile_kernel<true>, 1, kThreads, 0, st, (const float *)in[0], (const float *)in[1], count, q,
                       (float *)out[0]);
    else
        e = DFG_LAUNCH(quantile_kernel<false>, 1, kThreads, 0, st, (const float *)in[0], (const float *)in[1], count, q,
                       (float *)out[0]);
    return dfg_cuda_launched(ctx, n, e, "quantile_kernel");
}
