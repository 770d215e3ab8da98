/* reward_program.c - a reward program (dfg run --reward-cmd): a program spoken to in JSON lines
 * (jsonl_program.c: its own process group, a socket for its stdin and stdout, every wait with a
 * deadline; docs/rewards.md is the protocol). Here: the hello, the request, and the answer,
 * checked value by value before any reward is used, each failure one line naming the step, the
 * row and the reason. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "reward_internal.h"

#define failf dfg_jsonl_fail
#define shown dfg_jsonl_shown

/* ---------------------------------------------------------------- start and stop */
dfg_status dfg_reward_program_start(dfg_reward_source *s, const char *cmd, char *err, size_t err_len) {
    dfg_jsonl_init(&s->prog, "--reward-timeout");
    dfg_status st = dfg_jsonl_start(&s->prog, "reward program", cmd, err, err_len);
    snprintf(s->desc, sizeof(s->desc), "%s", s->prog.desc);
    if (st) return st;
    char *line = NULL, when[400];
    size_t n_line = 0;
    snprintf(when, sizeof(when), "%s, its first line", s->desc);
    if ((st = dfg_jsonl_read_line(&s->prog, s->timeout_s, when, &line, &n_line, err, err_len))) return st;
    cJSON *hello = cJSON_ParseWithLength(line, n_line);
    const cJSON *funcs = cJSON_GetObjectItemCaseSensitive(hello, "reward_funcs");
    const char *names[DFG_REWARD_MAX_FUNCS] = {0};
    int n = cJSON_IsArray(funcs) ? cJSON_GetArraySize(funcs) : -1;
    char buf[100], why[256] = "";
    if (!cJSON_IsObject(hello) || n < 0) {
        st = failf(err, err_len, DFG_ERR_FORMAT, "%s: its first line must be {\"reward_funcs\": [names]}, got '%s'",
                   s->desc, shown(line, buf, sizeof(buf)));
    } else {
        for (int i = 0; i < n && i < DFG_REWARD_MAX_FUNCS; i++) {
            const cJSON *v = cJSON_GetArrayItem(funcs, i);
            names[i] = cJSON_IsString(v) ? v->valuestring : NULL;
        }
        if ((st = dfg_reward_set_names(s, names, n, why, sizeof(why)))) failf(err, err_len, st, "%s: %s", s->desc, why);
    }
    cJSON_Delete(hello);
    if (st) dfg_jsonl_kill(&s->prog);
    return st;
}

void dfg_reward_program_stop(dfg_reward_source *s) { dfg_jsonl_free(&s->prog); }

/* ---------------------------------------------------------------- a request */
/* {"step":S,"rows":[{"index":I,"prompt_ids":[..],"completion_ids":[..],"truncated":B,"fields":{..}
 * [,"messages":[..]]},..]}\n */
static bool build_request(dfg_jsonl_program *p, const dfg_reward_row *rows, int64_t n, int64_t step) {
    dfg_jsonl_clear(p);
    bool ok = dfg_jsonl_putf(p, "{\"step\":%lld,\"rows\":[", (long long)step);
    for (int64_t i = 0; ok && i < n; i++) {
        const dfg_reward_row *r = &rows[i];
        const char *fields = r->fields && *r->fields ? r->fields : "{}";
        ok = dfg_jsonl_putf(p, "%s{\"index\":%lld,\"prompt_ids\":", i ? "," : "", (long long)r->index) &&
             dfg_jsonl_put_ids(p, r->prompt_ids, r->n_prompt) && dfg_jsonl_put_str(p, ",\"completion_ids\":") &&
             dfg_jsonl_put_ids(p, r->completion_ids, r->n_completion) &&
             dfg_jsonl_putf(p, ",\"truncated\":%s,\"fields\":", r->truncated ? "true" : "false") &&
             dfg_jsonl_put_str(p, fields);
        if (ok && r->messages && *r->messages)
            ok = dfg_jsonl_put_str(p, ",\"messages\":") && dfg_jsonl_put_str(p, r->messages);
        ok = ok && dfg_jsonl_put_str(p, "}");
    }
    return ok && dfg_jsonl_put_str(p, "]}\n");
}

/* ---------------------------------------------------------------- an answer */
/* One value of row i: a finite number (within float's range) or null (NaN). */
static dfg_status take_value(const dfg_reward_source *s, const cJSON *v, int64_t step, int64_t i, int f, float *out,
                             char *err, size_t len) {
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return DFG_OK;
    }
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && fabs(v->valuedouble) <= FLT_MAX) {
        *out = (float)v->valuedouble;
        return DFG_OK;
    }
    char *text = cJSON_PrintUnformatted(v), buf[100];
    dfg_status st = failf(err, len, DFG_ERR_FORMAT, "step %lld, row %lld: the reward program's value for '%s' is %s, "
                          "not a finite number or null", (long long)step, (long long)i, s->names[f],
                          text ? shown(text, buf, sizeof(buf)) : "(unprintable)");
    cJSON_free(text);
    return st;
}

