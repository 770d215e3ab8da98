/* grpo_eval.c - the GRPO pipeline's evaluation on eval_dataset (dfg_grpo_eval.h): its settings and
 * their checks, the state dfg run drives it by, and the data stage of an evaluation batch. The
 * metrics are computed by dfg run from the rollout it reads back (tools/cli_run_eval.c). */
#include "dfg_grpo_eval.h"

#include <stdio.h>
#include <string.h>

#include "dfg_grpo_tools.h"
#include "task_tensor.h"

/* The eval file's prompts against the plan: ids in the vocabulary, lengths within
 * max_prompt_length unless truncate_prompts=left cuts them (said in a note, as for dataset). */
static dfg_status check_eval_prompts(dfg_program *p, const dfg_grpo_config *c, const char *path) {
    int64_t rows = dfg_dataset_rows(c->eval_ds), n_long = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = 0;
        const int32_t *ids = dfg_dataset_prompt(c->eval_ds, r, &len);
        for (int64_t i = 0; i < len; i++)
            if (ids[i] >= c->model.vocab_size)
                return dfg_program_fail(p, DFG_ERR_ARG, "%s:%lld: prompt_ids[%lld] is %d, outside the model's vocabulary "
                                        "(0 .. %lld)", path, (long long)dfg_dataset_line(c->eval_ds, r), (long long)i,
                                        ids[i], (long long)(c->model.vocab_size - 1));
        if (len > c->Lp && !c->truncate_left)
            return dfg_program_fail(p, DFG_ERR_ARG, "truncate_prompts=error: %s:%lld: the prompt has %lld tokens, more "
                                    "than max_prompt_length %lld", path, (long long)dfg_dataset_line(c->eval_ds, r),
                                    (long long)len, (long long)c->Lp);
        n_long += len > c->Lp;
    }
    if (n_long)
        dfg_program_note(p, "%lld of the %lld prompts of eval_dataset %s are longer than max_prompt_length %lld: "
                         "evaluation cuts them from the left (truncate_prompts=left)", (long long)n_long, (long long)rows,
                         path, (long long)c->Lp);
    return DFG_OK;
}

/* What the evaluation needs of the plan, and TRL's own check of the eval batch. */
static dfg_status check_eval(dfg_program *p, const dfg_grpo_config *c, int64_t batch, int64_t g_eval, bool steps) {
    if (!c->ds)
        return dfg_program_fail(p, DFG_ERR_ARG, "eval_dataset needs the training prompts from a dataset too (dataset=FILE."
                                "jsonl): a built-in task's prompts are not a file's");
    if (c->async_rollouts) /* its stages roll out the next step's batch: an evaluation would take its place */
        return dfg_program_fail(p, DFG_ERR_ARG, "eval_dataset: dfg does not evaluate plans with async_rollouts=1 yet");
    if (c->W > 1)
        return dfg_program_fail(p, DFG_ERR_ARG, "eval_dataset: dfg does not evaluate data-parallel plans (world_size "
                                "%d) yet", c->W);
    if (g_eval > c->G)
        return dfg_program_fail(p, DFG_ERR_ARG, "num_generations_eval %lld is more than num_generations %lld: an "
                                "evaluation batch generates in the plan's groups of num_generations rows",
                                (long long)g_eval, (long long)c->G);
    if (steps && batch % g_eval) /* TRL's GRPOConfig refuses it when it evaluates */
        return dfg_program_fail(p, DFG_ERR_ARG, "per_device_eval_batch_size %lld must be a multiple of "
                                "num_generations_eval %lld (TRL's check: whole groups in an evaluation batch)",
                                (long long)batch, (long long)g_eval);
    return DFG_OK;
}

dfg_status dfg_grpo_read_eval(dfg_program *p, dfg_grpo_config *c) {
    char err[1024];
    c->normalize_then_sum = dfg_setting_enum(p, "multi_objective_aggregation", "sum_then_normalize") == 1;
    const char *path = dfg_setting_str(p, "eval_dataset", "");
    bool steps = dfg_setting_enum(p, "eval_strategy", "no") == 1;
    dfg_setting_int(p, "eval_steps", c->logging_steps); /* transformers' default; dfg run reads it */
    bool on_start = dfg_setting_bool(p, "eval_on_start", false);
    int64_t batch = dfg_setting_int(p, "per_device_eval_batch_size", 8);
    int64_t g_eval = dfg_setting_int(p, "num_generations_eval", c->G);
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (!*path) {
        if (steps || on_start) /* transformers' Trainer refuses evaluation without an eval_dataset */
            return dfg_program_fail(p, DFG_ERR_ARG, "%s evaluates on eval_dataset, which is not set: --set "
                                    "eval_dataset=FILE.jsonl", steps ? "eval_strategy=steps" : "eval_on_start");
        return DFG_OK;
    }
    dfg_status st = check_eval(p, c, batch, g_eval, steps || on_start);
    if (st) return st;
    if (dfg_dataset_open(path, 0, &c->eval_ds, err, sizeof(err)))
        return dfg_program_fail(p, DFG_ERR_ARG, "eval_dataset: %s", err);
    if (!steps && !on_start)
        dfg_program_note(p, "eval_dataset is set but eval_strategy=no and eval_on_start=false: dfg run evaluates "
                         "only when asked (--eval-only)");
    return check_eval_prompts(p, c, path);
}

