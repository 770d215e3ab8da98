/* schedule.c - a topological order per staged graph that keeps the live set small.
 *
 * Edges: a node comes after the producers of the temporaries it reads, and a node that writes a
 * persistent tensor comes after every other reader of the value it overwrites (including readers
 * through reshape views). Among the ready nodes, the greedy pick is the one that grows the live
 * bytes least (bytes it allocates minus bytes whose last reader it is), ties going to build
 * order. The greedy order is kept only when its peak is below the build order's. Then the
 * gradient buckets (dfg_allreduce_last) move up to just after their gradients' last write. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct {
    int n;
    int *succ_start, *succ; /* CSR successor lists by node index */
    int *n_pred;            /* unscheduled predecessors */
} dag;

/* A TEMP that owns its bytes, and that the schedule can therefore free. */
static bool transient_owner(const dfg_tensor *t) { return t->kind == DFG_TEMP && t->storage == t && !t->version_of; }
static const dfg_tensor *owner_of(const dfg_tensor *t) { return transient_owner(t->storage) ? t->storage : NULL; }

/* Appends the readers of version v (direct, and through reshape views of it) except w. */
static int add_readers(const dfg_consumers *c, const dfg_tensor *v, const dfg_node *w, int *out, int n_out) {
    for (int k = c->start[v->id]; k < c->start[v->id + 1]; k++) {
        const dfg_node *r = c->node[k];
        if (r == w) continue;
        out[n_out++] = r->id;
        if (r->out[0]->view_of == v) n_out = add_readers(c, r->out[0], w, out, n_out); /* reshape, detach */
    }
    return n_out;
}

/* The version of a persistent tensor that node n's output o overwrites. */
static const dfg_tensor *written_input(const dfg_node *n, const dfg_tensor *o) {
    for (int j = 0; j < n->n_in; j++) {
        const dfg_tensor *x = n->in[j];
        if (!x->view_of && (x == o->version_of || x->version_of == o->version_of)) return x;
    }
    return NULL;
}

/* Edges as (from, to) pairs, then CSR. Returns false when out of memory. */
static bool build_dag(const dfg_graph *g, const dfg_consumers *c, dag *d) {
    int n = g->n_nodes, cap = 64, m = 0;
    int *from = malloc(sizeof(int) * (size_t)cap), *to = malloc(sizeof(int) * (size_t)cap);
    int *tmp = malloc(sizeof(int) * (size_t)(c->start[g->program->n_tensors] + 1));
    bool ok = from && to && tmp;
#define EDGE(a, b)                                                                 \
    do {                                                                           \
        if (m == cap) {                                                            \
            cap *= 2;                                                              \
            int *nf = realloc(from, sizeof(int) * (size_t)cap), *nt = realloc(to, sizeof(int) * (size_t)cap); \
            if (nf) from = nf;                                                     \
            if (nt) to = nt;                                                       \
            if (!nf || !nt) { ok = false; break; }                                 \
        }                                                                          \
        from[m] = (a), to[m++] = (b);                                              \
    } while (0)
    for (int i = 0; i < n && ok; i++) {
        const dfg_node *nd = g->nodes[i];
        for (int j = 0; j < nd->n_in && ok; j++)
            if (nd->in[j]->kind == DFG_TEMP) EDGE(nd->in[j]->producer->id, i);
        if (nd->after && nd->after->graph == g && ok) EDGE(nd->after->id, i);
        for (int k = 0; k < nd->n_out && ok; k++) {
            const dfg_tensor *v = nd->out[k]->version_of ? written_input(nd, nd->out[k]) : NULL;
            if (!v) continue;
            int nr = add_readers(c, v, nd, tmp, 0);
            for (int r = 0; r < nr && ok; r++) EDGE(tmp[r], i);
        }
    }
#undef EDGE
    d->n = n;
    d->succ_start = calloc((size_t)n + 1, sizeof(int));
    d->succ = malloc(sizeof(int) * (size_t)(m ? m : 1));
    d->n_pred = calloc((size_t)(n ? n : 1), sizeof(int));
    ok = ok && d->succ_start && d->succ && d->n_pred;
    if (ok) {
        for (int e = 0; e < m; e++) d->succ_start[from[e] + 1]++, d->n_pred[to[e]]++;
        for (int i = 0; i < n; i++) d->succ_start[i + 1] += d->succ_start[i];
        int *fill = calloc((size_t)(n ? n : 1), sizeof(int));
        ok = fill != NULL;
        for (int e = 0; e < m && ok; e++) d->succ[d->succ_start[from[e]] + fill[from[e]]++] = to[e];
        free(fill);
    }
    free(from), free(to), free(tmp);
    return ok;
}

static void dag_free(dag *d) {
    free(d->succ_start), free(d->succ), free(d->n_pred);
}

/* Live-byte bookkeeping shared by the greedy choice and by measuring an order's peak. */
typedef struct {
    const dfg_graph *g;
    int64_t *reads_left; /* [tensor id] of owners: reads not yet scheduled (views count) */
} live_state;

