/* matmul.c - (batched) matmul with transpose flags, and bias add: builders, shape rules,
 * gradient rules, costs. Kernels: ops/cpu/matmul.c. */
#include "op.h"

bool dfg_matmul_dims(const dfg_node *n, dfg_mm_dims *d, const char **why) {
    const dfg_tensor *a = n->in[0], *b = n->in[1];
    bool ta = n->attr->matmul.trans_a, tb = n->attr->matmul.trans_b;
    int ra = a->shape.rank, rb = b->shape.rank;
    if (ra < 2 || rb < 2) return *why = "both operands need rank >= 2", false;
    d->M = ta ? a->shape.d[ra - 1] : a->shape.d[ra - 2];
    int64_t ka = ta ? a->shape.d[ra - 2] : a->shape.d[ra - 1];
    int64_t kb = tb ? b->shape.d[rb - 1] : b->shape.d[rb - 2];
    d->N = tb ? b->shape.d[rb - 2] : b->shape.d[rb - 1];
    if (ka != kb) return *why = "inner dims differ", false;
    d->K = ka;
    dfg_shape ba = dfg_shape_of(ra - 2, a->shape.d), bb = dfg_shape_of(rb - 2, b->shape.d);
    if (dfg_shape_equal(ba, bb) || bb.rank == 0) d->batch_shape = ba;
    else if (ba.rank == 0) d->batch_shape = bb;
    else return *why = "batch dims differ (they must match, or one operand must be 2-D)", false;
    d->batch = dfg_shape_numel(d->batch_shape);
    return true;
}

dfg_status dfg_infer_matmul(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *a = n->in[0], *b = n->in[1];
    dfg_mm_dims d;
    const char *why = "";
    if (a->dtype != b->dtype || !dfg_is_float(a->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs two float operands of one dtype");
    if (!dfg_matmul_dims(n, &d, &why))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%s (trans_a=%d, trans_b=%d)", why, n->attr->matmul.trans_a,
                             n->attr->matmul.trans_b);
    out[0].dtype = a->dtype;
    out[0].shape = d.batch_shape;
    out[0].shape.d[out[0].shape.rank++] = d.M;
    out[0].shape.d[out[0].shape.rank++] = d.N;
    return DFG_OK;
}

dfg_cost dfg_cost_matmul(const dfg_node *n) {
    dfg_mm_dims d;
    const char *why;
    if (!dfg_matmul_dims(n, &d, &why)) return dfg_cost_io(n, 0.0);
    return dfg_cost_io(n, 2.0 * (double)d.batch * (double)d.M * (double)d.N * (double)d.K);
}

dfg_tensor *dfg_matmul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b, bool trans_a, bool trans_b) {
    dfg_attrs at = {.matmul = {trans_a, trans_b}};
    return dfg_op_out(g, DFG_OP_MATMUL, (dfg_tensor *[]){a, b}, 2, &at);
}

/* (..., r, c) -> (prod(...) * r, c) */
static dfg_tensor *rows(dfg_graph *g, dfg_tensor *x) {
    return dfg_reshape(g, x, DFG_SHAPE(-1, x->shape.d[x->shape.rank - 1]));
}

/* C = op(A) op(B). dA = dC op(B)^T (or its transpose when A is transposed), dB likewise; an
 * operand shared across the batch gets the batch summed, by flattening the batch into rows
 * when the layout allows it (one large GEMM instead of a batched one and a reduction). */
dfg_status dfg_grad_matmul(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    dfg_tensor *a = n->in[0], *b = n->in[1], *dc = dout[0];
    bool ta = n->attr->matmul.trans_a, tb = n->attr->matmul.trans_b;
    bool b_shared = b->shape.rank == 2 && a->shape.rank > 2;
    if (need[0]) {
        dfg_tensor *da = ta ? dfg_matmul(g, b, dc, tb, true) : dfg_matmul(g, dc, b, false, !tb);
        din[0] = dfg_sum_to_shape(g, da, a->shape);
    }
    if (need[1]) {
        if (b_shared && !ta)
            din[1] = tb ? dfg_matmul(g, rows(g, dc), rows(g, a), true, false)
                        : dfg_matmul(g, rows(g, a), rows(g, dc), true, false);
        else
            din[1] = dfg_sum_to_shape(g, tb ? dfg_matmul(g, dc, a, true, ta) : dfg_matmul(g, a, dc, !ta, false),
                                      b->shape);
    }
    return g->status;
}

/* ---------------------------------------------------------------- bias add */
dfg_status dfg_infer_bias_add(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *b = n->in[1];
    if (x->dtype != b->dtype || !dfg_is_float(x->dtype) || x->shape.rank < 1 || b->shape.rank != 1 ||
        b->shape.d[0] != x->shape.d[x->shape.rank - 1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs x (..., N) and bias (N) of one float dtype");
    out[0].dtype = x->dtype;
    out[0].shape = x->shape;
    return DFG_OK;
}

dfg_tensor *dfg_bias_add(dfg_graph *g, dfg_tensor *x, dfg_tensor *bias) {
    return dfg_op_out(g, DFG_OP_BIAS_ADD, (dfg_tensor *[]){x, bias}, 2, NULL);
}

dfg_status dfg_grad_bias_add(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                         dfg_tensor **din) {
    (void)n;
    if (need[0]) din[0] = dout[0];
    if (need[1]) din[1] = dfg_sum(g, rows(g, dout[0]), 0);
    return g->status;
}
