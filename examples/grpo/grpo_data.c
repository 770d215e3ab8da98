/* grpo_data.c - GRPO host stages for prompts from a dataset and rewards from a reward program or
 * plugin (dfg_grpo_data.h, docs/rewards.md). Plain host code over the tensors the pipeline made. */
#include "dfg_grpo_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_tasks.h"
#include "task_tensor.h"

/* ---------------------------------------------------------------- prompts */
/* "dataset.hash" (2 x 32 bits of dfg_dataset_hash) holds the content hash of the file the run
 * drew from, so a resumed run notices an edited file: its rows' order and the position no longer
 * mean the same prompts. A warning, not a stop: appending rows or fixing a field is a user's
 * right; the run goes on in the new file's order. */
static void note_changed_dataset(dfg_host_ctx *ctx, const dfg_dataset *ds, int32_t *stored) {
    uint64_t h = dfg_dataset_hash(ds), was = (uint64_t)(uint32_t)stored[0] | (uint64_t)(uint32_t)stored[1] << 32;
    if (was && was != h)
        fprintf(stderr, "dfg run: warning: step %lld: the dataset is not the one the checkpoint's run drew from (its "
                        "content differs; %lld rows now): the run goes on in this file's order from the saved position\n",
                (long long)dfg_host_step(ctx) + 1, (long long)dfg_dataset_rows(ds));
    stored[0] = (int32_t)(uint32_t)h;
    stored[1] = (int32_t)(uint32_t)(h >> 32);
}

dfg_status dfg_grpo_dataset_batch(dfg_host_ctx *ctx, dfg_dataset *ds, const dfg_grpo_data_opts *o, int64_t *rows_out) {
    if (!ctx) return DFG_ERR_ARG;
    if (!ds || !o || !rows_out || o->prompts < 1 || o->group < 1 || o->prompt_len < 1)
        return dfg_host_fail(ctx, "dataset_batch: no dataset or bad options");
    int64_t P = o->prompts, G = o->group, N = P * G, Lp = o->prompt_len, rows = dfg_dataset_rows(ds);
    dfg_buffer tok, start, pos, trunc, hash, drawn;
    dfg_status st;
    if ((st = dfg_task_tensor(ctx, "tokens", DFG_I32, 2, (int64_t[]){N, -1}, "NT", false, &tok)) ||
        (st = dfg_task_tensor(ctx, "prompt_start", DFG_I32, 1, (int64_t[]){N}, "N", false, &start)) ||
        (st = dfg_task_tensor(ctx, "dataset.position", DFG_I32, 1, (int64_t[]){2}, "2", false, &pos)) ||
        (st = dfg_task_tensor(ctx, "prompts_truncated", DFG_F32, 0, NULL, "", true, &trunc)) ||
        (st = dfg_task_tensor(ctx, "dataset.hash", DFG_I32, 1, (int64_t[]){2}, "2", true, &hash)) ||
        (st = dfg_task_tensor(ctx, "dataset.rows", DFG_I32, 1, (int64_t[]){P}, "P", true, &drawn)))
        return st;
    if (hash.data) note_changed_dataset(ctx, ds, hash.data);
    int64_t T = tok.shape.d[1];
    if (T <= Lp) return dfg_host_fail(ctx, "tensor 'tokens' has %lld columns, not more than the %lld prompt columns", (long long)T, (long long)Lp);
    int32_t *at = pos.data;
    int64_t epoch = at[0], k = at[1];
    if (epoch < 0 || k < 0 || k > rows)
        return dfg_host_fail(ctx, "dataset.position (%lld, %lld) is outside the dataset's %lld rows (a checkpoint of "
                             "another dataset?)", (long long)epoch, (long long)k, (long long)rows);
    int cut = 0;
    /* a data-parallel rank's share of the whole batch: the rows after the lower ranks' */
    int64_t rank = dfg_host_rank(ctx), world = dfg_host_world_size(ctx);
    for (int64_t skip = rank * P; skip > 0; skip--, k++)
        if (k == rows) epoch++, k = 0;
    for (int64_t p = 0; p < P; p++) {
        if (k == rows) epoch++, k = 0; /* the epoch ran out: the next one, in its own order */
        int64_t row = dfg_dataset_order(ds, dfg_host_seed(ctx), epoch, k++, o->shuffle), len = 0;
        const int32_t *ids = dfg_dataset_prompt(ds, row, &len);
        if (!ids) return dfg_host_fail(ctx, "dataset: no row %lld (epoch %lld)", (long long)row, (long long)epoch);
        if (len > Lp && !o->truncate_left)
            return dfg_host_fail(ctx, "dataset line %lld: the prompt has %lld tokens, more than max_prompt_length %lld "
                                 "(truncate_prompts=error)", (long long)dfg_dataset_line(ds, row), (long long)len, (long long)Lp);
        if (len > Lp) ids += len - Lp, len = Lp, cut++; /* keep the end: what the completion follows */
        rows_out[p] = row;
        if (drawn.data) ((int32_t *)drawn.data)[p] = (int32_t)row;
        for (int64_t r = p * G; r < (p + 1) * G; r++) {
            int32_t *t = (int32_t *)tok.data + r * T;
            for (int64_t i = 0; i < Lp - len; i++) t[i] = o->pad_id;
            memcpy(t + Lp - len, ids, sizeof(int32_t) * (size_t)len);
            for (int64_t i = Lp; i < T; i++) t[i] = o->pad_id; /* as a finished row's tokens */
            ((int32_t *)start.data)[r] = (int32_t)(Lp - len);
        }
    }
    for (int64_t skip = (world - rank - 1) * P; skip > 0; skip--, k++) /* past the higher ranks' rows */
        if (k == rows) epoch++, k = 0;
    if (k == rows) epoch++, k = 0;
    if (epoch > INT32_MAX) return dfg_host_fail(ctx, "dataset: more than 2^31 epochs");
    at[0] = (int32_t)epoch, at[1] = (int32_t)k;
    if (trunc.data) *(float *)trunc.data = (float)cut;
    return DFG_OK;
}

