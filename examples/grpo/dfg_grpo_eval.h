/* dfg_grpo_eval.h - the GRPO pipeline's evaluation (grpo_eval.c) and its advantages with several
 * reward functions (grpo_objectives.c): TRL's eval_dataset and multi_objective_aggregation.
 *
 * Evaluation runs the plan's own rollout stages (data .. reward) on eval_dataset's prompts, with
 * no training: `dfg run` (tools/cli_run_eval.c) switches the other stages off, writes the state
 * tensor "eval.batch" i32 (2) = [1, first row] before each batch of prompts_per_step rows of the
 * file, reads back tokens, completion_mask, rewards and reward_values (with tools also tool_mask
 * and "eval.tool_calls"), and restores everything a step advanced (the RNG, the dataset's
 * position), so a run trains the same with or without it. With tools the batch's episodes run
 * the whole loop (extend, decode, tools) as in training, each row's environment reset with its
 * eval row's fields. */
#ifndef DFG_GRPO_EVAL_H
#define DFG_GRPO_EVAL_H

#include "dfg_grpo_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads multi_objective_aggregation and the evaluation settings (eval_dataset, eval_strategy,
 * eval_steps, eval_on_start, per_device_eval_batch_size, num_generations_eval), opens
 * c->eval_ds and checks them against the plan, TRL's checks included. The caller frees
 * c->eval_ds with dfg_dataset_free. Called by dfg_grpo_read_config, last. */
dfg_status dfg_grpo_read_eval(dfg_program *p, dfg_grpo_config *c);
/* The state "eval.batch" (a plan with eval_dataset): [0, 0] while training. With tools (after
 * dfg_grpo_tools_state) also "eval.tool_calls" f32 (N, 2): each row's tool calls and failed calls
 * in an evaluation batch. */
dfg_status dfg_grpo_eval_state(dfg_program *p);
/* The tools stage's hook: adds a turn's calls and failures to row's counts in "eval.tool_calls"
 * during an evaluation batch; nothing while training or without that state. */
void dfg_grpo_eval_count_calls(dfg_host_ctx *ctx, int64_t row, int calls, int failures);
/* Whether this step is an evaluation batch ("eval.batch"[0] != 0). */
bool dfg_grpo_eval_on(dfg_host_ctx *ctx);
/* The data stage of an evaluation batch: eval rows first .. first + P - 1 (the last row again past
 * the file's end: rows dfg run does not count), each prompt in its G rows; the rows in c->ds_rows.
 * With tools: "eval.tool_calls" zeroed and every row's episode reset (dfg_grpo_tools_reset) with
 * the fields of its eval row. */
dfg_status dfg_grpo_eval_data(dfg_host_ctx *ctx, dfg_grpo_config *c);

/* TRL's multi_objective_aggregation=normalize_then_sum over values (M, F), NaN where a function
 * gave None, M rows in groups of G: each function's values normalised in their group, (v - nanmean)
 * / (nanstd + 1e-4) (a value alone in its group counts as None: TRL's nanstd of one value is NaN),
 * summed with weights (F) as a nansum, then (r - mean) / (std + 1e-4) over the batch's scorable rows
 * (those with any value); 0 for the others. Gives the advantages (M); *zero_std, () f32, TRL's
 * frac_reward_zero_std: 1 when that batch std is 0 (<= 1e-8, torch.isclose), else 0. */
dfg_tensor *dfg_grpo_normalize_then_sum(dfg_graph *g, dfg_tensor *values, const float *weights, int64_t G,
                                        dfg_tensor **zero_std);
/* TRL's sum_then_normalize over rewards (M), the weighted nansums, where some rows may be
 * unscorable (every function gave None; scorable (M) 0 there): each group's nanmean and nanstd (and
 * with scale batch the batch's) over its scorable rows, the advantage (r - mean) / (std + 1e-4), 0
 * on an unscorable row (TRL sets its reward NaN, leaves it out of the baseline and zeroes its
 * advantage). Where every row is scorable the floats are dfg_grpo_advantages' bit for bit: the
 * counts enter only as factors that are then exactly 1. *zero_std, () f32, frac_reward_zero_std:
 * the share of rows whose std (the group's, or the batch's with scale batch) is 0 over at least
 * two scorable values (all of them equal; TRL's torch.isclose(std, 0), whose NaN std is not). */
dfg_tensor *dfg_grpo_sum_then_normalize(dfg_graph *g, dfg_tensor *rewards, dfg_tensor *scorable, int64_t G,
                                        dfg_grpo_scale scale, dfg_tensor **zero_std);
/* (M) 1 where some function gave the row a value (values (M, F), NaN for None) */
dfg_tensor *dfg_grpo_scorable(dfg_graph *g, dfg_tensor *values);
/* The advantages of rewards (M), the weighted sums, or with normalize_then_sum of values (M, F)
 * (NULL: a built-in reward, its one function the rewards): multi_objective_aggregation's. *zero_std:
 * the step's frac_reward_zero_std where values are given, else NULL (dfg_grpo_frac_zero_std's). */
dfg_tensor *dfg_grpo_aggregate(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *rewards, dfg_tensor *values,
                               dfg_tensor **zero_std);
/* TRL's reward and reward_std metrics: the mean and Bessel-corrected std of rewards (M) over the
 * scorable rows (NULL: every row), as TRL's nanmean and nanstd over the rewards with NaN on the
 * unscorable ones; the same floats as over every row where all are scorable. */
void dfg_grpo_reward_metrics(dfg_graph *g, dfg_tensor *rewards, dfg_tensor *scorable);

#ifdef __cplusplus
}
#endif
#endif
