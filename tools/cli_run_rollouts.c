/* cli_run_rollouts.c - dfg run's fixed-rollout mode and dumps.
 *
 * A program that can train on rollouts made elsewhere (examples/grpo/grpo.c) says so with
 * declarations its pipeline made (dfg_declare_rollout: the stages that make a rollout, switched
 * off, and the persistent tensors a rollout file fills; dfg_declare_shared_prompts;
 * dfg_declare_rollout_prompt: the prompt columns; and dfg_declare_dump: what --dump writes
 * besides every PARAM). The CLI knows nothing else about
 * the program: which settings fix the shapes is said in messages only for the TRL setting names
 * (prompts_per_step x num_generations sequences of max_prompt_length + max_completion_length
 * tokens), when the plan has them. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "run"
#define MAX_ROLLOUT_TENSORS 16

/* The sampler's log-prob of each token (TRL's sampling_per_token_logps), optional: log-probs are
 * <= 0, and a file without them gets 1 everywhere, which the pipeline reads as none (no
 * importance-sampling correction, as TRL without vLLM). */
#define SAMPLING_LOGPS "sampling_logps"
#define NO_LOGP 1.0f
/* A multi-turn plan's tool_mask (0 on the tools' tokens), optional: a file without it has none. */
#define TOOL_MASK "tool_mask"

struct cli_rollouts {
    const char *path;
    bool unpadded;  /* a plan with prompt_start got neither it nor an attention_mask: no padding */
    bool unsampled; /* a plan with sampling_logps did not get them: no correction */
    bool untooled;  /* a plan with tool_mask did not get one: no tools' tokens */
    int n;
    const dfg_tensor *t[MAX_ROLLOUT_TENSORS];
    void *data[MAX_ROLLOUT_TENSORS]; /* the file's bytes, aligned, written before every step */
};

/* The prompt columns of a rollout, as the pipeline declared them (dfg_declare_rollout_prompt);
 * 0 when it declared none */
static int64_t prompt_columns(const dfg_program *p) { return p->decl.prompt_tokens ? p->decl.prompt_len : 0; }

static bool same_shape(dfg_shape a, dfg_shape b) {
    return a.rank == b.rank && !memcmp(a.d, b.d, sizeof(int64_t) * (size_t)a.rank);
}

/* " (N = prompts_per_step x num_generations = 8 x 8; T = ...)": what fixes dims 0 and 1 of a
 * rollout tensor, in the settings' words. The widths are the declared ones (the rollout's tokens
 * and their prompt columns); the settings only name them. "" when the plan declares neither. */
static void shape_reason(const dfg_program *p, int rank, char *buf, size_t len) {
    bool has_n = dfg_program_has(p, "prompts_per_step") && dfg_program_has(p, "num_generations");
    const dfg_tensor *tok = p->decl.prompt_tokens;
    buf[0] = '\0';
    if (rank < 1) return;
    if (!has_n) {
        snprintf(buf, len, " (the plan's settings fix it: see dfg info)");
        return;
    }
    snprintf(buf, len, " (N = prompts_per_step x num_generations = %" PRId64 " x %" PRId64,
             dfg_program_int(p, "prompts_per_step"), dfg_program_int(p, "num_generations"));
    if (rank >= 2 && tok)
        snprintf(buf + strlen(buf), len - strlen(buf), ", T = max_prompt_length + max_completion_length = %" PRId64
                 " + %" PRId64, p->decl.prompt_len, tok->shape.d[1] - p->decl.prompt_len);
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

/* The plan's rollout tensors, as its pipeline declared them (STATEs of the whole step). */
static int find_tensors(const dfg_program *p, const char *plan, cli_rollouts *r) {
    const dfg_declarations *d = &p->decl;
    if (!d->n_rollout_tensors)
        return cli_error(CMD, CLI_USAGE, "%s: program '%s' cannot train on fixed rollouts (its pipeline declares none: "
                         "dfg_declare_rollout)", plan, p->name);
    if (d->n_rollout_tensors > MAX_ROLLOUT_TENSORS)
        return cli_error(CMD, CLI_USAGE, "%s: a rollout of %d tensors is more than this tool takes (%d)", plan,
                         d->n_rollout_tensors, MAX_ROLLOUT_TENSORS);
    for (int i = 0; i < d->n_rollout_tensors; i++) r->t[r->n++] = d->rollout_tensors[i];
    return CLI_OK;
}

/* Values the program cannot take: token ids outside the embedding (GPT-2's wte or the Llama
 * family's embed_tokens, when present), a mask other than 0/1, non-finite floats. */
static int check_values(const dfg_program *p, const char *path, const dfg_tensor *t, const void *data) {
    int64_t n = dfg_shape_numel(t->shape);
    const dfg_tensor *wte = dfg_find(p, "wte.weight");
    if (!wte) wte = dfg_find(p, "model.embed_tokens.weight");
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
        bool mask = strstr(t->name, "mask") != NULL, logp = !strcmp(t->name, SAMPLING_LOGPS);
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(v[i]) || (mask && v[i] != 0.0f && v[i] != 1.0f) || (logp && v[i] > 0.0f))
                return cli_error(CMD, CLI_USAGE, "%s: '%s' holds %g at flat index %" PRId64 " (%s)", path, t->name,
                                 (double)v[i], i, mask ? "a mask is 0 or 1" : logp ? "log-probs are finite and <= 0"
                                                                                    : "values must be finite");
    }
    return CLI_OK;
}

