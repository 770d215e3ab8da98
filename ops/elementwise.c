/* elementwise.c - binary (broadcasting) and unary pointwise ops: builders, shape rules,
 * gradient rules, costs. Kernels: ops/cpu/elementwise.c. */
#include "op.h"


static bool is_numeric(dfg_dtype t) { return dfg_is_float(t) || t == DFG_I32; }

dfg_cost dfg_cost_io(const dfg_node *n, double flops) {
    dfg_cost c = {.flops = flops};
    for (int i = 0; i < n->n_in; i++) c.bytes_read += (double)dfg_tensor_bytes(n->in[i]);
    for (int k = 0; k < n->n_out; k++)
        if (!n->out[k]->view_of) c.bytes_written += (double)dfg_tensor_bytes(n->out[k]);
    return c;
}

static double out_numel(const dfg_node *n) { return (double)dfg_shape_numel(n->out[0]->shape); }

dfg_cost dfg_cost_pointwise(const dfg_node *n) { return dfg_cost_io(n, out_numel(n)); }
/* exp/log/tanh cost several flops each; 8 is a round figure used only to rank remat choices */
dfg_cost dfg_cost_transcend(const dfg_node *n) { return dfg_cost_io(n, 8.0 * out_numel(n)); }
dfg_cost dfg_cost_memory(const dfg_node *n) { return dfg_cost_io(n, 0.0); }
dfg_cost dfg_cost_view(const dfg_node *n) {
    (void)n;
    return (dfg_cost){0};
}

/* ---------------------------------------------------------------- shape rules */
dfg_status dfg_infer_binary(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *a = n->in[0], *b = n->in[1];
    if (a->dtype != b->dtype) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "dtypes differ");
    if (!is_numeric(a->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs f32, bf16, f16 or i32 inputs");
    if (!dfg_shape_broadcast(a->shape, b->shape, &out[0].shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "shapes do not broadcast");
    out[0].dtype = n->op == DFG_OP_EQUAL ? DFG_F32 : a->dtype;
    return DFG_OK;
}

dfg_status dfg_infer_unary(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0];
    bool int_ok = n->op == DFG_OP_AFFINE || n->op == DFG_OP_NEG || n->op == DFG_OP_CLAMP;
    if (!dfg_is_float(x->dtype) && !(int_ok && x->dtype == DFG_I32))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs a floating-point input");
    if ((n->op == DFG_OP_SOFTMAX || n->op == DFG_OP_LOG_SOFTMAX) && x->shape.rank < 1)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs rank >= 1");
    if (n->op == DFG_OP_CLAMP && !(n->attr->clamp.lo <= n->attr->clamp.hi))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "lo %g > hi %g", n->attr->clamp.lo, n->attr->clamp.hi);
    out[0].dtype = x->dtype;
    out[0].shape = x->shape;
    return DFG_OK;
}

dfg_status dfg_infer_same2(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *a = n->in[0], *b = n->in[1];
    if (a->dtype != b->dtype || !dfg_is_float(a->dtype) || !dfg_shape_equal(a->shape, b->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs two float inputs of one shape and dtype");
    out[0].dtype = a->dtype;
    out[0].shape = a->shape;
    return DFG_OK;
}

dfg_status dfg_infer_where(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *c = n->in[0], *a = n->in[1], *b = n->in[2];
    dfg_shape ab;
    if (a->dtype != b->dtype) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the two value inputs have different dtypes");
    if (c->dtype != DFG_F32 && c->dtype != DFG_I32 && c->dtype != DFG_U8)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the condition must be f32, i32 or u8");
    if (!dfg_shape_broadcast(a->shape, b->shape, &ab) || !dfg_shape_broadcast(ab, c->shape, &out[0].shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "shapes do not broadcast");
    out[0].dtype = a->dtype;
    return DFG_OK;
}

dfg_status dfg_infer_cast(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if ((unsigned)n->attr->cast.to >= DFG_DTYPE_COUNT)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "unknown target dtype %d", (int)n->attr->cast.to);
    out[0].dtype = n->attr->cast.to;
    out[0].shape = n->in[0]->shape;
    return DFG_OK;
}

dfg_status dfg_infer_fill(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    dfg_shape s = n->attr->fill.shape;
    if ((unsigned)n->attr->fill.dtype >= DFG_DTYPE_COUNT || s.rank < 0 || s.rank > DFG_MAX_RANK)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "bad dtype or rank");
    out[0].dtype = n->attr->fill.dtype;
    out[0].shape = s;
    return DFG_OK;
}

/* ---------------------------------------------------------------- builders */
static dfg_tensor *binary(dfg_graph *g, dfg_op op, dfg_tensor *a, dfg_tensor *b) {
    return dfg_op_out(g, op, (dfg_tensor *[]){a, b}, 2, NULL);
}
dfg_tensor *dfg_add(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_ADD, a, b); }
dfg_tensor *dfg_sub(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_SUB, a, b); }
dfg_tensor *dfg_mul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_MUL, a, b); }
dfg_tensor *dfg_div(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_DIV, a, b); }
dfg_tensor *dfg_minimum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_MINIMUM, a, b); }
dfg_tensor *dfg_maximum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_MAXIMUM, a, b); }
dfg_tensor *dfg_equal(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return binary(g, DFG_OP_EQUAL, a, b); }