static bool init_reads(const dfg_program *p, const dfg_graph *g, live_state *s) {
    s->g = g;
    s->reads_left = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(int64_t));
    if (!s->reads_left) return false;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            const dfg_tensor *o = owner_of(g->nodes[i]->in[j]);
            if (o) s->reads_left[o->id]++;
        }
    /* dfg_outputs are read after the step: their bytes never free inside the graph */
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->n_out; k++) {
            const dfg_tensor *t = g->nodes[i]->out[k];
            const dfg_tensor *o = owner_of(t);
            if (o && (t->flags & DFG_TF_OUTPUT)) s->reads_left[o->id] += (int64_t)1 << 40;
        }
    return true;
}

/* Bytes node n allocates, and bytes freed once it ran (given reads_left before it runs). */
static void node_delta(const live_state *s, const dfg_node *n, int64_t *alloc, int64_t *freed) {
    *alloc = 0, *freed = 0;
    for (int k = 0; k < n->n_out; k++)
        if (transient_owner(n->out[k])) {
            int64_t b = (int64_t)dfg_tensor_bytes(n->out[k]);
            *alloc += b;
            if (s->reads_left[n->out[k]->id] == 0) *freed += b; /* nothing reads it */
        }
    for (int j = 0; j < n->n_in; j++) {
        const dfg_tensor *o = owner_of(n->in[j]);
        if (!o) continue;
        int reads = 0, first = 1;
        for (int q = 0; q < n->n_in; q++) {
            if (owner_of(n->in[q]) != o) continue;
            reads++;
            if (q < j) first = 0;
        }
        if (first && s->reads_left[o->id] == reads) *freed += (int64_t)dfg_tensor_bytes(o);
    }
}

static void node_ran(live_state *s, const dfg_node *n) {
    for (int j = 0; j < n->n_in; j++) {
        const dfg_tensor *o = owner_of(n->in[j]);
        if (o) s->reads_left[o->id]--;
    }
}

/* Peak live bytes of the graph's transient tensors when run in `order`. */
static int64_t order_peak(const dfg_program *p, const dfg_graph *g, dfg_node *const *order, bool *ok) {
    live_state s;
    if (!init_reads(p, g, &s)) return *ok = false, 0;
    int64_t live = 0, peak = 0, a, f;
    for (int i = 0; i < g->n_nodes; i++) {
        node_delta(&s, order[i], &a, &f);
        live += a;
        peak = live > peak ? live : peak;
        live -= f;
        node_ran(&s, order[i]);
    }
    free(s.reads_left);
    return peak;
}

/* The nodes of g reading each owner (directly or through views), CSR by owner id: when a node
 * runs, only the readers of what it read can change their growth of live bytes. */
typedef struct {
    int *start, *node;
} readers_of;

static bool readers_build(const dfg_program *p, const dfg_graph *g, readers_of *r) {
    int nt = p->n_tensors, m = 0;
    r->start = calloc((size_t)nt + 2, sizeof(int));
    if (!r->start) return false;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            const dfg_tensor *o = owner_of(g->nodes[i]->in[j]);
            if (o) r->start[o->id + 2]++, m++;
        }
    for (int t = 0; t < nt; t++) r->start[t + 2] += r->start[t + 1];
    r->node = malloc(sizeof(int) * (size_t)(m ? m : 1));
    if (!r->node) return false;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            const dfg_tensor *o = owner_of(g->nodes[i]->in[j]);
            if (o) r->node[r->start[o->id + 1]++] = i;
        }
    return true; /* start[t] .. start[t + 1]: the readers of owner t */
}

/* Kahn's algorithm, choosing the ready node with the smallest growth of live bytes. A node's
 * growth depends only on the reads left of its inputs' owners, so it is kept between picks and
 * computed again only for the readers of what the last node read (the same choices as scoring
 * every ready node at every pick, which was most of a large program's schedule). */
static bool greedy_order(const dfg_program *p, const dfg_graph *g, const dag *d, dfg_node **order) {
    int n = g->n_nodes, n_ready = 0;
    int *ready = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *pred = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int64_t *score = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    bool *stale = malloc(sizeof(bool) * (size_t)(n ? n : 1));
    readers_of rd = {0};
    live_state s = {0};
    bool ok = ready && pred && score && stale && readers_build(p, g, &rd) && init_reads(p, g, &s);
    if (ok) {
        memcpy(pred, d->n_pred, sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++) {
            stale[i] = true;
            if (!pred[i]) ready[n_ready++] = i;
        }
    }
    for (int pos = 0; ok && pos < n; pos++) {
        int best = 0;
        for (int r = 0; r < n_ready; r++) {
            int v = ready[r];
            if (stale[v]) {
                int64_t a, f;
                node_delta(&s, g->nodes[v], &a, &f);
                score[v] = a - f, stale[v] = false;
            }
            if (r == 0 || score[v] < score[ready[best]] || (score[v] == score[ready[best]] && v < ready[best])) best = r;
        }
        int v = ready[best];
        ready[best] = ready[--n_ready];
        order[pos] = g->nodes[v];
        node_ran(&s, g->nodes[v]);
        for (int j = 0; j < g->nodes[v]->n_in; j++) {
            const dfg_tensor *o = owner_of(g->nodes[v]->in[j]);
            for (int k = o ? rd.start[o->id] : 0; o && k < rd.start[o->id + 1]; k++) stale[rd.node[k]] = true;
        }
        for (int e = d->succ_start[v]; e < d->succ_start[v + 1]; e++)
            if (--pred[d->succ[e]] == 0) ready[n_ready++] = d->succ[e];
    }
    free(ready), free(pred), free(score), free(stale), free(rd.start), free(rd.node), free(s.reads_left);
    return ok;
}

