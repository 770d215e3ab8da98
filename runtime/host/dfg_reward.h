/* dfg_reward.h - rewards from outside the plan: a reward program (dfg run --reward-cmd, JSON lines
 * over its stdin and stdout) or a reward plugin (dfg run --reward-lib, a shared object), behind
 * one handle, a dfg_reward_source. docs/rewards.md is the contract for both; this header is the
 * plugin's C signature and the calls a pipeline's host stage makes. The application (dfg run)
 * opens the source and hands it to the run as the service DFG_REWARD_SERVICE
 * (dfg_run_options.services): the runtime itself knows nothing of rewards.
 *
 * A plugin exports (C linkage):
 *     int dfg_reward_funcs(const char **names, int max);
 *         writes the names of its reward functions (static strings) and returns how many
 *         (1 .. max; anything else refuses the plugin)
 *     int dfg_reward_score(const dfg_reward_row *rows, int n, int64_t step, float *out,
 *                          char *err, size_t err_len);
 *         writes out[i * F + f], the reward of row i by function f (NaN: "does not apply", TRL's
 *         None), and returns 0; nonzero with a message in err stops the run.
 * It is called on the runtime's thread, one request at a time. */
#ifndef DFG_REWARD_H
#define DFG_REWARD_H

#include <stddef.h>
#include <stdint.h>

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DFG_REWARD_MAX_FUNCS 16
#define DFG_REWARD_SERVICE "reward" /* the run's reward source, as dfg_host_service finds it */

/* One rollout row as a reward sees it. */
typedef struct {
    const int32_t *prompt_ids;     /* (n_prompt) the prompt as the model saw it, no padding */
    int64_t n_prompt;
    const int32_t *completion_ids; /* (n_completion) up to and including the first EOS; all when none */
    int64_t n_completion;
    int truncated;                 /* 1: no EOS within max_completion_length */
    int64_t index;                 /* the dataset row; -1 for a built-in task */
    const char *fields;            /* the dataset line's other fields, one JSON object ("{}": none) */
    const char *messages;          /* the episode's conversation when an environment served it (dfg_env.h's
                                    * dfg_env_finish: a JSON array of messages), else NULL */
} dfg_reward_row;

typedef int (*dfg_reward_funcs_fn)(const char **names, int max);
typedef int (*dfg_reward_score_fn)(const dfg_reward_row *rows, int n, int64_t step, float *out, char *err,
                                   size_t err_len);

typedef struct dfg_reward_source dfg_reward_source;

/* Starts `cmd` through /bin/sh -c in its own process group, its stdin and stdout connected to dfg,
 * its stderr the caller's, and reads its hello line within timeout_s seconds. On failure *out is
 * NULL and err gets one line. DFG_ERR_IO (cannot start, died, timed out), DFG_ERR_FORMAT (a bad
 * hello line), DFG_ERR_ARG, DFG_ERR_NOMEM. */
DFG_API dfg_status dfg_reward_program_open(const char *cmd, double timeout_s, dfg_reward_source **out, char *err,
                                           size_t err_len);
/* dlopens `path` and asks it for its functions. DFG_ERR_IO (cannot load), DFG_ERR_FORMAT (a
 * missing symbol, a bad function count or name). */
DFG_API dfg_status dfg_reward_plugin_open(const char *path, dfg_reward_source **out, char *err, size_t err_len);
/* Ends the program (closes its stdin, waits briefly, then kills its group) or unloads the plugin. */
DFG_API void dfg_reward_source_free(dfg_reward_source *s);

DFG_API int dfg_reward_source_n_funcs(const dfg_reward_source *s);
DFG_API const char *dfg_reward_source_func(const dfg_reward_source *s, int i);
/* "program 'python3 r.py' (pid 1234)" or "plugin 'lib.so'", for messages */
DFG_API const char *dfg_reward_source_desc(const dfg_reward_source *s);

/* Scores n rows: out[i * F + f] (F = n_funcs), NaN where a function does not apply. On failure
 * err gets one line naming the step, the row when one is at fault, and the reason: DFG_ERR_IO (the
 * program died or timed out; it is then gone and every later call fails), DFG_ERR_FORMAT (a
 * malformed, short or long answer, a value that is not a finite number or null, an "error"
 * answer, a plugin's failure). */
DFG_API dfg_status dfg_reward_source_score(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                           float *out, char *err, size_t err_len);

/* dfg_reward_source_score in two halves, so that the host works while a program scores
 * (async_rollouts): submit sends the request (a plugin, called on the runtime's thread, scores at
 * once and keeps the values), collect waits for the answer (within the program's timeout, counted
 * from the call) and checks it as score does, writing out (n, F). Up to DFG_REWARD_MAX_PENDING
 * requests may wait, answered in the order they were submitted (a program answers its requests in
 * order): collect takes the oldest, and n must be its rows. A submit past that many, or a collect
 * with none pending, is DFG_ERR_ARG. pending: how many wait. */
#define DFG_REWARD_MAX_PENDING 2
DFG_API dfg_status dfg_reward_source_submit(dfg_reward_source *s, const dfg_reward_row *rows, int64_t n, int64_t step,
                                            char *err, size_t err_len);
DFG_API dfg_status dfg_reward_source_collect(dfg_reward_source *s, int64_t n, float *out, char *err, size_t err_len);
DFG_API int dfg_reward_source_pending(const dfg_reward_source *s);

/* The source's functions must be the ones program p was built for (its setting reward_funcs, in
 * order, when it has one): DFG_ERR_ARG with one line naming both lists and the --set that fixes
 * it otherwise. */
DFG_API dfg_status dfg_reward_source_check(const dfg_reward_source *s, const dfg_program *p, char *err, size_t err_len);
/* The run's reward source (the service DFG_REWARD_SERVICE); NULL when the run has none. The
 * host-stage context is dfg_runtime.h's (declared here too, so that a plugin needs only
 * dfg_graph.h beside this header). */
typedef struct dfg_host_ctx dfg_host_ctx;
DFG_API dfg_reward_source *dfg_host_reward_source(dfg_host_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
