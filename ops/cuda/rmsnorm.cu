// rmsnorm.cu - RMSNorm over the last axis (Llama, Qwen): forward (y, rstd) and backward (dx per
// row; dw reduced over rows). The same layout as layernorm.cu, less the centring and the bias.
//
// A warp takes a row when C <= 1024 (8 rows per block, shuffles only, no barrier) and a block of
// 256 takes it otherwise. A row is read from global memory once per pass (sum of squares, output);
// the second pass hits L1/L2. 16-byte loads and stores when C is a multiple of the vector and the
// pointers are aligned.
//
// Precision, as Hugging Face's LlamaRMSNorm and the CPU reference: the sum of squares and
// rstd = 1 / sqrt(mean(x^2) + eps) are float, y = w * (x * rstd) is float, rounded once to the
// output dtype (bf16: one rounding, where HF rounds x * rstd to bf16 before the weight; the CPU
// reference, which the tests hold this to, computes in f32). The backward's row sum and dx are
// double, as the CPU's and layernorm.cu's: dx = rstd * (dn - norm * mean(dn * norm)) cancels
// when dx is small.
//
// dw is a sum over rows: a (32 x 8) block takes 32 columns and a fixed range of rows (the rows
// split when the columns alone give few blocks); the partial sums of the splits go to
// DFG_CUDA_SCRATCH(rmsnorm_bwd) and a second kernel adds them in split order. Deterministic: the
// partition depends on the shape only.
#include "norm_rows.cuh"

namespace {

constexpr int64_t kTargetBlocks = 512; // dw: split rows until the grid has this many blocks
constexpr int64_t kMinRowsPerSplit = 32;
constexpr int64_t kMaxSplits = 1024;

// y (rows, C) = w * (x * rstd); rstd (rows) f32 = 1 / sqrt(mean(x^2) + eps)
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void rms_fwd(const T *x /* (rows, C) */, const T *w /* (C) */,
                                                    T *y /* (rows, C) */, float *rstd /* (rows) */, int64_t rows,
                                                    int64_t C, float eps) {
    __shared__ float sh[32];
    const int t = WARP ? (threadIdx.x & 31) : threadIdx.x, nt = WARP ? 32 : kThreads;
    const int64_t per = WARP ? kWarps : 1, groups = cdiv(rows, per);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const int64_t r = g * per + (WARP ? threadIdx.x >> 5 : 0);
        if (WARP && r >= rows) break; // the whole warp; no block barrier in the warp variant
        const T *xr = x + r * C;
        float v[VEC], s = 0.0f;
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(xr, i, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) s += v[k] * v[k];
        }
        const float rs = 1.0f / sqrtf(row_sum<WARP>(s, sh) / (float)C + eps);
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            float wv[VEC];
            ld<VEC>(xr, i, v);
            ld<VEC>(w, i, wv);
#pragma unroll
            for (int k = 0; k < VEC; k++) v[k] = wv[k] * (v[k] * rs);
            st<VEC>(y + r * C, i, v);
        }
        if (t == 0) rstd[r] = rs;
    }
}

// dx (rows, C) = rstd * (dn - norm * mean(dn * norm)), dn = dy * w, norm = x * rstd
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void rms_bwd_dx(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                       const T *w /* (C) */, const float *rstd /* (rows) */,
                                                       T *dx /* (rows, C) */, int64_t rows, int64_t C) {
    __shared__ double sh[32];
    const int t = WARP ? (threadIdx.x & 31) : threadIdx.x, nt = WARP ? 32 : kThreads;
    const int64_t per = WARP ? kWarps : 1, groups = cdiv(rows, per);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const int64_t r = g * per + (WARP ? threadIdx.x >> 5 : 0);
        if (WARP && r >= rows) break;
        const double rs = rstd[r];
        float dv[VEC], xv[VEC], wv[VEC];
        double s = 0.0; // sum(dn * norm)
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(dy + r * C, i, dv);
            ld<VEC>(x + r * C, i, xv);
            ld<VEC>(w, i, wv);
#pragma unroll
            for (int k = 0; k < VEC; k++) s += (double)dv[k] * wv[k] * ((double)xv[k] * rs);
        }
        s = row_sum<WARP>(s, sh) / (double)C;
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(dy + r * C, i, dv);
            ld<VEC>(x + r * C, i, xv);
            ld<VEC>(w, i, wv);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const double norm = (double)xv[k] * rs, dn = (double)dv[k] * wv[k];
                xv[k] = (float)(rs * (dn - norm * s));
            }
            st<VEC>(dx + r * C, i, xv);
        }
    }
}

