/* nn_schedule.c - the learning-rate schedules of transformers' Trainer (TRL's lr_scheduler_type):
 * linear, cosine, constant and constant_with_warmup, with their formulas from
 * transformers/optimization.py, and the rate of each AdamW step read in the graph from a table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"

#define PI 3.14159265358979323846 /* math.pi, the double nearest pi */

static const char *const type_names[] = {"linear", "cosine", "constant", "constant_with_warmup"};

/* The warm-up's factor at 0-based step k < warmup: k / max(1, warmup), as every schedule with a
 * warm-up computes it. */
static double warm(int64_t k, int64_t warmup) { return (double)k / (double)(warmup > 1 ? warmup : 1); }

double dfg_lr_lambda(const dfg_lr_schedule *s, int64_t k) {
    switch (s->type) {
    case DFG_LR_CONSTANT: /* get_constant_schedule: no warm-up, whatever warmup_steps says */
        return 1.0;
    case DFG_LR_CONSTANT_WITH_WARMUP:
        return k < s->warmup ? warm(k, s->warmup) : 1.0;
    case DFG_LR_LINEAR: {
        if (k < s->warmup) return warm(k, s->warmup);
        int64_t rest = s->total - s->warmup;
        double f = (double)(s->total - k) / (double)(rest > 1 ? rest : 1);
        return f > 0.0 ? f : 0.0;
    }
    case DFG_LR_COSINE: { /* num_cycles 0.5: half a cosine from 1 to 0 */
        if (k < s->warmup) return warm(k, s->warmup);
        int64_t rest = s->total - s->warmup;
        double progress = (double)(k - s->warmup) / (double)(rest > 1 ? rest : 1);
        double f = 0.5 * (1.0 + cos(PI * 0.5 * 2.0 * progress));
        return f > 0.0 ? f : 0.0;
    }
    }
    return 1.0;
}

const char *dfg_lr_scheduler_name(dfg_lr_scheduler t) {
    return (unsigned)t < sizeof(type_names) / sizeof(type_names[0]) ? type_names[t] : "?";
}

dfg_status dfg_lr_schedule_from_settings(dfg_program *p, double lr, int64_t total, int64_t offset, dfg_lr_schedule *out) {
    if (!p || !out || total < 0 || offset < 0 || !(lr >= 0)) return DFG_ERR_ARG;
    bool given = dfg_program_has(p, "lr_scheduler_type");
    int type = dfg_setting_enum(p, "lr_scheduler_type", total > 0 ? "linear" : "constant");
    int64_t warmup_steps = dfg_setting_int(p, "warmup_steps", 0);
    double ratio = dfg_setting_float(p, "warmup_ratio", 0.0);
    if (dfg_program_status(p)) return dfg_program_status(p);
    dfg_lr_schedule s = {.type = (dfg_lr_scheduler)type, .total = total, .offset = offset, .lr = lr};
    /* transformers' get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio x total) */
    s.warmup = warmup_steps > 0 ? warmup_steps : (int64_t)ceil(ratio * (double)total);
    bool needs_total = s.type == DFG_LR_LINEAR || s.type == DFG_LR_COSINE ||
                       (s.type == DFG_LR_CONSTANT_WITH_WARMUP && warmup_steps == 0 && ratio > 0);
    if (needs_total && total == 0)
        return dfg_program_fail(p, DFG_ERR_ARG, "lr_scheduler_type=%s%s needs max_steps (the schedule's length): "
                                "--set max_steps=N", type_names[type], s.type == DFG_LR_CONSTANT_WITH_WARMUP ?
                                " with warmup_ratio" : "");
    if (s.type == DFG_LR_CONSTANT) s.warmup = 0; /* get_scheduler passes constant no warm-up */
    /* the rate changes from step to step: the AdamW node reads it from the table */
    s.on = s.type == DFG_LR_LINEAR || s.type == DFG_LR_COSINE || s.warmup > 0;
    s.log = s.on || given;
    *out = s;
    return DFG_OK;
}

/* The table's length: the steps whose rates differ, then the last rate, which every later step
 * keeps (linear and cosine: 0, as transformers' linear stays; the others: the base rate). */
static int64_t table_len(const dfg_lr_schedule *s) {
    if (s->type == DFG_LR_LINEAR || s->type == DFG_LR_COSINE) return s->total + 1;
    return s->warmup + 1;
}

/* The program's table of rates, learning_rate x lambda(k) for 0-based step k, each rounded to
 * f32 once from double (transformers multiplies in double); made by the first call. */
static dfg_tensor *rate_table(dfg_program *p, const dfg_lr_schedule *s, const char *prefix) {
    char name[320];
    snprintf(name, sizeof(name), "%sadamw.lr_schedule", prefix);
    int64_t len = table_len(s);
    dfg_tensor *t = dfg_find(p, name);
    if (t) {
        if (dfg_tensor_kind(t) != DFG_CONST || !dfg_shape_equal(dfg_tensor_shape(t), DFG_SHAPE(len))) {
            dfg_program_fail(p, DFG_ERR_ARG, "'%s' exists already with another kind or length", name);
            return NULL;
        }
        return t;
    }
    float *v = malloc(sizeof(float) * (size_t)len);
    if (!v) {
        dfg_program_fail(p, DFG_ERR_NOMEM, "'%s': out of memory for %lld rates", name, (long long)len);
        return NULL;
    }
    for (int64_t k = 0; k < len; k++) v[k] = (float)(s->lr * dfg_lr_lambda(s, k));
    t = dfg_const(p, name, DFG_F32, DFG_SHAPE(len), v);
    free(v);
    return t;
}

dfg_tensor *dfg_nn_lr(dfg_program *p, dfg_graph *g, const dfg_lr_schedule *s, dfg_tensor *step, const char *prefix) {
    if (!p || !g || !s || !s->on || !step) return NULL;
    if (table_len(s) > 16777216 || s->offset > 16777216) { /* the index's clamp and offset are f32-exact */
        dfg_program_fail(p, DFG_ERR_ARG, "the learning-rate schedule spans %lld steps after %lld; at most 2^24",
                         (long long)table_len(s), (long long)s->offset);
        return NULL;
    }
    dfg_tensor *table = rate_table(p, s, prefix ? prefix : "");
    if (!table) return NULL;
    /* step counts from 1 and includes the steps before the schedule (offset); past the table's
     * end the last rate holds */
    dfg_tensor *k = dfg_affine(g, step, 1.0f, -(float)(1 + s->offset));
    k = dfg_clamp(g, k, 0.0f, (float)(table_len(s) - 1));
    return dfg_take(g, table, dfg_name(k, "lr_schedule.index"));
}
