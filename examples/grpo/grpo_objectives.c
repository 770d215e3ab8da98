/* grpo_objectives.c - advantages from several reward functions, TRL's multi_objective_aggregation
 * normalize_then_sum (dfg_grpo_eval.h; sum_then_normalize is dfg_grpo_advantages on the weighted
 * sum). TRL's NaN arithmetic (nanmean, nanstd, nansum) is written with masks: a None is a value
 * with weight 0, so no NaN ever enters an op. Written with dfg's public DSL only. */
#include <math.h>

#include "dfg_grpo_eval.h"

static dfg_tensor *scalar(dfg_graph *g, float v) { return dfg_fill(g, DFG_F32, DFG_SCALAR, v); }

/* a >= b as 0/1 (max(a, b) == a, exactly) */
static dfg_tensor *at_least(dfg_graph *g, dfg_tensor *a, float b) { return dfg_equal(g, dfg_maximum(g, a, scalar(g, b)), a); }

/* nanstd's Bessel-corrected deviation of the values dev (x - their mean, 0 where x is None) over
 * `axis`, count the values there: sqrt(sum dev^2 / (count - 1)); count <= 1 gives 0 here and NaN in
 * TRL, which the callers leave out through their own masks */
static dfg_tensor *masked_std(dfg_graph *g, dfg_tensor *dev, dfg_tensor *count, int axis) {
    dfg_tensor *dof = dfg_maximum(g, dfg_add_scalar(g, count, -1.0f), scalar(g, 1.0f));
    return dfg_sqrt(g, dfg_div(g, dfg_sum(g, dfg_mul(g, dev, dev), axis), dof));
}

dfg_tensor *dfg_grpo_normalize_then_sum(dfg_graph *g, dfg_tensor *values, const float *weights, int64_t G,
                                        dfg_tensor **zero_std) {
    dfg_shape sh = dfg_tensor_shape(values);
    int64_t M = sh.d[0], F = sh.d[1], P = M / G;
    dfg_tensor *has = dfg_equal(g, values, values); /* (M, F) 0 where None */
    dfg_tensor *v = dfg_reshape(g, dfg_where(g, has, values, scalar(g, 0.0f)), DFG_SHAPE(P, G, F));
    dfg_tensor *h = dfg_reshape(g, has, DFG_SHAPE(P, G, F));
    /* each function in each group: nanmean, nanstd over the group's G rows */
    dfg_tensor *count = dfg_sum(g, h, 1); /* (P, F) */
    dfg_tensor *mean = dfg_div(g, dfg_sum(g, v, 1), dfg_maximum(g, count, scalar(g, 1.0f)));
    dfg_tensor *dev = dfg_mul(g, dfg_sub(g, v, dfg_reshape(g, mean, DFG_SHAPE(P, 1, F))), h);
    dfg_tensor *sd = masked_std(g, dev, count, 1); /* (P, F) */
    dfg_tensor *z = dfg_div(g, dev, dfg_reshape(g, dfg_add_scalar(g, sd, 1e-4f), DFG_SHAPE(P, 1, F)));
    /* a value counts where it is one of at least two in its group (else TRL's reward_k is NaN) */
    dfg_tensor *use = dfg_mul(g, h, dfg_reshape(g, at_least(g, count, 2.0f), DFG_SHAPE(P, 1, F)));
    dfg_tensor *w[DFG_REWARD_MAX_FUNCS];
    for (int64_t f = 0; f < F && f < DFG_REWARD_MAX_FUNCS; f++) w[f] = dfg_fill(g, DFG_F32, DFG_SHAPE(1), weights[f]);
    dfg_tensor *wz = dfg_mul(g, dfg_mul(g, z, use), dfg_concat(g, w, (int)F, 0));
    dfg_tensor *r = dfg_reshape(g, dfg_sum(g, wz, 2), DFG_SHAPE(M)); /* nansum over the functions */
    /* over the batch's scorable rows (TRL: an unscorable row's reward is NaN, its advantage 0) */
    dfg_tensor *scorable = at_least(g, dfg_sum(g, has, 1), 1.0f); /* (M) */
    dfg_tensor *n = dfg_sum(g, scorable, 0);
    dfg_tensor *bmean = dfg_div(g, dfg_sum(g, dfg_mul(g, r, scorable), 0), dfg_maximum(g, n, scalar(g, 1.0f)));
    dfg_tensor *bdev = dfg_mul(g, dfg_sub(g, r, bmean), scorable);
    dfg_tensor *bsd = masked_std(g, dfg_reshape(g, bdev, DFG_SHAPE(1, M)), n, 1); /* (1) */
    /* torch.isclose(std, 0): std <= 1e-8; a NaN std (fewer than 2 scorable rows) is not close */
    dfg_tensor *tiny = at_least(g, dfg_neg(g, bsd), -1e-8f);
    *zero_std = dfg_reshape(g, dfg_mul(g, tiny, at_least(g, n, 2.0f)), DFG_SCALAR);
    return dfg_div(g, bdev, dfg_add_scalar(g, bsd, 1e-4f));
}

