/* cli_run_eval.c - `dfg run`'s evaluation on the plan's eval_dataset (cli_run_eval.h), as TRL's eval
 * loop: every eval row is rolled out by the plan's own stages from data to reward (the others are
 * switched off: no reference, no loss, no update), in batches of prompts_per_step rows of the file
 * (the last one filled up with rows that are not counted). Its metrics are computed here from the
 * rollout read back, per TRL eval batch of per_device_eval_batch_size completions (the
 * num_generations_eval first of each prompt's group), and averaged over the batches, NaN left out,
 * as TRL's log() averages what each batch appended. The run's state is left as it was: the small
 * states a step advances (the RNG, the dataset's position, the loop counters) are put back, and
 * every other tensor the rollout wrote is rewritten by the next training step before it is read,
 * so a run trains bit for bit the same with or without evaluations. The evaluation samples from
 * its own stream (the same one at every evaluation), not the training's. A plan with tools rolls
 * out whole episodes (the loop of extend, decode and tools, each row's environment reset with its
 * eval row's fields): the lengths count the policy's tokens (tool_mask 1), and each row's calls
 * ("eval.tool_calls") give TRL's tools/call_frequency and tools/failure_frequency. */
#include "cli_run_eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../graph/ir.h"
#include "../runtime/host/dfg_dataset.h"

#define CMD "run"
#define EVAL_MAX_FUNCS 16
#define EVAL_MAX_EOS 8
#define SMALL_STATE 16 /* elements: a state this small is a counter, a position or a flag (kept, put back) */

/* the metrics of one TRL eval batch, in this order, then rewards/<name>/mean and /std per function */
static const char *const fixed_metrics[] = {"reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
                                            "completions/min_length", "completions/max_length", "completions/clipped_ratio",
                                            "completions/mean_terminated_length", "completions/min_terminated_length",
                                            "completions/max_terminated_length"};
enum { N_FIXED = sizeof(fixed_metrics) / sizeof(fixed_metrics[0]) };
/* with tools, after the fixed ones (as TRL appends them after the completions' lengths) */
static const char *const tool_metrics[] = {"tools/call_frequency", "tools/failure_frequency"};
enum { N_TOOLS = sizeof(tool_metrics) / sizeof(tool_metrics[0]), N_METRICS = N_FIXED + N_TOOLS + 2 * EVAL_MAX_FUNCS };

struct cli_eval {
    dfg_runtime *rt;
    const char *plan;
    bool steps, on_start, quiet, normalize_then_sum, scale_batch, scale_group, tools;
    uint64_t seed;
    int64_t every, sft_steps, P, G, Ge, N, T, Lp, rows, batch_prompts;
    int F, n_eos;
    char names[EVAL_MAX_FUNCS][68];
    double weights[EVAL_MAX_FUNCS];
    int32_t eos[EVAL_MAX_EOS];
    const dfg_tensor **small; /* the states put back after an evaluation */
    unsigned char *saved;
    int n_small;
    bool *rollout; /* [stage]: a rollout stage, which an evaluation runs */
    int32_t *tok;
    float *mask, *tmask, *rew, *vals, *row_calls;
    double *reward, *values, *len; /* per eval row (rows x Ge): reward NaN when unscorable, values NaN for None */
    double *calls, *fails;         /* per eval row, with tools */
    unsigned char *trunc;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- TRL's statistics (float64) */
static double nanmean(const double *x, int64_t n, int64_t stride) {
    double s = 0;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i * stride])) s += x[i * stride], c++;
    return c ? s / (double)c : NAN;
}

/* trl.trainer.utils.nanstd: Bessel-corrected over the non-NaN values; NaN for fewer than 2 */
static double nanstd(const double *x, int64_t n, int64_t stride) {
    double m = nanmean(x, n, stride), s = 0;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i * stride])) s += (x[i * stride] - m) * (x[i * stride] - m), c++;
    return c > 1 ? sqrt(s / (double)(c - 1)) : NAN;
}

static bool close_to_zero(double x) { return fabs(x) <= 1e-8; } /* torch.isclose(x, 0); NaN is not */

/* TRL's is_std_zero, as a share of the batch's n rows (groups of Ge): the std the advantages
 * divide by, per group or over the batch, or normalize_then_sum's std of its normalised sums */
