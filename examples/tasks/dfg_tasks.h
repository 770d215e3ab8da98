/* dfg_tasks.h - verifiable tasks for GRPO: a character vocabulary, tasks whose answers a
 * program can check exactly, rewards on generated completions, and the host-stage helpers a
 * GRPO pipeline calls to write its prompts and score its rollouts.
 *
 * Vocabulary (15 ids):  0 PAD (printed '_'), 1 EOS (printed '$'), 2..11 the digits '0'..'9',
 * 12 '+', 13 '-', 14 '='. Every id a model emits is a valid index into it. The calculator adds
 * 15 '*' and 16 '@' (a tool call): its models have 17 ids (dfg_task.vocab_size), the others' 15.
 *
 * Tasks: every prompt of a task at a given size has the same length (the rollout decodes all
 * rows in lockstep), answers may be shorter than max_answer_len (add, sub) and end with EOS.
 *
 *   name     digits  prompt            answer                         prompt_len  max_answer_len
 *   copy     1..64   "31415="          "31415"                        d + 1       d
 *   reverse  1..64   "31415="          "51413"                        d + 1       d
 *   sort     1..64   "31415="          "11345" (ascending)            d + 1       d
 *   add      1..18   "042+317="        "359"  (no leading zeros)      2d + 2      d + 1
 *   sub      1..18   "042-317="        "-275" ('-' when negative)     2d + 2      d + 1
 *   calculator 1..9  "042*317="        "13314"                        2d + 2      2d
 *
 * The calculator is a multi-turn task with a tool (dfg_task_tool_turn): a policy that cannot
 * multiply may call multiply(a, b) by ending a turn with "@042*317$"; the tool's answer "=13314="
 * joins the row's context (tool tokens, which the loss leaves out), and the policy's next turn
 * "13314$" is the answer. Its rewards score the completion's last turn: the tokens after the
 * last '=' (all of them when there is none), so calling and answering earns what answering does.
 *
 * Operands are uniform digit strings (leading zeros kept in the prompt). Sums and differences
 * are written as numbers, without leading zeros ("0" for zero): answers then vary in length, so
 * the model must learn where to put EOS, which is what the pipeline's EOS masks are for; a
 * fixed-width answer would make EOS a constant position and test nothing of that.
 *
 * Rewards score one completion: the n tokens the policy generated after the prompt, as written
 * (an EOS somewhere, or none, and possibly junk after it). All kinds lie in [0, 1] and reach
 * 1.0 only for the exact answer followed by EOS (format: for any well-formed answer):
 *   exact    1 when the tokens before the first EOS equal the answer and an EOS is present.
 *   partial  per-position credit against the target answer + EOS (L + 1 tokens): with s the
 *            completion up to and including its first EOS (all n tokens when there is none),
 *            partial = #{i : s[i] == target[i]} / max(len(s), L + 1). Extra characters grow the
 *            denominator (the answer, k extra characters, EOS scores L / (L + 1 + k)), a
 *            missing EOS loses that position's credit, a short answer the positions it lacks.
 *   format   1 when an EOS is present and the tokens before it are a number: an optional '-'
 *            then one or more digits (the shape of every task's answer); else 0. The empty
 *            answer is not well formed, so "EOS at once" earns nothing.
 *   mixed    0.6 exact + 0.3 partial + 0.1 format: 1.0 for the right answer, < 0.4 for any
 *            other, and a dense signal before the first exact hit (digits in the right places,
 *            then well-formed answers).
 * Tokens after the first EOS never count. */
#ifndef DFG_TASKS_H
#define DFG_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "dfg_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- vocabulary */
enum { DFG_VOCAB_PAD = 0, DFG_VOCAB_EOS = 1, DFG_VOCAB_DIGIT0 = 2 /* '0'; '9' is 11 */ };

int dfg_vocab_size(void);          /* 15 */
int32_t dfg_vocab_id(char c);       /* -1 when c is not in the vocabulary ('_' and '$' are PAD and EOS) */
char dfg_vocab_char(int32_t id);    /* '?' for an id outside the vocabulary; PAD '_', EOS '$' */
/* Writes the characters of ids[0 .. n-1] to out as a NUL-terminated string, cut to len - 1
 * characters (for logs and tests). */
void dfg_vocab_decode(const int32_t *ids, int n, char *out, size_t len);
/* Encodes the string s into ids (at most max ids); returns the number of ids, or -1 when s has
 * a character outside the vocabulary or is longer than max. */
int dfg_vocab_encode(const char *s, int32_t *ids, int max);

/* ---------------------------------------------------------------- tasks */
#define DFG_TASK_MAX_PROMPT_LEN 65 /* the longest prompt_len of any task (copy/reverse/sort, d = 64) */
#define DFG_TASK_MAX_ANSWER_LEN 64 /* the longest max_answer_len of any task */

typedef struct {
    const char *name;   /* the task's canonical name (static storage) */
    int digits;         /* its size: digits of the string or of each operand */
    int prompt_len;     /* every prompt's length, '=' last */
    int max_answer_len; /* the longest answer (EOS not counted) */
    int max_completion_len; /* the longest completion a right episode takes (EOS included; the calculator's call and tool answer) */
    int vocab_size;     /* the ids its models need: 15, or 17 for the calculator */
    int kind;           /* internal: which task */
} dfg_task;

/* Sets *t for the task `name` at size `digits`. An unknown name (the message lists the valid
 * ones) or a size outside the task's range is DFG_ERR_ARG with a message in err (may be NULL). */
dfg_status dfg_task_init(dfg_task *t, const char *name, int digits, char *err, size_t len);
/* Draws one problem: writes prompt[0 .. prompt_len-1] and answer[0 .. L-1] and returns L
 * (1 <= L <= max_answer_len; -1 for a NULL argument). Deterministic in *rng, which it advances
 * with dfg_host_rand. */
