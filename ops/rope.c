/* rope.c - rotary position embeddings as Llama and Qwen2 apply them (Hugging Face transformers'
 * apply_rotary_pos_emb with rotate_half): builder, shape rule, gradient rule, cost. Kernels:
 * ops/cpu/rope.c, ops/cuda/rope.cu.
 *
 * x (..., H*D) holds a token's H heads of D side by side (a q or k projection); pos (...) the
 * token's position. Per head, for i < D/2, with inv_freq[i] = 1 / theta^(2i/D) and angle
 * a = pos * inv_freq[i] (all f32, in HF's order):
 *     y[i]       = x[i] cos a - x[i + D/2] sin a
 *     y[i + D/2] = x[i + D/2] cos a + x[i] sin a
 * The rotation is orthogonal, so the gradient is the rotation by -a (the same op with inverse
 * flipped): rope is its own backward op. pos gets no gradient. */
#include <math.h>

#include "op.h"

/* per element: two products and a sum, and a cos or a sin (8: transcend's round figure) */
dfg_cost dfg_cost_rope(const dfg_node *n) { return dfg_cost_io(n, 11.0 * (double)dfg_shape_numel(n->in[0]->shape)); }

/* inputs: x (..., H*D) float, pos (...) i32 -> y (..., H*D) of x's dtype */
dfg_status dfg_infer_rope(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *pos = n->in[1];
    const dfg_attrs_rope *a = &n->attr->rope;
    if (a->head_dim < 2 || a->head_dim % 2)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "head_dim %d must be even and >= 2", (int)a->head_dim);
    if (!(a->theta > 0.0f) || !isfinite(a->theta))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "theta %g must be finite and > 0", (double)a->theta);
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "x '%s' must be float (..., H*head_dim)", x->name);
    const int64_t c = x->shape.d[x->shape.rank - 1];
    if (c % a->head_dim)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "x '%s': last dim %lld is not a multiple of head_dim %d", x->name,
                             (long long)c, (int)a->head_dim);
    if (pos->dtype != DFG_I32) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "pos '%s' must be i32", pos->name);
    dfg_shape lead = x->shape;
    lead.rank--;
    if (!dfg_shape_equal(pos->shape, lead))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "pos '%s' must have the leading dims of x '%s' (all but the last)",
                             pos->name, x->name);
    out[0] = (dfg_out_spec){x->dtype, x->shape, -1, false};
    return DFG_OK;
}

static dfg_tensor *rope_node(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, dfg_attrs_rope r) {
    dfg_attrs a = {.rope = r};
    return dfg_op_out(g, DFG_OP_ROPE, (dfg_tensor *[]){x, pos}, 2, &a);
}

dfg_tensor *dfg_rope(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, int head_dim, float theta) {
    return rope_node(g, x, pos, (dfg_attrs_rope){.head_dim = head_dim, .theta = theta, .inverse = false});
}

/* dx = R(-a) dy: the same rotation with inverse flipped */
dfg_status dfg_grad_rope(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (!need[0] || !dout[0]) return g->status;
    dfg_attrs_rope r = n->attr->rope;
    r.inverse = !r.inverse;
    din[0] = rope_node(g, dout[0], n->in[1], r);
    return g->status;
}
