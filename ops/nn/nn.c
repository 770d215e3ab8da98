/* nn.c - the training helpers (gradient buffers, a frozen copy's init, mixed-precision AdamW)
 * built only from public DSL calls: what a user of dfg would write. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"

/* ---------------------------------------------------------------- training helpers */
/* The STATE `name`: the existing one when an earlier call made it (several graphs of one program
 * share an optimizer: a warm-up and the RL update), else a new one. */
static dfg_tensor *state_once(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_role role,
                              bool *made) {
    dfg_tensor *t = dfg_find(p, name);
    if (made) *made = !t;
    if (!t) return dfg_state(p, name, dt, shape, role, dfg_init_zeros());
    if (dfg_tensor_kind(t) != DFG_STATE || dfg_tensor_dtype(t) != dt || !dfg_shape_equal(dfg_tensor_shape(t), shape)) {
        dfg_program_fail(p, DFG_ERR_ARG, "'%s' exists already with another kind, dtype or shape", name);
        return NULL;
    }
    return t;
}

static dfg_tensor *optim_state(dfg_program *p, const char *prefix, const char *what, const dfg_tensor *param,
                               bool *made) {
    char name[320];
    snprintf(name, sizeof(name), "%s%s%s", prefix, what, dfg_tensor_name(param));
    return state_once(p, name, DFG_F32, dfg_tensor_shape(param), DFG_ROLE_OPTIM, made);
}

dfg_status dfg_nn_grad_buffers(dfg_program *p, dfg_tensor *const *params, int n, const char *prefix, dfg_tensor **out) {
    if (!p || n < 1 || !params || !out) return DFG_ERR_ARG;
    char name[320];
    for (int i = 0; i < n && !dfg_program_status(p); i++) {
        snprintf(name, sizeof(name), "%sgrad.%s", prefix ? prefix : "", dfg_tensor_name(params[i]));
        out[i] = state_once(p, name, dfg_tensor_dtype(params[i]), dfg_tensor_shape(params[i]), DFG_ROLE_GRAD, NULL);
    }
    return dfg_program_status(p);
}

dfg_status dfg_nn_init_copy(dfg_program *p, dfg_tensor *const *dst, dfg_tensor *const *src, int n) {
    if (!p || n < 0 || (n > 0 && (!dst || !src))) return DFG_ERR_ARG;
    for (int i = 0; i < n && !dfg_program_status(p); i++) dfg_init_from(p, dst[i], src[i]);
    return dfg_program_status(p);
}

dfg_status dfg_nn_adamw_step(dfg_program *p, dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, int n,
                             dfg_adamw_config cfg, const char *prefix) {
    return dfg_nn_adamw_step_scheduled(p, g, params, grads, n, cfg, NULL, prefix, NULL);
}

/* One update of a parameter (or its master): the schedule's rate when there is one. */
static void adamw_one(dfg_graph *g, dfg_tensor *param, dfg_tensor *grad, dfg_tensor *m, dfg_tensor *v, dfg_tensor *step,
                      dfg_tensor *lr, dfg_adamw_config c) {
    if (lr) dfg_adamw_lr(g, &param, &grad, &m, &v, 1, step, lr, c);
    else dfg_adamw(g, &param, &grad, &m, &v, 1, step, c);
}

dfg_status dfg_nn_adamw_step_scheduled(dfg_program *p, dfg_graph *g, dfg_tensor *const *params,
                                       dfg_tensor *const *grads, int n, dfg_adamw_config cfg,
                                       const dfg_lr_schedule *sched, const char *prefix, dfg_tensor **lr_out) {
    if (!p || !g || n < 1 || !params || !grads) return DFG_ERR_ARG;
    if (dfg_program_status(p)) return dfg_program_status(p);
    const char *pre = prefix ? prefix : "";
    char name[320];
    snprintf(name, sizeof(name), "%sadamw.step", pre);
    dfg_tensor *step = state_once(p, name, DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, NULL);
    if (!step) return dfg_program_status(p);
    /* += 1 before the update: the bias correction counts steps from 1 */
    dfg_assign(g, step, dfg_add(g, step, dfg_fill(g, DFG_I32, DFG_SCALAR, 1.0f)));
    dfg_tensor *lr = sched && sched->on ? dfg_nn_lr(p, g, sched, step, pre) : NULL;
    if (sched && sched->on && !lr) return dfg_program_status(p) ? dfg_program_status(p) : dfg_graph_status(g);
    if (lr_out) *lr_out = lr ? lr : dfg_fill(g, DFG_F32, DFG_SCALAR, cfg.lr);
    for (int i = 0; i < n; i++) {
        dfg_tensor *param = params[i], *grad = grads[i];
        dfg_tensor *m = optim_state(p, pre, "adamw.m.", param, NULL), *v = optim_state(p, pre, "adamw.v.", param, NULL);
        if (!m || !v) return dfg_program_status(p);
        dfg_dtype dt = dfg_tensor_dtype(param);
        dfg_adamw_config c = cfg;
        if (dfg_tensor_shape(param).rank < 2) c.weight_decay = 0.0f; /* biases, LayerNorm */
        if (dt == DFG_F32) { /* full precision: the parameter is its own master */
            adamw_one(g, param, grad, m, v, step, lr, c);
            continue;
        }
        bool made = false;
        dfg_tensor *master = optim_state(p, pre, "master.", param, &made);
        /* the master starts as the parameter, widened (also after --weights loads the parameter) */
        if (!master || (made && dfg_init_from(p, master, param))) return dfg_program_status(p);
        /* the update in f32: a bf16 step of lr * m / sqrt(v) would round away against the weight.
         * The 16-bit gradient goes in as it is; the AdamW kernel widens it element by element,
         * so no f32 copy of a parameter-sized gradient is ever stored. */
        adamw_one(g, master, grad, m, v, step, lr, c);
        dfg_assign(g, param, master); /* rounds to the parameter's dtype, no temporary */
    }
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_program_status(p);
}
