/* grpo_graph.c - graph-building helpers of the GRPO pipeline (examples/grpo/grpo.c): its reward and
 * completion metrics, and what data parallel changes in its graphs (dfg_grpo_data.h). Written with
 * dfg's public DSL only. */
#include "dfg_grpo_data.h"
#include "dfg_nn.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* ---------------------------------------------------------------- metrics */
dfg_tensor *dfg_grpo_frac_zero_std(dfg_graph *g, dfg_tensor *rewards, int64_t G) {
    dfg_tensor *grouped = dfg_reshape(g, rewards, DFG_SHAPE(-1, G));
    dfg_tensor *same = dfg_equal(g, grouped, dfg_slice(g, grouped, 1, 0, 1)); /* (P, G) */
    dfg_tensor *all = dfg_equal(g, dfg_sum(g, same, 1), dfg_fill(g, DFG_F32, DFG_SCALAR, (float)G));
    return dfg_mean(g, all, 0);
}

/* the largest of x (N) */
static dfg_tensor *max_of(dfg_graph *g, dfg_tensor *x) { return dfg_take(g, x, dfg_argmax(g, x)); }

void dfg_grpo_completion_metrics(dfg_graph *g, dfg_tensor *len, dfg_tensor *truncated, int64_t max_new) {
    dfg_tensor *term = dfg_affine(g, truncated, -1.0f, 1.0f); /* (N) 1 on the rows that ended with an EOS */
    dfg_tensor *n_term = dfg_sum(g, term, 0);
    dfg_tensor *any = dfg_affine(g, dfg_equal(g, n_term, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f)), -1.0f, 1.0f);
    float out_of_reach = (float)(max_new + 1); /* longer than any completion */
    dfg_metric(g, "completions/mean_length", dfg_mean(g, len, 0));
    dfg_metric(g, "completions/min_length", dfg_neg(g, max_of(g, dfg_neg(g, len))));
    dfg_metric(g, "completions/max_length", max_of(g, len));
    dfg_metric(g, "completions/clipped_ratio", dfg_mean(g, truncated, 0));
    dfg_tensor *term_len = dfg_mul(g, len, term);
    dfg_metric(g, "completions/mean_terminated_length",
               dfg_div(g, dfg_sum(g, term_len, 0), dfg_maximum(g, n_term, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f))));
    dfg_tensor *lo = dfg_add(g, term_len, dfg_scale(g, truncated, out_of_reach)); /* truncated rows out of reach */
    dfg_metric(g, "completions/min_terminated_length", dfg_mul(g, dfg_neg(g, max_of(g, dfg_neg(g, lo))), any));
    dfg_metric(g, "completions/max_terminated_length", max_of(g, term_len));
}

void dfg_grpo_function_metrics(dfg_graph *g, dfg_tensor *values, int F, const char (*names)[68]) {
    dfg_tensor *has = dfg_equal(g, values, values);                                   /* (n, F) 0 on NaN */
    dfg_tensor *v = dfg_where(g, has, values, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f)); /* (n, F) */
    dfg_tensor *count = dfg_sum(g, has, 0);                                             /* (F) */
    dfg_tensor *mean = dfg_div(g, dfg_sum(g, v, 0), count);                             /* (F) NaN for none */
    dfg_tensor *dev = dfg_mul(g, dfg_sub(g, v, mean), has);                             /* (n, F) */
    dfg_tensor *dof = dfg_maximum(g, dfg_add_scalar(g, count, -1.0f), dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f));
    dfg_tensor *std = dfg_sqrt(g, dfg_div(g, dfg_sum(g, dfg_mul(g, dev, dev), 0), dof)); /* (F) */
    for (int f = 0; f < F; f++) {
        char name[96];
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof(name), "rewards/%s/%s", names[f], k ? "std" : "mean");
            /* nullable: a function that applied to no row has no mean (TRL logs NaN; dfg, null) */
            dfg_metric_nullable(g, name, dfg_reshape(g, dfg_slice(g, k ? std : mean, 0, f, 1), DFG_SCALAR));
        }
    }
}

/* ---------------------------------------------------------------- sampling against training */
/* sum: |difference|, scored tokens, then the correction's ratio, raw ratio, modified flags and
 * their count; max: |difference|, ratio, raw ratio; min: ratio, raw ratio */
enum { SUM_DELTA, SUM_TOKENS, SUM_RATIO, SUM_RAW, SUM_MODIFIED, SUM_COUNT, N_SUMS };

