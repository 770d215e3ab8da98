/* jsonl_program.c - a program spoken to in JSON lines (jsonl_program.h): started once through
 * /bin/sh -c in its own process group, its stdin and stdout one socket. A socket rather than two
 * pipes: send(MSG_NOSIGNAL) reports a dead reader as EPIPE instead of raising SIGPIPE in the
 * process, and one fd polls both ways. Its own process group keeps a terminal's Ctrl-C away from
 * it (dfg finishes the step, then checkpoints) and lets a timeout kill whatever it started too.
 *
 * Every wait has a deadline: a program that hangs is killed, one that dies is reaped and its exit
 * status named. What the program says is checked by its caller (reward_program.c, env_program.c). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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

#include "jsonl_program.h"

extern char **environ;

#define MAX_LINE ((size_t)64 << 20) /* an answer: N rows of numbers or ids; 64 MiB is far beyond any */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dfg_status dfg_jsonl_fail(char *err, size_t len, dfg_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return st;
}

void dfg_jsonl_init(dfg_jsonl_program *p, const char *timeout_option) {
    *p = (dfg_jsonl_program){.fd = -1, .timeout_option = timeout_option};
}

/* ---------------------------------------------------------------- the process */
void dfg_jsonl_kill(dfg_jsonl_program *p) {
    if (p->pid > 0) {
        kill(-p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {}
        p->pid = 0;
    }
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    p->dead = true;
}

/* The program closed its end: why, in words ("exited with status 3", "was killed by signal 9"),
 * after reaping it (waiting up to a second for the exit that follows a closed stdout). */
static void describe_exit(dfg_jsonl_program *p, char *buf, size_t len) {
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 100 && p->pid > 0 && (r = waitpid(p->pid, &status, WNOHANG)) == 0; i++) usleep(10000);
    if (r == p->pid) {
        p->pid = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) > 128) /* /bin/sh's report of a child the signal killed */
            snprintf(buf, len, "exited with status %d (a shell's report of signal %d, %s)", WEXITSTATUS(status),
                     WEXITSTATUS(status) - 128, strsignal(WEXITSTATUS(status) - 128));
        else if (WIFEXITED(status)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else snprintf(buf, len, "stopped");
    } else {
        snprintf(buf, len, "closed its output");
    }
    dfg_jsonl_kill(p);
}

dfg_status dfg_jsonl_start(dfg_jsonl_program *p, const char *what, const char *cmd, char *err, size_t len) {
    snprintf(p->desc, sizeof(p->desc), "%s '%.200s'", what, cmd);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: socketpair: %s", p->desc, strerror(errno));
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
        return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: cannot start /bin/sh: %s", p->desc, strerror(rc));
    }
    p->pid = pid;
    p->fd = sv[0];
    p->dead = false;
    snprintf(p->desc, sizeof(p->desc), "%s '%.200s' (pid %d)", what, cmd, (int)pid);
    return DFG_OK;
}

void dfg_jsonl_free(dfg_jsonl_program *p) {
    if (p->fd >= 0) {
        close(p->fd); /* EOF on its stdin: the protocol's "we are done" */
        p->fd = -1;
    }
    int status;
    for (int i = 0; i < 200 && p->pid > 0; i++) { /* two seconds to exit on its own */
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) p->pid = 0;
        else usleep(10000);
    }
    dfg_jsonl_kill(p);
    free(p->in);
    free(p->out);
    p->in = p->out = NULL;
    p->in_len = p->in_cap = p->out_len = p->out_cap = p->used = 0;
}

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

/* Reads what the program has written into p->in; 0 bytes at EOF means it is gone. */
static dfg_status read_some(dfg_jsonl_program *p, const char *when, char *err, size_t len) {
    if (p->in_len >= MAX_LINE)
        return dfg_jsonl_fail(err, len, DFG_ERR_FORMAT, "%s: the program wrote a line longer than %zu bytes", when, MAX_LINE);
    if (grow(&p->in, &p->in_cap, p->in_len + 65536)) return dfg_jsonl_fail(err, len, DFG_ERR_NOMEM, "%s: out of memory", when);
    ssize_t r = recv(p->fd, p->in + p->in_len, p->in_cap - p->in_len - 1, MSG_DONTWAIT);
    if (r > 0) {
        p->in_len += (size_t)r;
        return DFG_OK;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return DFG_OK;
    char how[160];
    describe_exit(p, how, sizeof(how));
    return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: it %s", when, how);
}

/* Waits for fd to be ready for `events` until the deadline; a timeout kills the program. */
static dfg_status wait_ready(dfg_jsonl_program *p, short events, double deadline, const char *when, short *got,
                             char *err, size_t len) {
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            dfg_jsonl_kill(p);
            return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: no answer within %g s (%s): killed it", when, p->wait_s,
                                  p->timeout_option ? p->timeout_option : "its timeout");
        }
        struct pollfd pf = {.fd = p->fd, .events = events};
        int r = poll(&pf, 1, (int)(left * 1e3) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: poll: %s", when, strerror(errno));
        if (r > 0) {
            *got = pf.revents;
            return DFG_OK;
        }
    }
}