static double frac_zero_std(const cli_eval *e, const double *reward, const double *values, int64_t n) {
    int64_t Ge = e->Ge, groups = n / Ge;
    if (e->normalize_then_sum) {
        double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!r) return NAN;
        for (int64_t i = 0; i < n; i++) r[i] = isnan(reward[i]) ? NAN : 0.0;
        for (int64_t q = 0; q < groups; q++)
            for (int f = 0; f < e->F; f++) {
                const double *v = values + q * Ge * e->F + f;
                double m = nanmean(v, Ge, e->F), sd = Ge > 1 ? nanstd(v, Ge, e->F) : NAN;
                for (int64_t j = 0; j < Ge; j++) {
                    double z = (v[j * e->F] - m) / (sd + 1e-4); /* NaN for a None or a NaN std: nansum skips it */
                    if (!isnan(z) && !isnan(r[q * Ge + j])) r[q * Ge + j] += e->weights[f] * z;
                }
            }
        double sd = n > 1 ? nanstd(r, n, 1) : 0.0;
        free(r);
        return close_to_zero(sd) ? 1.0 : 0.0;
    }
    if (e->scale_batch) return n > 1 ? (close_to_zero(nanstd(reward, n, 1)) ? 1.0 : 0.0) : 1.0;
    if (Ge == 1) return 1.0; /* TRL: std 0 for groups of one */
    double zero = 0;
    for (int64_t q = 0; q < groups; q++) zero += close_to_zero(nanstd(reward + q * Ge, Ge, 1)) ? (double)Ge : 0.0;
    return zero / (double)n;
}

/* TRL's tools metrics of a batch: its calls a row, and failed calls per call (0 without calls). */
static void tool_batch_metrics(const cli_eval *e, int64_t i0, int64_t n, double *out) {
    double calls = 0, fails = 0;
    for (int64_t i = i0; i < i0 + n; i++) calls += e->calls[i], fails += e->fails[i];
    out[0] = calls / (double)n, out[1] = calls > 0 ? fails / calls : 0.0;
}

/* How many metrics an evaluation logs: the fixed ones, the tools' (with tools), two a function. */
static int metric_count(const cli_eval *e) { return N_FIXED + (e->tools ? N_TOOLS : 0) + 2 * e->F; }

/* Metric m's name in TRL's eval log (the Trainer's eval_ prefix). */
static void metric_name(const cli_eval *e, int m, char *key, size_t len) {
    int tools = e->tools ? N_TOOLS : 0;
    if (m < N_FIXED) snprintf(key, len, "eval_%s", fixed_metrics[m]);
    else if (m < N_FIXED + tools) snprintf(key, len, "eval_%s", tool_metrics[m - N_FIXED]);
    else snprintf(key, len, "eval_rewards/%s/%s", e->names[(m - N_FIXED - tools) / 2], (m - N_FIXED - tools) % 2 ? "std" : "mean");
}

/* One TRL eval batch's metrics (rows i0 .. i0 + n - 1 of the eval rows) into out[metric_count]. */
static void batch_metrics(const cli_eval *e, int64_t i0, int64_t n, double *out) {
    const double *reward = e->reward + i0, *values = e->values + i0 * e->F, *len = e->len + i0;
    const unsigned char *trunc = e->trunc + i0;
    double lo = INFINITY, hi = -INFINITY, sum = 0, tsum = 0, tlo = INFINITY, thi = -INFINITY, clipped = 0;
    int64_t terminated = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += len[i], lo = fmin(lo, len[i]), hi = fmax(hi, len[i]), clipped += trunc[i];
        if (!trunc[i]) tsum += len[i], tlo = fmin(tlo, len[i]), thi = fmax(thi, len[i]), terminated++;
    }
    double fixed[N_FIXED] = {nanmean(reward, n, 1), nanstd(reward, n, 1), frac_zero_std(e, reward, values, n),
                             sum / (double)n, lo, hi, clipped / (double)n,
                             terminated ? tsum / (double)terminated : 0.0, terminated ? tlo : 0.0, terminated ? thi : 0.0};
    memcpy(out, fixed, sizeof(fixed));
    if (e->tools) tool_batch_metrics(e, i0, n, out + N_FIXED), out += N_TOOLS;
    for (int f = 0; f < e->F; f++) out[N_FIXED + 2 * f] = nanmean(values + f, n, e->F), out[N_FIXED + 2 * f + 1] = nanstd(values + f, n, e->F);
}

