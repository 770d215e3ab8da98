/* grpo.c - GRPO (Group Relative Policy Optimization; DeepSeekMath, arXiv 2402.03300) on a
 * verifiable task, as one static program that the planner sees whole. The policy is a small GPT-2
 * by default, or any model dfg_model builds: GPT-2, Llama, Qwen2, Qwen3, from a Hugging Face
 * directory (--set model=DIR) or from settings (--set model_type=qwen3 ...).
 *
 *   dfg compile examples/grpo/grpo.c -o grpo.dfg [--set task=add --set num_generations=16 ...]
 *   dfg run grpo.dfg --steps 400 [--weights DIR]
 *
 * One step = one optimizer update on P prompts x G generations (N = P G sequences):
 *   data        host: P problems of the task, each repeated G times (examples/tasks/dfg_tasks.h)
 *   sft         (the first sft_steps steps only) a supervised step on the right answers
 *   prefill     the prompts into the KV cache, each prompt once for its G sequences
 *   decode      x max_completion_length: sample the next token of every sequence (Philox RNG,
 *               temperature, top-k), write it, and stop counting a sequence after its EOS
 *               through the completion mask: no host round trip, no logits kept
 *               (rollout_sub_batches R > 1: prefill.k and decode.k for k = 0 .. R-1, each on
 *               P/R whole groups, with a KV cache of N/R rows; every row draws the random
 *               numbers it would draw in one batch, so the tokens are the same)
 *   reward      host: the task's verifiable reward per sequence
 *   advantages  (r - group mean) / (group std + 1e-4) (scale_rewards), reward metrics
 *   ref         (beta != 0) the frozen reference model's per-token log-probs, per micro-batch
 *               (share_prompts, by default whenever a micro-batch holds whole groups: every
 *               forward pass computes a group's prompt positions once and its G completions
 *               over them, ops/nn/nn_shared.c; the same numbers as G separate passes)
 *   old         (num_iterations > 1) the policy's log-probs before this step's updates
 *   train.k     x gradient_accumulation_steps micro-batches: TRL's loss (loss_type grpo, bnpo,
 *               dr_grpo, dapo, cispo, sapo; token or sequence ratios; delta; the entropy mask and
 *               bonus; the KL penalty), log-probs and entropy from one fused head, gradients
 *               accumulated into persistent buffers
 *   update.k    global-norm clipping, AdamW; k = 0 .. num_iterations-1 passes over the rollouts
 * Settings carry Hugging Face config.json's and TRL GRPOConfig's names. With
 * `dfg run --rollouts R.safetensors` the stages data .. reward are skipped and the step trains
 * on the given tokens, completion_mask and rewards (see declare() below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "dfg_grpo_config.h"
#include "dfg_grpo_data.h"
#include "dfg_grpo_tools.h"
#include "dfg_grpo_state.h"
#include "dfg_grpo_async.h"
#include "dfg_grpo_eval.h"
#include "dfg_tasks.h"

typedef dfg_grpo_config grpo_config;
typedef dfg_grpo_state grpo_state;

/* The loss's per-micro-batch metrics (dfg_grpo_terms), summed in train.stats over the step's
 * micro-batches and passes and logged as their mean: TRL's _compute_loss logs one value per
 * micro-batch and its log() averages them. */
#define GRPO_STATS DFG_GRPO_STATS
static const char *const grpo_stats[GRPO_STATS] = {"entropy",         "clip_ratio/low_mean",    "clip_ratio/low_min",
                                                   "clip_ratio/high_mean", "clip_ratio/high_max", "clip_ratio/region_mean",
                                                   "cispo_clip_ratio", "vespo/phi_seq_mean"};

/* ---------------------------------------------------------------- scoring */
/* (N) 1 for a row whose completion has no EOS by max_completion_length: it filled every column
 * (the mask counts tokens up to and including the first EOS) and its last token is no EOS. */
static dfg_tensor *truncated_rows(dfg_graph *g, const grpo_config *c, const grpo_state *s, dfg_tensor *len) {
    dfg_tensor *last = dfg_reshape(g, dfg_slice(g, s->tokens, 1, c->T - 1, 1), DFG_SHAPE(c->N)), *is_eos = NULL;
    for (int i = 0; i < c->n_eos; i++) {
        dfg_tensor *hit = dfg_equal(g, last, dfg_fill(g, DFG_I32, DFG_SCALAR, (float)c->eos[i]));
        is_eos = is_eos ? dfg_maximum(g, is_eos, hit) : hit;
    }
    dfg_tensor *full = dfg_equal(g, len, dfg_fill(g, DFG_F32, DFG_SCALAR, (float)c->max_new));
    return dfg_mul(g, full, dfg_affine(g, is_eos, -1.0f, 1.0f));
}

