/* dfg_grpo_async.h - one-step-off rollouts for the GRPO pipeline (async_rollouts=1, TRL's
 * AsyncGRPOTrainer idea on one device; grpo_async.c). A step first moves the batch rolled out
 * in the step before into a second set of buffers ("async.tokens", "async.rewards", ...); the
 * rollout stages then write the next batch into the rollout tensors (tokens, completion_mask,
 * ...) as before, and its reward request goes out to the reward program without waiting; then
 * the moved batch's rewards, requested a step ago, are collected into its buffers and the
 * training stages train on those. The program thus scores a batch while the one before it
 * trains and the next one rolls out. The first step (of a run or after a checkpoint that holds
 * no batch) rolls out twice and trains on the first batch, as TRL's first step trains on the
 * policy's own samples. */
#ifndef DFG_GRPO_ASYNC_H
#define DFG_GRPO_ASYNC_H

#include "dfg_grpo_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* the trained batch: copies of the rollout tensors of the same names without "async." */
    dfg_tensor *tokens, *mask, *start, *rewards, *reward_values, *sampling_logp, *truncated_prompts;
    /* what its reward request needs again after --resume: its dataset rows ("dataset.rows", a
     * dataset's plan), a built-in task's answers (an external reward's plan); NULL otherwise */
    dfg_tensor *rows, *answers, *answer_len;
    dfg_tensor *staleness; /* () the trained batch's policy updates between its rollout and its training */
    dfg_tensor *primed;    /* () 1 once the buffers hold a batch: the first step rolls out twice */
    dfg_tensor *again;     /* () 0, never written: the first step's loop goes back once */
    dfg_tensor *pending;   /* () 1 while the trained batch's rewards are the reward program's to give */
} dfg_grpo_async;

/* async_rollouts and max_staleness against the other settings: one line naming what cannot go
 * with one-step-off rollouts. */
dfg_status dfg_grpo_async_check(dfg_program *p, const dfg_grpo_config *c);
/* Before the data stage: the trained batch's buffers in a, copies of s's rollout tensors, and
 * the stage that moves the batch rolled out in the step before into them ("async.take"). */
dfg_status dfg_grpo_async_before_rollout(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                         dfg_grpo_async *a);
/* After decode: the reward request ("reward.submit"); in the first step only, the copy into the
 * trained buffers ("async.first") and back to "data"; then the trained batch's rewards into its
 * buffers ("reward"). *s becomes the state as the training stages see it: the rollout tensors
 * replaced by a's and the old log-probs the sampler's (TRL's async trainer). */
dfg_status dfg_grpo_async_after_rollout(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_async *a, dfg_grpo_state *s);
/* After the update: the staleness of the batch just trained ("async.metrics"). */
dfg_status dfg_grpo_async_after_update(dfg_program *p, const dfg_grpo_async *a);
/* The tensor --dump writes for rollout tensor t: the trained batch's copy when it has one. */
dfg_tensor *dfg_grpo_async_trained(dfg_program *p, dfg_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
