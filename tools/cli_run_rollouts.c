/* cli_run_rollouts.c - dfg run's fixed-rollout mode and dumps.
 *
 * A program that can train on rollouts made elsewhere (examples/grpo.c) says so in three
 * settings: "dfg.rollout_stages" (the stages that make a rollout: switched off), "dfg.rollout_tensors"
 * (the persistent tensors a rollout file fills, e.g. tokens, completion_mask, rewards) and
 * "dfg.dump" ("file_name=tensor,..." written by --dump, with every PARAM). The CLI knows nothing
 * else about the program: which settings fix the shapes is said in messages only for the TRL
 * setting names (prompts_per_step x num_generations sequences of max_prompt_length +
 * max_completion_length tokens), when the plan has them. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "run"
#define MAX_ROLLOUT_TENSORS 16

struct cli_rollouts {
    const char *path;
    int n;
    const dfg_tensor *t[MAX_ROLLOUT_TENSORS];
    void *data[MAX_ROLLOUT_TENSORS]; /* the file's bytes, aligned, written before every step */
};

/* Splits a comma-separated list in place; returns the count (at most max), or -1 when longer. */
static int split_list(char *s, char **items, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) return -1;
        items[n++] = tok;
    }
    return n;
}

static bool same_shape(dfg_shape a, dfg_shape b) {
    return a.rank == b.rank && !memcmp(a.d, b.d, sizeof(int64_t) * (size_t)a.rank);
}

/* " (N = prompts_per_step x num_generations = 8 x 8; T = ...)": what fixes dims 0 and 1 of a
 * rollout tensor under the TRL settings; "" when the plan does not have them. */
static void shape_reason(const dfg_program *p, int rank, char *buf, size_t len) {
    const char *P = dfg_program_setting(p, "prompts_per_step"), *G = dfg_program_setting(p, "num_generations");
    const char *Lp = dfg_program_setting(p, "max_prompt_length"), *Lc = dfg_program_setting(p, "max_completion_length");
    buf[0] = '\0';
    if (rank < 1) return;
    if (!P || !G) {
        snprintf(buf, len, " (the plan's settings fix it: see dfg info)");
        return;
    }
    snprintf(buf, len, " (N = prompts_per_step x num_generations = %s x %s", P, G);
    if (rank >= 2 && Lp && Lc)
        snprintf(buf + strlen(buf), len - strlen(buf), ", T = max_prompt_length + max_completion_length = %s + %s", Lp, Lc);
    snprintf(buf + strlen(buf), len - strlen(buf), "; dfg compile --set changes them)");
}

/* "tokens i32 (64,9), completion_mask f32 (64,9), rewards f32 (64)" */
static void expected_list(const cli_rollouts *r, char *buf, size_t len) {
    char sb[96];
    buf[0] = '\0';
    for (int i = 0; i < r->n; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s %s %s", i ? ", " : "", r->t[i]->name,
                 dfg_dtype_name(r->t[i]->dtype), dfg_shape_str(r->t[i]->shape, sb, sizeof(sb)));
}

/* The plan's rollout tensors: persistent, kept for the whole step (a scoped one's bytes would
 * belong to other tensors between its stages). */
static int find_tensors(const dfg_program *p, const char *plan, cli_rollouts *r) {
    const char *list = dfg_program_setting(p, "dfg.rollout_tensors");
    const char *stages = dfg_program_setting(p, "dfg.rollout_stages");
    if (!list || !stages)
        return cli_error(CMD, CLI_USAGE, "%s: program '%s' cannot train on fixed rollouts (its pipeline sets no "
                         "dfg.rollout_tensors and dfg.rollout_stages)", plan, p->name);
    char buf[1024];
    char *items[MAX_ROLLOUT_TENSORS];
    snprintf(buf, sizeof(buf), "%s", list);
    int n = split_list(buf, items, MAX_ROLLOUT_TENSORS);
    if (n <= 0) return cli_error(CMD, CLI_USAGE, "%s: setting dfg.rollout_tensors '%s' is not a list of 1 to %d names",
                                 plan, list, MAX_ROLLOUT_TENSORS);
    for (int i = 0; i < n; i++) {
        const dfg_tensor *t = dfg_find(p, items[i]);
        if (!t || t->kind != DFG_STATE || t->scope_first)
            return cli_error(CMD, CLI_USAGE, "%s: setting dfg.rollout_tensors names '%s', which is no state of the "
                             "whole step", plan, items[i]);
        r->t[r->n++] = t;
    }
    return CLI_OK;
}

