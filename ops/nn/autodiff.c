/* autodiff.c - reverse-mode differentiation on the graph: walks the nodes between the
 * differentiated tensors and the loss backwards, calls each op's gradient rule (ops/), and
 * sums the gradient contributions of tensors used more than once (or, with accumulation
 * buffers, adds each contribution into its buffer as soon as it is made). */
#include <stdlib.h>
#include <string.h>

#include "../op.h"
#include "dfg_nn.h"

typedef struct {
    dfg_graph *g;
    int n_tensors;   /* tensor ids below this existed before backward started */
    bool *needs;     /* [tensor id] depends on some wrt tensor */
    dfg_tensor **gr; /* [tensor id] accumulated gradient */
    int *wrt_index;  /* [tensor id] index in wrt, or -1 */
    dfg_tensor *const *accum; /* dfg_backward_accumulate's buffers, or NULL */
} ad_ctx;

/* Marks every tensor that depends on a wrt tensor, in build (topological) order. */
static void mark_dependents(ad_ctx *c, int last_node) {
    for (int i = 0; i <= last_node; i++) {
        const dfg_node *n = c->g->nodes[i];
        bool any = false;
        for (int j = 0; j < n->n_in && !any; j++) any = c->needs[n->in[j]->id];
        if (!any) continue;
        for (int k = 0; k < n->n_out; k++) c->needs[n->out[k]->id] = true;
    }
}

/* Adds a gradient contribution for t. A persistent tensor with an accumulation buffer gets each
 * contribution added into the buffer as soon as it exists, so no contribution outlives its
 * producer (a tied embedding's lm_head share is not kept until the embedding's share arrives). */
static void add_grad(ad_ctx *c, const dfg_tensor *t, dfg_tensor *d) {
    int i = c->wrt_index[t->id];
    if (c->accum && i >= 0 && t->kind != DFG_TEMP) {
        if (t->kind == DFG_PARAM && d->kind == DFG_TEMP) d->flags |= DFG_TF_GRAD;
        dfg_accumulate(c->g, c->accum[i], d);
        return;
    }
    dfg_tensor *cur = c->gr[t->id];
    c->gr[t->id] = cur ? dfg_add(c->g, cur, d) : d;
}

/* n with the inputs that an op cheap to make again (DFG_OPF_REMAKE: NF4 dequantisation) made in
 * the forward made again here, after the gradient reaching n exists (the `after` edge keeps the
 * scheduler from hoisting the copy): the backward of a 4-bit linear reads a weight dequantised
 * for it, instead of the forward's kept live from the forward to the backward, which would hold
 * every layer's dequantised weight at once. Returns n itself when no input qualifies. */
static const dfg_node *remade_inputs(ad_ctx *c, const dfg_node *n, dfg_tensor *const *dout, dfg_node *copy) {
    const dfg_node *after = NULL;
    for (int k = 0; k < n->n_out && !after; k++) after = dout[k] ? dout[k]->producer : NULL;
    dfg_tensor **in = NULL;
    for (int j = 0; j < n->n_in; j++) {
        const dfg_node *src = n->in[j]->kind == DFG_TEMP ? n->in[j]->producer : NULL;
        if (!src || !dfg_op_flag(src->op, DFG_OPF_REMAKE) || src->graph != c->g || src->n_out != 1) continue;
        if (!in) {
            if (!(in = dfg_arena_alloc(&c->g->program->arena, sizeof(*in) * (size_t)n->n_in))) return NULL;
            memcpy(in, n->in, sizeof(*in) * (size_t)n->n_in);
        }
        dfg_node *again = dfg_node_add(c->g, src->op, src->in, src->n_in, src->attr, 1);
        if (!again) return NULL;
        again->after = (dfg_node *)after;
        in[j] = again->out[0];
    }
    if (!in) return n;
    *copy = *n;
    copy->in = in;
    return copy;
}

/* Applies node n's gradient rule and distributes the input gradients. */
static dfg_status backprop_node(ad_ctx *c, const dfg_node *n, dfg_tensor *const *wrt_names) {
    dfg_graph *g = c->g;
    const dfg_op_info *info = &dfg_ops[n->op];
    dfg_tensor **dout = dfg_arena_alloc(&g->program->arena, sizeof(*dout) * (size_t)n->n_out);
    dfg_tensor **din = dfg_arena_alloc(&g->program->arena, sizeof(*din) * (size_t)(n->n_in + 1));
    bool *need = dfg_arena_alloc(&g->program->arena, sizeof(*need) * (size_t)(n->n_in + 1));
    if (!dout || !din || !need) return dfg_graph_err(g, DFG_ERR_NOMEM, "backward: out of memory");
    bool any_out = false, any_in = false;
    for (int k = 0; k < n->n_out; k++) any_out |= (dout[k] = c->gr[n->out[k]->id]) != NULL;
    for (int j = 0; j < n->n_in; j++) {
        need[j] = c->needs[n->in[j]->id] && dfg_is_float(n->in[j]->dtype);
        any_in |= need[j];
    }
    if (!any_out || !any_in || info->grad_kind == DFG_GRAD_ZERO) return DFG_OK;
    if (info->grad_kind == DFG_GRAD_NONE || !info->grad)
        return dfg_node_fail(g, n, DFG_ERR_ARG,
                             "is not differentiable, but lies between the loss and '%s'; compute the loss "
                             "without it or stop the gradient before it",
                             wrt_names[0]->name);
    dfg_node remade;
    const dfg_node *rule_n = remade_inputs(c, n, dout, &remade);
    if (!rule_n) return g->status ? g->status : dfg_graph_err(g, DFG_ERR_NOMEM, "backward: out of memory");
    int first_new = g->n_nodes;
    dfg_status st = info->grad(g, rule_n, dout, need, din);
    if (st) return st;
    /* tags that let passes find and re-differentiate this node's share of the backward graph */
    for (int i = first_new; i < g->n_nodes; i++) g->nodes[i]->grad_of = n;
    for (int j = 0; j < n->n_in; j++) {
        if (!need[j] || !din[j]) continue;
        if (!dfg_shape_equal(din[j]->shape, n->in[j]->shape) || din[j]->dtype != n->in[j]->dtype)
            return dfg_node_fail(g, n, DFG_ERR_SHAPE, "gradient rule gave input #%d a gradient of the wrong shape", j);
        din[j]->grad_wrt = n->in[j];
        add_grad(c, n->in[j], din[j]);
    }
    return g->status;
}

