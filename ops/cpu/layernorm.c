/* layernorm.c - CPU layernorm over the last axis, forward and backward (as llm.c's reference:
 * dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w). */
#include <math.h>

#include "cpu.h"

#define DFG_LN_BLOCK 64

dfg_status dfg_cpu_layernorm(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    int64_t C = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / C;
    const float *x = in[0], *w = in[1], *b = in[2]; /* x (rows, C), w (C), b (C) */
    float *y = out[0], *mean = out[1], *rstd = out[2]; /* y (rows, C), mean (rows), rstd (rows) */
    float eps = n->attr->layernorm.eps;
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        double m = 0.0, v = 0.0;
        for (int64_t i = 0; i < C; i++) m += xr[i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += ((double)xr[i] - m) * ((double)xr[i] - m);
        v /= (double)C;
        float s = (float)(1.0 / sqrt(v + (double)eps)), mf = (float)m;
        for (int64_t i = 0; i < C; i++) y[r * C + i] = (xr[i] - mf) * s * w[i] + b[i];
        mean[r] = mf;
        rstd[r] = s;
    }
    return DFG_OK;
}

dfg_status dfg_cpu_layernorm_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[1]->shape;
    int64_t C = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / C;
    const float *dy = in[0], *x = in[1], *w = in[2], *mean = in[3], *rstd = in[4];
    float *dx = out[0], *dw = out[1], *db = out[2]; /* dx (rows, C), dw (C), db (C) */
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = dy + r * C, *xr = x + r * C;
        double s1 = 0.0, s2 = 0.0; /* sum(dnorm), sum(dnorm * norm) */
        for (int64_t i = 0; i < C; i++) {
            double norm = ((double)xr[i] - mean[r]) * rstd[r], dn = (double)dyr[i] * w[i];
            s1 += dn;
            s2 += dn * norm;
        }
        s1 /= (double)C, s2 /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double norm = ((double)xr[i] - mean[r]) * rstd[r], dn = (double)dyr[i] * w[i];
            dx[r * C + i] = (float)(rstd[r] * (dn - s1 - norm * s2));
        }
    }
    /* dw, db reduce over rows; each job owns a block of columns, so no two threads share one */
    int64_t nblk = (C + DFG_LN_BLOCK - 1) / DFG_LN_BLOCK;
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * DFG_LN_BLOCK, wdt = C - c0 < DFG_LN_BLOCK ? C - c0 : DFG_LN_BLOCK;
        double aw[DFG_LN_BLOCK] = {0}, ab[DFG_LN_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < wdt; i++) {
                int64_t k = r * C + c0 + i;
                aw[i] += (double)dy[k] * (((double)x[k] - mean[r]) * rstd[r]);
                ab[i] += dy[k];
            }
        for (int64_t i = 0; i < wdt; i++) dw[c0 + i] = (float)aw[i], db[c0 + i] = (float)ab[i];
    }
    return DFG_OK;
}
