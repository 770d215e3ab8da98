/* reduce.c - sum, mean, masked sum over one axis, argmax over the last, a masked quantile: builders, shape rules,
 * gradient rules. Kernels: ops/cpu/reduce.c. */
#include "op.h"

dfg_cost dfg_cost_reduce(const dfg_node *n) { return dfg_cost_io(n, (double)dfg_shape_numel(n->in[0]->shape)); }

/* The input's shape with `axis` removed (or kept as 1). */
static dfg_shape reduced(dfg_shape s, int axis, bool keepdim) {
    if (keepdim) {
        s.d[axis] = 1;
        return s;
    }
    for (int i = axis; i < s.rank - 1; i++) s.d[i] = s.d[i + 1];
    s.rank--;
    return s;
}

dfg_status dfg_infer_reduce(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    int ax = n->attr->reduce.axis;
    if (ax < 0 || ax >= x->shape.rank) return dfg_node_fail(g, n, DFG_ERR_ARG, "axis %d out of range", ax);
    if (!dfg_is_float(x->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a floating-point input");
    out[0].dtype = x->dtype;
    out[0].shape = reduced(x->shape, ax, n->attr->reduce.keepdim);
    return DFG_OK;
}

dfg_status dfg_infer_masked_sum(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *m = n->in[1];
    int ax = n->attr->reduce.axis;
    dfg_shape b;
    if (ax < 0 || ax >= x->shape.rank) return dfg_node_fail(g, n, DFG_ERR_ARG, "axis %d out of range", ax);
    if (!dfg_is_float(x->dtype) || m->dtype != x->dtype)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs float values and a mask of the same dtype");
    if (!dfg_shape_broadcast(x->shape, m->shape, &b) || !dfg_shape_equal(b, x->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the mask does not broadcast to the values");
    out[0].dtype = x->dtype;
    out[0].shape = reduced(x->shape, ax, false);
    return DFG_OK;
}

dfg_status dfg_infer_argmax(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a floating-point input of rank >= 1");
    out[0].dtype = DFG_I32;
    out[0].shape = reduced(x->shape, x->shape.rank - 1, false);
    return DFG_OK;
}

static dfg_tensor *reduce(dfg_graph *g, dfg_op op, dfg_tensor *x, int axis, bool keepdim) {
    int rank = x && !(x->flags & DFG_TF_POISON) ? x->shape.rank : 0;
    int ax = dfg_norm_axis(axis, rank);
    dfg_attrs a = {.reduce = {ax < 0 ? axis : ax, keepdim}};
    return dfg_op_out(g, op, &x, 1, &a);
}
dfg_tensor *dfg_sum(dfg_graph *g, dfg_tensor *x, int axis) { return reduce(g, DFG_OP_SUM, x, axis, false); }
dfg_tensor *dfg_sum_keepdim(dfg_graph *g, dfg_tensor *x, int axis) { return reduce(g, DFG_OP_SUM, x, axis, true); }
dfg_tensor *dfg_mean(dfg_graph *g, dfg_tensor *x, int axis) { return reduce(g, DFG_OP_MEAN, x, axis, false); }
dfg_tensor *dfg_argmax(dfg_graph *g, dfg_tensor *x) { return dfg_op_out(g, DFG_OP_ARGMAX, &x, 1, NULL); }

dfg_tensor *dfg_masked_sum(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, int axis) {
    int rank = x && !(x->flags & DFG_TF_POISON) ? x->shape.rank : 0;
    int ax = dfg_norm_axis(axis, rank);
    dfg_attrs a = {.reduce = {ax < 0 ? axis : ax, false}};
    return dfg_op_out(g, DFG_OP_MASKED_SUM, (dfg_tensor *[]){x, mask}, 2, &a);
}

/* dy broadcast back over the reduced axis to x's shape. */
static dfg_tensor *spread(dfg_graph *g, dfg_tensor *dy, const dfg_tensor *x, int axis) {
    return dfg_expand(g, dfg_reshape(g, dy, reduced(x->shape, axis, true)), x->shape);
}

dfg_status dfg_grad_sum(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = spread(g, dout[0], n->in[0], n->attr->reduce.axis);
    return g->status;
}

dfg_status dfg_grad_mean(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    int ax = n->attr->reduce.axis;
    float inv = 1.0f / (float)n->in[0]->shape.d[ax];
    if (need[0]) din[0] = spread(g, dfg_scale(g, dout[0], inv), n->in[0], ax);
    return g->status;
}

dfg_status dfg_grad_masked_sum(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                           dfg_tensor **din) {
    dfg_tensor *x = n->in[0], *m = n->in[1];
    dfg_tensor *dy = spread(g, dout[0], x, n->attr->reduce.axis);
    if (need[0]) din[0] = dfg_mul(g, dy, m);
    if (need[1]) din[1] = dfg_sum_to_shape(g, dfg_mul(g, dy, x), m->shape);
    return g->status;
}

/* ---------------------------------------------------------------- quantile
 * torch.quantile(x[mask != 0], q) with linear interpolation: the q-quantile of the elements
 * of x (any shape) whose mask entry (same shape) is not 0, as a scalar f32; +inf when no entry
 * is selected (so x >= it selects nothing, as TRL's entropy mask then does). Kernels select the
 * k-th smallest value by a binary search on the values' ordered bit patterns (32 counting
 * passes, no sort and no scratch), so every backend finds the same element. */
dfg_tensor *dfg_quantile(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, float q) {
    dfg_attrs a = {.quantile = {q}};
    return dfg_op_out(g, DFG_OP_QUANTILE, (dfg_tensor *[]){x, mask}, 2, &a);
}

dfg_status dfg_infer_quantile(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *m = n->in[1];
    float q = n->attr->quantile.q;
    if (x->dtype != DFG_F32 || m->dtype != DFG_F32 || !dfg_shape_equal(x->shape, m->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs f32 values and an f32 mask of the same shape");
    if (!(q >= 0.0f && q <= 1.0f)) return dfg_node_fail(g, n, DFG_ERR_ARG, "q %g is outside [0, 1]", (double)q);
    out[0] = (dfg_out_spec){DFG_F32, DFG_SCALAR, -1, false};
    return DFG_OK;
}

/* up to two selections of 32 counting passes each */
dfg_cost dfg_cost_quantile(const dfg_node *n) { return dfg_cost_io(n, 64.0 * (double)dfg_shape_numel(n->in[0]->shape)); }
