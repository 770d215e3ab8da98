/* rewrite.c - graph surgery shared by the passes that add nodes to a sealed program (fuse,
 * remat): building nodes with the ops' own shape rules, moving them to where they must run, and
 * redirecting the readers of a tensor to its replacement. */
#include <string.h>

#include "plan.h"

dfg_node *dfg_rw_add(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr, int n_out) {
    g->rewriting = true;
    dfg_node *n = dfg_node_add(g, op, in, n_in, attr, n_out);
    g->rewriting = false;
    return n;
}

void dfg_rw_renumber(dfg_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->id = i;
}

void dfg_rw_move_tail(dfg_graph *g, int first_new, int pos) {
    int n_new = g->n_nodes - first_new;
    if (n_new <= 0 || pos >= first_new) return;
    dfg_node *tmp[64];
    while (n_new > 0) { /* in slices, so no allocation is needed */
        int k = n_new < 64 ? n_new : 64;
        memcpy(tmp, g->nodes + first_new, sizeof(*tmp) * (size_t)k);
        memmove(g->nodes + pos + k, g->nodes + pos, sizeof(*tmp) * (size_t)(first_new - pos));
        memcpy(g->nodes + pos, tmp, sizeof(*tmp) * (size_t)k);
        pos += k, first_new += k, n_new -= k;
    }
    dfg_rw_renumber(g);
}

/* Keeps views (reshape, detach: output 0 views input 0) pointing at the storage of what they
 * view after an input changed, in node order so that views of views follow. */
void dfg_rw_refresh_views(dfg_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        dfg_node *n = g->nodes[i];
        if (!n->out[0]->view_of) continue;
        n->out[0]->view_of = n->in[0];
        n->out[0]->storage = n->in[0]->storage;
    }
}

void dfg_rw_replace_uses(dfg_program *p, dfg_graph *g, dfg_tensor *old, dfg_tensor *repl) {
    for (int i = 0; i < g->n_nodes; i++) {
        dfg_node *n = g->nodes[i];
        if (n == repl->producer) continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == old) n->in[j] = repl;
    }
    /* the replacement takes over what the host and the report know the old tensor by */
    if (old->flags & DFG_TF_OUTPUT) {
        HASH_DEL(p->by_name, old);
        char *name = old->name;
        old->name = repl->name;
        repl->name = name;
        HASH_ADD_KEYPTR(hh, p->by_name, repl->name, strlen(repl->name), repl);
        old->flags &= ~(uint32_t)DFG_TF_OUTPUT;
        repl->flags |= DFG_TF_OUTPUT;
    }
    if (old->flags & DFG_TF_GRAD) repl->flags |= DFG_TF_GRAD;
    if (old->grad_wrt && !repl->grad_wrt) repl->grad_wrt = old->grad_wrt;
    /* gradients of old are gradients of repl: a later fusion whose input is repl (linear_logprob
     * after a bias_gelu that made its hidden states) finds them by grad_wrt */
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->grad_wrt == old) p->tensors[i]->grad_wrt = repl;
    dfg_rw_refresh_views(g);
}

void dfg_rw_remove(dfg_graph *g, dfg_node *n) {
    int at = n->id;
    if (at < 0 || at >= g->n_nodes || g->nodes[at] != n) return;
    memmove(g->nodes + at, g->nodes + at + 1, sizeof(*g->nodes) * (size_t)(g->n_nodes - at - 1));
    g->n_nodes--;
    for (int k = 0; k < n->n_out; k++) n->out[k]->flags |= DFG_TF_DEAD;
    dfg_rw_renumber(g);
}
