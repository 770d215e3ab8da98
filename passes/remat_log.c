/* remat_log.c - remat's decisions as a plan file keeps them (dfg_remat_log, plan.h): recorded
 * once the search ends, and applied in place of the search when a plan is loaded, so that a
 * plan is searched for once, by dfg compile. Applying them checks what it can on its own (ids in
 * range, shapes by the ops' own rules, each graph's order a permutation that runs producers
 * first); the loader then requires the schedule and memory plan to equal the recorded ones. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static uint32_t key_of(const dfg_node *n) { return (uint32_t)n->out[0]->id; }

static bool record_copies(dfg_plan *plan, dfg_remat_log *log, dfg_node *const *copies, const dfg_node *const *orig,
                          const uint32_t *const *made_with) {
    for (uint32_t i = 0; i < log->n_copies; i++) {
        const dfg_node *k = copies[i];
        dfg_remat_copy *c = &log->copies[i];
        *c = (dfg_remat_copy){(uint32_t)k->graph->id, key_of(orig[i]), k->after ? key_of(k->after) + 1 : 0,
                              (uint32_t)k->n_in, dfg_plan_alloc(plan, sizeof(uint32_t) * (size_t)k->n_in)};
        if (!c->in) return false;
        memcpy(c->in, made_with[i], sizeof(uint32_t) * (size_t)k->n_in); /* later copies did not exist yet */
    }
    return true;
}

/* Reads of a copy's output that the node did not have when it was made (every such read of a
 * node remat did not make, and a copy's reads that later copies took over): the redirects, in
 * graph order. made_with[tensor id of a copy's first output] is what that copy read when made. */
static bool record_redirects(const dfg_program *p, dfg_plan *plan, dfg_remat_log *log, const uint32_t *const *made_with) {
    uint32_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int gi = 0; gi < p->n_graphs; gi++)
            for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
                const dfg_node *m = p->graphs[gi]->nodes[i];
                const uint32_t *was = made_with[m->out[0]->id];
                for (int j = 0; j < m->n_in; j++) {
                    const dfg_node *src = m->in[j]->producer;
                    if (!src || m->in[j]->kind != DFG_TEMP || !made_with[src->out[0]->id]) continue;
                    if (was && was[j] == (uint32_t)m->in[j]->id) continue; /* read since it was made */
                    if (pass) log->redirects[n] = (dfg_remat_redirect){key_of(m), (uint32_t)j, (uint32_t)m->in[j]->id};
                    n++;
                }
            }
        if (!pass && !(log->redirects = dfg_plan_alloc(plan, sizeof(dfg_remat_redirect) * (size_t)n))) return false;
    }
    log->n_redirects = n;
    return true;
}

dfg_status dfg_remat_log_record(dfg_program *p, dfg_node *const *copies, const dfg_node *const *orig,
                                const uint32_t *const *made_with, int n_copies, int rounds, int batched_rounds) {
    dfg_plan *plan = p->plan;
    dfg_remat_log *log = dfg_plan_alloc(plan, sizeof(*log));
    const uint32_t **made = calloc((size_t)p->n_tensors + 1, sizeof(*made)); /* [copy's first output] */
    bool ok = log && made;
    if (ok) {
        *log = (dfg_remat_log){.n_copies = (uint32_t)n_copies, .n_graphs = (uint32_t)p->n_graphs, .rounds = rounds,
                               .batched_rounds = batched_rounds};
        log->copies = dfg_plan_alloc(plan, sizeof(dfg_remat_copy) * (size_t)n_copies);
        log->n_order = dfg_plan_alloc(plan, sizeof(uint32_t) * (size_t)p->n_graphs);
        log->order = dfg_plan_alloc(plan, sizeof(uint32_t *) * (size_t)p->n_graphs);
        ok = log->copies && log->n_order && log->order;
    }
    for (int i = 0; ok && i < n_copies; i++) made[copies[i]->out[0]->id] = made_with[i];
    ok = ok && record_copies(plan, log, copies, orig, made_with) && record_redirects(p, plan, log, made);
    for (int gi = 0; ok && gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        log->n_order[gi] = (uint32_t)g->n_nodes;
        ok = (log->order[gi] = dfg_plan_alloc(plan, sizeof(uint32_t) * (size_t)g->n_nodes)) != NULL;
        for (int i = 0; ok && i < g->n_nodes; i++) log->order[gi][i] = key_of(g->nodes[i]);
    }
    free((void *)made);
    if (!ok) return DFG_ERR_NOMEM;
    plan->remat_log = log;
    return DFG_OK;
}

/* ---------------------------------------------------------------- applying a recorded log */
#define BAD(...) dfg_program_err(p, DFG_ERR_FORMAT, "remat: the recorded decisions do not fit this program: " __VA_ARGS__)

/* The staged node whose first output is tensor key, or NULL. */
static dfg_node *node_of(const dfg_program *p, uint32_t key) {
    if (key >= (uint32_t)p->n_tensors) return NULL;
    const dfg_tensor *t = p->tensors[key];
    dfg_node *n = t->kind == DFG_TEMP ? t->producer : NULL;
    return n && n->out[0] == t ? n : NULL;
}