static dfg_status build_advantages(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_graph *g = dfg_graph_new(p, "advantages");
    /* data parallel: every rank sees the whole batch's rewards and lengths (TRL gathers them too),
     * so batch-scaled advantages and the metrics are the whole batch's; each keeps its rows */
    dfg_tensor *rewards = dfg_grpo_world_rows(g, s->rewards, c->W); /* (W N) */
    dfg_tensor *row0 = dfg_grpo_rank_row0(g, c->W, c->N);
    dfg_tensor *zero_std, *values = s->reward_values ? dfg_grpo_world_rows(g, s->reward_values, c->W) : NULL;
    dfg_tensor *adv = dfg_grpo_aggregate(g, c, rewards, values, &zero_std); /* multi_objective_aggregation */
    dfg_assign(g, s->advantages, row0 ? dfg_slice_at(g, adv, 0, row0, c->N) : adv);
    if (s->ref_micro) dfg_assign_fill(g, s->ref_micro, 0.0f); /* the micro-batch loops that follow */
    if (s->acc_ext)
        dfg_assign(g, s->acc_ext, dfg_concat(g, (dfg_tensor *[]){dfg_grpo_extremes_start(g), dfg_fill(g, DFG_F32, DFG_SHAPE(2), 0.0f)}, 2, 0));
    if (s->old_micro) dfg_assign_fill(g, s->old_micro, 0.0f);
    dfg_tensor *scored = dfg_slice(g, s->mask, 1, c->Lp, c->max_new); /* the prompt's columns never count */
    dfg_tensor *len = dfg_sum(g, scored, 1);                           /* (N) */
    if (c->chunks) /* each row's last counted column: the chunks' order and widths */
        dfg_grpo_chunk_plan(g, &s->chunks, dfg_take(g, dfg_mul(g, scored, s->columns), dfg_argmax(g, dfg_mul(g, scored, s->columns))));
    if (s->width) { /* the last column any row's mask counts, over the whole batch: the width to run */
        dfg_tensor *last = dfg_reshape(g, dfg_mul(g, scored, s->columns), DFG_SHAPE(-1));
        dfg_tensor *w = dfg_reshape(g, dfg_take(g, last, dfg_argmax(g, last)), DFG_SHAPE(1));
        dfg_assign(g, s->width, dfg_reshape(g, dfg_grpo_world_reduce(g, w, DFG_COLL_MAX, c->W), DFG_SCALAR));
    }
    if (s->pass_key) { /* which scoring and training copies run; the old stage's none when sampled (-2) */
        dfg_tensor *key = dfg_grpo_pass_key(g, c, s->start, s->width);
        dfg_assign(g, s->pass_key, key);
        if (s->old_key)
            dfg_assign(g, s->old_key, dfg_sub(g, dfg_mul(g, key, dfg_affine(g, s->sampled, -1.0f, 1.0f)),
                                              dfg_scale(g, s->sampled, 2.0f)));
    }
    dfg_tensor *truncated = truncated_rows(g, c, s, len);
    /* with tools, lengths count the policy's tokens only, and the loss's mask is TRL's loss_mask,
     * completion_mask * tool_mask: the loss, KL, entropy and token counts leave the tools' out */
    dfg_tensor *gen_len = c->tools ? dfg_sum(g, dfg_slice(g, dfg_mul(g, s->mask, s->tools.tool_mask), 1, c->Lp, c->max_new), 1)
                                   : len; /* (N) */
    if (c->tools) dfg_assign(g, s->loss_mask, dfg_mul(g, s->mask, s->tools.tool_mask));
    dfg_tensor *generated = dfg_sum(g, gen_len, 0);
    dfg_tensor *active = generated;
    if (c->mask_truncated) { /* TRL's mask_truncated_completions: such a row leaves the loss */
        dfg_tensor *keep = dfg_reshape(g, dfg_affine(g, truncated, -1.0f, 1.0f), DFG_SHAPE(c->N, 1));
        dfg_assign(g, s->mask, dfg_mul(g, s->mask, keep));
        if (c->tools) dfg_assign(g, s->loss_mask, dfg_mul(g, s->loss_mask, keep));
        active = dfg_sum(g, dfg_mul(g, gen_len, dfg_reshape(g, keep, DFG_SHAPE(c->N))), 0);
    }
    /* batch_invariant: the sampler's log-probs are the policy's before this step's update, bit
     * for bit, laid out as the old stage writes them (0 where the mask is); the old stage runs
     * instead only on a rollout that was not sampled here (--rollouts) */
    if (c->invariant && s->old_logp) dfg_assign(g, s->old_logp, dfg_mul(g, s->sampling_logp, s->loss_mask));
    /* dapo and cispo divide by the whole batch's active tokens; each rank's loss is its share of
     * the mean the gradient all-reduce takes, so it divides by their mean over the ranks */
    dfg_assign(g, s->active, c->W > 1 ? dfg_allreduce(g, active, DFG_COLL_MEAN, c->W) : active);
    dfg_grpo_reward_metrics(g, rewards, values ? dfg_grpo_scorable(g, values) : NULL); /* over the scorable rows */ /* over the scorable rows */
    if (s->reward_values) /* TRL's rewards/<name>/mean and /std, over the whole batch */
        dfg_grpo_function_metrics(g, dfg_grpo_world_rows(g, s->reward_values, c->W), c->n_funcs, c->funcs);
    dfg_metric(g, "frac_reward_zero_std", zero_std ? zero_std : dfg_grpo_frac_zero_std(g, rewards, c->G));
    dfg_grpo_completion_metrics(g, dfg_grpo_world_rows(g, gen_len, c->W), dfg_grpo_world_rows(g, truncated, c->W), c->max_new);
    if (c->tools) dfg_grpo_tools_metrics(g, c, &s->tools);
    if (s->truncated_prompts)
        dfg_metric(g, "prompts_truncated",
                   c->W > 1 ? dfg_allreduce(g, s->truncated_prompts, DFG_COLL_SUM, c->W) : s->truncated_prompts);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* Log-probs of the first W completion tokens of tok (n, T) under model m, as (n, W): entry j
 * scores position Lp + j; the model runs on the columns Lp - pwidths[pb] .. Lp + W - 1 alone
 * (a prompt bucket and a length bucket). With share_prompts the prompt positions are computed
 * once per group. start: the rows' first prompt columns (n) for left-padded prompts, or NULL. */
static dfg_tensor *completion_logp(dfg_graph *g, const grpo_config *c, const dfg_model *m, dfg_tensor *tok,
                                   dfg_tensor *start, int pb, int64_t W, dfg_tensor **entropy) {
    int64_t Lp = c->pwidths[pb], c0 = c->Lp - Lp; /* the pad columns before c0 hold no row's prompt */
    if (c0 || W < c->max_new) tok = dfg_slice(g, tok, 1, c0, Lp + W);
    if (start) start = dfg_nn_start_from(g, start, c0);
    if (c->share_prompts) {
        dfg_tensor *group_start = NULL; /* (n/G) the first row's of each group: the group shares its prompt */
        if (start) {
            int64_t n = dfg_tensor_shape(start).d[0];
            group_start = dfg_reshape(g, dfg_slice(g, dfg_reshape(g, start, DFG_SHAPE(n / c->G, c->G)), 1, 0, 1),
                                      DFG_SHAPE(n / c->G));
        }
        return dfg_grpo_completion_logp_entropy(g, m, dfg_grpo_group_prompts(g, tok, c->G, Lp), dfg_slice(g, tok, 1, Lp, W),
                                                c->temperature, group_start, entropy);
    }
    dfg_tensor *lp = dfg_grpo_token_logp_entropy(g, m, tok, c->temperature, start, entropy);
    if (entropy) *entropy = dfg_slice(g, *entropy, 1, Lp - 1, W);
    return dfg_slice(g, lp, 1, Lp - 1, W);
}

/* (n, T) from the completions' log-probs (n, W) and mask: each scored token at its own position,
 * 0 on the prompt, wherever the mask is 0 and past the width, as the dump and the old/ref copies
 * keep them. */
static dfg_tensor *padded(dfg_graph *g, const grpo_config *c, dfg_tensor *lp, dfg_tensor *mask) {
    int64_t n = dfg_tensor_shape(lp).d[0], W = dfg_tensor_shape(lp).d[1];
    dfg_tensor *parts[3] = {dfg_fill(g, DFG_F32, DFG_SHAPE(n, c->Lp), 0.0f), dfg_mul(g, lp, mask),
                            W < c->max_new ? dfg_fill(g, DFG_F32, DFG_SHAPE(n, c->max_new - W), 0.0f) : NULL};
    return dfg_concat(g, parts, W < c->max_new ? 3 : 2, 1);
}

/* The rows of x one run of a scoring or training pass takes: micro-batch `micro` (an i32
 * scalar; NULL: the whole batch), or with length chunks the chunk at place `micro` of the
 * order; then, with a width W, the completion's first W columns (Lp .. Lp + W - 1). */
static dfg_tensor *pass_rows(dfg_graph *g, const grpo_config *c, const grpo_state *s, dfg_tensor *x, dfg_tensor *micro,
                             int64_t W) {
    if (c->chunks) return dfg_grpo_chunk_rows(g, &s->chunks, x, micro, c->Lp, W);
    dfg_tensor *r = micro ? dfg_slice_at(g, x, 0, dfg_scale(g, micro, (float)c->n_micro), c->n_micro) : x;
    return W ? dfg_slice(g, r, 1, c->Lp, W) : r;
}

/* dst's rows of that run = src */
static void pass_write(dfg_graph *g, const grpo_config *c, const grpo_state *s, dfg_tensor *dst, dfg_tensor *src,
                       dfg_tensor *micro) {
    if (c->chunks) dfg_grpo_chunk_write(g, &s->chunks, dst, src, micro);
    else if (micro) dfg_slice_assign_at(g, dst, src, 0, dfg_scale(g, micro, (float)c->n_micro));
    else dfg_assign(g, dst, src);
}

/* Stages graph g as the (pb, b) copy of a pass: a run per micro-batch, or per chunk (those of
 * width b, dfg_stage_runs), when the batch's prompt bucket is pb and, without chunks, its
 * completion width is b's (pass_key). The old stage reads old_key: batch_invariant skips it
 * after a step that sampled its rollout. */
static dfg_status stage_pass(dfg_program *p, const grpo_config *c, const grpo_state *s, dfg_graph *g, const char *name,
                             int pb, int b, bool old) {
    dfg_status st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)(c->chunks ? c->chunks : c->GA));
    if (st) return st;
    if (c->chunks && (st = dfg_stage_runs(p, name, s->chunks.runs[b]))) return st;
    dfg_tensor *key = old && s->old_key ? s->old_key : s->pass_key;
    if (!key) return DFG_OK;
    double lo, hi;
    dfg_grpo_pass_range(c, pb, b, &lo, &hi);
    return dfg_stage_when(p, name, key, lo, hi);
}

