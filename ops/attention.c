/* attention.c - causal multi-head attention over a fused QKV tensor, its backward, and the
 * KV-cache decoding form: builders, shape rules, gradient rule, cost. The forward also returns
 * the per-row log-sum-exp of the scores so that backward recomputes probabilities instead of
 * keeping the (T x T) matrix. Kernels: ops/cpu/attention.c.
 *
 * Left padding: every attention op takes an optional last input, start (i32, one value a row of
 * its batch): the column of the row's first real token. A query at a real column (>= start) sees
 * keys start .. its column; a query at a pad column sees keys 0 .. its column (plain causal:
 * finite values nothing real reads). Without it (start all zeros) the ops are plain causal. The
 * ops take their input counts from the builder (-1 in ops.def); the shape rules check them. */
#include "op.h"

static bool heads_ok(int64_t c, int h) { return h > 0 && c % h == 0; }

/* Inputs of an attention op: `plain` without padding, plain + 1 with start as the last. */
dfg_status dfg_check_attention_arity(dfg_graph *g, const dfg_node *n, int plain) {
    if (n->n_in != plain && n->n_in != plain + 1)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "takes %d inputs, or %d with the rows' start; got %d", plain, plain + 1,
                             n->n_in);
    return DFG_OK;
}

dfg_status dfg_check_attention_start(dfg_graph *g, const dfg_node *n, int plain, int64_t rows) {
    if (n->n_in == plain) return DFG_OK;
    const dfg_tensor *s = n->in[plain];
    if (s->dtype != DFG_I32 || s->shape.rank != 1 || s->shape.d[0] != rows) {
        char buf[96];
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "start '%s' must be i32 of shape (%lld), one column a row; got %s %s",
                             s->name, (long long)rows, dfg_dtype_name(s->dtype), dfg_shape_str(s->shape, buf, sizeof(buf)));
    }
    return DFG_OK;
}

dfg_status dfg_infer_attention(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (dfg_check_attention_arity(g, n, 1)) return g->status;
    const dfg_tensor *qkv = n->in[0];
    int h = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || !dfg_is_float(qkv->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a float qkv of shape (B, T, 3C)");
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    if (!heads_ok(C, h)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)C, h);
    if (dfg_check_attention_start(g, n, 1, B)) return g->status;
    out[0] = (dfg_out_spec){qkv->dtype, DFG_SHAPE(B, T, C), -1, false};
    out[1] = (dfg_out_spec){DFG_F32, DFG_SHAPE(B, h, T), -1, false};
    return DFG_OK;
}

/* inputs: dy (B,T,C), qkv (B,T,3C), y (B,T,C), lse (B,H,T) [, start (B)] -> dqkv (B,T,3C) */
dfg_status dfg_infer_attention_bwd(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (dfg_check_attention_arity(g, n, 4)) return g->status;
    const dfg_tensor *dy = n->in[0], *qkv = n->in[1], *y = n->in[2], *lse = n->in[3];
    int h = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || !heads_ok(qkv->shape.d[2] / 3, h))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs qkv of shape (B, T, 3C)");
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3;
    if (!dfg_shape_equal(dy->shape, DFG_SHAPE(B, T, C)) || !dfg_shape_equal(y->shape, DFG_SHAPE(B, T, C)) ||
        !dfg_shape_equal(lse->shape, DFG_SHAPE(B, h, T)) || dy->dtype != qkv->dtype || y->dtype != qkv->dtype)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "inconsistent shapes");
    if (dfg_check_attention_start(g, n, 4, B)) return g->status;
    out[0] = (dfg_out_spec){qkv->dtype, qkv->shape, -1, false};
    return DFG_OK;
}

