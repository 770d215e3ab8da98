/* planner_props.h - the plan properties the planner tests assert, computed independently of
 * passes/ (included by tests/test_planner*.c; header-only because every test links testutil.c
 * alone).
 *
 * From the program as compiled (its final node order and stage list) this recomputes the
 * timeline, every tensor's lifetime and every storage group (an owner with its views and
 * versions), without reading the planner's spans or buffers. It then checks the plan's offsets:
 *   - views and versions sit at their storage's offset; offsets are aligned; every group fits
 *     in the arena; every tensor a staged node touches has bytes;
 *   - no two groups whose lifetimes overlap share a byte, except an output placed in place over
 *     an input at the one step where that input dies and the output is born (the op must allow
 *     it for that output: dfg_op_inplace_input; same offset, same size; the input is a
 *     temporary nobody reads after the step);
 *   - a repeated stage's body: a group live in it that was born before the stage lives to the
 *     body's end (the body runs again and reads it again);
 *   - lower bound: max over steps of the live groups' aligned sizes, with the in-place pairs
 *     the plan realised counted once: equals report->lower_bound_bytes, and <= arena; the
 *     report's peak step has that many live bytes, and its breakdown by category sums to it;
 *   - naive: the sum of all groups' aligned sizes: equals report->naive_bytes, and >= arena;
 *     with no_reuse the arena is exactly that.
 * The names of failing checks carry `label` so a random program can be replayed. */
#ifndef DFG_PLANNER_PROPS_H
#define DFG_PLANNER_PROPS_H

#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "ops/op.h"
#include "passes/plan.h"
#include "testutil.h"

typedef struct {
    int64_t first, last; /* first < 0: not live */
} pp_span;

typedef struct {
    size_t arena, lower_bound, naive;
    int n_groups, n_inplace, n_steps;
} pp_result;

static void pp_extend(pp_span *s, int64_t step) {
    if (s->first < 0 || step < s->first) s->first = step;
    if (step > s->last) s->last = step;
}

static int pp_stage_named(const dfg_program *p, const char *name) {
    for (int s = 0; s < p->n_stages; s++)
        if (!strcmp(p->stages[s].name, name)) return s;
    return -1;
}

static int pp_find(int *uf, int x) {
    while (uf[x] != x) x = uf[x] = uf[uf[x]];
    return x;
}

typedef struct {
    const dfg_program *p;
    int n_steps;
    int *stage_step;  /* [n_stages + 1] */
    int *step_stage;  /* [n_steps] */
    pp_span *life;    /* [tensor] the tensor's own uses */
    pp_span *glife;   /* [root tensor] its group's lifetime */
    bool *has_group;  /* [root tensor] */
    bool *pinned;     /* [root tensor] a member is a dfg_output */
    int64_t *size;    /* [root tensor] aligned bytes */
} pp_ctx;

static void pp_free(pp_ctx *c) {
    free(c->stage_step), free(c->step_stage), free(c->life), free(c->glife), free(c->has_group), free(c->pinned),
        free(c->size);
}

static const dfg_tensor *pp_root(const dfg_tensor *t) { return t->storage; }

/* Timeline and lifetimes from the program alone. */
static void pp_lifetimes(pp_ctx *c, size_t align) {
    const dfg_program *p = c->p;
    int nt = p->n_tensors, ns = p->n_stages, step = 0;
    c->stage_step = calloc((size_t)ns + 1, sizeof(int));
    for (int s = 0; s < ns; s++) {
        c->stage_step[s] = step;
        step += p->stages[s].kind == DFG_STAGE_GRAPH && p->stages[s].graph->n_nodes > 0 ? p->stages[s].graph->n_nodes : 1;
    }
    c->stage_step[ns] = step;
    c->n_steps = step > 0 ? step : 1;
    int end = c->n_steps - 1;
    c->step_stage = calloc((size_t)c->n_steps, sizeof(int));
    for (int s = 0; s < ns; s++)
        for (int k = c->stage_step[s]; k < c->stage_step[s + 1]; k++) c->step_stage[k] = s;
    c->life = malloc(sizeof(pp_span) * ((size_t)nt + 1));
    c->glife = malloc(sizeof(pp_span) * ((size_t)nt + 1));
    c->has_group = calloc(((size_t)nt + 1), sizeof(bool));
    c->pinned = calloc(((size_t)nt + 1), sizeof(bool));
    c->size = calloc(((size_t)nt + 1), sizeof(int64_t));
    for (int i = 0; i < nt; i++) c->life[i] = c->glife[i] = (pp_span){-1, -1};
    /* persistent tensors: the whole step, or the stages of their scope */
    for (int i = 0; i < nt; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_TEMP) continue;
        if (t->scope_first) {
            int a = pp_stage_named(p, t->scope_first), b = pp_stage_named(p, t->scope_last);
            c->life[i] = (pp_span){c->stage_step[a], c->stage_step[b + 1] - 1};
        } else c->life[i] = (pp_span){0, end};
    }
    /* temporaries: from their producer's step to their last reader's; outputs to the end */
    for (int s = 0; s < ns; s++) {
        if (p->stages[s].kind != DFG_STAGE_GRAPH) continue;
        const dfg_graph *g = p->stages[s].graph;
        for (int n = 0; n < g->n_nodes; n++) {
            const dfg_node *node = g->nodes[n];
            for (int k = 0; k < node->n_out; k++) {
                pp_extend(&c->life[node->out[k]->id], c->stage_step[s] + n);
                if (node->out[k]->flags & DFG_TF_OUTPUT) pp_extend(&c->life[node->out[k]->id], end);
            }
            for (int j = 0; j < node->n_in; j++) pp_extend(&c->life[node->in[j]->id], c->stage_step[s] + n);
        }
    }
    /* groups: a storage owner with its views and versions */
    for (int i = 0; i < nt; i++) {
        const dfg_tensor *t = p->tensors[i], *r = pp_root(t);
        if (c->life[i].first < 0 || (t->flags & DFG_TF_DEAD)) continue;
        c->has_group[r->id] = true;
        if (c->life[i].first >= 0) pp_extend(&c->glife[r->id], c->life[i].first), pp_extend(&c->glife[r->id], c->life[i].last);
        if (t->flags & DFG_TF_OUTPUT) c->pinned[r->id] = true;
    }
    for (int i = 0; i < nt; i++)
        if (c->has_group[i]) c->size[i] = (int64_t)((dfg_tensor_bytes(p->tensors[i]) + align - 1) / align * align);
}