/* A no-grad pass over every sequence: the reference model's or the policy's log-probs, one
 * training micro-batch per run (gradient_accumulation_steps runs; micro counts them); bucket b's
 * copy. */
static dfg_status build_logp_stage(dfg_program *p, const grpo_config *c, grpo_state *s, const char *base,
                                   const dfg_model *m, dfg_tensor *dst, dfg_tensor *micro, int pb, int b) {
    char name[48];
    int64_t W = c->widths[b];
    dfg_grpo_bucket_stage(name, sizeof(name), base, c, pb, b);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_tensor *tok = pass_rows(g, c, s, s->tokens, micro, 0), *mask = pass_rows(g, c, s, s->loss_mask, micro, W);
    dfg_tensor *start = s->start ? pass_rows(g, c, s, s->start, micro, 0) : NULL;
    pass_write(g, c, s, dst, padded(g, c, completion_logp(g, c, m, tok, start, pb, W, NULL), mask), micro);
    if (micro) dfg_assign(g, micro, dfg_add_scalar(g, micro, 1.0f));
    return stage_pass(p, c, s, g, name, pb, b, !strcmp(base, "old"));
}

/* ---------------------------------------------------------------- training */
/* Pass k's micro-batch loop of bucket b: the loss and its gradients over the first W completion
 * columns (W = widths[b]; the columns past it are masked out in this step's batch). */
