/* reward_source.c - a reward source (dfg_reward.h): the handle, its function names, and reward
 * plugins (a shared object scoring rows in-process). Programs: reward_program.c. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dfg_runtime.h"
#include "reward_internal.h"

dfg_status dfg_reward_set_names(dfg_reward_source *s, const char *const *names, int n, char *err, size_t err_len) {
    dfg_status st = dfg_jsonl_check_names(names, n, DFG_REWARD_MAX_FUNCS, "reward function", err, err_len);
    for (int i = 0; !st && i < n; i++) {
        if (!(s->names[i] = strdup(names[i]))) return dfg_jsonl_fail(err, err_len, DFG_ERR_NOMEM, "out of memory");
        s->n_funcs = i + 1; /* what dfg_reward_source_free frees */
    }
    return st;
}

static dfg_reward_source *source_new(dfg_reward_kind kind) {
    dfg_reward_source *s = calloc(1, sizeof(*s));
    if (s) s->kind = kind, dfg_jsonl_init(&s->prog, "--reward-timeout");
    return s;
}

dfg_status dfg_reward_program_open(const char *cmd, double timeout_s, dfg_reward_source **out, char *err,
                                   size_t err_len) {
    char why[512] = "";
    if (out) *out = NULL;
    if (!out || !cmd || !*cmd || !(timeout_s > 0)) {
        snprintf(err, err_len, "--reward-cmd: needs a command and a timeout > 0");
        return DFG_ERR_ARG;
    }
    dfg_reward_source *s = source_new(DFG_REWARD_PROGRAM);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return DFG_ERR_NOMEM;
    }
    s->timeout_s = timeout_s;
    dfg_status st = dfg_reward_program_start(s, cmd, why, sizeof(why));
    if (st) {
        snprintf(err, err_len, "%s", why);
        dfg_reward_source_free(s);
        return st;
    }
    *out = s;
    return DFG_OK;
}

dfg_status dfg_reward_plugin_open(const char *path, dfg_reward_source **out, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (!out || !path || !*path) {
        snprintf(err, err_len, "--reward-lib: needs a path");
        return DFG_ERR_ARG;
    }
    dfg_reward_source *s = source_new(DFG_REWARD_PLUGIN);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return DFG_ERR_NOMEM;
    }
    snprintf(s->desc, sizeof(s->desc), "reward plugin '%s'", path);
    /* a bare name would be searched on the library path: a path is what the user meant */
    char full[4200];
    snprintf(full, sizeof(full), "%s%s", strchr(path, '/') ? "" : "./", path);
    dfg_status st = DFG_OK;
    char why[400] = "";
    dfg_reward_funcs_fn funcs = NULL;
    if (!(s->lib = dlopen(full, RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        snprintf(why, sizeof(why), "cannot load it: %s", e ? e : "unknown error");
        st = DFG_ERR_IO;
    } else {
        *(void **)&funcs = dlsym(s->lib, "dfg_reward_funcs");
        *(void **)&s->score = dlsym(s->lib, "dfg_reward_score");
        if (!funcs || !s->score) {
            snprintf(why, sizeof(why), "it does not export %s (see runtime/host/dfg_reward.h)",
                     !funcs ? "dfg_reward_funcs" : "dfg_reward_score");
            st = DFG_ERR_FORMAT;
        }
    }
    if (!st) {
        const char *names[DFG_REWARD_MAX_FUNCS] = {0};
        int n = funcs(names, DFG_REWARD_MAX_FUNCS);
        st = dfg_reward_set_names(s, names, n, why, sizeof(why));
    }
    if (st) {
        snprintf(err, err_len, "%s: %s", s->desc, why);
        dfg_reward_source_free(s);
        return st;
    }
    *out = s;
    return DFG_OK;
}

void dfg_reward_source_free(dfg_reward_source *s) {
    if (!s) return;
    if (s->kind == DFG_REWARD_PROGRAM) dfg_reward_program_stop(s);
    if (s->lib) dlclose(s->lib);
    for (int i = 0; i < DFG_REWARD_MAX_PENDING; i++) free(s->pending[i].held);
    for (int i = 0; i < s->n_funcs; i++) free(s->names[i]);
    free(s);
}

int dfg_reward_source_n_funcs(const dfg_reward_source *s) { return s ? s->n_funcs : 0; }
const char *dfg_reward_source_func(const dfg_reward_source *s, int i) {
    return s && i >= 0 && i < s->n_funcs ? s->names[i] : NULL;
}
const char *dfg_reward_source_desc(const dfg_reward_source *s) { return s ? s->desc : ""; }

static dfg_status plugin_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step, float *out,
                               char *err, size_t err_len) {
    char why[512] = "";
    if (n > INT32_MAX) {
        snprintf(err, err_len, "step %lld: %lld rows are more than a plugin call takes", (long long)step, (long long)n);
        return DFG_ERR_ARG;
    }
    int rc = s->score(rows, (int)n, step, out, why, sizeof(why) - 1);
    why[sizeof(why) - 1] = '\0';
    if (rc) {
        snprintf(err, err_len, "step %lld: %s failed (%d): %s", (long long)step, s->desc, rc, why[0] ? why : "no message");
        return DFG_ERR_FORMAT;
    }
    for (int64_t i = 0; i < n * s->n_funcs; i++)
        if (isinf(out[i])) {
            snprintf(err, err_len, "step %lld, row %lld: %s gave function '%s' the value %g, not a finite number",
                     (long long)step, (long long)(i / s->n_funcs), s->desc, s->names[i % s->n_funcs], (double)out[i]);
            return DFG_ERR_FORMAT;
        }
    return DFG_OK;
}

