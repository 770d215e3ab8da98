/* softmax.c - CPU softmax and log-softmax over the last axis, and their backward ops, which
 * take (dy, y): the saved output is all they need; the entropy of softmax and its backward. */
#include <math.h>

#include "cpu.h"

static void rows_of(const dfg_node *n, int64_t *rows, int64_t *v) {
    const dfg_shape s = n->out[0]->shape;
    *v = s.d[s.rank - 1];
    *rows = dfg_shape_numel(s) / *v;
}

/* log-sum-exp of one row, stable against large values */
static double row_lse(const float *x, int64_t v) {
    float m = -INFINITY;
    for (int64_t j = 0; j < v; j++) m = x[j] > m ? x[j] : m;
    if (m == -INFINITY) return -INFINITY;
    double s = 0.0;
    for (int64_t j = 0; j < v; j++) s += exp((double)x[j] - m);
    return m + log(s);
}

dfg_status dfg_cpu_softmax(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    int64_t rows, v;
    rows_of(n, &rows, &v);
    const float *x = in[0]; /* (rows, V) */
    float *y = out[0];      /* (rows, V) */
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        double lse = row_lse(x + r * v, v);
        for (int64_t j = 0; j < v; j++) y[r * v + j] = (float)exp((double)x[r * v + j] - lse);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_log_softmax(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    int64_t rows, v;
    rows_of(n, &rows, &v);
    const float *x = in[0];
    float *y = out[0];
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        double lse = row_lse(x + r * v, v);
        for (int64_t j = 0; j < v; j++) y[r * v + j] = (float)((double)x[r * v + j] - lse);
    }
    return DFG_OK;
}

/* softmax_bwd: dx = y * (dy - sum(dy * y)); log_softmax_bwd (log): dx = dy - exp(y) * sum(dy) */
static dfg_status softmax_bwd(const dfg_node *n, void *const *in, void *const *out, bool log) {
    int64_t rows, v;
    rows_of(n, &rows, &v);
    const float *dy = in[0], *y = in[1];
    float *dx = out[0];
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        double s = 0.0;
        if (log)
            for (int64_t j = 0; j < v; j++) s += dy[r * v + j];
        else
            for (int64_t j = 0; j < v; j++) s += (double)dy[r * v + j] * y[r * v + j];
        if (log)
            for (int64_t j = 0; j < v; j++)
                dx[r * v + j] = (float)((double)dy[r * v + j] - exp((double)y[r * v + j]) * s);
        else
            for (int64_t j = 0; j < v; j++) dx[r * v + j] = (float)(y[r * v + j] * ((double)dy[r * v + j] - s));
    }
    return DFG_OK;
}

dfg_status dfg_cpu_softmax_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    return softmax_bwd(n, in, out, false);
}

dfg_status dfg_cpu_log_softmax_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    return softmax_bwd(n, in, out, true);
}

/* H = -sum p log p of each row, from one online pass (dfg_row_stats) */
dfg_status dfg_cpu_entropy(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape zs = n->in[0]->shape;
    int64_t v = zs.d[zs.rank - 1], rows = dfg_shape_numel(zs) / v;
    const float *z = in[0]; /* (rows, V) */
    float *h = out[0];      /* (rows) */
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        dfg_row_stats s = {-INFINITY, 0.0, 0.0};
        for (int64_t j = 0; j < v; j++) dfg_row_stats_push(&s, z[r * v + j]);
        h[r] = (float)dfg_row_stats_entropy(&s);
    }
    return DFG_OK;
}

/* dz_j = -dH p_j (log p_j + H), p recomputed from z; a row of -inf alone (H = 0, every p 0) gets 0,
 * not the NaN of z - lse = -inf - -inf */
dfg_status dfg_cpu_entropy_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape zs = n->in[1]->shape;
    int64_t v = zs.d[zs.rank - 1], rows = dfg_shape_numel(zs) / v;
    const float *dh = in[0], *z = in[1], *h = in[2]; /* (rows), (rows, V), (rows) */
    float *dz = out[0];                              /* (rows, V) */
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        double lse = row_lse(z + r * v, v);
        for (int64_t j = 0; j < v; j++) {
            double lp = (double)z[r * v + j] - lse, p = exp(lp);
            dz[r * v + j] = lse == -INFINITY || p == 0.0 ? 0.0f : (float)(-(double)dh[r] * p * (lp + h[r])); /* a -inf logit: 0 */
        }
    }
    return DFG_OK;
}
