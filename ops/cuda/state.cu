// state.cu - the ops that write persistent tensors in place: assign (ASSIGN, ACCUMULATE,
// ASSIGN_FILL), slice_assign, the AdamW step over all parameters and global-norm clipping.
//
// Outputs arrive aliased to the tensors they write (ops.def: the output is a new version of the
// written input). Bad values found on the device (a start row out of range, a step below 1, a
// gradient norm that is not finite) set *ctx->flags, since a kernel cannot fail the node the way
// the CPU kernel does; what each kernel then writes is said at the kernel.
//
// adamw and clip_grad_norm are multi-tensor kernels: one launch walks a table of tensors passed by
// value as a __grid_constant__ parameter (read in place in the parameter bank, even when indexed
// at run time). Its size keeps to the portable 4 KB kernel-parameter limit (sm_80, drivers before
// CUDA 12.1, and the emulator's fiber stacks, which copy parameters per thread): 72 tensors a
// launch, so a node with more tensors takes several launches (GPT-2 small: 148 parameters, 3).
// Each tensor is cut into chunks of kChunk elements, a block per chunk, numbered across the whole
// node, so the split of the work (and clip's sum of squares) does not depend on how the tensors
// are grouped into launches or on the device.
#include "common.cuh"

#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096; // elements per block of the multi-tensor kernels (16 per thread)
constexpr int kTable = 72;       // tensors per launch