/* ---------------------------------------------------------------- the plan's settings */
static int read_settings(cli_eval *e, const dfg_program *p) {
    e->steps = !strcmp(dfg_program_str(p, "eval_strategy"), "steps");
    e->on_start = dfg_program_bool(p, "eval_on_start");
    e->every = dfg_program_int(p, "eval_steps");
    e->sft_steps = dfg_program_has(p, "sft_steps") ? dfg_program_int(p, "sft_steps") : 0;
    e->G = dfg_program_int(p, "num_generations");
    e->Ge = dfg_program_int(p, "num_generations_eval");
    e->P = dfg_program_int(p, "prompts_per_step");
    e->Lp = dfg_program_int(p, "max_prompt_length");
    e->batch_prompts = dfg_program_int(p, "per_device_eval_batch_size") / (e->Ge > 0 ? e->Ge : 1);
    e->normalize_then_sum = !strcmp(dfg_program_str(p, "multi_objective_aggregation"), "normalize_then_sum");
    e->scale_batch = !strcmp(dfg_program_str(p, "scale_rewards"), "batch");
    e->n_eos = dfg_program_list_count(p, "eos_token_id");
    if (e->n_eos < 1 || e->n_eos > EVAL_MAX_EOS || e->batch_prompts < 1 || e->Ge < 1 || e->Ge > e->G || e->P < 1)
        return cli_error(CMD, CLI_USAGE, "%s: the plan's evaluation settings do not fit (recompile it)", e->plan);
    for (int i = 0; i < e->n_eos; i++) e->eos[i] = (int32_t)dfg_program_list_number(p, "eos_token_id", i);
    const dfg_tensor *values = dfg_find(p, "reward_values"), *tok = dfg_find(p, "tokens");
    e->F = values ? (int)values->shape.d[1] : 0;
    if (!tok || e->F > EVAL_MAX_FUNCS || (e->F && dfg_program_list_count(p, "reward_funcs") != e->F))
        return cli_error(CMD, CLI_USAGE, "%s: the plan's rollout does not fit its evaluation (recompile it)", e->plan);
    int n_w = dfg_program_list_count(p, "reward_weights");
    for (int f = 0; f < e->F; f++) {
        snprintf(e->names[f], sizeof(e->names[0]), "%s", dfg_program_list_item(p, "reward_funcs", f));
        e->weights[f] = n_w == e->F ? dfg_program_list_number(p, "reward_weights", f) : 1.0;
    }
    e->N = tok->shape.d[0], e->T = tok->shape.d[1];
    const dfg_tensor *calls = dfg_find(p, "eval.tool_calls");
    e->tools = dfg_find(p, "tool_mask") != NULL;
    if (e->tools && (!calls || calls->shape.d[0] != e->N)) /* a plan of a dfg that did not evaluate tools */
        return cli_error(CMD, CLI_USAGE, "%s: the plan's tools do not fit its evaluation (recompile it)", e->plan);
    return CLI_OK;
}

static int make_buffers(cli_eval *e, const dfg_program *p) {
    int64_t NT = e->N * e->T, R = e->rows * e->Ge, F = e->F ? e->F : 1;
    e->small = calloc((size_t)p->n_tensors + 1, sizeof(*e->small));
    e->saved = malloc((size_t)(p->n_tensors + 1) * SMALL_STATE * 8);
    e->rollout = calloc((size_t)p->n_stages + 1, sizeof(bool));
    e->tok = malloc(sizeof(int32_t) * (size_t)NT), e->mask = malloc(sizeof(float) * (size_t)NT);
    e->tmask = malloc(sizeof(float) * (size_t)NT), e->row_calls = malloc(sizeof(float) * (size_t)(2 * e->N));
    e->calls = calloc((size_t)R, sizeof(double)), e->fails = calloc((size_t)R, sizeof(double));
    e->rew = malloc(sizeof(float) * (size_t)e->N), e->vals = malloc(sizeof(float) * (size_t)(e->N * F));
    e->reward = malloc(sizeof(double) * (size_t)R), e->values = malloc(sizeof(double) * (size_t)(R * F));
    e->len = malloc(sizeof(double) * (size_t)R), e->trunc = malloc((size_t)R);
    if (!e->small || !e->saved || !e->rollout || !e->tok || !e->mask || !e->rew || !e->vals || !e->reward || !e->values ||
        !e->len || !e->trunc || !e->tmask || !e->row_calls || !e->calls || !e->fails)
        return cli_error(CMD, CLI_FAILED, "out of memory");
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        /* a scoped state holds nothing between steps (its bytes are others' then) */
        if (t->kind == DFG_STATE && !t->scope_first && dfg_shape_numel(t->shape) <= SMALL_STATE &&
            dfg_tensor_bytes(t) <= SMALL_STATE * 8)
            e->small[e->n_small++] = t;
    }
    for (int s = 0; s < p->n_stages; s++)
        for (int k = 0; k < p->decl.n_rollout_stages; k++)
            if (!strcmp(dfg_runtime_stage_name(e->rt, s), p->decl.rollout_stages[k])) e->rollout[s] = true;
    return CLI_OK;
}

