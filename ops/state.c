/* state.c - ops that write persistent tensors in place: assign, accumulate, assign_fill,
 * slice_assign (KV caches), the AdamW step and global-norm gradient clipping. Each output
 * that writes is a new version of the tensor it writes (see graph.c). Kernels: ops/cpu/state.c. */
#include "op.h"

/* ---------------------------------------------------------------- assign, accumulate, assign_fill */
dfg_status dfg_infer_assign(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dst = n->in[0];
    if (n->op != DFG_OP_ASSIGN_FILL) {
        const dfg_tensor *src = n->in[1];
        /* a copy may also convert between float dtypes (an f32 master into a bf16 parameter),
         * so no converted temporary is ever stored */
        bool convert = n->op == DFG_OP_ASSIGN && dfg_is_float(src->dtype) && dfg_is_float(dst->dtype);
        if ((src->dtype != dst->dtype && !convert) || !dfg_shape_equal(src->shape, dst->shape))
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "source and destination differ in shape or dtype");
        if (n->op == DFG_OP_ACCUMULATE && dst->dtype == DFG_U8)
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "cannot accumulate u8");
    }
    out[0] = (dfg_out_spec){dst->dtype, dst->shape, 0, true};
    return DFG_OK;
}

dfg_tensor *dfg_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src) {
    return dfg_op_out(g, DFG_OP_ASSIGN, (dfg_tensor *[]){dst, src}, 2, NULL);
}
dfg_tensor *dfg_accumulate(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src) {
    return dfg_op_out(g, DFG_OP_ACCUMULATE, (dfg_tensor *[]){dst, src}, 2, NULL);
}
dfg_tensor *dfg_assign_fill(dfg_graph *g, dfg_tensor *dst, float value) {
    dfg_attrs a = {.assign_fill = {value}};
    return dfg_op_out(g, DFG_OP_ASSIGN_FILL, &dst, 1, &a);
}

/* ---------------------------------------------------------------- slice_assign: dst[..., start:start+len, ...] = src */
dfg_status dfg_check_run_time_start(dfg_graph *g, const dfg_node *n, const dfg_tensor *x, const dfg_tensor *start, int ax,
                                    const char *what) {
    bool shared = dfg_shape_numel(start->shape) == 1;
    bool per_row = ax == 1 && start->shape.rank == 1 && start->shape.d[0] == x->shape.d[0];
    if (start->dtype == DFG_I32 && (shared || per_row)) return DFG_OK;
    char buf[96];
    return dfg_node_fail(g, n, DFG_ERR_SHAPE,
                         "%s '%s' must be an i32 scalar, or of shape (%lld) (one a row) when the axis is 1; got %s %s "
                         "along axis %d",
                         what, start->name, (long long)x->shape.d[0], dfg_dtype_name(start->dtype),
                         dfg_shape_str(start->shape, buf, sizeof(buf)), ax);
}

dfg_status dfg_infer_slice_assign(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *dst = n->in[0], *src = n->in[1];
    int ax = n->attr->slice_assign.axis;
    bool dyn = n->attr->slice_assign.dynamic;
    if (n->n_in != (dyn ? 3 : 2)) return dfg_node_fail(g, n, DFG_ERR_ARG, "wrong number of inputs");
    if (ax < 0 || ax >= dst->shape.rank || src->shape.rank != dst->shape.rank || src->dtype != dst->dtype)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "axis out of range, or rank/dtype differ");
    for (int d = 0; d < dst->shape.rank; d++)
        if (d != ax && src->shape.d[d] != dst->shape.d[d])
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "dim %d differs", d);
    int64_t len = src->shape.d[ax], st = n->attr->slice_assign.start;
    if (len > dst->shape.d[ax] || (!dyn && (st < 0 || st + len > dst->shape.d[ax])))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "rows [%lld, %lld) do not fit dim %d of size %lld", (long long)st,
                             (long long)(st + len), ax, (long long)dst->shape.d[ax]);
    if (dyn && dfg_check_run_time_start(g, n, dst, n->in[2], ax, "pos")) return g->status;
    out[0] = (dfg_out_spec){dst->dtype, dst->shape, 0, true};
    return DFG_OK;
}

