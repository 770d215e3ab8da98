/* remat.c - rematerialisation under a memory budget: when the plan's arena exceeds
 * dfg_options.memory_budget, activations that the forward makes and the backward reads again
 * are recomputed in the backward instead of kept across the peak.
 *
 * Each round plans the program as it is (schedule + liveness + placement into a scratch arena),
 * lists the forward-made buffers live at the peak step that are read again after it, and tries
 * them cheapest first by the op cost table (flops per byte freed: pointwise ops and norms, then
 * attention and matmuls). Trying one means adding a copy of its producer right before its first
 * reader after the peak, pointing the later readers at the copy, and planning again; the copy is
 * kept when the arena shrinks and undone otherwise (in a program with more candidates than a
 * round tries, its cheap candidates first go in together: try_cheap_batch). Rounds go on until
 * the plan fits or nothing helps, in which case the pass fails with the smallest arena it reached
 * and what fills it. Either
 * way the outcome is the plan's remat result (dfg_program_remat): callers such as dfg fit read
 * whether it fit and the least arena from there, not from the message.
 * Copies compute exactly what the original did, so results are bit-identical; random ops
 * (sampling) and ops that write state are never copied. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define MAX_TRIES_PER_ROUND 64

typedef struct {
    dfg_node *node;
    int slot;
    dfg_tensor *old;
} redirect;

typedef struct {
    dfg_graph *g;
    dfg_node *src;  /* the forward node copied */
    int pos;        /* where the copy goes: before the first reader after the peak */
    double score;   /* flops of a copy per byte it frees at the peak */
    int64_t freed;  /* those bytes */
} candidate;

/* A graph's schedule as the last trial made it: the order it was given and the order the
 * schedule pass returned, valid while the graph's nodes and edges are those of stamp. */
typedef struct {
    dfg_node **in, **out;
    int n;
    unsigned stamp;
} sched_memo;

typedef struct {
    dfg_program *p;
    const dfg_options *o;
    sched_memo *memo;   /* [graph id] */
    unsigned *stamp;    /* [graph id]: changes whenever a copy or redirect changes the graph */
    unsigned next_stamp;
    dfg_node ***orders; /* [graph id] node order before a trial, to undo its rescheduling */
    int *n_order;
    redirect *red;
    int n_red, cap_red;
    dfg_node **copy_orig, **copy_node; /* every copy made, and what it copies */
    uint32_t **copy_in;                /* the tensor ids each copy read when made (later trials redirect some) */
    int n_copies, cap_copies, copies_before;
    int tensors_before; /* the program's tensors before a trial: undo drops the trial's */
    int64_t budget; /* 0 under memory_min: as small as it gets */
    int rounds, batched_rounds;
} remat_ctx;

/* What a trial plan costs: the arena first, then the bytes x steps all buffers hold (so that a
 * cheap copy that frees bytes on a plateau of the peak still counts as progress). */
typedef struct {
    int64_t arena;
    double area;
} plan_cost;

static bool cheaper(plan_cost a, plan_cost b) { return a.arena < b.arena || (a.arena == b.arena && a.area < b.area); }

/* The schedule pass, except that a graph given the same order with the same nodes and edges as
 * last time gets last time's result without running it again: the pass is a function of those,
 * and a trial changes one graph (or a batch's few) of many. */
