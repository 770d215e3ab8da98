// nf4.cu - NF4 dequantisation on the GPU (bitsandbytes' 4-bit NormalFloat; the op and the
// algorithm: ops/nf4.c), as ops/cpu/nf4.c computes it:
//     y[i] = nf4_code[q_i] * absmax[i / 64],  q_i = packed[i / 2] >> 4 (even i) or & 15 (odd i),
// one f32 product rounded once to y's dtype (f32, bf16, f16). With double quantisation each
// block's absmax is first rebuilt as dynamic_map[absmax_q[b]] * absmax2[b / 256] + offset, with
// __fmul_rn and __fadd_rn: nvcc would otherwise contract the two into one FMA rounding, and the
// CPU kernel and bitsandbytes round twice. So the two kernels agree bit for bit.
//
// The kernel is bound by memory: it reads half a byte and writes 2 or 4 bytes per element. One
// thread takes 4 packed bytes (one 32-bit load, 8 outputs), walked in grid-stride order:
// consecutive threads read consecutive words (a warp reads 128 contiguous bytes) and write
// consecutive 16-byte vectors (bf16, f16: one st.v4 of 8 outputs; f32: two). 8 outputs never
// straddle a block of 64, so a thread loads (or rebuilds) one absmax, which the 8 threads of a
// block read as one broadcast. The 16 code values (and the dynamic map, 256 values) are copied from
// constant memory to shared memory once per block: a lookup by a per-thread nibble would
// serialise in the constant cache (one address per cycle), shared memory serves 32 at once.
// Packed data that is not 4-byte aligned, or an output not 16-byte aligned (a view into a
// buffer), takes the scalar path, as does the last item when numel is not a multiple of 8.
#include "common.cuh"
#include "../nf4.h"

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8; // outputs per thread: 4 packed bytes

__constant__ const float kCode[16] = {DFG_NF4_CODE_VALUES};
__constant__ const float kDynamicMap[256] = {DFG_NF4_DYNAMIC_MAP_VALUES};

struct Nf4In {
    const uint8_t *packed;   // (ceil(numel / 2))
    const float *absmax;     // (nb), the plain form
    const uint8_t *absmax_q; // (nb), double quantisation
    const float *absmax2;    // (ceil(nb / 256))
    const float *offset;     // ()
    int64_t numel;
    int vec;                 // packed 4-byte and y 16-byte aligned: the vector path
};

// 8 values into p (8 elements, 16-byte aligned) as 16-byte stores of T
template <class T> __device__ __forceinline__ void store8(T *p /* (8) */, const float (&v)[kPerThread]) {
    constexpr int V = 16 / (int)sizeof(T);
#pragma unroll
    for (int s = 0; s < kPerThread / V; s++) {
        DfgVec<T, V> w;
#pragma unroll
        for (int j = 0; j < V; j++) w.v[j] = dfg_from_f<T>(v[s * V + j]);
        dfg_stv<V>(p + s * V, w);
    }
}

// y (numel) = the dequantised weight; DQ: the absmax values are double-quantised
template <class T, bool DQ>
__global__ void __launch_bounds__(kThreads) nf4_dequant_kernel(T *y /* (numel) */, Nf4In a) {
    __shared__ float code[16];
    __shared__ float map[DQ ? 256 : 1];
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = kCode[i];
    if (DQ)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) map[i] = kDynamicMap[i];
    __syncthreads();
    const int64_t items = dfg_cdiv(a.numel, kPerThread);
    for (int64_t k = dfg_thread_index(); k < items; k += dfg_grid_threads()) {
        const int64_t e0 = k * kPerThread, b = e0 / DFG_NF4_BLOCK; // the item's block (8 divides 64)
        float s; // the block's absmax
        if constexpr (DQ) s = __fadd_rn(__fmul_rn(map[a.absmax_q[b]], a.absmax2[b / DFG_NF4_DQ_BLOCK]), a.offset[0]);
        else s = a.absmax[b];
        if (a.vec && e0 + kPerThread <= a.numel) {
            const uint32_t w = *reinterpret_cast<const uint32_t *>(a.packed + 4 * k); // bytes 4k .. 4k+3
            float v[kPerThread];
#pragma unroll
            for (int j = 0; j < 4; j++) { // little-endian: byte j is bits 8j .. 8j+7
                const uint32_t byte = (w >> (8 * j)) & 0xffu;
                v[2 * j] = code[byte >> 4] * s;      // element 2j: the high nibble
                v[2 * j + 1] = code[byte & 15u] * s; // element 2j+1: the low one
            }
            store8(y + e0, v);
        } else {
            const int64_t e1 = e0 + kPerThread < a.numel ? e0 + kPerThread : a.numel;
            for (int64_t e = e0; e < e1; e++) {
                const uint32_t byte = a.packed[e >> 1];
                dfg_st(y, e, code[(e & 1) ? byte & 15u : byte >> 4] * s);
            }
        }
    }
}

template <class T, bool DQ>
cudaError_t launch(T *y /* (numel) */, const Nf4In &a, dfg_cuda_ctx *ctx) {
    const int64_t items = dfg_cdiv(a.numel, kPerThread);
    return DFG_LAUNCH((nf4_dequant_kernel<T, DQ>), dfg_grid_for(items, kThreads, ctx), kThreads, 0,
                      (cudaStream_t)ctx->stream, y, a);
}

template <class T> cudaError_t launch_form(void *y /* (numel) of T */, const Nf4In &a, bool dq, dfg_cuda_ctx *ctx) {
    return dq ? launch<T, true>((T *)y, a, ctx) : launch<T, false>((T *)y, a, ctx);
}

} // namespace

// inputs packed u8 (ceil(numel/2)), absmax f32 (nb) | absmax_q u8 (nb), absmax2 f32 (ceil(nb/256)),
// offset f32 () -> y (shape) f32, bf16 or f16; nb = ceil(numel/64)
DFG_CUDA_LAUNCHER(nf4_dequant) {
    const bool dq = n->n_in == 4;
    if (n->n_in != 2 && !dq) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "takes 2 or 4 inputs, not %d", n->n_in);
    Nf4In a = {};
    a.packed = (const uint8_t *)in[0];
    a.absmax = dq ? nullptr : (const float *)in[1];
    a.absmax_q = dq ? (const uint8_t *)in[1] : nullptr;
    a.absmax2 = dq ? (const float *)in[2] : nullptr;
    a.offset = dq ? (const float *)in[3] : nullptr;
    a.numel = dfg_shape_numel(n->attr->nf4.shape);
    a.vec = dfg_aligned(in[0], 4) && dfg_aligned16(out[0]);
    if (a.numel == 0) return DFG_OK;
    cudaError_t e = cudaSuccess;
    switch (n->out[0]->dtype) {
    case DFG_F32: e = launch_form<float>(out[0], a, dq, ctx); break;
    case DFG_BF16: e = launch_form<__nv_bfloat16>(out[0], a, dq, ctx); break;
    case DFG_F16: e = launch_form<__half>(out[0], a, dq, ctx); break;
    default:
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "output '%s' is %s; the kernel writes f32, bf16 or f16",
                             n->out[0]->name, dfg_dtype_name(n->out[0]->dtype));
    }
    return dfg_cuda_launched(ctx, n, e, "nf4_dequant_kernel");
}