int cli_eval_open(const run_args *a, dfg_runtime *rt, uint64_t seed, cli_eval **out) {
    const dfg_program *p = dfg_runtime_program(rt);
    *out = NULL;
    /* normalize_then_sum normalises each function's values, which a rollout file does not hold */
    if (a->rollouts && dfg_find(p, "reward_values") && dfg_program_has(p, "multi_objective_aggregation") &&
        !strcmp(dfg_program_str(p, "multi_objective_aggregation"), "normalize_then_sum"))
        return cli_error(CMD, CLI_USAGE, "%s: multi_objective_aggregation=normalize_then_sum normalises each reward "
                         "function's values, and a --rollouts file holds only their weighted sum: compile with "
                         "sum_then_normalize to train on rollout files", a->plan);
    const char *path = dfg_program_has(p, "eval_dataset") ? dfg_program_str(p, "eval_dataset") : "";
    if (!*path) return a->eval_only ? cli_error(CMD, CLI_USAGE, "--eval-only: %s has no eval_dataset (compile it with "
                                                "--set eval_dataset=FILE.jsonl)", a->plan) : CLI_OK;
    cli_eval *e = calloc(1, sizeof(*e));
    if (!e) return cli_error(CMD, CLI_FAILED, "out of memory");
    *out = e;
    *e = (cli_eval){.rt = rt, .plan = a->plan, .quiet = a->quiet, .seed = seed};
    int rc = read_settings(e, p);
    if (rc) return rc;
    if (a->rollouts && (e->steps || e->on_start || a->eval_only))
        return cli_error(CMD, CLI_USAGE, "%s evaluates on eval_dataset by generating, and --rollouts trains on fixed "
                         "rollouts: run the evaluation on its own (--eval-only) or compile with eval_strategy=no", a->plan);
    if (!p->decl.n_rollout_stages || p->decl.rollouts_only || !dfg_find(p, "eval.batch"))
        return cli_error(CMD, CLI_USAGE, "%s: this plan cannot make its own rollouts, so it cannot evaluate", a->plan);
    dfg_dataset *ds = NULL;
    char err[1024];
    if (dfg_dataset_open(path, 0, &ds, err, sizeof(err))) /* the runtime opened it already: the same file */
        return cli_error(CMD, CLI_USAGE, "eval_dataset: %s", err);
    e->rows = dfg_dataset_rows(ds);
    dfg_dataset_free(ds);
    return make_buffers(e, p);
}

void cli_eval_free(cli_eval *e) {
    if (!e) return;
    free(e->small), free(e->saved), free(e->rollout), free(e->tok), free(e->mask), free(e->rew), free(e->vals);
    free(e->reward), free(e->values), free(e->len), free(e->trunc);
    free(e->tmask), free(e->row_calls), free(e->calls), free(e->fails);
    free(e);
}

/* ---------------------------------------------------------------- a round */
static int runtime_fail(const cli_eval *e, int64_t step, const char *what) {
    return cli_error(CMD, CLI_FAILED, "%s: evaluation at step %" PRId64 ": %s%s", e->plan, step, what,
                     dfg_runtime_error(e->rt));
}

static int keep_states(cli_eval *e, bool restore) {
    for (int i = 0; i < e->n_small; i++) {
        const dfg_tensor *t = e->small[i];
        void *at = e->saved + (size_t)i * SMALL_STATE * 8;
        dfg_status st = restore ? dfg_runtime_write(e->rt, t->name, at, dfg_tensor_bytes(t))
                                : dfg_runtime_read(e->rt, t->name, at, dfg_tensor_bytes(t));
        if (st) return cli_error(CMD, CLI_FAILED, "%s: %s", t->name, dfg_runtime_error(e->rt));
    }
    return CLI_OK;
}

