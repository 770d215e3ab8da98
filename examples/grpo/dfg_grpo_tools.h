/* dfg_grpo_tools.h - multi-turn episodes with tools in the GRPO pipeline (grpo_tools.c), TRL's
 * `tools=` semantics: a row that ends its turn with a tool call waits while the other rows decode;
 * the host stage `tools` hands every waiting row's turn to the environment (the task's built-in
 * tool, or the program of dfg run --env-cmd) and writes the tool's answer (TRL's tool suffix) into
 * the row's next columns; the stage `extend` puts every answered row's new tokens into the KV
 * cache in one forward pass (a prefill of the appended tokens only), and the row samples again at
 * decode's next run. Extend, decode and tools loop (dfg_stage_loop) until every episode is over.
 * Each row keeps its own column, so its tokens stay one contiguous sequence for training.
 * tool_mask is 0 on the tools' tokens: the loss, KL, entropy and the token counts leave them out
 * (TRL's loss_mask = completion_mask * tool_mask). */
#ifndef DFG_GRPO_TOOLS_H
#define DFG_GRPO_TOOLS_H

#include "dfg_grpo_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dfg_tensor *pos;       /* (N) i32 each row's column: where its last token is */
    dfg_tensor *waiting;   /* (N) f32 1: the row ended its turn and waits for the tools stage */
    /* (N) f32 the last column of the row's latest tool answer (-1: none yet); past the row's column
     * after the tools stage wrote an answer, at it once extend has put the answer in the cache */
    dfg_tensor *answer_to;
    dfg_tensor *width;     /* () f32 the round's longest answer (0: none): which copy of extend runs */
    dfg_tensor *extended;  /* () f32 1 once every answer is in the cache: the widest copy's passes end */
    dfg_tensor *tool_mask; /* (N, T) f32 1 on the policy's tokens, 0 on the tools' */
    dfg_tensor *over;      /* () f32 1 once every episode of the step is over: the loop's end */
    dfg_tensor *calls, *failures; /* () f32 the step's tool calls, and those that failed (the host adds) */
} dfg_grpo_tools;

/* The state above; its rollout-only parts live from prefill to the tools stage. */
dfg_status dfg_grpo_tools_state(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_tools *t);
/* In prefill: every row at the prompt's last column, nothing waiting, tool_mask 1, no calls. */
void dfg_grpo_tools_start(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t);
/* One decode step of the multi-turn loop given the next-token logits (N, 1, V) f32: each row not
 * done and not waiting writes a sampled token at its own next column, with its sampling log-prob;
 * a sampled EOS makes the row wait for the tools stage, a row that fills its last column is done
 * (truncated), and r->finished is set once every row is done or waiting. r->pos is t->pos. The
 * rows are r->done's: the batch, or decode_tail's (t's pos and waiting then the tail's). */
dfg_status dfg_grpo_tools_step(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t,
                               const dfg_grpo_rollout *r, dfg_tensor *logits);
/* What the extend stage reads and writes of the rollout's state: the policy, its KV cache (the
 * copied form: every column of every row), tokens (N, T), each row's last token (N, 1) and
 * whether its episode is over (N). */
typedef struct {
    const dfg_model *policy;
    const dfg_model_kv *kv;
    dfg_tensor *tokens, *token, *done;
} dfg_grpo_extend_io;
/* The extend stage, added before decode (the loop's first stage): one copy a width of
 * dfg_grpo_tools_extend_widths, the narrowest that holds the round's longest answer running
 * (none before the first round); the widest runs again until every answer is in (a longer
 * answer takes a pass a width). Every answered row's cache gets the keys and values of its
 * columns pos .. answer_to-1 (its last token before the answer, then the answer but its last
 * token), and the row stands at answer_to with the answer's last token as its next input (an
 * answer that ends in the last column ends the episode: nothing is left to sample). */
dfg_status dfg_grpo_tools_extend(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_tools *t,
                                 const dfg_grpo_extend_io *io);
/* The widths of extend's copies, narrowest first (at most DFG_GRPO_MAX_EXTEND): doubling from 4 up
 * to half of max_completion_length, so that a pass of every row never needs more memory than a
 * forward of half the rollout (with a budget under 8, one copy of max_completion_length - 1: the
 * longest answer a row can take, a turn having one token at least). */
#define DFG_GRPO_MAX_EXTEND 24
int dfg_grpo_tools_extend_widths(const dfg_grpo_config *c, int64_t *widths);
/* The names of extend's copies, in the widths' order ("extend[w]", the widest "extend"): a
 * --rollouts run skips them with the rest of the rollout. Returns how many. */
int dfg_grpo_tools_extend_stages(const dfg_grpo_config *c, char (*names)[32]);
/* Adds the tools stage and the loop: extend .. decode .. tools until every episode is over (at
 * most max_tool_rounds returns). decode: the decode stage's name, which extend's copies come
 * before: the narrowest of them starts the loop. */
dfg_status dfg_grpo_tools_loop(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_tools *t, const char *decode);
/* TRL's tools/call_frequency (the step's calls a row) and tools/failure_frequency (failed calls
 * per call, 0 without calls), over every rank's rows. */
void dfg_grpo_tools_metrics(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t);

/* ---------------------------------------------------------------- the host
 * The tools stage: answers every waiting row's turn (dfg_task_tool_turn for a built-in task, else
 * the run's environment program, dfg_env_turns: a row the budget ended, and a turn past
 * max_tool_calling_iterations, go to it as the episode's last, so that its record is whole) and
 * writes the answers into the rollout. */
dfg_status dfg_grpo_turns_new(const dfg_grpo_config *c, dfg_grpo_turns **out);
void dfg_grpo_turns_free(dfg_grpo_turns *t);
dfg_status dfg_grpo_tools_answer(dfg_host_ctx *ctx, dfg_grpo_config *c);
/* In the data stage, when an environment program serves the episodes: a new episode for every
 * row (dfg_env_reset; a prompt reset changed goes into the row, left-padded). */
dfg_status dfg_grpo_tools_reset(dfg_host_ctx *ctx, dfg_grpo_config *c);
/* The step's conversations as the program recorded them (N JSON texts), once its episodes are
 * over; NULL with a built-in tool. */
const char *const *dfg_grpo_turns_messages(const dfg_grpo_turns *t);
/* The episodes' rewards (N; NaN: none) when the program scores them (get_reward), else NULL: the
 * last of the plan's reward functions, as TRL appends it. */
const float *dfg_grpo_turns_rewards(const dfg_grpo_turns *t);

#ifdef __cplusplus
}
#endif
#endif
