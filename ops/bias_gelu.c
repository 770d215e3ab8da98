/* bias_gelu.c - gelu(x + bias) as one op (the fuse pass makes it from bias_add -> gelu): the
 * pre-activation x + bias is never stored; backward recomputes it from x and bias. Kernels:
 * ops/cpu/bias_gelu.c. */
#include "op.h"

/* inputs: x (..., N), bias (N) -> y (..., N) */
dfg_status dfg_infer_bias_gelu(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *b = n->in[1];
    if (x->dtype != b->dtype || !dfg_is_float(x->dtype) || x->shape.rank < 1 || b->shape.rank != 1 ||
        b->shape.d[0] != x->shape.d[x->shape.rank - 1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs x (..., N) and bias (N) of one float dtype");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    return DFG_OK;
}

/* inputs: dy (..., N), x (..., N), bias (N) -> d(x + bias) (..., N) */
dfg_status dfg_infer_bias_gelu_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dy = n->in[0], *x = n->in[1], *b = n->in[2];
    if (!dfg_shape_equal(dy->shape, x->shape) || dy->dtype != x->dtype || b->dtype != x->dtype || b->shape.rank != 1 ||
        x->shape.rank < 1 || b->shape.d[0] != x->shape.d[x->shape.rank - 1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    return DFG_OK;
}

dfg_status dfg_grad_bias_gelu(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                          dfg_tensor **din) {
    if (!need[0] && !need[1]) return g->status;
    dfg_tensor *du = dfg_op_out(g, DFG_OP_BIAS_GELU_BWD, (dfg_tensor *[]){dout[0], n->in[0], n->in[1]}, 3, NULL);
    if (need[0]) din[0] = du;
    if (need[1]) din[1] = dfg_sum(g, dfg_reshape(g, du, DFG_SHAPE(-1, n->in[1]->shape.d[0])), 0);
    return g->status;
}