static dfg_status build_train(dfg_program *p, const grpo_config *c, grpo_state *s, int k, int pb, int b) {
    char base[32], name[48];
    int64_t W = c->widths[b];
    snprintf(base, sizeof(base), "train.%d", k);
    dfg_grpo_bucket_stage(name, sizeof(name), base, c, pb, b);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_tensor *tok = pass_rows(g, c, s, s->tokens, s->micro, 0), *mask = pass_rows(g, c, s, s->loss_mask, s->micro, W);
    dfg_tensor *start = s->start ? pass_rows(g, c, s, s->start, s->micro, 0) : NULL; /* (n) */
    dfg_tensor *entropy = NULL;                                                   /* (n, W) */
    dfg_tensor *logp = completion_logp(g, c, s->policy, tok, start, pb, W, &entropy); /* (n, W) */
    dfg_tensor *sampling = pass_rows(g, c, s, s->sampling_logp, s->micro, W); /* (n, W) */
    /* log-probs are <= 0: a rollout file without the sampler's holds 1 (cli_run_rollouts.c) */
    dfg_tensor *x0 = dfg_reshape(g, dfg_slice(g, dfg_slice(g, sampling, 0, 0, 1), 1, 0, 1), DFG_SCALAR);
    dfg_tensor *has_sampling = dfg_equal(g, dfg_minimum(g, x0, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f)), x0);
    dfg_grpo_inputs in = {
        .logp = logp,
        .old_logp = s->old_logp ? pass_rows(g, c, s, s->old_logp, s->micro, W) : NULL,
        .ref_logp = c->beta != 0.0f ? pass_rows(g, c, s, s->ref_logp, s->micro, W) : NULL,
        .advantages = pass_rows(g, c, s, s->advantages, s->micro, 0),
        .mask = mask,
        .active_tokens = s->active,
        .entropy = entropy,
        .sampling_logp = sampling,
        .has_sampling = has_sampling,
    };
    dfg_grpo_terms t;
    dfg_status st = dfg_grpo_loss(g, &in, c->loss, &t);
    if (!st) st = dfg_backward_accumulate(g, t.loss, s->policy->params, s->policy->n_params, s->grads);
    if (st) return st;
    /* data parallel: the whole batch's gradient, a bucket reduced during the last micro-batch's
     * backward as soon as its layers' gradients are final */
    dfg_tensor *grads[DFG_MODEL_MAX_PARAMS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)s->policy->n_params);
    if (!c->chunks) dfg_nn_allreduce_grads(g, grads, s->policy->n_params, c->W, c->bucket_bytes); /* chunks: in update */
    dfg_accumulate(g, s->acc_loss, t.loss);
    dfg_accumulate(g, s->acc_kl, t.kl_sum);
    dfg_tensor *stats[GRPO_STATS] = {t.entropy,       t.clip_low_mean,    t.clip_low_min,     t.clip_high_mean,
                                     t.clip_high_max, t.clip_region_mean, t.cispo_clip_ratio, t.phi_seq_mean};
    for (int i = 0; i < GRPO_STATS; i++) /* (1) each; 0 where the loss type has no such metric */
        stats[i] = stats[i] ? dfg_reshape(g, stats[i], DFG_SHAPE(1)) : dfg_fill(g, DFG_F32, DFG_SHAPE(1), 0.0f);
    dfg_tensor *per = dfg_concat(g, stats, GRPO_STATS, 0); /* (GRPO_STATS) this micro-batch's means */
    /* sorted chunks are no micro-batches of TRL's: their token means weighted by their tokens give
     * the batch's token means, TRL's values for gradient_accumulation_steps 1; phi's sequence mean
     * weighs by rows, and the per-sequence extremes are the chunks' extremes (acc_ext) */
    if (c->chunks && c->regroup) {
        int64_t rows = dfg_tensor_shape(logp).d[0];
        dfg_tensor *w[GRPO_STATS];
        for (int i = 0; i < GRPO_STATS; i++)
            w[i] = i == GRPO_STATS - 1 ? dfg_fill(g, DFG_F32, DFG_SHAPE(1), (float)rows) : dfg_reshape(g, t.tokens, DFG_SHAPE(1));
        per = dfg_mul(g, per, dfg_concat(g, w, GRPO_STATS, 0));
        dfg_tensor *ext[4] = {dfg_minimum(g, dfg_slice(g, s->acc_ext, 0, 0, 1), stats[2]),
                              dfg_maximum(g, dfg_slice(g, s->acc_ext, 0, 1, 1), stats[4]), dfg_slice(g, s->acc_ext, 0, 2, 2)};
        dfg_assign(g, s->acc_ext, dfg_concat(g, ext, 3, 0));
    }
    dfg_accumulate(g, s->acc_stats, per);
    dfg_accumulate(g, s->acc_tokens, t.tokens);
    if (k == 0) { /* the policy's log-probs before this step's update, for `dfg run --dump` */
        pass_write(g, c, s, s->logp, padded(g, c, dfg_detach(g, logp), mask), s->micro);
        dfg_grpo_ratios r = {t.is_ratio, t.is_raw, t.is_modified};
        dfg_grpo_sampling_compare(g, &s->sampling, dfg_detach(g, logp), sampling, mask, &r);
        dfg_assign(g, s->sampling.sampled, has_sampling); /* a rollout file's too */
        if (s->is_ratio) /* a sequence mode's ratio on each of its scored tokens */
            pass_write(g, c, s, s->is_ratio, padded(g, c, dfg_expand(g, t.is_ratio, dfg_tensor_shape(mask)), mask), s->micro);
        if (s->off_policy) pass_write(g, c, s, s->off_policy, dfg_reshape(g, t.off_policy_mask, DFG_SHAPE(-1)), s->micro);
    }
    dfg_assign(g, s->micro, dfg_add_scalar(g, s->micro, 1.0f));
    return stage_pass(p, c, s, g, name, pb, b, false);
}

