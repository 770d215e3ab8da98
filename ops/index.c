/* index.c - embedding lookup, gather along the last axis (take), their scatter-add backward
 * ops, and categorical sampling: builders, shape rules, gradient rules. Kernels:
 * ops/cpu/index.c and ops/cpu/sample.c. */
#include "op.h"

/* (...) + (c) */
static bool append_dim(dfg_shape s, int64_t c, dfg_shape *out) {
    if (s.rank >= DFG_MAX_RANK) return false;
    s.d[s.rank++] = c;
    *out = s;
    return true;
}

/* (..., c) -> (...) */
static dfg_shape drop_last(dfg_shape s) {
    s.rank--;
    return s;
}

dfg_status dfg_infer_embed(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *w = n->in[0], *ids = n->in[1];
    if (w->shape.rank != 2 || !dfg_is_float(w->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "table must be float (V, C)");
    if (ids->dtype != DFG_I32) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "ids must be i32");
    if (!append_dim(ids->shape, w->shape.d[1], &out[0].shape)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "ids rank too large");
    out[0].dtype = w->dtype;
    return DFG_OK;
}

dfg_status dfg_infer_take(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *x = n->in[0], *idx = n->in[1];
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "x must be float (..., V)");
    if (idx->dtype != DFG_I32 || !dfg_shape_equal(idx->shape, drop_last(x->shape)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "idx must be i32 with x's shape minus the last dim");
    out[0].dtype = x->dtype;
    out[0].shape = idx->shape;
    return DFG_OK;
}

/* embed_bwd: dy (..., C), ids (...) [, acc (V, C)] -> (V, C); take_bwd: dy (...), idx (...) ->
 * (..., V). With acc (a gradient buffer, PARAM/STATE) embed_bwd adds into it in place and its
 * output is acc's new value: what the fuse pass makes of "dW, then buffer += dW". */
dfg_status dfg_infer_scatter(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (n->n_in != 2 && !(n->op == DFG_OP_EMBED_BWD && n->n_in == 3))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "needs dy and indices (and, for embed_bwd, an optional accumulator)");
    const dfg_tensor *dy = n->in[0], *idx = n->in[1];
    int64_t v = n->attr->scatter.vocab;
    if (v < 1 || idx->dtype != DFG_I32 || !dfg_is_float(dy->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs float dy, i32 indices and vocab >= 1");
    out[0].dtype = dy->dtype;
    if (n->op == DFG_OP_EMBED_BWD) {
        if (dy->shape.rank < 1 || !dfg_shape_equal(drop_last(dy->shape), idx->shape))
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "dy must be (..., C) for ids (...)");
        out[0].shape = DFG_SHAPE(v, dy->shape.d[dy->shape.rank - 1]);
        if (n->n_in == 3) {
            if (!dfg_shape_equal(n->in[2]->shape, out[0].shape) || n->in[2]->dtype != dy->dtype)
                return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the accumulator must be (V, C) of dy's dtype");
            out[0].alias = 2, out[0].writes = true;
        }
        return DFG_OK;
    }
    if (!dfg_shape_equal(dy->shape, idx->shape) || !append_dim(dy->shape, v, &out[0].shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "dy and idx must have one shape");
    return DFG_OK;
}

/* logits (..., V), rng (4) [, row0: i32 scalar, the batch index of the logits' first row (a
 * sub-batch of rows [row0, row0 + rows) draws what the whole batch draws for those rows), or
 * i32 (rows): each row's batch index (rows gathered from anywhere in the batch) [, history
 * (rows, H) i32, history_len i32 scalar or (rows): repetition_penalty's tokens]] -> tokens (...), rng
 * advanced in place [, the tokens' sampling log-probs (...) f32] */
dfg_status dfg_infer_sample(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    if (n->n_in != 2 && n->n_in != 3 && n->n_in != 5)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "takes logits and rng, 3 inputs with row0 or 5 with the history; got %d",
                             n->n_in);
    if (n->n_out != 2 && n->n_out != 3)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "gives tokens and rng, and the log-probs as a third; got %d outputs", n->n_out);
    const dfg_tensor *x = n->in[0], *rng = n->in[1];
    const dfg_attrs_sample *a = &n->attr->sample;
    if (x->shape.rank < 1 || !dfg_is_float(x->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "logits must be float (..., V)");
    if (rng->dtype != DFG_I32 || !dfg_shape_equal(rng->shape, DFG_SHAPE(4)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "rng must be an i32 STATE of shape (4)");
    if (!(a->top_p >= 0.0f && a->top_p <= 1.0f) || !(a->min_p >= 0.0f && a->min_p <= 1.0f) || !(a->repetition_penalty >= 0.0f))
        return dfg_node_fail(g, n, DFG_ERR_ARG, "top_p %g and min_p %g must lie in [0, 1], repetition_penalty %g >= 0",
                             (double)a->top_p, (double)a->min_p, (double)a->repetition_penalty);
    int64_t v = x->shape.d[x->shape.rank - 1], rows = dfg_shape_numel(x->shape) / (v ? v : 1);
    if (n->n_in >= 3) {
        const dfg_tensor *r0 = n->in[2];
        if (r0->dtype != DFG_I32 || (dfg_shape_numel(r0->shape) != 1 && dfg_shape_numel(r0->shape) != rows)) {
            char buf[96];
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "row0 '%s' must be an i32 scalar (rank 0 or one element) or hold "
                                 "one index per row (%lld); got %s %s", r0->name, (long long)rows,
                                 dfg_dtype_name(r0->dtype), dfg_shape_str(r0->shape, buf, sizeof(buf)));
        }
    }
    if (n->n_in == 5) {
        const dfg_tensor *h = n->in[3], *len = n->in[4];
        if (h->dtype != DFG_I32 || h->shape.rank != 2 || h->shape.d[0] != rows)
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "history '%s' must be i32 (%lld, H): a row of ids per logits row",
                                 h->name, (long long)rows);
        if (len->dtype != DFG_I32 || (dfg_shape_numel(len->shape) != 1 && dfg_shape_numel(len->shape) != rows))
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "history_len '%s' must be an i32 scalar or hold one length per row (%lld)",
                                 len->name, (long long)rows);
    }
    out[0] = (dfg_out_spec){DFG_I32, drop_last(x->shape), -1, false};
    out[1] = (dfg_out_spec){DFG_I32, rng->shape, 1, true};
    if (n->n_out == 3) out[2] = (dfg_out_spec){DFG_F32, drop_last(x->shape), -1, false};
    return DFG_OK;
}

