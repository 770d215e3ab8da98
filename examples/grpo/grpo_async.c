/* grpo_async.c - one-step-off rollouts (async_rollouts=1; dfg_grpo_async.h). A step runs:
 *   data, prefill, decode       the next batch, into the rollout tensors
 *   reward.submit               host: its rows go to the reward program, no wait
 *   reward.first, async.first   (the first step only) its rewards, its copy; back to data once
 *   advantages .. update.k      train on the batch in the async.* buffers
 *   reward                      host: the next batch's rewards, scored meanwhile by the program
 *   async.next                  the staleness metric; the next batch into the async.* buffers
 * One device alternates its work; what overlaps is the reward program's (its own process: an LLM
 * judge, a sandbox) with the training stages. The old log-probs are the sampler's, as TRL's
 * AsyncGRPOTrainer's old_log_probs, so the importance-sampling correction's ratio is 1 and the
 * clipped ratio pi / pi_sampler carries the staleness. Checkpoints hold the async.* buffers: a
 * resumed run trains on the batch the stopped one had rolled out. */
#include <stdio.h>
#include <string.h>

#include "dfg_grpo_async.h"
#include "task_tensor.h"

dfg_status dfg_grpo_async_check(dfg_program *p, const dfg_grpo_config *c) {
    const char *why = NULL;
    if (!c->async_rollouts) return DFG_OK;
    if (c->max_staleness < c->async_rollouts)
        return dfg_program_fail(p, DFG_ERR_ARG, "async_rollouts=%lld trains on rollouts %lld update(s) old: max_staleness "
                                "%lld must be at least that", (long long)c->async_rollouts, (long long)c->async_rollouts,
                                (long long)c->max_staleness);
    if (c->tools) why = "multi-turn episodes (tools): their tool stage and decode loop inside the step";
    else if (c->iterations > 1) why = "num_iterations > 1: a batch trains once, against the sampler's log-probs (TRL's AsyncGRPOTrainer)";
    else if (c->sft_steps > 0) why = "sft_steps > 0: set it to 0";
    else if (c->log_completions) why = "log_completions: the rollout tensors hold the next batch when the trained one's advantages exist";
    else if (c->W > 1) why = "world_size > 1: the first step's rollout loop would hold the prompt widths' collective";
    else if (c->rollouts_only[0]) why = "a task whose rollouts this plan cannot make (it trains only on --rollouts files)";
    if (why) return dfg_program_fail(p, DFG_ERR_ARG, "async_rollouts=1 cannot run with %s", why);
    return DFG_OK;
}

/* a copy of rollout tensor t (or NULL) for the trained batch: "async.<name>", the same role */
static dfg_tensor *trained_copy(dfg_program *p, dfg_tensor *t, dfg_role role) {
    if (!t) return NULL;
    char name[96];
    snprintf(name, sizeof(name), "async.%s", dfg_tensor_name(t));
    return dfg_state(p, name, dfg_tensor_dtype(t), dfg_tensor_shape(t), role, dfg_init_zeros());
}

