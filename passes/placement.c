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

/* A placed buffer as the best-fit scan reads it: its lifetime and its bytes [off, end). The scan
 * walks every placed buffer for every buffer placed (quadratic: tens of thousands of buffers in a
 * billion-parameter program, placed again for each remat trial), so they are kept in one
 * contiguous array in offset order rather than reached through the buffer table. */
typedef struct {
    int32_t first, last;
    int64_t off, end;
} placed_slot;

/* Places bufs[idx[0..n)] above `base` in that order; returns the arena's end, or -1 when out
 * of memory. off[] receives offsets by buffer index; placed[] is scratch for n slots. */
static int64_t place_order(const dfg_buf *bufs, const int *idx, int n, int64_t base, int64_t *off, placed_slot *placed) {
    int n_placed = 0; /* placed[] stays sorted by offset */
    int64_t top = base;
    for (int q = 0; q < n; q++) {
        const dfg_buf *b = &bufs[idx[q]];
        const int32_t first = b->life.first, last = b->life.last;
        int64_t prev_end = base, best = -1, best_gap = INT64_MAX;
        for (int r = 0; r < n_placed; r++) {
            const placed_slot *c = &placed[r];
            if (c->first > last || first > c->last) continue; /* lifetimes do not overlap */
            int64_t gap = c->off - prev_end;
            if (gap >= b->size && gap < best_gap) best = prev_end, best_gap = gap;
            if (c->end > prev_end) prev_end = c->end;
        }
        const int64_t at_off = best >= 0 ? best : prev_end;
        off[idx[q]] = at_off;
        int at = n_placed;
        while (at > 0 && placed[at - 1].off > at_off) at--;
        memmove(placed + at + 1, placed + at, sizeof(placed_slot) * (size_t)(n_placed - at));
        placed[at] = (placed_slot){first, last, at_off, at_off + b->size};
        n_placed++;
        if (at_off + b->size > top) top = at_off + b->size;
    }
    return top;
}

dfg_status dfg_plan_place(dfg_program *p, dfg_plan *plan) {
    int nb = plan->n_bufs, nt = 0;
    int *idx = malloc(sizeof(int) * (size_t)(nb ? nb : 1));
    placed_slot *placed = malloc(sizeof(placed_slot) * (size_t)(nb ? nb : 1));
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(nb ? nb : 1)), *best = malloc(sizeof(int64_t) * (size_t)(nb ? nb : 1));
    if (!idx || !placed || !off || !best) {
        free(idx), free(placed), free(off), free(best);
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
        int64_t best_top = -1;
        for (size_t o = 0; o < sizeof(orderings) / sizeof(orderings[0]); o++) {
            qsort_r(idx, (size_t)nt, sizeof(int), orderings[o].cmp, plan->bufs);
            int64_t top = place_order(plan->bufs, idx, nt, base, off, placed);
            if (best_top < 0 || top < best_top) {
                best_top = top;
                memcpy(best, off, sizeof(int64_t) * (size_t)nb);
                plan->report.placement = orderings[o].name;
            }
        }
        for (int q = 0; q < nt; q++) plan->bufs[idx[q]].offset = best[idx[q]];
        arena = best_top;
    }
    for (int b = 0; b < nb; b++)
        if (plan->bufs[b].merged_into >= 0) plan->bufs[b].offset = plan->bufs[plan->bufs[b].merged_into].offset;
    plan->report.arena_bytes = (size_t)(arena > 0 ? arena : (int64_t)plan->opt.align);
    free(idx), free(placed), free(off), free(best);

    plan->mem = (dfg_memplan){.arena_bytes = plan->report.arena_bytes, .align = plan->opt.align, .n_tensors = p->n_tensors};
    plan->mem.offset = dfg_plan_alloc(plan, sizeof(int64_t) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    if (!plan->mem.offset) return DFG_ERR_NOMEM;
    for (int i = 0; i < p->n_tensors; i++)
        plan->mem.offset[i] = plan->buf_of[i] >= 0 ? plan->bufs[plan->buf_of[i]].offset : 0;
    return DFG_OK;
}
