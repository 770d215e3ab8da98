/* cli_fit_parts.c - what dfg fit reads off a compiled candidate: its persistent bytes by what
 * they hold, the device workspace a cuda plan allocates after its arena, and why remat found no
 * plan within a budget. */
#include <stdio.h>

#include "../graph/ir.h"
#include "cli_fit.h"


/* The persistent bytes of a compiled program by what they hold: the buffers the planner makes
 * persistent (passes/liveness.c: a storage owner that is not a temporary nor scoped, and not
 * removed), each at its aligned size, as report.c sums them. */
persistent_parts cli_fit_persistent_of(const dfg_program *p) {
    persistent_parts s = {0};
    const dfg_report *r = dfg_program_report(p);
    size_t align = r && r->align ? r->align : 1;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->storage != t || (t->flags & DFG_TF_DEAD) || t->kind == DFG_TEMP || t->scope_first) continue;
        int64_t b = (int64_t)((dfg_tensor_bytes(t) + align - 1) / align * align);
        switch (t->role) {
        case DFG_ROLE_PARAM: s.weights += b; break;
        case DFG_ROLE_GRAD: s.grads += b; break;
        case DFG_ROLE_OPTIM: s.optim += b; break;
        case DFG_ROLE_REF_MODEL: s.ref += b; break;
        case DFG_ROLE_BASE_MODEL: s.base += b; break;
        default:
            if (t->kind == DFG_PARAM) s.weights += b;
            else s.other += b;
        }
        if (t->kind == DFG_PARAM && t->role != DFG_ROLE_REF_MODEL) s.n_params += dfg_shape_numel(t->shape);
    }
    s.total = s.weights + s.grads + s.optim + s.ref + s.base + s.other;
    if (r && s.total != (int64_t)r->persistent_bytes) { /* the report's sum is the plan's: keep it, the rest as "other" */
        s.other += (int64_t)r->persistent_bytes - s.total;
        s.total = (int64_t)r->persistent_bytes;
    }
    return s;
}

/* The model's state: what no setting of batch, length, micro-batches, rollout sub-batches or
 * remat shrinks (a knob that keeps the math, or a batch or length, does not change which weights
 * are trained nor how: their gradients and optimizer state stay; the reference model too). */
int64_t cli_fit_model_state(const persistent_parts *s) { return s->weights + s->grads + s->optim + s->ref + s->base; }

/* On cuda the budget is the device's: the arena and the workspace that follows it in the same
 * allocation (this build's GPU device layer sizes it; without one, the emulated device's, which
 * lacks the GEMM library's). Not the CUDA context, which the driver takes before any plan. */
int64_t cli_fit_workspace_of(const dfg_program *p, dfg_target target) {
    dfg_device_workspace w;
    if (target != DFG_TARGET_CUDA) return 0;
    if (!dfg_runtime_device_workspace(p, false, &w) || !dfg_runtime_device_workspace(p, true, &w)) return (int64_t)w.total_bytes;
    return 0;
}

/* Why remat found no plan within the budget, from its result: "the smallest plan found needs
 * 1.91 GiB (persistent tensors 1.20 GiB, 14 activations recomputed); at its peak: params ...,
 * activations ..." (the three largest categories at that plan's peak). */
void cli_fit_remat_note(const dfg_remat_result *r, char *buf, size_t len) {
    char need[32], per[32], b[32];
    size_t at = (size_t)snprintf(buf, len, "the smallest plan found needs %s (persistent tensors %s, %d activations "
                                 "recomputed); at its peak:", dfg_bytes_str((double)r->arena_bytes, need, sizeof(need)),
                                 dfg_bytes_str((double)r->persistent_bytes, per, sizeof(per)), r->recomputed);
    bool used[DFG_CAT_COUNT] = {0};
    for (int k = 0; k < 3; k++) {
        int top = -1;
        for (int cat = 0; cat < DFG_CAT_COUNT; cat++)
            if (!used[cat] && r->peak[cat] && (top < 0 || r->peak[cat] > r->peak[top])) top = cat;
        if (top < 0) break;
        used[top] = true;
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s %s %s", k ? "," : "",
                               dfg_category_name((dfg_category)top), dfg_bytes_str((double)r->peak[top], b, sizeof(b)));
    }
}


/* "weights 1.84 GiB, gradients 1.84 GiB, optimizer state 3.68 GiB, inputs and rollout buffers
 * 12.2 KiB": the parts there are. */
void cli_fit_parts_str(const persistent_parts *s, char *buf, size_t len) {
    const char *name[] = {"weights", "gradients", "optimizer state", "the reference model", "the frozen base model",
                          "inputs and rollout buffers"};
    const int64_t v[] = {s->weights, s->grads, s->optim, s->ref, s->base, s->other};
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < 6; i++) {
        char b[32];
        if (v[i] > 0)
            at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s %s", at ? ", " : "", name[i],
                                   dfg_bytes_str((double)v[i], b, sizeof(b)));
    }
}
