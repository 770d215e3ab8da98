/* verify.c - checks the invariants every pass must keep, on the program as it is now:
 * stages (each graph staged once, unique names, scopes that name real stages), SSA (every
 * TEMP made by exactly one earlier node of its graph), the version discipline of persistent
 * tensors (a node reads the current value; a write consumes the current value), scoped
 * tensors used inside their scope, and every node's outputs as its shape rule says. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static dfg_tensor *root_of(dfg_tensor *t) { return t->version_of ? t->version_of : t; }

static dfg_tensor *value_base(dfg_tensor *t) {
    while (t->view_of) t = t->view_of;
    return t;
}

static int stage_by_name(const dfg_program *p, const char *name) {
    for (int s = 0; s < p->n_stages; s++)
        if (!strcmp(p->stages[s].name, name)) return s;
    return -1;
}

static dfg_status verify_stages(dfg_program *p) {
    for (int s = 0; s < p->n_stages; s++) {
        for (int r = 0; r < s; r++) {
            if (!strcmp(p->stages[r].name, p->stages[s].name))
                return dfg_program_err(p, DFG_ERR_ARG, "verify: two stages are named '%s'", p->stages[s].name);
            if (p->stages[s].kind == DFG_STAGE_GRAPH && p->stages[r].graph == p->stages[s].graph)
                return dfg_program_err(p, DFG_ERR_ARG, "verify: graph '%s' is staged twice (stages %d and %d)",
                                         p->stages[s].graph->name, r, s);
        }
    }
    for (int s = 0; s < p->n_stages; s++) { /* a variable number of runs: each run is the same graph */
        const dfg_stage *st = &p->stages[s];
        const char *how = st->until ? "ends early (stage_until)" : "runs a count of times (stage_runs)";
        for (int i = 0; (st->until || st->runs) && i < st->graph->n_nodes; i++) {
            const dfg_node *n = st->graph->nodes[i];
            if (dfg_node_is_late_allreduce(n))
                return dfg_program_err(p, DFG_ERR_ARG, "verify: stage '%s' %s, but node '%s' runs on its last repeat "
                                       "only, which it may never reach", st->name, how, n->name);
            /* the ranks' counts may differ; rank only reads this process's index, it waits for no one */
            if (dfg_op_flag(n->op, DFG_OPF_COLLECTIVE) && n->op != DFG_OP_RANK)
                return dfg_program_err(p, DFG_ERR_ARG, "verify: stage '%s' %s, but node '%s' (%s) is a collective, which "
                                       "every rank must run equally often", st->name, how, n->name, dfg_op_name(n->op));
        }
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!t->scope_first) continue;
        int a = stage_by_name(p, t->scope_first), b = stage_by_name(p, t->scope_last);
        if (a < 0 || b < 0 || a > b)
            return dfg_program_err(p, DFG_ERR_ARG, "verify: the scope of '%s' (%s .. %s) does not name two stages in order",
                                     t->name, t->scope_first, t->scope_last);
    }
    for (int s = 0; s < p->n_stages; s++) { /* what decides a stage's runs is read when the stage runs */
        const dfg_stage *st = &p->stages[s];
        const dfg_tensor *by[3] = {st->until, st->when, st->runs};
        for (int k = 0; k < 3; k++)
            if (by[k] && by[k]->scope_first &&
                (s < stage_by_name(p, by[k]->scope_first) || s > stage_by_name(p, by[k]->scope_last)))
                return dfg_program_err(p, DFG_ERR_ARG, "verify: stage '%s' runs by '%s', which lives only in stages %s .. %s",
                                       st->name, by[k]->name, by[k]->scope_first, by[k]->scope_last);
    }
    return DFG_OK;
}

/* Is stage s inside the scope of persistent tensor t? */
static bool in_scope(const dfg_program *p, const dfg_tensor *t, int s) {
    if (!t->scope_first || s < 0) return true;
    return s >= stage_by_name(p, t->scope_first) && s <= stage_by_name(p, t->scope_last);
}

