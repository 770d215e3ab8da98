/* env_program.c - an environment program (dfg run --env-cmd; dfg_env.h): tools or an environment
 * class behind JSON lines (jsonl_program.c: its own process group, a socket for its stdin and
 * stdout, every wait with a deadline; docs/agents.md is the protocol; tools/env_server.py serves
 * it). Here: the hello, the three requests (reset, turns, finish) and their answers, checked
 * field by field before dfg uses any of them: each failure is one line naming the step, the row
 * and the reason, and a malformed answer never crashes dfg. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../dfg_runtime.h"
#include "dfg_env.h"
#include "jsonl_program.h"

#define failf dfg_jsonl_fail
#define shown dfg_jsonl_shown

struct dfg_env_source {
    dfg_jsonl_program prog;
    double turn_timeout_s;
    int n_tools;
    char *tools[DFG_ENV_MAX_TOOLS];
    char *reward;       /* the environment class's reward name; NULL: none */
    int32_t *ids;       /* the last answer's ids (prompts or suffixes), which the answers point into */
    size_t n_ids, cap_ids;
    char **messages;    /* finish's conversations, one JSON text per row */
    int64_t n_messages;
};

/* ---------------------------------------------------------------- the hello */
/* {"tools": [names], "reward": "ClassName" | null} */
static dfg_status take_hello(dfg_env_source *s, const char *line, size_t n_line, char *err, size_t len) {
    cJSON *hello = cJSON_ParseWithLength(line, n_line);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(hello, "tools");
    const cJSON *reward = cJSON_GetObjectItemCaseSensitive(hello, "reward");
    const char *names[DFG_ENV_MAX_TOOLS] = {0};
    int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
    char buf[100], why[256] = "";
    dfg_status st = DFG_OK;
    if (!cJSON_IsObject(hello) || n < 0 || (reward && !cJSON_IsNull(reward) && !cJSON_IsString(reward))) {
        st = failf(err, len, DFG_ERR_FORMAT, "%s: its first line must be {\"tools\": [names], \"reward\": name or null}, "
                   "got '%s'", s->prog.desc, shown(line, buf, sizeof(buf)));
    } else {
        for (int i = 0; i < n && i < DFG_ENV_MAX_TOOLS; i++) {
            const cJSON *v = cJSON_GetArrayItem(tools, i);
            names[i] = cJSON_IsString(v) ? v->valuestring : NULL;
        }
        const char *rname = cJSON_IsString(reward) ? reward->valuestring : NULL;
        if ((st = dfg_jsonl_check_names(names, n, DFG_ENV_MAX_TOOLS, "tool", why, sizeof(why))) ||
            (rname && (st = dfg_jsonl_check_names(&rname, 1, 1, "reward", why, sizeof(why)))))
            failf(err, len, st, "%s: %s", s->prog.desc, why);
        for (int i = 0; !st && i < n; i++) {
            if (!(s->tools[i] = strdup(names[i]))) st = failf(err, len, DFG_ERR_NOMEM, "out of memory");
            else s->n_tools = i + 1;
        }
        if (!st && rname && !(s->reward = strdup(rname))) st = failf(err, len, DFG_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(hello);
    return st;
}

dfg_status dfg_env_program_open(const char *cmd, double timeout_s, double turn_timeout_s, dfg_env_source **out,
                                char *err, size_t err_len) {
    if (out) *out = NULL;
    if (!out || !cmd || !*cmd || !(timeout_s > 0) || !(turn_timeout_s > 0))
        return failf(err, err_len, DFG_ERR_ARG, "--env-cmd: needs a command and timeouts > 0");
    dfg_env_source *s = calloc(1, sizeof(*s));
    if (!s) return failf(err, err_len, DFG_ERR_NOMEM, "out of memory");
    dfg_jsonl_init(&s->prog, "--env-timeout");
    s->turn_timeout_s = turn_timeout_s;
    dfg_status st = dfg_jsonl_start(&s->prog, "environment program", cmd, err, err_len);
    char *line = NULL, when[400];
    size_t n_line = 0;
    snprintf(when, sizeof(when), "%s, its first line", s->prog.desc);
    if (!st) st = dfg_jsonl_read_line(&s->prog, timeout_s, when, &line, &n_line, err, err_len);
    if (!st) st = take_hello(s, line, n_line, err, err_len);
    if (st) {
        dfg_jsonl_kill(&s->prog); /* a program that said something else is not waited for */
        dfg_env_source_free(s);
        return st;
    }
    *out = s;
    return DFG_OK;
}

static void free_messages(dfg_env_source *s) {
    for (int64_t i = 0; i < s->n_messages; i++) cJSON_free(s->messages[i]);
    free(s->messages);
    s->messages = NULL;
    s->n_messages = 0;
}

void dfg_env_source_free(dfg_env_source *s) {
    if (!s) return;
    dfg_jsonl_free(&s->prog);
    for (int i = 0; i < s->n_tools; i++) free(s->tools[i]);
    free(s->reward);
    free(s->ids);
    free_messages(s);
    free(s);
}

int dfg_env_source_n_tools(const dfg_env_source *s) { return s ? s->n_tools : 0; }
const char *dfg_env_source_tool(const dfg_env_source *s, int i) { return s && i >= 0 && i < s->n_tools ? s->tools[i] : NULL; }
int dfg_env_source_has_reward(const dfg_env_source *s) { return s && s->reward; }
const char *dfg_env_source_reward_name(const dfg_env_source *s) { return s ? s->reward : NULL; }
const char *dfg_env_source_desc(const dfg_env_source *s) { return s ? s->prog.desc : ""; }

dfg_status dfg_env_source_check(const dfg_env_source *s, const dfg_program *p, char *err, size_t err_len) {
    if (!s || !p) return DFG_ERR_ARG;
    const char *want = dfg_program_has(p, "tools") ? dfg_program_str(p, "tools") : ""; /* "a,b" */
    char have[DFG_ENV_MAX_TOOLS * 66] = "";
    for (int i = 0; i < s->n_tools; i++)
        snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s", i ? "," : "", s->tools[i]);
    if (!strcmp(want, have)) return DFG_OK;
    if (!*want)
        return failf(err, err_len, DFG_ERR_ARG, "%s serves the tools %s, but the plan was compiled without tools "
                     "(compile with --set tools=%s)", s->prog.desc, have, have);
    return failf(err, err_len, DFG_ERR_ARG, "%s serves the tools %s, but the plan was compiled with tools=%s "
                 "(compile with --set tools=%s)", s->prog.desc, have, want, have);
}

dfg_env_source *dfg_host_env_source(dfg_host_ctx *ctx) { return dfg_host_service(ctx, DFG_ENV_SERVICE); }

/* ---------------------------------------------------------------- answers */
/* The answer line as an object holding the array `key` of n items; an {"error": ...} answer, a
 * malformed line or a wrong count is one line in err. */
static dfg_status parse_answer(const char *line, size_t n_line, const char *key, int64_t n, const char *when,
                               cJSON **out, char *err, size_t len) {
    char buf[100];
    cJSON *a = cJSON_ParseWithLength(line, n_line);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(a, key), *error = cJSON_GetObjectItemCaseSensitive(a, "error");
    dfg_status st = DFG_OK;
    if (!a && dfg_jsonl_has_bare_nan(line, n_line))
        st = failf(err, len, DFG_ERR_FORMAT, "%s: the answer holds NaN or Infinity, which are not JSON (a reward that "
                   "does not apply is null): '%s'", when, shown(line, buf, sizeof(buf)));
    else if (!cJSON_IsObject(a))
        st = failf(err, len, DFG_ERR_FORMAT, "%s: the answer is not a JSON object: '%s'", when, shown(line, buf, sizeof(buf)));
    else if (cJSON_IsString(error))
        st = failf(err, len, DFG_ERR_FORMAT, "%s: the program reported an error: %s", when,
                   shown(error->valuestring, buf, sizeof(buf)));
    else if (!cJSON_IsArray(items))
        st = failf(err, len, DFG_ERR_FORMAT, "%s: the answer has no \"%s\" array: '%s'", when, key,
                   shown(line, buf, sizeof(buf)));
    else if (cJSON_GetArraySize(items) != n)
        st = failf(err, len, DFG_ERR_FORMAT, "%s: the answer's \"%s\" has %d items, expected %lld (one per row, in "
                   "order)", when, key, cJSON_GetArraySize(items), (long long)n);
    if (st) cJSON_Delete(a);
    *out = st ? NULL : a;
    return st;
}

/* Room in s->ids for `more` ids; the answers already taken keep their offsets (pointers are set
 * once every row is read). */
static bool reserve_ids(dfg_env_source *s, size_t more) {
    if (s->n_ids + more <= s->cap_ids) return true;
    size_t cap = s->cap_ids ? s->cap_ids : 1024;
    while (cap < s->n_ids + more) cap *= 2;
    int32_t *ids = realloc(s->ids, cap * sizeof(*ids));
    if (!ids) return false;
    s->ids = ids;
    s->cap_ids = cap;
    return true;
}

/* A non-empty array of token ids (integers 0 .. 2^31-1) appended to s->ids; *at its offset. */
static dfg_status take_ids(dfg_env_source *s, const cJSON *v, const char *what, const char *when, int64_t row,
                           size_t *at, int64_t *n, char *err, size_t len) {
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 1)
        return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: %s is not a non-empty array of token ids", when,
                     (long long)row, what);
    if (!reserve_ids(s, (size_t)count)) return failf(err, len, DFG_ERR_NOMEM, "%s: out of memory", when);
    *at = s->n_ids;
    int k = 0;
    for (const cJSON *x = v->child; x; x = x->next, k++) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(d >= 0 && d <= 2147483647.0 && d == floor(d)))
            return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: %s[%d] is not a token id (an integer >= 0)", when,
                         (long long)row, what, k);
        s->ids[s->n_ids++] = (int32_t)d;
    }
    *n = count;
    return DFG_OK;
}

