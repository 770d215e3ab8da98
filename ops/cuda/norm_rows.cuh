// norm_rows.cuh - the row-normalising kernels of layernorm.cu (LN: centred, with a bias) and
// rmsnorm.cu (!LN: neither), one template for both: the forward (y, [mean,] rstd) over rows of
// C (rows.cuh's warp or block per row), the backward's dx per row, and dw (and db) reduced over
// rows. See those files for the precision rules; where the two differ the code says `if constexpr
// (LN)`, so each computes exactly its own formula.
//
// dw and db are sums over rows: a (32 x 8) block takes 32 columns and a fixed range of rows (the
// rows split when the columns alone give few blocks); the partial sums of the splits go to the
// node's scratch and a second kernel adds them in split order. Deterministic: the partition
// depends on the shape only.
#pragma once

#include "rows.cuh"

namespace {

constexpr int64_t kTargetBlocks = 512; // dw/db: split rows until the grid has this many blocks
constexpr int64_t kMinRowsPerSplit = 32;
constexpr int64_t kMaxSplits = 1024;

// the normalised x: (x - mean) * rstd (LN), x * rstd
template <bool LN> __device__ __forceinline__ double norm_of(float x, double m, double rs) {
    if constexpr (LN) return ((double)x - m) * rs;
    else return (double)x * rs;
}

// y (rows, C) = (x - mean) * rstd * w + b (LN), w * (x * rstd); mean (LN), rstd (rows) f32,
// rstd = 1 / sqrt(mean((x - mean)^2) + eps) (LN), 1 / sqrt(mean(x^2) + eps)
template <bool LN, class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void norm_fwd(const T *x /* (rows, C) */, const T *w /* (C) */,
                                                     const T *b /* (C), LN */, T *y /* (rows, C) */,
                                                     float *mean /* (rows), LN */, float *rstd /* (rows) */,
                                                     int64_t rows, int64_t C, float eps) {
    __shared__ float sh[32];
    for (RowWalk<VEC, WARP> rw(rows); rw.more(); rw.next()) {
        const int64_t r = rw.row();
        if (rw.past(r)) break;
        const T *xr = x + r * C;
        float v[VEC], s = 0.0f, m = 0.0f;
        if constexpr (LN) { // two passes, so that the variance does not cancel
            for (int64_t i = rw.i0(); i < C; i += rw.di) {
                dfg_ldn<VEC>(xr, i, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) s += v[k];
            }
            m = row_sum<WARP>(s, sh) / (float)C;
            s = 0.0f;
        }
        for (int64_t i = rw.i0(); i < C; i += rw.di) {
            dfg_ldn<VEC>(xr, i, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                if constexpr (LN) s += (v[k] - m) * (v[k] - m);
                else s += v[k] * v[k];
            }
        }
        const float rs = 1.0f / sqrtf(row_sum<WARP>(s, sh) / (float)C + eps);
        for (int64_t i = rw.i0(); i < C; i += rw.di) {
            float wv[VEC];
            dfg_ldn<VEC>(xr, i, v);
            dfg_ldn<VEC>(w, i, wv);
            if constexpr (LN) {
                float bv[VEC];
                dfg_ldn<VEC>(b, i, bv);
#pragma unroll
                for (int k = 0; k < VEC; k++) v[k] = (v[k] - m) * rs * wv[k] + bv[k];
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) v[k] = wv[k] * (v[k] * rs);
            }
            dfg_stn<VEC>(y + r * C, i, v);
        }
        if (rw.t == 0) {
            if constexpr (LN) mean[r] = m;
            rstd[r] = rs;
        }
    }
}