/* Moves each all-reduce of final gradients (dfg_allreduce_last: no temporaries, so no lifetime
 * changes) to just after the last node it depends on: a bucket is issued as soon as its
 * gradients are final, and on a GPU it then overlaps the backward of the earlier layers. */
typedef struct {
    dfg_node *const *order; /* the chosen order; node ids still index the dag */
    const int *latest;      /* [node id] the position in order of its last predecessor; -1: none */
    const int *late, n_late; /* positions in order of the hoisted nodes */
    dfg_node **out;
    int k;
} hoist;

/* Emits the hoisted nodes whose last predecessor is at position at, each followed by those
 * waiting on it, in their own order (every rank issues its collectives in the same order). */
static void emit_waiting(hoist *h, int at) {
    for (int j = 0; j < h->n_late; j++) {
        const dfg_node *x = h->order[h->late[j]];
        if (h->latest[x->id] != at) continue;
        h->out[h->k++] = h->order[h->late[j]];
        emit_waiting(h, h->late[j]);
    }
}

/* order (n nodes, ids still indexing the dag) rewritten with the hoisted nodes moved up. */
static bool hoist_late_allreduces(const dag *d, dfg_node **order) {
    int n = d->n, any = 0;
    for (int i = 0; i < n; i++) any |= dfg_node_is_late_allreduce(order[i]);
    if (!any) return true;
    int *pos = malloc(sizeof(int) * (size_t)n), *latest = malloc(sizeof(int) * (size_t)n);
    int *late = malloc(sizeof(int) * (size_t)n), n_late = 0;
    dfg_node **out = malloc(sizeof(*out) * (size_t)n);
    bool ok = pos && latest && late && out;
    for (int i = 0; ok && i < n; i++) {
        pos[order[i]->id] = i, latest[i] = -1;
        if (dfg_node_is_late_allreduce(order[i])) late[n_late++] = i;
    }
    for (int u = 0; ok && u < n; u++)
        for (int e = d->succ_start[u]; e < d->succ_start[u + 1]; e++)
            if (pos[u] > latest[d->succ[e]]) latest[d->succ[e]] = pos[u];
    hoist h = {order, latest, late, n_late, out, 0};
    if (ok) {
        emit_waiting(&h, -1);
        for (int i = 0; i < n; i++) {
            if (dfg_node_is_late_allreduce(order[i])) continue;
            out[h.k++] = order[i];
            emit_waiting(&h, i);
        }
        ok = h.k == n;
    }
    if (ok) memcpy(order, out, sizeof(*out) * (size_t)n);
    free(pos), free(latest), free(late), free(out);
    return ok;
}

dfg_status dfg_schedule_graph(dfg_program *p, dfg_graph *g) {
    dfg_consumers c;
    dag d = {0};
    dfg_node **order = malloc(sizeof(*order) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    bool ok = order && !dfg_consumers_build(p, g, &c);
    if (ok) {
        ok = build_dag(g, &c, &d) && greedy_order(p, g, &d, order);
        dfg_consumers_free(&c);
    }
    if (ok) {
        int64_t before = order_peak(p, g, g->nodes, &ok), after = order_peak(p, g, order, &ok);
        if (ok && !(after < before)) memcpy(order, g->nodes, sizeof(*order) * (size_t)g->n_nodes); /* build order */
        ok = ok && hoist_late_allreduces(&d, order);
        for (int i = 0; ok && i < g->n_nodes; i++) g->nodes[i] = order[i], order[i]->id = i;
    }
    dag_free(&d);
    free(order);
    return ok ? DFG_OK : dfg_program_err(p, DFG_ERR_NOMEM, "schedule: out of memory in graph '%s'", g->name);
}

dfg_status dfg_pass_schedule(dfg_program *p, const dfg_options *o) {
    if (o->keep_order) return DFG_OK;
    for (int gi = 0; gi < p->n_graphs; gi++)
        if (dfg_graph_stage_index(p, p->graphs[gi]) >= 0) {
            dfg_status st = dfg_schedule_graph(p, p->graphs[gi]);
            if (st) return st;
        }
    return DFG_OK;
}