// ---------------------------------------------------------------- float dtypes chosen at run time
// (f32, bf16 or f16 per tensor: an optimizer's moments need not have the parameter's dtype)
__device__ __forceinline__ float ldx(const void *p, int dt, int64_t i) {
    if (dt == DFG_BF16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    if (dt == DFG_F16) return __half2float(static_cast<const __half *>(p)[i]);
    return static_cast<const float *>(p)[i];
}
__device__ __forceinline__ void stx(void *p, int dt, int64_t i, float v) {
    if (dt == DFG_BF16) static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    else if (dt == DFG_F16) static_cast<__half *>(p)[i] = __float2half_rn(v);
    else static_cast<float *>(p)[i] = v;
}

__device__ __forceinline__ void raise_flag(int *flags) {
    if (flags) *flags = 1; // every writer stores the same value: no atomic needed
}

// ---------------------------------------------------------------- assign, accumulate, assign_fill
// the widest word (16, 4, 2 or 1 bytes) that divides every address and the byte count
int word_of(size_t bytes, const void *a, const void *b) {
    const uintptr_t all = (uintptr_t)bytes | (uintptr_t)a | (uintptr_t)b;
    return all % 16 == 0 ? 16 : all % 4 == 0 ? 4 : all % 2 == 0 ? 2 : 1;
}

template <class W>
__global__ __launch_bounds__(kThreads) void copy_words(W *dst /* (n) */, const W *src /* (n) */, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

template <class W>
__global__ __launch_bounds__(kThreads) void fill_words(W *dst /* (n) */, W v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

template <class S, class D>
__global__ __launch_bounds__(kThreads) void convert(D *dst /* (n) */, const S *src /* (n) */, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dfg_st(dst, i, dfg_ld(src, i));
}

// y = a + b in float (a 16-bit sum rounds once, as the CPU's); i32 saturates as the CPU's store
template <class T>
__global__ __launch_bounds__(kThreads) void accumulate(T *y /* (n) */, const T *a /* (n) */, const T *b /* (n) */,
                                                       int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (std::is_same<T, int32_t>::value) {
            const int64_t s = (int64_t)a[i] + b[i];
            y[i] = (int32_t)(s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : s);
        } else {
            dfg_st(y, i, dfg_ld(a, i) + dfg_ld(b, i));
        }
    }
}

__global__ __launch_bounds__(kThreads) void accumulate_f32x4(float4 *y /* (n4) */, const float4 *a /* (n4) */,
                                                             const float4 *b /* (n4) */, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 u = a[i], v = b[i];
        y[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
    }
}

// ASSIGN_FILL's element as the CPU's dfg_store writes it (round to nearest even; integers
// saturate, NaN is 0), as raw bits in the low esz bytes
uint32_t fill_bits(dfg_dtype dt, float v) {
    switch (dt) {
    case DFG_F32: {
        uint32_t u;
        memcpy(&u, &v, 4);
        return u;
    }
    case DFG_BF16: return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    case DFG_F16: return __half_as_ushort(__float2half_rn(v));
    case DFG_I32: {
        const double d = v;
        const int32_t i = d != d ? 0 : d >= 2147483647.0 ? INT32_MAX : d <= -2147483648.0 ? INT32_MIN : (int32_t)d;
        return (uint32_t)i;
    }
    default: return v != v ? 0u : v >= 255.0f ? 255u : v <= 0.0f ? 0u : (uint32_t)(uint8_t)v;
    }
}

template <class W>
cudaError_t launch_copy(void *dst, const void *src, int64_t words, const dfg_cuda_ctx *ctx) {
    return DFG_LAUNCH((copy_words<W>), dfg_grid_units(dfg_cdiv(words, kThreads), ctx), kThreads, 0,
                      (cudaStream_t)ctx->stream, (W *)dst, (const W *)src, words);
}
template <class W>
cudaError_t launch_fill(void *dst, W v, int64_t words, const dfg_cuda_ctx *ctx) {
    return DFG_LAUNCH((fill_words<W>), dfg_grid_units(dfg_cdiv(words, kThreads), ctx), kThreads, 0,
                      (cudaStream_t)ctx->stream, (W *)dst, v, words);
}
cudaError_t copy_bytes(void *dst, const void *src, size_t bytes, const dfg_cuda_ctx *ctx) {
    switch (word_of(bytes, dst, src)) {
    case 16: return launch_copy<uint4>(dst, src, (int64_t)bytes / 16, ctx);
    case 4: return launch_copy<uint32_t>(dst, src, (int64_t)bytes / 4, ctx);
    case 2: return launch_copy<uint16_t>(dst, src, (int64_t)bytes / 2, ctx);
    default: return launch_copy<uint8_t>(dst, src, (int64_t)bytes, ctx);
    }
}

template <class S>
cudaError_t launch_convert(void *dst, dfg_dtype dd, const S *src, int64_t cnt, const dfg_cuda_ctx *ctx) {
    const unsigned g = dfg_grid_units(dfg_cdiv(cnt, kThreads), ctx);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    if (dd == DFG_F32) return DFG_LAUNCH((convert<S, float>), g, kThreads, 0, st, (float *)dst, src, cnt);
    if (dd == DFG_BF16) return DFG_LAUNCH((convert<S, __nv_bfloat16>), g, kThreads, 0, st, (__nv_bfloat16 *)dst, src, cnt);
    return DFG_LAUNCH((convert<S, __half>), g, kThreads, 0, st, (__half *)dst, src, cnt);
}

template <class T>
cudaError_t launch_accumulate(void *y, const void *a, const void *b, int64_t cnt, const dfg_cuda_ctx *ctx) {
    return DFG_LAUNCH((accumulate<T>), dfg_grid_units(dfg_cdiv(cnt, kThreads), ctx), kThreads, 0,
                      (cudaStream_t)ctx->stream, (T *)y, (const T *)a, (const T *)b, cnt);
}

bool is_float(dfg_dtype t) { return t == DFG_F32 || t == DFG_BF16 || t == DFG_F16; }

} // namespace

// the copy other families share (common.cuh): by the widest word the size and alignment allow
extern "C" cudaError_t DFG_CUDA_FN(copy_bytes)(void *dst, const void *src, size_t bytes, const dfg_cuda_ctx *ctx) {
    return copy_bytes(dst, src, bytes, ctx);
}

DFG_CUDA_LAUNCHER(assign) {
    const dfg_tensor *dst = n->in[0];
    const int64_t cnt = dfg_shape_numel(dst->shape);
    const size_t bytes = dfg_tensor_bytes(dst);
    cudaError_t e = cudaSuccess;
    if (cnt == 0) return DFG_OK;
    switch ((dfg_op)n->op) {
    case DFG_OP_ASSIGN: {
        const dfg_dtype sd = n->in[1]->dtype, dd = dst->dtype;
        if (sd == dd) {
            if (out[0] == in[1]) return DFG_OK;
            e = copy_bytes(out[0], in[1], bytes, ctx);
        } else if (is_float(sd) && is_float(dd)) { // round to nearest even, as the CPU's dfg_store
            if (sd == DFG_F32) e = launch_convert(out[0], dd, (const float *)in[1], cnt, ctx);
            else if (sd == DFG_BF16) e = launch_convert(out[0], dd, (const __nv_bfloat16 *)in[1], cnt, ctx);
            else e = launch_convert(out[0], dd, (const __half *)in[1], cnt, ctx);
        } else {
            return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "cannot convert %s to %s", dfg_dtype_name(sd),
                                 dfg_dtype_name(dd));
        }
        return dfg_cuda_launched(ctx, n, e, "assign");
    }
    case DFG_OP_ACCUMULATE:
        if (n->in[1]->dtype != dst->dtype) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "source and destination dtypes differ");
        switch (dst->dtype) {
        case DFG_F32:
            if (word_of(bytes, out[0], in[0]) == 16 && word_of(bytes, in[1], in[1]) == 16)
                e = DFG_LAUNCH(accumulate_f32x4, dfg_grid_units(dfg_cdiv(cnt / 4, kThreads), ctx), kThreads, 0,
                               (cudaStream_t)ctx->stream, (float4 *)out[0], (const float4 *)in[0],
                               (const float4 *)in[1], cnt / 4);
            else e = launch_accumulate<float>(out[0], in[0], in[1], cnt, ctx);
            break;
        case DFG_BF16: e = launch_accumulate<__nv_bfloat16>(out[0], in[0], in[1], cnt, ctx); break;
        case DFG_F16: e = launch_accumulate<__half>(out[0], in[0], in[1], cnt, ctx); break;
        case DFG_I32: e = launch_accumulate<int32_t>(out[0], in[0], in[1], cnt, ctx); break;
        default: return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "cannot accumulate %s", dfg_dtype_name(dst->dtype));
        }
        return dfg_cuda_launched(ctx, n, e, "accumulate");
    case DFG_OP_ASSIGN_FILL: {
        const uint32_t bits = fill_bits(dst->dtype, n->attr->assign_fill.value);
        const size_t esz = dfg_dtype_size(dst->dtype);
        if (word_of(bytes, out[0], out[0]) == 16) { // the element repeated over a 16-byte word
            const uint32_t w = esz == 4 ? bits : esz == 2 ? bits * 0x10001u : bits * 0x1010101u;
            e = launch_fill<uint4>(out[0], make_uint4(w, w, w, w), (int64_t)(bytes / 16), ctx);
        } else if (esz == 4) {
            e = launch_fill<uint32_t>(out[0], bits, cnt, ctx);
        } else if (esz == 2) {
            e = launch_fill<uint16_t>(out[0], (uint16_t)bits, cnt, ctx);
        } else {
            e = launch_fill<uint8_t>(out[0], (uint8_t)bits, cnt, ctx);
        }
        return dfg_cuda_launched(ctx, n, e, "assign_fill");
    }
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "not an assign op");
    }
}