dfg_status dfg_grpo_eval_state(dfg_program *p) {
    dfg_state(p, "eval.batch", DFG_I32, DFG_SHAPE(2), DFG_ROLE_NONE, dfg_init_zeros());
    /* with tools, each row's calls: TRL counts them over its eval batch, and dfg's batch holds
     * rows that do not count (num_generations_eval, the filler past the file's end), so the
     * step's total ("tools.calls") is not enough */
    const dfg_tensor *tok = dfg_find(p, "tokens");
    if (dfg_find(p, "tools.calls") && tok)
        dfg_state(p, "eval.tool_calls", DFG_F32, DFG_SHAPE(dfg_tensor_shape(tok).d[0], 2), DFG_ROLE_NONE, dfg_init_zeros());
    return dfg_program_status(p);
}

void dfg_grpo_eval_count_calls(dfg_host_ctx *ctx, int64_t row, int calls, int failures) {
    dfg_buffer b;
    if (!dfg_grpo_eval_on(ctx) || dfg_host_buffer(ctx, "eval.tool_calls", &b) || b.dtype != DFG_F32 || !b.data ||
        b.shape.rank != 2 || row < 0 || row >= b.shape.d[0])
        return;
    ((float *)b.data)[row * 2] += (float)calls, ((float *)b.data)[row * 2 + 1] += (float)failures;
}

/* New episodes for the eval batch's rows, reset with the eval rows' fields (TRL's reset(**row)):
 * the tools' reset reads the fields of c->ds at c->ds_rows, here the eval file's. */
static dfg_status reset_episodes(dfg_host_ctx *ctx, dfg_grpo_config *c) {
    dfg_buffer calls;
    if (!dfg_host_buffer(ctx, "eval.tool_calls", &calls) && calls.data)
        memset(calls.data, 0, sizeof(float) * (size_t)dfg_shape_numel(calls.shape));
    dfg_dataset *train = c->ds;
    c->ds = c->eval_ds;
    dfg_status st = dfg_grpo_tools_reset(ctx, c);
    c->ds = train;
    return st;
}

bool dfg_grpo_eval_on(dfg_host_ctx *ctx) {
    dfg_buffer b;
    return !dfg_host_buffer(ctx, "eval.batch", &b) && b.dtype == DFG_I32 && b.data && ((const int32_t *)b.data)[0] != 0;
}

dfg_status dfg_grpo_eval_data(dfg_host_ctx *ctx, dfg_grpo_config *c) {
    int64_t N = c->N, G = c->G, Lp = c->Lp, rows = dfg_dataset_rows(c->eval_ds);
    dfg_buffer tok, start, at;
    dfg_status st;
    if ((st = dfg_task_tensor(ctx, "tokens", DFG_I32, 2, (int64_t[]){N, -1}, "NT", false, &tok)) ||
        (st = dfg_task_tensor(ctx, "prompt_start", DFG_I32, 1, (int64_t[]){N}, "N", false, &start)) ||
        (st = dfg_task_tensor(ctx, "eval.batch", DFG_I32, 1, (int64_t[]){2}, "2", false, &at)))
        return st;
    int64_t T = tok.shape.d[1], first = ((const int32_t *)at.data)[1];
    if (first < 0 || first >= rows)
        return dfg_host_fail(ctx, "eval.batch: row %lld is outside eval_dataset's %lld rows", (long long)first, (long long)rows);
    for (int64_t p = 0; p < c->P; p++) {
        int64_t row = first + p < rows ? first + p : rows - 1, len = 0; /* past the end: not counted */
        const int32_t *ids = dfg_dataset_prompt(c->eval_ds, row, &len);
        if (len > Lp) ids += len - Lp, len = Lp; /* the compile refused it with truncate_prompts=error */
        c->ds_rows[p] = row;
        for (int64_t r = p * G; r < (p + 1) * G; r++) {
            int32_t *t = (int32_t *)tok.data + r * T;
            for (int64_t i = 0; i < T; i++) t[i] = c->pad_id;
            memcpy(t + Lp - len, ids, sizeof(int32_t) * (size_t)len);
            ((int32_t *)start.data)[r] = (int32_t)(Lp - len);
        }
    }
    return c->tools ? reset_episodes(ctx, c) : DFG_OK;
}