static bool pp_meet(pp_span a, pp_span b) { return a.first <= b.last && b.first <= a.last; }

/* Is sharing between groups x and y (roots) the in-place reuse of the node at their one common
 * step? Same offset and size are checked by the caller. */
static bool pp_inplace_pair(const pp_ctx *c, int x, int y) {
    const dfg_program *p = c->p;
    if (c->glife[x].last != c->glife[y].first) {
        int t = x;
        x = y, y = t;
    }
    if (c->glife[x].last != c->glife[y].first) return false;
    int64_t step = c->glife[x].last;
    int s = c->step_stage[step];
    if (p->stages[s].kind != DFG_STAGE_GRAPH || step - c->stage_step[s] >= p->stages[s].graph->n_nodes) return false;
    const dfg_node *n = p->stages[s].graph->nodes[step - c->stage_step[s]];
    if (p->tensors[x]->kind != DFG_TEMP || c->pinned[x] || dfg_tensor_bytes(p->tensors[x]) != dfg_tensor_bytes(p->tensors[y]))
        return false;
    for (int k = 0; k < n->n_out; k++) {
        int j = dfg_op_inplace_input(n, k);
        if (j >= 0 && n->out[k]->id == y && n->out[k]->storage == n->out[k] && n->in[j]->storage->id == x) return true;
    }
    return false;
}

typedef struct {
    int64_t off, end;
    int root;
} pp_range;

static int pp_by_off(const void *a, const void *b) {
    const pp_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->root - y->root;
}

/* Checks every property above on a compiled program; fills *res (may be NULL). Returns the number
 * of failed checks. */
