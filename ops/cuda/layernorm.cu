// layernorm.cu - layer normalisation over the last axis: forward (y, mean, rstd) and backward
// (dx per row; dw, db reduced over rows).
//
// Rows are short in the models dfg trains (C = 768 .. 4096), so a warp takes a row when C <= 1024
// (8 rows per block, shuffles only, no barrier) and a block of 256 takes it otherwise. A row is
// read from global memory once per pass (sum, centred sum of squares, output); the later passes
// hit L1/L2. 16-byte loads and stores when C is a multiple of the vector and the pointers aligned.
//
// Precision, as the CPU reference: the forward's statistics are float (two passes, so the
// variance does not cancel) and y = (x - mean) * rstd * w + b in float. The backward's row sums
// and dx are computed in double, as the CPU does: dx = rstd * (dn - mean(dn) - norm * mean(dn *
// norm)) cancels when dx is small, and float there misses the 1e-5 tolerance; FP64 at half the
// FP32 rate (sm_80, sm_90) is still far above this memory-bound kernel's needs.
//
// dw and db are sums over rows: a (32 x 8) block takes 32 columns and a fixed range of rows (the
// rows split when the columns alone give few blocks); the partial sums of the splits go to
// DFG_CUDA_SCRATCH(layernorm_bwd) and a second kernel adds them in split order. Deterministic: the
// partition depends on the shape only.
#include "norm_rows.cuh"

namespace {

constexpr int64_t kTargetBlocks = 512; // dw/db: split rows until the grid has this many blocks
constexpr int64_t kMinRowsPerSplit = 32;
constexpr int64_t kMaxSplits = 1024;

// y (rows, C) = (x - mean) * rstd * w + b; mean, rstd (rows) f32
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void ln_fwd(const T *x /* (rows, C) */, const T *w /* (C) */,
                                                   const T *b /* (C) */, T *y /* (rows, C) */,
                                                   float *mean /* (rows) */, float *rstd /* (rows) */, int64_t rows,
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
            for (int k = 0; k < VEC; k++) s += v[k];
        }
        const float m = row_sum<WARP>(s, sh) / (float)C;
        s = 0.0f;
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(xr, i, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) s += (v[k] - m) * (v[k] - m);
        }
        const float rs = 1.0f / sqrtf(row_sum<WARP>(s, sh) / (float)C + eps);
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            float wv[VEC], bv[VEC];
            ld<VEC>(xr, i, v);
            ld<VEC>(w, i, wv);
            ld<VEC>(b, i, bv);
#pragma unroll
            for (int k = 0; k < VEC; k++) v[k] = (v[k] - m) * rs * wv[k] + bv[k];
            st<VEC>(y + r * C, i, v);
        }
        if (t == 0) mean[r] = m, rstd[r] = rs;
    }
}

// dx (rows, C) = rstd * (dn - mean(dn) - norm * mean(dn * norm)), dn = dy * w, norm = (x - mean) * rstd
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void ln_bwd_dx(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                      const T *w /* (C) */, const float *mean /* (rows) */,
                                                      const float *rstd /* (rows) */, T *dx /* (rows, C) */,
                                                      int64_t rows, int64_t C) {
    __shared__ double sh[32];
    const int t = WARP ? (threadIdx.x & 31) : threadIdx.x, nt = WARP ? 32 : kThreads;
    const int64_t per = WARP ? kWarps : 1, groups = cdiv(rows, per);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const int64_t r = g * per + (WARP ? threadIdx.x >> 5 : 0);
        if (WARP && r >= rows) break;
        const double m = mean[r], rs = rstd[r];
        float dv[VEC], xv[VEC], wv[VEC];
        double s1 = 0.0, s2 = 0.0; // sum(dn), sum(dn * norm)
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(dy + r * C, i, dv);
            ld<VEC>(x + r * C, i, xv);
            ld<VEC>(w, i, wv);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const double dn = (double)dv[k] * wv[k];
                s1 += dn;
                s2 += dn * (((double)xv[k] - m) * rs);
            }
        }
        s1 = row_sum<WARP>(s1, sh) / (double)C;
        s2 = row_sum<WARP>(s2, sh) / (double)C;
        for (int64_t i = (int64_t)t * VEC; i < C; i += (int64_t)nt * VEC) {
            ld<VEC>(dy + r * C, i, dv);
            ld<VEC>(x + r * C, i, xv);
            ld<VEC>(w, i, wv);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const double norm = ((double)xv[k] - m) * rs, dn = (double)dv[k] * wv[k];
                xv[k] = (float)(rs * (dn - s1 - norm * s2));
            }
            st<VEC>(dx + r * C, i, xv);
        }
    }
}