/* An integer field of a turn's answer within 0 .. max. */
static dfg_status take_count(const cJSON *item, const char *key, int max, const char *when, int64_t row, int *out,
                             char *err, size_t len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(d >= 0 && d <= max && d == floor(d)))
        return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: \"%s\" is not an integer 0 .. %d", when, (long long)row,
                     key, max);
    *out = (int)d;
    return DFG_OK;
}

/* ---------------------------------------------------------------- reset */
/* {"type":"reset","step":S,"rows":[{"index":I,"prompt_ids":[..],"fields":{..}},..]}\n */
static bool build_reset(dfg_jsonl_program *p, const dfg_env_row *rows, int64_t n, int64_t step) {
    dfg_jsonl_clear(p);
    bool ok = dfg_jsonl_putf(p, "{\"type\":\"reset\",\"step\":%lld,\"rows\":[", (long long)step);
    for (int64_t i = 0; ok && i < n; i++) {
        const char *fields = rows[i].fields && *rows[i].fields ? rows[i].fields : "{}";
        ok = dfg_jsonl_putf(p, "%s{\"index\":%lld,\"prompt_ids\":", i ? "," : "", (long long)rows[i].index) &&
             dfg_jsonl_put_ids(p, rows[i].prompt_ids, rows[i].n_prompt) && dfg_jsonl_put_str(p, ",\"fields\":") &&
             dfg_jsonl_put_str(p, fields) && dfg_jsonl_put_str(p, "}");
    }
    return ok && dfg_jsonl_put_str(p, "]}\n");
}