// dx (rows, C) = rstd * (dn - mean(dn) - norm * mean(dn * norm)) (LN), rstd * (dn - norm * mean(dn *
// norm)); dn = dy * w. Row sums and dx in double (they cancel when dx is small).
template <bool LN, class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void norm_bwd_dx(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                        const T *w /* (C) */, const float *mean /* (rows), LN */,
                                                        const float *rstd /* (rows) */, T *dx /* (rows, C) */,
                                                        int64_t rows, int64_t C) {
    typedef std::conditional_t<LN, DfgSum2<double>, double> Sums; // (sum(dn),) sum(dn * norm)
    __shared__ Sums sh[32];
    for (RowWalk<VEC, WARP> rw(rows); rw.more(); rw.next()) {
        const int64_t r = rw.row();
        if (rw.past(r)) break;
        const double m = LN ? (double)mean[r] : 0.0, rs = rstd[r];
        float dv[VEC], xv[VEC], wv[VEC];
        auto load = [&](int64_t i) { // both passes read dy, x and w at i
            dfg_ldn<VEC>(dy + r * C, i, dv);
            dfg_ldn<VEC>(x + r * C, i, xv);
            dfg_ldn<VEC>(w, i, wv);
        };
        double s1 = 0.0, s2 = 0.0; // sum(dn) (LN), sum(dn * norm)
        for (int64_t i = rw.i0(); i < C; i += rw.di) {
            load(i);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const double dn = (double)dv[k] * wv[k];
                if constexpr (LN) s1 += dn;
                s2 += dn * norm_of<LN>(xv[k], m, rs);
            }
        }
        if constexpr (LN) { // both sums in one reduction
            const Sums t = row_reduce<WARP>(Sums{s1, s2}, sh, Sums{0.0, 0.0}, DfgSum());
            s1 = t.a / (double)C, s2 = t.b / (double)C;
        } else {
            s2 = row_sum<WARP>(s2, sh) / (double)C;
        }
        for (int64_t i = rw.i0(); i < C; i += rw.di) {
            load(i);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const double norm = norm_of<LN>(xv[k], m, rs), dn = (double)dv[k] * wv[k];
                if constexpr (LN) xv[k] = (float)(rs * (dn - s1 - norm * s2));
                else xv[k] = (float)(rs * (dn - norm * s2));
            }
            dfg_stn<VEC>(dx + r * C, i, xv);
        }
    }
}

