/* cli_run_reward.c - what a plan needs of dfg run before it starts: the reward its plan was
 * built for (a reward program or plugin, opened here and handed to the host stages as the
 * service DFG_REWARD_SERVICE: the runtime knows nothing of rewards), the environment program of
 * a plan with tools (the service DFG_ENV_SERVICE), rollout files, and the weights a LoRA plan's
 * frozen base comes from. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../graph/ir.h"
#include "cli_run.h"

#define CMD "run"

/* A plan built for an external reward (the setting reward=external, examples/grpo/grpo.c) needs
 * --reward-cmd or --reward-lib (or --rollouts, which bring their rewards); one with a built-in
 * reward takes neither. */
static int check_reward_source(const run_args *r, const dfg_program *p) {
    const char *reward = dfg_program_has(p, "reward") ? dfg_program_str(p, "reward") : NULL;
    bool external = reward && !strcmp(reward, "external"), given = r->reward_cmd || r->reward_lib;
    if (given && reward && !external)
        return cli_error(CMD, CLI_USAGE, "%s: this plan scores with the built-in reward '%s'; compile it with --set "
                         "reward=external (and reward_funcs=...) to use %s", r->plan, reward,
                         r->reward_cmd ? "--reward-cmd" : "--reward-lib");
    /* with --env-cmd the environment may score the episodes itself: cli_run_check_sources decides */
    if (external && !given && !r->env_cmd && !r->rollouts && r->steps > 0)
        return cli_error(CMD, CLI_USAGE, "%s: this plan scores with an external reward (reward=external): give "
                         "--reward-cmd CMD or --reward-lib LIB (docs/rewards.md)", r->plan);
    return CLI_OK;
}

/* A plan compiled with tools (the setting tools) makes its rollouts with an environment program:
 * --env-cmd, unless --rollouts bring them. One without tools is refused an --env-cmd when the
 * program's tools are read (dfg_env_source_check names both lists). */
static int check_env(const run_args *r, const dfg_program *p) {
    const char *tools = dfg_program_has(p, "tools") ? dfg_program_str(p, "tools") : "";
    if (*tools && !r->env_cmd && !r->rollouts && r->steps > 0)
        return cli_error(CMD, CLI_USAGE, "%s: this plan was compiled with tools=%s: give --env-cmd CMD, the program that "
                         "runs them (tools/env_server.py --list prints the line; docs/agents.md)", r->plan, tools);
    return CLI_OK;
}

/* A plan whose own rollout stages cannot run (dfg_declare_rollouts_only) trains only on a file:
 * refused before anything starts rather than failing in its first step. */
static int check_rollouts_only(const run_args *r, const dfg_program *p) {
    const char *why = dfg_program_rollouts_only(p);
    if (why && !r->rollouts && r->steps > 0)
        return cli_error(CMD, CLI_USAGE, "%s: this plan trains only on fixed rollouts (give --rollouts FILE): %s", r->plan, why);
    return CLI_OK;
}

/* A LoRA plan (frozen base weights, role base_model) takes --adapter and --merge; its checkpoints
 * leave the base out, so --resume needs --weights for it. Any other plan's checkpoint holds every
 * parameter, and --weights beside it would be overwritten. */
static int check_lora(const run_args *r, const dfg_program *p) {
    bool lora = false;
    for (int i = 0; i < p->n_tensors && !lora; i++) lora = p->tensors[i]->role == DFG_ROLE_BASE_MODEL;
    if (!lora && (r->adapter || r->merge))
        return cli_error(CMD, CLI_USAGE, "%s: %s needs a LoRA plan (dfg compile ... --set lora_r=R); this one trains "
                         "every weight", r->plan, r->adapter ? "--adapter" : "--merge");
    if (!lora && r->weights && r->resume)
        return cli_error(CMD, CLI_USAGE, "--weights and --resume both set the parameters; give one");
    if (lora && r->resume && !r->weights)
        return cli_error(CMD, CLI_USAGE, "%s: a LoRA checkpoint holds the adapters and their optimizer state, not the "
                         "base model: give it with --weights DIR as the run that wrote the checkpoint did", r->plan);
    return CLI_OK;
}