/* ---------------------------------------------------------------- rewards */
typedef struct {
    dfg_reward_row *rows;  /* (N) */
    int32_t *completion;   /* (N, T) each row's completion ids, compacted */
    char *fields;          /* built-in tasks: {"answer": "..."} per row, 128 bytes each */
    float *values;         /* (N, F) */
} reward_scratch;

static void scratch_free(reward_scratch *s) {
    free(s->rows);
    free(s->completion);
    free(s->fields);
    free(s->values);
}

/* name with the opts' prefix: the batch's copy a reward reads or writes ("async.tokens") */
static const char *named(const dfg_grpo_reward_opts *o, const char *name, char *buf, size_t cap) {
    if (!o->prefix || !*o->prefix) return name;
    snprintf(buf, cap, "%s%s", o->prefix, name);
    return buf;
}

static bool is_eos(int32_t id, const dfg_grpo_reward_opts *o) {
    for (int i = 0; i < o->n_eos; i++)
        if (id == o->eos[i]) return true;
    return false;
}

/* The rows as a reward sees them, from the rollout's tensors. */
static dfg_status make_rows(dfg_host_ctx *ctx, const dfg_grpo_reward_opts *o, reward_scratch *s, int64_t N, int64_t T) {
    dfg_buffer tok, mask, start, ans, alen;
    dfg_status st;
    char b[5][64];
    if ((st = dfg_task_tensor(ctx, named(o, "tokens", b[0], 64), DFG_I32, 2, (int64_t[]){N, T}, "NT", false, &tok)) ||
        (st = dfg_task_tensor(ctx, named(o, "completion_mask", b[1], 64), DFG_F32, 2, (int64_t[]){N, T}, "NT", false, &mask)) ||
        (st = dfg_task_tensor(ctx, named(o, "prompt_start", b[2], 64), DFG_I32, 1, (int64_t[]){N}, "N", true, &start)) ||
        (st = dfg_task_tensor(ctx, named(o, "answers", b[3], 64), DFG_I32, 2, (int64_t[]){N, -1}, "NA", true, &ans)) ||
        (st = dfg_task_tensor(ctx, named(o, "answer_len", b[4], 64), DFG_I32, 1, (int64_t[]){N}, "N", true, &alen)))
        return st;
    int64_t Lp = o->prompt_len;
    for (int64_t r = 0; r < N; r++) {
        const int32_t *row = (const int32_t *)tok.data + r * T;
        const float *m = (const float *)mask.data + r * T;
        int32_t *c = s->completion + r * T;
        int64_t n = 0, s0 = start.data ? ((const int32_t *)start.data)[r] : 0;
        if (s0 < 0 || s0 >= Lp) return dfg_host_fail(ctx, "prompt_start[%lld] = %lld is outside 0 .. %lld", (long long)r, (long long)s0, (long long)(Lp - 1));
        for (int64_t i = Lp; i < T; i++)
            if (m[i] != 0.0f) c[n++] = row[i];
        bool eos = n > 0 && is_eos(c[n - 1], o); /* a multi-turn completion has its turns' EOS before its last */
        dfg_reward_row *w = &s->rows[r];
        *w = (dfg_reward_row){.prompt_ids = row + s0, .n_prompt = Lp - s0, .completion_ids = c, .n_completion = n,
                              .truncated = !eos, .index = -1, .fields = "{}", .messages = o->messages ? o->messages[r] : NULL};
        if (o->ds && o->rows) {
            w->index = o->rows[r / o->group];
            w->fields = dfg_dataset_fields(o->ds, w->index);
        } else if (ans.data && alen.data) { /* a built-in task: its answer, as text */
            int64_t A = ans.shape.d[1], L = ((const int32_t *)alen.data)[r];
            char text[DFG_TASK_MAX_ANSWER_LEN + 1];
            dfg_vocab_decode((const int32_t *)ans.data + r * A, (int)(L < 0 ? 0 : L > A ? A : L), text, sizeof(text));
            w->fields = s->fields + r * 128;
            snprintf(s->fields + r * 128, 128, "{\"answer\":\"%s\"}", text);
        }
    }
    return DFG_OK;
}