static dfg_status schedule(remat_ctx *c) {
    dfg_program *p = c->p;
    if (c->o->keep_order) return DFG_OK;
    for (int gi = 0; gi < p->n_graphs; gi++) {
        dfg_graph *g = p->graphs[gi];
        if (dfg_graph_stage_index(p, g) < 0) continue;
        sched_memo *m = &c->memo[gi];
        size_t bytes = sizeof(dfg_node *) * (size_t)g->n_nodes;
        if (m->in && m->stamp == c->stamp[gi] && m->n == g->n_nodes && !memcmp(m->in, g->nodes, bytes)) {
            memcpy(g->nodes, m->out, bytes);
            dfg_rw_renumber(g);
            continue;
        }
        free(m->in), free(m->out);
        m->in = malloc(bytes ? bytes : 1), m->out = malloc(bytes ? bytes : 1);
        if (!m->in || !m->out) return DFG_ERR_NOMEM;
        memcpy(m->in, g->nodes, bytes);
        dfg_status st = dfg_schedule_graph(p, g);
        if (st) return st;
        memcpy(m->out, g->nodes, bytes);
        m->n = g->n_nodes, m->stamp = c->stamp[gi];
    }
    return DFG_OK;
}

/* Something changed graph g's nodes or edges: its memo no longer applies. */
static void touched(remat_ctx *c, const dfg_graph *g) { c->stamp[g->id] = ++c->next_stamp; }

/* Schedules the program and finds its lifetimes into a scratch arena: the plan's report up to
 * the offsets, and the cost with arena standing for the lower bound (the most bytes live at one
 * step), which no placement goes under; arena < 0 when out of memory. */
static plan_cost measure_bound(remat_ctx *c, dfg_plan *trial, dfg_arena *scratch) {
    dfg_program *p = c->p;
    dfg_arena_free_all(scratch);
    *trial = (dfg_plan){.opt = *c->o, .arena = scratch};
    double t0 = dfg_seconds();
    if (schedule(c)) return (plan_cost){-1, 0};
    double t1 = dfg_seconds();
    if (dfg_plan_liveness(p, trial)) return (plan_cost){-1, 0};
    double t2 = dfg_seconds();
    dfg_plan_report(p, trial);
    dfg_plan_time(p->plan, "remat: trial schedule", t1 - t0);
    dfg_plan_time(p->plan, "remat: trial liveness", t2 - t1);
    dfg_plan_time(p->plan, "remat: trial report", dfg_seconds() - t2);
    plan_cost k = {(int64_t)trial->report.lower_bound_bytes, 0.0};
    for (int b = 0; b < trial->n_bufs; b++)
        if (trial->bufs[b].merged_into < 0)
            k.area += (double)trial->bufs[b].size * (double)(trial->bufs[b].life.last - trial->bufs[b].life.first + 1);
    return k;
}

/* The offsets of a plan measure_bound made: c with its real arena. */
static plan_cost measure_place(dfg_program *p, dfg_plan *trial, plan_cost c) {
    double t0 = dfg_seconds();
    if (dfg_plan_place(p, trial)) return (plan_cost){-1, 0};
    dfg_plan_time(p->plan, "remat: trial placement", dfg_seconds() - t0);
    return (plan_cost){(int64_t)trial->report.arena_bytes, c.area};
}

/* Schedules and plans the program into a scratch arena; arena < 0 when out of memory. */
static plan_cost measure(remat_ctx *c, dfg_plan *trial, dfg_arena *scratch) {
    plan_cost k = measure_bound(c, trial, scratch);
    return k.arena < 0 ? k : measure_place(c->p, trial, k);
}

/* Whether a trial plan whose lower bound and area are `bound` can still be kept against the
 * round's plan `cost`: it must lower the arena (or, for a cheap copy, keep it and lower the
 * area), and no placement's arena is under the lower bound. A trial this rules out is taken back
 * without placing it: placement is most of a trial's time, and most trials are taken back. */
static bool may_keep(plan_cost bound, plan_cost cost, bool cheap) {
    if (bound.arena > cost.arena) return false;
    if (bound.arena == cost.arena) return cheap && bound.area < cost.area;
    return true;
}

static dfg_tensor *root_of(dfg_tensor *t) { return t->version_of ? t->version_of : t; }
static dfg_tensor *value_base(dfg_tensor *t) {
    while (t->view_of) t = t->view_of;
    return t;
}

