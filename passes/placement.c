/* placement.c - offsets in the arena. Persistent buffers are stacked at the bottom; transient
 * ones are placed above them greedily, best fit: each buffer goes into the smallest gap left by
 * the already-placed buffers whose lifetimes overlap its own (or on top of them). The order in
 * which buffers are placed matters, so several orderings are tried and the smallest arena wins
 * (the greedy-by-size family of Pisarchyk & Lee, "Efficient Memory Management for Deep Neural
 * Net Inference", 2020). */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int64_t length(const dfg_buf *b) { return (int64_t)b->life.last - b->life.first + 1; }

static int tie_break(const dfg_buf *a, const dfg_buf *b) {
    if (a->life.first != b->life.first) return a->life.first < b->life.first ? -1 : 1;
    return a->owner < b->owner ? -1 : a->owner > b->owner;
}
static int by_size(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    if (length(a) != length(b)) return length(a) > length(b) ? -1 : 1;
    return tie_break(a, b);
}
static int by_length(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    if (length(a) != length(b)) return length(a) > length(b) ? -1 : 1;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    return tie_break(a, b);
}
static int by_area(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    double aa = (double)a->size * (double)length(a), ab = (double)b->size * (double)length(b);
    if (aa != ab) return aa > ab ? -1 : 1;
    return tie_break(a, b);
}
static int by_first_use(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    if (a->life.first != b->life.first) return a->life.first < b->life.first ? -1 : 1;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    return a->owner < b->owner ? -1 : a->owner > b->owner;
}

static const struct {
    const char *name;
    int (*cmp)(const void *, const void *, void *);
} orderings[] = {{"size", by_size}, {"lifetime", by_length}, {"area", by_area}, {"first-use", by_first_use}};

/* A placed buffer as the best-fit scan reads it: its lifetime and its bytes [off, end). */
typedef struct {
    int32_t first, last;
    int64_t off, end;
} placed_slot;

/* The best-fit scan for a buffer reads the placed buffers whose lifetimes overlap its own, in
 * offset order. Walking every placed buffer for every buffer placed is quadratic: a program of
 * an 8B model over several length buckets has a hundred thousand buffers, placed four times and
 * again for every remat trial, and the scan was most of its compile. So the timeline is cut into
 * windows of WINDOW steps, and each window lists, in offset order, the placed buffers that live
 * in it: a buffer inside one window scans that window's list alone, and one spanning several
 * gathers theirs. Both see exactly the overlapping buffers in offset order (the order among equal
 * offsets changes no gap), so the offsets are those of the plain scan. */
enum { WINDOW = 64 };

typedef struct {
    int *slot; /* indices into placer.slots, by offset */
    int n, cap;
} window;

typedef struct {
    placed_slot *slots; /* every placed buffer, in placing order */
    int n_slots;
    window *win;
    int n_win;
    int *stamp;   /* [slot]: the query that last gathered it (multi-window queries dedupe) */
    int *gather;  /* a multi-window query's slots */
    int query;
} placer;

static bool placer_init(placer *pl, int n, int n_steps) {
    *pl = (placer){0};
    pl->n_win = n_steps / WINDOW + 1;
    pl->slots = malloc(sizeof(placed_slot) * (size_t)(n ? n : 1));
    pl->win = calloc((size_t)pl->n_win, sizeof(window));
    pl->stamp = malloc(sizeof(int) * (size_t)(n ? n : 1));
    pl->gather = malloc(sizeof(int) * (size_t)(n ? n : 1));
    return pl->slots && pl->win && pl->stamp && pl->gather;
}

static void placer_reset(placer *pl) {
    pl->n_slots = 0;
    pl->query = 0;
    for (int w = 0; w < pl->n_win; w++) pl->win[w].n = 0;
}

static void placer_free(placer *pl) {
    for (int w = 0; pl->win && w < pl->n_win; w++) free(pl->win[w].slot);
    free(pl->slots), free(pl->win), free(pl->stamp), free(pl->gather);
}