int dfg_task_sample(const dfg_task *t, uint64_t *rng, int32_t *prompt /* prompt_len */,
                    int32_t *answer /* max_answer_len */);

/* The calculator's product: the digits of a (na digits) times b (nb), 1 .. 9 digits each, written
 * to out without leading zeros ("0" for zero); returns its length, or -1 when an operand is empty,
 * longer than 9 digits or holds a token that is no digit. */
int dfg_calculator_product(const int32_t *a, int na, const int32_t *b, int nb, int32_t *out /* 18 */);

/* The built-in tool environment of a task (the calculator's multiply; other tasks have no tools):
 * given a turn the policy ended (turn[0 .. n-1], its EOS last when it has one), writes the tokens
 * that follow a tool call into suffix (at most max) and returns how many, or 0 when the episode
 * ends there (the turn is no call: TRL parses a malformed call as plain text too). A call the tool
 * cannot run (an operand past 9 digits) still answers, "==" (the error), and counts in *failures;
 * every call counts in *calls. A suffix longer than max returns max + 1 (the caller ends the row,
 * as TRL drops a tool answer past max_completion_length). */
int dfg_task_tool_turn(const dfg_task *t, const int32_t *turn, int n, int32_t *suffix, int max, int *calls,
                       int *failures);
/* Where the completion's last turn starts: after the last '=' of a calculator episode; 0 for
 * the other tasks. */
int dfg_task_last_turn(const dfg_task *t, const int32_t *completion, int n);

/* ---------------------------------------------------------------- rewards
 * A reward scores one completion (n generated tokens) against the answer (answer_len tokens,
 * no EOS). User rewards have this signature; so have the built-ins (they ignore `user`), so any
 * of them can be passed where a callback is expected. A reward must return a finite value. */
typedef float (*dfg_reward_fn)(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user);

float dfg_reward_exact(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user);
float dfg_reward_partial(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user);
float dfg_reward_format(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user);
float dfg_reward_mixed(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user);

/* The built-in reward named "exact", "partial", "format" or "mixed"; NULL for another name. */
dfg_reward_fn dfg_reward_by_name(const char *kind);
/* The valid names, for messages: "exact, partial, format, mixed". */
const char *dfg_reward_names(void);

/* ---------------------------------------------------------------- host-stage helpers
 * For a pipeline's host functions. N = prompts * group rows; T the sequence length. Missing
 * tensors and wrong dtypes or shapes fail the stage (dfg_host_fail) with a message naming the
 * tensor, the expected and the actual shape.
 *
 * dfg_grpo_make_batch draws `prompts` problems and writes each to `group` consecutive rows
 * (rows g*group .. g*group + group-1 share a prompt: one GRPO group):
 *   "tokens"      i32 (N, T)  the prompt in columns 0 .. prompt_len-1, PAD after
 *   "answers"     i32 (N, max_answer_len)  the answer, PAD after it
 *   "answer_len"  i32 (N)     the answer's length
 * and, when the program has them (each is optional), for a supervised warm-up:
 *   "sft_tokens"  i32 (N, T)  prompt, answer, EOS, then PAD
 *   "sft_mask"    f32 (N, T)  1 exactly at the positions whose token is part of the answer or
 *                             its EOS (prompt_len .. prompt_len + L), 0 elsewhere
 * Positions follow the rollout's convention: position t holds the token that the model
 * predicts from positions 0 .. t-1 (the logits at t-1), so a loss weighs log p(token[t]) by
 * mask[t], as completion_mask weighs generated tokens. T must be >= prompt_len +
 * max_answer_len + 1 so that every answer and its EOS fit. The problems are a function of
 * (dfg_host_seed, dfg_host_step) alone: the same run draws the same batches on every machine. */
dfg_status dfg_grpo_make_batch(dfg_host_ctx *ctx, const dfg_task *t, int prompts, int group);
/* The same with the prompts left-padded to prompt_cols >= prompt_len columns (a plan whose
 * max_prompt_length is longer than the task's prompts): each row is PAD x (prompt_cols -
 * prompt_len), the prompt, then what follows it as above from column prompt_cols on, and
 *   "prompt_start" i32 (N)  prompt_cols - prompt_len, each row's first prompt column
 * (required when there is padding; written when present). prompt_cols = prompt_len is
 * dfg_grpo_make_batch. */
dfg_status dfg_grpo_make_batch_padded(dfg_host_ctx *ctx, const dfg_task *t, int prompts, int group, int prompt_cols);

/* dfg_grpo_rewards scores every row's completion with fn(completion, n, answer, L, user) and
 * writes "rewards" f32 (N). It reads
 *   "tokens"           i32 (N, T)
 *   "completion_mask"  f32 (N, T)  nonzero on the generated tokens, EOS included, 0 after it
 *   "answers"          i32 (N, A), "answer_len" i32 (N) with 0 <= answer_len <= A
 * A row's completion is its tokens at positions >= prompt_len whose mask is nonzero, in order.
 * A reward that is not finite fails the stage. */
dfg_status dfg_grpo_rewards(dfg_host_ctx *ctx, int prompt_len, dfg_reward_fn fn, void *user);
/* The same with a built-in reward by name (dfg_reward_by_name); an unknown name fails the
 * stage with the list of valid ones. */
dfg_status dfg_grpo_rewards_kind(dfg_host_ctx *ctx, int prompt_len, const char *kind);
/* The same for task t: the reward scores the completion's last turn (dfg_task_last_turn). */
dfg_status dfg_grpo_rewards_task(dfg_host_ctx *ctx, const dfg_task *t, int prompt_len, const char *kind);

#ifdef __cplusplus
}
#endif
#endif
