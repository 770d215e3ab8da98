/* cli_run_eval.h - `dfg run`'s evaluation on a plan's eval_dataset (cli_run_eval.c; TRL's eval loop,
 * examples/grpo/dfg_grpo_eval.h): the eval rows rolled out by the plan's own rollout stages, no
 * training, their metrics logged with TRL's eval_ prefix. */
#ifndef DFG_CLI_RUN_EVAL_H
#define DFG_CLI_RUN_EVAL_H

#include "cli_run.h"

typedef struct cli_eval cli_eval;

/* The run's evaluation, or *out NULL when the plan has no eval_dataset (a refusal, --eval-only
 * without one, is an exit code after one line). */
int cli_eval_open(const run_args *a, dfg_runtime *rt, uint64_t seed, cli_eval **out);
/* Evaluates if the plan asks for it after `step` (eval_strategy=steps, every eval_steps), or
 * before the run's first step (at_start, eval_on_start); now: whatever the plan says (--eval-only).
 * Prints a line (unless quiet) and writes one to jsonl (when not NULL). An exit code. */
int cli_eval_maybe(cli_eval *e, int64_t step, bool at_start, bool now, FILE *jsonl, cli_progress *pr);
void cli_eval_free(cli_eval *e);

#endif
