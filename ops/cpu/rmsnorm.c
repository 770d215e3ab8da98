/* rmsnorm.c - CPU RMSNorm over the last axis, forward and backward, as Hugging Face's
 * LlamaRMSNorm computes it in f32: rstd = 1 / sqrt(mean(x^2) + eps), y = w * (x * rstd).
 * Backward, with norm = x * rstd and dn = dy * w:
 *   dx = rstd * (dn - norm * mean(dn * norm)),   dw = sum over rows of dy * norm.
 * Row sums are accumulated in double (as layernorm's), so the reference does not cancel. */
#include <math.h>

#include "cpu.h"

#define DFG_RMS_BLOCK 64

dfg_status dfg_cpu_rmsnorm(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    int64_t C = xs.d[xs.rank - 1], rows = C ? dfg_shape_numel(xs) / C : 0;
    const float *x = in[0], *w = in[1]; /* x (rows, C), w (C) */
    float *y = out[0], *rstd = out[1];  /* y (rows, C), rstd (rows) */
    float eps = n->attr->layernorm.eps;
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        double ss = 0.0;
        for (int64_t i = 0; i < C; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        for (int64_t i = 0; i < C; i++) y[r * C + i] = w[i] * (xr[i] * s);
        rstd[r] = s;
    }
    return DFG_OK;
}

dfg_status dfg_cpu_rmsnorm_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[1]->shape;
    int64_t C = xs.d[xs.rank - 1], rows = C ? dfg_shape_numel(xs) / C : 0;
    const float *dy = in[0], *x = in[1], *w = in[2], *rstd = in[3]; /* dy, x (rows, C), w (C), rstd (rows) */
    float *dx = out[0], *dw = out[1];                                /* dx (rows, C), dw (C) */
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = dy + r * C, *xr = x + r * C;
        const double rs = rstd[r];
        double s = 0.0; /* sum(dn * norm) */
        for (int64_t i = 0; i < C; i++) s += (double)dyr[i] * w[i] * ((double)xr[i] * rs);
        s /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double norm = (double)xr[i] * rs, dn = (double)dyr[i] * w[i];
            dx[r * C + i] = (float)(rs * (dn - norm * s));
        }
    }
    /* dw reduces over rows; each job owns a block of columns, so no two threads share one */
    int64_t nblk = (C + DFG_RMS_BLOCK - 1) / DFG_RMS_BLOCK;
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * DFG_RMS_BLOCK, wdt = C - c0 < DFG_RMS_BLOCK ? C - c0 : DFG_RMS_BLOCK;
        double aw[DFG_RMS_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < wdt; i++) {
                int64_t k = r * C + c0 + i;
                aw[i] += (double)dy[k] * ((double)x[k] * rstd[r]);
            }
        for (int64_t i = 0; i < wdt; i++) dw[c0 + i] = (float)aw[i];
    }
    return DFG_OK;
}
