/* grpo_async.c - one-step-off rollouts (async_rollouts=1; dfg_grpo_async.h). Step k+1 runs:
 *   async.take                  batch k+1, rolled out in step k, into the async.* buffers
 *   data, prefill, decode       batch k+2, into the rollout tensors
 *   reward.submit               host: its rows go to the reward program, no wait (after a resume,
 *                               first batch k+1's again: the stopped process had sent them)
 *   async.first                 (the first step only, instead of async.take) batch 1 into the
 *                               async.* buffers; back to data once, for batch 2
 *   reward                      host: batch k+1's rewards, into async.rewards
 *   advantages .. update.k      train on batch k+1, in the async.* buffers
 *   async.metrics               the staleness of the batch trained
 * Two requests are in flight after the submit: the program scores batch k+1 while batch k
 * trains and batch k+2 rolls out (one device alternates its work; what overlaps is the reward
 * program's, its own process: an LLM judge, a sandbox). A built-in reward scores at the submit,
 * and its rewards travel with the batch. The old log-probs are the sampler's, as TRL's
 * AsyncGRPOTrainer's old_log_probs, so the importance-sampling correction's ratio is 1 and the
 * clipped ratio pi / pi_sampler carries the staleness. After a step the async.* buffers hold the
 * batch it trained (what --dump writes) and the rollout tensors the next one; checkpoints hold
 * both, and what a request needs (the dataset rows, a built-in task's answers): a resumed run
 * trains on the batch the stopped one had rolled out, asking for its rewards again. */
#include <stdio.h>
#include <stdlib.h>
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

static bool external(const dfg_grpo_config *c) { return !strcmp(c->reward, "external"); }