/* dfg_backward, and with accum also the accumulation into the buffers (grads may then be NULL). */
static dfg_status backward_impl(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n, dfg_tensor **grads,
                                dfg_tensor *const *accum) {
    if (!g) return DFG_ERR_ARG;
    if (g->status) return g->status;
    char db[160];
    if (!loss || (loss->flags & DFG_TF_POISON) || loss->kind != DFG_TEMP || loss->graph != g ||
        dfg_shape_numel(loss->shape) != 1 || !dfg_is_float(loss->dtype))
        return dfg_graph_err(g, DFG_ERR_ARG, "backward: the loss must be a float scalar computed in graph '%s', got %s",
                               g->name, dfg_tensor_desc(loss, db, sizeof(db)));
    if (n < 1 || !wrt || (!grads && !accum))
        return dfg_graph_err(g, DFG_ERR_ARG, "backward: needs n >= 1 tensors to differentiate");
    dfg_program *p = g->program;
    for (int i = 0; i < n; i++) {
        if (!wrt[i] || (wrt[i]->flags & DFG_TF_POISON) || !dfg_is_float(wrt[i]->dtype))
            return dfg_graph_err(g, DFG_ERR_ARG, "backward: wrt[%d] is NULL, poisoned or not float", i);
        /* its id indexes this program's tables below */
        if (wrt[i]->id < 0 || wrt[i]->id >= p->n_tensors || p->tensors[wrt[i]->id] != wrt[i])
            return dfg_graph_err(g, DFG_ERR_ARG, "backward: wrt[%d] '%s' belongs to another program", i,
                                   wrt[i]->name);
    }

    ad_ctx c = {.g = g, .n_tensors = p->n_tensors, .accum = accum};
    c.needs = calloc((size_t)c.n_tensors, sizeof(*c.needs));
    c.gr = calloc((size_t)c.n_tensors, sizeof(*c.gr));
    c.wrt_index = malloc(sizeof(*c.wrt_index) * (size_t)c.n_tensors);
    if (!c.needs || !c.gr || !c.wrt_index) {
        free(c.needs), free(c.gr), free(c.wrt_index);
        return dfg_graph_err(g, DFG_ERR_NOMEM, "backward: out of memory");
    }
    for (int i = 0; i < c.n_tensors; i++) c.wrt_index[i] = -1;
    for (int i = 0; i < n; i++) c.needs[wrt[i]->id] = true, c.wrt_index[wrt[i]->id] = i;
    int last = loss->producer->id, first_new = g->n_nodes;
    mark_dependents(&c, last);
    c.gr[loss->id] = dfg_fill(g, loss->dtype, loss->shape, 1.0f);
    for (int i = last; i >= 0 && !g->status; i--) {
        const dfg_node *node = g->nodes[i];
        bool relevant = false;
        for (int k = 0; k < node->n_out && !relevant; k++) relevant = c.needs[node->out[k]->id];
        if (relevant) backprop_node(&c, node, wrt);
    }
    for (int i = 0; i < n && !g->status; i++) {
        dfg_tensor *d = c.gr[wrt[i]->id];
        if (accum && d) dfg_accumulate(g, accum[i], d); /* a TEMP wrt's summed gradient */
        if (!grads) continue;
        grads[i] = d ? d : dfg_fill(g, wrt[i]->dtype, wrt[i]->shape, 0.0f);
        if (wrt[i]->kind == DFG_PARAM && grads[i]->kind == DFG_TEMP) grads[i]->flags |= DFG_TF_GRAD;
    }
    /* a tag for the memory report and for passes: what backward added */
    for (int i = first_new; i < g->n_nodes; i++) g->nodes[i]->flags |= DFG_NF_BACKWARD;
    free(c.needs);
    free(c.gr);
    free(c.wrt_index);
    return g->status;
}

dfg_status dfg_backward(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n, dfg_tensor **grads) {
    if (g && !g->status && !grads) return dfg_graph_err(g, DFG_ERR_ARG, "backward: grads is NULL");
    return backward_impl(g, loss, wrt, n, grads, NULL);
}

dfg_status dfg_backward_accumulate(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n,
                                   dfg_tensor *const *accum) {
    if (!g) return DFG_ERR_ARG;
    if (g->status) return g->status;
    if (n < 1 || !accum) return dfg_graph_err(g, DFG_ERR_ARG, "backward_accumulate: needs n >= 1 accumulators");
    return backward_impl(g, loss, wrt, n, NULL, accum);
}
