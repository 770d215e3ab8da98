/* dfg_env.h - tools and environments for multi-turn episodes (TRL's `tools=` and
 * `environment_factory=`): an environment program (dfg run --env-cmd, JSON lines over its stdin
 * and stdout; tools/env_server.py hosts a module's tool functions or an environment class) behind
 * one handle, a dfg_env_source. docs/agents.md is the contract. The application (dfg run) opens
 * the program and hands it to the run as the service DFG_ENV_SERVICE; the GRPO pipeline's host
 * stages call it: the runtime itself knows nothing of tools.
 *
 * An episode, per rollout row: reset (before the prompt is prefilled: the environment may add
 * text to the last user message, which changes the prompt's ids), then turns: each time the
 * policy ends a turn (its EOS), the turn's generated ids go to the program, which parses them
 * for tool calls in the chat template's format, runs the calls (concurrently over rows), and
 * answers either "done" (no call: the episode ends) or the ids the chat template puts after the
 * call (the tool messages and the next assistant header: TRL's _get_tool_suffix_ids), which dfg
 * writes into the row's context before the row decodes again. At the end the program may score
 * each episode (an environment class's get_reward) and gives each row's conversation as messages
 * for the reward functions. */
#ifndef DFG_ENV_H
#define DFG_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DFG_ENV_SERVICE "env" /* the run's environment, as dfg_host_service finds it */
#define DFG_ENV_MAX_TOOLS 64

/* A row as reset sees it: its prompt as dfg would prefill it, and its dataset row. */
typedef struct {
    const int32_t *prompt_ids; /* (n_prompt) no padding */
    int64_t n_prompt;
    int64_t index;      /* the dataset row; -1 for a built-in task */
    const char *fields; /* the dataset line's other fields, one JSON object ("{}": none) */
} dfg_env_row;

/* reset's answer for one row: new prompt ids when the environment added text to the prompt
 * (ids owned by the source, valid until its next call), else NULL and the prompt stays. */
typedef struct {
    const int32_t *prompt_ids;
    int64_t n_prompt;
} dfg_env_prompt;

/* A row whose turn ended. */
typedef struct {
    int64_t row;              /* the rollout row, 0 .. N-1 */
    const int32_t *turn_ids;  /* (n_turn) this turn's generated ids, its EOS included when it has one */
    int64_t n_turn;
    int64_t room;             /* completion tokens left in the row (max_completion_length budget) */
    int last;                 /* 1: the episode ends here whatever the turn holds (max_tool_calling_iterations
                               * reached): the program records the turn and runs no call */
} dfg_env_turn;

/* The answer for one ended turn. */
typedef struct {
    int done;                 /* 1: the episode ends here (no tool call, the turn was the last, or the suffix
                               * would pass the room: the program then drops that tool turn, as TRL) */
    const int32_t *suffix_ids; /* (n_suffix) what follows the call: tool messages, next assistant header;
                                * owned by the source, valid until its next call; NULL when done */
    int64_t n_suffix;          /* 1 .. the turn's room when not done, else 0 */
    int calls, failures;       /* the turn's tool calls, and those that raised or timed out */
} dfg_env_answer;

typedef struct dfg_env_source dfg_env_source;

/* Starts `cmd` through /bin/sh -c in its own process group (stdin and stdout to dfg, stderr the
 * caller's) and reads its hello within timeout_s seconds. turn_timeout_s bounds each later
 * answer. On failure *out is NULL and err gets one line: DFG_ERR_IO (cannot start, died, timed
 * out), DFG_ERR_FORMAT (a bad hello), DFG_ERR_NOMEM. */
DFG_API dfg_status dfg_env_program_open(const char *cmd, double timeout_s, double turn_timeout_s, dfg_env_source **out,
                                        char *err, size_t err_len);
DFG_API void dfg_env_source_free(dfg_env_source *s);

DFG_API int dfg_env_source_n_tools(const dfg_env_source *s);
DFG_API const char *dfg_env_source_tool(const dfg_env_source *s, int i);
/* 1 when the program scores episodes (an environment class with get_reward) */
DFG_API int dfg_env_source_has_reward(const dfg_env_source *s);
/* The name of that reward (the environment class's, as TRL logs it); NULL when none. */
DFG_API const char *dfg_env_source_reward_name(const dfg_env_source *s);
DFG_API const char *dfg_env_source_desc(const dfg_env_source *s);
/* The program's tools must be those program p was built for (its setting tools, in order):
 * DFG_ERR_ARG with one line naming both lists and the --set that fixes it otherwise. */
DFG_API dfg_status dfg_env_source_check(const dfg_env_source *s, const dfg_program *p, char *err, size_t err_len);

/* A new episode for each of n rows (every row of the step, in order): out[i] says whether row
 * i's prompt changed. */
DFG_API dfg_status dfg_env_reset(dfg_env_source *s, const dfg_env_row *rows, int64_t n, int64_t step,
                                 dfg_env_prompt *out, char *err, size_t err_len);
/* The ended turns of n rows (each row at most once), answered in order. A failure of the program
 * (died, timed out, malformed answer) is DFG_ERR_IO or DFG_ERR_FORMAT with one line naming the
 * step and the row; a tool that raises is not a failure of the program (failures counts it). */
DFG_API dfg_status dfg_env_turns(dfg_env_source *s, const dfg_env_turn *turns, int64_t n, int64_t step,
                                 dfg_env_answer *out, char *err, size_t err_len);
/* After the step's last turn: out[i] the episode's reward for row i (NaN: none; only when
 * has_reward) and messages[i] the row's completion as a JSON array of messages (assistant with
 * tool_calls, tool, ..., final assistant; owned by the source, valid until its next call). */
DFG_API dfg_status dfg_env_finish(dfg_env_source *s, int64_t n, int64_t step, float *out, const char **messages,
                                  char *err, size_t err_len);

typedef struct dfg_host_ctx dfg_host_ctx;
/* The run's environment (the service DFG_ENV_SERVICE); NULL when the run has none. */
DFG_API dfg_env_source *dfg_host_env_source(dfg_host_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