/* dfg_declare_shared_prompts: the program computes the first `len` columns of the tokens once
 * for every group of G rows (examples/grpo/grpo.c's share_prompts), so the rows of a group must agree
 * there. */
static int check_shared_prompts(const dfg_program *p, const char *path, const cli_rollouts *r) {
    const dfg_tensor *t = p->decl.shared_tokens;
    if (!t) return CLI_OK;
    const int32_t *v = NULL;
    for (int k = 0; k < r->n; k++)
        if (r->t[k] == t) v = r->data[k];
    int64_t rows = t->shape.d[0], cols = t->shape.d[1], len = p->decl.shared_len, G = p->decl.shared_group;
    for (int64_t i = 0; v && i < rows; i++) {
        int64_t first = i - i % G;
        for (int64_t j = 0; j < len; j++)
            if (v[i * cols + j] != v[first * cols + j])
                return cli_error(CMD, CLI_USAGE, "%s: '%s' row %" PRId64 " differs from row %" PRId64 " at column %" PRId64
                                 ", but rows %" PRId64 "..%" PRId64 " are one prompt's group: this plan computes a group's "
                                 "%" PRId64 " prompt tokens once (compile with --set share_prompts=0 for other rollouts)",
                                 path, t->name, i, first, j, first, first + G - 1, len);
    }
    return CLI_OK;
}

/* Left-padded prompts (the "prompt_start" (N) i32 of a plan with padded_prompts: each row's
 * first prompt column) may come as TRL's attention_mask (N, T), any dtype of 0s and 1s: a row's
 * leading zeros are its padding, and the prompt columns after them must be 1 (left padding is the
 * only kind the plan runs). The completion columns are the completion mask's business and are
 * not read. A file with neither has no padding (every prompt_start 0). */
static int start_from_mask(const dfg_program *p, const char *path, const dfg_st_tensor *f, const dfg_tensor *start,
                           void **out) {
    int64_t N = start->shape.d[0], Lp = prompt_columns(p), T = f->shape.rank == 2 ? f->shape.d[1] : 0;
    size_t elem = f->shape.rank == 2 && f->shape.d[0] == N && T >= Lp && Lp > 0 ? f->bytes / (size_t)(N * T) : 0;
    if (!(elem == 1 || elem == 4 || elem == 8) || f->bytes != elem * (size_t)(N * T))
        return cli_error(CMD, CLI_USAGE, "%s: 'attention_mask' must be (%" PRId64 ", T >= max_prompt_length %" PRId64
                         ") of 1-, 4- or 8-byte 0s and 1s, got %s", path, N, Lp, f->dtype_name);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)N);
    if (!v) return cli_error(CMD, CLI_FAILED, "out of memory");
    const unsigned char *b = f->data;
    for (int64_t i = 0; i < N; i++) {
        int64_t first = -1;
        for (int64_t j = 0; j < Lp; j++) {
            unsigned char nz = 0;
            for (size_t k = 0; k < elem; k++) nz |= b[(size_t)(i * T + j) * elem + k];
            if (nz && first < 0) first = j;
            if (!nz && first >= 0) {
                free(v);
                return cli_error(CMD, CLI_USAGE, "%s: attention_mask row %" PRId64 " has a 0 at prompt column %" PRId64
                                 " after its prompt began at column %" PRId64 ": only left padding is supported", path, i, j, first);
            }
        }
        if (first < 0) {
            free(v);
            return cli_error(CMD, CLI_USAGE, "%s: attention_mask row %" PRId64 " has no prompt token in its first %" PRId64
                             " columns", path, i, Lp);
        }
        v[i] = (int32_t)first;
    }
    *out = v;
    return CLI_OK;
}

/* A given prompt_start must point into the prompt columns. */
static int check_start(const dfg_program *p, const char *path, const dfg_tensor *t, const int32_t *v) {
    int64_t Lp = prompt_columns(p);
    for (int64_t i = 0; i < t->shape.d[0]; i++)
        if (v[i] < 0 || v[i] >= Lp)
            return cli_error(CMD, CLI_USAGE, "%s: prompt_start[%" PRId64 "] = %" PRId32 " is outside 0 .. %" PRId64
                             " (max_prompt_length - 1)", path, i, v[i], Lp - 1);
    return CLI_OK;
}