/* Would a copy of n at position pos read every persistent input before it is overwritten? */
static bool inputs_still_valid(const dfg_graph *g, const dfg_node *n, int pos) {
    for (int j = 0; j < n->n_in; j++) {
        dfg_tensor *v = value_base(n->in[j]);
        if (v->kind == DFG_TEMP && !v->version_of) continue;
        for (int i = n->id + 1; i < pos; i++) /* a write of v's tensor between n and the copy */
            for (int k = 0; k < g->nodes[i]->n_out; k++)
                if (g->nodes[i]->out[k]->version_of == root_of(v)) return false;
    }
    return true;
}

/* A forward node a copy may redo: not random, writing no state, not a step output. */
static bool redoable(const dfg_node *n) {
    /* a view the backward made (a matmul's weight gradient reading a reshape of an activation)
     * is as pure as a forward one */
    bool backward = (n->flags & DFG_NF_BACKWARD) && !n->out[0]->view_of;
    if (backward || (n->flags & DFG_NF_RECOMPUTED) || dfg_ops[n->op].random) return false;
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->version_of || (n->out[k]->flags & DFG_TF_OUTPUT)) return false;
    return true;
}

/* ... and that has bytes of its own (a view is copied only with what it views). */
static bool copyable(const dfg_node *n) { return redoable(n) && !n->out[0]->view_of; }

/* First position after `after` of a node reading one of n's outputs (directly or through a
 * reshape view), or -1. */
static int first_reader_after(const dfg_graph *g, const dfg_node *n, int after) {
    for (int i = after + 1; i < g->n_nodes; i++) {
        const dfg_node *m = g->nodes[i];
        for (int j = 0; j < m->n_in; j++)
            for (int k = 0; k < n->n_out; k++)
                if (m->in[j] == n->out[k]) return i;
    }
    return -1;
}

static int by_score(const void *a, const void *b) {
    double x = ((const candidate *)a)->score, y = ((const candidate *)b)->score;
    return x < y ? -1 : x > y;
}

static double segment_flops(const void *c, const dfg_plan *trial, const dfg_graph *g, const dfg_node *src, int pos,
                            int depth);

/* Forward nodes before the peak whose outputs are read again after it (so their bytes are kept
 * across it), cheapest first. An output placed in place in an input's buffer counts: its
 * producer is what a copy must redo. */
static int collect(const void *ctx, const dfg_program *p, const dfg_plan *trial, candidate *out, int cap) {
    int n = 0, peak = trial->report.peak_step;
    for (int gi = 0; gi < p->n_graphs; gi++) {
        dfg_graph *g = p->graphs[gi];
        int s = trial->graph_stage[gi];
        if (s < 0) continue;
        int peak_pos = peak - trial->stage_step[s];
        for (int i = 0; i < g->n_nodes && i <= peak_pos && n < cap; i++) {
            dfg_node *src = g->nodes[i];
            /* a view counts: when only a view of an activation is read after the peak (a matmul
             * reading a reshape), copying the view copies the node that made its bytes */
            if (!redoable(src)) continue;
            int64_t freed = 0;
            for (int k = 0; k < src->n_out; k++) {
                const dfg_tensor *o = src->out[k];
                int b = dfg_plan_buf_root(trial, o->id);
                if (b < 0 || trial->life[o->id].last <= peak) continue;
                if (!trial->bufs[b].persistent && !trial->bufs[b].pinned) freed += trial->bufs[b].size;
            }
            if (!freed) continue;
            int pos = first_reader_after(g, src, peak_pos);
            if (pos < 0 || !inputs_still_valid(g, src, pos)) continue;
            double flops = segment_flops(ctx, trial, g, src, pos, 0); /* the copy and what it must redo first */
            out[n++] = (candidate){g, src, pos, (flops + 1.0) / (double)freed, freed};
        }
    }
    qsort(out, (size_t)n, sizeof(*out), by_score);
    return n;
}