dfg_status dfg_env_reset(dfg_env_source *s, const dfg_env_row *rows, int64_t n, int64_t step, dfg_env_prompt *out,
                         char *err, size_t err_len) {
    if (!s || (!rows && n) || (!out && n) || n < 0) return failf(err, err_len, DFG_ERR_ARG, "dfg_env_reset: bad arguments");
    char when[400], *line = NULL;
    size_t n_line = 0, *at = NULL;
    snprintf(when, sizeof(when), "step %lld, %s, reset", (long long)step, s->prog.desc);
    if (!build_reset(&s->prog, rows, n, step)) return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    cJSON *a = NULL;
    dfg_status st = dfg_jsonl_call(&s->prog, s->turn_timeout_s, when, &line, &n_line, err, err_len);
    if (!st) st = parse_answer(line, n_line, "prompts", n, when, &a, err, err_len);
    if (!st && !(at = calloc((size_t)n + 1, sizeof(*at)))) st = failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    s->n_ids = 0;
    int64_t i = 0;
    for (const cJSON *v = a ? cJSON_GetObjectItemCaseSensitive(a, "prompts")->child : NULL; !st && v; v = v->next, i++) {
        out[i] = (dfg_env_prompt){0};
        if (!cJSON_IsNull(v)) st = take_ids(s, v, "its new prompt", when, i, &at[i], &out[i].n_prompt, err, err_len);
    }
    for (i = 0; !st && i < n; i++) /* s->ids has its final address now */
        out[i].prompt_ids = out[i].n_prompt ? s->ids + at[i] : NULL;
    free(at);
    cJSON_Delete(a);
    return st;
}