dfg_status dfg_grpo_async_state(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s, dfg_grpo_async *a,
                                dfg_grpo_state *train) {
    (void)c;
    *a = (dfg_grpo_async){
        .tokens = trained_copy(p, s->tokens, DFG_ROLE_ROLLOUT),
        .mask = trained_copy(p, s->mask, DFG_ROLE_ROLLOUT),
        .start = trained_copy(p, s->start, DFG_ROLE_ROLLOUT),
        .rewards = trained_copy(p, s->rewards, DFG_ROLE_ROLLOUT),
        .reward_values = trained_copy(p, s->reward_values, DFG_ROLE_NONE),
        .sampling_logp = trained_copy(p, s->sampling_logp, DFG_ROLE_ROLLOUT),
        .truncated_prompts = trained_copy(p, s->truncated_prompts, DFG_ROLE_NONE),
        .staleness = dfg_state(p, "async.staleness", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
        .primed = dfg_state(p, "async.primed", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
        .again = dfg_state(p, "async.again", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
    };
    *train = *s;
    train->tokens = a->tokens, train->mask = a->mask, train->start = a->start, train->rewards = a->rewards;
    if (s->loss_mask == s->mask) train->loss_mask = a->mask; /* no tools: the loss reads completion_mask */
    train->reward_values = a->reward_values, train->sampling_logp = a->sampling_logp;
    train->truncated_prompts = a->truncated_prompts;
    train->old_logp = a->sampling_logp; /* 0 past each row's end: the loss masks those columns */
    return dfg_program_status(p);
}

/* The rollout tensors into the trained buffers. */
static void copy_batch(dfg_graph *g, const dfg_grpo_async *a, const dfg_grpo_state *s) {
    dfg_tensor *from[7] = {s->tokens, s->mask, s->start, s->rewards, s->reward_values, s->sampling_logp, s->truncated_prompts};
    dfg_tensor *to[7] = {a->tokens, a->mask, a->start, a->rewards, a->reward_values, a->sampling_logp, a->truncated_prompts};
    for (int i = 0; i < 7; i++)
        if (to[i]) dfg_assign(g, to[i], from[i]);
}

static dfg_status staged(dfg_program *p, dfg_graph *g) {
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

dfg_status dfg_grpo_async_after_rollout(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                        dfg_grpo_async *a) {
    (void)c;
    dfg_status st = dfg_stage_host(p, "reward.submit", "grpo_reward_submit");
    if (!st) st = dfg_stage_host(p, "reward.first", "grpo_reward_collect");
    if (st) return st;
    dfg_graph *g = dfg_graph_new(p, "async.first");
    copy_batch(g, a, s);
    dfg_assign_fill(g, a->staleness, 0.0f); /* rolled out by the policy it trains */
    dfg_assign_fill(g, a->primed, 1.0f);
    if ((st = staged(p, g))) return st;
    /* both run only while the buffers hold no batch; the loop goes back to data once */
    if (!st) st = dfg_stage_when(p, "reward.first", a->primed, -1.0, 0.5);
    if (!st) st = dfg_stage_when(p, "async.first", a->primed, -1.0, 0.5);
    return st ? st : dfg_stage_loop(p, "data", "async.first", a->again, 1);
}

dfg_status dfg_grpo_async_after_update(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                       dfg_grpo_async *a) {
    (void)c;
    dfg_status st = dfg_stage_host(p, "reward", "grpo_reward_collect");
    if (st) return st;
    dfg_graph *g = dfg_graph_new(p, "async.next");
    dfg_metric(g, "staleness", a->staleness); /* the batch this step trained */
    copy_batch(g, a, s);
    dfg_assign_fill(g, a->staleness, 1.0f); /* this step's update comes between its rollout and its training */
    return staged(p, g);
}

dfg_tensor *dfg_grpo_async_trained(dfg_program *p, dfg_tensor *t) {
    char name[96];
    if (!t) return NULL;
    snprintf(name, sizeof(name), "async.%s", dfg_tensor_name(t));
    dfg_tensor *copy = dfg_find(p, name);
    return copy ? copy : t;
}

/* ---------------------------------------------------------------- host stages */
static dfg_grpo_reward_opts reward_opts(dfg_grpo_config *c) {
    return (dfg_grpo_reward_opts){.group = c->G, .prompt_len = c->Lp, .weights = c->weights, .eos = c->eos,
                                  .n_eos = c->n_eos, .ds = c->ds, .rows = c->ds_rows, .all_null_steps = &c->all_null_steps};
}

/* The rows of the batch just rolled out go to the reward program, numbered by the step that will
 * train them (the next one; this one in the first step's first pass). A built-in reward scores
 * here and now. */
dfg_status grpo_reward_submit(dfg_host_ctx *ctx) {
    dfg_grpo_config *c = dfg_host_user(ctx);
    if (strcmp(c->reward, "external")) return dfg_grpo_rewards_task(ctx, &c->task, (int)c->Lp, c->reward);
    dfg_buffer primed;
    dfg_status st = dfg_task_tensor(ctx, "async.primed", DFG_F32, 0, NULL, "", false, &primed);
    if (st) return st;
    dfg_grpo_reward_opts o = reward_opts(c);
    int64_t step = dfg_host_step(ctx) + (*(const float *)primed.data != 0.0f ? 1 : 0);
    return dfg_grpo_rewards_submit(ctx, dfg_host_reward_source(ctx), &o, step + 1);
}

/* Waits for the submitted batch's rewards (a built-in reward has them already). */
dfg_status grpo_reward_collect(dfg_host_ctx *ctx) {
    dfg_grpo_config *c = dfg_host_user(ctx);
    if (strcmp(c->reward, "external")) return DFG_OK;
    dfg_grpo_reward_opts o = reward_opts(c);
    return dfg_grpo_rewards_collect(ctx, dfg_host_reward_source(ctx), &o);
}