/* rng (4) -> rng with its counter advanced by n, in place: the draws of n sample calls skipped */
dfg_status dfg_infer_rng_advance(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_tensor *rng = n->in[0];
    if (rng->dtype != DFG_I32 || !dfg_shape_equal(rng->shape, DFG_SHAPE(4)))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "rng must be an i32 STATE of shape (4)");
    if (n->attr->rng_advance.n < 0) return dfg_node_fail(g, n, DFG_ERR_ARG, "cannot advance by %lld", (long long)n->attr->rng_advance.n);
    out[0] = (dfg_out_spec){DFG_I32, rng->shape, 0, true};
    return DFG_OK;
}

dfg_cost dfg_cost_sample(const dfg_node *n) { return dfg_cost_io(n, 10.0 * (double)dfg_shape_numel(n->in[0]->shape)); }

dfg_tensor *dfg_embed(dfg_graph *g, dfg_tensor *table, dfg_tensor *ids) {
    return dfg_op_out(g, DFG_OP_EMBED, (dfg_tensor *[]){table, ids}, 2, NULL);
}

dfg_tensor *dfg_take(dfg_graph *g, dfg_tensor *x, dfg_tensor *idx) {
    return dfg_op_out(g, DFG_OP_TAKE, (dfg_tensor *[]){x, idx}, 2, NULL);
}

dfg_tensor *dfg_sample_with(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, const dfg_sampling *s,
                            const dfg_sample_io *io) {
    static const dfg_sample_io none = {.history_skip = -1};
    if (!io) io = &none;
    if (!s) {
        if (g) dfg_graph_err(g, DFG_ERR_ARG, "dfg_sample_with: no settings");
        return g ? g->poison : NULL;
    }
    dfg_attrs a = {.sample = {s->temperature, s->top_k, s->top_p, s->min_p, 1.0f, -1}};
    dfg_tensor *in[5] = {logits, rng, io->row0};
    int n_in = io->row0 ? 3 : 2; /* without row0 the node keeps its 2 inputs: older graphs do not change */
    bool penalise = io->history && s->repetition_penalty > 0.0f && s->repetition_penalty != 1.0f;
    if (penalise) {
        a.sample.repetition_penalty = s->repetition_penalty, a.sample.history_skip = io->history_skip;
        if (!in[2]) in[2] = dfg_fill(g, DFG_I32, DFG_SCALAR, 0.0f); /* row0 0: the draws of no row0 */
        in[3] = io->history, in[4] = io->history_len, n_in = 5;
    }
    dfg_node *n = dfg_node_add(g, DFG_OP_SAMPLE, in, n_in, &a, io->logp ? 3 : 2);
    if (io->logp) *io->logp = n ? n->out[2] : (g ? g->poison : NULL);
    return n ? n->out[0] : (g ? g->poison : NULL);
}

dfg_tensor *dfg_sample_rows(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, dfg_tensor *row0, float temperature,
                            int top_k) {
    return dfg_sample_with(g, logits, rng, &(dfg_sampling){.temperature = temperature, .top_k = top_k},
                           &(dfg_sample_io){.row0 = row0, .history_skip = -1});
}

dfg_tensor *dfg_sample(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, float temperature, int top_k) {
    return dfg_sample_rows(g, logits, rng, NULL, temperature, top_k);
}

dfg_tensor *dfg_rng_advance(dfg_graph *g, dfg_tensor *rng, int64_t n) {
    dfg_attrs a = {.rng_advance = {n}};
    return dfg_op_out(g, DFG_OP_RNG_ADVANCE, &rng, 1, &a);
}

static dfg_tensor *scatter(dfg_graph *g, dfg_op op, dfg_tensor *dy, dfg_tensor *idx, int64_t vocab) {
    dfg_attrs a = {.scatter = {vocab}};
    return dfg_op_out(g, op, (dfg_tensor *[]){dy, idx}, 2, &a);
}

dfg_status dfg_grad_embed(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    if (need[0]) din[0] = scatter(g, DFG_OP_EMBED_BWD, dout[0], n->in[1], n->in[0]->shape.d[0]);
    return g->status;
}

dfg_status dfg_grad_take(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need, dfg_tensor **din) {
    const dfg_tensor *x = n->in[0];
    if (need[0]) din[0] = scatter(g, DFG_OP_TAKE_BWD, dout[0], n->in[1], x->shape.d[x->shape.rank - 1]);
    return g->status;
}