static void make_buffers(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s, dfg_grpo_async *a) {
    /* what a request for the trained batch needs besides its tokens, kept for a resumed run's
     * resend: the dataset rows the data stage drew (grpo_data.c writes "dataset.rows"), or a
     * built-in task's answers */
    dfg_tensor *rows = c->ds ? dfg_state(p, "dataset.rows", DFG_I32, DFG_SHAPE(c->P), DFG_ROLE_NONE, dfg_init_zeros()) : NULL;
    bool answers = external(c) && !c->ds;
    *a = (dfg_grpo_async){
        .tokens = trained_copy(p, s->tokens, DFG_ROLE_ROLLOUT),
        .mask = trained_copy(p, s->mask, DFG_ROLE_ROLLOUT),
        .start = trained_copy(p, s->start, DFG_ROLE_ROLLOUT),
        .rewards = trained_copy(p, s->rewards, DFG_ROLE_ROLLOUT),
        .reward_values = trained_copy(p, s->reward_values, DFG_ROLE_NONE),
        .sampling_logp = trained_copy(p, s->sampling_logp, DFG_ROLE_ROLLOUT),
        .truncated_prompts = trained_copy(p, s->truncated_prompts, DFG_ROLE_NONE),
        .rows = trained_copy(p, rows, DFG_ROLE_NONE),
        .answers = answers ? trained_copy(p, dfg_find(p, "answers"), DFG_ROLE_NONE) : NULL,
        .answer_len = answers ? trained_copy(p, dfg_find(p, "answer_len"), DFG_ROLE_NONE) : NULL,
        .staleness = dfg_state(p, "async.staleness", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
        .primed = dfg_state(p, "async.primed", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
        .again = dfg_state(p, "async.again", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
        .pending = dfg_state(p, "async.pending", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros()),
    };
}

/* The rollout tensors into the trained buffers; the rewards too when they are known (a built-in
 * reward scored them at the submit; an external one's arrive later, into the copies). */
static void copy_batch(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_async *a, const dfg_grpo_state *s) {
    dfg_program *p = dfg_graph_program(g);
    dfg_tensor *from[10] = {s->tokens, s->mask, s->start, s->sampling_logp, s->truncated_prompts, dfg_find(p, "dataset.rows"),
                            dfg_find(p, "answers"), dfg_find(p, "answer_len"), s->rewards, s->reward_values};
    dfg_tensor *to[10] = {a->tokens, a->mask, a->start, a->sampling_logp, a->truncated_prompts, a->rows,
                          a->answers, a->answer_len, a->rewards, a->reward_values};
    int n = external(c) ? 8 : 10;
    for (int i = 0; i < n; i++)
        if (to[i]) dfg_assign(g, to[i], from[i]);
    dfg_assign_fill(g, a->pending, external(c) ? 1.0f : 0.0f); /* its rewards: the program's to give */
}

static dfg_status staged(dfg_program *p, dfg_graph *g) {
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

dfg_status dfg_grpo_async_before_rollout(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_state *s,
                                         dfg_grpo_async *a) {
    make_buffers(p, c, s, a);
    dfg_status st = dfg_program_status(p);
    if (st) return st;
    dfg_graph *g = dfg_graph_new(p, "async.take");
    copy_batch(g, c, a, s);
    dfg_assign_fill(g, a->staleness, 1.0f); /* the last step's update came between its rollout and now */
    /* from the second step on: the first has no batch rolled out before it */
    return (st = staged(p, g)) ? st : dfg_stage_when(p, "async.take", a->primed, 0.5, 2.0);
}

dfg_status dfg_grpo_async_after_rollout(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_async *a, dfg_grpo_state *s) {
    dfg_status st = dfg_stage_host(p, "reward.submit", "grpo_reward_submit");
    if (st) return st;
    dfg_graph *g = dfg_graph_new(p, "async.first");
    copy_batch(g, c, a, s);
    dfg_assign_fill(g, a->staleness, 0.0f); /* rolled out by the policy it trains */
    dfg_assign_fill(g, a->primed, 1.0f);
    if ((st = staged(p, g))) return st;
    /* it runs only while the buffers hold no batch; the loop goes back to data once */
    if (!st) st = dfg_stage_when(p, "async.first", a->primed, -1.0, 0.5);
    if (!st) st = dfg_stage_loop(p, "data", "async.first", a->again, 1);
    /* the trained batch's rewards: requested a step ago, scored while this step rolled out */
    if (!st) st = dfg_stage_host(p, "reward", "grpo_reward_collect");
    if (st) return st;
    /* the training stages' view: the rollout tensors replaced by the trained batch's */
    s->tokens = a->tokens, s->start = a->start, s->rewards = a->rewards;
    if (s->loss_mask == s->mask) s->loss_mask = a->mask; /* no tools: the loss reads completion_mask */
    s->mask = a->mask, s->reward_values = a->reward_values, s->sampling_logp = a->sampling_logp;
    s->truncated_prompts = a->truncated_prompts;
    s->old_logp = a->sampling_logp; /* 0 past each row's end: the loss masks those columns */
    return dfg_program_status(p);
}

dfg_status dfg_grpo_async_after_update(dfg_program *p, const dfg_grpo_async *a) {
    dfg_graph *g = dfg_graph_new(p, "async.metrics");
    dfg_metric(g, "staleness", a->staleness); /* the batch this step trained */
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

/* A scalar state's value (async.primed, async.pending). */
static dfg_status flag(dfg_host_ctx *ctx, const char *name, bool *out) {
    dfg_buffer b;
    dfg_status st = dfg_task_tensor(ctx, name, DFG_F32, 0, NULL, "", false, &b);
    if (!st) *out = *(const float *)b.data != 0.0f;
    return st;
}

/* After --resume: the trained batch's request went to the stopped process's program, which this
 * one never saw; it goes again, numbered by this step, the one that trains it. */
static dfg_status resend_trained(dfg_host_ctx *ctx, dfg_grpo_config *c, dfg_reward_source *src) {
    dfg_grpo_reward_opts o = reward_opts(c);
    o.prefix = "async.";
    int64_t *rows = NULL;
    if (c->ds) { /* the rows the trained batch was drawn from, not the ones just drawn */
        dfg_buffer drawn;
        dfg_status st = dfg_task_tensor(ctx, "async.dataset.rows", DFG_I32, 1, (int64_t[]){c->P}, "P", false, &drawn);
        if (st) return st;
        if (!(rows = malloc(sizeof(int64_t) * (size_t)c->P))) return dfg_host_fail(ctx, "reward.submit: out of memory");
        for (int64_t i = 0; i < c->P; i++) rows[i] = ((const int32_t *)drawn.data)[i];
        o.rows = rows;
    }
    dfg_status st = dfg_grpo_rewards_submit(ctx, src, &o, dfg_host_step(ctx) + 1);
    free(rows);
    return st;
}

/* The rows of the batch just rolled out go to the reward program, numbered by the step that will
 * train them (the next one; this one in the first step's first pass). A built-in reward scores
 * here and now. */
dfg_status grpo_reward_submit(dfg_host_ctx *ctx) {
    dfg_grpo_config *c = dfg_host_user(ctx);
    if (!external(c)) return dfg_grpo_rewards_task(ctx, &c->task, (int)c->Lp, c->reward);
    dfg_reward_source *src = dfg_host_reward_source(ctx);
    bool primed = false, pending = false;
    dfg_status st = flag(ctx, "async.primed", &primed);
    if (!st) st = flag(ctx, "async.pending", &pending);
    if (!st && pending && src && dfg_reward_source_pending(src) == 0) st = resend_trained(ctx, c, src);
    if (st) return st;
    dfg_grpo_reward_opts o = reward_opts(c);
    return dfg_grpo_rewards_submit(ctx, src, &o, dfg_host_step(ctx) + (primed ? 1 : 0) + 1);
}

/* Waits for the trained batch's rewards, into its copies (a built-in reward's came with it). */
dfg_status grpo_reward_collect(dfg_host_ctx *ctx) {
    dfg_grpo_config *c = dfg_host_user(ctx);
    if (!external(c)) return DFG_OK;
    dfg_grpo_reward_opts o = reward_opts(c);
    o.prefix = "async.";
    dfg_buffer pending;
    dfg_status st = dfg_grpo_rewards_collect(ctx, dfg_host_reward_source(ctx), &o);
    if (!st) st = dfg_task_tensor(ctx, "async.pending", DFG_F32, 0, NULL, "", false, &pending);
    if (!st) *(float *)pending.data = 0.0f;
    return st;
}
