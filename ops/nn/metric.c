/* metric.c - dfg_metric: a scalar copied into a persistent f32 metric after every step. */
#include <stdio.h>
#include <string.h>

#include "../op.h"
#include "dfg_nn.h"

/* The metric state "metric.<name>" set from x in g; NULL (the graph's error set) when it fails. */
static dfg_tensor *metric(dfg_graph *g, const char *name, dfg_tensor *x) {
    if (g->status) return NULL;
    char full[256], db[160];
    if (!name || !*name || strlen(name) > 200) return dfg_graph_err(g, DFG_ERR_ARG, "metric: a short name is required"), NULL;
    if (!x || (x->flags & DFG_TF_POISON) || dfg_shape_numel(x->shape) != 1 || !dfg_is_float(x->dtype))
        return dfg_graph_err(g, DFG_ERR_SHAPE, "metric '%s': needs a float tensor of one element, got %s", name,
                             dfg_tensor_desc(x, db, sizeof(db))), NULL;
    snprintf(full, sizeof(full), "metric.%s", name);
    dfg_program *p = g->program;
    dfg_tensor *m = dfg_find(p, full);
    if (!m) m = dfg_state(p, full, DFG_F32, DFG_SCALAR, DFG_ROLE_METRIC, dfg_init_zeros());
    if (!m || m->role != DFG_ROLE_METRIC)
        return dfg_graph_err(g, DFG_ERR_ARG, "metric '%s': %s", name,
                             m ? "the name is taken by a tensor that is not a metric" : p->error), NULL;
    if (x->shape.rank != 0) x = dfg_reshape(g, x, DFG_SCALAR);
    if (x->dtype != DFG_F32) x = dfg_cast(g, x, DFG_F32);
    dfg_assign(g, m, x);
    return g->status ? NULL : m;
}

dfg_status dfg_metric(dfg_graph *g, const char *name, dfg_tensor *x) {
    if (!g) return DFG_ERR_ARG;
    metric(g, name, x);
    return g->status;
}

dfg_status dfg_metric_nullable(dfg_graph *g, const char *name, dfg_tensor *x) {
    if (!g) return DFG_ERR_ARG;
    dfg_tensor *m = metric(g, name, x);
    if (m) m->flags |= DFG_TF_NULLABLE;
    return g->status;
}
