/* logprob.c - the fused log-probability ops that the fuse pass makes from unfused user math.
 *
 *   logprob(z, t)           = log_softmax(z * inv_temp)[t]  per row, and the row's log-sum-exp
 *   linear_logprob(h, W, t) = logprob(h @ W^T, t) (W as the tied lm_head (V, C); or (C, V)), and
 *                             the entropy of softmax(h @ W^T * inv_temp) per row
 *
 * The forward keeps only the per-token log-prob and the log-sum-exp; the backward recomputes
 * the softmax from them (d z = g * inv_temp * (onehot(t) - softmax(z * inv_temp))), so no
 * (tokens x vocabulary) tensor is saved. linear_logprob walks the vocabulary (and the tokens)
 * in chunks through a planned workspace of (rows_chunk, v_chunk) floats, so its logits never
 * exist whole, in forward or backward. Kernels: ops/cpu/logprob.c. */
#include "op.h"

/* x (..., k) -> (...) */
static dfg_shape drop_last(dfg_shape s) {
    s.rank--;
    return s;
}

static bool chunks_ok(const dfg_node *n, int64_t rows, int64_t v) {
    int64_t rc = n->attr->logprob.rows_chunk, vc = n->attr->logprob.v_chunk;
    /* v_chunk: the whole vocabulary or a multiple of the reduction block (results then do not
     * depend on it, see ops/cpu/logprob.c) */
    return rc >= 1 && rc <= rows && rc <= DFG_LOGPROB_MAX_ROWS && vc >= 1 && vc <= v &&
           (vc == v || vc % DFG_LOGPROB_V_BLOCK == 0);
}

/* inputs: logits (..., V), targets (...) -> logp (...) f32, lse (...) f32 */
dfg_status dfg_infer_logprob(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *z = n->in[0], *t = n->in[1];
    if (z->shape.rank < 1 || !dfg_is_float(z->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "logits must be float (..., V)");
    if (t->dtype != DFG_I32 || !dfg_shape_equal(t->shape, drop_last(z->shape)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "targets must be i32 with the logits' shape minus the last dim");
    if (!(n->attr->logprob.inv_temp > 0)) return dfg_node_fail(g, n, DFG_ERR_ARG, "inverse temperature must be > 0");
    out[0] = (dfg_out_spec){DFG_F32, t->shape, -1, false};
    out[1] = (dfg_out_spec){DFG_F32, t->shape, -1, false};
    return DFG_OK;
}

/* inputs: dlogp (...), logits (..., V), targets (...), lse (...) -> dlogits (..., V) */
dfg_status dfg_infer_logprob_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dy = n->in[0], *z = n->in[1], *t = n->in[2], *lse = n->in[3];
    if (z->shape.rank < 1 || !dfg_is_float(z->dtype) || t->dtype != DFG_I32 || dy->dtype != DFG_F32 ||
        lse->dtype != DFG_F32 || !dfg_shape_equal(t->shape, drop_last(z->shape)) || !dfg_shape_equal(dy->shape, t->shape) ||
        !dfg_shape_equal(lse->shape, t->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){z->dtype, z->shape, -1, false};
    return DFG_OK;
}

/* The lm_head's (V, C) (trans_b) or (C, V) weight against hidden (..., C). */
static bool weight_fits(const dfg_node *n, const dfg_tensor *h, const dfg_tensor *w, int64_t *v) {
    int64_t c = h->shape.d[h->shape.rank - 1];
    if (w->shape.rank != 2 || w->dtype != h->dtype) return false;
    bool tb = n->attr->logprob.trans_b;
    *v = tb ? w->shape.d[0] : w->shape.d[1];
    return (tb ? w->shape.d[1] : w->shape.d[0]) == c;
}

/* inputs: hidden (..., C), weight, targets (...) -> logp (...), lse (...), workspace (rc, vc),
 * entropy (...). The entropy comes from the same online pass (one more multiply-add per logit):
 * a loss that wants the policy's entropy (TRL's entropy metric, top_entropy_quantile, an entropy
 * bonus) gets it without the (tokens x vocabulary) logits the unfused dfg_entropy would read. */
dfg_status dfg_infer_linear_logprob(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *h = n->in[0], *w = n->in[1], *t = n->in[2];
    int64_t v = 0;
    if (h->shape.rank < 2 || !dfg_is_float(h->dtype) || !weight_fits(n, h, w, &v))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs hidden (..., C) and a weight (V, C) (trans_b) or (C, V)");
    if (t->dtype != DFG_I32 || !dfg_shape_equal(t->shape, drop_last(h->shape)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "targets must be i32 with the hidden states' shape minus the last dim");
    if (!(n->attr->logprob.inv_temp > 0) || !chunks_ok(n, dfg_shape_numel(t->shape), v))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "inverse temperature must be > 0 and the chunks inside (rows, V)");
    out[0] = (dfg_out_spec){DFG_F32, t->shape, -1, false};
    out[1] = (dfg_out_spec){DFG_F32, t->shape, -1, false};
    out[2] = (dfg_out_spec){DFG_F32, DFG_SHAPE(n->attr->logprob.rows_chunk, n->attr->logprob.v_chunk), -1, false};
    out[3] = (dfg_out_spec){DFG_F32, t->shape, -1, false};
    return DFG_OK;
}

/* inputs: dlogp, hidden, weight, targets, lse [, dentropy, entropy] [, acc]: 5 to 8, the entropy's
 * gradient and value when the loss differentiates the entropy output too -> dhidden, dweight, workspace (rc, vc).
 * With acc (a gradient buffer of the weight's shape, PARAM/STATE), dweight is added into acc in
 * place and output 1 is acc's new value: the fuse pass makes this form from "dW, then
 * accumulate dW into the buffer", so a vocabulary-sized dW is never stored on its own.
 * With no_dweight (the weight is frozen: LoRA's base lm_head) there is no accumulator, dweight is
 * a one-float stand-in nothing reads, and the kernels skip the dW GEMMs (a third of the work). */
dfg_status dfg_infer_linear_logprob_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (n->n_in < 5 || n->n_in > 8)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "needs 5 inputs, 7 with the entropy's gradient, one more with an accumulator");
    const dfg_tensor *dy = n->in[0], *h = n->in[1], *w = n->in[2], *t = n->in[3], *lse = n->in[4];
    bool ent = n->n_in >= 7;
    const dfg_tensor *acc = n->n_in == 6 || n->n_in == 8 ? n->in[n->n_in - 1] : NULL;
    int64_t v = 0;
    if (acc && (!dfg_shape_equal(acc->shape, w->shape) || acc->dtype != w->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the accumulator must have the weight's shape and dtype");
    for (int j = 5; ent && j < 7; j++)
        if (n->in[j]->dtype != DFG_F32 || !dfg_shape_equal(n->in[j]->shape, t->shape))
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the entropy and its gradient must be f32 of the targets' shape");
    if (h->shape.rank < 2 || !dfg_is_float(h->dtype) || !weight_fits(n, h, w, &v) || t->dtype != DFG_I32 ||
        !dfg_shape_equal(t->shape, drop_last(h->shape)) || !dfg_shape_equal(dy->shape, t->shape) ||
        !dfg_shape_equal(lse->shape, t->shape) || dy->dtype != DFG_F32 || lse->dtype != DFG_F32 ||
        !chunks_ok(n, dfg_shape_numel(t->shape), v))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){h->dtype, h->shape, -1, false};
    if (n->attr->logprob.no_dweight && acc)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "no_dweight leaves the weight's gradient out: it takes no accumulator");
    out[1] = n->attr->logprob.no_dweight ? (dfg_out_spec){w->dtype, DFG_SHAPE(1), -1, false}
             : acc                       ? (dfg_out_spec){w->dtype, w->shape, n->n_in - 1, true}
                                         : (dfg_out_spec){w->dtype, w->shape, -1, false};
    out[2] = (dfg_out_spec){DFG_F32, DFG_SHAPE(n->attr->logprob.rows_chunk, n->attr->logprob.v_chunk), -1, false};
    return DFG_OK;
}