int cli_run_plan_steps(run_args *r, const dfg_program *p) {
    int64_t m = dfg_program_has(p, "max_steps") ? dfg_program_int(p, "max_steps") : 0;
    r->plan_max_steps = m > 0 ? m : 0;
    if (!r->plan_max_steps) return CLI_OK;
    if (r->max_steps >= 0 && r->max_steps != m)
        return cli_error(CMD, CLI_USAGE, "%s: --max-steps %" PRId64 " differs from the plan's max_steps %" PRId64 " (its "
                         "learning-rate schedule's length): give --max-steps %" PRId64 ", or compile with --set "
                         "max_steps=%" PRId64, r->plan, r->max_steps, m, m, r->max_steps);
    if (!r->steps_given && r->max_steps < 0) r->max_steps = m; /* the plan's whole schedule */
    return CLI_OK;
}

int cli_run_check_plan(const run_args *r, const dfg_program *p) {
    int rc = check_reward_source(r, p);
    if (!rc) rc = check_env(r, p);
    if (!rc) rc = check_lora(r, p);
    return rc ? rc : check_rollouts_only(r, p);
}

int cli_run_open_reward(const run_args *r, const dfg_program *p, dfg_reward_source **out) {
    char err[1024];
    *out = NULL;
    if (!r->reward_cmd && !r->reward_lib) return CLI_OK;
    dfg_status st = r->reward_cmd ? dfg_reward_program_open(r->reward_cmd, r->reward_timeout, out, err, sizeof(err))
                                  : dfg_reward_plugin_open(r->reward_lib, out, err, sizeof(err));
    /* beside an environment program that scores episodes, the reward functions are the plan's but
     * its last: cli_run_check_sources checks them once both are open */
    if (!st && !r->env_cmd) st = dfg_reward_source_check(*out, p, err, sizeof(err));
    if (!st) return CLI_OK;
    dfg_reward_source_free(*out);
    *out = NULL;
    return cli_error(CMD, CLI_FAILED, "%s: %s", r->plan, err);
}

int cli_run_open_env(const run_args *r, const dfg_program *p, dfg_env_source **out) {
    char err[1024];
    *out = NULL;
    if (!r->env_cmd) return CLI_OK;
    dfg_status st = dfg_env_program_open(r->env_cmd, r->env_timeout, r->env_timeout, out, err, sizeof(err));
    if (!st) st = dfg_env_source_check(*out, p, err, sizeof(err));
    if (!st) return CLI_OK;
    dfg_env_source_free(*out);
    *out = NULL;
    return cli_error(CMD, CLI_FAILED, "%s: %s", r->plan, err);
}

/* The plan's reward functions (reward_funcs) are the reward source's, then the environment's
 * episode reward when its program has one (TRL appends get_reward as one more reward function,
 * named after the environment class): checked once both are open. */
int cli_run_check_sources(const run_args *r, const dfg_program *p, const dfg_reward_source *reward,
                          const dfg_env_source *env) {
    const char *env_reward = env ? dfg_env_source_reward_name(env) : NULL;
    const char *want = dfg_program_has(p, "reward_funcs") ? dfg_program_str(p, "reward_funcs") : "";
    const char *plan_reward = dfg_program_has(p, "reward") ? dfg_program_str(p, "reward") : "";
    if (!env || r->rollouts || r->steps <= 0) return CLI_OK;
    char have[DFG_REWARD_MAX_FUNCS * 70] = "";
    for (int i = 0; reward && i < dfg_reward_source_n_funcs(reward); i++)
        snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s", i ? "," : "", dfg_reward_source_func(reward, i));
    if (env_reward)
        snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s", have[0] ? "," : "", env_reward);
    if (strcmp(plan_reward, "external")) {
        if (env_reward)
            return cli_error(CMD, CLI_USAGE, "%s: %s scores episodes (%s), but this plan scores with the built-in reward "
                             "'%s': compile it with --set reward=external --set reward_funcs=%s", r->plan,
                             dfg_env_source_desc(env), env_reward, plan_reward, have);
        return CLI_OK;
    }
    if (!reward && !env_reward)
        return cli_error(CMD, CLI_USAGE, "%s: this plan scores with an external reward (reward=external): give "
                         "--reward-cmd CMD or --reward-lib LIB (docs/rewards.md)", r->plan);
    if (strcmp(want, have))
        return cli_error(CMD, CLI_USAGE, "%s: the reward functions are %s (%s%s%s), but the plan was compiled with "
                         "reward_funcs=%s (compile with --set reward_funcs=%s)", r->plan, have,
                         reward ? "the reward program's" : "", reward && env_reward ? ", then " : "",
                         env_reward ? "the environment's episode reward" : "", want, have);
    return CLI_OK;
}