dfg_status dfg_reward_parse_answer(const dfg_reward_source *s, const char *line, size_t n_line, int64_t n, int64_t step,
                                   float *out, char *err, size_t len) {
    char buf[100];
    int F = s->n_funcs;
    cJSON *a = cJSON_ParseWithLength(line, n_line);
    const cJSON *rewards = cJSON_GetObjectItemCaseSensitive(a, "rewards");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(a, "error");
    dfg_status st = DFG_OK;
    if (!a && dfg_jsonl_has_bare_nan(line, n_line)) {
        st = failf(err, len, DFG_ERR_FORMAT, "step %lld: the reward program's answer holds NaN or Infinity, which are not "
                   "JSON (a value that does not apply is null, TRL's None; Python: json.dumps(..., allow_nan=False) "
                   "catches them): '%s'", (long long)step, shown(line, buf, sizeof(buf)));
    } else if (!cJSON_IsObject(a)) {
        st = failf(err, len, DFG_ERR_FORMAT, "step %lld: the reward program's answer is not a JSON object: '%s'",
                   (long long)step, shown(line, buf, sizeof(buf)));
    } else if (cJSON_IsString(error)) {
        st = failf(err, len, DFG_ERR_FORMAT, "step %lld: the reward program reported an error: %s", (long long)step,
                   shown(error->valuestring, buf, sizeof(buf)));
    } else if (!cJSON_IsArray(rewards)) {
        st = failf(err, len, DFG_ERR_FORMAT, "step %lld: the reward program's answer has no \"rewards\" array: '%s'",
                   (long long)step, shown(line, buf, sizeof(buf)));
    } else if (cJSON_GetArraySize(rewards) != n) {
        st = failf(err, len, DFG_ERR_FORMAT, "step %lld: the reward program answered %d rows, expected %lld%s",
                   (long long)step, cJSON_GetArraySize(rewards), (long long)n,
                   cJSON_GetArraySize(rewards) < n ? " (row " : "");
        if (cJSON_GetArraySize(rewards) < n) /* name the first row without a reward */
            snprintf(err + strlen(err), len - strlen(err), "%d has none)", cJSON_GetArraySize(rewards));
    } else {
        int64_t i = 0;
        for (const cJSON *row = rewards->child; row && !st; row = row->next, i++) {
            if (F == 1 && !cJSON_IsArray(row)) { /* one function: a bare value per row */
                st = take_value(s, row, step, i, 0, &out[i], err, len);
                continue;
            }
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != F) {
                st = failf(err, len, DFG_ERR_FORMAT, "step %lld, row %lld: the reward program gave %d values, expected %d "
                           "(one per reward function)", (long long)step, (long long)i,
                           cJSON_IsArray(row) ? cJSON_GetArraySize(row) : 1, F);
                break;
            }
            int f = 0;
            for (const cJSON *v = row->child; v && !st; v = v->next, f++) st = take_value(s, v, step, i, f, &out[i * F + f], err, len);
        }
    }
    cJSON_Delete(a);
    return st;
}

/* The request goes out now; dfg_reward_program_collect reads its answer (async_rollouts: the
 * program scores while the host trains). */
dfg_status dfg_reward_program_submit(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step, char *err,
                                     size_t err_len) {
    char when[400];
    snprintf(when, sizeof(when), "step %lld, %s", (long long)step, s->desc);
    if (!build_request(&s->prog, rows, n, step)) return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    return dfg_jsonl_send(&s->prog, s->timeout_s, when, err, err_len);
}

dfg_status dfg_reward_program_collect(dfg_reward_source *s, int64_t n, int64_t step, float *out, char *err, size_t err_len) {
    char when[400], *line = NULL;
    size_t n_line = 0;
    snprintf(when, sizeof(when), "step %lld, %s", (long long)step, s->desc);
    dfg_status st = dfg_jsonl_read_line(&s->prog, s->timeout_s, when, &line, &n_line, err, err_len);
    return st ? st : dfg_reward_parse_answer(s, line, n_line, n, step, out, err, err_len);
}

dfg_status dfg_reward_program_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                    float *out, char *err, size_t err_len) {
    char when[400];
    snprintf(when, sizeof(when), "step %lld, %s", (long long)step, s->desc);
    if (!build_request(&s->prog, rows, n, step)) return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    char *line = NULL;
    size_t n_line = 0;
    dfg_status st = dfg_jsonl_call(&s->prog, s->timeout_s, when, &line, &n_line, err, err_len);
    return st ? st : dfg_reward_parse_answer(s, line, n_line, n, step, out, err, err_len);
}
