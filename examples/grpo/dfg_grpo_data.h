/* dfg_grpo_data.h - the host-stage helpers a GRPO pipeline calls for prompts from a dataset
 * (dfg_dataset.h) and for rewards from outside the plan (dfg_reward.h): docs/rewards.md.
 *
 * Tensors they use (missing ones, wrong dtypes or shapes fail the stage naming the tensor):
 *   "tokens"            i32 (N, T)  the rollout; prompts left-padded into columns 0 .. Lp-1
 *   "prompt_start"      i32 (N)     each row's first real prompt column (0 .. Lp-1)
 *   "dataset.position"  i32 (2)     [epoch, draws taken in it]: where the next batch starts
 *   "prompts_truncated" f32 ()      optional: prompts of this batch cut from the left
 *   "dataset.hash"      i32 (2)     optional: the content hash of the file drawn from (a resumed
 *                                   run whose file changed warns once)
 *   "completion_mask"   f32 (N, T)  nonzero on generated tokens up to and including the first EOS
 *   "rewards"           f32 (N)     the weighted sum of the functions' rewards
 *   "reward_values"     f32 (N, F)  optional: each row's value per function, NaN where it gave
 *                                   None (dfg_grpo_function_metrics logs their mean and std)
 *   "answers", "answer_len"         (built-in tasks) the answers, sent as the field "answer" */
#ifndef DFG_GRPO_DATA_H
#define DFG_GRPO_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "dfg_dataset.h"
#include "dfg_reward.h"
#include "dfg_runtime.h"
#include "dfg_nn.h"
#include "dfg_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DFG_GRPO_MAX_EOS_IDS 8

typedef struct {
    int64_t prompts, group;   /* P prompts, each in G consecutive rows */
    int64_t prompt_len;       /* Lp: the prompt columns */
    int32_t pad_id;           /* written left of a prompt (never attended) */
    bool shuffle;             /* shuffle_dataset */
    bool truncate_left;       /* a longer prompt is cut from the left; false: the stage fails naming its line */
} dfg_grpo_data_opts;

/* Draws the next P rows of ds (dfg_dataset_order with the run's seed), writes each prompt
 * left-padded into its G rows of "tokens" (columns Lp .. T-1 zeroed) and "prompt_start", advances
 * "dataset.position", and stores the rows drawn in rows_out (P) for the reward, and in
 * "dataset.rows" (P, i32) when the plan has it (a one-step-off plan resends a batch's request
 * after --resume: grpo_async.c). */
dfg_status dfg_grpo_dataset_batch(dfg_host_ctx *ctx, dfg_dataset *ds, const dfg_grpo_data_opts *o, int64_t *rows_out);

typedef struct {
    int64_t group;            /* G */
    int64_t prompt_len;       /* Lp */
    const float *weights;     /* (F) reward_weights */
    const int32_t *eos;       /* the EOS ids: a completion without one is "truncated" */
    int n_eos;
    const dfg_dataset *ds;    /* with rows (P): the rows' index and fields; NULL: a built-in task */
    const int64_t *rows;
    int64_t *all_null_steps;  /* optional: steps so far with a row no function applied to (warned for the first 3) */
    const char *const *messages; /* (N) each row's conversation from the environment program (JSON), or NULL */
    const float *env_rewards;    /* (N) the environment program's episode rewards (NaN: none), the last reward
                                  * function after the source's; or NULL */
    const char *prefix;          /* NULL or "": the rollout tensors ("tokens", "rewards", ...); "async.": the
                                  * copies of the batch a one-step-off plan trains next (grpo_async.c) */
} dfg_grpo_reward_opts;

/* Scores the rollout with src and writes "rewards" (and "reward_values" when present): each row's
 * reward is the nansum of weights[f] * reward_f (TRL's: a function's null leaves it out), 0 for a
 * row no function applied to (with a warning on stderr, as TRL warns). A source's failure fails
 * the stage with its one-line message. */
dfg_status dfg_grpo_rewards_external(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o);
/* The same in two halves (async_rollouts): submit sends the rollout's rows to src as the rows of
 * step `step` (1-based); collect, in a later stage, waits for the oldest request's values and
 * writes "rewards" and "reward_values" as above. Both name the tensors with o->prefix. A reward
 * source only (no environment's rewards). */
dfg_status dfg_grpo_rewards_submit(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o, int64_t step);
dfg_status dfg_grpo_rewards_collect(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o);

