/* node.c - the op half of node construction: every node of every graph is made here, from the
 * op table (arity, shape rule) and the node's attributes; the graph layer (graph/graph.c) does
 * the rest (input versions, output tensors, appending). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

dfg_status dfg_node_fail(dfg_graph *g, const dfg_node *n, dfg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dfg_status r = dfg_graph_node_failv(g, n, dfg_op_name(n->op), s, fmt, ap);
    va_end(ap);
    return r;
}

dfg_node *dfg_node_add(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr, int n_out) {
    if (!g || g->status) return NULL;
    dfg_program *p = g->program;
    if ((unsigned)op >= DFG_OP_COUNT) {
        dfg_graph_err(g, DFG_ERR_ARG, "unknown op id %d", (int)op);
        return NULL;
    }
    const dfg_op_info *info = &dfg_ops[op];
    if ((info->n_in >= 0 && n_in != info->n_in) || n_in < 0 || (info->n_out >= 0 && n_out != info->n_out) || n_out < 1) {
        dfg_graph_err(g, DFG_ERR_ARG, "%s: called with %d inputs and %d outputs", info->name, n_in, n_out);
        return NULL;
    }
    dfg_node *n = dfg_graph_node_new(g, op, info->name, n_in, n_out);
    if (!n) return NULL;
    dfg_attrs *a = dfg_arena_alloc(&p->arena, sizeof(*a));
    dfg_out_spec *spec = dfg_arena_alloc(&p->arena, sizeof(*spec) * (size_t)n_out);
    if (!a || !spec) {
        dfg_graph_err(g, DFG_ERR_NOMEM, "%s: out of memory", info->name);
        return NULL;
    }
    if (attr) *a = *attr;
    n->attr = a;
    if (!dfg_graph_node_inputs(g, n, info->name, in)) return NULL;
    for (int k = 0; k < n_out; k++) spec[k].alias = -1;
    if (info->infer(g, n, spec)) {
        if (!g->status) dfg_node_fail(g, n, DFG_ERR_SHAPE, "shape rule failed");
        return NULL;
    }
    return dfg_graph_node_finish(g, n, info->name, spec) ? NULL : n;
}

dfg_tensor *dfg_op_out(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr) {
    if (!g) return NULL;
    dfg_node *n = dfg_node_add(g, op, in, n_in, attr, 1);
    return n ? n->out[0] : g->poison;
}
