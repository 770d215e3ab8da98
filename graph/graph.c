/* graph.c - the graph half of node construction: input resolution (versions of persistent
 * tensors), checks of what an op's shape rule promised, output creation, and sticky errors
 * naming the op and its inputs. The op half (the registry, shape rules, attributes) is
 * ops/node.c, which builds every node through these calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

bool dfg_graph_latest_reserve(dfg_graph *g, int id);

static dfg_tensor *root_of(dfg_tensor *t) { return t->version_of ? t->version_of : t; }

/* The tensor whose value t reads: views are followed to what they view. */
static dfg_tensor *value_base(dfg_tensor *t) {
    while (t->view_of) t = t->view_of;
    return t;
}

static dfg_tensor *latest_version(const dfg_graph *g, dfg_tensor *root) {
    if (root->id >= 0 && root->id < g->cap_latest && g->latest[root->id]) return g->latest[root->id];
    return root;
}

static bool in_program(const dfg_program *p, const dfg_tensor *t) {
    return t->id >= 0 && t->id < p->n_tensors && p->tensors[t->id] == t;
}

/* A persistent tensor stands for its current value in g; anything else must belong to g and
 * must not read a value that has since been overwritten. */
static dfg_tensor *resolve_input(dfg_graph *g, const char *opn, int slot, dfg_tensor *t) {
    char db[160];
    if (!t) {
        dfg_graph_err(g, DFG_ERR_ARG, "%s: input #%d is NULL (did an earlier call fail?)", opn, slot);
        return NULL;
    }
    if (t->flags & DFG_TF_POISON) {
        dfg_graph_err(g, DFG_ERR_STATE, "%s: input #%d comes from graph '%s', which has an error: %s", opn, slot,
                        t->graph ? t->graph->name : "?", t->graph ? t->graph->error : "");
        return NULL;
    }
    if (!in_program(g->program, t)) {
        dfg_graph_err(g, DFG_ERR_ARG, "%s: input #%d '%s' belongs to another program", opn, slot, t->name);
        return NULL;
    }
    if (g->rewriting) return t;
    if (t->kind != DFG_TEMP) return latest_version(g, t);
    if (t->graph != g) {
        dfg_graph_err(g, DFG_ERR_ARG,
                        "%s: input #%d '%s' is computed in graph '%s', not '%s'; stages share values only "
                        "through persistent tensors",
                        opn, slot, t->name, t->graph->name, g->name);
        return NULL;
    }
    dfg_tensor *base = value_base(t);
    if (base->kind != DFG_TEMP || base->version_of) {
        dfg_tensor *cur = latest_version(g, root_of(base));
        if (cur != base) {
            dfg_graph_err(g, DFG_ERR_STATE,
                            "%s: input #%d %s reads '%s' as it was before node '%s' overwrote it; read it "
                            "after the write",
                            opn, slot, dfg_tensor_desc(t, db, sizeof(db)), root_of(base)->name,
                            cur->producer ? cur->producer->name : "?");
            return NULL;
        }
    }
    return t;
}

dfg_status dfg_graph_node_failv(dfg_graph *g, const dfg_node *n, const char *op_name, dfg_status s, const char *fmt,
                                va_list ap) {
    if (g->status) return g->status;
    char reason[512], ins[480] = "", db[160];
    vsnprintf(reason, sizeof(reason), fmt, ap);
    size_t used = 0;
    for (int i = 0; i < n->n_in && used < sizeof(ins); i++)
        used += (size_t)snprintf(ins + used, sizeof(ins) - used, "%s#%d %s", i ? ", " : "", i,
                                 dfg_tensor_desc(n->in[i], db, sizeof(db)));
    return dfg_graph_err(g, s, "%s '%s' in graph '%s': %s%s%s", op_name, n->name, g->name, reason,
                           n->n_in ? "; inputs: " : "", ins);
}