// dw[c] = sum_r dy[r, c] * norm[r, c] and (LN) db[c] = sum_r dy[r, c] over the split's rows:
// blockDim (32, 8), x-threads over 32 columns, y-threads over every 8th row; partials added in y
// order. part: dw's (splits, C), then db's.
template <bool LN, class T>
__global__ __launch_bounds__(kThreads) void norm_bwd_dw(const T *dy /* (rows, C) */, const T *x /* (rows, C) */,
                                                        const float *mean /* (rows), LN */,
                                                        const float *rstd /* (rows) */, T *dw /* (C) */,
                                                        T *db /* (C), LN */, double *part /* (1 + LN, splits, C) */,
                                                        int64_t rows, int64_t C, int64_t chunk, int64_t splits) {
    typedef std::conditional_t<LN, DfgSum2<double>, double> Sums; // dw's (and db's)
    __shared__ Sums sh[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles = dfg_cdiv(C, 32);
    for (int64_t u = blockIdx.x; u < tiles * splits; u += gridDim.x) {
        const int64_t c = u % tiles * 32 + tx, s = u / tiles;
        const int64_t r1 = (s + 1) * chunk < rows ? (s + 1) * chunk : rows;
        double aw = 0.0, ab = 0.0;
        if (c < C)
            for (int64_t r = s * chunk + ty; r < r1; r += 8) {
                const double d = dfg_ld(dy, r * C + c);
                aw += d * norm_of<LN>(dfg_ld(x, r * C + c), LN ? (double)mean[r] : 0.0, rstd[r]);
                if constexpr (LN) ab += d;
            }
        if constexpr (LN) {
            const Sums t = dfg_column_fold<8>(Sums{aw, ab}, sh, Sums{0.0, 0.0}, DfgSum());
            aw = t.a, ab = t.b;
        } else {
            aw = dfg_column_fold<8>(aw, sh, 0.0, DfgSum());
        }
        if (ty == 0 && c < C) {
            if (splits == 1) {
                dfg_st(dw, c, (float)aw);
                if constexpr (LN) dfg_st(db, c, (float)ab);
            } else {
                part[s * C + c] = aw;
                if constexpr (LN) part[(splits + s) * C + c] = ab;
            }
        }
    }
}

// dw (and db) = the sums of the splits' partials, in split order
template <bool LN, class T>
__global__ __launch_bounds__(kThreads) void norm_bwd_partials(const double *part /* (1 + LN, splits, C) */,
                                                              T *dw /* (C) */, T *db /* (C), LN */, int64_t C,
                                                              int64_t splits) {
    for (int64_t c = dfg_thread_index(); c < C; c += dfg_grid_threads()) {
        double aw = 0.0, ab = 0.0;
        for (int64_t s = 0; s < splits; s++) {
            aw += part[s * C + c];
            if constexpr (LN) ab += part[(splits + s) * C + c];
        }
        dfg_st(dw, c, (float)aw);
        if constexpr (LN) dfg_st(db, c, (float)ab);
    }
}

// ---------------------------------------------------------------- host side
// the row splits of dw/db (shape only)
inline int64_t dw_splits(int64_t rows, int64_t C, int64_t *chunk) {
    const int64_t tiles = dfg_cdiv(C, 32);
    int64_t splits = 1;
    if (tiles < kTargetBlocks) {
        splits = dfg_cdiv(kTargetBlocks, tiles);
        const int64_t most = rows / kMinRowsPerSplit;
        splits = splits < most ? splits : most;
        splits = splits < kMaxSplits ? splits : kMaxSplits;
        splits = splits > 1 ? splits : 1;
    }
    *chunk = dfg_cdiv(rows, splits);
    return *chunk ? dfg_cdiv(rows, *chunk) : 1;
}

// The backward's scratch: the partials of dw (and db) when the rows split; x is the node's x.
template <bool LN> size_t norm_bwd_scratch(const dfg_tensor *x) {
    int64_t rows, C, chunk;
    rows_of(x->shape, &rows, &C);
    const int64_t splits = dw_splits(rows, C, &chunk);
    return splits > 1 ? (size_t)((LN ? 2 : 1) * splits * C) * sizeof(double) : 0;
}

// y, mean (LN), rstd of x (rows, C), w, b (LN); the dtypes are checked
template <bool LN>
dfg_status norm_forward(const dfg_node *n, dfg_cuda_ctx *ctx, const void *x, const void *w, const void *b, void *y,
                        float *mean, float *rstd) {
    int64_t rows, C;
    rows_of(n->in[0]->shape, &rows, &C);
    if (rows == 0 || C == 0) return DFG_OK;
    const bool aligned = dfg_aligned16(x) && dfg_aligned16(w) && (!LN || dfg_aligned16(b)) && dfg_aligned16(y);
    const float eps = n->attr->layernorm.eps;
    return row_launch(n, ctx, n->in[0], rows, C, aligned, LN ? "ln_fwd" : "rms_fwd", [&](auto c, unsigned grid) {
        typedef typename decltype(c)::type T;
        return DFG_LAUNCH((norm_fwd<LN, T, decltype(c)::vec, decltype(c)::warp>), grid, kThreads, 0,
                          (cudaStream_t)ctx->stream, (const T *)x, (const T *)w, (const T *)b, (T *)y, mean, rstd,
                          rows, C, eps);
    });
}

// dw, db (LN) over the rows (the scratch holds the splits' partials)
template <bool LN, class T>
dfg_status norm_dw(const dfg_node *n, dfg_cuda_ctx *ctx, const T *dy, const T *x, const float *mean,
                   const float *rstd, T *dw, T *db, int64_t rows, int64_t C) {
    int64_t chunk;
    const int64_t splits = dw_splits(rows, C, &chunk);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    double *part = (double *)ctx->scratch; /* (1 + LN, splits, C) when splits > 1 */
    cudaError_t e = DFG_LAUNCH((norm_bwd_dw<LN, T>), dfg_grid_units(dfg_cdiv(C, 32) * splits, ctx), dim3(32, 8), 0,
                               st, dy, x, mean, rstd, dw, db, part, rows, C, chunk, splits);
    dfg_status s = dfg_cuda_launched(ctx, n, e, LN ? "ln_bwd_dwdb" : "rms_bwd_dw");
    if (s || splits == 1) return s;
    e = DFG_LAUNCH((norm_bwd_partials<LN, T>), dfg_grid_units(dfg_cdiv(C, kThreads), ctx), kThreads, 0, st,
                   (const double *)part, dw, db, C, splits);
    return dfg_cuda_launched(ctx, n, e, LN ? "ln_bwd_partials" : "rms_bwd_partials");
}

// dx, dw, db (LN) from dy, x (rows, C), w, mean (LN), rstd; the dtypes are checked. x is the node's x.
template <bool LN>
dfg_status norm_backward(const dfg_node *n, dfg_cuda_ctx *ctx, const dfg_tensor *x, const void *dy, const void *xp,
                         const void *w, const float *mean, const float *rstd, void *dx, void *dw, void *db) {
    int64_t rows, C;
    rows_of(x->shape, &rows, &C);
    const size_t need = norm_bwd_scratch<LN>(x);
    if (need && (!ctx->scratch || ctx->scratch_bytes < need))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", need, ctx->scratch_bytes);
    if (C == 0) return DFG_OK;
    const bool aligned = dfg_aligned16(dy) && dfg_aligned16(xp) && dfg_aligned16(w) && dfg_aligned16(dx);
    dfg_status s = DFG_OK;
    if (rows > 0)
        s = row_launch(n, ctx, x, rows, C, aligned, LN ? "ln_bwd_dx" : "rms_bwd_dx", [&](auto c, unsigned grid) {
            typedef typename decltype(c)::type T;
            return DFG_LAUNCH((norm_bwd_dx<LN, T, decltype(c)::vec, decltype(c)::warp>), grid, kThreads, 0,
                              (cudaStream_t)ctx->stream, (const T *)dy, (const T *)xp, (const T *)w, mean, rstd,
                              (T *)dx, rows, C);
        });
    if (s) return s;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T,
                            return norm_dw<LN, T>(n, ctx, (const T *)dy, (const T *)xp, mean, rstd, (T *)dw, (T *)db,
                                                  rows, C));
}

} // namespace