/* ---------------------------------------------------------------- graph helpers (grpo_graph.c) */
/* TRL's frac_reward_zero_std over rewards (n) in groups of G: the share of groups whose G rewards
 * are all equal (compared exactly: their advantages are 0 and they teach nothing). */
dfg_tensor *dfg_grpo_frac_zero_std(dfg_graph *g, dfg_tensor *rewards, int64_t G);
/* TRL's completions/ metrics from the completions' lengths len (n) (tokens up to and with the
 * first EOS) and which ran out of room (truncated, n): mean, min and max length, the share
 * truncated, and the same lengths over the terminated ones (all 0 when none terminated). */
void dfg_grpo_completion_metrics(dfg_graph *g, dfg_tensor *len, dfg_tensor *truncated, int64_t max_new);
/* TRL's rewards/<name>/mean and /std (nanmean, and nanstd with Bessel's correction; 0 for one
 * value) of each reward function over the rows that have a value: values (n, F), NaN for None.
 * A function with no value on any row has none (NaN, as TRL logs it): nullable metrics
 * (dfg_metric_nullable), so such a step goes on. */
void dfg_grpo_function_metrics(dfg_graph *g, dfg_tensor *values, int F, const char (*names)[68]);
/* The sampler's log-probs against the training forward's, TRL's sampling/ metrics:
 * sampling_logp_difference/mean and /max (|logp - sampling_logp| over the scored tokens), and with
 * the importance-sampling correction (vllm_importance_sampling_correction) its ratio as the loss
 * used it, importance_sampling_ratio/min, /mean and /max, before truncation or masking
 * (raw_importance_sampling_ratio/..., TRL #5243's names) and the fraction the bounds changed
 * (frac_modified_importance_sampling_ratio): over every sequence in sequence modes, over the
 * scored tokens in token modes. The state (dfg_grpo_sampling_state): `sampled` is 1 for a step
 * whose rollout has the sampler's log-probs (set by prefill's _start, and by the first training
 * pass) and 0 after the metrics (a --rollouts step without them: the metrics are none); _compare
 * adds a micro-batch's logp, sampling, mask (n, W) and ratios to the sums and extremes; _metrics
 * logs them over every rank's (0 with nothing to count, as TRL). */
typedef struct {
    dfg_tensor *sampled; /* () */
    dfg_tensor *sum;     /* (6) |difference|, scored tokens, ratio, raw ratio, modified, ratios: summed */
    dfg_tensor *max;     /* (3) |difference|, ratio, raw ratio: largest */
    dfg_tensor *min;     /* (2) ratio, raw ratio: least */
} dfg_grpo_sampling;
/* One micro-batch's correction (dfg_grpo_terms' is_ratio, is_raw, is_modified: (n, W) or (n, 1)) */
typedef struct {
    dfg_tensor *ratio, *raw, *modified;
} dfg_grpo_ratios;
dfg_status dfg_grpo_sampling_state(dfg_program *p, dfg_grpo_sampling *s);
void dfg_grpo_sampling_start(dfg_graph *g, const dfg_grpo_sampling *s);
/* r: NULL or its ratio NULL without the correction */
void dfg_grpo_sampling_compare(dfg_graph *g, const dfg_grpo_sampling *s, dfg_tensor *logp, dfg_tensor *sampling,
                               dfg_tensor *mask, const dfg_grpo_ratios *r);
/* ratios: the correction is on (its metrics are logged) */
void dfg_grpo_sampling_metrics(dfg_graph *g, const dfg_grpo_sampling *s, int world, bool ratios);
/* dfg_declare_dump of the completions/ and sampling/ metrics the program has, under their names */
void dfg_grpo_declare_metric_dumps(dfg_program *p);

/* The per-micro-batch metrics of sorted chunks (grpo_chunks.c): acc_stats (S) summed over the
 * step's chunks and passes, each chunk's values weighted by its tokens, the row mean at at[2] by its
 * rows; acc_ext (4) the passes' sums of their least (at[0]) and largest (at[1]) value. Gives (S):
 * token means, the row mean over `rows` (every pass's), and the extremes' mean over the passes, as
 * TRL logs them with one micro-batch (nanmin, nanmax and a mean over the sequences). */
dfg_tensor *dfg_grpo_chunk_stats(dfg_graph *g, dfg_tensor *acc_stats, dfg_tensor *acc_tokens, dfg_tensor *acc_ext,
                                 int64_t rows, int64_t passes, const int at[3]);