typedef struct {
    dfg_program *p;
    const dfg_graph *g;
    int stage;
    bool *defined;          /* [tensor id] made by an earlier node */
    dfg_tensor **current;   /* [tensor id] current version of a persistent tensor (NULL: itself) */
} walk;

static dfg_status fail_node(walk *w, const dfg_node *n, const char *what, const dfg_tensor *t) {
    return dfg_program_err(w->p, DFG_ERR_STATE, "verify: graph '%s', node %d '%s' (%s): %s '%s'", w->g->name, n->id,
                             n->name, dfg_op_name(n->op), what, t ? t->name : "NULL");
}

static dfg_status check_input(walk *w, const dfg_node *n, dfg_tensor *x) {
    const dfg_program *p = w->p;
    if (!x || x->id < 0 || x->id >= p->n_tensors || p->tensors[x->id] != x) return fail_node(w, n, "foreign input", x);
    if (x->flags & DFG_TF_DEAD) return fail_node(w, n, "reads a tensor removed by dce", x);
    if (x->kind == DFG_TEMP && (x->graph != w->g || !w->defined[x->id]))
        return fail_node(w, n, "reads a temporary that no earlier node of this graph makes", x);
    dfg_tensor *base = value_base(x);
    if (base->kind == DFG_TEMP && !base->version_of) return DFG_OK;
    dfg_tensor *root = root_of(base), *cur = w->current[root->id] ? w->current[root->id] : root;
    if (base != cur) return fail_node(w, n, "reads a value overwritten before it (stale version of)", root);
    if (!in_scope(p, root, w->stage)) return fail_node(w, n, "uses outside its declared scope", root);
    return DFG_OK;
}

/* Re-runs the op's shape rule and compares with the outputs the node has. */
static dfg_status check_outputs(walk *w, const dfg_node *n) {
    dfg_graph *g = (dfg_graph *)w->g;
    dfg_out_spec *spec = calloc((size_t)n->n_out, sizeof(*spec));
    if (!spec) return dfg_program_err(w->p, DFG_ERR_NOMEM, "verify: out of memory");
    for (int k = 0; k < n->n_out; k++) spec[k].alias = -1;
    dfg_status st = g->status ? g->status : dfg_ops[n->op].infer(g, n, spec);
    for (int k = 0; k < n->n_out && !st; k++) {
        dfg_tensor *o = n->out[k];
        const dfg_out_spec *s = &spec[k];
        bool shares = s->alias >= 0 && o->storage == n->in[s->alias]->storage;
        if (o->producer != n || o->producer_slot != k || o->graph != g || w->defined[o->id])
            st = fail_node(w, n, "output is not made by this node alone", o);
        else if (o->dtype != s->dtype || !dfg_shape_equal(o->shape, s->shape))
            st = fail_node(w, n, "output differs from the op's shape rule", o);
        else if ((s->alias >= 0) != (o->storage != o) || (s->alias >= 0 && !shares) ||
                 (s->writes != (o->version_of != NULL)))
            st = fail_node(w, n, "output's storage sharing differs from the op's rule", o);
        if (st) break;
        w->defined[o->id] = true;
        if (s->writes) w->current[o->version_of->id] = o;
    }
    free(spec);
    if (st && !w->p->status) dfg_program_err(w->p, st, "verify: %s", g->error);
    return st;
}