dfg_tensor *dfg_grpo_scorable(dfg_graph *g, dfg_tensor *values) {
    return at_least(g, dfg_sum(g, dfg_equal(g, values, values), 1), 1.0f);
}

/* n / max(k, 1) for the counts k (any shape): exactly 1 where k == n */
static dfg_tensor *count_factor(dfg_graph *g, float n, dfg_tensor *k) {
    return dfg_div(g, dfg_fill(g, DFG_F32, dfg_tensor_shape(k), n), dfg_maximum(g, k, scalar(g, 1.0f)));
}

/* x - nanmean(x) over axis 1 of x (rows, n) with h (rows, n) 1 on the values that count and k (rows)
 * their counts; 0 where h is. dfg_mean's floats times n / k, exactly 1 when all count. */
static dfg_tensor *masked_dev(dfg_graph *g, dfg_tensor *x, dfg_tensor *h, dfg_tensor *k) {
    int64_t rows = dfg_tensor_shape(x).d[0], n = dfg_tensor_shape(x).d[1];
    dfg_tensor *mean = dfg_mul(g, dfg_reshape(g, dfg_mean(g, x, 1), DFG_SHAPE(rows)), count_factor(g, (float)n, k));
    return dfg_mul(g, dfg_sub(g, x, dfg_reshape(g, mean, DFG_SHAPE(rows, 1))), h);
}

/* nanstd of the deviations dev (rows, n) (0 where not counted), k (rows) their counts: torch.std's
 * sqrt(sum dev^2 / (n - 1)), times (n - 1) / (k - 1) inside the root (exactly 1 when all count) */
static dfg_tensor *masked_unbiased_std(dfg_graph *g, dfg_tensor *dev, dfg_tensor *k) {
    int64_t n = dfg_tensor_shape(dev).d[1];
    dfg_tensor *var = dfg_scale(g, dfg_sum(g, dfg_mul(g, dev, dev), 1), 1.0f / (float)(n - 1));
    return dfg_sqrt(g, dfg_mul(g, var, count_factor(g, (float)(n - 1), dfg_add_scalar(g, k, -1.0f))));
}

/* (rows) 1 where the counted values of x (rows, n) are at least two and all equal (max == min) */
static dfg_tensor *all_equal(dfg_graph *g, dfg_tensor *x, dfg_tensor *h, dfg_tensor *k) {
    dfg_tensor *hi = dfg_where(g, h, x, scalar(g, -INFINITY)), *lo = dfg_where(g, h, dfg_neg(g, x), scalar(g, -INFINITY));
    dfg_tensor *max = dfg_take(g, hi, dfg_argmax(g, hi)), *neg_min = dfg_take(g, lo, dfg_argmax(g, lo)); /* (rows) */
    return dfg_mul(g, dfg_equal(g, max, dfg_neg(g, neg_min)), at_least(g, k, 2.0f));
}