dfg_status dfg_grpo_sampling_state(dfg_program *p, dfg_grpo_sampling *s) {
    s->sampled = dfg_state(p, "gen.sampled", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    s->sum = dfg_state(p, "train.sampling_sum", DFG_F32, DFG_SHAPE(N_SUMS), DFG_ROLE_NONE, dfg_init_zeros());
    s->max = dfg_state(p, "train.sampling_max", DFG_F32, DFG_SHAPE(3), DFG_ROLE_NONE, dfg_init_zeros());
    s->min = dfg_state(p, "train.sampling_min", DFG_F32, DFG_SHAPE(2), DFG_ROLE_NONE, dfg_init_constant(FLT_MAX));
    return dfg_program_status(p);
}

void dfg_grpo_sampling_start(dfg_graph *g, const dfg_grpo_sampling *s) {
    dfg_assign_fill(g, s->sampled, 1.0f);
    dfg_assign_fill(g, s->sum, 0.0f);
    dfg_assign_fill(g, s->max, 0.0f);
    dfg_assign_fill(g, s->min, FLT_MAX); /* any ratio is less */
}

/* the largest element of x, as (1) */
static dfg_tensor *largest(dfg_graph *g, dfg_tensor *x) {
    dfg_tensor *flat = dfg_reshape(g, x, DFG_SHAPE(-1));
    return dfg_reshape(g, max_of(g, flat), DFG_SHAPE(1));
}

static dfg_tensor *total(dfg_graph *g, dfg_tensor *x) {
    return dfg_reshape(g, dfg_sum(g, dfg_reshape(g, x, DFG_SHAPE(-1)), 0), DFG_SHAPE(1));
}

/* the least of x where `on`, as (1) (FLT_MAX when none is) */
static dfg_tensor *least_on(dfg_graph *g, dfg_tensor *x, dfg_tensor *on) {
    dfg_tensor *off = dfg_where(g, on, x, dfg_fill(g, DFG_F32, DFG_SCALAR, FLT_MAX));
    return dfg_neg(g, largest(g, dfg_neg(g, off)));
}

void dfg_grpo_sampling_compare(dfg_graph *g, const dfg_grpo_sampling *s, dfg_tensor *logp, dfg_tensor *sampling,
                               dfg_tensor *mask, const dfg_grpo_ratios *r) {
    dfg_tensor *diff = dfg_sub(g, logp, sampling);                                 /* (n, W) */
    dfg_tensor *delta = dfg_mul(g, dfg_maximum(g, diff, dfg_neg(g, diff)), mask); /* |diff|, 0 off the mask */
    dfg_tensor *zero = dfg_fill(g, DFG_F32, DFG_SHAPE(1), 0.0f);
    dfg_tensor *sums[N_SUMS] = {total(g, delta), total(g, mask), zero, zero, zero, zero};
    dfg_tensor *most[3] = {largest(g, delta), zero, zero}, *least[2] = {zero, zero};
    if (r && r->ratio) { /* TRL's: a sequence mode's ratios are every sequence's, a token mode's the scored tokens' */
        dfg_tensor *on = dfg_tensor_shape(r->ratio).d[1] == 1 ? dfg_fill(g, DFG_F32, dfg_tensor_shape(r->ratio), 1.0f) : mask;
        sums[SUM_RATIO] = total(g, dfg_mul(g, r->ratio, on));
        sums[SUM_RAW] = total(g, dfg_where(g, on, r->raw, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f)));
        sums[SUM_MODIFIED] = total(g, dfg_mul(g, r->modified, on));
        sums[SUM_COUNT] = total(g, on);
        most[1] = largest(g, dfg_mul(g, r->ratio, on)), most[2] = largest(g, dfg_where(g, on, r->raw, zero));
        least[0] = least_on(g, r->ratio, on), least[1] = least_on(g, r->raw, on);
    }
    dfg_accumulate(g, s->sum, dfg_concat(g, sums, N_SUMS, 0));
    dfg_assign(g, s->max, dfg_maximum(g, s->max, dfg_concat(g, most, 3, 0)));
    dfg_assign(g, s->min, dfg_minimum(g, s->min, dfg_concat(g, least, 2, 0)));
}

/* (1) the i-th of x */
static dfg_tensor *at(dfg_graph *g, dfg_tensor *x, int i) { return dfg_slice(g, x, 0, i, 1); }