/* The stages an evaluation runs (the rollout's) or every stage again (training). */
static int switch_stages(cli_eval *e, bool eval) {
    for (int s = 0; s < dfg_runtime_stage_count(e->rt); s++)
        if (dfg_runtime_skip_stage(e->rt, dfg_runtime_stage_name(e->rt, s), eval && !e->rollout[s]))
            return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(e->rt));
    return CLI_OK;
}

/* The evaluation's own sampling stream: a key of the seed, its counter from 0 at every round. */
static int eval_stream(cli_eval *e) {
    if (!dfg_find(dfg_runtime_program(e->rt), "rng")) return CLI_OK;
    uint64_t k = e->seed ^ 0x6576616c2e726e67ull; /* "eval.rng" */
    k = dfg_host_rand(&k);
    int32_t v[4] = {(int32_t)(uint32_t)k, (int32_t)(uint32_t)(k >> 32), 0, 0};
    return dfg_runtime_write(e->rt, "rng", v, sizeof(v)) ? cli_error(CMD, CLI_FAILED, "rng: %s", dfg_runtime_error(e->rt))
                                                         : CLI_OK;
}

static bool is_eos(const cli_eval *e, int32_t id) {
    for (int i = 0; i < e->n_eos; i++)
        if (id == e->eos[i]) return true;
    return false;
}

/* The rows of eval batch b (prompts b P ..) that count: each prompt's first Ge completions. */
static int collect(cli_eval *e, int64_t b) {
    dfg_runtime *rt = e->rt;
    size_t NT = (size_t)(e->N * e->T);
    if (dfg_runtime_read(rt, "tokens", e->tok, sizeof(int32_t) * NT) ||
        dfg_runtime_read(rt, "completion_mask", e->mask, sizeof(float) * NT) ||
        dfg_runtime_read(rt, "rewards", e->rew, sizeof(float) * (size_t)e->N) ||
        (e->F && dfg_runtime_read(rt, "reward_values", e->vals, sizeof(float) * (size_t)(e->N * e->F))) ||
        (e->tools && (dfg_runtime_read(rt, "tool_mask", e->tmask, sizeof(float) * NT) ||
                      dfg_runtime_read(rt, "eval.tool_calls", e->row_calls, sizeof(float) * (size_t)(2 * e->N)))))
        return cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(rt));
    for (int64_t p = 0; p < e->P && b * e->P + p < e->rows; p++)
        for (int64_t j = 0; j < e->Ge; j++) {
            int64_t r = p * e->G + j, i = (b * e->P + p) * e->Ge + j, n = 0, own = 0;
            for (int64_t c = e->Lp; c < e->T; c++) { /* TRL's lengths count the policy's tokens (tool_mask 1) */
                bool in = e->mask[r * e->T + c] != 0.0f;
                n += in, own += in && (!e->tools || e->tmask[r * e->T + c] != 0.0f);
            }
            e->len[i] = (double)own;
            /* the completion's last token, a tool's answer's too (TRL's ids[-1]) */
            e->trunc[i] = !(n > 0 && is_eos(e, e->tok[r * e->T + e->Lp + n - 1]));
            if (e->tools) e->calls[i] = e->row_calls[2 * r], e->fails[i] = e->row_calls[2 * r + 1];
            double sum = 0; /* TRL: (rewards_per_func * weights).nansum, NaN where every function gave None */
            bool any = !e->F;
            for (int f = 0; f < e->F; f++) {
                double v = (double)e->vals[r * e->F + f];
                e->values[i * e->F + f] = v;
                if (!isnan(v)) sum += e->weights[f] * v, any = true;
            }
            e->reward[i] = !e->F ? (double)e->rew[r] : any ? sum : NAN;
        }
    return CLI_OK;
}

/* "eval.tool_calls" back to zeros. */
static int clear_calls(cli_eval *e) {
    memset(e->row_calls, 0, sizeof(float) * (size_t)(2 * e->N));
    return dfg_runtime_write(e->rt, "eval.tool_calls", e->row_calls, sizeof(float) * (size_t)(2 * e->N))
               ? cli_error(CMD, CLI_FAILED, "eval.tool_calls: %s", dfg_runtime_error(e->rt)) : CLI_OK;
}