static dfg_tensor *slice_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, int64_t start,
                                dfg_tensor *pos) {
    int rank = dst && !(dst->flags & DFG_TF_POISON) ? dst->shape.rank : 0;
    int ax = dfg_norm_axis(axis, rank);
    dfg_attrs a = {.slice_assign = {ax < 0 ? axis : ax, start, pos != NULL}};
    return dfg_op_out(g, DFG_OP_SLICE_ASSIGN, (dfg_tensor *[]){dst, src, pos}, pos ? 3 : 2, &a);
}
dfg_tensor *dfg_slice_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, int64_t start) {
    return slice_assign(g, dst, src, axis, start, NULL);
}
dfg_tensor *dfg_slice_assign_at(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, dfg_tensor *pos) {
    if (g && !g->status && !pos) {
        dfg_graph_err(g, DFG_ERR_ARG, "slice_assign: pos is NULL");
        return g->poison;
    }
    return slice_assign(g, dst, src, axis, 0, pos);
}

/* ---------------------------------------------------------------- adamw: inputs step, (param, grad, m, v) x n and
 * an optional f32 scalar lr last (a scheduled rate: it replaces the attribute); outputs (param, m, v) x n */
dfg_status dfg_infer_adamw(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_attrs_adamw *c = &n->attr->adamw;
    int np = (n->n_in - 1) / 4;
    bool has_lr = (n->n_in - 1) % 4 == 1;
    if (np < 1 || ((n->n_in - 1) % 4 && !has_lr) || n->n_out != np * 3)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "needs step, (param, grad, m, v) per parameter and an optional lr");
    if (n->in[0]->dtype != DFG_I32 || dfg_shape_numel(n->in[0]->shape) != 1)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "step must be an i32 scalar");
    if (has_lr && (n->in[n->n_in - 1]->dtype != DFG_F32 || n->in[n->n_in - 1]->shape.rank != 0))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "lr '%s' must be an f32 scalar", n->in[n->n_in - 1]->name);
    if (!(c->lr >= 0) || !(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) || !(c->eps > 0) ||
        !(c->weight_decay >= 0))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "hyperparameters out of range (lr %g, betas %g %g, eps %g, wd %g)",
                             c->lr, c->beta1, c->beta2, c->eps, c->weight_decay);
    for (int i = 0; i < np; i++) {
        const dfg_tensor *p = n->in[1 + 4 * i];
        for (int j = 1; j < 4; j++) {
            const dfg_tensor *t = n->in[1 + 4 * i + j];
            if (!dfg_shape_equal(t->shape, p->shape) || !dfg_is_float(t->dtype))
                return dfg_node_fail(g, n, DFG_ERR_SHAPE, "'%s' does not match parameter '%s'", t->name, p->name);
        }
        if (!dfg_is_float(p->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "parameter '%s' is not float", p->name);
        out[3 * i + 0] = (dfg_out_spec){p->dtype, p->shape, 1 + 4 * i, true};
        out[3 * i + 1] = (dfg_out_spec){n->in[3 + 4 * i]->dtype, p->shape, 3 + 4 * i, true};
        out[3 * i + 2] = (dfg_out_spec){n->in[4 + 4 * i]->dtype, p->shape, 4 + 4 * i, true};
    }
    return DFG_OK;
}

dfg_cost dfg_cost_adamw(const dfg_node *n) {
    double el = 0;
    for (int i = 1; i + 3 < n->n_in; i += 4) el += (double)dfg_shape_numel(n->in[i]->shape); /* not lr */
    return dfg_cost_io(n, 12.0 * el);
}