/* ---------------------------------------------------------------- turns */
/* {"type":"turns","step":S,"turns":[{"row":R,"ids":[..],"room":K,"last":B},..]}\n */
static bool build_turns(dfg_jsonl_program *p, const dfg_env_turn *turns, int64_t n, int64_t step) {
    dfg_jsonl_clear(p);
    bool ok = dfg_jsonl_putf(p, "{\"type\":\"turns\",\"step\":%lld,\"turns\":[", (long long)step);
    for (int64_t i = 0; ok && i < n; i++)
        ok = dfg_jsonl_putf(p, "%s{\"row\":%lld,\"ids\":", i ? "," : "", (long long)turns[i].row) &&
             dfg_jsonl_put_ids(p, turns[i].turn_ids, turns[i].n_turn) &&
             dfg_jsonl_putf(p, ",\"room\":%lld,\"last\":%s}", (long long)turns[i].room, turns[i].last ? "true" : "false");
    return ok && dfg_jsonl_put_str(p, "]}\n");
}

/* One turn's answer: {"done": B, "suffix_ids": [..] (when not done), "calls": C, "failures": F}. */
static dfg_status take_turn(dfg_env_source *s, const cJSON *item, const dfg_env_turn *t, const char *when,
                            dfg_env_answer *out, size_t *at, char *err, size_t len) {
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(item, "done");
    *out = (dfg_env_answer){0};
    if (!cJSON_IsObject(item) || !cJSON_IsBool(done))
        return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: the turn's answer is not an object with \"done\": true or "
                     "false", when, (long long)t->row);
    dfg_status st = take_count(item, "calls", 1 << 20, when, t->row, &out->calls, err, len);
    if (!st) st = take_count(item, "failures", out->calls, when, t->row, &out->failures, err, len);
    if (st) return st;
    out->done = cJSON_IsTrue(done);
    if (out->done) return DFG_OK;
    if (t->last)
        return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: the program continued the episode after its last turn "
                     "(\"last\": true asks for \"done\": true)", when, (long long)t->row);
    st = take_ids(s, cJSON_GetObjectItemCaseSensitive(item, "suffix_ids"), "\"suffix_ids\"", when, t->row, at,
                  &out->n_suffix, err, len);
    if (!st && out->n_suffix > t->room)
        st = failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: the program answered %lld suffix ids for a row with room "
                   "for %lld (it must end the episode instead: \"done\": true)", when, (long long)t->row,
                   (long long)out->n_suffix, (long long)t->room);
    return st;
}