// ---------------------------------------------------------------- slice_assign
namespace {

// dst (outer, len, inner) [o, s_o:s_o+slen, :] = src (outer, slen, inner), in words of W; s_o is
// the start, or read on the device from the i32 pos: pos[0] for every o (rows = 0), or pos[o]
// (rows = 1: one start a row). Any start out of range: the flag, and nothing written (a per-row
// pos is checked whole by every block, with one barrier, before a block writes).
template <class W>
__global__ __launch_bounds__(kThreads) void slice_assign_k(W *dst /* (outer, len, inner_w) */,
                                                           const W *src /* (outer, slen, inner_w) */,
                                                           const int32_t *pos /* (), (outer) or NULL */, int rows,
                                                           int64_t start, int64_t outer, int64_t len, int64_t slen,
                                                           int64_t inner_w, int *flags) {
    if (rows) {
        int bad = 0;
        for (int64_t o = threadIdx.x; o < outer; o += blockDim.x) bad |= pos[o] < 0 || pos[o] + slen > len;
        if (__syncthreads_or(bad)) {
            if (blockIdx.x == 0 && threadIdx.x == 0) raise_flag(flags);
            return;
        }
    }
    const int64_t s = pos ? (int64_t)*pos : start;
    if (!rows && (s < 0 || s + slen > len)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) raise_flag(flags);
        return;
    }
    const int64_t row = slen * inner_w, total = outer * row;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = q / row, w = q % row;
        dst[(o * len + (rows ? (int64_t)pos[o] : s)) * inner_w + w] = src[q];
    }
}

