/* jsonl_program.h - a program dfg speaks to in JSON lines (a reward program, reward_program.c; an
 * environment program, env_program.c): started once through /bin/sh -c in its own process group,
 * its stdin and stdout one socket to dfg, every wait bounded by a deadline, every failure one line.
 * Internal to runtime/host. */
#ifndef DFG_JSONL_PROGRAM_H
#define DFG_JSONL_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dfg_graph.h"

typedef struct {
    char desc[320];             /* "reward program 'cmd' (pid 1234)", for messages */
    const char *timeout_option; /* the option a passed deadline names ("--reward-timeout") */
    double wait_s;              /* the deadline of the wait under way, for its message */
    pid_t pid;                  /* its process (and process group); 0 once reaped */
    int fd;                     /* our end of the socket that is its stdin and stdout; -1: closed */
    bool dead;                  /* it died or was killed: every later call fails */
    char *in;                   /* bytes read and not yet consumed as lines */
    size_t in_len, in_cap, used; /* used: the bytes of the line last read, dropped by the next read */
    char *out;                  /* the request being written */
    size_t out_len, out_cap;
} dfg_jsonl_program;

/* An idle program (nothing started): fd -1. */
void dfg_jsonl_init(dfg_jsonl_program *p, const char *timeout_option);
/* Starts cmd; `what` names it in messages ("reward program"). DFG_ERR_IO with one line otherwise. */
dfg_status dfg_jsonl_start(dfg_jsonl_program *p, const char *what, const char *cmd, char *err, size_t len);
/* Closes its stdin (the protocol's "we are done"), gives it two seconds to exit, then kills its
 * group; frees the buffers. */
void dfg_jsonl_free(dfg_jsonl_program *p);
/* Kills its process group now and reaps it: every later call fails. */
void dfg_jsonl_kill(dfg_jsonl_program *p);

/* The next line it writes within timeout_s (NUL-terminated, without '\n' or '\r\n'; *n its
 * length), valid until the next read. A timeout kills it; EOF names its exit. */
dfg_status dfg_jsonl_read_line(dfg_jsonl_program *p, double timeout_s, const char *when, char **line, size_t *n,
                               char *err, size_t len);
/* Sends the request built in p->out and reads its answer line, both within timeout_s. */
dfg_status dfg_jsonl_call(dfg_jsonl_program *p, double timeout_s, const char *when, char **line, size_t *n, char *err,
                          size_t len);

/* Sends the request built in p->out within timeout_s and returns without its answer, which a
 * later dfg_jsonl_read_line takes (a reward scored while the host trains: async_rollouts). */
dfg_status dfg_jsonl_send(dfg_jsonl_program *p, double timeout_s, const char *when, char *err, size_t len);

/* Building p->out: false when out of memory. */
void dfg_jsonl_clear(dfg_jsonl_program *p);
bool dfg_jsonl_put(dfg_jsonl_program *p, const char *text, size_t n);
bool dfg_jsonl_put_str(dfg_jsonl_program *p, const char *text);
bool dfg_jsonl_putf(dfg_jsonl_program *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool dfg_jsonl_put_ids(dfg_jsonl_program *p, const int32_t *ids, int64_t n); /* [1,2,3] */

/* Text from the program in a message: its first 80 bytes, control bytes as '?'. */
const char *dfg_jsonl_shown(const char *t, char *buf, size_t cap);
/* Does the line hold a bare NaN or Infinity outside any string? (Python's json.dumps writes them;
 * JSON has no such values.) */
bool dfg_jsonl_has_bare_nan(const char *t, size_t n);
/* The names a hello declares (reward functions, tools): 1 .. max distinct names of 1 .. 64
 * printable characters without ',' or spaces (a setting lists them). `what` is one of them in
 * words ("reward function"). DFG_ERR_FORMAT with "<what>" in err otherwise. */
dfg_status dfg_jsonl_check_names(const char *const *names, int n, int max, const char *what, char *err, size_t len);
/* vsnprintf into err, returning st: a failure in one statement. */
dfg_status dfg_jsonl_fail(char *err, size_t len, dfg_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
