/* cli_run.h - what the files of `dfg run` share: its arguments (cli_run_args.c) and the checks
 * and services a plan needs before it starts (cli_run_reward.c). */
#ifndef DFG_CLI_RUN_H
#define DFG_CLI_RUN_H

#include "cli.h"

typedef struct {
    const char *plan, *weights, *save, *ckpt_dir, *resume, *rollouts, *dump, *metrics;
    const char *reward_cmd, *reward_lib;
    const char *env_cmd; /* --env-cmd: the environment program of a plan with tools (docs/agents.md) */
    const char *adapter; /* --adapter: a PEFT adapter directory (LoRA plans) */
    double reward_timeout, env_timeout;
    int64_t steps;     /* --steps: this run's steps */
    int64_t max_steps; /* --max-steps: run until the step counter is this; -1: not given */
    bool steps_given;  /* --steps N was given (else 1 step, or the plan's max_steps) */
    int64_t plan_max_steps; /* the plan's max_steps (its learning-rate schedule's length); 0: none */
    int64_t seed, threads, every, save_every;
    int64_t max_shard; /* --max-shard-size in bytes; 0: the 5 GB default */
    bool quiet, emulate_gpu, eager;
    bool merge; /* --merge: --save DIR/ writes a LoRA policy merged into its base */
    bool eval_only; /* --eval-only: evaluate on the plan's eval_dataset, no training (cli_run_eval.c) */
    bool save_dir; /* --save names a directory (DIR/, or one that exists), not one .safetensors file */
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
 * compiled with tools needs --env-cmd (or --rollouts); a plan that trains only on rollout files
 * needs --rollouts. An exit code after one line. */
int cli_run_check_plan(const run_args *r, const dfg_program *p);
/* The run's reward program or plugin (NULL without --reward-cmd and --reward-lib), its
 * functions checked against the plan's reward_funcs: what the host stages reach as the service
 * DFG_REWARD_SERVICE. An exit code after one line. */
int cli_run_open_reward(const run_args *r, const dfg_program *p, dfg_reward_source **out);
/* The run's environment program (NULL without --env-cmd), its tools checked against the plan's
 * setting tools: what the host stages reach as the service DFG_ENV_SERVICE. An exit code after
 * one line. */
int cli_run_open_env(const run_args *r, const dfg_program *p, dfg_env_source **out);
/* A plan compiled with max_steps (a learning-rate schedule's length): dfg run runs to it unless
 * --steps says otherwise, refuses another --max-steps, and (run_steps) a --steps past it. */
int cli_run_plan_steps(run_args *r, const dfg_program *p);
/* The plan's reward_funcs against the reward source's functions and the environment program's
 * episode reward (its last, when it scores episodes); also refuses a plan with no reward at all. */
int cli_run_check_sources(const run_args *r, const dfg_program *p, const dfg_reward_source *reward,
                          const dfg_env_source *env);

/* The program's name as the user typed it (argv[0]: "dfg", "build/dfg"), for the commands a run
 * prints; set by main. */
extern const char *cli_program;
/* The command that continues the run r from the checkpoint `resume` (a directory or a file) as
 * given, with every option it needs again (a LoRA plan's --weights, the reward, the rollouts,
 * --threads, --save, ...), each argument quoted for the shell: --steps with the steps this run had
 * left after `done` (or its --max-steps); with export, "--steps 0" and --save alone, which
 * writes the checkpoint's parameters to what --save names (cli_run_hint.c). */
void cli_run_resume_command(const run_args *r, const dfg_program *p, const char *resume, int64_t done, bool export,
                            char *buf, size_t len);

#endif