// dw[c] = sum_r dy[r, c] * x[r, c] * rstd[r] over the split's rows: blockDim (32, 8), x-threads
// over 32 columns, y-threads over every 8th row; partials added in y order.
template <class T>
__global__ __launch_bounds__(kThreads) void rms_bwd_dw(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                       const float *rstd /* (rows) */, T *dw /* (C) */,
                                                       double *part /* (splits, C) */, int64_t rows, int64_t C,
                                                       int64_t chunk, int64_t splits) {
    __shared__ double shw[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles = cdiv(C, 32);
    for (int64_t u = blockIdx.x; u < tiles * splits; u += gridDim.x) {
        const int64_t c = u % tiles * 32 + tx, s = u / tiles;
        const int64_t r1 = (s + 1) * chunk < rows ? (s + 1) * chunk : rows;
        double aw = 0.0;
        if (c < C)
            for (int64_t r = s * chunk + ty; r < r1; r += 8)
                aw += (double)dfg_ld(dy, r * C + c) * ((double)dfg_ld(x, r * C + c) * rstd[r]);
        shw[ty][tx] = aw;
        __syncthreads();
        if (ty == 0 && c < C) {
            aw = 0.0;
#pragma unroll
            for (int k = 0; k < 8; k++) aw += shw[k][tx];
            if (splits == 1) dfg_st(dw, c, (float)aw);
            else part[s * C + c] = aw;
        }
        __syncthreads();
    }
}

template <class T>
__global__ __launch_bounds__(kThreads) void rms_bwd_partials(const double *part /* (splits, C) */, T *dw /* (C) */,
                                                             int64_t C, int64_t splits) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double aw = 0.0;
        for (int64_t s = 0; s < splits; s++) aw += part[s * C + c];
        dfg_st(dw, c, (float)aw);
    }
}

// ---------------------------------------------------------------- host side
unsigned grid_of(int64_t units, const dfg_cuda_ctx *ctx) {
    const int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 16;
    return (unsigned)(units < cap ? (units > 0 ? units : 1) : cap);
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

void rows_of(dfg_shape s, int64_t *rows, int64_t *C) {
    *C = s.d[s.rank - 1];
    *rows = dfg_shape_numel(s) / (*C ? *C : 1);
}

// the row splits of dw (shape only)
int64_t dw_splits(int64_t rows, int64_t C, int64_t *chunk) {
    const int64_t tiles = cdiv(C, 32);
    int64_t splits = 1;
    if (tiles < kTargetBlocks) {
        splits = cdiv(kTargetBlocks, tiles);
        const int64_t most = rows / kMinRowsPerSplit;
        splits = splits < most ? splits : most;
        splits = splits < kMaxSplits ? splits : kMaxSplits;
        splits = splits > 1 ? splits : 1;
    }
    *chunk = cdiv(rows, splits);
    return *chunk ? cdiv(rows, *chunk) : 1;
}

size_t dw_scratch(const dfg_node *n) {
    int64_t rows, C, chunk;
    rows_of(n->in[1]->shape, &rows, &C);
    const int64_t splits = dw_splits(rows, C, &chunk);
    return splits > 1 ? (size_t)(splits * C) * sizeof(double) : 0;
}

// launches kern<T, VEC, WARP> for `rows` rows of C, picking the warp/block and vector variants
#define RMS_LAUNCH(kern, vec, rows, C, ...)                                                                        \
    (C <= kWarpRowMax                                                                                              \
         ? (vec ? DFG_LAUNCH((kern<T, Vec<T>::n, true>), grid_of(cdiv(rows, kWarps), ctx), kThreads, 0, st, __VA_ARGS__) \
                : DFG_LAUNCH((kern<T, 1, true>), grid_of(cdiv(rows, kWarps), ctx), kThreads, 0, st, __VA_ARGS__))  \
         : (vec ? DFG_LAUNCH((kern<T, Vec<T>::n, false>), grid_of(rows, ctx), kThreads, 0, st, __VA_ARGS__)      \
                : DFG_LAUNCH((kern<T, 1, false>), grid_of(rows, ctx), kThreads, 0, st, __VA_ARGS__)))

} // namespace

