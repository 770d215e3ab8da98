/* layout.c - reshape (a view), permute, slice, concat, expand: builders, shape rules,
 * gradient rules. Kernels: ops/cpu/layout.c. */
#include <stdio.h>

#include "op.h"

/* ---------------------------------------------------------------- reshape */
dfg_status dfg_infer_reshape(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    dfg_shape s = n->attr->reshape.shape;
    int64_t known = 1, numel = dfg_shape_numel(n->in[0]->shape);
    int free_dim = -1;
    if (s.rank < 0 || s.rank > DFG_MAX_RANK) return dfg_node_fail(g, n, DFG_ERR_ARG, "target rank %d", s.rank);
    for (int i = 0; i < s.rank; i++) {
        if (s.d[i] == -1 && free_dim < 0) free_dim = i;
        else if (s.d[i] < 1) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "target dim %d is %lld", i, (long long)s.d[i]);
        else if (known > ((int64_t)1 << 40) / s.d[i]) /* checked before multiplying, which could overflow */
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "target dim %d (%lld) makes the target over 2^40 elements", i,
                                 (long long)s.d[i]);
        else known *= s.d[i];
    }
    if (free_dim >= 0) {
        if (numel % known) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%lld elements do not split by %lld",
                                                (long long)numel, (long long)known);
        s.d[free_dim] = numel / known;
    } else if (known != numel) {
        char sb[96];
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "target %s has %lld elements, the input %lld",
                             dfg_shape_str(s, sb, sizeof(sb)), (long long)known, (long long)numel);
    }
    out[0] = (dfg_out_spec){.dtype = n->in[0]->dtype, .shape = s, .alias = 0, .writes = false};
    return DFG_OK;
}

dfg_tensor *dfg_reshape(dfg_graph *g, dfg_tensor *x, dfg_shape shape) {
    dfg_attrs a = {.reshape = {shape}};
    return dfg_op_out(g, DFG_OP_RESHAPE, &x, 1, &a);
}

dfg_status dfg_grad_reshape(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_reshape(g, dout[0], n->in[0]->shape);
    return g->status;
}

/* ---------------------------------------------------------------- permute */
dfg_status dfg_infer_permute(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    bool seen[DFG_MAX_RANK] = {0};
    out[0].dtype = x->dtype;
    out[0].shape.rank = x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++) {
        int p = n->attr->permute.perm[i];
        if (p < 0 || p >= x->shape.rank || seen[p])
            return dfg_node_fail(g, n, DFG_ERR_ARG, "perm is not a permutation of 0..%d", x->shape.rank - 1);
        seen[p] = true;
        out[0].shape.d[i] = x->shape.d[p];
    }
    return DFG_OK;
}

dfg_tensor *dfg_permute(dfg_graph *g, dfg_tensor *x, const int *perm) {
    dfg_attrs a = {.permute = {{0}}};
    int rank = x && !(x->flags & DFG_TF_POISON) ? x->shape.rank : 0;
    for (int i = 0; i < DFG_MAX_RANK; i++) a.permute.perm[i] = (perm && i < rank) ? perm[i] : i;
    if (!perm && g && !g->status) {
        dfg_graph_err(g, DFG_ERR_ARG, "permute: perm is NULL");
        return g->poison;
    }
    return dfg_op_out(g, DFG_OP_PERMUTE, &x, 1, &a);
}

dfg_tensor *dfg_transpose(dfg_graph *g, dfg_tensor *x, int axis_a, int axis_b) {
    int perm[DFG_MAX_RANK];
    int rank = x && !(x->flags & DFG_TF_POISON) ? x->shape.rank : 0;
    int a = dfg_norm_axis(axis_a, rank), b = dfg_norm_axis(axis_b, rank);
    if (g && !g->status && (a < 0 || b < 0)) {
        dfg_graph_err(g, DFG_ERR_ARG, "transpose: axes %d and %d do not fit rank %d of '%s'", axis_a, axis_b, rank,
                        x ? x->name : "NULL");
        return g->poison;
    }
    for (int i = 0; i < DFG_MAX_RANK; i++) perm[i] = i;
    if (a >= 0 && b >= 0) perm[a] = b, perm[b] = a;
    return dfg_permute(g, x, perm);
}

dfg_status dfg_grad_permute(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    int inv[DFG_MAX_RANK];
    for (int i = 0; i < n->in[0]->shape.rank; i++) inv[n->attr->permute.perm[i]] = i;
    if (need[0]) din[0] = dfg_permute(g, dout[0], inv);
    return g->status;
}

/* ---------------------------------------------------------------- slice */
/* inputs: x [, start: the first index, read at run time: i32 of one element, or along axis 1 of
 * x (B, T, ...) (B) one a row (rows of a multi-turn rollout stand at different columns)] */
dfg_status dfg_infer_slice(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    int ax = n->attr->slice.axis;
    int64_t st = n->attr->slice.start, len = n->attr->slice.len;
    if (n->n_in != 1 && n->n_in != 2) return dfg_node_fail(g, n, DFG_ERR_ARG, "needs x and an optional start tensor");
    if (ax < 0 || ax >= x->shape.rank) return dfg_node_fail(g, n, DFG_ERR_ARG, "axis %d out of range", ax);
    if (n->n_in == 2) {
        if (dfg_check_run_time_start(g, n, x, n->in[1], ax, "the start")) return g->status;
        st = 0; /* checked against the extent at run time */
    }
    if (st < 0 || len < 1 || st + len > x->shape.d[ax])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "range [%lld, %lld) does not fit dim %d of size %lld",
                             (long long)st, (long long)(st + len), ax, (long long)x->shape.d[ax]);
    out[0].dtype = x->dtype;
    out[0].shape = x->shape;
    out[0].shape.d[ax] = len;
    return DFG_OK;
}