template <class W>
cudaError_t launch_slice(void *dst, const void *src, const int32_t *pos, int rows, int64_t start, int64_t outer,
                         int64_t len, int64_t slen, int64_t inner_bytes, const dfg_cuda_ctx *ctx) {
    const int64_t inner_w = inner_bytes / (int64_t)sizeof(W);
    return DFG_LAUNCH((slice_assign_k<W>), dfg_grid_units(dfg_cdiv(outer * slen * inner_w, kThreads), ctx), kThreads, 0,
                      (cudaStream_t)ctx->stream, (W *)dst, (const W *)src, pos, rows, start, outer, len, slen, inner_w,
                      ctx->flags);
}

} // namespace

DFG_CUDA_LAUNCHER(slice_assign) {
    const dfg_tensor *dst = n->in[0], *src = n->in[1];
    const int ax = n->attr->slice_assign.axis;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= dst->shape.d[i];
    for (int i = ax + 1; i < dst->shape.rank; i++) inner *= dst->shape.d[i];
    const int64_t len = dst->shape.d[ax], slen = src->shape.d[ax];
    const int32_t *pos = n->attr->slice_assign.dynamic ? (const int32_t *)in[2] : NULL;
    const int rows = pos && dfg_shape_numel(n->in[2]->shape) > 1; // one start a row (axis 1: o is the row)
    const int64_t start = n->attr->slice_assign.start;
    if (!pos && (start < 0 || start + slen > len)) // the shape rule refuses this; kept for a corrupt plan
        return dfg_cuda_fail(ctx, n, DFG_ERR_RANGE, "rows [%lld, %lld) are outside %lld rows", (long long)start,
                             (long long)(start + slen), (long long)len);
    if (src->dtype != dst->dtype) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "source and destination dtypes differ");
    if (outer * slen * inner == 0) return DFG_OK;
    // the word must divide a row of inner elements, so that every start keeps it aligned
    const int64_t ib = inner * (int64_t)dfg_dtype_size(dst->dtype);
    cudaError_t e;
    switch (word_of((size_t)ib, out[0], in[1])) {
    case 16: e = launch_slice<uint4>(out[0], in[1], pos, rows, start, outer, len, slen, ib, ctx); break;
    case 4: e = launch_slice<uint32_t>(out[0], in[1], pos, rows, start, outer, len, slen, ib, ctx); break;
    case 2: e = launch_slice<uint16_t>(out[0], in[1], pos, rows, start, outer, len, slen, ib, ctx); break;
    default: e = launch_slice<uint8_t>(out[0], in[1], pos, rows, start, outer, len, slen, ib, ctx); break;
    }
    return dfg_cuda_launched(ctx, n, e, "slice_assign");
}

