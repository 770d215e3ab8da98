/* reduce.c - CPU kernels for sum/mean over an axis, masked sum, argmax and a masked quantile. Sums accumulate in
 * double so that the reference does not drift with the reduced length. */
#include <math.h>

#include "../quantile.h"
#include "cpu.h"

#define DFG_RBLOCK 64 /* columns reduced together, so each input row is read contiguously */

/* out[o, i] = scale * sum_k x[o, k, i] for x viewed as (outer, len, inner) */
static void reduce_axis(const float *x, float *out, int64_t outer, int64_t len, int64_t inner, double scale) {
    int64_t nblk = (inner + DFG_RBLOCK - 1) / DFG_RBLOCK;
#pragma omp parallel for schedule(static) if (outer * len * inner > 65536)
    for (int64_t job = 0; job < outer * nblk; job++) {
        int64_t o = job / nblk, i0 = (job % nblk) * DFG_RBLOCK;
        int64_t w = inner - i0 < DFG_RBLOCK ? inner - i0 : DFG_RBLOCK;
        double acc[DFG_RBLOCK] = {0};
        for (int64_t k = 0; k < len; k++) {
            const float *row = x + (o * len + k) * inner + i0;
            for (int64_t i = 0; i < w; i++) acc[i] += row[i];
        }
        for (int64_t i = 0; i < w; i++) out[o * inner + i0 + i] = (float)(acc[i] * scale);
    }
}

dfg_status dfg_cpu_reduce(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    int64_t outer, len, inner;
    dfg_split_axis(n->in[0]->shape, n->attr->reduce.axis, &outer, &len, &inner);
    reduce_axis(in[0], out[0], outer, len, inner, n->op == DFG_OP_MEAN ? 1.0 / (double)len : 1.0);
    return DFG_OK;
}

dfg_status dfg_cpu_masked_sum(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    const float *x = in[0], *m = in[1];
    float *y = out[0];
    int64_t outer, len, inner, ms[DFG_MAX_RANK];
    dfg_split_axis(xs, n->attr->reduce.axis, &outer, &len, &inner);
    dfg_bcast_strides(xs, n->in[1]->shape, ms);
#pragma omp parallel for schedule(static) if (outer * len * inner > 65536)
    for (int64_t j = 0; j < outer * inner; j++) {
        int64_t o = j / inner, i = j % inner;
        double acc = 0.0;
        for (int64_t k = 0; k < len; k++) {
            int64_t flat = (o * len + k) * inner + i;
            acc += (double)x[flat] * (double)m[dfg_bcast_offset(&xs, ms, flat)];
        }
        y[j] = (float)acc;
    }
    return DFG_OK;
}

dfg_status dfg_cpu_argmax(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const float *x = in[0];
    int32_t *y = out[0];
#pragma omp parallel for schedule(static) if (rows * v > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * v;
        int64_t best = 0;
        for (int64_t j = 1; j < v; j++)
            if (row[j] > row[best] || (row[best] != row[best] && row[j] == row[j])) best = j;
        y[r] = (int32_t)best;
    }
    return DFG_OK;
}

/* Elements of x with a non-zero mask whose key is <= k. */
static int64_t count_le(const float *x, const float *m, int64_t n, uint32_t k) {
    int64_t c = 0;
#pragma omp parallel for schedule(static) reduction(+ : c) if (n > 65536)
    for (int64_t i = 0; i < n; i++) c += m[i] != 0.0f && dfg_quantile_key(x[i]) <= k;
    return c;
}

/* The rank-th smallest (0-based) selected value: the least key with more than rank keys <= it. */
static float select_rank(const float *x, const float *m, int64_t n, int64_t rank) {
    uint32_t lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (count_le(x, m, n, mid) > rank) hi = mid;
        else lo = mid + 1;
    }
    return dfg_quantile_value(lo);
}

dfg_status dfg_cpu_quantile(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const float *x = in[0], *m = in[1]; /* any shape, the same */
    float *y = out[0];                  /* scalar */
    int64_t len = dfg_shape_numel(n->in[0]->shape), sel = 0;
    for (int64_t i = 0; i < len; i++) sel += m[i] != 0.0f;
    if (sel == 0) {
        *y = INFINITY;
        return DFG_OK;
    }
    int64_t lo;
    float w;
    dfg_quantile_rank(sel, n->attr->quantile.q, &lo, &w);
    float a = select_rank(x, m, len, lo);
    *y = w > 0.0f ? dfg_quantile_lerp(a, select_rank(x, m, len, lo + 1), w) : a;
    return DFG_OK;
}
