/* dfg_grpo_async.h - one-step-off rollouts for the GRPO pipeline (async_rollouts=1, TRL's
 * AsyncGRPOTrainer idea on one device; grpo_async.c). The rollout stages write the batch of the
 * next step into the rollout tensors (tokens, completion_mask, ...) as before, and its reward
 * request goes out to the reward program without waiting; the training stages meanwhile train on
 * a second set of buffers ("async.tokens", ...) that hold the batch rolled out one step earlier;
 * then the rewards are collected and the new batch is copied into those buffers for the next
 * step. The first step (of a run or after a checkpoint that holds no batch) rolls out twice and
 * trains on the first batch, as TRL's first step trains on the policy's own samples. */
#ifndef DFG_GRPO_ASYNC_H
#define DFG_GRPO_ASYNC_H

#include "dfg_grpo_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* the trained batch: copies of the rollout tensors of the same names without "async." */
    dfg_tensor *tokens, *mask, *start, *rewards, *reward_values, *sampling_logp, *truncated_prompts;
    dfg_tensor *staleness; /* () the trained batch's policy updates between its rollout and its training */
    dfg_tensor *primed;    /* () 1 once the buffers hold a batch: the first step rolls out twice */
    dfg_tensor *again;     /* () 0, never written: the first step's loop goes back once */
} dfg_grpo_async;

/* async_rollouts and max_staleness against the other settings: one line naming what cannot go
 * with one-step-off rollouts. */
dfg_status dfg_grpo_async_check(dfg_program *p, const dfg_grpo_config *c);
/* The trained batch's buffers in a, and *train: the state as the training stages see it, s with
 * the rollout tensors replaced by a's and the old log-probs the sampler's (TRL's async trainer). */
dfg_status dfg_grpo_async_state(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s, dfg_grpo_async *a,
                                dfg_grpo_state *train);
/* After decode: the reward request ("reward.submit") and, in the first step only, its answer and
 * the copy into the trained buffers ("reward.first", "async.first"), then back to "data". */
dfg_status dfg_grpo_async_after_rollout(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                        dfg_grpo_async *a);
/* After the update: the next batch's rewards ("reward") and its copy into the trained buffers
 * ("async.next"), which logs the staleness of the batch just trained. */
dfg_status dfg_grpo_async_after_update(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                       dfg_grpo_async *a);
/* The tensor --dump writes for rollout tensor t: the trained batch's copy when it has one. */
dfg_tensor *dfg_grpo_async_trained(dfg_program *p, dfg_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