static bool save_orders(remat_ctx *c) {
    for (int gi = 0; gi < c->p->n_graphs; gi++) {
        dfg_graph *g = c->p->graphs[gi];
        free(c->orders[gi]);
        c->orders[gi] = malloc(sizeof(dfg_node *) * (size_t)(g->n_nodes ? g->n_nodes : 1));
        if (!c->orders[gi]) return false;
        if (g->n_nodes) /* a graph that never had a node has no node array: memcpy(NULL) is undefined */
            memcpy(c->orders[gi], g->nodes, sizeof(dfg_node *) * (size_t)g->n_nodes);
        c->n_order[gi] = g->n_nodes;
    }
    return true;
}

static void restore_orders(remat_ctx *c) {
    for (int gi = 0; gi < c->p->n_graphs; gi++) {
        dfg_graph *g = c->p->graphs[gi];
        if (c->n_order[gi]) memcpy(g->nodes, c->orders[gi], sizeof(dfg_node *) * (size_t)c->n_order[gi]);
        g->n_nodes = c->n_order[gi];
        dfg_rw_renumber(g);
    }
}

static bool note_redirect(remat_ctx *c, dfg_node *m, int j) {
    if (c->n_red == c->cap_red) {
        int cap = c->cap_red ? 2 * c->cap_red : 64;
        redirect *r = realloc(c->red, sizeof(*r) * (size_t)cap);
        if (!r) return false;
        c->red = r, c->cap_red = cap;
    }
    c->red[c->n_red++] = (redirect){m, j, m->in[j]};
    return true;
}

/* ---------------------------------------------------------------- copies
 * A copy reads, for each input, the cheapest available value at its position: a copy of that
 * input made earlier, the original when it is kept across the peak anyway, or else a new copy
 * of the input's producer placed just before (a segment, up to MAX_SEGMENT deep) so that no
 * buffer dead at the peak is stretched across it. */
#define MAX_SEGMENT 4

static bool note_copy(remat_ctx *c, dfg_node *orig, dfg_node *copy) {
    if (c->n_copies == c->cap_copies) {
        int cap = c->cap_copies ? 2 * c->cap_copies : 64;
        dfg_node **o = realloc(c->copy_orig, sizeof(*o) * (size_t)cap), **k = realloc(c->copy_node, sizeof(*k) * (size_t)cap);
        if (o) c->copy_orig = o;
        if (k) c->copy_node = k;
        uint32_t **in = realloc(c->copy_in, sizeof(*in) * (size_t)cap);
        if (in) c->copy_in = in;
        if (!o || !k || !in) return false;
        c->cap_copies = cap;
    }
    uint32_t *ids = dfg_plan_alloc(c->p->plan, sizeof(uint32_t) * (size_t)copy->n_in);
    if (!ids) return false;
    for (int j = 0; j < copy->n_in; j++) ids[j] = (uint32_t)copy->in[j]->id;
    c->copy_in[c->n_copies] = ids;
    c->copy_orig[c->n_copies] = orig;
    c->copy_node[c->n_copies++] = copy;
    return true;
}

/* The latest copy of orig placed before position pos, or NULL. */
static dfg_node *copy_before(const remat_ctx *c, const dfg_node *orig, int pos) {
    dfg_node *best = NULL;
    for (int i = 0; i < c->n_copies; i++)
        if (c->copy_orig[i] == orig && c->copy_node[i]->id < pos && (!best || c->copy_node[i]->id > best->id))
            best = c->copy_node[i];
    return best;
}

/* Is x itself read after the peak (so reading it once more later costs nothing)? */
static bool read_after_peak(const dfg_plan *trial, const dfg_tensor *x) {
    return trial->life[x->id].last > trial->report.peak_step || (x->flags & DFG_TF_OUTPUT);
}

static dfg_node *make_copy(remat_ctx *c, const dfg_plan *trial, dfg_graph *g, dfg_node *src, int *pos, int depth);

