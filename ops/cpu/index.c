/* index.c - CPU embedding lookup and take (gather along the last axis), and their scatter-add
 * backward ops. Indices come from data, so every one is range-checked. */
#include <string.h>

#include "cpu.h"

/* Index of the first id outside [0, v), or -1 when all are inside. */
static int64_t first_bad(const int32_t *ids, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v) return i;
    return -1;
}

static dfg_status bad_id(dfg_cpu_ctx *ctx, const dfg_node *n, const int32_t *ids, int64_t at, int64_t v) {
    return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "index %d at position %lld of '%s' is outside [0, %lld)", ids[at],
                        (long long)at, n->in[1]->name, (long long)v);
}

dfg_status dfg_cpu_embed(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t V = n->in[0]->shape.d[0], C = n->in[0]->shape.d[1], cnt = dfg_shape_numel(n->in[1]->shape);
    const float *w = in[0];     /* (V, C) */
    const int32_t *ids = in[1]; /* (cnt) */
    float *y = out[0];          /* (cnt, C) */
    int64_t bad = first_bad(ids, cnt, V);
    if (bad >= 0) return bad_id(ctx, n, ids, bad, V);
    for (int64_t i = 0; i < cnt; i++) memcpy(y + i * C, w + (int64_t)ids[i] * C, sizeof(float) * (size_t)C);
    return DFG_OK;
}

/* dW[id] += dy[i]: rows are visited in order, so repeated ids sum deterministically. */
dfg_status dfg_cpu_embed_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t V = n->attr->scatter.vocab, C = n->out[0]->shape.d[1], cnt = dfg_shape_numel(n->in[1]->shape);
    const float *dy = in[0];    /* (cnt, C) */
    const int32_t *ids = in[1]; /* (cnt) */
    float *dw = out[0];         /* (V, C): new bytes, or the accumulator's with 3 inputs */
    int64_t bad = first_bad(ids, cnt, V);
    if (bad >= 0) return bad_id(ctx, n, ids, bad, V);
    if (n->n_in == 2) memset(dw, 0, sizeof(float) * (size_t)(V * C)); /* else dw is the accumulator */
    for (int64_t i = 0; i < cnt; i++) {
        float *row = dw + (int64_t)ids[i] * C;
        for (int64_t c = 0; c < C; c++) row[c] += dy[i * C + c];
    }
    return DFG_OK;
}

dfg_status dfg_cpu_take(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape xs = n->in[0]->shape;
    int64_t V = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / V;
    const float *x = in[0];     /* (rows, V) */
    const int32_t *idx = in[1]; /* (rows) */
    float *y = out[0];          /* (rows) */
    int64_t bad = first_bad(idx, rows, V);
    if (bad >= 0) return bad_id(ctx, n, idx, bad, V);
    for (int64_t r = 0; r < rows; r++) y[r] = x[r * V + idx[r]];
    return DFG_OK;
}

dfg_status dfg_cpu_take_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t V = n->attr->scatter.vocab, rows = dfg_shape_numel(n->in[1]->shape);
    const float *dy = in[0];    /* (rows) */
    const int32_t *idx = in[1]; /* (rows) */
    float *dx = out[0];         /* (rows, V) */
    int64_t bad = first_bad(idx, rows, V);
    if (bad >= 0) return bad_id(ctx, n, idx, bad, V);
    memset(dx, 0, sizeof(float) * (size_t)(rows * V));
    for (int64_t r = 0; r < rows; r++) dx[r * V + idx[r]] = dy[r];
    return DFG_OK;
}