// ---------------------------------------------------------------- multi-tensor tables
namespace {

// Up to kTable tensors of one launch. first[k] is the node-wide number of tensor k's first chunk
// (first[count]: the end), so block u of the launch takes chunk first[0] + u.
struct TensorTable {
    int count;
    int64_t first[kTable + 1];
    int64_t numel[kTable];
    uint32_t dt[kTable];      // a dfg_dtype per pointer, 8 bits each; kVec4: all f32 and 16-byte aligned
    void *ptr[4][kTable];     // adamw: p, g, m, v; clip: g, g'
};
static_assert(sizeof(TensorTable) <= 3840, "the table must leave room for the other parameters in 4 KB");
constexpr uint32_t kVec4 = 1u << 31;

// the tensor holding node-wide chunk c (the last k with first[k] <= c: empty tensors are skipped)
__device__ __forceinline__ int tensor_of(const TensorTable &t, int64_t c) {
    int lo = 0, hi = t.count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t.first[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Node-wide chunk c of a launch's table: elements [i0, i1) of tensor k
struct Chunk {
    int k;
    int64_t i0, i1;
    __device__ __forceinline__ Chunk(const TensorTable &t, int64_t c) : k(tensor_of(t, c)) {
        const int64_t n = t.numel[k];
        i0 = (c - t.first[k]) * kChunk;
        i1 = i0 + kChunk < n ? i0 + kChunk : n;
    }
};

__device__ __forceinline__ int dt_of(uint32_t dts, int i) { return (int)(dts >> (8 * i) & 0xff); }

// Fills tables of kTable tensors and calls launch(table, chunks) for each; tensor i has numel(i)
// elements and pointers ptr(i, j) with dtypes dt(i, j), j < nptr.
template <class Numel, class Ptr, class Dt, class Launch>
dfg_status for_tables(int count, Numel numel, int nptr, Ptr ptr, Dt dt, Launch launch) {
    int64_t chunk0 = 0;
    for (int a = 0; a < count; a += kTable) {
        TensorTable t;
        memset(&t, 0, sizeof(t));
        t.count = count - a < kTable ? count - a : kTable;
        int64_t c = chunk0;
        for (int k = 0; k < t.count; k++) {
            bool vec = true;
            t.first[k] = c, t.numel[k] = numel(a + k);
            for (int j = 0; j < nptr; j++) {
                t.ptr[j][k] = ptr(a + k, j);
                t.dt[k] |= (uint32_t)dt(a + k, j) << (8 * j);
                vec = vec && dt(a + k, j) == DFG_F32 && (uintptr_t)t.ptr[j][k] % 16 == 0;
            }
            if (vec) t.dt[k] |= kVec4;
            c += dfg_cdiv(t.numel[k], kChunk);
        }
        t.first[t.count] = c;
        if (c > chunk0) {
            dfg_status s = launch(t, c - chunk0);
            if (s) return s;
        }
        chunk0 = c;
    }
    return DFG_OK;
}

// ---------------------------------------------------------------- adamw
struct AdamHyper {
    float lr, beta1, beta2, eps, decay; // decay = 1 - lr * weight_decay, as the CPU computes it
};

// torch.optim.AdamW's update of one element, in the CPU kernel's order of operations
__device__ __forceinline__ void adam_elem(float &p, float g, float &m, float &v, const AdamHyper &h, float step_size,
                                          float bc2_sqrt, float decay) {
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    p = p * decay - step_size * m / (sqrtf(v) / bc2_sqrt + h.eps);
}

// One block per chunk of kChunk elements of one parameter. The bias corrections come from the
// step on the device, and so does a scheduled rate (lr, else h.lr). Nothing is written when the
// step is below 1 or the rate below 0 or NaN (the flag is raised, as the CPU fails) or when the
// flag is already up: an earlier kernel of the stage found a bad value (clip_grad_norm's
// non-finite norm), where the CPU would have stopped before this update.
__global__ __launch_bounds__(kThreads) void adamw_k(const __grid_constant__ TensorTable t,
                                                    const int32_t *step /* () */, const float *lr /* () or null */,
                                                    int *flags, AdamHyper h, float weight_decay, int64_t chunks) {
    __shared__ float sh_step, sh_bc2, sh_decay;
    __shared__ int sh_ok;
    if (threadIdx.x == 0) {
        const int32_t s = *step;
        const float rate = lr ? *lr : h.lr;
        const bool bad = s < 1 || !(rate >= 0.0f);
        if (bad) raise_flag(flags);
        const double bc1 = 1.0 - pow((double)h.beta1, (double)s), bc2 = 1.0 - pow((double)h.beta2, (double)s);
        sh_step = (float)((double)rate / bc1);
        sh_bc2 = (float)sqrt(bc2);
        // 1 - lr wd as the CPU rounds it (two roundings, never one FMA); without lr, the host's
        sh_decay = lr ? __fsub_rn(1.0f, __fmul_rn(rate, weight_decay)) : h.decay;
        sh_ok = !bad && !(flags && *flags);
    }
    __syncthreads();
    if (!sh_ok) return; // the whole block
    const float step_size = sh_step, bc2_sqrt = sh_bc2, decay = sh_decay;
    for (int64_t u = blockIdx.x; u < chunks; u += gridDim.x) {
        const Chunk ch(t, t.first[0] + u);
        const int k = ch.k;
        const int64_t i0 = ch.i0, i1 = ch.i1;
        void *P = t.ptr[0][k], *M = t.ptr[2][k], *V = t.ptr[3][k];
        const void *G = t.ptr[1][k];
        const uint32_t dts = t.dt[k];
        int64_t i = i0 + threadIdx.x;
        if (dts & kVec4) { // all f32 and aligned: float4 over the chunk's whole vectors
            for (int64_t j = i0 + 4 * (int64_t)threadIdx.x; j + 3 < i1; j += 4 * kThreads) {
                float4 p = *reinterpret_cast<float4 *>((float *)P + j), m = *reinterpret_cast<float4 *>((float *)M + j);
                float4 v = *reinterpret_cast<float4 *>((float *)V + j);
                const float4 g = *reinterpret_cast<const float4 *>((const float *)G + j);
                adam_elem(p.x, g.x, m.x, v.x, h, step_size, bc2_sqrt, decay);
                adam_elem(p.y, g.y, m.y, v.y, h, step_size, bc2_sqrt, decay);
                adam_elem(p.z, g.z, m.z, v.z, h, step_size, bc2_sqrt, decay);
                adam_elem(p.w, g.w, m.w, v.w, h, step_size, bc2_sqrt, decay);
                *reinterpret_cast<float4 *>((float *)P + j) = p;
                *reinterpret_cast<float4 *>((float *)M + j) = m;
                *reinterpret_cast<float4 *>((float *)V + j) = v;
            }
            i = i0 + (i1 - i0) / 4 * 4 + threadIdx.x; // the last < 4 elements of the tensor
        }
        for (; i < i1; i += kThreads) {
            float p = ldx(P, dt_of(dts, 0), i), m = ldx(M, dt_of(dts, 2), i), v = ldx(V, dt_of(dts, 3), i);
            adam_elem(p, ldx(G, dt_of(dts, 1), i), m, v, h, step_size, bc2_sqrt, decay);
            stx(P, dt_of(dts, 0), i, p);
            stx(M, dt_of(dts, 2), i, m);
            stx(V, dt_of(dts, 3), i, v);
        }
    }
}

} // namespace

// inputs: step, (param, grad, m, v) x np, an optional f32 scalar lr; outputs (param, m, v) x np,
// each over its input
DFG_CUDA_LAUNCHER(adamw) {
    const int np = (n->n_in - 1) / 4;
    const bool has_lr = (n->n_in - 1) % 4 == 1;
    if (n->n_in < 5 || ((n->n_in - 1) % 4 && !has_lr) || n->n_out != 3 * np)
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs step, (param, grad, m, v) per parameter and an optional lr");
    for (int i = 0; i < np; i++) {
        for (int j = 0; j < 3; j++)
            if (out[3 * i + j] != in[(j == 0 ? 1 : 2 + j) + 4 * i])
                return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "output %d does not take its input's bytes (adamw updates in place)",
                                     3 * i + j);
        for (int j = 1; j <= 4; j++)
            if (!is_float(n->in[j + 4 * i]->dtype))
                return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "'%s' is not float", n->in[j + 4 * i]->name);
    }
    const dfg_attrs_adamw c = n->attr->adamw;
    const AdamHyper h = {c.lr, c.beta1, c.beta2, c.eps, 1.0f - c.lr * c.weight_decay};
    // pointers in table order p, g, m, v: p, m, v through the outputs (the same bytes as the inputs)
    auto ptr = [&](int i, int j) -> void * { return j == 1 ? in[2 + 4 * i] : out[3 * i + (j == 0 ? 0 : j - 1)]; };
    auto dt = [&](int i, int j) { return n->in[1 + 4 * i + j]->dtype; };
    auto numel = [&](int i) { return dfg_shape_numel(n->in[1 + 4 * i]->shape); };
    return for_tables(np, numel, 4, ptr, dt, [&](const TensorTable &t, int64_t chunks) {
        cudaError_t e = DFG_LAUNCH(adamw_k, dfg_grid_units(chunks, ctx), kThreads, 0, (cudaStream_t)ctx->stream, t,
                                   (const int32_t *)in[0], has_lr ? (const float *)in[n->n_in - 1] : nullptr,
                                   ctx->flags, h, c.weight_decay, chunks);
        return dfg_cuda_launched(ctx, n, e, "adamw");
    });
}