// dw[c] = sum_r dy[r, c] * norm[r, c], db[c] = sum_r dy[r, c] over the split's rows: blockDim
// (32, 8), x-threads over 32 columns, y-threads over every 8th row; partials added in y order.
template <class T>
__global__ __launch_bounds__(kThreads) void ln_bwd_dwdb(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                        const float *mean /* (rows) */, const float *rstd /* (rows) */,
                                                        T *dw /* (C) */, T *db /* (C) */,
                                                        double *part /* (2, splits, C) */, int64_t rows, int64_t C,
                                                        int64_t chunk, int64_t splits) {
    __shared__ double shw[8][33], shb[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles = cdiv(C, 32);
    for (int64_t u = blockIdx.x; u < tiles * splits; u += gridDim.x) {
        const int64_t c = u % tiles * 32 + tx, s = u / tiles;
        const int64_t r1 = (s + 1) * chunk < rows ? (s + 1) * chunk : rows;
        double aw = 0.0, ab = 0.0;
        if (c < C)
            for (int64_t r = s * chunk + ty; r < r1; r += 8) {
                const double d = dfg_ld(dy, r * C + c);
                aw += d * (((double)dfg_ld(x, r * C + c) - mean[r]) * rstd[r]);
                ab += d;
            }
        shw[ty][tx] = aw, shb[ty][tx] = ab;
        __syncthreads();
        if (ty == 0 && c < C) {
            aw = 0.0, ab = 0.0;
#pragma unroll
            for (int k = 0; k < 8; k++) aw += shw[k][tx], ab += shb[k][tx];
            if (splits == 1) {
                dfg_st(dw, c, (float)aw);
                dfg_st(db, c, (float)ab);
            } else {
                part[s * C + c] = aw;
                part[(splits + s) * C + c] = ab;
            }
        }
        __syncthreads();
    }
}

template <class T>
__global__ __launch_bounds__(kThreads) void ln_bwd_partials(const double *part /* (2, splits, C) */, T *dw /* (C) */,
                                                            T *db /* (C) */, int64_t C, int64_t splits) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double aw = 0.0, ab = 0.0;
        for (int64_t s = 0; s < splits; s++) aw += part[s * C + c], ab += part[(splits + s) * C + c];
        dfg_st(dw, c, (float)aw);
        dfg_st(db, c, (float)ab);
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

// the row splits of dw/db (shape only)
int64_t dwdb_splits(int64_t rows, int64_t C, int64_t *chunk) {
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

// launches kern<T, VEC, WARP> for `rows` rows of C, picking the warp/block and vector variants
#define LN_LAUNCH(kern, vec, rows, C, ...)                                                                         \
    (C <= kWarpRowMax                                                                                              \
         ? (vec ? DFG_LAUNCH((kern<T, Vec<T>::n, true>), grid_of(cdiv(rows, kWarps), ctx), kThreads, 0, st, __VA_ARGS__) \
                : DFG_LAUNCH((kern<T, 1, true>), grid_of(cdiv(rows, kWarps), ctx), kThreads, 0, st, __VA_ARGS__))  \
         : (vec ? DFG_LAUNCH((kern<T, Vec<T>::n, false>), grid_of(rows, ctx), kThreads, 0, st, __VA_ARGS__)      \
                : DFG_LAUNCH((kern<T, 1, false>), grid_of(rows, ctx), kThreads, 0, st, __VA_ARGS__)))

} // namespace

DFG_CUDA_LAUNCHER(layernorm) {
    const dfg_tensor *x = n->in[0];
    int64_t rows, C;
    rows_of(x->shape, &rows, &C);
    if (n->in[1]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->out[1]->dtype != DFG_F32 ||
        n->out[2]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "w and b must have x's dtype; mean and rstd must be f32");
    if (rows == 0 || C == 0) return DFG_OK;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    const bool aligned = aligned16(in[0]) && aligned16(in[1]) && aligned16(in[2]) && aligned16(out[0]);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        const bool vec = aligned && C % Vec<T>::n == 0;
        e = LN_LAUNCH(ln_fwd, vec, rows, C, (const T *)in[0], (const T *)in[1], (const T *)in[2], (T *)out[0],
                      (float *)out[1], (float *)out[2], rows, C, n->attr->layernorm.eps);
    });
    return dfg_cuda_launched(ctx, n, e, "ln_fwd");
}