/* Sends p->out whole, reading whatever the program writes meanwhile (it may answer early). */
static dfg_status send_request(dfg_jsonl_program *p, double deadline, const char *when, char *err, size_t len) {
    for (size_t off = 0; off < p->out_len;) {
        short got = 0;
        dfg_status st = wait_ready(p, POLLOUT | POLLIN, deadline, when, &got, err, len);
        if (st) return st;
        if (got & POLLIN && (st = read_some(p, when, err, len))) return st;
        if (!(got & (POLLOUT | POLLERR | POLLHUP))) continue;
        ssize_t w = send(p->fd, p->out + off, p->out_len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            char how[160];
            describe_exit(p, how, sizeof(how));
            return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: it %s", when, how);
        }
    }
    return DFG_OK;
}

static void drop_line(dfg_jsonl_program *p) {
    if (!p->used) return;
    memmove(p->in, p->in + p->used, p->in_len - p->used);
    p->in_len -= p->used;
    p->used = 0;
}

static dfg_status next_line(dfg_jsonl_program *p, double deadline, const char *when, char **line, size_t *n, char *err,
                            size_t len) {
    drop_line(p);
    for (;;) {
        char *nl = p->in_len ? memchr(p->in, '\n', p->in_len) : NULL;
        if (nl) {
            p->used = (size_t)(nl - p->in) + 1;
            *nl = '\0';
            if (nl > p->in && nl[-1] == '\r') *--nl = '\0';
            *line = p->in;
            *n = (size_t)(nl - p->in);
            return DFG_OK;
        }
        short got = 0;
        dfg_status st = wait_ready(p, POLLIN, deadline, when, &got, err, len);
        if (!st) st = read_some(p, when, err, len);
        if (st) return st;
    }
}

dfg_status dfg_jsonl_read_line(dfg_jsonl_program *p, double timeout_s, const char *when, char **line, size_t *n,
                               char *err, size_t len) {
    if (p->dead || p->fd < 0) return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: the program is no longer running", when);
    p->wait_s = timeout_s;
    return next_line(p, now_s() + timeout_s, when, line, n, err, len);
}

dfg_status dfg_jsonl_send(dfg_jsonl_program *p, double timeout_s, const char *when, char *err, size_t len) {
    if (p->dead || p->fd < 0) return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: the program is no longer running", when);
    p->wait_s = timeout_s;
    return send_request(p, now_s() + timeout_s, when, err, len);
}

dfg_status dfg_jsonl_call(dfg_jsonl_program *p, double timeout_s, const char *when, char **line, size_t *n, char *err,
                          size_t len) {
    if (p->dead || p->fd < 0) return dfg_jsonl_fail(err, len, DFG_ERR_IO, "%s: the program is no longer running", when);
    p->wait_s = timeout_s;
    double deadline = now_s() + timeout_s;
    dfg_status st = send_request(p, deadline, when, err, len);
    return st ? st : next_line(p, deadline, when, line, n, err, len);
}

/* ---------------------------------------------------------------- a request */
void dfg_jsonl_clear(dfg_jsonl_program *p) { p->out_len = 0; }

bool dfg_jsonl_put(dfg_jsonl_program *p, const char *text, size_t n) {
    if (grow(&p->out, &p->out_cap, p->out_len + n + 1)) return false;
    memcpy(p->out + p->out_len, text, n);
    p->out_len += n;
    return true;
}

bool dfg_jsonl_putf(dfg_jsonl_program *p, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return n > 0 && (size_t)n < sizeof(buf) && dfg_jsonl_put(p, buf, (size_t)n);
}

bool dfg_jsonl_put_str(dfg_jsonl_program *p, const char *text) { return dfg_jsonl_put(p, text, strlen(text)); }

bool dfg_jsonl_put_ids(dfg_jsonl_program *p, const int32_t *ids, int64_t n) {
    bool ok = dfg_jsonl_put_str(p, "[");
    for (int64_t i = 0; ok && i < n; i++) ok = dfg_jsonl_putf(p, i ? ",%d" : "%d", (int)ids[i]);
    return ok && dfg_jsonl_put_str(p, "]");
}

/* ---------------------------------------------------------------- an answer */
const char *dfg_jsonl_shown(const char *t, char *buf, size_t cap) {
    size_t n = 0;
    for (; t[n] && n < 80 && n + 4 < cap; n++) buf[n] = (unsigned char)t[n] < 32 ? '?' : t[n];
    snprintf(buf + n, cap - n, "%s", t[n] ? "..." : "");
    return buf;
}

bool dfg_jsonl_has_bare_nan(const char *t, size_t n) {
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

static bool good_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)s[i]) || s[i] == ',') return false;
    return true;
}

dfg_status dfg_jsonl_check_names(const char *const *names, int n, int max, const char *what, char *err, size_t len) {
    if (n < 1 || n > max) return dfg_jsonl_fail(err, len, DFG_ERR_FORMAT, "%d %ss declared (1 .. %d allowed)", n, what, max);
    for (int i = 0; i < n; i++) {
        if (!good_name(names[i]))
            return dfg_jsonl_fail(err, len, DFG_ERR_FORMAT, "%s %d has no usable name (1 .. 64 printable characters, "
                                  "no ',' or space)", what, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return dfg_jsonl_fail(err, len, DFG_ERR_FORMAT, "%s '%s' is declared twice", what, names[i]);
    }
    return DFG_OK;
}
