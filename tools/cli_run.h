/* cli_run.h - what the files of `dfg run` share: its arguments (cli_run_args.c) and the checks
 * and services a plan needs before it starts (cli_run_reward.c). */
#ifndef DFG_CLI_RUN_H
#define DFG_CLI_RUN_H

#include "cli.h"

typedef struct {
    const char *plan, *weights, *save, *ckpt_dir, *resume, *rollouts, *dump, *metrics;
    const char *reward_cmd, *reward_lib;
    const char *adapter; /* --adapter: a PEFT adapter directory (LoRA plans) */
    double reward_timeout;
    int64_t steps, seed, threads, every, save_every;
    int64_t max_shard; /* --max-shard-size in bytes; 0: the 5 GB default */
    bool quiet, emulate_gpu, eager;
    bool merge; /* --merge: --save DIR/ writes a LoRA policy merged into its base */
    dfg_target target; /* the plan's */
    bool seed_given;
    double collective_timeout; /* --collective-timeout: seconds (data-parallel runs) */
    dfg_dist *dist;            /* this process's rank of a data-parallel run (mpirun), or a world of one */
} run_args;

/* Parses dfg run's command line into r: CLI_OK, an exit code after a message, or -1 after
 * --help printed the usage. */
int cli_run_parse_args(int argc, char **argv, run_args *r);
/* The plan against the run's arguments, before anything starts: a plan with an external reward
 * needs --reward-cmd or --reward-lib (or --rollouts), a built-in reward takes neither; a plan
 * that trains only on rollout files needs --rollouts. An exit code after one line. */
int cli_run_check_plan(const run_args *r, const dfg_program *p);
/* The run's reward program or plugin (NULL without --reward-cmd and --reward-lib), its
 * functions checked against the plan's reward_funcs: what the host stages reach as the service
 * DFG_REWARD_SERVICE. An exit code after one line. */
int cli_run_open_reward(const run_args *r, const dfg_program *p, dfg_reward_source **out);

#endif