dfg_status dfg_env_turns(dfg_env_source *s, const dfg_env_turn *turns, int64_t n, int64_t step, dfg_env_answer *out,
                         char *err, size_t err_len) {
    if (!s || (!turns && n) || (!out && n) || n < 0) return failf(err, err_len, DFG_ERR_ARG, "dfg_env_turns: bad arguments");
    char when[400], *line = NULL;
    size_t n_line = 0, *at = NULL;
    snprintf(when, sizeof(when), "step %lld, %s, turns", (long long)step, s->prog.desc);
    if (!build_turns(&s->prog, turns, n, step)) return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    cJSON *a = NULL;
    dfg_status st = dfg_jsonl_call(&s->prog, s->turn_timeout_s, when, &line, &n_line, err, err_len);
    if (!st) st = parse_answer(line, n_line, "turns", n, when, &a, err, err_len);
    if (!st && !(at = calloc((size_t)n + 1, sizeof(*at)))) st = failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    s->n_ids = 0;
    int64_t i = 0;
    for (const cJSON *v = a ? cJSON_GetObjectItemCaseSensitive(a, "turns")->child : NULL; !st && v; v = v->next, i++)
        st = take_turn(s, v, &turns[i], when, &out[i], &at[i], err, err_len);
    for (i = 0; !st && i < n; i++) out[i].suffix_ids = out[i].n_suffix ? s->ids + at[i] : NULL;
    free(at);
    cJSON_Delete(a);
    return st;
}

/* ---------------------------------------------------------------- finish */
/* One row's reward: a finite number or null (NaN: none). */
static dfg_status take_reward(const dfg_env_source *s, const cJSON *v, const char *when, int64_t row, float *out,
                              char *err, size_t len) {
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return DFG_OK;
    }
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && fabs(v->valuedouble) <= 3.4e38) {
        *out = (float)v->valuedouble;
        return DFG_OK;
    }
    return failf(err, len, DFG_ERR_FORMAT, "%s, row %lld: the reward '%s' is not a finite number or null", when,
                 (long long)row, s->reward);
}

/* {"type":"finish","step":S,"n":N} -> {"messages":[[..],..], "rewards":[r|null,..] (with a reward)} */
dfg_status dfg_env_finish(dfg_env_source *s, int64_t n, int64_t step, float *out, const char **messages, char *err,
                          size_t err_len) {
    if (!s || n < 0 || (!messages && n) || (s->reward && !out && n))
        return failf(err, err_len, DFG_ERR_ARG, "dfg_env_finish: bad arguments");
    char when[400], *line = NULL;
    size_t n_line = 0;
    snprintf(when, sizeof(when), "step %lld, %s, finish", (long long)step, s->prog.desc);
    free_messages(s);
    dfg_jsonl_clear(&s->prog);
    if (!dfg_jsonl_putf(&s->prog, "{\"type\":\"finish\",\"step\":%lld,\"n\":%lld}\n", (long long)step, (long long)n))
        return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    cJSON *a = NULL;
    dfg_status st = dfg_jsonl_call(&s->prog, s->turn_timeout_s, when, &line, &n_line, err, err_len);
    if (!st) st = parse_answer(line, n_line, "messages", n, when, &a, err, err_len);
    const cJSON *rewards = a ? cJSON_GetObjectItemCaseSensitive(a, "rewards") : NULL;
    if (!st && s->reward && (!cJSON_IsArray(rewards) || cJSON_GetArraySize(rewards) != n))
        st = failf(err, err_len, DFG_ERR_FORMAT, "%s: the answer's \"rewards\" is not an array of %lld values (the "
                   "program declared the reward '%s')", when, (long long)n, s->reward);
    if (!st && !(s->messages = calloc((size_t)n + 1, sizeof(*s->messages))))
        st = failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    int64_t i = 0;
    const cJSON *r = cJSON_IsArray(rewards) ? rewards->child : NULL;
    for (const cJSON *v = a ? cJSON_GetObjectItemCaseSensitive(a, "messages")->child : NULL; !st && v;
         v = v->next, r = r ? r->next : NULL, i++) {
        if (!cJSON_IsArray(v)) {
            st = failf(err, err_len, DFG_ERR_FORMAT, "%s, row %lld: the row's messages are not an array", when, (long long)i);
            break;
        }
        if (!(s->messages[i] = cJSON_PrintUnformatted(v))) st = failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
        s->n_messages = i + 1;
        messages[i] = s->messages[i];
        if (!st && s->reward) st = take_reward(s, r, when, i, &out[i], err, err_len);
    }
    cJSON_Delete(a);
    return st;
}