static dfg_tensor *per_token(dfg_graph *g, dfg_tensor *sum, dfg_tensor *tokens) {
    return dfg_div(g, sum, dfg_maximum(g, tokens, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f)));
}

/* Does the loss type log grpo_stats[i]? */
static bool logs_stat(const grpo_config *c, int i) {
    dfg_grpo_loss_type lt = c->loss.loss_type;
    if (i == 0) return true; /* entropy */
    if (i == 6) return lt == DFG_GRPO_LOSS_CISPO;
    if (i == 7) return lt == DFG_GRPO_LOSS_VESPO;
    return lt != DFG_GRPO_LOSS_CISPO && lt != DFG_GRPO_LOSS_SAPO && lt != DFG_GRPO_LOSS_VESPO; /* the clip ratios */
}

/* Clipping, AdamW, and the reset of the micro-batch loop. The first pass's values are the
 * step's loss, kl and gradient norm (before any update of this step); the per-micro-batch
 * metrics (entropy, clip ratios) average over every pass (the first pass never clips: its ratio
 * is 1), so their accumulator runs on until the last pass. */
static dfg_status build_update(dfg_program *p, const grpo_config *c, grpo_state *s, int k) {
    char name[32];
    snprintf(name, sizeof(name), "update.%d", k);
    dfg_graph *g = dfg_graph_new(p, name);
    int n = s->policy->n_params;
    bool last = k == c->iterations - 1;
    dfg_tensor *grads[DFG_MODEL_MAX_PARAMS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)n); /* averaged over the ranks in train.k already, */
    if (c->chunks) dfg_nn_allreduce_grads(g, grads, n, c->W, c->bucket_bytes); /* or here after the chunks */
    dfg_tensor *norm = dfg_clip_grad_norm(g, grads, n, c->max_grad_norm); /* in place on the buffers */
    dfg_tensor *lr = NULL; /* this update's rate; logged for the first, as loss and grad_norm are */
    dfg_status st = dfg_nn_adamw_step_scheduled(p, g, s->policy->params, grads, n, c->adamw, &c->lr_schedule, "", &lr);
    if (st) return st;
    for (int i = 0; i < n; i++) dfg_assign_fill(g, s->grads[i], 0.0f);
    if (k == 0 && c->lr_schedule.log) dfg_metric(g, "learning_rate", lr);
    if (k == 0) { /* over the ranks: the loss their mean (each is its share), kl per token of the batch */
        dfg_metric(g, "loss", dfg_grpo_world_reduce(g, s->acc_loss, DFG_COLL_MEAN, c->W));
        if (c->beta != 0.0f) /* TRL logs it with beta */
            dfg_metric(g, "kl", per_token(g, dfg_grpo_world_reduce(g, s->acc_kl, DFG_COLL_SUM, c->W),
                                          dfg_grpo_world_reduce(g, s->acc_tokens, DFG_COLL_SUM, c->W)));
    }
    /* the loss's statistics, averaged over micro-batches and passes, then over the ranks as TRL's
     * gather does: the mean of the means, the least of the minima, the largest of the maxima */
    if (s->acc_ext) { /* the pass's extremes join the sums; the next pass starts afresh */
        dfg_tensor *run = dfg_slice(g, s->acc_ext, 0, 0, 2), *sum = dfg_add(g, dfg_slice(g, s->acc_ext, 0, 2, 2), run);
        dfg_assign(g, s->acc_ext, dfg_concat(g, (dfg_tensor *[]){dfg_grpo_extremes_start(g), sum}, 2, 0));
    }
    dfg_tensor *avg = !last ? NULL
                      : s->acc_ext ? dfg_grpo_chunk_stats(g, s->acc_stats, s->acc_tokens, s->acc_ext, c->N * c->iterations,
                                                          c->iterations, (int[]){2, 4, GRPO_STATS - 1})
                                   : dfg_scale(g, s->acc_stats, 1.0f / (float)(c->GA * c->iterations));
    dfg_tensor *by[3] = {dfg_grpo_world_reduce(g, avg, DFG_COLL_MEAN, c->W), NULL, NULL};
    if (last && c->W > 1) by[1] = dfg_allreduce(g, avg, DFG_COLL_MIN, c->W), by[2] = dfg_allreduce(g, avg, DFG_COLL_MAX, c->W);
    for (int i = 0; last && i < GRPO_STATS; i++) {
        dfg_tensor *v = i == 2 && by[1] ? by[1] : i == 4 && by[2] ? by[2] : by[0]; /* clip low_min, high_max */
        if (logs_stat(c, i)) dfg_metric(g, grpo_stats[i], dfg_reshape(g, dfg_slice(g, v, 0, i, 1), DFG_SCALAR));
    }
    if (k == 0) {
        dfg_metric(g, "grad_norm", norm);
        dfg_grpo_sampling_metrics(g, &s->sampling, c->W, c->loss.sampling_correction);
    }
    dfg_tensor *acc[5] = {s->micro, s->acc_loss, s->acc_kl, s->acc_tokens, s->acc_stats};
    for (int i = 0; i < (last ? 5 : 3); i++) dfg_assign_fill(g, acc[i], 0.0f);
    if (last && s->sampled) dfg_assign_fill(g, s->sampled, 0.0f); /* a --rollouts step next gets its old stage */
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* The supervised warm-up: one step on the right answers (teacher forcing), over the columns an
 * answer and its EOS can reach (the task's longest answer bounds them: the rest is padding). */
static dfg_status build_sft(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_graph *g = dfg_graph_new(p, "sft");
    int64_t W = c->task.max_completion_len < c->max_new ? c->task.max_completion_len : c->max_new;
    dfg_tensor *tokens = dfg_slice(g, s->sft_tokens, 1, 0, c->Lp + W);            /* (N, Lp + W) */
    dfg_tensor *mask = dfg_slice(g, s->sft_mask, 1, 1, c->Lp + W - 1);           /* (N, Lp + W - 1) */
    dfg_tensor *logp = dfg_grpo_token_logp(g, s->policy, tokens, 1.0f, s->start); /* the task's rows' padding */
    dfg_tensor *scored = dfg_sum(g, dfg_reshape(g, mask, DFG_SHAPE(-1)), 0);
    dfg_tensor *loss = dfg_neg(g, per_token(g, dfg_sum(g, dfg_masked_sum(g, logp, mask, 1), 0), scored));
    dfg_status st = dfg_backward_accumulate(g, loss, s->policy->params, s->policy->n_params, s->grads);
    if (st) return st;
    int n = s->policy->n_params;
    dfg_tensor *grads[DFG_MODEL_MAX_PARAMS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)n);
    dfg_nn_allreduce_grads(g, grads, n, c->W, c->bucket_bytes);
    dfg_clip_grad_norm(g, grads, n, c->max_grad_norm);
    if ((st = dfg_nn_adamw_step(p, g, s->policy->params, grads, n, c->adamw, ""))) return st;
    for (int i = 0; i < n; i++) dfg_assign_fill(g, s->grads[i], 0.0f);
    dfg_metric(g, "sft_loss", dfg_grpo_world_reduce(g, loss, DFG_COLL_MEAN, c->W));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* ---------------------------------------------------------------- the program */
static dfg_status declare(dfg_program *p, const grpo_config *c, const grpo_state *s);

static dfg_status build(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_status st = dfg_grpo_make_state(p, c, s);
    dfg_grpo_async async = {0}; /* async_rollouts: the training stages take the batch of the step before */
    if (!st && c->async_rollouts) st = dfg_grpo_async_before_rollout(p, c, s, &async);
    if (!st) st = dfg_stage_host(p, "data", "grpo_data");
    if (!st && c->eval_ds) st = dfg_grpo_eval_state(p); /* dfg run's evaluation batches */
    if (!st && c->n_pwidths > 1) st = dfg_grpo_build_prompt_width(p, c, s);
    if (!st && c->sft_steps > 0) st = build_sft(p, c, s);
    for (int k = 0; k < c->R && !st; k++) {
        for (int pb = 0; pb < c->n_pwidths && !st; pb++) st = dfg_grpo_build_prefill(p, c, s, k, pb);
        if (!st) st = dfg_grpo_build_decode(p, c, s, k);
    }
    if (!st && c->tail) st = dfg_grpo_build_decode_tail(p, c, s);
    if (!st && c->tools) st = dfg_grpo_tools_loop(p, c, &s->tools, "decode");
    if (!st && c->async_rollouts) st = dfg_grpo_async_after_rollout(p, c, &async, s);
    else if (!st) st = dfg_stage_host(p, "reward", "grpo_reward");
    if (!st) st = build_advantages(p, c, s);
    if (!st && c->log_completions) st = dfg_stage_host(p, "completions", "grpo_completions");
    int copies = c->n_pwidths * c->n_widths; /* copy i: prompt bucket i / n_widths, completion width i % n_widths */
    for (int i = 0; i < copies && !st && c->beta != 0.0f; i++)
        st = build_logp_stage(p, c, s, "ref", s->ref, s->ref_logp, s->ref_micro, i / c->n_widths, i % c->n_widths);
    for (int i = 0; i < copies && !st && c->iterations > 1; i++)
        st = build_logp_stage(p, c, s, "old", s->policy, s->old_logp, s->old_micro, i / c->n_widths, i % c->n_widths);
    for (int k = 0; k < c->iterations && !st; k++) {
        for (int i = 0; i < copies && !st; i++) st = build_train(p, c, s, k, i / c->n_widths, i % c->n_widths);
        if (!st) st = build_update(p, c, s, k);
    }
    if (!st && c->async_rollouts) st = dfg_grpo_async_after_update(p, &async);
    if (st) return st;
    if (c->sft_steps > 0) st = dfg_grpo_gate_after_sft(p, c);
    return st ? st : declare(p, c, s);
}

/* What `dfg run --rollouts R --dump OUT` needs to know about this program, and the host state
 * its host stages read (the typed config, validated once per run). */
static dfg_status declare(dfg_program *p, const grpo_config *c, const grpo_state *s) {
    const char *stages[8 + DFG_GRPO_MAX_PWIDTHS + 2 * DFG_GRPO_MAX_SUB_BATCHES + DFG_GRPO_MAX_EXTEND + 3 * DFG_GRPO_MAX_TAILS];
    char names[DFG_GRPO_MAX_PWIDTHS + 2 * DFG_GRPO_MAX_SUB_BATCHES][48], extend[DFG_GRPO_MAX_EXTEND][32];
    char tail[3 * DFG_GRPO_MAX_TAILS][32]; /* decode_tail's ladder: each width's compact, tail, merge */
    int n = 0, used = 0;
    stages[n++] = "data";
    if (c->n_pwidths > 1) stages[n++] = "prompts";
    if (c->sft_steps > 0) stages[n++] = "sft"; /* the warm-up trains on made data: no rollout to replace */
    for (int k = 0; k < c->R; k++) {
        for (int pb = 0; pb < c->n_pwidths; pb++) { /* one prompt bucket with sub-batches (read_pwidths) */
            dfg_grpo_prefill_stage(names[used], sizeof(names[0]), c, k, pb);
            stages[n++] = names[used++];
        }
        for (int i = 0, ne = c->tools ? dfg_grpo_tools_extend_stages(c, extend) : 0; i < ne; i++)
            stages[n++] = extend[i]; /* the tools' answers into the KV cache (R is 1 with tools) */
        if (c->tools && c->tail) stages[n++] = "decode.live"; /* each round: whether the batch or the tail decodes */
        dfg_grpo_rollout_stage(names[used], sizeof(names[0]), "decode", c, k);
        stages[n++] = names[used++];
    }
    for (int i = 0, nt = c->tail ? dfg_grpo_tail_stages(c->N, c->tail, c->tools, tail) : 0; i < nt; i++)
        stages[n++] = tail[i];
    if (c->tools) stages[n++] = "tools";
    stages[n++] = "reward";
    /* left-padded prompts (padded_prompts): a rollout says where each row's prompt starts
     * (prompt_start, or an attention_mask the CLI turns into it; neither: no padding) */
    /* sampling_logps last: a file may leave it out (no correction; cli_run_rollouts.c) */
    dfg_tensor *roll[6] = {s->tokens, s->mask, s->rewards}; /* tool_mask too: a file may leave it out (no tools' tokens) */
    int n_roll = 3;
    if (s->start) roll[n_roll++] = s->start;
    roll[n_roll++] = s->sampling_logp;
    if (c->tools) roll[n_roll++] = s->tools.tool_mask;
    if (!c->async_rollouts) { /* one step off, a rollout file has no step before it: none is declared */
        dfg_declare_rollout(p, stages, n, roll, n_roll);
        if (c->rollouts_only[0]) dfg_declare_rollouts_only(p, c->rollouts_only);
        if (c->share_prompts) dfg_declare_shared_prompts(p, s->tokens, c->Lp, c->G); /* rollouts must keep a group's prompt */
        dfg_declare_rollout_prompt(p, s->tokens, c->Lp); /* the prompt columns --rollouts checks a file's padding in */
    }
    static const char *const dumps[][2] = {{"logp", "logp"}, {"sampling_logps", "sampling_logps"},
                                           {"importance_sampling_ratio", "importance_sampling_ratio"},
                                           {"off_policy_mask", "off_policy_mask"},
                                           {"completion_mask", "completion_mask"}, {"tool_mask", "tool_mask"},
                                           {"ref_logp", "ref_logp"},
                                           {"advantages", "advantages"}, {"reward_values", "reward_values"},
                                           {"loss", "metric.loss"},
                                           {"grad_norm", "metric.grad_norm"}, {"kl", "metric.kl"}};
    for (size_t i = 0; i < sizeof(dumps) / sizeof(dumps[0]); i++)
        if (dfg_find(p, dumps[i][1])) dfg_declare_dump(p, dumps[i][0], dfg_grpo_async_trained(p, dfg_find(p, dumps[i][1])));
    if (c->tools) /* a multi-turn rollout replays from its dump: the episodes' tokens and rewards too */
        dfg_declare_dump(p, "tokens", s->tokens), dfg_declare_dump(p, "rewards", s->rewards);
    dfg_grpo_declare_metric_dumps(p); /* completions/... and sampling/..., as TRL logs them */
    for (int i = 0; i < GRPO_STATS; i++) /* the loss's metrics under their TRL names */
        if (logs_stat(c, i)) {
            char name[64];
            snprintf(name, sizeof(name), "metric.%s", grpo_stats[i]);
            dfg_declare_dump(p, grpo_stats[i], dfg_find(p, name));
        }
    dfg_host_state(p, "grpo_host_init", "grpo_host_release");
    if (c->invariant) dfg_declare_batch_invariant(p);
    dfg_grpo_declare_fit_knobs(p, c);
    return dfg_program_status(p);
}

dfg_status dfg_pipeline(dfg_program *p) {
    grpo_config c = {0};
    dfg_status st = dfg_grpo_read_config(p, &c);
    if (st) {
        dfg_dataset_free(c.ds);
        dfg_dataset_free(c.eval_ds);
        return st;
    }
    grpo_state s = {0};
    s.policy = calloc(1, sizeof(*s.policy));
    s.ref = calloc(1, sizeof(*s.ref));
    st = s.policy && s.ref ? build(p, &c, &s) : dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    free(s.policy);
    free(s.ref);
    dfg_dataset_free(c.ds); /* compiling only checks it; the run reads it again */
    dfg_dataset_free(c.eval_ds);
    return st ? st : dfg_program_status(p);
}

/* ---------------------------------------------------------------- host stages
 * The host stages read the same typed config the pipeline built the program from: read_config
 * runs once per run, on the runtime's program (dfg_host_state), not once per step. */
void grpo_host_release(void *user);

dfg_status grpo_host_init(dfg_program *p, void **user) {
    grpo_config *c = calloc(1, sizeof(*c));
    if (!c) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    dfg_status st = dfg_grpo_read_config(p, c); /* nothing about the task: with --rollouts it never runs */
    if (!st && c->ds && !(c->ds_rows = calloc((size_t)c->P, sizeof(int64_t))))
        st = dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    if (!st && c->tools && dfg_grpo_turns_new(c, &c->turns)) st = dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    if (st) {
        grpo_host_release(c);
        return st;
    }
    *user = c;
    return DFG_OK;
}

void grpo_host_release(void *user) {
    grpo_config *c = user;
    if (!c) return;
    dfg_dataset_free(c->ds);
    dfg_dataset_free(c->eval_ds);
    free(c->ds_rows);
    dfg_grpo_turns_free(c->turns);
    free(c);
}

dfg_status grpo_data(dfg_host_ctx *ctx) {
    grpo_config *c = dfg_host_user(ctx);
    if (c->rollouts_only[0]) /* dfg run refuses such a plan without --rollouts; another caller may not */
        return dfg_host_fail(ctx, "this plan trains only on fixed rollouts: %s", c->rollouts_only);
    if (c->eval_ds && dfg_grpo_eval_on(ctx)) return dfg_grpo_eval_data(ctx, c); /* dfg run's evaluation */
    dfg_status st;
    if (!c->ds) st = dfg_grpo_make_batch_padded(ctx, &c->task, (int)c->P, (int)c->G, (int)c->Lp);
    else {
        dfg_grpo_data_opts o = {.prompts = c->P, .group = c->G, .prompt_len = c->Lp, .pad_id = c->pad_id,
                                .shuffle = c->shuffle, .truncate_left = c->truncate_left};
        st = dfg_grpo_dataset_batch(ctx, c->ds, &o, c->ds_rows);
    }
    return st || !c->tools ? st : dfg_grpo_tools_reset(ctx, c); /* a new episode for every row */
}

/* log_completions: the step's rows, every logging_steps steps (grpo_completions.c). */
dfg_status grpo_completions(dfg_host_ctx *ctx) { return dfg_grpo_log_completions(ctx, dfg_host_user(ctx)); }

/* The tools stage of a multi-turn rollout: answers the turns that ended (grpo_tools.c). */
dfg_status grpo_tools(dfg_host_ctx *ctx) { return dfg_grpo_tools_answer(ctx, dfg_host_user(ctx)); }

dfg_status grpo_reward(dfg_host_ctx *ctx) {
    grpo_config *c = dfg_host_user(ctx);
    if (strcmp(c->reward, "external")) return dfg_grpo_rewards_task(ctx, &c->task, (int)c->Lp, c->reward);
    dfg_grpo_reward_opts o = {.group = c->G, .prompt_len = c->Lp, .weights = c->weights, .eos = c->eos,
                              .n_eos = c->n_eos, .ds = dfg_grpo_eval_on(ctx) ? c->eval_ds : c->ds, .rows = c->ds_rows, .all_null_steps = &c->all_null_steps,
                              .messages = c->tools ? dfg_grpo_turns_messages(c->turns) : NULL,
                              .env_rewards = c->tools ? dfg_grpo_turns_rewards(c->turns) : NULL};
    return dfg_grpo_rewards_external(ctx, dfg_host_reward_source(ctx), &o);
}