// ---------------------------------------------------------------- clip_grad_norm
namespace {

// part[c] = the sum of squares of chunk c (double, as the CPU), a block per chunk
__global__ __launch_bounds__(kThreads) void clip_sumsq(const __grid_constant__ TensorTable t,
                                                       double *part /* (chunks of the node) */, int64_t chunks) {
    __shared__ double sh[32];
    for (int64_t u = blockIdx.x; u < chunks; u += gridDim.x) {
        const Chunk ch(t, t.first[0] + u);
        const int k = ch.k;
        const int64_t i0 = ch.i0, i1 = ch.i1;
        const void *G = t.ptr[0][k];
        const int dt = dt_of(t.dt[k], 0);
        double acc = 0.0;
        int64_t i = i0 + threadIdx.x;
        if (t.dt[k] & kVec4) {
            for (int64_t j = i0 + 4 * (int64_t)threadIdx.x; j + 3 < i1; j += 4 * kThreads) {
                const float4 g = *reinterpret_cast<const float4 *>((const float *)G + j);
                acc += (double)g.x * g.x + (double)g.y * g.y + (double)g.z * g.z + (double)g.w * g.w;
            }
            i = i0 + (i1 - i0) / 4 * 4 + threadIdx.x;
        }
        for (; i < i1; i += kThreads) {
            const double g = ldx(G, dt, i);
            acc += g * g;
        }
        acc = dfg_block_sum(acc, sh);
        if (threadIdx.x == 0) part[t.first[0] + u] = acc;
    }
}

// One block: the norm from the partials (a fixed partition over the threads, then the block's
// tree), written to *norm; the scale min(1, max_norm / (norm + 1e-6)) to *scale. A norm that is
// not finite raises the flag and scales by 1: the gradients are left unscaled (the CPU fails the
// node before writing anything; here the norm is written too, for the message).
__global__ __launch_bounds__(kThreads) void clip_norm(const double *part /* (chunks) */, int64_t chunks,
                                                      float *norm /* () */, float *scale /* () */, float max_norm,
                                                      int *flags) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) acc += part[c];
    acc = dfg_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        const double nv = sqrt(acc), coef = (double)max_norm / (nv + 1e-6);
        *norm = (float)nv;
        if (isfinite(nv)) {
            *scale = (float)(coef < 1.0 ? coef : 1.0);
        } else {
            *scale = 1.0f;
            raise_flag(flags);
        }
    }
}