static int pp_check(const dfg_program *p, const char *label, pp_result *res) {
    int fails0 = dfg_test_failures;
    const dfg_plan *plan = p->plan;
    const dfg_report *rep = dfg_program_report(p);
    CHECK(plan && rep, "%s: not compiled: %s", label, dfg_program_error(p));
    if (!plan || !rep) return dfg_test_failures - fails0;
    size_t align = plan->opt.align;
    pp_ctx c = {.p = p};
    pp_lifetimes(&c, align);
    int nt = p->n_tensors, end = c.n_steps - 1;
    const int64_t *off = plan->mem.offset;
    int64_t arena = (int64_t)plan->mem.arena_bytes;
    CHECK(plan->n_steps == c.n_steps, "%s: plan has %d steps, the program %d", label, plan->n_steps, c.n_steps);
    CHECK(rep->arena_bytes == plan->mem.arena_bytes, "%s: report arena %zu != plan arena %zu", label, rep->arena_bytes,
          plan->mem.arena_bytes);

    /* placement of every tensor relative to its group, alignment, bounds */
    int n_groups = 0;
    pp_range *r = malloc(sizeof(*r) * ((size_t)nt + 1));
    for (int i = 0; i < nt; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (c.life[i].first < 0 || (t->flags & DFG_TF_DEAD)) continue;
        int root = pp_root(t)->id;
        CHECK(c.has_group[root], "%s: '%s' is used but its storage '%s' has no group", label, t->name, p->tensors[root]->name);
        CHECK(off[i] == off[root], "%s: '%s' at %lld, its storage '%s' at %lld", label, t->name, (long long)off[i],
              p->tensors[root]->name, (long long)off[root]);
    }
    for (int i = 0; i < nt; i++) {
        if (!c.has_group[i]) continue;
        int64_t bytes = (int64_t)dfg_tensor_bytes(p->tensors[i]);
        CHECK(off[i] >= 0 && off[i] % (int64_t)align == 0 && off[i] + bytes <= arena,
              "%s: '%s' at %lld (+%lld) is misaligned (%zu) or outside the %lld-byte arena", label, p->tensors[i]->name,
              (long long)off[i], (long long)bytes, align, (long long)arena);
        r[n_groups++] = (pp_range){off[i], off[i] + bytes, i};
    }

    /* no two live groups share a byte, but for in-place reuse; realised pairs are merged */
    int *uf = malloc(sizeof(int) * ((size_t)nt + 1));
    for (int i = 0; i < nt; i++) uf[i] = i;
    int n_inplace = 0;
    qsort(r, (size_t)n_groups, sizeof(*r), pp_by_off);
    for (int i = 0; i < n_groups; i++)
        for (int j = i + 1; j < n_groups && r[j].off < r[i].end; j++) {
            int x = r[i].root, y = r[j].root;
            if (!pp_meet(c.glife[x], c.glife[y])) continue;
            bool inplace = r[i].off == r[j].off && r[i].end == r[j].end && pp_inplace_pair(&c, x, y);
            CHECK(inplace, "%s: '%s' [%lld, %lld) steps %lld-%lld and '%s' [%lld, %lld) steps %lld-%lld share bytes while both live",
                  label, p->tensors[x]->name, (long long)r[i].off, (long long)r[i].end, (long long)c.glife[x].first,
                  (long long)c.glife[x].last, p->tensors[y]->name, (long long)r[j].off, (long long)r[j].end,
                  (long long)c.glife[y].first, (long long)c.glife[y].last);
            if (inplace && pp_find(uf, x) != pp_find(uf, y)) uf[pp_find(uf, x)] = pp_find(uf, y), n_inplace++;
        }

    /* a repeated body reads what was born before it in every run */
    for (int s = 0; s < p->n_stages; s++) {
        if (p->stages[s].kind != DFG_STAGE_GRAPH || p->stages[s].repeat < 2) continue;
        pp_span body = {c.stage_step[s], c.stage_step[s + 1] - 1};
        for (int i = 0; i < nt; i++)
            if (c.has_group[i] && pp_meet(c.glife[i], body) && c.glife[i].first < body.first)
                CHECK(c.glife[i].last >= body.last, "%s: '%s' (steps %lld-%lld) enters repeated stage '%s' (steps %lld-%lld) but dies in it",
                      label, p->tensors[i]->name, (long long)c.glife[i].first, (long long)c.glife[i].last, p->stages[s].name,
                      (long long)body.first, (long long)body.last);
    }

    /* lower bound and naive size */
    pp_span *mlife = malloc(sizeof(pp_span) * ((size_t)nt + 1));
    int64_t *live = calloc((size_t)c.n_steps + 1, sizeof(int64_t));
    for (int i = 0; i < nt; i++) mlife[i] = (pp_span){-1, -1};
    int64_t naive = 0;
    for (int i = 0; i < nt; i++)
        if (c.has_group[i]) {
            int m = pp_find(uf, i);
            pp_extend(&mlife[m], c.glife[i].first), pp_extend(&mlife[m], c.glife[i].last);
            naive += c.size[i];
        }
    for (int i = 0; i < nt; i++)
        if (c.has_group[i] && pp_find(uf, i) == i) live[mlife[i].first] += c.size[i], live[mlife[i].last + 1] -= c.size[i];
    int64_t run = 0, lb = 0, at_peak = -1;
    for (int s = 0; s <= end; s++) {
        run += live[s], lb = run > lb ? run : lb;
        if (s == rep->peak_step) at_peak = run;
    }
    size_t by_cat = 0;
    for (int k = 0; k < DFG_CAT_COUNT; k++) by_cat += rep->peak[k];
    CHECK(at_peak == lb && by_cat == (size_t)lb, "%s: at the report's peak step %d %lld bytes are live, by category %zu, "
          "the lower bound is %lld", label, rep->peak_step, (long long)at_peak, by_cat, (long long)lb);
    CHECK((size_t)lb == rep->lower_bound_bytes, "%s: lower bound %lld, the report says %zu", label, (long long)lb,
          rep->lower_bound_bytes);
    CHECK((size_t)naive == rep->naive_bytes, "%s: naive %lld, the report says %zu", label, (long long)naive, rep->naive_bytes);
    CHECK(lb <= arena && arena <= (naive > (int64_t)align ? naive : (int64_t)align),
          "%s: arena %lld outside [lower bound %lld, naive %lld]", label, (long long)arena, (long long)lb, (long long)naive);
    if (plan->opt.no_reuse)
        CHECK(arena == naive || (naive == 0 && arena == (int64_t)align), "%s: no_reuse arena %lld != naive %lld", label,
              (long long)arena, (long long)naive);
    if (res) *res = (pp_result){(size_t)arena, (size_t)lb, (size_t)naive, n_groups, n_inplace, c.n_steps};
    free(r), free(uf), free(mlife), free(live);
    pp_free(&c);
    return dfg_test_failures - fails0;
}

#endif
