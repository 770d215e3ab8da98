/* grpo_buckets.c - the GRPO pipeline's stage copies for prompt and completion widths
 * (examples/grpo/grpo.c, dfg_grpo_config.h): their names, the batch's longest prompt, and the key
 * whose value picks the copy that runs. Plain C over the public DSL. */
#include <stdio.h>
#include <string.h>

#include "dfg_grpo_config.h"

void dfg_grpo_rollout_stage(char *buf, size_t len, const char *base, const dfg_grpo_config *c, int k) {
    if (c->R == 1) snprintf(buf, len, "%s", base);
    else snprintf(buf, len, "%s.%d", base, k);
}

void dfg_grpo_prefill_stage(char *buf, size_t len, const dfg_grpo_config *c, int k, int pb) {
    dfg_grpo_rollout_stage(buf, len, "prefill", c, k);
    size_t n = strlen(buf);
    if (pb < c->n_pwidths - 1) snprintf(buf + n, len - n, "[p%lld]", (long long)c->pwidths[pb]);
}

void dfg_grpo_bucket_stage(char *buf, size_t len, const char *base, const dfg_grpo_config *c, int pb, int b) {
    bool wide_p = pb == c->n_pwidths - 1, wide_c = b == c->n_widths - 1;
    long long P = (long long)c->pwidths[pb], w = (long long)c->widths[b];
    if (wide_p && wide_c) snprintf(buf, len, "%s", base);
    else if (wide_p) snprintf(buf, len, "%s[%lld]", base, w);
    else if (wide_c) snprintf(buf, len, "%s[p%lld]", base, P);
    else snprintf(buf, len, "%s[p%lld,%lld]", base, P, w);
}

dfg_tensor *dfg_grpo_longest_prompt(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *start, int W) {
    dfg_tensor *need = dfg_affine(g, dfg_cast(g, start, DFG_F32), -1.0f, (float)c->Lp); /* (N) Lp - start */
    dfg_tensor *w = dfg_reshape(g, dfg_take(g, need, dfg_argmax(g, need)), DFG_SHAPE(1));
    return dfg_reshape(g, dfg_grpo_world_reduce(g, w, DFG_COLL_MAX, W), DFG_SCALAR);
}

dfg_tensor *dfg_grpo_pass_key(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *start, dfg_tensor *width) {
    dfg_tensor *pb = dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f);
    if (c->n_pwidths > 1) { /* the narrowest prompt width that holds every rank's longest prompt */
        dfg_tensor *w = dfg_grpo_longest_prompt(g, c, start, c->W);
        for (int i = 0; i < c->n_pwidths - 1; i++) /* + 1 for each narrower width it exceeds (integers: 0 or 1) */
            pb = dfg_add(g, pb, dfg_clamp(g, dfg_add_scalar(g, w, -(float)c->pwidths[i]), 0.0f, 1.0f));
    }
    if (c->chunks) return pb; /* the chunks' run counts pick the completion width */
    return dfg_add(g, dfg_scale(g, pb, (float)DFG_GRPO_PASS_KEY),
                   width ? width : dfg_fill(g, DFG_F32, DFG_SCALAR, (float)c->max_new));
}

void dfg_grpo_pass_range(const dfg_grpo_config *c, int pb, int b, double *lo, double *hi) {
    if (c->chunks) {
        *lo = pb - 0.5, *hi = pb + 0.5;
        return;
    }
    double at = pb * DFG_GRPO_PASS_KEY;
    *lo = at + (b == 0 ? -1.0 : (double)c->widths[b - 1]);
    *hi = at + (double)c->widths[b];
}
/* With a warm-up, the supervised steps come first and every GRPO stage (each length bucket's
 * copy too) runs only after them. */
dfg_status dfg_grpo_gate_after_sft(dfg_program *p, const dfg_grpo_config *c) {
    char name[48], base[32];
    dfg_status st = dfg_stage_steps(p, "sft", 0, c->sft_steps - 1);
    if (!st && c->n_pwidths > 1) st = dfg_stage_steps(p, "prompts", c->sft_steps, -1);
    for (int k = 0; k < c->R && !st; k++) {
        for (int pb = 0; pb < c->n_pwidths && !st; pb++) {
            dfg_grpo_prefill_stage(name, sizeof(name), c, k, pb);
            st = dfg_stage_steps(p, name, c->sft_steps, -1);
        }
        dfg_grpo_rollout_stage(name, sizeof(name), "decode", c, k);
        if (!st) st = dfg_stage_steps(p, name, c->sft_steps, -1);
    }
    char tail[3 * DFG_GRPO_MAX_TAILS][32];
    for (int i = 0, n = c->tail ? dfg_grpo_tail_stages(c->N, c->tail, c->tools, tail) : 0; i < n && !st; i++)
        st = dfg_stage_steps(p, tail[i], c->sft_steps, -1);
    if (!st) st = dfg_stage_steps(p, "reward", c->sft_steps, -1);
    if (!st) st = dfg_stage_steps(p, "advantages", c->sft_steps, -1);
    if (!st && c->tools) st = dfg_stage_steps(p, "tools", c->sft_steps, -1);
    if (!st && c->log_completions) st = dfg_stage_steps(p, "completions", c->sft_steps, -1);
    for (int k = -2; k < c->iterations && !st; k++) { /* -2: ref, -1: old, then train.k and update.k */
        if ((k == -2 && c->beta == 0.0f) || (k == -1 && c->iterations == 1)) continue;
        if (k < 0) snprintf(base, sizeof(base), "%s", k == -2 ? "ref" : "old");
        else snprintf(base, sizeof(base), "train.%d", k);
        for (int i = 0; i < c->n_pwidths * c->n_widths && !st; i++) {
            dfg_grpo_bucket_stage(name, sizeof(name), base, c, i / c->n_widths, i % c->n_widths);
            st = dfg_stage_steps(p, name, c->sft_steps, -1);
        }
        if (k >= 0 && !st) {
            snprintf(name, sizeof(name), "update.%d", k);
            st = dfg_stage_steps(p, name, c->sft_steps, -1);
        }
    }
    return st;
}