static dfg_status adamw(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                        dfg_tensor *const *v, int n, dfg_tensor *step, dfg_tensor *lr, dfg_adamw_config cfg) {
    if (!g) return DFG_ERR_ARG;
    if (g->status) return g->status;
    if (n < 1 || !params || !grads || !m || !v)
        return dfg_graph_err(g, DFG_ERR_ARG, "adamw: needs n >= 1 parameters with grads and moments");
    int n_in = 1 + 4 * n + (lr ? 1 : 0);
    dfg_tensor **in = dfg_arena_alloc(&g->program->arena, sizeof(*in) * (size_t)n_in);
    if (!in) return dfg_graph_err(g, DFG_ERR_NOMEM, "adamw: out of memory");
    in[0] = step;
    for (int i = 0; i < n; i++) {
        in[1 + 4 * i] = params[i];
        in[2 + 4 * i] = grads[i];
        in[3 + 4 * i] = m[i];
        in[4 + 4 * i] = v[i];
    }
    if (lr) in[n_in - 1] = lr;
    dfg_attrs a = {.adamw = {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}};
    dfg_node_add(g, DFG_OP_ADAMW, in, n_in, &a, 3 * n);
    return g->status;
}

dfg_status dfg_adamw(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                     dfg_tensor *const *v, int n, dfg_tensor *step, dfg_adamw_config cfg) {
    return adamw(g, params, grads, m, v, n, step, NULL, cfg);
}

dfg_status dfg_adamw_lr(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                        dfg_tensor *const *v, int n, dfg_tensor *step, dfg_tensor *lr, dfg_adamw_config cfg) {
    if (g && !g->status && !lr) return dfg_graph_err(g, DFG_ERR_ARG, "adamw: lr is NULL");
    return adamw(g, params, grads, m, v, n, step, lr, cfg);
}

/* ---------------------------------------------------------------- clip_grad_norm: inputs g x n; outputs norm, g' x n */
dfg_status dfg_infer_clip(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (n->n_in < 1 || n->n_out != n->n_in + 1) return dfg_node_fail(g, n, DFG_ERR_ARG, "needs n >= 1 gradients");
    if (!(n->attr->clip.max_norm > 0)) return dfg_node_fail(g, n, DFG_ERR_ARG, "max_norm must be > 0");
    out[0] = (dfg_out_spec){DFG_F32, DFG_SCALAR, -1, false};
    for (int i = 0; i < n->n_in; i++) {
        const dfg_tensor *t = n->in[i];
        if (!dfg_is_float(t->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "gradient '%s' is not float", t->name);
        bool persistent = t->kind != DFG_TEMP || t->version_of;
        out[1 + i] = (dfg_out_spec){t->dtype, t->shape, persistent ? i : -1, persistent};
    }
    return DFG_OK;
}

/* two passes over every gradient: sum of squares, then the scaling */
dfg_cost dfg_cost_clip(const dfg_node *n) {
    double el = 0;
    for (int i = 0; i < n->n_in; i++) el += (double)dfg_shape_numel(n->in[i]->shape);
    dfg_cost c = dfg_cost_io(n, 3.0 * el);
    c.bytes_read *= 2.0;
    return c;
}

dfg_tensor *dfg_clip_grad_norm(dfg_graph *g, dfg_tensor **grads, int n, float max_norm) {
    if (!g) return NULL;
    if (g->status) return g->poison;
    if (n < 1 || !grads) {
        dfg_graph_err(g, DFG_ERR_ARG, "clip_grad_norm: needs n >= 1 gradients");
        return g->poison;
    }
    dfg_attrs a = {.clip = {max_norm}};
    dfg_node *node = dfg_node_add(g, DFG_OP_CLIP_GRAD_NORM, grads, n, &a, n + 1);
    if (!node) return g->poison;
    for (int i = 0; i < n; i++) grads[i] = node->out[1 + i];
    return node->out[0];
}