/* What a copy at *pos reads for input x (making a segment copy when that is better). */
static dfg_tensor *value_for(remat_ctx *c, const dfg_plan *trial, dfg_graph *g, dfg_tensor *x, int *pos, int depth) {
    if (x->kind != DFG_TEMP || x->version_of || !x->producer) return x;
    dfg_node *prev = copy_before(c, x->producer, *pos);
    if (prev) return prev->out[x->producer_slot];
    bool segment_ok = copyable(x->producer) || x->view_of; /* views are free */
    if (read_after_peak(trial, x) || depth >= MAX_SEGMENT || !segment_ok || !inputs_still_valid(g, x->producer, *pos))
        return x;
    dfg_node *k = make_copy(c, trial, g, x->producer, pos, depth + 1);
    return k ? k->out[x->producer_slot] : NULL;
}

/* The flops make_copy would spend for src at pos, following value_for's choices. */
static double segment_flops(const void *ctx, const dfg_plan *trial, const dfg_graph *g, const dfg_node *src, int pos,
                            int depth) {
    const remat_ctx *c = ctx;
    double f = dfg_ops[src->op].cost(src).flops;
    for (int j = 0; j < src->n_in; j++) {
        const dfg_tensor *x = src->in[j];
        if (x->kind != DFG_TEMP || x->version_of || !x->producer || copy_before(c, x->producer, pos)) continue;
        bool segment_ok = copyable(x->producer) || x->view_of;
        if (read_after_peak(trial, x) || depth >= MAX_SEGMENT || !segment_ok || !inputs_still_valid(g, x->producer, pos))
            continue;
        f += segment_flops(ctx, trial, g, x->producer, pos, depth + 1);
    }
    return f;
}

/* Copies src (and the segment feeding it) before *pos; *pos moves past what was added. */
static dfg_node *make_copy(remat_ctx *c, const dfg_plan *trial, dfg_graph *g, dfg_node *src, int *pos, int depth) {
    dfg_tensor *in[16];
    if (src->n_in > 16) return NULL;
    for (int j = 0; j < src->n_in; j++)
        if (!(in[j] = value_for(c, trial, g, src->in[j], pos, depth))) return NULL;
    int first = g->n_nodes;
    dfg_node *copy = dfg_rw_add(g, src->op, in, src->n_in, src->attr, src->n_out);
    if (!copy || !note_copy(c, src, copy)) return NULL;
    copy->flags |= DFG_NF_RECOMPUTED | DFG_NF_BACKWARD;
    for (int k = 0; k < src->n_out; k++) copy->out[k]->flags |= src->out[k]->flags & DFG_TF_WORKSPACE;
    dfg_rw_move_tail(g, first, *pos);
    copy->after = *pos > 0 ? g->nodes[*pos - 1] : NULL;
    (*pos)++;
    return copy;
}

/* Adds the copy of cand->src before cand->pos and points the readers from there on at it. The
 * redirects and copies add to those of the trial begun by begin_trial, which undo takes back. */
static dfg_node *apply_timed(remat_ctx *c, const dfg_plan *trial, const candidate *cand);
static dfg_node *apply(remat_ctx *c, const dfg_plan *trial, const candidate *cand) {
    double t0 = dfg_seconds();
    dfg_node *copy = apply_timed(c, trial, cand);
    dfg_plan_time(c->p->plan, "remat: apply copies", dfg_seconds() - t0);
    return copy;
}

static dfg_node *apply_timed(remat_ctx *c, const dfg_plan *trial, const candidate *cand) {
    dfg_graph *g = cand->g;
    dfg_node *src = cand->src;
    int pos = cand->pos;
    touched(c, g);
    dfg_node *copy = make_copy(c, trial, g, src, &pos, 0);
    if (!copy) return NULL;
    for (int i = pos; i < g->n_nodes; i++) {
        dfg_node *m = g->nodes[i];
        for (int j = 0; j < m->n_in; j++)
            for (int k = 0; k < src->n_out; k++)
                if (m->in[j] == src->out[k]) {
                    if (!note_redirect(c, m, j)) return NULL;
                    m->in[j] = copy->out[k];
                }
    }
    dfg_rw_refresh_views(g);
    return copy;
}