static dfg_tensor *unary(dfg_graph *g, dfg_op op, dfg_tensor *x, const dfg_attrs *attr) {
    return dfg_op_out(g, op, &x, 1, attr);
}
dfg_tensor *dfg_affine(dfg_graph *g, dfg_tensor *x, float alpha, float beta) {
    dfg_attrs a = {.affine = {alpha, beta}};
    return unary(g, DFG_OP_AFFINE, x, &a);
}
dfg_tensor *dfg_scale(dfg_graph *g, dfg_tensor *x, float alpha) { return dfg_affine(g, x, alpha, 0.0f); }
dfg_tensor *dfg_add_scalar(dfg_graph *g, dfg_tensor *x, float beta) { return dfg_affine(g, x, 1.0f, beta); }
dfg_tensor *dfg_exp(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_EXP, x, NULL); }
dfg_tensor *dfg_log(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_LOG, x, NULL); }
dfg_tensor *dfg_neg(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_NEG, x, NULL); }
dfg_tensor *dfg_sqrt(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_SQRT, x, NULL); }
dfg_tensor *dfg_gelu(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_GELU, x, NULL); }
dfg_tensor *dfg_silu(dfg_graph *g, dfg_tensor *x) { return unary(g, DFG_OP_SILU, x, NULL); }
dfg_tensor *dfg_clamp(dfg_graph *g, dfg_tensor *x, float lo, float hi) {
    dfg_attrs a = {.clamp = {lo, hi}};
    return unary(g, DFG_OP_CLAMP, x, &a);
}
dfg_tensor *dfg_where(dfg_graph *g, dfg_tensor *cond, dfg_tensor *a, dfg_tensor *b) {
    return dfg_op_out(g, DFG_OP_WHERE, (dfg_tensor *[]){cond, a, b}, 3, NULL);
}
dfg_tensor *dfg_cast(dfg_graph *g, dfg_tensor *x, dfg_dtype to) {
    dfg_attrs a = {.cast = {to}};
    return unary(g, DFG_OP_CAST, x, &a);
}
dfg_tensor *dfg_fill(dfg_graph *g, dfg_dtype dt, dfg_shape shape, float value) {
    dfg_attrs a = {.fill = {dt, value, shape}};
    return dfg_op_out(g, DFG_OP_FILL, NULL, 0, &a);
}

/* ---------------------------------------------------------------- gradient rules */
dfg_tensor *dfg_sum_to_shape(dfg_graph *g, dfg_tensor *x, dfg_shape shape) {
    while (x->shape.rank > shape.rank && !g->status) x = dfg_sum(g, x, 0);
    for (int i = 0; i < shape.rank && !g->status; i++)
        if (shape.d[i] == 1 && x->shape.d[i] != 1) x = dfg_sum_keepdim(g, x, i);
    return x;
}

static dfg_tensor *zero_like(dfg_graph *g, const dfg_tensor *t) { return dfg_fill(g, t->dtype, DFG_SCALAR, 0.0f); }