/* Values the program cannot take: token ids outside the embedding (GPT-2's wte, when present),
 * a mask other than 0/1, non-finite floats. */
static int check_values(const dfg_program *p, const char *path, const dfg_tensor *t, const void *data) {
    int64_t n = dfg_shape_numel(t->shape);
    const dfg_tensor *wte = dfg_find(p, "wte.weight");
    if (t->dtype == DFG_I32 && wte && wte->shape.rank == 2) {
        const int32_t *v = data;
        for (int64_t i = 0; i < n; i++)
            if (v[i] < 0 || v[i] >= wte->shape.d[0])
                return cli_error(CMD, CLI_USAGE, "%s: '%s' holds token %" PRId32 " at flat index %" PRId64
                                 ", outside the vocabulary [0, %" PRId64 ")", path, t->name, v[i], i, wte->shape.d[0]);
    }
    if (t->dtype == DFG_F32) {
        const float *v = data;
        /* a tensor named as a mask weighs tokens in or out; any other value would silently rescale
         * the loss */
        bool mask = strstr(t->name, "mask") != NULL;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(v[i]) || (mask && v[i] != 0.0f && v[i] != 1.0f))
                return cli_error(CMD, CLI_USAGE, "%s: '%s' holds %g at flat index %" PRId64 " (%s)", path, t->name,
                                 (double)v[i], i, mask ? "a mask is 0 or 1" : "values must be finite");
    }
    return CLI_OK;
}

/* The setting "dfg.rollout_shared_prompts" = "TENSOR,LEN,G": the program computes the first LEN
 * columns of TENSOR once for every group of G rows (examples/grpo.c's share_prompts), so the rows
 * of a group must agree there. */
static int check_shared_prompts(const dfg_program *p, const char *path, const cli_rollouts *r) {
    const char *rule = dfg_program_setting(p, "dfg.rollout_shared_prompts");
    if (!rule) return CLI_OK;
    char name[128];
    long long len = 0, G = 0;
    const dfg_tensor *t = NULL;
    const int32_t *v = NULL;
    if (sscanf(rule, "%127[^,],%lld,%lld", name, &len, &G) == 3)
        for (int k = 0; k < r->n; k++)
            if (!strcmp(r->t[k]->name, name)) t = r->t[k], v = r->data[k];
    if (!t || t->dtype != DFG_I32 || t->shape.rank != 2 || G < 1 || t->shape.d[0] % G || len < 0 || len > t->shape.d[1])
        return cli_error(CMD, CLI_USAGE, "%s: setting dfg.rollout_shared_prompts '%s' does not fit the plan's rollout",
                         path, rule);
    int64_t rows = t->shape.d[0], cols = t->shape.d[1];
    for (int64_t i = 0; i < rows; i++) {
        int64_t first = i - i % G;
        for (int64_t j = 0; j < len; j++)
            if (v[i * cols + j] != v[first * cols + j])
                return cli_error(CMD, CLI_USAGE, "%s: '%s' row %" PRId64 " differs from row %" PRId64 " at column %" PRId64
                                 ", but rows %" PRId64 "..%" PRId64 " are one prompt's group: this plan computes a group's "
                                 "%lld prompt tokens once (compile with --set share_prompts=0 for other rollouts)",
                                 path, name, i, first, j, first, first + (int64_t)G - 1, len);
    }
    return CLI_OK;
}