/* A trial starts: what undo takes back is recorded from here on. */
static bool begin_trial(remat_ctx *c) {
    c->n_red = 0;
    c->copies_before = c->n_copies;
    c->tensors_before = c->p->n_tensors;
    double t0 = dfg_seconds();
    bool ok = save_orders(c);
    dfg_plan_time(c->p->plan, "remat: save orders", dfg_seconds() - t0);
    return ok;
}

static void undo(remat_ctx *c) {
    double t0 = dfg_seconds();
    for (int r = c->n_red - 1; r >= 0; r--) {
        c->red[r].node->in[c->red[r].slot] = c->red[r].old;
        touched(c, c->red[r].node->graph);
    }
    for (int i = c->copies_before; i < c->n_copies; i++) touched(c, c->copy_node[i]->graph);
    restore_orders(c);
    for (int i = c->copies_before; i < c->n_copies; i++)
        for (int k = 0; k < c->copy_node[i]->n_out; k++) c->copy_node[i]->out[k]->flags |= DFG_TF_DEAD;
    c->n_copies = c->copies_before;
    /* the taken-back copies' tensors go too (nothing refers to them any more): the copies kept
     * then have the same ids whatever was tried, which a loaded plan's replayed copies get */
    c->p->n_tensors = c->tensors_before;
    for (int gi = 0; gi < c->p->n_graphs; gi++) dfg_rw_refresh_views(c->p->graphs[gi]);
    dfg_plan_time(c->p->plan, "remat: undo", dfg_seconds() - t0);
}

/* Copies cheaper than this (flops per byte freed: pointwise ops, norms, attention's softmax
 * pass) are kept for freeing bytes away from the peak too; costlier ones (matmuls) only when
 * they lower the arena itself. */
#define CHEAP_FLOPS_PER_BYTE 32.0

/* Later positions first, graph by graph: a copy inserted at a position moves only the nodes at
 * and after it, so the earlier candidates' positions stay right while a batch is applied. */
static int by_graph_then_later(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->g != y->g) return x->g->id < y->g->id ? -1 : 1;
    return y->pos - x->pos;
}

/* The cheapest candidates (cand[0 .. n_cheap), pointwise ops and norms, which a round keeps one
 * by one whenever they make the plan cheaper at all) tried together in one plan: a program of
 * billions of parameters and long sequences needs hundreds of them, and planning it once per
 * copy made such a compile run for many minutes. Kept when the arena shrinks; else taken back
 * and the round goes on one candidate at a time. */
static dfg_status try_cheap_batch(remat_ctx *c, const dfg_plan *trial, plan_cost cost, candidate *cand, int n_cheap,
                                  dfg_arena *try_scratch, bool *kept) {
    candidate *batch = malloc(sizeof(*batch) * (size_t)n_cheap);
    if (!batch) return DFG_ERR_NOMEM;
    memcpy(batch, cand, sizeof(*batch) * (size_t)n_cheap);
    qsort(batch, (size_t)n_cheap, sizeof(*batch), by_graph_then_later);
    dfg_status st = begin_trial(c) ? DFG_OK : DFG_ERR_NOMEM;
    for (int i = 0; i < n_cheap && !st; i++)
        if (!apply(c, trial, &batch[i])) st = dfg_program_status(c->p) ? dfg_program_status(c->p) : DFG_ERR_NOMEM;
    free(batch);
    if (st) return st;
    dfg_plan t2;
    plan_cost c2 = measure_bound(c, &t2, try_scratch);
    if (c2.arena >= 0 && may_keep(c2, cost, false)) c2 = measure_place(c->p, &t2, c2);
    else if (c2.arena >= 0) c2.arena = INT64_MAX; /* cannot be kept: not placed */
    if (c2.arena < 0) return DFG_ERR_NOMEM;
    *kept = c2.arena < cost.arena;
    if (*kept) c->batched_rounds++;
    else undo(c);
    return DFG_OK;
}