// g' = g * scale, with the scale read from the device
__global__ __launch_bounds__(kThreads) void clip_scale(const __grid_constant__ TensorTable t,
                                                       const float *scale /* () */, int64_t chunks) {
    const float s = *scale;
    for (int64_t u = blockIdx.x; u < chunks; u += gridDim.x) {
        const Chunk ch(t, t.first[0] + u);
        const int k = ch.k;
        const int64_t i0 = ch.i0, i1 = ch.i1;
        const void *G = t.ptr[0][k];
        void *Y = t.ptr[1][k];
        int64_t i = i0 + threadIdx.x;
        if (t.dt[k] & kVec4) {
            for (int64_t j = i0 + 4 * (int64_t)threadIdx.x; j + 3 < i1; j += 4 * kThreads) {
                const float4 g = *reinterpret_cast<const float4 *>((const float *)G + j);
                *reinterpret_cast<float4 *>((float *)Y + j) = make_float4(g.x * s, g.y * s, g.z * s, g.w * s);
            }
            i = i0 + (i1 - i0) / 4 * 4 + threadIdx.x;
        }
        for (; i < i1; i += kThreads) stx(Y, dt_of(t.dt[k], 1), i, ldx(G, dt_of(t.dt[k], 0), i) * s);
    }
}

int64_t clip_chunks(const dfg_node *n) {
    int64_t c = 0;
    for (int i = 0; i < n->n_in; i++) c += dfg_cdiv(dfg_shape_numel(n->in[i]->shape), kChunk);
    return c;
}

} // namespace