/* Inserts slot s into window w's list after the slots of lower or equal offset. */
static bool window_insert(placer *pl, window *w, int s) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        int *grown = realloc(w->slot, sizeof(int) * (size_t)cap);
        if (!grown) return false;
        w->slot = grown, w->cap = cap;
    }
    int64_t off = pl->slots[s].off;
    int lo = 0, hi = w->n; /* the first slot of a higher offset */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pl->slots[w->slot[mid]].off <= off) lo = mid + 1;
        else hi = mid;
    }
    memmove(w->slot + lo + 1, w->slot + lo, sizeof(int) * (size_t)(w->n - lo));
    w->slot[lo] = s;
    w->n++;
    return true;
}

static int by_offset(const void *x, const void *y, void *ctx) {
    const placed_slot *slots = ctx;
    int64_t a = slots[*(const int *)x].off, b = slots[*(const int *)y].off;
    return a < b ? -1 : a > b;
}

static int window_of(const placer *pl, int32_t step) {
    int w = step < 0 ? 0 : step / WINDOW;
    return w < pl->n_win ? w : pl->n_win - 1;
}

/* The placed slots whose lifetimes overlap [first, last], in offset order: *list and its count. */
static int overlapping(placer *pl, int32_t first, int32_t last, const int **list) {
    int wa = window_of(pl, first), wb = window_of(pl, last);
    if (wa == wb) {
        *list = pl->win[wa].slot;
        return pl->win[wa].n;
    }
    int n = 0, q = ++pl->query;
    for (int w = wa; w <= wb; w++)
        for (int i = 0; i < pl->win[w].n; i++) {
            int s = pl->win[w].slot[i];
            if (pl->stamp[s] != q) pl->stamp[s] = q, pl->gather[n++] = s;
        }
    qsort_r(pl->gather, (size_t)n, sizeof(int), by_offset, pl->slots);
    *list = pl->gather;
    return n;
}

/* Places bufs[idx[0..n)] above `base` in that order; returns the arena's end, -1 when out of
 * memory, or INT64_MAX as soon as the end reaches `give_up` (an ordering that cannot beat the
 * best one so far is not finished: only a strictly smaller arena replaces it). off[] receives
 * offsets by buffer index. */
static int64_t place_order(const dfg_buf *bufs, const int *idx, int n, int64_t base, int64_t *off, placer *pl,
                           int64_t give_up) {
    placer_reset(pl);
    int64_t top = base;
    for (int q = 0; q < n; q++) {
        const dfg_buf *b = &bufs[idx[q]];
        const int32_t first = b->life.first, last = b->life.last;
        int64_t prev_end = base, best = -1, best_gap = INT64_MAX;
        const int *list;
        int n_list = overlapping(pl, first, last, &list);
        for (int r = 0; r < n_list; r++) {
            const placed_slot *c = &pl->slots[list[r]];
            if (c->first > last || first > c->last) continue; /* lifetimes do not overlap */
            int64_t gap = c->off - prev_end;
            if (gap >= b->size && gap < best_gap) best = prev_end, best_gap = gap;
            if (c->end > prev_end) prev_end = c->end;
        }
        const int64_t at_off = best >= 0 ? best : prev_end;
        off[idx[q]] = at_off;
        int s = pl->n_slots++;
        pl->slots[s] = (placed_slot){first, last, at_off, at_off + b->size};
        pl->stamp[s] = 0;
        for (int w = window_of(pl, first); w <= window_of(pl, last); w++)
            if (!window_insert(pl, &pl->win[w], s)) return -1;
        if (at_off + b->size > top) top = at_off + b->size;
        if (top >= give_up) return INT64_MAX;
    }
    return top;
}