/* TRL warns when every reward function returned None for a row: its reward is then 0, which may
 * not be what the functions' author meant. Once per such step, for the first 3 of a run. */
static void warn_all_null(dfg_host_ctx *ctx, const dfg_grpo_reward_opts *o, int64_t none, int64_t first, int64_t N) {
    int64_t seen = o->all_null_steps ? (*o->all_null_steps)++ : 0;
    if (seen >= 3) return;
    char line[64] = "";
    if (o->ds && o->rows)
        snprintf(line, sizeof(line), ", dataset line %lld", (long long)dfg_dataset_line(o->ds, o->rows[first / o->group]));
    fprintf(stderr, "dfg run: warning: step %lld: no reward function applied (all answered null) to %lld of %lld rows "
                    "(the first: row %lld%s): their reward is 0, as TRL's nansum gives%s\n",
            (long long)dfg_host_step(ctx) + 1, (long long)none, (long long)N, (long long)first, line,
            seen == 2 ? " (further such warnings are not shown)" : "");
}

/* The source's message without its leading "step N, " or "step N: " (the stage's message names the step). */
static const char *without_step(const char *m) {
    const char *p = m;
    if (strncmp(p, "step ", 5)) return m;
    for (p += 5; *p >= '0' && *p <= '9'; p++) {}
    return (p[0] == ',' || p[0] == ':') && p[1] == ' ' ? p + 2 : m;
}

static dfg_status check_opts(dfg_host_ctx *ctx, const dfg_reward_source *src, const dfg_grpo_reward_opts *o) {
    if (!src && !(o && o->env_rewards))
        return dfg_host_fail(ctx, "this plan scores with an external reward (reward=external): run it with --reward-cmd "
                             "CMD or --reward-lib LIB");
    if (!o || o->group < 1 || !o->weights || !o->eos || o->n_eos < 1) return dfg_host_fail(ctx, "rewards_external: bad options");
    return DFG_OK;
}

/* The rows as the source sees them, in s (freed by the caller); *N, *T the rollout's shape. */
static dfg_status prepare_rows(dfg_host_ctx *ctx, const dfg_grpo_reward_opts *o, int F, reward_scratch *s, int64_t *N,
                               int64_t *T) {
    dfg_buffer tok;
    char b[64];
    dfg_status st = dfg_task_tensor(ctx, named(o, "tokens", b, sizeof(b)), DFG_I32, 2, (int64_t[]){-1, -1}, "NT", false, &tok);
    if (st) return st;
    *N = tok.shape.d[0], *T = tok.shape.d[1];
    *s = (reward_scratch){calloc((size_t)*N, sizeof(dfg_reward_row)), malloc(sizeof(int32_t) * (size_t)(*N * *T)),
                          malloc((size_t)*N * 128), malloc(sizeof(float) * (size_t)(*N * F))};
    if (!s->rows || !s->completion || !s->fields || !s->values) return dfg_host_fail(ctx, "rewards: out of memory");
    return make_rows(ctx, o, s, *N, *T);
}

/* values (N, F_src) the source's: with the environment's column after them, each row's nansum of
 * weights[f] * reward_f into "rewards", and every value into "reward_values" when present. */
