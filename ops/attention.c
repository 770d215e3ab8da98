/* attention.c - causal multi-head attention over a fused QKV tensor, its backward, and the
 * KV-cache decoding form: builders, shape rules, gradient rule, cost. The forward also returns
 * the per-row log-sum-exp of the scores so that backward recomputes probabilities instead of
 * keeping the (T x T) matrix. Kernels: ops/cpu/attention.c. */
#include "op.h"

static bool heads_ok(int64_t c, int h) { return h > 0 && c % h == 0; }

dfg_status dfg_infer_attention(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *qkv = n->in[0];
    int h = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || !dfg_is_float(qkv->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a float qkv of shape (B, T, 3C)");
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    if (!heads_ok(C, h)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)C, h);
    out[0] = (dfg_out_spec){qkv->dtype, DFG_SHAPE(B, T, C), -1, false};
    out[1] = (dfg_out_spec){DFG_F32, DFG_SHAPE(B, h, T), -1, false};
    return DFG_OK;
}

/* inputs: dy (B,T,C), qkv (B,T,3C), y (B,T,C), lse (B,H,T) -> dqkv (B,T,3C) */
dfg_status dfg_infer_attention_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dy = n->in[0], *qkv = n->in[1], *y = n->in[2], *lse = n->in[3];
    int h = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || !heads_ok(qkv->shape.d[2] / 3, h))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs qkv of shape (B, T, 3C)");
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    if (!dfg_shape_equal(dy->shape, DFG_SHAPE(B, T, C)) || !dfg_shape_equal(y->shape, DFG_SHAPE(B, T, C)) ||
        !dfg_shape_equal(lse->shape, DFG_SHAPE(B, h, T)) || dy->dtype != qkv->dtype || y->dtype != qkv->dtype)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    out[0] = (dfg_out_spec){qkv->dtype, qkv->shape, -1, false};
    return DFG_OK;
}

/* inputs: q (B,Tq,C), k_cache (B,Tmax,Ckv), v_cache (B,Tmax,Ckv), pos (i32, one element). The
 * caches hold Hkv = Ckv / D heads of D = C / n_head (grouped-query attention: query head h reads
 * KV head h / (n_head / Hkv)); Hkv is the caches' shape, not an attribute. */
dfg_status dfg_infer_attention_cached(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *pos = n->in[3];
    int h = n->attr->attention.n_head;
    if (q->shape.rank != 3 || k->shape.rank != 3 || q->shape.d[0] != k->shape.d[0] || q->shape.d[1] > k->shape.d[1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs q (B, Tq, C) and caches (B, Tmax, Ckv) with Tq <= Tmax");
    if (!dfg_shape_equal(k->shape, v->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "k_cache '%s' and v_cache '%s' differ in shape", k->name, v->name);
    if (q->dtype != k->dtype || q->dtype != v->dtype || !dfg_is_float(q->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "q and the caches need one float dtype");
    if (pos->dtype != DFG_I32 || dfg_shape_numel(pos->shape) != 1)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "pos must be an i32 scalar");
    if (!heads_ok(q->shape.d[2], h))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)q->shape.d[2], h);
    int64_t D = q->shape.d[2] / h, ckv = k->shape.d[2];
    if (ckv % D)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "k_cache '%s' last dim %lld is not a multiple of head_dim %lld",
                             k->name, (long long)ckv, (long long)D);
    if (h % (ckv / D))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "n_head %d is not a multiple of the caches' %lld kv heads", h,
                             (long long)(ckv / D));
    out[0] = (dfg_out_spec){q->dtype, q->shape, -1, false};
    return DFG_OK;
}

/* Causal attention does about half of the dense 2*T*T*C multiply-adds for QK^T and PV each;
 * backward does about twice the forward. attention_cached: every query head against Tmax rows
 * (C of q: with grouped KV heads the flops stay per query head, while the bytes read are the
 * caches' own, Ckv wide). */
dfg_cost dfg_cost_attention(const dfg_node *n) {
    const dfg_tensor *x = n->in[n->op == DFG_OP_ATTENTION_BWD ? 1 : 0];
    double B = (double)x->shape.d[0], T = (double)x->shape.d[1], C = (double)n->out[0]->shape.d[2];
    if (n->op == DFG_OP_ATTENTION_BWD) C /= 3.0;
    double f = 2.0 * B * T * T * C;
    if (n->op == DFG_OP_ATTENTION_BWD) f *= 2.0;
    if (n->op == DFG_OP_ATTENTION_CACHED) f = 4.0 * B * T * (double)n->in[1]->shape.d[1] * C;
    return dfg_cost_io(n, f);
}

dfg_tensor *dfg_attention(dfg_graph *g, dfg_tensor *qkv, int n_head) {
    dfg_attrs a = {.attention = {n_head}};
    dfg_node *n = dfg_node_add(g, DFG_OP_ATTENTION, &qkv, 1, &a, 2);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

dfg_tensor *dfg_attention_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                 dfg_tensor *pos, int n_head) {
    dfg_attrs a = {.attention = {n_head}};
    return dfg_op_out(g, DFG_OP_ATTENTION_CACHED, (dfg_tensor *[]){q, k_cache, v_cache, pos}, 4, &a);
}

dfg_status dfg_grad_attention(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                          dfg_tensor **din) {
    if (!dout[0] || !need[0]) return g->status;
    din[0] = dfg_op_out(g, DFG_OP_ATTENTION_BWD, (dfg_tensor *[]){dout[0], n->in[0], n->out[0], n->out[1]}, 4, n->attr);
    return g->status;
}

/* Left padding: not implemented yet (the start input comes with the kernels); NULL is the plain op. */
static dfg_tensor *padding_unsupported(dfg_graph *g, const char *what) {
    if (g && !g->status) dfg_graph_err(g, DFG_ERR_UNSUPPORTED, "%s: left-padded rows (start) are not implemented yet", what);
    return g ? g->poison : NULL;
}

dfg_tensor *dfg_attention_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *start, int n_head) {
    return start ? padding_unsupported(g, "attention") : dfg_attention(g, qkv, n_head);
}

dfg_tensor *dfg_attention_prefix_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, dfg_tensor *start, int n_head) {
    return start ? padding_unsupported(g, "attention_prefix") : dfg_attention_prefix(g, qkv, prefix, n_head);
}

dfg_tensor *dfg_attention_cached_padded(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                        dfg_tensor *pos, dfg_tensor *start, int n_head) {
    return start ? padding_unsupported(g, "attention_cached")
                 : dfg_attention_cached(g, q, k_cache, v_cache, pos, n_head);
}
