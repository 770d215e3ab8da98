/* dfg_grpo_state.h - the GRPO pipeline's persistent tensors (examples/grpo/grpo.c) and the
 * builders of its rollout stages (grpo_rollout.c: the state, prompt widths, prefill, decode and
 * decode's tail), kept beside the pipeline so that grpo.c reads as the step's outline. */
#ifndef DFG_GRPO_STATE_H
#define DFG_GRPO_STATE_H

#include "dfg_grpo_config.h"
#include "dfg_grpo_data.h"
#include "dfg_grpo_tools.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The loss's per-micro-batch metrics (dfg_grpo_terms) summed in train.stats: grpo.c names them. */
#define DFG_GRPO_STATS 8

/* The program's persistent tensors, by their roles in the step. */
typedef struct {
    dfg_model *policy, *ref;
    dfg_model_kv kv;
    dfg_tensor *tokens, *mask, *rewards, *advantages, *active; /* the rollout */
    /* (N, T) what the loss, KL, entropy and token counts read: TRL's loss_mask = completion_mask *
     * tool_mask with tools (its own tensor, so completion_mask stays the episode's: a dump of it
     * replays with the same truncation), else completion_mask itself */
    dfg_tensor *loss_mask;
    dfg_tensor *start;        /* (N) i32 each row's first prompt column (a dataset's left-padded prompts); else NULL */
    dfg_tensor *reward_values; /* (N, F) each row's value per reward function, NaN for None (external rewards) */
    dfg_tensor *truncated_prompts;
    dfg_tensor *logp, *ref_logp, *old_logp;                    /* (N, T) per-token log-probs */
    dfg_tensor *width;   /* () the batch's longest completion (length buckets: which width runs); or NULL */
    dfg_tensor *columns; /* (max_new) 1 .. max_new: a completion column's count */
    dfg_tensor *sft_tokens, *sft_mask;                         /* the warm-up's data */
    dfg_tensor *cur_tok, *pos, *done, *rng;                    /* generation */
    dfg_tensor *gen_rng;   /* (4) the rollout's draws: the state where it starts, for every sub-batch */
    dfg_tensor *finished;  /* () 1 once every row of the sub-batch is done: decode ends (decode_early_exit) */
    /* batch_invariant with num_iterations > 1: 1 from prefill to the last update when this step
     * sampled its rollout (the old log-probs are the sampler's, no old stage), 0 with --rollouts */
    dfg_tensor *sampled;
    dfg_tensor *prompt_width; /* () prompt buckets: the batch's longest prompt, which prefill copy runs */
    /* () the value the scoring and training copies' when-rules read (NULL: none needs one): with
     * chunks the batch's prompt bucket pb, else pb * DFG_GRPO_PASS_KEY + the completion width; old_key
     * for the old stage, -2 (no copy's range) when the step sampled its rollout */
    dfg_tensor *pass_key, *old_key;
    dfg_tensor *ref_micro, *old_micro; /* the ref and old stages' micro-batch loops */
    dfg_tensor *micro, *acc_loss, *acc_kl, *acc_tokens; /* micro-batch loop */
    dfg_tensor *acc_stats; /* (DFG_GRPO_STATS) per micro-batch metrics, summed over the step's micro-batches */
    /* (4) sorted chunks: the pass's least low_min and largest high_max so far, and their sums over the passes */
    dfg_tensor *acc_ext;
    /* the sampler's log-probs against the training forward's (the first pass's, before any update) */
    dfg_tensor *sampling_logp; /* (N, T) each generated token's log-prob as decode sampled it, or a rollout file's */
    dfg_tensor *is_ratio, *off_policy; /* (N, T), (N): the correction's ratios and the off-policy mask (--dump) or NULL */
    dfg_grpo_sampling sampling;
    dfg_grpo_chunks chunks; /* length_chunks: the passes' order of chunks and each width's count */
    dfg_grpo_tail tail;     /* decode_tail: the loop's end on the live rows alone */
    dfg_grpo_tools tools;   /* multi-turn episodes (c->tools): one column a row, the tools stage's state */
    dfg_tensor *grads[DFG_MODEL_MAX_PARAMS];
} dfg_grpo_state;

/* Makes every persistent tensor of the step and the rollout tensors' scopes. */
dfg_status dfg_grpo_make_state(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s);
/* The first len tokens of the first row of every group of G rows: tokens (n, T) -> (n/G, len). */
dfg_tensor *dfg_grpo_group_prompts(dfg_graph *g, dfg_tensor *tokens, int64_t G, int64_t len);
/* The stage "prompts": the batch's longest prompt (prompt buckets). */
dfg_status dfg_grpo_build_prompt_width(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s);
/* Prefill of sub-batch k over prompt bucket pb. */
dfg_status dfg_grpo_build_prefill(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s, int k, int pb);
/* Decode of sub-batch k: max_completion_length runs at most. */
dfg_status dfg_grpo_build_decode(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s, int k);
/* decode_tail's three stages: compact, tail, merge. */
dfg_status dfg_grpo_build_decode_tail(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s);

#ifdef __cplusplus
}
#endif
#endif
