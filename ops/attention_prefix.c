/* attention_prefix.c - causal attention of sequences that continue a shared prefix: n = P*G
 * rows, the G rows of group p all preceded by prefix p (GRPO's completions of one prompt). A
 * query at position i of its row attends to every prefix position and to its row's positions
 * 0 .. i; the prefix's own queries are not part of this op (its attention is an ordinary
 * dfg_attention). Backward returns the gradient of the prefix's keys and values summed over its
 * group. With left-padded prefixes (the optional last input start (P), i32: prefix p's first real
 * column) a row's queries see prefix keys start[p] .. Tp-1 instead of all of them. Builders, shape
 * rules, gradient rule, cost; kernels: ops/cpu/attention_prefix.c. */
#include "op.h"

/* qkv (n, Tc, 3C) and prefix (P, Tp, 3C) of one float dtype, n a multiple of P, heads split C */
static dfg_status check_pair(dfg_graph *g, const dfg_node *n, const dfg_tensor *qkv, const dfg_tensor *pre) {
    int h = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || pre->shape.rank != 3 || qkv->shape.d[2] % 3 || qkv->shape.d[2] != pre->shape.d[2] ||
        pre->shape.d[0] < 1 || qkv->shape.d[0] % pre->shape.d[0])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs qkv (n, Tc, 3C) and a prefix (P, Tp, 3C) with n a multiple of P");
    if (qkv->dtype != pre->dtype || !dfg_is_float(qkv->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "qkv and the prefix need one float dtype");
    int64_t C = qkv->shape.d[2] / 3;
    if (h <= 0 || C % h) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)C, h);
    return DFG_OK;
}

/* inputs: qkv (n,Tc,3C), prefix (P,Tp,3C) [, start (P)] -> y (n,Tc,C), lse (n,H,Tc) */
dfg_status dfg_infer_attention_prefix(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (dfg_check_attention_arity(g, n, 2)) return g->status;
    const dfg_tensor *qkv = n->in[0], *pre = n->in[1];
    dfg_status st = check_pair(g, n, qkv, pre);
    if (st || dfg_check_attention_start(g, n, 2, pre->shape.d[0])) return g->status;
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    out[0] = (dfg_out_spec){qkv->dtype, DFG_SHAPE(B, T, C), -1, false};
    out[1] = (dfg_out_spec){DFG_F32, DFG_SHAPE(B, n->attr->attention.n_head, T), -1, false};
    return DFG_OK;
}

/* inputs: dy (n,Tc,C), qkv (n,Tc,3C), prefix (P,Tp,3C), y (n,Tc,C), lse (n,H,Tc) [, start (P)]
 * -> dqkv (n,Tc,3C), dprefix (P,Tp,3C) (its query columns 0) */
dfg_status dfg_infer_attention_prefix_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (dfg_check_attention_arity(g, n, 5)) return g->status;
    const dfg_tensor *dy = n->in[0], *qkv = n->in[1], *pre = n->in[2], *y = n->in[3], *lse = n->in[4];
    dfg_status st = check_pair(g, n, qkv, pre);
    if (st || dfg_check_attention_start(g, n, 5, pre->shape.d[0])) return g->status;
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    if (!dfg_shape_equal(dy->shape, DFG_SHAPE(B, T, C)) || !dfg_shape_equal(y->shape, DFG_SHAPE(B, T, C)) ||
        !dfg_shape_equal(lse->shape, DFG_SHAPE(B, n->attr->attention.n_head, T)) || dy->dtype != qkv->dtype ||
        y->dtype != qkv->dtype || lse->dtype != DFG_F32)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){qkv->dtype, qkv->shape, -1, false};
    out[1] = (dfg_out_spec){pre->dtype, pre->shape, -1, false};
    return DFG_OK;
}

/* Each query meets Tp prefix keys and (on average) (Tc + 1) / 2 of its own: QK^T and PV are
 * 2 multiply-adds per key and channel each; backward about twice the forward. */
dfg_cost dfg_cost_attention_prefix(const dfg_node *n) {
    const dfg_tensor *qkv = n->in[n->op == DFG_OP_ATTENTION_PREFIX ? 0 : 1], *pre = n->in[n->op == DFG_OP_ATTENTION_PREFIX ? 1 : 2];
    double B = (double)qkv->shape.d[0], Tc = (double)qkv->shape.d[1], Tp = (double)pre->shape.d[1];
    double C = (double)qkv->shape.d[2] / 3.0;
    double f = 4.0 * B * Tc * (Tp + (Tc + 1.0) / 2.0) * C;
    return dfg_cost_io(n, n->op == DFG_OP_ATTENTION_PREFIX ? f : 2.0 * f);
}

dfg_tensor *dfg_attention_prefix_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, dfg_tensor *start, int n_head) {
    dfg_attrs a = {.attention = {n_head}};
    dfg_node *n = dfg_node_add(g, DFG_OP_ATTENTION_PREFIX, (dfg_tensor *[]){qkv, prefix, start}, start ? 3 : 2, &a, 2);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

dfg_tensor *dfg_attention_prefix(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, int n_head) {
    return dfg_attention_prefix_padded(g, qkv, prefix, NULL, n_head);
}

dfg_status dfg_grad_attention_prefix(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                                 dfg_tensor **din) {
    if (!dout[0] || (!need[0] && !need[1])) return g->status;
    dfg_tensor *in[6] = {dout[0], n->in[0], n->in[1], n->out[0], n->out[1], n->n_in == 3 ? n->in[2] : NULL};
    dfg_node *b = dfg_node_add(g, DFG_OP_ATTENTION_PREFIX_BWD, in, in[5] ? 6 : 5, n->attr, 2);
    if (!b) return g->status;
    if (need[0]) din[0] = b->out[0];
    if (need[1]) din[1] = b->out[1];
    return g->status;
}
