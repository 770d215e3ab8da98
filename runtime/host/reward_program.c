/* reward_program.c - a reward program (dfg run --reward-cmd): started once through /bin/sh -c in
 * its own process group, spoken to in JSON lines over a socket that is its stdin and stdout
 * (docs/rewards.md). A socket rather than two pipes: send(MSG_NOSIGNAL) reports a dead reader as
 * EPIPE instead of raising SIGPIPE in the process, and one fd polls both ways. Its own process
 * group keeps a terminal's Ctrl-C away from it (dfg finishes the step, then checkpoints) and lets a
 * timeout kill whatever it started too.
 *
 * Every wait has a deadline (the timeout): a program that hangs is killed, one that dies is
 * reaped and its exit status named, and an answer is checked value by value before any reward is
 * used, each failure one line naming the step, the row and the reason. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "reward_internal.h"

extern char **environ;

#define MAX_LINE ((size_t)64 << 20) /* an answer: N rows x F numbers; 64 MiB is far beyond any */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dfg_status failf(char *err, size_t len, dfg_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static dfg_status failf(char *err, size_t len, dfg_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return st;
}

/* ---------------------------------------------------------------- the process */
/* Kills the program's process group and reaps it. */
static void kill_program(dfg_reward_source *s) {
    if (s->pid > 0) {
        kill(-s->pid, SIGKILL);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {}
        s->pid = 0;
    }
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    s->dead = true;
}

/* The program closed its end: why, in words ("exited with status 3", "was killed by signal 9"),
 * after reaping it (waiting up to a second for the exit that follows a closed stdout). */
static void describe_exit(dfg_reward_source *s, char *buf, size_t len) {
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 100 && s->pid > 0 && (r = waitpid(s->pid, &status, WNOHANG)) == 0; i++) usleep(10000);
    if (r == s->pid) {
        s->pid = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) > 128) /* /bin/sh's report of a child the signal killed */
            snprintf(buf, len, "exited with status %d (a shell's report of signal %d, %s)", WEXITSTATUS(status),
                     WEXITSTATUS(status) - 128, strsignal(WEXITSTATUS(status) - 128));
        else if (WIFEXITED(status)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else snprintf(buf, len, "stopped");
    } else {
        snprintf(buf, len, "closed its output");
    }
    kill_program(s);
}

dfg_status dfg_reward_program_start(dfg_reward_source *s, const char *cmd, char *err, size_t err_len);

/* ---------------------------------------------------------------- lines with deadlines */
static dfg_status grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return DFG_OK;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return DFG_ERR_NOMEM;
    *buf = b;
    *cap = c;
    return DFG_OK;
}

/* Reads what the program has written into s->in; 0 bytes at EOF means it is gone. */
static dfg_status read_some(dfg_reward_source *s, const char *when, char *err, size_t len) {
    if (s->in_len >= MAX_LINE)
        return failf(err, len, DFG_ERR_FORMAT, "%s: the reward program wrote a line longer than %zu bytes", when, MAX_LINE);
    if (grow(&s->in, &s->in_cap, s->in_len + 65536)) return failf(err, len, DFG_ERR_NOMEM, "%s: out of memory", when);
    ssize_t r = recv(s->fd, s->in + s->in_len, s->in_cap - s->in_len - 1, MSG_DONTWAIT);
    if (r > 0) {
        s->in_len += (size_t)r;
        return DFG_OK;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return DFG_OK;
    char how[160];
    describe_exit(s, how, sizeof(how));
    return failf(err, len, DFG_ERR_IO, "%s: it %s", when, how);
}

/* Waits for fd to be ready for `events` until the deadline; a timeout kills the program. */
static dfg_status wait_ready(dfg_reward_source *s, short events, double deadline, const char *when, short *got,
                             char *err, size_t len) {
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            kill_program(s);
            return failf(err, len, DFG_ERR_IO, "%s: no answer within %g s (--reward-timeout): "
                         "killed it", when, s->timeout_s);
        }
        struct pollfd p = {.fd = s->fd, .events = events};
        int r = poll(&p, 1, (int)(left * 1e3) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return failf(err, len, DFG_ERR_IO, "%s: poll: %s", when, strerror(errno));
        if (r > 0) {
            *got = p.revents;
            return DFG_OK;
        }
    }
}