void dfg_grpo_sampling_metrics(dfg_graph *g, const dfg_grpo_sampling *s, int world, bool ratios) {
    static const char *const names[9] = {"sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                                         "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                                         "sampling/importance_sampling_ratio/max", "sampling/raw_importance_sampling_ratio/min",
                                         "sampling/raw_importance_sampling_ratio/mean", "sampling/raw_importance_sampling_ratio/max",
                                         "sampling/frac_modified_importance_sampling_ratio"};
    dfg_tensor *none = dfg_fill(g, DFG_F32, DFG_SCALAR, NAN), *zero = dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f);
    dfg_tensor *one = dfg_fill(g, DFG_F32, DFG_SHAPE(1), 1.0f), *big = dfg_fill(g, DFG_F32, DFG_SCALAR, FLT_MAX);
    dfg_tensor *sums = dfg_grpo_world_reduce(g, s->sum, DFG_COLL_SUM, world); /* every rank's */
    dfg_tensor *most = dfg_grpo_world_reduce(g, s->max, DFG_COLL_MAX, world);
    /* a rank with no scored token (no ratio) takes no part in the least; none anywhere: 0, as TRL */
    dfg_tensor *mine = dfg_reshape(g, at(g, s->sum, SUM_COUNT), DFG_SCALAR), *all = dfg_reshape(g, at(g, sums, SUM_COUNT), DFG_SCALAR);
    dfg_tensor *least = dfg_where(g, dfg_equal(g, mine, zero), big, s->min);
    least = dfg_where(g, dfg_equal(g, all, zero), zero, dfg_grpo_world_reduce(g, least, DFG_COLL_MIN, world));
    dfg_tensor *tokens = dfg_maximum(g, at(g, sums, SUM_TOKENS), one), *count = dfg_maximum(g, at(g, sums, SUM_COUNT), one);
    dfg_tensor *v[9] = {dfg_div(g, at(g, sums, SUM_DELTA), tokens), at(g, most, 0),
                        at(g, least, 0), dfg_div(g, at(g, sums, SUM_RATIO), count), at(g, most, 1),
                        at(g, least, 1), dfg_div(g, at(g, sums, SUM_RAW), count), at(g, most, 2),
                        dfg_div(g, at(g, sums, SUM_MODIFIED), count)};
    for (int i = 0; i < (ratios ? 9 : 2); i++)
        dfg_metric_nullable(g, names[i], dfg_where(g, s->sampled, dfg_reshape(g, v[i], DFG_SCALAR), none));
    dfg_assign_fill(g, s->sampled, 0.0f); /* and the sums start again: a --rollouts step has no prefill */
    dfg_assign_fill(g, s->sum, 0.0f);
    dfg_assign_fill(g, s->max, 0.0f);
    dfg_assign_fill(g, s->min, FLT_MAX);
}

void dfg_grpo_declare_metric_dumps(dfg_program *p) {
    static const char *const lengths[] = {"completions/mean_length", "completions/min_length", "completions/max_length",
                                          "completions/clipped_ratio", "completions/mean_terminated_length",
                                          "completions/min_terminated_length", "completions/max_terminated_length",
                                          "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                                          "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                                          "sampling/importance_sampling_ratio/max", "sampling/raw_importance_sampling_ratio/min",
                                          "sampling/raw_importance_sampling_ratio/mean",
                                          "sampling/raw_importance_sampling_ratio/max",
                                          "sampling/frac_modified_importance_sampling_ratio"};
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        char name[80];
        snprintf(name, sizeof(name), "metric.%s", lengths[i]);
        if (dfg_find(p, name)) dfg_declare_dump(p, name + 7, dfg_find(p, name));
    }
}

/* ---------------------------------------------------------------- data parallel */
dfg_tensor *dfg_grpo_rank_row0(dfg_graph *g, int world, int64_t rows) {
    return world > 1 ? dfg_scale(g, dfg_rank(g, world), (float)rows) : NULL;
}

dfg_tensor *dfg_grpo_world_rows(dfg_graph *g, dfg_tensor *x, int world) {
    return world > 1 ? dfg_all_gather(g, x, world) : x;
}

dfg_tensor *dfg_grpo_world_reduce(dfg_graph *g, dfg_tensor *x, dfg_coll_op op, int world) {
    return x && world > 1 ? dfg_allreduce(g, x, op, world) : x;
}