/* One round: the cheap candidates together when there are several, else the first candidate
 * whose copy makes the plan cheaper is kept. The round's plan (`trial`, in `scratch`) is read
 * while candidates are tried, so they are measured in an arena of their own: measuring frees its
 * arena first. */
static dfg_status round_once(remat_ctx *c, const dfg_plan *trial, plan_cost cost, dfg_arena *scratch, bool *kept) {
    (void)scratch;
    /* every candidate is collected and sorted before the cheapest are tried: capping the
     * collection instead would only ever see the first layers' nodes */
    int cap = 0;
    for (int gi = 0; gi < c->p->n_graphs; gi++) cap += c->p->graphs[gi]->n_nodes;
    candidate *cand = malloc(sizeof(*cand) * (size_t)(cap ? cap : 1));
    if (!cand) return DFG_ERR_NOMEM;
    /* the batch: cheap candidates, cheapest first, while the bytes they free stay within what the
     * plan is over the budget, so that near the budget copies are still chosen one by one */
    double t0 = dfg_seconds();
    int n = collect(c, c->p, trial, cand, cap), n_cheap = 0;
    dfg_plan_time(c->p->plan, "remat: collect candidates", dfg_seconds() - t0);
    int64_t over = cost.arena - c->budget, batch_bytes = 0;
    while (n_cheap < n && cand[n_cheap].score < CHEAP_FLOPS_PER_BYTE && batch_bytes + cand[n_cheap].freed <= over)
        batch_bytes += cand[n_cheap++].freed;
    bool many = n > MAX_TRIES_PER_ROUND; /* a program far larger than one round's tries */
    if (n > MAX_TRIES_PER_ROUND) n = MAX_TRIES_PER_ROUND;
    dfg_arena try_scratch = {0};
    dfg_status st = DFG_OK;
    *kept = false;
    if (many && n_cheap >= 2) st = try_cheap_batch(c, trial, cost, cand, n_cheap, &try_scratch, kept);
    for (int i = 0; i < n && !*kept && !st; i++) {
        if (!begin_trial(c)) {
            st = DFG_ERR_NOMEM;
            break;
        }
        dfg_node *copy = apply(c, trial, &cand[i]);
        if (!copy) {
            st = dfg_program_status(c->p) ? dfg_program_status(c->p) : DFG_ERR_NOMEM;
            break;
        }
        dfg_plan t2;
        bool cheap = cand[i].score < CHEAP_FLOPS_PER_BYTE;
        plan_cost c2 = measure_bound(c, &t2, &try_scratch);
        if (c2.arena >= 0 && may_keep(c2, cost, cheap)) c2 = measure_place(c->p, &t2, c2);
        else if (c2.arena >= 0) c2.arena = INT64_MAX; /* cannot be kept: not placed */
        if (c2.arena < 0) {
            st = DFG_ERR_NOMEM;
            break;
        }
        if (c2.arena < cost.arena || (cheap && cheaper(c2, cost))) *kept = true;
        else undo(c);
    }
    dfg_arena_free_all(&try_scratch);
    free(cand);
    return st;
}

/* "params 474.2 MiB, optimizer 948.4 MiB, ...": the three largest categories at the peak. */
static void dominant(const size_t *peak, char *buf, size_t len) {
    bool used[DFG_CAT_COUNT] = {0};
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < 3; k++) {
        int best = -1;
        for (int cat = 0; cat < DFG_CAT_COUNT; cat++)
            if (!used[cat] && peak[cat] && (best < 0 || peak[cat] > peak[best])) best = cat;
        if (best < 0) break;
        used[best] = true;
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s %.1f MiB", k ? ", " : "",
                               dfg_category_name((dfg_category)best), (double)peak[best] / 1048576.0);
    }
}