/* Every eval row through the rollout stages, the state put back after. */
static int roll_out(cli_eval *e, int64_t step) {
    int rc = keep_states(e, false);
    if (!rc) rc = eval_stream(e);
    if (!rc) rc = switch_stages(e, true);
    for (int64_t b = 0; !rc && b * e->P < e->rows; b++) {
        int32_t at[2] = {1, (int32_t)(b * e->P)};
        if (dfg_runtime_write(e->rt, "eval.batch", at, sizeof(at))) rc = runtime_fail(e, step, "");
        else if (dfg_runtime_step(e->rt)) rc = runtime_fail(e, step, "");
        else if (dfg_runtime_set_steps_done(e->rt, step)) rc = runtime_fail(e, step, "");
        if (!rc) rc = collect(e, b);
    }
    int back = switch_stages(e, false); /* put back even after a failure: the run stops, but says why once */
    if (!back) back = keep_states(e, true);
    if (!back && e->tools) back = clear_calls(e); /* as training leaves it (it never counts), a checkpoint too */
    if (!rc && dfg_runtime_set_steps_done(e->rt, step)) rc = runtime_fail(e, step, "");
    return rc ? rc : back;
}

/* ---------------------------------------------------------------- the metrics */
static int report(cli_eval *e, int64_t step, double seconds, FILE *jsonl, cli_progress *pr) {
    int n_metrics = metric_count(e), n_batches = 0;
    double sum[N_METRICS] = {0}, out[N_METRICS];
    int count[N_METRICS] = {0};
    for (int64_t q = 0; q < e->rows; q += e->batch_prompts, n_batches++) { /* TRL: a value a batch, their mean */
        int64_t prompts = e->rows - q < e->batch_prompts ? e->rows - q : e->batch_prompts;
        batch_metrics(e, q * e->Ge, prompts * e->Ge, out);
        for (int m = 0; m < n_metrics; m++)
            if (!isnan(out[m])) sum[m] += out[m], count[m]++;
    }
    cJSON *o = jsonl ? cJSON_CreateObject() : NULL;
    bool ok = !jsonl || (o && cJSON_AddNumberToObject(o, "step", (double)step));
    if (pr) cli_progress_clear(pr);
    if (!e->quiet) printf("eval %" PRId64 ":", step);
    for (int m = 0; m < n_metrics; m++) {
        char key[128], num[32];
        metric_name(e, m, key, sizeof(key));
        double v = count[m] ? sum[m] / count[m] : NAN; /* none: TRL's None, JSON null */
        if (!e->quiet && isnan(v)) printf("  %s n/a", key);
        else if (!e->quiet) printf("  %s %.5g", key, v);
        snprintf(num, sizeof(num), "%.9g", v);
        if (o) ok = ok && (isnan(v) ? cJSON_AddNullToObject(o, key) != NULL : cJSON_AddRawToObject(o, key, num) != NULL);
    }
    if (!e->quiet)
        printf("  (%" PRId64 " prompts x %" PRId64 " completions, %d batch%s of %" PRId64 ", %.2f s)\n", e->rows, e->Ge,
               n_batches, n_batches == 1 ? "" : "es", e->batch_prompts * e->Ge, seconds);
    fflush(stdout);
    if (o) ok = ok && cJSON_AddNumberToObject(o, "eval_runtime", seconds) && cJSON_AddNumberToObject(o, "eval_samples",
                                                                                                  (double)(e->rows * e->Ge));
    char *line = ok && o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (jsonl && !line) return cli_error(CMD, CLI_FAILED, "evaluation at step %" PRId64 ": out of memory", step);
    bool written = !jsonl || (fprintf(jsonl, "%s\n", line) >= 0 && fflush(jsonl) == 0);
    cJSON_free(line);
    return written ? CLI_OK : cli_error(CMD, CLI_FAILED, "cannot write the metrics file");
}

int cli_eval_maybe(cli_eval *e, int64_t step, bool at_start, bool now, FILE *jsonl, cli_progress *pr) {
    if (!e) return CLI_OK;
    bool due = now || (at_start ? e->on_start : e->steps && step % e->every == 0);
    if (!due || step < e->sft_steps) return CLI_OK; /* the warm-up's steps make no rollouts */
    double t0 = now_s();
    int rc = roll_out(e, step);
    return rc ? rc : report(e, step, now_s() - t0, jsonl, pr);
}
