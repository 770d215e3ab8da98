/* plan_memory.c - the plan_memory pass (liveness.c, placement.c, report.c) and the check of
 * the finished plan: no two buffers that are live at the same step share a byte. */
#include <stdlib.h>

#include "plan.h"

dfg_status dfg_pass_plan_memory(dfg_program *p, const dfg_options *o) {
    (void)o;
    dfg_plan *plan = p->plan;
    if (dfg_plan_liveness(p, plan) || dfg_plan_place(p, plan))
        return dfg_program_err(p, DFG_ERR_NOMEM, "plan_memory: out of memory");
    dfg_plan_report(p, plan);
    return DFG_OK;
}

static int by_offset(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static dfg_status check_buffers(dfg_program *p, const dfg_plan *plan) {
    int n = 0;
    int *idx = malloc(sizeof(int) * (size_t)(plan->n_bufs ? plan->n_bufs : 1));
    if (!idx) return dfg_program_err(p, DFG_ERR_NOMEM, "verify_plan: out of memory");
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0) continue;
        if (x->offset < 0 || x->offset % (int64_t)plan->opt.align || x->offset + x->size > (int64_t)plan->mem.arena_bytes) {
            free(idx);
            return dfg_program_err(p, DFG_ERR_STATE, "verify_plan: '%s' at offset %lld (+%lld) is misaligned or outside the %zu-byte arena",
                                     p->tensors[x->owner]->name, (long long)x->offset, (long long)x->size, plan->mem.arena_bytes);
        }
        idx[n++] = b;
    }
    qsort_r(idx, (size_t)n, sizeof(int), by_offset, plan->bufs);
    dfg_status st = DFG_OK;
    for (int i = 0; i < n && !st; i++) {
        const dfg_buf *a = &plan->bufs[idx[i]];
        for (int j = i + 1; j < n && plan->bufs[idx[j]].offset < a->offset + a->size && !st; j++) {
            const dfg_buf *b = &plan->bufs[idx[j]];
            if (a->life.first <= b->life.last && b->life.first <= a->life.last)
                st = dfg_program_err(p, DFG_ERR_STATE, "verify_plan: '%s' and '%s' are live together (steps %d-%d and %d-%d) but share bytes",
                                       p->tensors[a->owner]->name, p->tensors[b->owner]->name, a->life.first, a->life.last,
                                       b->life.first, b->life.last);
        }
    }
    free(idx);
    return st;
}

/* Every tensor a staged node touches has bytes, and its own lifetime is inside its buffer's. */
static dfg_status check_tensors(dfg_program *p, const dfg_plan *plan) {
    for (int i = 0; i < p->n_tensors; i++) {
        dfg_span l = plan->life[i];
        if (l.first < 0) continue;
        int b = dfg_plan_buf_root(plan, i);
        if (b < 0 || l.first < plan->bufs[b].life.first || l.last > plan->bufs[b].life.last)
            return dfg_program_err(p, DFG_ERR_STATE, "verify_plan: '%s' (steps %d-%d) is not covered by its buffer",
                                     p->tensors[i]->name, l.first, l.last);
    }
    return DFG_OK;
}

dfg_status dfg_pass_verify_plan(dfg_program *p, const dfg_options *o) {
    (void)o;
    dfg_status st = check_buffers(p, p->plan);
    return st ? st : check_tensors(p, p->plan);
}