static dfg_status verify_graph(dfg_program *p, const dfg_graph *g, bool *defined, dfg_tensor **current) {
    walk w = {p, g, dfg_graph_stage_index(p, g), defined, current};
    memset(defined, 0, sizeof(*defined) * (size_t)p->n_tensors);
    memset(current, 0, sizeof(*current) * (size_t)p->n_tensors);
    for (int i = 0; i < g->n_nodes; i++) {
        const dfg_node *n = g->nodes[i];
        if (n->id != i || n->graph != g || (unsigned)n->op >= DFG_OP_COUNT)
            return dfg_program_err(p, DFG_ERR_STATE, "verify: graph '%s': node at %d is misnumbered or foreign",
                                     g->name, i);
        if (n->after && (n->after->graph != g || n->after->id >= i || g->nodes[n->after->id] != n->after))
            return dfg_program_err(p, DFG_ERR_STATE, "verify: graph '%s', node %d '%s' must run after '%s'", g->name, i,
                                     n->name, n->after->name);
        for (int j = 0; j < n->n_in; j++) {
            dfg_status st = check_input(&w, n, n->in[j]);
            if (st) return st;
        }
        dfg_status st = check_outputs(&w, n);
        if (st) return st;
    }
    return DFG_OK;
}

/* Every stage a rollout declaration names must exist (graph/declare.c cannot know: stages may
 * come after it). */
static dfg_status verify_declarations(dfg_program *p) {
    for (int i = 0; i < p->decl.n_rollout_stages; i++) {
        bool found = false;
        for (int s = 0; s < p->n_stages && !found; s++) found = !strcmp(p->stages[s].name, p->decl.rollout_stages[i]);
        if (!found)
            return dfg_program_err(p, DFG_ERR_ARG, "verify: declare_rollout names stage '%s', which the program does not have",
                                   p->decl.rollout_stages[i]);
    }
    return DFG_OK;
}

/* A plan for a target runs every node with that target's kernel: an op without one (its ops.def
 * cuda column is `none`) refuses the compile here, naming it, rather than failing on the GPU. */
static dfg_status verify_kernels(dfg_program *p, dfg_target target) {
    if (target != DFG_TARGET_CUDA) return DFG_OK; /* every op has a CPU kernel (ops.def) */
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *n = p->graphs[gi]->nodes[i];
            if (n->op < DFG_OP_COUNT && !dfg_ops[n->op].has_cuda)
                return dfg_program_err(p, DFG_ERR_UNSUPPORTED,
                                       "verify: op '%s' (node '%s' in graph '%s') has no CUDA kernel yet; compile for "
                                       "--target cpu, or add its kernel (docs/ARCHITECTURE.md, adding an op)",
                                       dfg_op_name(n->op), n->name, p->graphs[gi]->name);
        }
    return DFG_OK;
}

/* Every collective of the program was built for one world: the plan runs in runs of that size. */
static dfg_status verify_world(dfg_program *p) {
    int world = 0;
    const dfg_node *first = NULL;
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *n = p->graphs[gi]->nodes[i];
            if (!dfg_op_flag(n->op, DFG_OPF_COLLECTIVE)) continue;
            if (!first) first = n, world = n->attr->collective.world;
            else if (n->attr->collective.world != world)
                return dfg_program_err(p, DFG_ERR_ARG, "verify: %s '%s' was built for %d ranks and %s '%s' for %d: a "
                                       "program runs in one world", dfg_op_name(first->op), first->name, world,
                                       dfg_op_name(n->op), n->name, n->attr->collective.world);
        }
    return DFG_OK;
}

dfg_status dfg_pass_verify(dfg_program *p, const dfg_options *o) {
    dfg_status st = verify_stages(p);
    if (!st) st = verify_world(p);
    if (!st) st = verify_declarations(p);
    if (!st && o) st = verify_kernels(p, o->target);
    if (st) return st;
    bool *defined = malloc(sizeof(*defined) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    dfg_tensor **current = malloc(sizeof(*current) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    if (!defined || !current) st = dfg_program_err(p, DFG_ERR_NOMEM, "verify: out of memory");
    for (int gi = 0; gi < p->n_graphs && !st; gi++) st = verify_graph(p, p->graphs[gi], defined, current);
    free(defined);
    free(current);
    return st;
}