DFG_CUDA_SCRATCH(layernorm_bwd) {
    int64_t rows, C, chunk;
    rows_of(n->in[1]->shape, &rows, &C);
    const int64_t splits = dwdb_splits(rows, C, &chunk);
    return splits > 1 ? (size_t)(2 * splits * C) * sizeof(double) : 0;
}

// inputs dy, x, w, mean, rstd -> dx, dw, db
DFG_CUDA_LAUNCHER(layernorm_bwd) {
    const dfg_tensor *x = n->in[1];
    int64_t rows, C, chunk;
    rows_of(x->shape, &rows, &C);
    if (n->in[0]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->in[3]->dtype != DFG_F32 ||
        n->in[4]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dy and w must have x's dtype; mean and rstd must be f32");
    const int64_t splits = dwdb_splits(rows, C, &chunk);
    const size_t need = splits > 1 ? (size_t)(2 * splits * C) * sizeof(double) : 0;
    if (need && (!ctx->scratch || ctx->scratch_bytes < need))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", need, ctx->scratch_bytes);
    if (C == 0) return DFG_OK;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    const bool aligned = aligned16(in[0]) && aligned16(in[1]) && aligned16(in[2]) && aligned16(out[0]);
    dfg_status s = DFG_OK;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        const T *dy = (const T *)in[0], *xp = (const T *)in[1];
        const float *mean = (const float *)in[3], *rstd = (const float *)in[4];
        if (rows > 0) {
            const bool vec = aligned && C % Vec<T>::n == 0;
            e = LN_LAUNCH(ln_bwd_dx, vec, rows, C, dy, xp, (const T *)in[2], mean, rstd, (T *)out[0], rows, C);
            if ((s = dfg_cuda_launched(ctx, n, e, "ln_bwd_dx"))) return s;
        }
        double *part = (double *)ctx->scratch;
        e = DFG_LAUNCH((ln_bwd_dwdb<T>), grid_of(cdiv(C, 32) * splits, ctx), dim3(32, 8), 0, st, dy, xp, mean, rstd,
                       (T *)out[1], (T *)out[2], part, rows, C, chunk, splits);
        if ((s = dfg_cuda_launched(ctx, n, e, "ln_bwd_dwdb")) || splits == 1) return s;
        e = DFG_LAUNCH((ln_bwd_partials<T>), grid_of(cdiv(C, kThreads), ctx), kThreads, 0, st, (const double *)part,
                       (T *)out[1], (T *)out[2], C, splits);
        s = dfg_cuda_launched(ctx, n, e, "ln_bwd_partials");
    });
    return s;
}