// inputs x (..., C), w (C) -> y (..., C), rstd (...) f32
DFG_CUDA_LAUNCHER(rmsnorm) {
    const dfg_tensor *x = n->in[0];
    int64_t rows, C;
    rows_of(x->shape, &rows, &C);
    if (n->in[1]->dtype != x->dtype || n->out[0]->dtype != x->dtype || n->out[1]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "w and y must have x's dtype; rstd must be f32");
    if (rows == 0 || C == 0) return DFG_OK;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    const bool aligned = aligned16(in[0]) && aligned16(in[1]) && aligned16(out[0]);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        const bool vec = aligned && C % Vec<T>::n == 0;
        e = RMS_LAUNCH(rms_fwd, vec, rows, C, (const T *)in[0], (const T *)in[1], (T *)out[0], (float *)out[1], rows,
                       C, n->attr->layernorm.eps);
    });
    return dfg_cuda_launched(ctx, n, e, "rms_fwd");
}

DFG_CUDA_SCRATCH(rmsnorm_bwd) { return dw_scratch(n); }

// inputs dy, x (..., C), w (C), rstd (...) f32 -> dx (..., C), dw (C)
DFG_CUDA_LAUNCHER(rmsnorm_bwd) {
    const dfg_tensor *x = n->in[1];
    int64_t rows, C, chunk;
    rows_of(x->shape, &rows, &C);
    if (n->in[0]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->in[3]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dy and w must have x's dtype; rstd must be f32");
    const int64_t splits = dw_splits(rows, C, &chunk);
    const size_t need = dw_scratch(n);
    if (need && (!ctx->scratch || ctx->scratch_bytes < need))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", need, ctx->scratch_bytes);
    if (C == 0) return DFG_OK;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    const bool aligned = aligned16(in[0]) && aligned16(in[1]) && aligned16(in[2]) && aligned16(out[0]);
    dfg_status s = DFG_OK;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        const T *dy = (const T *)in[0] /* (rows, C) */, *xp = (const T *)in[1] /* (rows, C) */;
        const float *rstd = (const float *)in[3]; /* (rows) */
        if (rows > 0) {
            const bool vec = aligned && C % Vec<T>::n == 0;
            e = RMS_LAUNCH(rms_bwd_dx, vec, rows, C, dy, xp, (const T *)in[2], rstd, (T *)out[0], rows, C);
            if ((s = dfg_cuda_launched(ctx, n, e, "rms_bwd_dx"))) return s;
        }
        double *part = (double *)ctx->scratch; /* (splits, C) when splits > 1 */
        e = DFG_LAUNCH((rms_bwd_dw<T>), grid_of(cdiv(C, 32) * splits, ctx), dim3(32, 8), 0, st, dy, xp, rstd,
                       (T *)out[1], part, rows, C, chunk, splits);
        if ((s = dfg_cuda_launched(ctx, n, e, "rms_bwd_dw")) || splits == 1) return s;
        e = DFG_LAUNCH((rms_bwd_partials<T>), grid_of(cdiv(C, kThreads), ctx), kThreads, 0, st, (const double *)part,
                       (T *)out[1], C, splits);
        s = dfg_cuda_launched(ctx, n, e, "rms_bwd_partials");
    });
    return s;
}