/* Checks the file against the plan (names, dtypes, shapes, values) and keeps aligned copies. */
static int take_tensors(const dfg_program *p, const char *path, const dfg_safetensors *st, cli_rollouts *r) {
    char want[512], fs[96], ps[96], why[256];
    expected_list(r, want, sizeof(want));
    for (int i = 0; i < dfg_st_count(st); i++) {
        const char *name = dfg_st_get(st, i)->name;
        bool known = false;
        for (int k = 0; k < r->n; k++) known = known || !strcmp(r->t[k]->name, name);
        if (!known)
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is not part of a rollout of this plan (it takes: %s)",
                             path, name, want);
    }
    for (int k = 0; k < r->n; k++) {
        const dfg_tensor *t = r->t[k];
        const dfg_st_tensor *f = dfg_st_find(st, t->name);
        if (!f) return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is missing (a rollout holds: %s)", path, t->name, want);
        if (f->dtype != t->dtype)
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is %s in the file; the plan needs %s", path, t->name,
                             f->dtype_name, dfg_dtype_name(t->dtype));
        if (!same_shape(f->shape, t->shape)) {
            shape_reason(p, t->shape.rank, why, sizeof(why));
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' has shape %s in the file but the plan's is %s%s", path,
                             t->name, dfg_shape_str(f->shape, fs, sizeof(fs)), dfg_shape_str(t->shape, ps, sizeof(ps)),
                             why);
        }
        if (!(r->data[k] = malloc(f->bytes ? f->bytes : 1)))
            return cli_error(CMD, CLI_FAILED, "%s: out of memory", path);
        memcpy(r->data[k], f->data, f->bytes);
        int rc = check_values(p, path, t, r->data[k]);
        if (rc) return rc;
    }
    return CLI_OK;
}

/* Switches off the rollout stages the program has (the list may name optional stages, such as
 * a warm-up that this plan was compiled without). */
static int skip_stages(dfg_runtime *rt, const dfg_program *p, char *skipped, size_t len) {
    char buf[1024];
    char *items[64];
    snprintf(buf, sizeof(buf), "%s", dfg_program_setting(p, "dfg.rollout_stages"));
    int n = split_list(buf, items, 64);
    skipped[0] = '\0';
    for (int i = 0; i < n; i++)
        for (int s = 0; s < p->n_stages; s++) {
            if (strcmp(p->stages[s].name, items[i])) continue;
            if (dfg_runtime_skip_stage(rt, items[i], true))
                return cli_error(CMD, CLI_FAILED, "skipping stage '%s': %s", items[i], dfg_runtime_error(rt));
            snprintf(skipped + strlen(skipped), len - strlen(skipped), "%s%s", skipped[0] ? ", " : "", items[i]);
        }
    return CLI_OK;
}

int cli_rollouts_load(const dfg_program *p, const char *plan, const char *path, cli_rollouts **out) {
    *out = NULL;
    cli_rollouts *r = calloc(1, sizeof(*r));
    if (!r) return cli_error(CMD, CLI_FAILED, "out of memory");
    r->path = path;
    int rc = find_tensors(p, plan, r);
    dfg_safetensors *st = NULL;
    char err[1024];
    if (!rc && dfg_st_open(path, &st, err, sizeof(err))) rc = cli_error(CMD, CLI_USAGE, "--rollouts: %s", err);
    if (!rc) rc = take_tensors(p, path, st, r);
    if (!rc) rc = check_shared_prompts(p, path, r);
    dfg_st_free(st);
    if (rc) cli_rollouts_free(r);
    else *out = r;
    return rc;
}

int cli_rollouts_apply(dfg_runtime *rt, const cli_rollouts *r) {
    char skipped[512] = "", sb[96];
    int rc = skip_stages(rt, dfg_runtime_program(rt), skipped, sizeof(skipped));
    if (rc) return rc;
    cli_say("rollouts from %s: %s %s", r->path, r->t[0]->name, dfg_shape_str(r->t[0]->shape, sb, sizeof(sb)));
    for (int k = 1; k < r->n; k++) cli_say(", %s", r->t[k]->name);
    cli_say("; stages %s skipped\n", skipped[0] ? skipped : "(none)");
    return CLI_OK;
}

