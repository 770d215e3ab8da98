/* softmax.c - softmax, log-softmax and entropy over the last axis: builders and gradient rules.
 * Backward ops take (dy, y): softmax dx = y * (dy - sum(dy * y)); log-softmax
 * dx = dy - exp(y) * sum(dy). Kernels: ops/cpu/softmax.c. */
#include "op.h"

dfg_cost dfg_cost_softmax(const dfg_node *n) { return dfg_cost_io(n, 10.0 * (double)dfg_shape_numel(n->in[0]->shape)); }

dfg_tensor *dfg_softmax(dfg_graph *g, dfg_tensor *x) { return dfg_op_out(g, DFG_OP_SOFTMAX, &x, 1, NULL); }
dfg_tensor *dfg_log_softmax(dfg_graph *g, dfg_tensor *x) { return dfg_op_out(g, DFG_OP_LOG_SOFTMAX, &x, 1, NULL); }

dfg_status dfg_grad_softmax(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_op_out(g, DFG_OP_SOFTMAX_BWD, (dfg_tensor *[]){dout[0], n->out[0]}, 2, NULL);
    return g->status;
}

dfg_status dfg_grad_log_softmax(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                            dfg_tensor **din) {
    if (need[0]) din[0] = dfg_op_out(g, DFG_OP_LOG_SOFTMAX_BWD, (dfg_tensor *[]){dout[0], n->out[0]}, 2, NULL);
    return g->status;
}

/* ---------------------------------------------------------------- entropy
 * H(z) = -sum_j p_j log p_j, p = softmax(z) over the last axis: (..., V) -> (...) f32.
 * dz_j = dH * -p_j (log p_j + H): the backward takes (dH, z, H) and recomputes p from z, so
 * nothing vocabulary-wide is kept between the passes. What a loss writes for the entropy of
 * its sampling distribution: dfg_entropy(logits / T). The fuse pass folds it into
 * linear_logprob when it reads the same logits as the log-probs do. */
dfg_tensor *dfg_entropy(dfg_graph *g, dfg_tensor *z) { return dfg_op_out(g, DFG_OP_ENTROPY, &z, 1, NULL); }

dfg_status dfg_infer_entropy(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *z = n->in[0];
    if (z->shape.rank < 1 || !dfg_is_float(z->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs float logits (..., V)");
    dfg_shape s = z->shape;
    s.rank--;
    out[0] = (dfg_out_spec){DFG_F32, s, -1, false};
    return DFG_OK;
}

/* inputs: dH (...), z (..., V), H (...) -> dz (..., V) */
dfg_status dfg_infer_entropy_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dh = n->in[0], *z = n->in[1], *h = n->in[2];
    dfg_shape s = z->shape;
    s.rank--;
    if (z->shape.rank < 1 || !dfg_is_float(z->dtype) || dh->dtype != DFG_F32 || h->dtype != DFG_F32 ||
        !dfg_shape_equal(dh->shape, s) || !dfg_shape_equal(h->shape, s))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs dH (...) f32, logits (..., V) and H (...) f32");
    out[0] = (dfg_out_spec){z->dtype, z->shape, -1, false};
    return DFG_OK;
}

dfg_status dfg_grad_entropy(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_op_out(g, DFG_OP_ENTROPY_BWD, (dfg_tensor *[]){dout[0], n->in[0], n->out[0]}, 3, NULL);
    return g->status;
}

/* a pass for max and sum, one exp per logit (the backward: two passes) */
dfg_cost dfg_cost_entropy(const dfg_node *n) {
    const dfg_tensor *z = n->in[n->op == DFG_OP_ENTROPY ? 0 : 1];
    return dfg_cost_io(n, (n->op == DFG_OP_ENTROPY ? 12.0 : 20.0) * (double)dfg_shape_numel(z->shape));
}