/* Sends s->out whole, reading whatever the program writes meanwhile (it may answer early). */
static dfg_status send_request(dfg_reward_source *s, double deadline, const char *when, char *err, size_t len) {
    for (size_t off = 0; off < s->out_len;) {
        short got = 0;
        dfg_status st = wait_ready(s, POLLOUT | POLLIN, deadline, when, &got, err, len);
        if (st) return st;
        if (got & POLLIN && (st = read_some(s, when, err, len))) return st;
        if (!(got & (POLLOUT | POLLERR | POLLHUP))) continue;
        ssize_t w = send(s->fd, s->out + off, s->out_len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            char how[160];
            describe_exit(s, how, sizeof(how));
            return failf(err, len, DFG_ERR_IO, "%s: it %s", when, how);
        }
    }
    return DFG_OK;
}

/* The next line the program writes (NUL-terminated in s->in, without its '\n'); *used: the bytes
 * to drop from s->in once the line is parsed. */
static dfg_status read_line(dfg_reward_source *s, double deadline, const char *when, char **line, size_t *used,
                            char *err, size_t len) {
    for (;;) {
        char *nl = s->in_len ? memchr(s->in, '\n', s->in_len) : NULL;
        if (nl) {
            *nl = '\0';
            if (nl > s->in && nl[-1] == '\r') nl[-1] = '\0';
            *line = s->in;
            *used = (size_t)(nl - s->in) + 1;
            return DFG_OK;
        }
        short got = 0;
        dfg_status st = wait_ready(s, POLLIN, deadline, when, &got, err, len);
        if (!st) st = read_some(s, when, err, len);
        if (st) return st;
    }
}

static void drop_line(dfg_reward_source *s, size_t used) {
    memmove(s->in, s->in + used, s->in_len - used);
    s->in_len -= used;
}

/* Text from the program in a message: its first 80 bytes, control bytes as '?'. */
static const char *shown(const char *t, char *buf, size_t cap) {
    size_t n = 0;
    for (; t[n] && n < 80 && n + 4 < cap; n++) buf[n] = (unsigned char)t[n] < 32 ? '?' : t[n];
    snprintf(buf + n, cap - n, "%s", t[n] ? "..." : "");
    return buf;
}

/* ---------------------------------------------------------------- start and stop */
dfg_status dfg_reward_program_start(dfg_reward_source *s, const char *cmd, char *err, size_t err_len) {
    snprintf(s->desc, sizeof(s->desc), "reward program '%.200s'", cmd);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return failf(err, err_len, DFG_ERR_IO, "%s: socketpair: %s", s->desc, strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], STDIN_FILENO); /* dup2 clears CLOEXEC on 0 and 1 */
    posix_spawn_file_actions_adddup2(&fa, sv[1], STDOUT_FILENO);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &def);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid = 0;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sv[1]);
    if (rc) {
        close(sv[0]);
        return failf(err, err_len, DFG_ERR_IO, "%s: cannot start /bin/sh: %s", s->desc, strerror(rc));
    }
    s->pid = pid;
    s->fd = sv[0];
    snprintf(s->desc, sizeof(s->desc), "reward program '%.200s' (pid %d)", cmd, (int)pid);

    char *line = NULL, when[400];
    size_t used = 0;
    snprintf(when, sizeof(when), "%s, its first line", s->desc);
    dfg_status st = read_line(s, now_s() + s->timeout_s, when, &line, &used, err, err_len);
    if (st) return st;
    cJSON *hello = cJSON_ParseWithLength(line, used - 1);
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
    drop_line(s, used);
    if (st) kill_program(s);
    return st;
}

