/* softmax.c - softmax and log-softmax over the last axis: builders and gradient rules.
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