static dfg_tensor *slice(dfg_graph *g, dfg_tensor *x, int axis, int64_t start, int64_t len, dfg_tensor *pos) {
    int rank = x && !(x->flags & DFG_TF_POISON) ? x->shape.rank : 0;
    int ax = dfg_norm_axis(axis, rank);
    dfg_attrs a = {.slice = {ax < 0 ? axis : ax, start, len}};
    return dfg_op_out(g, DFG_OP_SLICE, (dfg_tensor *[]){x, pos}, pos ? 2 : 1, &a);
}

dfg_tensor *dfg_slice(dfg_graph *g, dfg_tensor *x, int axis, int64_t start, int64_t len) {
    return slice(g, x, axis, start, len, NULL);
}

dfg_tensor *dfg_slice_at(dfg_graph *g, dfg_tensor *x, int axis, dfg_tensor *start, int64_t len) {
    if (g && !g->status && !start) {
        dfg_graph_err(g, DFG_ERR_ARG, "slice_at: start is NULL");
        return g->poison;
    }
    return slice(g, x, axis, 0, len, start);
}

/* ---------------------------------------------------------------- detach */
dfg_status dfg_infer_detach(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    (void)g;
    out[0] = (dfg_out_spec){.dtype = n->in[0]->dtype, .shape = n->in[0]->shape, .alias = 0, .writes = false};
    return DFG_OK;
}

dfg_tensor *dfg_detach(dfg_graph *g, dfg_tensor *x) { return dfg_op_out(g, DFG_OP_DETACH, &x, 1, NULL); }

/* The gradient is dy padded with zeros back to the input's extent. */
dfg_status dfg_grad_slice(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (!need[0]) return g->status;
    if (n->n_in == 2)
        return dfg_node_fail(g, n, DFG_ERR_UNSUPPORTED, "no gradient through a slice whose start is read at run time");
    const dfg_tensor *x = n->in[0];
    int ax = n->attr->slice.axis;
    int64_t st = n->attr->slice.start, len = n->attr->slice.len, after = x->shape.d[ax] - st - len;
    dfg_tensor *parts[3];
    int np = 0;
    dfg_shape s = x->shape;
    if (st > 0) s.d[ax] = st, parts[np++] = dfg_fill(g, dout[0]->dtype, s, 0.0f);
    parts[np++] = dout[0];
    if (after > 0) s.d[ax] = after, parts[np++] = dfg_fill(g, dout[0]->dtype, s, 0.0f);
    din[0] = np == 1 ? dout[0] : dfg_concat(g, parts, np, ax);
    return g->status;
}

/* ---------------------------------------------------------------- concat */
dfg_status dfg_infer_concat(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x0 = n->in[0];
    int ax = n->attr->concat.axis;
    if (n->n_in < 1) return dfg_node_fail(g, n, DFG_ERR_ARG, "needs at least one input");
    if (ax < 0 || ax >= x0->shape.rank) return dfg_node_fail(g, n, DFG_ERR_ARG, "axis %d out of range", ax);
    dfg_shape s = x0->shape;
    s.d[ax] = 0;
    for (int i = 0; i < n->n_in; i++) {
        const dfg_tensor *x = n->in[i];
        if (x->dtype != x0->dtype || x->shape.rank != x0->shape.rank)
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "input #%d differs in dtype or rank", i);
        for (int d = 0; d < s.rank; d++)
            if (d != ax && x->shape.d[d] != x0->shape.d[d])
                return dfg_node_fail(g, n, DFG_ERR_SHAPE, "input #%d differs in dim %d", i, d);
        s.d[ax] += x->shape.d[ax];
    }
    out[0].dtype = x0->dtype;
    out[0].shape = s;
    return DFG_OK;
}

dfg_tensor *dfg_concat(dfg_graph *g, dfg_tensor *const *xs, int n, int axis) {
    if (g && !g->status && (!xs || n < 1)) {
        dfg_graph_err(g, DFG_ERR_ARG, "concat: needs at least one input");
        return g->poison;
    }
    int rank = xs && xs[0] && !(xs[0]->flags & DFG_TF_POISON) ? xs[0]->shape.rank : 0;
    int ax = dfg_norm_axis(axis, rank);
    dfg_attrs a = {.concat = {ax < 0 ? axis : ax}};
    return dfg_op_out(g, DFG_OP_CONCAT, xs, n, &a);
}

dfg_status dfg_grad_concat(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    int ax = n->attr->concat.axis;
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = n->in[i]->shape.d[ax];
        if (need[i]) din[i] = dfg_slice(g, dout[0], ax, off, len);
        off += len;
    }
    return g->status;
}

/* ---------------------------------------------------------------- expand */
dfg_status dfg_infer_expand(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    dfg_shape s = n->attr->expand.shape, b;
    if (s.rank < x->shape.rank || s.rank > DFG_MAX_RANK || !dfg_shape_broadcast(x->shape, s, &b) ||
        !dfg_shape_equal(b, s))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the input does not broadcast to the target shape");
    out[0].dtype = x->dtype;
    out[0].shape = s;
    return DFG_OK;
}

dfg_tensor *dfg_expand(dfg_graph *g, dfg_tensor *x, dfg_shape shape) {
    dfg_attrs a = {.expand = {shape}};
    return dfg_op_out(g, DFG_OP_EXPAND, &x, 1, &a);
}

dfg_status dfg_grad_expand(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_sum_to_shape(g, dout[0], n->in[0]->shape);
    return g->status;
}