/* (2) f32: where a pass's least and largest values start (1e30 and -1e30) */
dfg_tensor *dfg_grpo_extremes_start(dfg_graph *g);

/* Length-sorted chunks (grpo_chunks.c, length_chunks): the batch's `groups` groups of G rows in
 * `chunks` chunks of groups / chunks groups, processed narrowest first. _state makes the order
 * (chunks.order: the groups in processing order) and each width's chunk count (chunks.runs[w],
 * for dfg_stage_runs); _plan computes them from each row's width (N) (the last column its mask
 * counts), sorting the groups by width (regroup; else each chunk keeps its groups and the chunks
 * are sorted); _rows gathers chunk `chunk`'s rows (i32 scalar: its place in the order) of x (N,
 * ...), columns col0 .. col0 + cols - 1 of axis 1 when cols > 0; _write puts src (rows of a
 * chunk, ...) back into dst (N, ...) at its groups' rows. */
#define DFG_GRPO_MAX_CHUNK_GROUPS 256
#define DFG_GRPO_MAX_WIDTHS 8 /* length_buckets */
typedef struct {
    int64_t groups, G, chunks;
    bool regroup;
    int n_widths;
    const int64_t *widths;  /* narrowest first */
    dfg_tensor *order;      /* (groups) i32 */
    dfg_tensor *runs[DFG_GRPO_MAX_WIDTHS]; /* () per width */
    dfg_tensor *before, *index; /* constants of the sort */
} dfg_grpo_chunks;
dfg_status dfg_grpo_chunk_state(dfg_program *p, dfg_grpo_chunks *ck);
/* The constants a stable sort of n rows by a key needs: "<prefix>.before" (n, n), 1 where j < i
 * (equal keys keep their order), and "<prefix>.index" (n), 0 .. n-1. */
dfg_status dfg_grpo_order_consts(dfg_program *p, const char *prefix, int64_t n, dfg_tensor **before, dfg_tensor **index);
void dfg_grpo_chunk_plan(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *row_width);
dfg_tensor *dfg_grpo_chunk_rows(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *x, dfg_tensor *chunk, int64_t col0,
                                int64_t cols);
void dfg_grpo_chunk_write(dfg_graph *g, const dfg_grpo_chunks *ck, dfg_tensor *dst, dfg_tensor *src, dfg_tensor *chunk);
/* The stable ascending sort of key (n) f32, on the device: rank (n) f32, each entry's place
 * (equal keys in index order), and at (n, n) f32, 1 where entry i is at place r ([r][i]).
 * before: (n, n) 1 where j < i; index: (n) 0 .. n-1 (constants). */
void dfg_grpo_stable_sort(dfg_graph *g, dfg_tensor *key, dfg_tensor *before, dfg_tensor *index, dfg_tensor **rank,
                          dfg_tensor **at);

/* The decode loop's tail on the live rows (grpo_tail.c, decode_tail). _state makes, for each
 * width w of the ladder (dfg_grpo_tail_widths), the w-row copies of the rollout (tail.* for the
 * narrowest, decode_tail's n; tail<w>.* for the wider; caches "tail.kv.<l>.k/v" like kv's) and
 * gen.stop; _switch, in the batch decode graph after its step, sets tail.go (the count of live
 * rows once at most the widest width are live, at least one, and a column is left; else 0) and
 * gen.stop = max(finished, go != 0), the batch loop's end flag; _gather (stage decode.compact[w],
 * when go is in (the next narrower width, w]) takes the live rows first, then finished ones up
 * to w, into that width with their caches; _scatter (decode.merge[w], after its loop) writes the
 * rows back. A width's loop draws with its rows' batch indices and ends on its finished flag, or
 * (with tools, a wider width) once the next narrower width holds the live rows: its rows go back
 * and that width gathers them (the round goes on in the narrowest width that holds them). With
 * tools (a multi-turn rollout) a live row is one neither done nor waiting for its tool, each row
 * has its column (pos), and _scatter writes back all a width's rows hold (done, waiting, pos,
 * token and the caches' rows too): the next round goes on from them. */
