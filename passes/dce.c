/* dce.c - dead-code elimination: a node is kept when it writes a persistent tensor (a state
 * update, a metric, an optimizer step), makes a dfg_output, or feeds a kept node; the rest is
 * removed and its outputs are marked dead. Sampling, for instance, never keeps logits that
 * nothing reads after the sample. */
#include <stdlib.h>

#include "plan.h"

static bool is_root(const dfg_node *n) {
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->version_of || (n->out[k]->flags & DFG_TF_OUTPUT)) return true;
    return false;
}

/* Marks live nodes from the last to the first: build order is topological, so every consumer
 * of a node's outputs comes after it. */
static void mark_live(const dfg_program *p, const dfg_graph *g, bool *live_t, bool *live_n) {
    (void)p;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const dfg_node *n = g->nodes[i];
        bool live = is_root(n);
        for (int k = 0; k < n->n_out && !live; k++) live = live_t[n->out[k]->id];
        if (!live) continue;
        live_n[i] = true;
        for (int j = 0; j < n->n_in; j++) live_t[n->in[j]->id] = true;
    }
}

static int sweep(dfg_graph *g, const bool *live_n) {
    int kept = 0, removed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        dfg_node *n = g->nodes[i];
        if (live_n[i]) {
            n->id = kept;
            g->nodes[kept++] = n;
            continue;
        }
        for (int k = 0; k < n->n_out; k++) n->out[k]->flags |= DFG_TF_DEAD;
        removed++;
    }
    g->n_nodes = kept;
    return removed;
}

dfg_status dfg_pass_dce(dfg_program *p, const dfg_options *o) {
    (void)o;
    int nt = p->n_tensors, removed = 0;
    bool *live_t = malloc(sizeof(*live_t) * (size_t)(nt ? nt : 1));
    bool *live_n = NULL;
    if (!live_t) return dfg_program_err(p, DFG_ERR_NOMEM, "dce: out of memory");
    for (int gi = 0; gi < p->n_graphs; gi++) {
        dfg_graph *g = p->graphs[gi];
        if (dfg_graph_stage_index(p, g) < 0) continue; /* never runs: nothing to plan */
        free(live_n);
        live_n = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(*live_n));
        if (!live_n) {
            free(live_t);
            return dfg_program_err(p, DFG_ERR_NOMEM, "dce: out of memory");
        }
        for (int i = 0; i < nt; i++) live_t[i] = false;
        mark_live(p, g, live_t, live_n);
        removed += sweep(g, live_n);
    }
    free(live_t);
    free(live_n);
    p->plan->report.n_nodes_removed += removed; /* dce also runs after every fusion */
    return DFG_OK;
}