void dfg_reward_program_stop(dfg_reward_source *s) {
    if (s->fd >= 0) {
        close(s->fd); /* EOF on its stdin: the protocol's "we are done" */
        s->fd = -1;
    }
    int status;
    for (int i = 0; i < 200 && s->pid > 0; i++) { /* two seconds to exit on its own */
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) s->pid = 0;
        else usleep(10000);
    }
    kill_program(s);
}

/* ---------------------------------------------------------------- a request */
static bool put(dfg_reward_source *s, const char *text, size_t n) {
    if (grow(&s->out, &s->out_cap, s->out_len + n + 1)) return false;
    memcpy(s->out + s->out_len, text, n);
    s->out_len += n;
    return true;
}

static bool putf(dfg_reward_source *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool putf(dfg_reward_source *s, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return n > 0 && (size_t)n < sizeof(buf) && put(s, buf, (size_t)n);
}

static bool put_str(dfg_reward_source *s, const char *text) { return put(s, text, strlen(text)); }

static bool put_ids(dfg_reward_source *s, const int32_t *ids, int64_t n) {
    bool ok = put_str(s, "[");
    for (int64_t i = 0; ok && i < n; i++) ok = putf(s, i ? ",%d" : "%d", (int)ids[i]);
    return ok && put_str(s, "]");
}

/* {"step":S,"rows":[{"index":I,"prompt_ids":[..],"completion_ids":[..],"truncated":B,"fields":{..}},..]}\n */
static bool build_request(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step) {
    s->out_len = 0;
    bool ok = putf(s, "{\"step\":%lld,\"rows\":[", (long long)step);
    for (int64_t i = 0; ok && i < n; i++) {
        const dfg_reward_row *r = &rows[i];
        const char *fields = r->fields && *r->fields ? r->fields : "{}";
        ok = putf(s, "%s{\"index\":%lld,\"prompt_ids\":", i ? "," : "", (long long)r->index) &&
             put_ids(s, r->prompt_ids, r->n_prompt) && put_str(s, ",\"completion_ids\":") &&
             put_ids(s, r->completion_ids, r->n_completion) &&
             putf(s, ",\"truncated\":%s,\"fields\":", r->truncated ? "true" : "false") &&
             put_str(s, fields) && put_str(s, "}");
    }
    return ok && put_str(s, "]}\n");
}

/* ---------------------------------------------------------------- an answer */
/* Does the line hold a bare NaN or Infinity (outside any string)? Python's json.dumps writes them
 * for float('nan') by default, and JSON has no such values: the answer's "does not apply" is null. */
static bool has_bare_nan(const char *t, size_t n) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        if (in_str) {
            if (t[i] == '\\') i++;
            else if (t[i] == '"') in_str = false;
        } else if (t[i] == '"') {
            in_str = true;
        } else if ((n - i >= 3 && !strncmp(t + i, "NaN", 3)) || (n - i >= 8 && !strncmp(t + i, "Infinity", 8))) {
            return true;
        }
    }
    return false;
}

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
    if (!a && has_bare_nan(line, n_line)) {
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

dfg_status dfg_reward_program_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                    float *out, char *err, size_t err_len) {
    char when[400];
    snprintf(when, sizeof(when), "step %lld, %s", (long long)step, s->desc);
    if (s->dead || s->fd < 0) return failf(err, err_len, DFG_ERR_IO, "%s: the program is no longer running", when);
    if (!build_request(s, rows, n, step)) return failf(err, err_len, DFG_ERR_NOMEM, "%s: out of memory", when);
    double deadline = now_s() + s->timeout_s;
    dfg_status st = send_request(s, deadline, when, err, err_len);
    char *line = NULL;
    size_t used = 0;
    if (!st) st = read_line(s, deadline, when, &line, &used, err, err_len);
    if (st) return st;
    st = dfg_reward_parse_answer(s, line, used - 1, n, step, out, err, err_len);
    drop_line(s, used);
    return st;
}