/* The most bytes live at one step: no placement's arena is under it. */
static int64_t live_bound(const dfg_plan *plan) {
    int64_t *live = calloc((size_t)plan->n_steps + 2, sizeof(int64_t)), run = 0, best = 0;
    if (!live) return 0; /* no bound: every ordering is tried */
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *buf = &plan->bufs[b];
        if (buf->merged_into >= 0 || buf->life.first < 0) continue;
        live[buf->life.first] += buf->size;
        live[buf->life.last + 1] -= buf->size;
    }
    for (int s = 0; s <= plan->n_steps; s++) run += live[s], best = run > best ? run : best;
    free(live);
    return best;
}

dfg_status dfg_plan_place(dfg_program *p, dfg_plan *plan) {
    int nb = plan->n_bufs, nt = 0;
    int *idx = malloc(sizeof(int) * (size_t)(nb ? nb : 1));
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(nb ? nb : 1)), *best = malloc(sizeof(int64_t) * (size_t)(nb ? nb : 1));
    placer pl;
    bool ok = placer_init(&pl, nb, plan->n_steps);
    if (!idx || !off || !best || !ok) {
        free(idx), free(off), free(best), placer_free(&pl);
        return DFG_ERR_NOMEM;
    }
    int64_t base = 0;
    for (int b = 0; b < nb; b++) {
        dfg_buf *buf = &plan->bufs[b];
        if (buf->merged_into >= 0) continue;
        if (buf->persistent) buf->offset = base, base += buf->size;
        else idx[nt++] = b;
    }
    int64_t arena = base;
    if (plan->opt.no_reuse) { /* the baseline: every buffer its own bytes */
        for (int q = 0; q < nt; q++) plan->bufs[idx[q]].offset = arena, arena += plan->bufs[idx[q]].size;
        plan->report.placement = "none (no reuse)";
    } else {
        /* an ordering that reaches the bound cannot be beaten, and one that reaches the best
         * arena so far cannot win: both end the search early with the offsets a full search
         * of every ordering gives (remat places each of its trials, so this is most of its time) */
        int64_t best_top = -1, bound = live_bound(plan);
        for (size_t o = 0; o < sizeof(orderings) / sizeof(orderings[0]) && !(best_top >= 0 && best_top <= bound); o++) {
            qsort_r(idx, (size_t)nt, sizeof(int), orderings[o].cmp, plan->bufs);
            int64_t top = place_order(plan->bufs, idx, nt, base, off, &pl, best_top < 0 ? INT64_MAX : best_top);
            if (top < 0) {
                free(idx), free(off), free(best), placer_free(&pl);
                return DFG_ERR_NOMEM;
            }
            if (top != INT64_MAX && (best_top < 0 || top < best_top)) {
                best_top = top;
                memcpy(best, off, sizeof(int64_t) * (size_t)nb);
                plan->report.placement = orderings[o].name;
            }
        }
        for (int q = 0; q < nt; q++) plan->bufs[idx[q]].offset = best[idx[q]]; /* idx holds every buffer in some order */
        arena = best_top;
    }
    for (int b = 0; b < nb; b++)
        if (plan->bufs[b].merged_into >= 0) plan->bufs[b].offset = plan->bufs[plan->bufs[b].merged_into].offset;
    plan->report.arena_bytes = (size_t)(arena > 0 ? arena : (int64_t)plan->opt.align);
    free(idx), free(off), free(best), placer_free(&pl);

    plan->mem = (dfg_memplan){.arena_bytes = plan->report.arena_bytes, .align = plan->opt.align, .n_tensors = p->n_tensors};
    plan->mem.offset = dfg_plan_alloc(plan, sizeof(int64_t) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    if (!plan->mem.offset) return DFG_ERR_NOMEM;
    for (int i = 0; i < p->n_tensors; i++)
        plan->mem.offset[i] = plan->buf_of[i] >= 0 ? plan->bufs[plan->buf_of[i]].offset : 0;
    return DFG_OK;
}
