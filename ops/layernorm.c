/* layernorm.c - layer normalisation over the last axis: builder, shape rules, gradient rule.
 * Forward outputs y and the per-row mean and 1/std (saved for backward). Kernels:
 * ops/cpu/layernorm.c. */
#include "op.h"

dfg_cost dfg_cost_layernorm(const dfg_node *n) { return dfg_cost_io(n, 8.0 * (double)dfg_shape_numel(n->in[0]->shape)); }

/* x (..., C) -> the per-row shape (...) */
static dfg_shape row_shape(dfg_shape s) {
    s.rank--;
    return s;
}

static bool is_vec(const dfg_tensor *t, int64_t c, dfg_dtype dt) {
    return t->shape.rank == 1 && t->shape.d[0] == c && t->dtype == dt;
}

dfg_status dfg_infer_layernorm(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a float input of rank >= 1");
    int64_t c = x->shape.d[x->shape.rank - 1];
    if (!is_vec(n->in[1], c, x->dtype) || !is_vec(n->in[2], c, x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "weight and bias must be (%lld) of the input's dtype", (long long)c);
    if (!(n->attr->layernorm.eps > 0.0f)) return dfg_node_fail(g, n, DFG_ERR_ARG, "eps must be > 0");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    out[1] = (dfg_out_spec){DFG_F32, row_shape(x->shape), -1, false};
    out[2] = (dfg_out_spec){DFG_F32, row_shape(x->shape), -1, false};
    return DFG_OK;
}

/* inputs: dy, x, w, mean, rstd -> dx, dw, db */
dfg_status dfg_infer_layernorm_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dy = n->in[0], *x = n->in[1], *w = n->in[2];
    if (!dfg_shape_equal(dy->shape, x->shape) || dy->dtype != x->dtype || x->shape.rank < 1 ||
        !is_vec(w, x->shape.d[x->shape.rank - 1], x->dtype) ||
        !dfg_shape_equal(n->in[3]->shape, row_shape(x->shape)) || !dfg_shape_equal(n->in[4]->shape, row_shape(x->shape)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    out[1] = (dfg_out_spec){w->dtype, w->shape, -1, false};
    out[2] = (dfg_out_spec){w->dtype, w->shape, -1, false};
    return DFG_OK;
}

dfg_tensor *dfg_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps) {
    dfg_attrs a = {.layernorm = {eps}};
    dfg_node *n = dfg_node_add(g, DFG_OP_LAYERNORM, (dfg_tensor *[]){x, w, b}, 3, &a, 3);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

dfg_status dfg_grad_layernorm(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                          dfg_tensor **din) {
    if (!dout[0]) return g->status; /* mean and rstd carry no gradient of their own */
    dfg_node *b = dfg_node_add(g, DFG_OP_LAYERNORM_BWD,
                               (dfg_tensor *[]){dout[0], n->in[0], n->in[1], n->out[1], n->out[2]}, 5, n->attr, 3);
    if (!b) return g->status;
    for (int j = 0; j < 3; j++)
        if (need[j]) din[j] = b->out[j];
    return g->status;
}