// partials (one double per chunk), then the scale (a float, padded to 8 bytes)
DFG_CUDA_SCRATCH(clip_grad_norm) { return (size_t)(clip_chunks(n) + 1) * sizeof(double); }

// inputs g x n; outputs the norm, g' x n (g' may take g's bytes)
DFG_CUDA_LAUNCHER(clip_grad_norm) {
    if (n->n_in < 1 || n->n_out != n->n_in + 1) return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs n >= 1 gradients");
    for (int i = 0; i < n->n_in; i++)
        if (!is_float(n->in[i]->dtype) || n->out[1 + i]->dtype != n->in[i]->dtype)
            return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "gradient '%s' is not float or changes dtype", n->in[i]->name);
    const int64_t chunks = clip_chunks(n);
    const size_t need = (size_t)(chunks + 1) * sizeof(double);
    if (!ctx->scratch || ctx->scratch_bytes < need)
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", need, ctx->scratch_bytes);
    double *part = (double *)ctx->scratch;
    float *scale = (float *)(part + chunks);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    auto numel = [&](int i) { return dfg_shape_numel(n->in[i]->shape); };
    auto ptr = [&](int i, int j) -> void * { return j == 0 ? in[i] : out[1 + i]; };
    auto dt = [&](int i, int j) { return j == 0 ? n->in[i]->dtype : n->out[1 + i]->dtype; };
    dfg_status s = for_tables(n->n_in, numel, 2, ptr, dt, [&](const TensorTable &t, int64_t c) {
        cudaError_t e = DFG_LAUNCH(clip_sumsq, dfg_grid_units(c, ctx), kThreads, 0, st, t, part, c);
        return dfg_cuda_launched(ctx, n, e, "clip_sumsq");
    });
    if (s) return s;
    cudaError_t e = DFG_LAUNCH(clip_norm, 1, kThreads, 0, st, (const double *)part, chunks, (float *)out[0], scale,
                               n->attr->clip.max_norm, ctx->flags);
    if ((s = dfg_cuda_launched(ctx, n, e, "clip_norm"))) return s;
    return for_tables(n->n_in, numel, 2, ptr, dt, [&](const TensorTable &t, int64_t c) {
        cudaError_t e2 = DFG_LAUNCH(clip_scale, dfg_grid_units(c, ctx), kThreads, 0, st, t, (const float *)scale, c);
        return dfg_cuda_launched(ctx, n, e2, "clip_scale");
    });
}