/* Checks the file against the plan (names, dtypes, shapes, values) and keeps aligned copies. */
static int take_tensors(const dfg_program *p, const char *path, const dfg_safetensors *st, cli_rollouts *r) {
    char want[512], fs[96], ps[96], why[256];
    expected_list(r, want, sizeof(want));
    const dfg_tensor *start = NULL;
    for (int k = 0; k < r->n; k++)
        if (!strcmp(r->t[k]->name, "prompt_start")) start = r->t[k];
    for (int i = 0; i < dfg_st_count(st); i++) {
        const char *name = dfg_st_get(st, i)->name;
        bool known = start && !strcmp(name, "attention_mask") && !dfg_st_find(st, "prompt_start");
        for (int k = 0; k < r->n; k++) known = known || !strcmp(r->t[k]->name, name);
        if (!known)
            return cli_error(CMD, CLI_USAGE, "%s: tensor '%s' is not part of a rollout of this plan (it takes: %s)",
                             path, name, want);
    }
    for (int k = 0; k < r->n; k++) {
        const dfg_tensor *t = r->t[k];
        const dfg_st_tensor *f = dfg_st_find(st, t->name);
        if (!f && t == start && dfg_st_find(st, "attention_mask")) {
            int rc = start_from_mask(p, path, dfg_st_find(st, "attention_mask"), t, &r->data[k]);
            if (rc) return rc;
            continue;
        }
        if (!f && t == start) { /* rows that say nothing of padding have none: every prompt starts at 0 */
            if (!(r->data[k] = calloc(1, dfg_tensor_bytes(t) ? dfg_tensor_bytes(t) : 1)))
                return cli_error(CMD, CLI_FAILED, "%s: out of memory", path);
            r->unpadded = true;
            continue;
        }
        if (!f && !strcmp(t->name, SAMPLING_LOGPS) && t->dtype == DFG_F32) { /* no sampler's log-probs */
            int64_t n = dfg_shape_numel(t->shape);
            float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
            if (!v) return cli_error(CMD, CLI_FAILED, "%s: out of memory", path);
            for (int64_t i = 0; i < n; i++) v[i] = NO_LOGP;
            r->data[k] = v;
            r->unsampled = true;
            continue;
        }
        if (!f && !strcmp(t->name, TOOL_MASK) && t->dtype == DFG_F32) { /* every token the policy's */
            int64_t n = dfg_shape_numel(t->shape);
            float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
            if (!v) return cli_error(CMD, CLI_FAILED, "%s: out of memory", path);
            for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
            r->data[k] = v;
            r->untooled = true;
            continue;
        }
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
        int rc = t == start ? check_start(p, path, t, r->data[k]) : check_values(p, path, t, r->data[k]);
        if (rc) return rc;
    }
    return CLI_OK;
}

/* Switches off the rollout stages the pipeline declared. */
static int skip_stages(dfg_runtime *rt, const dfg_program *p, char *skipped, size_t len) {
    skipped[0] = '\0';
    for (int i = 0; i < p->decl.n_rollout_stages; i++) {
        const char *name = p->decl.rollout_stages[i];
        if (dfg_runtime_skip_stage(rt, name, true))
            return cli_error(CMD, CLI_FAILED, "skipping stage '%s': %s", name, dfg_runtime_error(rt));
        snprintf(skipped + strlen(skipped), len - strlen(skipped), "%s%s", skipped[0] ? ", " : "", name);
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
    for (int k = 1; k < r->n; k++) {
        const char *name = r->t[k]->name;
        cli_say(", %s%s", name, r->unpadded && !strcmp(name, "prompt_start") ? " (none in the file: no padding)"
                                : r->unsampled && !strcmp(name, SAMPLING_LOGPS) ? " (none in the file: no correction)"
                                : r->untooled && !strcmp(name, TOOL_MASK)       ? " (none in the file: no tools' tokens)"
                                                                                : "");
    }
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

/* What --dump writes besides the parameters: the pipeline's dfg_declare_dump entries. */
int cli_dump_check(const dfg_program *p, const char *plan) {
    if (!p->decl.n_dumps)
        return cli_error(CMD, CLI_USAGE, "%s: program '%s' declares nothing to dump (dfg_declare_dump); --save writes the "
                         "parameters", plan, p->name);
    return CLI_OK;
}

int cli_dump_write(dfg_runtime *rt, const char *path, const char *const *meta_kv, int n_meta) {
    const dfg_program *p = dfg_runtime_program(rt);
    int total = p->decl.n_dumps + p->n_tensors, n = 0;
    const char **names = calloc((size_t)total, sizeof(*names));
    const dfg_tensor **ts = calloc((size_t)total, sizeof(*ts));
    int rc = names && ts ? cli_dump_check(p, path) : cli_error(CMD, CLI_FAILED, "out of memory");
    for (int i = 0; i < p->decl.n_dumps && !rc; i++) names[n] = p->decl.dumps[i].name, ts[n++] = p->decl.dumps[i].t;
    for (int i = 0; i < p->n_tensors && !rc; i++) /* every PARAM, under its (Hugging Face) name */
        if (p->tensors[i]->kind == DFG_PARAM) names[n] = p->tensors[i]->name, ts[n++] = p->tensors[i];
    if (!rc) rc = cli_st_save(rt, path, names, (const dfg_tensor *const *)ts, n, meta_kv, n_meta, NULL, 0);
    free(names);
    free(ts);
    return rc;
}
