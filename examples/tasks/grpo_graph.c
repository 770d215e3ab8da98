/* grpo_graph.c - graph-building helpers of the GRPO pipeline (examples/grpo.c): its reward and
 * completion metrics, and what data parallel changes in its graphs (dfg_grpo_data.h). Written with
 * dfg's public DSL only. */
#include "dfg_grpo_data.h"
#include "dfg_nn.h"

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