/* logprob: a pass over the logits for max and sum (online), one exp per logit */
dfg_cost dfg_cost_logprob(const dfg_node *n) {
    const dfg_tensor *z = n->in[n->op == DFG_OP_LOGPROB ? 0 : 1];
    return dfg_cost_io(n, (n->op == DFG_OP_LOGPROB ? 10.0 : 12.0) * (double)dfg_shape_numel(z->shape));
}

/* linear_logprob: the lm_head GEMM (2 rows V C) plus the logprob work; backward recomputes the
 * logits and does two more GEMMs of that size (one when the weight's gradient is left out) */
dfg_cost dfg_cost_linear_logprob(const dfg_node *n) {
    bool bwd = n->op == DFG_OP_LINEAR_LOGPROB_BWD;
    const dfg_tensor *h = n->in[bwd ? 1 : 0], *w = n->in[bwd ? 2 : 1];
    double rows = (double)dfg_shape_numel(h->shape) / (double)h->shape.d[h->shape.rank - 1];
    double v = (double)dfg_shape_numel(w->shape) / (double)h->shape.d[h->shape.rank - 1];
    double gemm = 2.0 * (double)dfg_shape_numel(h->shape) * v;
    double gemms = !bwd ? 1.0 : n->attr->logprob.no_dweight ? 2.0 : 3.0;
    return dfg_cost_io(n, gemms * gemm + 10.0 * rows * v);
}

dfg_status dfg_grad_logprob(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (!dout[0] || !need[0]) return g->status; /* the log-sum-exp output is not differentiated */
    din[0] = dfg_op_out(g, DFG_OP_LOGPROB_BWD, (dfg_tensor *[]){dout[0], n->in[0], n->in[1], n->out[1]}, 4, n->attr);
    return g->status;
}

/* dout[0] the log-probs' gradient, dout[3] the entropy's (either may be absent) */
dfg_status dfg_grad_linear_logprob(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                               dfg_tensor **din) {
    if ((!dout[0] && !dout[3]) || (!need[0] && !need[1])) return g->status;
    dfg_tensor *dlogp = dout[0] ? dout[0] : dfg_fill(g, DFG_F32, n->out[0]->shape, 0.0f);
    dfg_tensor *in[7] = {dlogp, n->in[0], n->in[1], n->in[2], n->out[1], dout[3], n->out[3]};
    dfg_attrs a = *n->attr;
    a.logprob.no_dweight = !need[1]; /* a frozen lm_head: no (V, C) gradient made and thrown away */
    dfg_node *b = dfg_node_add(g, DFG_OP_LINEAR_LOGPROB_BWD, in, dout[3] ? 7 : 5, &a, 3);
    if (!b) return g->status;
    if (need[0]) din[0] = b->out[0];
    if (need[1]) din[1] = b->out[1];
    return g->status;
}