static dfg_status node_fail(dfg_graph *g, const dfg_node *n, const char *op_name, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static dfg_status node_fail(dfg_graph *g, const dfg_node *n, const char *op_name, dfg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dfg_status r = dfg_graph_node_failv(g, n, op_name, s, fmt, ap);
    va_end(ap);
    return r;
}

static bool push_node(dfg_graph *g, dfg_node *n) {
    if (g->n_nodes == g->cap_nodes) {
        int nc = g->cap_nodes ? g->cap_nodes * 2 : 64;
        dfg_node **nn = realloc(g->nodes, (size_t)nc * sizeof(*nn));
        if (!nn) return false;
        g->nodes = nn;
        g->cap_nodes = nc;
    }
    g->nodes[g->n_nodes++] = n;
    return true;
}

/* Checks that the output spec k of node n is consistent before tensors are created. */
static dfg_status check_spec(dfg_graph *g, const dfg_node *n, const char *opn, const dfg_out_spec *out, int k) {
    const dfg_out_spec *s = &out[k];
    if ((unsigned)s->dtype >= DFG_DTYPE_COUNT || s->shape.rank < 0 || s->shape.rank > DFG_MAX_RANK)
        return node_fail(g, n, opn, DFG_ERR_SHAPE, "output #%d has an invalid dtype or rank", k);
    for (int i = 0; i < s->shape.rank; i++)
        if (s->shape.d[i] < 1) return node_fail(g, n, opn, DFG_ERR_SHAPE, "output #%d would have an empty dim", k);
    if (s->alias < 0) return DFG_OK;
    if (s->alias >= n->n_in) return node_fail(g, n, opn, DFG_ERR_ARG, "output #%d aliases a missing input", k);
    const dfg_tensor *src = n->in[s->alias];
    if (!s->writes) return DFG_OK;
    if (src->view_of || (src->kind == DFG_TEMP && !src->version_of))
        return node_fail(g, n, opn, DFG_ERR_ARG, "input #%d '%s' is written in place, so it must be a PARAM or STATE",
                             s->alias, src->name);
    const dfg_tensor *root = root_of((dfg_tensor *)src);
    if (root->kind != DFG_PARAM && root->kind != DFG_STATE)
        return node_fail(g, n, opn, DFG_ERR_ARG, "input #%d '%s' is a %s and cannot be written; only PARAM and STATE can",
                             s->alias, root->name, dfg_kind_name(root->kind));
    for (int j = 0; j < k; j++)
        if (out[j].writes && root_of(n->in[out[j].alias]) == root)
            return node_fail(g, n, opn, DFG_ERR_ARG, "'%s' is written twice by one node", root->name);
    return DFG_OK;
}

static dfg_tensor *make_output(dfg_graph *g, dfg_node *n, const dfg_out_spec *s, int k) {
    char nm[256];
    if (n->n_out == 1) snprintf(nm, sizeof(nm), "%s", n->name);
    else snprintf(nm, sizeof(nm), "%s.%d", n->name, k);
    dfg_tensor *t = dfg_tensor_new(g->program, DFG_TEMP, s->dtype, s->shape, nm);
    if (!t) return NULL;
    t->graph = g;
    t->producer = n;
    t->producer_slot = k;
    if (s->alias >= 0) {
        dfg_tensor *src = n->in[s->alias];
        t->storage = src->storage;
        if (s->writes) t->version_of = root_of(src);
        else t->view_of = src;
    }
    return t;
}

dfg_node *dfg_graph_node_new(dfg_graph *g, unsigned op, const char *op_name, int n_in, int n_out) {
    if (!g || g->status) return NULL;
    dfg_program *p = g->program;
    if (p->plan && !g->rewriting) {
        dfg_graph_err(g, DFG_ERR_STATE, "%s: program '%s' is compiled; build every node before dfg_compile", op_name,
                        p->name);
        return NULL;
    }
    dfg_node *n = dfg_arena_alloc(&p->arena, sizeof(*n));
    char nm[64];
    snprintf(nm, sizeof(nm), "%s#%d", op_name, g->n_nodes);
    if (!n || !(n->in = dfg_arena_alloc(&p->arena, sizeof(*n->in) * (size_t)(n_in ? n_in : 1))) ||
        !(n->out = dfg_arena_alloc(&p->arena, sizeof(*n->out) * (size_t)n_out)) || !(n->name = dfg_program_strdup(p, nm))) {
        dfg_graph_err(g, DFG_ERR_NOMEM, "%s: out of memory", op_name);
        return NULL;
    }
    n->id = g->n_nodes;
    n->op = op;
    n->graph = g;
    n->n_in = n_in;
    n->n_out = n_out;
    return n;
}

bool dfg_graph_node_inputs(dfg_graph *g, dfg_node *n, const char *op_name, dfg_tensor *const *in) {
    for (int i = 0; i < n->n_in; i++)
        if (!(n->in[i] = resolve_input(g, op_name, i, in[i]))) return false;
    return true;
}

dfg_status dfg_graph_node_finish(dfg_graph *g, dfg_node *n, const char *op_name, const dfg_out_spec *spec) {
    dfg_program *p = g->program;
    for (int k = 0; k < n->n_out; k++)
        if (check_spec(g, n, op_name, spec, k)) return g->status;
    for (int k = 0; k < n->n_out; k++) {
        if (!(n->out[k] = make_output(g, n, &spec[k], k)))
            return dfg_graph_err(g, p->status ? p->status : DFG_ERR_NOMEM, "%s: %s", op_name, p->error);
    }
    for (int k = 0; k < n->n_out && !g->rewriting; k++) { /* a pass's rewrite keeps the builder's view */
        dfg_tensor *t = n->out[k];
        if (!t->version_of) continue;
        if (!dfg_graph_latest_reserve(g, t->version_of->id))
            return dfg_graph_err(g, DFG_ERR_NOMEM, "%s: out of memory", op_name);
        g->latest[t->version_of->id] = t;
    }
    if (!push_node(g, n)) return dfg_graph_err(g, DFG_ERR_NOMEM, "%s: out of memory", op_name);
    return DFG_OK;
}