dfg_status dfg_reward_source_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                   float *out, char *err, size_t err_len) {
    if (!s || (!rows && n) || !out || n < 0) {
        snprintf(err, err_len, "dfg_reward_source_score: bad arguments");
        return DFG_ERR_ARG;
    }
    return s->kind == DFG_REWARD_PLUGIN ? plugin_score(s, rows, n, step, out, err, err_len)
                                        : dfg_reward_program_score(s, rows, n, step, out, err, err_len);
}

dfg_status dfg_reward_source_submit(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step, char *err,
                                    size_t err_len) {
    if (!s || (!rows && n) || n < 0) {
        snprintf(err, err_len, "dfg_reward_source_submit: bad arguments");
        return DFG_ERR_ARG;
    }
    if (s->n_pending == DFG_REWARD_MAX_PENDING) {
        snprintf(err, err_len, "step %lld: %s still has %d requests unanswered (steps %lld and %lld; %d at a time)",
                 (long long)step, s->desc, s->n_pending, (long long)s->pending[0].step,
                 (long long)s->pending[s->n_pending - 1].step, DFG_REWARD_MAX_PENDING);
        return DFG_ERR_ARG;
    }
    dfg_status st = DFG_OK;
    float *held = NULL;
    if (s->kind == DFG_REWARD_PLUGIN) { /* called on the runtime's thread: it scores now, the values wait */
        if (!(held = malloc(sizeof(float) * (size_t)(n * s->n_funcs + 1)))) {
            snprintf(err, err_len, "out of memory");
            return DFG_ERR_NOMEM;
        }
        st = plugin_score(s, rows, n, step, held, err, err_len);
    } else st = dfg_reward_program_submit(s, rows, n, step, err, err_len);
    if (st) {
        free(held);
        return st;
    }
    int at = s->n_pending++;
    s->pending[at].n = n, s->pending[at].step = step, s->pending[at].held = held;
    return DFG_OK;
}

/* The oldest request's answer: a program answers its requests in the order it got them. */
dfg_status dfg_reward_source_collect(dfg_reward_source *s, int64_t n, float *out, char *err, size_t err_len) {
    if (!s || !out) {
        snprintf(err, err_len, "dfg_reward_source_collect: bad arguments");
        return DFG_ERR_ARG;
    }
    if (!s->n_pending) {
        snprintf(err, err_len, "%s: no request to collect an answer for", s->desc);
        return DFG_ERR_ARG;
    }
    int64_t want = s->pending[0].n, step = s->pending[0].step;
    if (n != want) {
        snprintf(err, err_len, "step %lld: %s: %lld rows were submitted, not %lld", (long long)step, s->desc,
                 (long long)want, (long long)n);
        return DFG_ERR_ARG;
    }
    float *held = s->pending[0].held;
    memmove(&s->pending[0], &s->pending[1], sizeof(s->pending[0]) * (size_t)(DFG_REWARD_MAX_PENDING - 1));
    s->pending[--s->n_pending].held = NULL;
    dfg_status st = DFG_OK;
    if (held) memcpy(out, held, sizeof(float) * (size_t)(want * s->n_funcs));
    else st = dfg_reward_program_collect(s, want, step, out, err, err_len);
    free(held);
    return st;
}

int dfg_reward_source_pending(const dfg_reward_source *s) { return s ? s->n_pending : 0; }

/* ---------------------------------------------------------------- a run's reward source */
dfg_status dfg_reward_source_check(const dfg_reward_source *s, const dfg_program *p, char *err, size_t err_len) {
    if (!s || !p) return DFG_ERR_ARG;
    const char *want = dfg_program_has(p, "reward_funcs") ? dfg_program_str(p, "reward_funcs") : NULL; /* "a,b" */
    char have[DFG_REWARD_MAX_FUNCS * 66] = "";
    for (int i = 0; i < dfg_reward_source_n_funcs(s); i++)
        snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s", i ? "," : "", dfg_reward_source_func(s, i));
    if (!want || !strcmp(want, have)) return DFG_OK;
    snprintf(err, err_len, "%s declares the reward functions %s, but the plan was compiled with reward_funcs=%s "
             "(compile with --set reward_funcs=%s)", dfg_reward_source_desc(s), have, want, have);
    return DFG_ERR_ARG;
}

dfg_reward_source *dfg_host_reward_source(dfg_host_ctx *ctx) { return dfg_host_service(ctx, DFG_REWARD_SERVICE); }