int cli_rollouts_write(dfg_runtime *rt, const cli_rollouts *r) {
    for (int k = 0; r && k < r->n; k++)
        if (dfg_runtime_write(rt, r->t[k]->name, r->data[k], dfg_tensor_bytes(r->t[k])))
            return cli_error(CMD, CLI_FAILED, "writing the rollout's '%s': %s", r->t[k]->name, dfg_runtime_error(rt));
    return CLI_OK;
}

void cli_rollouts_free(cli_rollouts *r) {
    if (!r) return;
    for (int k = 0; k < r->n; k++) free(r->data[k]);
    free(r);
}

/* ---------------------------------------------------------------- --dump */

/* Parses "dfg.dump" into (file name, tensor) pairs, checked; returns an exit code. names point
 * into buf. */
#define MAX_DUMP 64
static int dump_entries(const dfg_program *p, const char *plan, char *buf, size_t len, char **names,
                        const dfg_tensor **ts, int *n) {
    const char *spec = dfg_program_setting(p, "dfg.dump");
    *n = 0;
    if (!spec)
        return cli_error(CMD, CLI_USAGE, "%s: program '%s' says nothing to dump (its pipeline sets no dfg.dump); "
                         "--save writes the parameters", plan, p->name);
    snprintf(buf, len, "%s", spec);
    char *items[MAX_DUMP];
    int k = split_list(buf, items, MAX_DUMP);
    if (k <= 0) return cli_error(CMD, CLI_USAGE, "%s: setting dfg.dump '%s' is not a list of name=tensor", plan, spec);
    for (int i = 0; i < k; i++) {
        char *eq = strchr(items[i], '=');
        if (!eq || eq == items[i] || !eq[1])
            return cli_error(CMD, CLI_USAGE, "%s: setting dfg.dump: '%s' is not name=tensor", plan, items[i]);
        *eq = '\0';
        const dfg_tensor *t = dfg_find(p, eq + 1), *clash = dfg_find(p, items[i]);
        if (!t) return cli_error(CMD, CLI_USAGE, "%s: setting dfg.dump: no tensor named '%s'", plan, eq + 1);
        if (clash && clash->kind == DFG_PARAM)
            return cli_error(CMD, CLI_USAGE, "%s: setting dfg.dump: '%s' is the name of a param", plan, items[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[j], items[i]))
                return cli_error(CMD, CLI_USAGE, "%s: setting dfg.dump names '%s' twice", plan, items[i]);
        names[i] = items[i];
        ts[i] = t;
    }
    *n = k;
    return CLI_OK;
}

int cli_dump_check(const dfg_program *p, const char *plan) {
    char buf[2048], *names[MAX_DUMP];
    const dfg_tensor *ts[MAX_DUMP];
    int n;
    return dump_entries(p, plan, buf, sizeof(buf), names, ts, &n);
}

int cli_dump_write(dfg_runtime *rt, const char *path, const char *const *meta_kv, int n_meta) {
    const dfg_program *p = dfg_runtime_program(rt);
    char buf[2048];
    int total = MAX_DUMP + p->n_tensors, n = 0;
    const char **names = calloc((size_t)total, sizeof(*names));
    const dfg_tensor **ts = calloc((size_t)total, sizeof(*ts));
    int rc = names && ts ? dump_entries(p, path, buf, sizeof(buf), (char **)names, ts, &n)
                         : cli_error(CMD, CLI_FAILED, "out of memory");
    for (int i = 0; i < p->n_tensors && !rc; i++) /* every PARAM, under its (Hugging Face) name */
        if (p->tensors[i]->kind == DFG_PARAM) names[n] = p->tensors[i]->name, ts[n++] = p->tensors[i];
    if (!rc) rc = cli_st_save(rt, path, names, (const dfg_tensor *const *)ts, n, meta_kv, n_meta);
    free(names);
    free(ts);
    return rc;
}