typedef struct {
    dfg_tensor *tokens, *mask, *logp; /* (N, T): logp NULL without sampling log-probs */
    dfg_tensor *done;                 /* (N) f32 */
    dfg_tensor *token;                /* (N, 1) i32 */
    dfg_tensor *waiting, *pos;        /* with tools: (N) f32, (N) i32; else NULL */
} dfg_grpo_tail_from;
#define DFG_GRPO_MAX_TAILS 6
typedef struct { /* one width of the ladder */
    int64_t n;                 /* its rows */
    int64_t next;              /* the next narrower width (0: none): the loop ends when it holds the live rows */
    dfg_model_kv kv;           /* (n, Tkv, Ckv) caches, start (n) when the prompts are left-padded */
    dfg_tensor *rows;          /* (n) i32 each of its rows' batch row */
    dfg_tensor *back;          /* (N) i32 each batch row's source in concat(its rows, batch rows) */
    dfg_tensor *tokens, *mask, *logp, *done, *token; /* its rollout, as dfg_grpo_tail_from's at n rows */
    dfg_tensor *waiting, *pos; /* with tools: (n) f32, (n) i32; else NULL */
    dfg_tensor *finished, *stop; /* () f32: every row idle; the loop's end flag (finished alone for the narrowest) */
} dfg_grpo_tail_width;
typedef struct {
    int64_t N, T;
    int n_widths;                              /* widest first; the last is decode_tail's n */
    dfg_grpo_tail_width w[DFG_GRPO_MAX_TAILS];
    dfg_tensor *go;       /* () f32 the live rows once a width holds them, else 0 */
    dfg_tensor *entered;  /* () f32 the width gathered last this round (its merge runs), 0: none */
    dfg_tensor *stop;     /* () f32 gen.stop: the batch loop's end flag */
    dfg_tensor *before, *index; /* constants: (N, N) 1 where j < i; (N) 0 .. N-1 */
} dfg_grpo_tail;
/* The ladder's widths, widest first: with tools (ladder) N/2, N/4, ... while wider than n, then
 * n; else n alone. Returns their count (at most DFG_GRPO_MAX_TAILS). */
int dfg_grpo_tail_widths(int64_t N, int64_t n, bool ladder, int64_t *widths);
/* Stage names of width i: "decode.compact", "decode.tail", "decode.merge" for the narrowest,
 * with "[w]" after them for a wider one (the length buckets' names). */
void dfg_grpo_tail_stage(char *buf, size_t len, const char *base, const dfg_grpo_tail *t, int i);
/* The ladder's stages in their order (compact, tail, merge of each width, widest first) into
 * names; returns their count (3 a width). */
int dfg_grpo_tail_stages(int64_t N, int64_t n, bool ladder, char (*names)[32]);
dfg_status dfg_grpo_tail_state(dfg_program *p, const dfg_model *m, const dfg_model_kv *kv, int64_t N, int64_t n,
                               int64_t T, bool logp, bool tools, dfg_grpo_tail *t);
/* waiting: with tools (N) f32, else NULL (pos is then the scalar column) */
dfg_tensor *dfg_grpo_tail_switch(dfg_graph *g, const dfg_grpo_tail *t, dfg_tensor *done, dfg_tensor *waiting,
                                 dfg_tensor *pos, dfg_tensor *finished);
/* In width i's loop graph after its step (tools): go from its rows, and its end flag. */
void dfg_grpo_tail_width_switch(dfg_graph *g, const dfg_grpo_tail *t, int i);
/* With tools, the stage "decode.live" before each round's decode: tail.go from the rows' state
 * as the round starts, so that a round with few live rows runs a width alone (no batch run). */
dfg_status dfg_grpo_tail_live(dfg_program *p, const dfg_grpo_tail *t, dfg_tensor *done, dfg_tensor *waiting);
void dfg_grpo_tail_gather(dfg_graph *g, const dfg_grpo_tail *t, int i, const dfg_model_kv *kv, const dfg_grpo_tail_from *from);
void dfg_grpo_tail_scatter(dfg_graph *g, const dfg_grpo_tail *t, int i, const dfg_model_kv *kv, const dfg_grpo_tail_from *to);

/* Data parallel over `world` ranks, each holding `rows` rows of the whole batch (whole groups):
 * this rank's first row in the batch (i32 scalar; NULL for world 1), x (rows, ...) of every rank
 * stacked in rank order (x itself for world 1), and x reduced over the ranks (x itself for world
 * 1 or a NULL x). */
dfg_tensor *dfg_grpo_rank_row0(dfg_graph *g, int world, int64_t rows);
dfg_tensor *dfg_grpo_world_rows(dfg_graph *g, dfg_tensor *x, int world);
dfg_tensor *dfg_grpo_world_reduce(dfg_graph *g, dfg_tensor *x, dfg_coll_op op, int world);

#ifdef __cplusplus
}
#endif
#endif