dfg_status dfg_grad_add(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    for (int j = 0; j < 2; j++)
        if (need[j]) din[j] = dfg_sum_to_shape(g, dout[0], n->in[j]->shape);
    return g->status;
}

dfg_status dfg_grad_sub(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_sum_to_shape(g, dout[0], n->in[0]->shape);
    if (need[1]) din[1] = dfg_sum_to_shape(g, dfg_neg(g, dout[0]), n->in[1]->shape);
    return g->status;
}

dfg_status dfg_grad_mul(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_sum_to_shape(g, dfg_mul(g, dout[0], n->in[1]), n->in[0]->shape);
    if (need[1]) din[1] = dfg_sum_to_shape(g, dfg_mul(g, dout[0], n->in[0]), n->in[1]->shape);
    return g->status;
}

/* y = a / b: da = dy / b, db = -dy * y / b */
dfg_status dfg_grad_div(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    dfg_tensor *b = n->in[1], *y = n->out[0];
    if (need[0]) din[0] = dfg_sum_to_shape(g, dfg_div(g, dout[0], b), n->in[0]->shape);
    if (need[1]) din[1] = dfg_sum_to_shape(g, dfg_neg(g, dfg_mul(g, dout[0], dfg_div(g, y, b))), b->shape);
    return g->status;
}

/* The gradient goes to whichever input equals the result; on a tie each input gets half of it,
 * as torch.minimum/maximum: GRPO's min(rho A, clamp(rho) A) is a tie at rho = 1 (every first
 * pass), and giving both sides the whole gradient would double it. */
dfg_status dfg_grad_minmax(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    dfg_tensor *half_tie = dfg_scale(g, dfg_equal(g, n->in[0], n->in[1]), 0.5f); /* 0.5 where a == b */
    for (int j = 0; j < 2; j++)
        if (need[j]) {
            dfg_tensor *w = dfg_sub(g, dfg_equal(g, n->out[0], n->in[j]), half_tie); /* 1, 0.5 or 0 */
            din[j] = dfg_sum_to_shape(g, dfg_mul(g, dout[0], w), n->in[j]->shape);
        }
    return g->status;
}

dfg_status dfg_grad_affine(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_scale(g, dout[0], n->attr->affine.alpha);
    return g->status;
}

dfg_status dfg_grad_exp(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_mul(g, dout[0], n->out[0]);
    return g->status;
}

dfg_status dfg_grad_log(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_div(g, dout[0], n->in[0]);
    return g->status;
}

dfg_status dfg_grad_neg(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    (void)n;
    if (need[0]) din[0] = dfg_neg(g, dout[0]);
    return g->status;
}

dfg_status dfg_grad_sqrt(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_div(g, dfg_scale(g, dout[0], 0.5f), n->out[0]);
    return g->status;
}

/* Zero where the input was clamped, i.e. where the output differs from it. */
dfg_status dfg_grad_clamp(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_mul(g, dout[0], dfg_equal(g, n->out[0], n->in[0]));
    return g->status;
}

dfg_status dfg_grad_gelu(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_op_out(g, DFG_OP_GELU_BWD, (dfg_tensor *[]){dout[0], n->in[0]}, 2, NULL);
    return g->status;
}

dfg_status dfg_grad_silu(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = dfg_op_out(g, DFG_OP_SILU_BWD, (dfg_tensor *[]){dout[0], n->in[0]}, 2, NULL);
    return g->status;
}

dfg_status dfg_grad_where(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    dfg_tensor *c = n->in[0], *zero = zero_like(g, dout[0]);
    if (need[1]) din[1] = dfg_sum_to_shape(g, dfg_where(g, c, dout[0], zero), n->in[1]->shape);
    if (need[2]) din[2] = dfg_sum_to_shape(g, dfg_where(g, c, zero, dout[0]), n->in[2]->shape);
    return g->status;
}

dfg_status dfg_grad_cast(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0] && dfg_is_float(n->in[0]->dtype) && dfg_is_float(n->out[0]->dtype))
        din[0] = dfg_cast(g, dout[0], n->in[0]->dtype);
    return g->status;
}