static dfg_status apply_values(dfg_host_ctx *ctx, const dfg_grpo_reward_opts *o, const float *src_values, int F_src,
                               int64_t N) {
    int F = F_src + (o->env_rewards ? 1 : 0);
    dfg_buffer rew, values;
    dfg_status st;
    char b[2][64];
    if ((st = dfg_task_tensor(ctx, named(o, "rewards", b[0], 64), DFG_F32, 1, (int64_t[]){N}, "N", false, &rew)) ||
        (st = dfg_task_tensor(ctx, named(o, "reward_values", b[1], 64), DFG_F32, 2, (int64_t[]){N, F}, "NF", true, &values)))
        return st;
    float *all = malloc(sizeof(float) * (size_t)(N * F + 1));
    if (!all) return dfg_host_fail(ctx, "rewards: out of memory");
    for (int64_t r = 0; r < N; r++) { /* the source's columns, then the environment's */
        for (int f = 0; f < F_src; f++) all[r * F + f] = src_values[r * F_src + f];
        if (o->env_rewards) all[r * F + F_src] = o->env_rewards[r];
    }
    int64_t none = 0, first = -1;
    for (int64_t r = 0; r < N; r++) { /* TRL: (rewards_per_func * weights).nansum(dim=1) */
        float sum = 0.0f;
        int applied = 0;
        for (int f = 0; f < F; f++)
            if (!isnan(all[r * F + f])) sum += o->weights[f] * all[r * F + f], applied++;
        ((float *)rew.data)[r] = sum;
        if (!applied && none++ == 0) first = r;
    }
    if (none) warn_all_null(ctx, o, none, first, N);
    if (values.data) memcpy(values.data, all, sizeof(float) * (size_t)(N * F));
    free(all);
    return DFG_OK;
}

dfg_status dfg_grpo_rewards_external(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o) {
    if (!ctx) return DFG_ERR_ARG;
    dfg_status st = check_opts(ctx, src, o);
    if (st) return st;
    int F_src = src ? dfg_reward_source_n_funcs(src) : 0;
    int64_t N = 0, T = 0;
    reward_scratch s = {0};
    char err[1024];
    if (!(st = prepare_rows(ctx, o, F_src, &s, &N, &T)) && src &&
        (st = dfg_reward_source_score(src, s.rows, N, dfg_host_step(ctx) + 1, s.values, err, sizeof(err))))
        dfg_host_fail(ctx, "%s", without_step(err));
    if (!st) st = apply_values(ctx, o, s.values, F_src, N);
    scratch_free(&s);
    return st;
}

dfg_status dfg_grpo_rewards_submit(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o, int64_t step) {
    if (!ctx) return DFG_ERR_ARG;
    dfg_status st = check_opts(ctx, src, o);
    if (st) return st;
    if (!src || o->env_rewards) return dfg_host_fail(ctx, "rewards_submit: needs a reward source and no environment");
    int64_t N = 0, T = 0;
    reward_scratch s = {0};
    char err[1024];
    if (!(st = prepare_rows(ctx, o, dfg_reward_source_n_funcs(src), &s, &N, &T)) &&
        (st = dfg_reward_source_submit(src, s.rows, N, step, err, sizeof(err))))
        dfg_host_fail(ctx, "%s", without_step(err));
    scratch_free(&s);
    return st;
}

dfg_status dfg_grpo_rewards_collect(dfg_host_ctx *ctx, dfg_reward_source *src, const dfg_grpo_reward_opts *o) {
    if (!ctx) return DFG_ERR_ARG;
    dfg_status st = check_opts(ctx, src, o);
    if (st) return st;
    dfg_buffer rew;
    char b[64];
    if ((st = dfg_task_tensor(ctx, named(o, "rewards", b, sizeof(b)), DFG_F32, 1, (int64_t[]){-1}, "N", false, &rew))) return st;
    int64_t N = rew.shape.d[0];
    int F = dfg_reward_source_n_funcs(src);
    float *values = malloc(sizeof(float) * (size_t)(N * F + 1));
    char err[1024];
    if (!values) return dfg_host_fail(ctx, "rewards: out of memory");
    if ((st = dfg_reward_source_collect(src, N, values, err, sizeof(err)))) dfg_host_fail(ctx, "%s", without_step(err));
    if (!st) st = apply_values(ctx, o, values, F, N);
    free(values);
    return st;
}
