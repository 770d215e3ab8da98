/* dfg_grpo_config.h - the GRPO pipeline's settings (examples/grpo/grpo.c), typed: read once by the
 * pipeline when it builds the program and again by its host state when a run starts, with the
 * same checks (examples/grpo/grpo_config.c). TRL GRPOConfig's and Hugging Face config.json's
 * names; README's settings table (docs/pipeline.md) lists them. */
#ifndef DFG_GRPO_CONFIG_H
#define DFG_GRPO_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "dfg_dataset.h"
#include "dfg_grpo_data.h"
#include "dfg_nn.h"
#include "dfg_reward.h"
#include "dfg_tasks.h"

typedef struct dfg_grpo_turns dfg_grpo_turns;

#ifdef __cplusplus
extern "C" {
#endif

#define DFG_GRPO_MAX_PWIDTHS 4 /* prompt_buckets */
#define DFG_GRPO_MAX_SUB_BATCHES 16 /* prefill.k and decode.k for each: the stages dfg_declare_rollout takes (64) */
/* share_prompts and padded_prompts: the values' order in the settings table ("auto|true|false") */
enum { DFG_GRPO_AUTO, DFG_GRPO_YES, DFG_GRPO_NO };

typedef struct {
    dfg_model_config model;
    dfg_task task;
    dfg_dataset *ds;          /* --set dataset=PATH: prompts from a JSONL file instead of the task */
    int64_t *ds_rows;         /* (P) the dataset rows of the current batch, for the reward */
    int64_t all_null_steps;   /* steps with a row no reward function applied to (a run's warnings) */
    bool padded;              /* padded_prompts: left-padded prompts, each row's start in prompt_start */
    char rollouts_only[256];  /* why the task cannot make this plan's rollouts ("": it can) */
    bool shuffle, truncate_left, mask_truncated;
    int32_t eos[DFG_GRPO_MAX_EOS], pad_id;
    int n_eos;
    const char *reward;       /* a built-in reward's name, or "external" (--reward-cmd / --reward-lib) */
    int n_funcs;              /* external: the reward functions (reward_funcs) and their weights */
    char funcs[DFG_REWARD_MAX_FUNCS][68];
    float weights[DFG_REWARD_MAX_FUNCS];
    int64_t P, G, N, Lp, max_new, T, GA, n_micro, iterations, sft_steps;
    int64_t R, n_gen; /* rollout_sub_batches, and the sequences each generates (N / R) */
    /* length_buckets: the completion widths the scoring and training stages are built for, the
     * widest max_new; a step runs the narrowest that holds its batch's completions */
    int n_widths;
    bool early_exit; /* decode_early_exit: decode ends when every row is done */
    /* multi-turn episodes with tools (the calculator's, or tools=...): one decode column a row,
     * decode and tools looping until every episode is over, at most max_tool_rounds rounds of calls */
    bool tools;
    int n_tools; /* the tools an environment program serves (tools=...); 0: the task's built-in tool */
    int64_t max_tool_rounds;
    dfg_grpo_turns *turns; /* the host's view of the step's episodes (grpo_tools.c), made at run start */
    /* log_completions: every logging_steps steps the host stage "completions" writes the step's rows
     * (grpo_completions.c) and prints n_print of them */
    bool log_completions;
    int64_t logging_steps, n_print;
    bool invariant;  /* batch_invariant: decode's log-probs equal training's bit for bit; no old stage after sampling */
    int64_t tail;    /* decode_tail: once at most this many rows are live, decode goes on with them alone; 0 off */
    /* length_chunks: with several widths, the scoring and training passes take the batch in
     * `chunks` chunks of chunk_groups whole groups, the narrowest first, each at the narrowest
     * width that holds it; regroup: the groups sorted by their longest completion (the loss does
     * not depend on how the batch is split), else the chunks are gradient_accumulation_steps'
     * micro-batches in their order of width. chunks 0: off (micro-batches of n_micro rows). */
    int64_t chunks, chunk_groups;
    bool regroup;
    int64_t widths[DFG_GRPO_MAX_WIDTHS];
    /* prompt_buckets: with left-padded prompts, the prompt widths prefill and the scoring and
     * training stages are built for (narrowest first, the widest max_prompt_length); a step runs
     * the narrowest that holds its batch's longest prompt, leaving out the leading pad columns */
    int n_pwidths;
    int64_t pwidths[DFG_GRPO_MAX_PWIDTHS];
    int W;            /* world_size: data-parallel ranks, each with P of the W P prompts of a step */
    int64_t bucket_bytes; /* ddp_bucket_cap_mb: the gradient all-reduce's buckets */
    bool share_prompts; /* compute each group's prompt once (needs groups whole in a micro-batch) */
    bool share_forced;  /* share_prompts=1: every micro-batch must hold whole groups */
    float temperature, beta, max_grad_norm;
    int top_k;
    float top_p, min_p, repetition_penalty; /* TRL's other generation settings (dfg_grpo_sample_settings) */
    dfg_grpo_loss_config loss;
    dfg_grpo_scale scale;
    /* multi_objective_aggregation=normalize_then_sum: each reward function normalised in its group,
     * weighted, summed, normalised over the batch (TRL's; grpo_objectives.c); false: sum first */
    bool normalize_then_sum;
    dfg_dataset *eval_ds; /* eval_dataset: the prompts `dfg run` evaluates on (grpo_eval.c), or NULL */
    dfg_adamw_config adamw;
    int64_t max_steps;            /* the run's total steps (dfg run --max-steps); -1: not set */
    dfg_lr_schedule lr_schedule; /* the GRPO updates' rates (the sft warm-up's: adamw.lr) */
    /* async_rollouts: the step trains on the batch rolled out this many steps before (0 or 1;
     * grpo_async.c), at most max_staleness updates old */
    int64_t async_rollouts, max_staleness;
} dfg_grpo_config;

/* Reads every setting of p (recording each default in the plan), checks the ranges and opens
 * the dataset when there is one (c->ds: the caller frees it with dfg_dataset_free); on failure
 * the program's error says why. */
dfg_status dfg_grpo_read_config(dfg_program *p, dfg_grpo_config *c);
/* The sampler's settings: temperature, top_k, top_p, min_p, repetition_penalty. */
dfg_sampling dfg_grpo_sample_settings(const dfg_grpo_config *c);
/* `dfg fit`'s knobs (dfg_declare_fit_knob): the settings that change only how the step is
 * computed, and those that change what is trained (grpo_config.c). */
void dfg_grpo_declare_fit_knobs(dfg_program *p, const dfg_grpo_config *c);
/* With a warm-up (sft_steps), every GRPO stage runs only after it (grpo_buckets.c). */
dfg_status dfg_grpo_gate_after_sft(dfg_program *p, const dfg_grpo_config *c);
/* log_completions (grpo_completions.c): the host stage "completions", after the advantages. */
dfg_status dfg_grpo_log_completions(dfg_host_ctx *ctx, const dfg_grpo_config *c);
/* Whether any split of the batch into micro-batches trains the same step: not with bnpo (a token
 * mean per micro-batch), the entropy mask (a quantile per micro-batch), or an entropy bonus
 * normalised per micro-batch (all but dapo, cispo and vespo): TRL computes those per micro-batch. */
bool dfg_grpo_split_free(const dfg_grpo_config *c);

/* ---------------------------------------------------------------- stage copies (grpo_buckets.c)
 * The rollout's stage names: "prefill" and "decode", or "prefill.k" and "decode.k" for sub-batch k. */
void dfg_grpo_rollout_stage(char *buf, size_t len, const char *base, const dfg_grpo_config *c, int k);
/* Prefill of sub-batch k at prompt bucket pb: the widest keeps the rollout name, a narrower one
 * is "prefill[p16]". */
void dfg_grpo_prefill_stage(char *buf, size_t len, const dfg_grpo_config *c, int k, int pb);
/* The copy of stage `base` for prompt bucket pb and completion width b: "base[w]" for a narrower
 * completion width w, "base[pP]" for a narrower prompt width P, "base[pP,w]" for both; the widest
 * keeps `base`. */
void dfg_grpo_bucket_stage(char *buf, size_t len, const char *base, const dfg_grpo_config *c, int pb, int b);
/* () f32 the longest prompt of the rows, start (N) i32 their first prompt columns: max(Lp - start),
 * over the W ranks when W > 1 (a collective). */
dfg_tensor *dfg_grpo_longest_prompt(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *start, int W);
/* () f32 the value the scoring and training copies' run rules read: with chunks the batch's prompt
 * bucket pb (its chunks' run counts pick the completion width), else pb * DFG_GRPO_PASS_KEY + the
 * completion width (width: the batch's, () f32, or NULL for max_completion_length). start: the
 * rows' prompt starts, read with prompt buckets only. */
#define DFG_GRPO_PASS_KEY 1048576.0 /* above any width: each copy's range holds one (pb, width) pair */
dfg_tensor *dfg_grpo_pass_key(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *start, dfg_tensor *width);
/* The range (lo, hi] of that key in which copy (pb, b) runs. */
void dfg_grpo_pass_range(const dfg_grpo_config *c, int pb, int b, double *lo, double *hi);

#ifdef __cplusplus
}
#endif
#endif
