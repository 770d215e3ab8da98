/* collective.c - the data-parallel collectives (ops.def: allreduce, all_gather, rank): shape
 * rules, costs and builders. The kernels call the communicator in their context (ops/comm.h). */
#include <stdio.h>

#include "comm.h"
#include "op.h"

/* Every collective carries the world it was built for: the plan records it, and the runtime
 * refuses to run with another number of processes. */
static dfg_status check_world(dfg_graph *g, const dfg_node *n) {
    int w = n->attr->collective.world;
    if (w < 1 || w > (1 << 16)) return dfg_node_fail(g, n, DFG_ERR_ARG, "world %d is not 1 .. 65536 ranks", w);
    return DFG_OK;
}

dfg_status dfg_infer_allreduce(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    dfg_status st = check_world(g, n);
    if (st) return st;
    if (n->n_in < 1 || n->n_out != n->n_in) return dfg_node_fail(g, n, DFG_ERR_ARG, "needs n >= 1 tensors, one output each");
    if ((unsigned)n->attr->collective.op > DFG_COLL_MAX) return dfg_node_fail(g, n, DFG_ERR_ARG, "unknown reduction");
    for (int i = 0; i < n->n_in; i++) {
        const dfg_tensor *t = n->in[i];
        if (!dfg_is_float(t->dtype)) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "'%s' is not float", t->name);
        bool persistent = t->kind != DFG_TEMP || t->version_of; /* a gradient buffer: reduced in place */
        if (n->attr->collective.last_repeat && !persistent) /* the earlier repeats would leave its output unwritten */
            return dfg_node_fail(g, n, DFG_ERR_ARG, "'%s' is a temporary: an all-reduce on the last repeat only "
                                 "needs persistent tensors (reduced in place)", t->name);
        out[i] = (dfg_out_spec){t->dtype, t->shape, persistent ? i : -1, persistent};
    }
    return DFG_OK;
}

dfg_status dfg_infer_all_gather(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    dfg_status st = check_world(g, n);
    if (st) return st;
    const dfg_tensor *x = n->in[0];
    if (x->shape.rank < 1) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs an input of rank >= 1 (stacked along axis 0)");
    out[0].dtype = x->dtype;
    out[0].shape = x->shape;
    out[0].shape.d[0] *= n->attr->collective.world;
    return DFG_OK;
}

dfg_status dfg_infer_rank(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    dfg_status st = check_world(g, n);
    if (st) return st;
    out[0].dtype = DFG_I32;
    out[0].shape = DFG_SCALAR;
    return DFG_OK;
}

/* Local memory traffic only: what crosses the network is `dfg inspect`'s bytes communicated per
 * step (a ring all-reduce sends and receives 2 (W-1)/W of the bytes per rank). */
dfg_cost dfg_cost_collective(const dfg_node *n) { return dfg_cost_io(n, 0.0); }

/* Node names are generated ("all_gather#0"); a failure says what the collective carries. */
void dfg_coll_describe(const dfg_node *n, char *buf, size_t len) {
    const char *verb = n->op == DFG_OP_ALL_GATHER ? "gathering" : "reducing";
    if (n->n_in == 0) {
        snprintf(buf, len, "the rank");
        return;
    }
    int k = snprintf(buf, len, "%s '%s'", verb, n->in[0]->name);
    if (n->n_in > 1 && k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, " and %d more tensor%s", n->n_in - 1, n->n_in > 2 ? "s" : "");
}

/* ---------------------------------------------------------------- builders */
static dfg_attrs coll_attrs(dfg_coll_op op, int world) { return (dfg_attrs){.collective = {(int32_t)op, world, 0}}; }

static dfg_status allreduce_node(dfg_graph *g, dfg_tensor **xs, int n, dfg_attrs a) {
    if (!g) return DFG_ERR_ARG;
    if (g->status) return g->status;
    if (n < 1 || !xs) return dfg_graph_err(g, DFG_ERR_ARG, "allreduce: needs n >= 1 tensors");
    dfg_node *node = dfg_node_add(g, DFG_OP_ALLREDUCE, xs, n, &a, n);
    if (!node) return g->status;
    for (int i = 0; i < n; i++) xs[i] = node->out[i];
    return DFG_OK;
}

dfg_status dfg_allreduce_n(dfg_graph *g, dfg_tensor **xs, int n, dfg_coll_op op, int world) {
    return allreduce_node(g, xs, n, coll_attrs(op, world));
}

dfg_status dfg_allreduce_last(dfg_graph *g, dfg_tensor **xs, int n, dfg_coll_op op, int world) {
    dfg_attrs a = coll_attrs(op, world);
    a.collective.last_repeat = 1;
    return allreduce_node(g, xs, n, a);
}

dfg_tensor *dfg_allreduce(dfg_graph *g, dfg_tensor *x, dfg_coll_op op, int world) {
    dfg_tensor *xs[1] = {x};
    if (dfg_allreduce_n(g, xs, 1, op, world)) return g ? g->poison : NULL;
    return xs[0];
}

dfg_tensor *dfg_all_gather(dfg_graph *g, dfg_tensor *x, int world) {
    dfg_attrs a = coll_attrs(DFG_COLL_SUM, world);
    return dfg_op_out(g, DFG_OP_ALL_GATHER, &x, 1, &a);
}

dfg_tensor *dfg_rank(dfg_graph *g, int world) {
    dfg_attrs a = coll_attrs(DFG_COLL_SUM, world);
    return dfg_op_out(g, DFG_OP_RANK, NULL, 0, &a);
}