dfg_tensor *dfg_grpo_sum_then_normalize(dfg_graph *g, dfg_tensor *rewards, dfg_tensor *scorable, int64_t G,
                                        dfg_grpo_scale scale, dfg_tensor **zero_std) {
    int64_t M = dfg_tensor_numel(rewards), P = M / G;
    dfg_tensor *r = dfg_reshape(g, rewards, DFG_SHAPE(P, G)), *h = dfg_reshape(g, scorable, DFG_SHAPE(P, G));
    dfg_tensor *k = dfg_sum(g, h, 1); /* (P) each group's scorable rows */
    dfg_tensor *dev = masked_dev(g, r, h, k), *a = dev;
    if (scale == DFG_GRPO_SCALE_GROUP) {
        dfg_tensor *sd = masked_unbiased_std(g, dev, k); /* (P) */
        a = dfg_div(g, dev, dfg_reshape(g, dfg_add_scalar(g, sd, 1e-4f), DFG_SHAPE(P, 1)));
    }
    if (scale == DFG_GRPO_SCALE_BATCH) {
        dfg_tensor *all = dfg_reshape(g, rewards, DFG_SHAPE(1, M)), *ha = dfg_reshape(g, scorable, DFG_SHAPE(1, M));
        dfg_tensor *n = dfg_sum(g, ha, 1); /* (1) */
        dfg_tensor *sd = masked_unbiased_std(g, masked_dev(g, all, ha, n), n);
        a = dfg_div(g, dev, dfg_reshape(g, dfg_add_scalar(g, sd, 1e-4f), DFG_SHAPE(1, 1)));
        *zero_std = dfg_reshape(g, all_equal(g, all, ha, n), DFG_SCALAR);
    } else { /* TRL's is_std_zero of each row is its group's: the mean over groups of G rows */
        *zero_std = dfg_mean(g, all_equal(g, r, h, k), 0);
    }
    return dfg_reshape(g, a, DFG_SHAPE(M)); /* (M) */
}

void dfg_grpo_reward_metrics(dfg_graph *g, dfg_tensor *rewards, dfg_tensor *scorable) {
    int64_t M = dfg_tensor_numel(rewards);
    dfg_tensor *r = dfg_reshape(g, rewards, DFG_SHAPE(1, M));
    dfg_tensor *h = scorable ? dfg_reshape(g, scorable, DFG_SHAPE(1, M)) : dfg_fill(g, DFG_F32, DFG_SHAPE(1, M), 1.0f);
    dfg_tensor *n = dfg_sum(g, h, 1); /* (1) */
    dfg_tensor *mean = dfg_mul(g, dfg_reshape(g, dfg_mean(g, r, 1), DFG_SHAPE(1)), count_factor(g, (float)M, n));
    dfg_tensor *dev = dfg_mul(g, dfg_sub(g, r, dfg_reshape(g, mean, DFG_SHAPE(1, 1))), h);
    dfg_metric(g, "reward", dfg_reshape(g, mean, DFG_SCALAR));
    dfg_metric(g, "reward_std", dfg_reshape(g, masked_unbiased_std(g, dev, n), DFG_SCALAR));
}

dfg_tensor *dfg_grpo_aggregate(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *rewards, dfg_tensor *values,
                               dfg_tensor **zero_std) {
    *zero_std = NULL;
    if (!c->normalize_then_sum && !values) return dfg_grpo_advantages(g, rewards, c->G, c->scale);
    if (!c->normalize_then_sum) return dfg_grpo_sum_then_normalize(g, rewards, dfg_grpo_scorable(g, values), c->G, c->scale, zero_std);
    if (values) return dfg_grpo_normalize_then_sum(g, values, c->weights, c->G, zero_std);
    /* a built-in reward is one function: its value is the reward, unweighted */
    return dfg_grpo_normalize_then_sum(g, dfg_reshape(g, rewards, DFG_SHAPE(-1, 1)), (const float[]){1.0f}, c->G, zero_std);
}