static dfg_status replay_copies(dfg_program *p, const dfg_remat_log *log) {
    dfg_tensor *in[16];
    for (uint32_t i = 0; i < log->n_copies; i++) {
        const dfg_remat_copy *c = &log->copies[i];
        dfg_node *src = node_of(p, c->src), *after = c->after ? node_of(p, c->after - 1) : NULL;
        if (c->graph >= (uint32_t)p->n_graphs || !src || src->graph != p->graphs[c->graph] || (c->after && !after))
            return BAD("copy %u names a node or graph this program does not have", i);
        if (c->n_in != (uint32_t)src->n_in || c->n_in > 16 || (src->flags & DFG_NF_RECOMPUTED) || dfg_ops[src->op].random)
            return BAD("copy %u of '%s' cannot be made", i, src->name);
        for (uint32_t j = 0; j < c->n_in; j++) {
            if (c->in[j] >= (uint32_t)p->n_tensors) return BAD("copy %u reads tensor %u of %d", i, c->in[j], p->n_tensors);
            in[j] = p->tensors[c->in[j]];
        }
        dfg_node *copy = dfg_rw_add(src->graph, src->op, in, src->n_in, src->attr, src->n_out);
        if (!copy) return p->status ? p->status : BAD("copy %u of '%s' is refused by its op", i, src->name);
        copy->flags |= DFG_NF_RECOMPUTED | DFG_NF_BACKWARD;
        for (int k = 0; k < src->n_out; k++) copy->out[k]->flags |= src->out[k]->flags & DFG_TF_WORKSPACE;
        copy->after = after;
    }
    return DFG_OK;
}

static dfg_status replay_redirects(dfg_program *p, const dfg_remat_log *log) {
    for (uint32_t r = 0; r < log->n_redirects; r++) {
        const dfg_remat_redirect *x = &log->redirects[r];
        dfg_node *m = node_of(p, x->reader);
        if (!m || x->slot >= (uint32_t)m->n_in || x->tensor >= (uint32_t)p->n_tensors) return BAD("redirect %u is out of range", r);
        dfg_tensor *old = m->in[x->slot], *t = p->tensors[x->tensor];
        if (!(t->producer && (t->producer->flags & DFG_NF_RECOMPUTED)) || t->producer->graph != m->graph ||
            t->dtype != old->dtype || !dfg_shape_equal(t->shape, old->shape))
            return BAD("'%s' cannot read '%s' for '%s'", m->name, t->name, old->name);
        m->in[x->slot] = t;
    }
    return DFG_OK;
}

/* The recorded order of graph g: a permutation of its nodes in which every node follows the
 * producers of what it reads and the node it must follow, so no redirect made a cycle. */
static dfg_status replay_order(dfg_program *p, dfg_graph *g, const uint32_t *order, uint32_t n, int *pos) {
    if (n != (uint32_t)g->n_nodes) return BAD("graph '%s' has %d nodes, the record orders %u", g->name, g->n_nodes, n);
    /* -2: not a node of g's list (a node that names g but was taken out of it); -1: not placed yet */
    for (int t = 0; t < p->n_tensors; t++) pos[t] = -2;
    for (int i = 0; i < g->n_nodes; i++) pos[g->nodes[i]->out[0]->id] = -1;
    for (uint32_t i = 0; i < n; i++) {
        dfg_node *m = node_of(p, order[i]);
        if (!m || m->graph != g || pos[m->out[0]->id] != -1) return BAD("graph '%s': position %u is not a node of it", g->name, i);
        pos[m->out[0]->id] = (int)i;
    }
    for (uint32_t i = 0; i < n; i++) {
        dfg_node *m = node_of(p, order[i]);
        for (int j = 0; j < m->n_in; j++) {
            const dfg_node *src = m->in[j]->producer;
            if (src && src->graph == g && m->in[j]->kind == DFG_TEMP && (pos[src->out[0]->id] < 0 || pos[src->out[0]->id] >= (int)i))
                return BAD("graph '%s': '%s' comes before '%s', which makes what it reads", g->name, m->name, src->name);
        }
        /* as verify requires: the node it must follow is of this graph and earlier (a mutated
         * record can give a copy a node of another graph to follow) */
        if (m->after && (m->after->graph != g || pos[m->after->out[0]->id] < 0 || pos[m->after->out[0]->id] >= (int)i))
            return BAD("graph '%s': '%s' comes before '%s'", g->name, m->name, m->after->name);
    }
    for (uint32_t i = 0; i < n; i++) g->nodes[i] = node_of(p, order[i]);
    dfg_rw_renumber(g);
    dfg_rw_refresh_views(g);
    return DFG_OK;
}

dfg_status dfg_remat_replay(dfg_program *p, const dfg_remat_log *log) {
    if (log->n_graphs != (uint32_t)p->n_graphs) return BAD("%u graphs recorded, the program has %d", log->n_graphs, p->n_graphs);
    dfg_status st = replay_copies(p, log);
    if (!st) st = replay_redirects(p, log);
    int *pos = st ? NULL : malloc(sizeof(int) * ((size_t)p->n_tensors + 1));
    if (!st && !pos) st = dfg_program_err(p, DFG_ERR_NOMEM, "remat: out of memory");
    for (int gi = 0; !st && gi < p->n_graphs; gi++) st = replay_order(p, p->graphs[gi], log->order[gi], log->n_order[gi], pos);
    free(pos);
    if (st) return st;
    p->plan->remat = (dfg_remat_result){.ran = true, .fits = true, .recomputed = (int)log->n_copies,
                                        .rounds = log->rounds, .batched_rounds = log->batched_rounds};
    return DFG_OK;
}
