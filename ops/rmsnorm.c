/* rmsnorm.c - root-mean-square normalisation over the last axis (Llama, Qwen: Hugging Face's
 * LlamaRMSNorm): builder, shape rules, gradient rule. Forward outputs y = w * (x * rstd) and the
 * per-row rstd = 1 / sqrt(mean(x^2) + eps) (saved for backward); unlike layernorm there is no
 * centring and no bias. Kernels: ops/cpu/rmsnorm.c, ops/cuda/rmsnorm.cu. */
#include "op.h"

/* square and sum, scale, weight: a little cheaper than layernorm's two passes */
dfg_cost dfg_cost_rmsnorm(const dfg_node *n) { return dfg_cost_io(n, 6.0 * (double)dfg_shape_numel(n->in[0]->shape)); }

/* x (..., C) -> the per-row shape (...) */
static dfg_shape row_shape(dfg_shape s) {
    s.rank--;
    return s;
}

static bool is_vec(const dfg_tensor *t, int64_t c, dfg_dtype dt) {
    return t->shape.rank == 1 && t->shape.d[0] == c && t->dtype == dt;
}

/* inputs: x (..., C), w (C) -> y (..., C) of x's dtype, rstd (...) f32 */
dfg_status dfg_infer_rmsnorm(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a float input of rank >= 1");
    int64_t c = x->shape.d[x->shape.rank - 1];
    if (!is_vec(n->in[1], c, x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "weight must be (%lld) of the input's dtype", (long long)c);
    if (!(n->attr->layernorm.eps > 0.0f)) return dfg_node_fail(g, n, DFG_ERR_ARG, "eps must be > 0");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    out[1] = (dfg_out_spec){DFG_F32, row_shape(x->shape), -1, false};
    return DFG_OK;
}

/* inputs: dy, x (..., C), w (C), rstd (...) f32 -> dx (..., C), dw (C) */
dfg_status dfg_infer_rmsnorm_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dy = n->in[0], *x = n->in[1], *w = n->in[2], *rstd = n->in[3];
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a float input of rank >= 1");
    if (!dfg_shape_equal(dy->shape, x->shape) || dy->dtype != x->dtype ||
        !is_vec(w, x->shape.d[x->shape.rank - 1], x->dtype) || rstd->dtype != DFG_F32 ||
        !dfg_shape_equal(rstd->shape, row_shape(x->shape)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    out[1] = (dfg_out_spec){w->dtype, w->shape, -1, false};
    return DFG_OK;
}

dfg_tensor *dfg_rmsnorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, float eps) {
    dfg_attrs a = {.layernorm = {eps}};
    dfg_node *n = dfg_node_add(g, DFG_OP_RMSNORM, (dfg_tensor *[]){x, w}, 2, &a, 2);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

/* dw comes out of the bwd node already summed over rows (w is (C), shared by every row) */
dfg_status dfg_grad_rmsnorm(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                            dfg_tensor **din) {
    if (!dout[0]) return g->status; /* rstd carries no gradient of its own */
    dfg_node *b = dfg_node_add(g, DFG_OP_RMSNORM_BWD, (dfg_tensor *[]){dout[0], n->in[0], n->in[1], n->out[1]}, 4,
                               n->attr, 2);
    if (!b) return g->status;
    for (int j = 0; j < 2; j++)
        if (need[j]) din[j] = b->out[j];
    return g->status;
}