dfg_status dfg_pass_remat(dfg_program *p, const dfg_options *o) {
    if ((o->memory_budget <= 0 && !o->memory_min) || o->no_remat) return DFG_OK;
    int64_t budget = o->memory_min ? 0 : o->memory_budget; /* 0 under memory_min: never met, go on while it helps */
    if (o->remat_replay) { /* a loaded plan: its compile searched already */
        dfg_status rs = dfg_remat_replay(p, o->remat_replay);
        p->plan->remat.budget = budget;
        return rs;
    }
    remat_ctx c = {.p = p, .o = o, .budget = budget, .orders = calloc((size_t)p->n_graphs + 1, sizeof(dfg_node **)),
                   .n_order = calloc((size_t)p->n_graphs + 1, sizeof(int)),
                   .memo = calloc((size_t)p->n_graphs + 1, sizeof(sched_memo)),
                   .stamp = calloc((size_t)p->n_graphs + 1, sizeof(unsigned))};
    dfg_arena scratch = {0};
    dfg_status st = c.orders && c.n_order && c.memo && c.stamp ? DFG_OK : DFG_ERR_NOMEM;
    dfg_plan trial;
    int64_t arena = -1;
    while (!st) {
        plan_cost cost = measure(&c, &trial, &scratch);
        if ((arena = cost.arena) < 0) st = DFG_ERR_NOMEM;
        if (st || arena <= budget) break;
        bool kept = false;
        c.rounds++;
        if ((st = round_once(&c, &trial, cost, &scratch, &kept)) || !kept) break;
    }
    if (!st) { /* the search's result, for callers (dfg_program_remat); the message is made from it */
        dfg_remat_result *r = &p->plan->remat;
        *r = (dfg_remat_result){.ran = true, .fits = o->memory_min || arena <= budget, .budget = budget,
                                .arena_bytes = arena, .persistent_bytes = (int64_t)trial.report.persistent_bytes,
                                .recomputed = c.n_copies, .rounds = c.rounds, .batched_rounds = c.batched_rounds};
        memcpy(r->peak, trial.report.peak, sizeof(r->peak));
        if (r->fits)
            st = dfg_remat_log_record(p, c.copy_node, (const dfg_node *const *)c.copy_orig,
                                      (const uint32_t *const *)c.copy_in, c.n_copies, c.rounds, c.batched_rounds);
        if (st) st = dfg_program_err(p, st, "remat: out of memory");
        else if (!r->fits) {
            char dom[256];
            dominant(r->peak, dom, sizeof(dom));
            st = dfg_program_err(p, DFG_ERR_ARG,
                                 "remat: the memory budget of %.1f MiB does not fit; the smallest plan found needs %.1f MiB "
                                 "(persistent tensors %.1f MiB, %d activations recomputed); at its peak: %s",
                                 (double)r->budget / 1048576.0, (double)r->arena_bytes / 1048576.0,
                                 (double)r->persistent_bytes / 1048576.0, r->recomputed, dom);
        }
    } else if (!p->status) {
        st = dfg_program_err(p, st, "remat: %s", dfg_program_error(p)[0] ? dfg_program_error(p) : "out of memory");
    }
    dfg_arena_free_all(&scratch);
    for (int gi = 0; c.orders && gi < p->n_graphs; gi++) free(c.orders[gi]);
    for (int gi = 0; c.memo && gi < p->n_graphs; gi++) free(c.memo[gi].in), free(c.memo[gi].out);
    free(c.memo), free(c.stamp);
    free(c.orders), free(c.n_order), free(c.red), free(c.copy_orig), free(c.copy_node), free(c.copy_in);
    return st;
}
