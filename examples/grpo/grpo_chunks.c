/* grpo_chunks.c - length-sorted chunks of the GRPO batch (examples/grpo/grpo.c, length_chunks): the
 * scoring and training passes take the batch in chunks of whole groups, narrowest first, each at
 * the narrowest length bucket that holds it, so that a few long completions cost their own
 * chunk's rows at full width, not the whole batch's. The order and each bucket's chunk count
 * are computed on the device from the completion mask (dfg_grpo_chunk_plan, in the advantages
 * stage); each bucket's copy of a pass runs that many chunks (dfg_stage_runs), gathering a
 * chunk's rows by group (dfg_grpo_chunk_rows) and writing its results back (..._write). Written
 * with dfg's public DSL only. */
#include "dfg_grpo_data.h"
#include "dfg_nn.h"

#include <stdio.h>
#include <stdlib.h>

dfg_status dfg_grpo_chunk_state(dfg_program *p, dfg_grpo_chunks *ck) {
    ck->order = dfg_state(p, "chunks.order", DFG_I32, DFG_SHAPE(ck->groups), DFG_ROLE_NONE, dfg_init_zeros());
    for (int b = 0; b < ck->n_widths; b++) {
        char name[48];
        snprintf(name, sizeof(name), "chunks.runs[%lld]", (long long)ck->widths[b]);
        ck->runs[b] = dfg_state(p, name, DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    }
    return dfg_grpo_order_consts(p, "chunks", ck->groups, &ck->before, &ck->index);
}

dfg_status dfg_grpo_order_consts(dfg_program *p, const char *prefix, int64_t n, dfg_tensor **before, dfg_tensor **index) {
    float *tri = calloc((size_t)(n * n), sizeof(float)); /* (n, n) */
    float *idx = malloc(sizeof(float) * (size_t)n);     /* (n) */
    if (!tri || !idx) {
        free(tri), free(idx);
        return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        idx[i] = (float)i;
        for (int64_t j = 0; j < i; j++) tri[i * n + j] = 1.0f;
    }
    char name[96];
    snprintf(name, sizeof(name), "%s.before", prefix);
    *before = dfg_const(p, name, DFG_F32, DFG_SHAPE(n, n), tri);
    snprintf(name, sizeof(name), "%s.index", prefix);
    *index = dfg_const(p, name, DFG_F32, DFG_SHAPE(n), idx);
    free(tri), free(idx);
    return dfg_program_status(p);
}

/* 1 where a < b, else 0 (f32, broadcasting) */
static dfg_tensor *less(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) {
    return dfg_affine(g, dfg_equal(g, dfg_minimum(g, a, b), b), -1.0f, 1.0f);
}

/* the largest along the last axis: x (..., k) -> (...) */
static dfg_tensor *row_max(dfg_graph *g, dfg_tensor *x) { return dfg_take(g, x, dfg_argmax(g, x)); }

void dfg_grpo_stable_sort(dfg_graph *g, dfg_tensor *key, dfg_tensor *before, dfg_tensor *index, dfg_tensor **rank,
                          dfg_tensor **at) {
    int64_t n = dfg_tensor_numel(key);
    dfg_tensor *ki = dfg_reshape(g, key, DFG_SHAPE(n, 1)), *kj = dfg_reshape(g, key, DFG_SHAPE(1, n));
    /* rank i: the entries before it, by key then by index (n, n) -> (n) */
    dfg_tensor *ahead = dfg_add(g, less(g, kj, ki), dfg_mul(g, dfg_equal(g, kj, ki), before));
    *rank = dfg_sum(g, ahead, 1);
    *at = dfg_equal(g, dfg_reshape(g, *rank, DFG_SHAPE(1, n)), dfg_reshape(g, index, DFG_SHAPE(n, 1)));
}

void dfg_grpo_chunk_plan(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *row_width) {
    int64_t n = ck->groups, C = ck->chunks, per = n / C;
    dfg_tensor *gw = row_max(g, dfg_reshape(g, row_width, DFG_SHAPE(n, ck->G))); /* (n) a group's width */
    /* what the order sorts by: the group's own width, or (chunks fixed) its chunk's */
    dfg_tensor *key = gw;
    if (!ck->regroup) key = dfg_reshape(g, dfg_expand(g, dfg_reshape(g, row_max(g, dfg_reshape(g, gw, DFG_SHAPE(C, per))),
                                                                     DFG_SHAPE(C, 1)), DFG_SHAPE(C, per)), DFG_SHAPE(n));
    dfg_tensor *rank, *at; /* at (n, n): [r][i] rank_i == r */
    dfg_grpo_stable_sort(g, key, ck->before, ck->index, &rank, &at);
    dfg_tensor *kj = dfg_reshape(g, key, DFG_SHAPE(1, n));
    dfg_tensor *order = dfg_sum(g, dfg_mul(g, at, dfg_reshape(g, ck->index, DFG_SHAPE(1, n))), 1); /* (n) group at r */
    dfg_assign(g, ck->order, dfg_cast(g, order, DFG_I32));
    /* a chunk's width: its last (widest) group's in the sorted order */
    dfg_tensor *sorted = dfg_sum(g, dfg_mul(g, at, kj), 1);                                   /* (n) */
    dfg_tensor *cw = dfg_reshape(g, dfg_slice(g, dfg_reshape(g, sorted, DFG_SHAPE(C, per)), 1, per - 1, 1), DFG_SHAPE(C));
    for (int b = 0; b < ck->n_widths; b++) { /* the chunks in (widths[b-1], widths[b]] */
        dfg_tensor *lo = dfg_fill(g, DFG_F32, DFG_SCALAR, b ? (float)ck->widths[b - 1] : -1.0f);
        dfg_tensor *hi = dfg_fill(g, DFG_F32, DFG_SCALAR, (float)ck->widths[b]);
        dfg_tensor *in = dfg_mul(g, less(g, lo, cw), dfg_affine(g, less(g, hi, cw), -1.0f, 1.0f));
        dfg_assign(g, ck->runs[b], dfg_sum(g, in, 0));
    }
}

/* i32 (1): the batch index of the first row of group j of chunk `chunk` (an i32 scalar) */
static dfg_tensor *group_row0(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *chunk, int64_t j) {
    int64_t per = ck->groups / ck->chunks;
    dfg_tensor *at = dfg_add_scalar(g, dfg_scale(g, chunk, (float)per), (float)j); /* i32: the place in the order */
    return dfg_scale(g, dfg_slice_at(g, ck->order, 0, at, 1), (float)ck->G);
}

dfg_tensor *dfg_grpo_chunk_rows(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *x, dfg_tensor *chunk, int64_t col0,
                                int64_t cols) {
    int64_t per = ck->groups / ck->chunks;
    dfg_tensor *parts[DFG_GRPO_MAX_CHUNK_GROUPS];
    for (int64_t j = 0; j < per; j++) {
        parts[j] = dfg_slice_at(g, x, 0, group_row0(g, ck, chunk, j), ck->G); /* (G, ...) */
        if (cols) parts[j] = dfg_slice(g, parts[j], 1, col0, cols);
    }
    return per == 1 ? parts[0] : dfg_concat(g, parts, (int)per, 0);
}

void dfg_grpo_chunk_write(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *dst, dfg_tensor *src, dfg_tensor *chunk) {
    int64_t per = ck->groups / ck->chunks;
    for (int64_t j = 0; j < per; j++)
        dfg_slice_assign_at(g, dst, per == 1 ? src : dfg_slice(g, src, 0, j * ck->G, ck->G), 0, group_row0(g, ck, chunk, j));
}

dfg_tensor *dfg_grpo_extremes_start(dfg_graph *g) {
    return dfg_concat(g, (dfg_tensor *[]){dfg_fill(g, DFG_F32, DFG_SHAPE(1), 1e30f), dfg_fill(g, DFG_F32, DFG_SHAPE(1), -1e30f)},
                      2, 0);
}

dfg_tensor *dfg_grpo_chunk_stats(dfg_graph *g, dfg_tensor *acc_stats, dfg_tensor *acc_tokens, dfg_tensor *acc_ext,
                                 int64_t rows, int64_t passes, const int at[3]) {
    int64_t S = dfg_tensor_shape(acc_stats).d[0];
    dfg_tensor *means = dfg_div(g, acc_stats, dfg_maximum(g, acc_tokens, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f)));
    dfg_tensor *parts[64];
    for (int64_t i = 0; i < S && i < 64; i++) {
        dfg_tensor *v = dfg_slice(g, means, 0, i, 1); /* (1) */
        if (i == at[0] || i == at[1]) v = dfg_scale(g, dfg_slice(g, acc_ext, 0, 2 + (i == at[1]), 1), 1.0f / (float)passes);
        if (i == at[2]) v = dfg_scale(g, dfg_slice(g, acc_stats, 0, i, 1), 1.0f / (float)rows);
        parts[i] = v;
    }
    return dfg_concat(g, parts, (int)(S < 64 ? S : 64), 0);
}