/* pos of attention_cached: one i32 for every row, or (rows) one a row */
static dfg_status check_positions(dfg_graph *g, const dfg_node *n, const dfg_tensor *pos, int64_t rows) {
    bool shared = dfg_shape_numel(pos->shape) == 1, per_row = pos->shape.rank == 1 && pos->shape.d[0] == rows;
    if (pos->dtype == DFG_I32 && (shared || per_row)) return DFG_OK;
    char buf[96];
    return dfg_node_fail(g, n, DFG_ERR_SHAPE, "pos '%s' must be an i32 scalar or of shape (%lld), one a row; got %s %s",
                         pos->name, (long long)rows, dfg_dtype_name(pos->dtype),
                         dfg_shape_str(pos->shape, buf, sizeof(buf)));
}

/* inputs: q (B,Tq,C), k_cache (B,Tmax,Ckv), v_cache (B,Tmax,Ckv), pos (i32: one element, or (B)
 * one a row) [, start (B)]. The caches hold Hkv = Ckv / D heads of D = C / n_head (grouped-query
 * attention: query head h reads KV head h / (n_head / Hkv)); Hkv is the caches' shape, not an
 * attribute. Whether pos is shared or per row is its shape, not an attribute either. */
dfg_status dfg_infer_attention_cached(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (dfg_check_attention_arity(g, n, 4)) return g->status;
    const dfg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *pos = n->in[3];
    int h = n->attr->attention.n_head;
    if (q->shape.rank != 3 || k->shape.rank != 3 || q->shape.d[0] != k->shape.d[0] || q->shape.d[1] > k->shape.d[1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs q (B, Tq, C) and caches (B, Tmax, Ckv) with Tq <= Tmax");
    if (!dfg_shape_equal(k->shape, v->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "k_cache '%s' and v_cache '%s' differ in shape", k->name, v->name);
    if (q->dtype != k->dtype || q->dtype != v->dtype || !dfg_is_float(q->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "q and the caches need one float dtype");
    if (check_positions(g, n, pos, q->shape.d[0])) return g->status;
    if (!heads_ok(q->shape.d[2], h))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)q->shape.d[2], h);
    int64_t D = q->shape.d[2] / h, ckv = k->shape.d[2];
    if (ckv % D)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "k_cache '%s' last dim %lld is not a multiple of head_dim %lld",
                             k->name, (long long)ckv, (long long)D);
    if (h % (ckv / D))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "n_head %d is not a multiple of the caches' %lld kv heads", h,
                             (long long)(ckv / D));
    if (dfg_check_attention_start(g, n, 4, q->shape.d[0])) return g->status;
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

dfg_tensor *dfg_attention_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *start, int n_head) {
    dfg_attrs a = {.attention = {n_head}};
    dfg_node *n = dfg_node_add(g, DFG_OP_ATTENTION, (dfg_tensor *[]){qkv, start}, start ? 2 : 1, &a, 2);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

dfg_tensor *dfg_attention(dfg_graph *g, dfg_tensor *qkv, int n_head) { return dfg_attention_padded(g, qkv, NULL, n_head); }

dfg_tensor *dfg_attention_cached_padded(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                        dfg_tensor *pos, dfg_tensor *start, int n_head) {
    dfg_attrs a = {.attention = {n_head}};
    return dfg_op_out(g, DFG_OP_ATTENTION_CACHED, (dfg_tensor *[]){q, k_cache, v_cache, pos, start}, start ? 5 : 4, &a);
}

dfg_tensor *dfg_attention_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                 dfg_tensor *pos, int n_head) {
    return dfg_attention_cached_padded(g, q, k_cache, v_cache, pos, NULL, n_head);
}

dfg_status dfg_grad_attention(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                          dfg_tensor **din) {
    if (!dout[0] || !need[0]) return g->status;
    /* the start (i32) passes through: the backward masks as its forward did */
    dfg_tensor *in[5] = {dout[0], n->in[0], n->out[0], n->out[1], n->n_in == 2 ? n->in[1] : NULL};
    din[0] = dfg_op_out(g, DFG_OP_ATTENTION_BWD, in, in[4] ? 5 : 4, n->attr);
    return g->status;
}
