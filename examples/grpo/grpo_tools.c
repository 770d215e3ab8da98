/* grpo_tools.c - multi-turn episodes with tools (dfg_grpo_tools.h): the decode step that keeps one
 * column a row, the extend stage that puts the tools' answers into the KV cache, the loop of
 * extend, decode and the tools stage, the tools' metrics, and the host stage that answers the
 * turns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_env.h"
#include "dfg_grpo_eval.h"
#include "dfg_grpo_tools.h"

static dfg_tensor *rollout_state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape s) {
    return dfg_state(p, name, dt, s, DFG_ROLE_ROLLOUT, dfg_init_zeros());
}

dfg_status dfg_grpo_tools_state(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_tools *t) {
    t->pos = rollout_state(p, "gen.row_pos", DFG_I32, DFG_SHAPE(c->N));
    t->waiting = rollout_state(p, "tools.waiting", DFG_F32, DFG_SHAPE(c->N));
    t->answer_to = rollout_state(p, "tools.answer_to", DFG_F32, DFG_SHAPE(c->N));
    t->width = dfg_state(p, "tools.width", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    t->extended = dfg_state(p, "tools.extended", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    t->tool_mask = rollout_state(p, "tool_mask", DFG_F32, DFG_SHAPE(c->N, c->T));
    t->over = dfg_state(p, "tools.over", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    t->calls = dfg_state(p, "tools.calls", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    t->failures = dfg_state(p, "tools.failures", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    return dfg_program_status(p);
}

void dfg_grpo_tools_start(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t) {
    dfg_assign_fill(g, t->pos, (float)(c->Lp - 1));
    dfg_assign_fill(g, t->waiting, 0.0f);
    dfg_assign_fill(g, t->answer_to, -1.0f);
    dfg_assign_fill(g, t->width, 0.0f); /* no answer yet: extend's copies wait for the first round */
    dfg_assign_fill(g, t->tool_mask, 1.0f);
    dfg_assign_fill(g, t->over, 0.0f);
    dfg_assign_fill(g, t->calls, 0.0f);
    dfg_assign_fill(g, t->failures, 0.0f);
}

/* dst[r, col[r]] = active[r] ? v[r] : what it holds: dst (N, T), v (N, 1), col (N) i32, active (N, 1) */
static void write_at(dfg_graph *g, dfg_tensor *dst, dfg_tensor *v, dfg_tensor *col, dfg_tensor *active) {
    dfg_tensor *now = dfg_slice_at(g, dst, 1, col, 1); /* (N, 1) */
    dfg_slice_assign_at(g, dst, dfg_where(g, active, v, now), 1, col);
}

static dfg_tensor *scalar_f32(dfg_graph *g, float v) { return dfg_fill(g, DFG_F32, DFG_SCALAR, v); }

dfg_status dfg_grpo_tools_step(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t,
                               const dfg_grpo_rollout *r, dfg_tensor *logits) {
    int64_t N = dfg_tensor_numel(r->done); /* the batch, or decode_tail's rows */
    dfg_shape col1 = DFG_SHAPE(N, 1);
    dfg_tensor *lp = NULL; /* (N) each drawn token's sampling log-prob */
    dfg_tensor *drawn = dfg_grpo_draw(g, r, logits, dfg_grpo_sample_settings(c), r->logp ? &lp : NULL); /* (N, 1) i32 */
    dfg_tensor *pos = dfg_cast(g, t->pos, DFG_F32);                    /* (N) */
    dfg_tensor *room = dfg_affine(g, dfg_equal(g, pos, scalar_f32(g, (float)(c->T - 1))), -1.0f, 1.0f);
    /* a row writes this step when its episode goes on, it is not waiting and a column is left */
    dfg_tensor *active = dfg_mul(g, dfg_mul(g, dfg_affine(g, r->done, -1.0f, 1.0f), dfg_affine(g, t->waiting, -1.0f, 1.0f)), room);
    dfg_tensor *next_f = dfg_minimum(g, dfg_add_scalar(g, pos, 1.0f), scalar_f32(g, (float)(c->T - 1)));
    dfg_tensor *next = dfg_cast(g, next_f, DFG_I32); /* (N) */
    dfg_tensor *tok = drawn, *act = dfg_reshape(g, active, col1);
    write_at(g, r->tokens, tok, next, act);
    write_at(g, r->mask, dfg_fill(g, DFG_F32, col1, 1.0f), next, act);
    if (r->logp) write_at(g, r->logp, dfg_reshape(g, lp, col1), next, act);
    dfg_tensor *is_eos = NULL; /* (N) */
    for (int i = 0; i < c->n_eos; i++) {
        dfg_tensor *hit = dfg_equal(g, dfg_reshape(g, tok, DFG_SHAPE(N)), dfg_fill(g, DFG_I32, DFG_SCALAR, (float)c->eos[i]));
        is_eos = is_eos ? dfg_maximum(g, is_eos, hit) : hit;
    }
    /* an EOS ends the turn: the tools stage decides whether the episode goes on */
    dfg_tensor *ends = dfg_mul(g, active, is_eos);
    dfg_tensor *waiting = dfg_maximum(g, t->waiting, ends);
    /* a row that fills its last column without ending its turn is truncated: done */
    dfg_tensor *filled = dfg_mul(g, dfg_mul(g, active, dfg_equal(g, next_f, scalar_f32(g, (float)(c->T - 1)))),
                                 dfg_affine(g, ends, -1.0f, 1.0f));
    dfg_tensor *done = dfg_maximum(g, r->done, filled);
    dfg_assign(g, t->waiting, waiting);
    dfg_assign(g, r->done, done);
    dfg_assign(g, t->pos, dfg_where(g, active, next, t->pos));
    dfg_assign(g, r->token, dfg_where(g, act, tok, r->token));
    if (r->finished) { /* every row done or waiting: the sum of N ones, exact in f32 */
        dfg_tensor *idle = dfg_sum(g, dfg_maximum(g, done, waiting), 0);
        dfg_assign(g, r->finished, dfg_equal(g, idle, scalar_f32(g, (float)N)));
    }
    return dfg_graph_status(g);
}

int dfg_grpo_tools_extend_widths(const dfg_grpo_config *c, int64_t *widths) {
    int n = 0;
    for (int64_t w = 4; 2 * w <= c->max_new && n < DFG_GRPO_MAX_EXTEND; w *= 2) widths[n++] = w;
    if (!n) widths[n++] = c->max_new > 1 ? c->max_new - 1 : 1; /* a short budget: one copy holds any answer */
    return n;
}

/* extend's copy of width w: "extend" the widest, "extend[w]" the others (the length buckets' names) */
static void extend_stage(char *buf, size_t len, int64_t w, bool widest) {
    if (widest) snprintf(buf, len, "extend");
    else snprintf(buf, len, "extend[%lld]", (long long)w);
}

int dfg_grpo_tools_extend_stages(const dfg_grpo_config *c, char (*names)[32]) {
    int64_t w[DFG_GRPO_MAX_EXTEND];
    int n = dfg_grpo_tools_extend_widths(c, w);
    for (int i = 0; i < n; i++) extend_stage(names[i], sizeof(names[i]), w[i], i == n - 1);
    return n;
}

/* One pass of the copy of width E. Why the rows without an answer this round are left as they
 * were: the window starts at or before the row's column pos (col = min(pos, T - E)), and
 * dfg_model_extend writes only its columns from pos on. The cache's columns before pos, the row's
 * context, keep their keys and values exactly; column pos and after are columns decode has not
 * read yet this turn: it writes a column's keys and values before it attends to it, moving one
 * column a run (and a later extend writes them again from its row's column), so nothing reads
 * what this pass left there. An answered row's columns pos .. answer_to-1 are its context from
 * now on: its last token before the answer (decode's next input until now) and the answer but its
 * last token, which becomes the next input, so decode samples at its next run. A pass takes the
 * columns its window holds and leaves the row at the first one past them (its answer's last
 * column once it holds the rest): an answer longer than the widest copy takes several passes. */
static dfg_status build_extend(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_tools *t,
                               const dfg_grpo_extend_io *io, int64_t E, bool widest) {
    char name[32];
    extend_stage(name, sizeof(name), E, widest);
    dfg_graph *g = dfg_graph_new(p, name);
    int64_t N = c->N;
    dfg_tensor *pos = dfg_cast(g, t->pos, DFG_F32); /* (N) */
    dfg_tensor *col_f = dfg_minimum(g, pos, scalar_f32(g, (float)(c->T - E)));
    dfg_tensor *col = dfg_cast(g, col_f, DFG_I32);
    /* the row's last known column: its answer's end, or its own column (a row answered in an
     * earlier round has answer_to <= pos) */
    dfg_tensor *last = dfg_maximum(g, t->answer_to, pos);
    dfg_tensor *cols = dfg_add(g, dfg_reshape(g, col_f, DFG_SHAPE(N, 1)), dfg_cast(g, dfg_nn_positions(g, 1, 0, E), DFG_F32));
    /* past it a column holds what an earlier step left there (any id): pad, so the embedding reads
     * a token of the vocabulary; nothing reads what those columns make */
    dfg_tensor *known = dfg_clamp(g, dfg_add_scalar(g, dfg_sub(g, dfg_reshape(g, last, DFG_SHAPE(N, 1)), cols), 1.0f), 0.0f, 1.0f);
    dfg_tensor *window = dfg_slice_at(g, io->tokens, 1, col, E); /* (N, E) */
    dfg_tensor *tok = dfg_where(g, known, window, dfg_fill(g, DFG_I32, DFG_SCALAR, (float)c->pad_id));
    dfg_model_extend(g, io->policy, io->kv, tok, col, t->pos);
    /* the row moves to its answer's end, or to the first column past the window: max(pos, min(answer_to, col + E)) */
    dfg_tensor *to_f = dfg_maximum(g, pos, dfg_minimum(g, t->answer_to, dfg_add_scalar(g, col_f, (float)E)));
    dfg_tensor *to = dfg_cast(g, to_f, DFG_I32);
    dfg_tensor *moved = dfg_clamp(g, dfg_sub(g, to_f, pos), 0.0f, 1.0f); /* (N) */
    dfg_assign(g, io->token, dfg_where(g, dfg_reshape(g, moved, DFG_SHAPE(N, 1)), dfg_slice_at(g, io->tokens, 1, to, 1), io->token));
    dfg_assign(g, t->pos, to);
    /* an answer that fills the row's last column leaves nothing to sample: the row is done
     * (truncated), as decode makes a row that writes its last column without ending its turn */
    dfg_tensor *full = dfg_mul(g, moved, dfg_equal(g, to_f, scalar_f32(g, (float)(c->T - 1))));
    dfg_assign(g, io->done, dfg_maximum(g, io->done, full));
    /* every answer in the cache: the widest copy's passes end (the sum of N ones or zeros, exact) */
    dfg_tensor *left = dfg_sum(g, dfg_clamp(g, dfg_sub(g, t->answer_to, to_f), 0.0f, 1.0f), 0);
    dfg_assign(g, t->extended, dfg_equal(g, left, scalar_f32(g, 0.0f)));
    int64_t passes = widest ? (c->max_new - 1 + E - 1) / E : 1; /* the longest answer: max_new - 1 */
    dfg_status st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)(passes > 1 ? passes : 1));
    return st || passes <= 1 ? st : dfg_stage_until(p, name, t->extended);
}

dfg_status dfg_grpo_tools_extend(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_tools *t,
                                 const dfg_grpo_extend_io *io) {
    int64_t w[DFG_GRPO_MAX_EXTEND];
    int n = dfg_grpo_tools_extend_widths(c, w);
    dfg_status st = DFG_OK;
    for (int i = 0; i < n && !st; i++) {
        char name[32];
        bool widest = i == n - 1;
        extend_stage(name, sizeof(name), w[i], widest);
        st = build_extend(p, c, t, io, w[i], widest);
        /* the narrowest copy that holds the round's longest answer, the widest for any longer
         * one; none while width is 0 */
        double lo = i == 0 ? 0.0 : (double)w[i - 1], hi = widest ? (double)c->max_new : (double)w[i];
        if (!st) st = dfg_stage_when(p, name, t->width, lo, hi);
    }
    return st;
}

dfg_status dfg_grpo_tools_loop(dfg_program *p, const dfg_grpo_config *c, const dfg_grpo_tools *t, const char *decode) {
    (void)decode; /* extend's narrowest copy comes before it and starts the loop */
    int64_t w[DFG_GRPO_MAX_EXTEND];
    char first[32];
    int n = dfg_grpo_tools_extend_widths(c, w);
    extend_stage(first, sizeof(first), w[0], n == 1);
    dfg_status st = dfg_stage_host(p, "tools", "grpo_tools");
    if (!st) st = dfg_stage_loop(p, first, "tools", t->over, (int)(c->max_tool_rounds > 0 ? c->max_tool_rounds : 1));
    return st;
}

void dfg_grpo_tools_metrics(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_tools *t) {
    dfg_tensor *calls = dfg_grpo_world_reduce(g, t->calls, DFG_COLL_SUM, c->W);
    dfg_tensor *failures = dfg_grpo_world_reduce(g, t->failures, DFG_COLL_SUM, c->W);
    dfg_metric(g, "tools/call_frequency", dfg_scale(g, calls, 1.0f / (float)(c->N * c->W)));
    dfg_metric(g, "tools/failure_frequency", dfg_div(g, failures, dfg_maximum(g, calls, scalar_f32(g, 1.0f))));
}

/* ---------------------------------------------------------------- the host */
struct dfg_grpo_turns {
    int64_t n;           /* N rows */
    int64_t step;        /* the step the episodes are of (-1: none yet) */
    int64_t rounds;      /* rounds of tool calls answered this step */
    int64_t passes;      /* the tools stage's runs this step: decode's next round is this one */
    int64_t *turn_start; /* (N) the first column of each row's current turn */
    bool *told;          /* (N) the environment program has the row's last turn */
    dfg_env_turn *turns; /* (N) the ended turns of a round */
    dfg_env_answer *answers;
    int32_t *suffix;     /* (N, max_new + 1) each row's answer from a built-in tool */
    dfg_env_row *rows;   /* (N) reset's rows */
    dfg_env_prompt *prompts;
    float *env_rewards;  /* (N) finish's */
    char **messages;     /* (N) each row's conversation from the environment program, for the rewards */
    const char **given;  /* (N) finish's messages, valid until the program's next call */
    bool finished;       /* this step's episodes are finished (messages hold them) */
    bool scored;         /* ... and env_rewards their scores (the program scores episodes) */
};

dfg_status dfg_grpo_turns_new(const dfg_grpo_config *c, dfg_grpo_turns **out) {
    dfg_grpo_turns *t = calloc(1, sizeof(*t));
    if (t) {
        t->n = c->N, t->step = -1;
        t->turn_start = calloc((size_t)c->N, sizeof(int64_t));
        t->told = calloc((size_t)c->N, sizeof(bool));
        t->turns = calloc((size_t)c->N, sizeof(dfg_env_turn));
        t->answers = calloc((size_t)c->N, sizeof(dfg_env_answer));
        t->suffix = calloc((size_t)c->N * (size_t)(c->max_new + 1), sizeof(int32_t));
        t->rows = calloc((size_t)c->N, sizeof(dfg_env_row));
        t->prompts = calloc((size_t)c->N, sizeof(dfg_env_prompt));
        t->env_rewards = calloc((size_t)c->N, sizeof(float));
        t->messages = calloc((size_t)c->N, sizeof(char *));
        t->given = calloc((size_t)c->N, sizeof(char *));
    }
    if (!t || !t->turn_start || !t->told || !t->turns || !t->answers || !t->suffix || !t->rows || !t->prompts ||
        !t->env_rewards || !t->messages || !t->given) {
        dfg_grpo_turns_free(t);
        return DFG_ERR_NOMEM;
    }
    *out = t;
    return DFG_OK;
}

static void forget_messages(dfg_grpo_turns *t) {
    for (int64_t r = 0; t->messages && r < t->n; r++) free(t->messages[r]), t->messages[r] = NULL;
    t->finished = t->scored = false;
}

void dfg_grpo_turns_free(dfg_grpo_turns *t) {
    if (!t) return;
    forget_messages(t);
    free(t->turn_start), free(t->told), free(t->turns), free(t->answers), free(t->suffix);
    free(t->rows), free(t->prompts), free(t->env_rewards), free(t->messages), free(t->given);
    free(t);
}

const char *const *dfg_grpo_turns_messages(const dfg_grpo_turns *t) {
    return t && t->finished ? (const char *const *)t->messages : NULL;
}

const float *dfg_grpo_turns_rewards(const dfg_grpo_turns *t) { return t && t->scored ? t->env_rewards : NULL; }

/* Does this plan's episodes call an environment program (else the task's built-in tool)? */
static bool uses_program(const dfg_grpo_config *c) { return c->ds || c->n_tools > 0; }

/* The run's environment program, or NULL after failing the stage with what to add. */
static dfg_env_source *program(dfg_host_ctx *ctx) {
    dfg_env_source *env = dfg_host_env_source(ctx);
    if (!env)
        dfg_host_fail(ctx, "this plan's episodes call tools, and the run has no environment program: add "
                           "--env-cmd '...' (tools/env_server.py --list prints it)");
    return env;
}

/* A new prompt from reset, left-padded into row r's Lp prompt columns (cut from the left with
 * truncate_prompts=left, else refused). */
static dfg_status place_prompt(dfg_host_ctx *ctx, const dfg_grpo_config *c, int64_t r, const dfg_env_prompt *np,
                               int32_t *tokens, int32_t *start) {
    int64_t n = np->n_prompt, cut = n > c->Lp ? n - c->Lp : 0;
    if (cut && !c->truncate_left)
        return dfg_host_fail(ctx, "the environment's reset made row %lld's prompt %lld tokens, longer than "
                                  "max_prompt_length %lld (truncate_prompts=left cuts it)",
                             (long long)r, (long long)n, (long long)c->Lp);
    int64_t T = c->T, s0 = c->Lp - (n - cut);
    for (int64_t i = 0; i < c->Lp; i++) tokens[r * T + i] = i < s0 ? c->pad_id : np->prompt_ids[cut + i - s0];
    start[r] = (int32_t)s0;
    return DFG_OK;
}

dfg_status dfg_grpo_tools_reset(dfg_host_ctx *ctx, dfg_grpo_config *c) {
    dfg_grpo_turns *h = c->turns;
    forget_messages(h);
    h->step = -1; /* new episodes: the next tools stage starts their rounds (an eval batch has its step's number) */
    if (!uses_program(c)) return DFG_OK;
    dfg_env_source *env = program(ctx);
    if (!env) return DFG_ERR_ARG;
    dfg_buffer tok, start;
    if (dfg_host_buffer(ctx, "tokens", &tok) || dfg_host_buffer(ctx, "prompt_start", &start))
        return dfg_host_fail(ctx, "tools: the plan has no 'tokens' or 'prompt_start'");
    int32_t *tokens = tok.data, *s0 = start.data;
    for (int64_t r = 0; r < c->N; r++) {
        int64_t index = c->ds_rows ? c->ds_rows[r / c->G] : -1;
        h->rows[r] = (dfg_env_row){.prompt_ids = tokens + r * c->T + s0[r], .n_prompt = c->Lp - s0[r], .index = index,
                                   .fields = c->ds && index >= 0 ? dfg_dataset_fields(c->ds, index) : "{}"};
    }
    char err[512];
    if (dfg_env_reset(env, h->rows, c->N, dfg_host_step(ctx), h->prompts, err, sizeof(err))) return dfg_host_fail(ctx, "%s", err);
    for (int64_t r = 0; r < c->N; r++) {
        const dfg_env_prompt *np = &h->prompts[r];
        for (int64_t i = 0; np->prompt_ids && i < np->n_prompt; i++)
            if (np->prompt_ids[i] < 0 || np->prompt_ids[i] >= c->model.vocab_size)
                return dfg_host_fail(ctx, "the environment's reset gave row %lld token %d, outside the vocabulary of %d",
                                     (long long)r, np->prompt_ids[i], c->model.vocab_size);
        dfg_status st = np->prompt_ids ? place_prompt(ctx, c, r, np, tokens, s0) : DFG_OK;
        if (st) return st;
    }
    /* a group computes its prompt once (share_prompts): its rows' prompts must stay one */
    for (int64_t r = 0; c->share_prompts && r < c->N; r++) {
        int64_t first = r - r % c->G;
        if (s0[r] != s0[first] || memcmp(tokens + r * c->T, tokens + first * c->T, sizeof(int32_t) * (size_t)c->Lp))
            return dfg_host_fail(ctx, "the environment's reset gave rows %lld and %lld of one group different prompts; this "
                                      "plan computes a group's prompt once (compile with --set share_prompts=false)",
                                 (long long)first, (long long)r);
    }
    return DFG_OK;
}

/* Each round of decode draws from its own part of the step's stream: round j from the rollout's
 * start + j max_new (prefill reserved (max_tool_rounds + 1) max_new draws, and a round runs at most
 * max_new times), so what a row samples after a tool's answer does not depend on how many runs the
 * earlier rounds took (an early end, or a device's chunks of runs). The rollout's start is the
 * step's stream ("rng", already moved past the reserve) less the reserve. */
static dfg_status next_round_draws(dfg_host_ctx *ctx, const dfg_grpo_config *c, int64_t round) {
    dfg_buffer step_rng, gen_rng;
    if (dfg_host_buffer(ctx, "rng", &step_rng) || dfg_host_buffer(ctx, "gen.rng", &gen_rng))
        return dfg_host_fail(ctx, "tools: the plan has no 'rng' or 'gen.rng'");
    const uint32_t *s = step_rng.data;
    uint32_t *g = gen_rng.data;
    uint64_t reserve = (uint64_t)c->max_new * (uint64_t)(c->max_tool_rounds + 1);
    uint64_t at = ((uint64_t)s[2] | (uint64_t)s[3] << 32) - reserve + (uint64_t)round * (uint64_t)c->max_new;
    g[0] = s[0], g[1] = s[1], g[2] = (uint32_t)at, g[3] = (uint32_t)(at >> 32);
    return DFG_OK;
}

/* The round's answers from the task's built-in tool (an answer past the row's room ends it). */
static void builtin_answers(dfg_grpo_config *c, dfg_grpo_turns *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const dfg_env_turn *q = &h->turns[i];
        int32_t *at = h->suffix + q->row * (c->max_new + 1);
        int max = (int)(q->room < c->max_new ? q->room : c->max_new), calls = 0, failures = 0;
        int k = q->last ? 0 : dfg_task_tool_turn(&c->task, q->turn_ids, (int)q->n_turn, at, max, &calls, &failures);
        bool goes_on = k > 0 && k <= max;
        h->answers[i] = (dfg_env_answer){.done = !goes_on, .suffix_ids = goes_on ? at : NULL, .n_suffix = goes_on ? k : 0,
                                         .calls = calls, .failures = failures};
    }
}

/* The program's answers, checked against the vocabulary; and once every episode is over, its
 * record of them (the messages the reward functions get). */
static dfg_status program_answers(dfg_host_ctx *ctx, dfg_grpo_config *c, dfg_grpo_turns *h, int64_t n, bool over) {
    dfg_env_source *env = program(ctx);
    char err[512];
    if (!env) return DFG_ERR_ARG;
    int64_t step = dfg_host_step(ctx);
    if (n && dfg_env_turns(env, h->turns, n, step, h->answers, err, sizeof(err))) return dfg_host_fail(ctx, "%s", err);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; !h->answers[i].done && k < h->answers[i].n_suffix; k++)
            if (h->answers[i].suffix_ids[k] < 0 || h->answers[i].suffix_ids[k] >= c->model.vocab_size)
                return dfg_host_fail(ctx, "step %lld: the environment answered row %lld with token %d, outside the "
                                          "vocabulary of %d", (long long)step + 1, (long long)h->turns[i].row,
                                     h->answers[i].suffix_ids[k], c->model.vocab_size);
    if (!over) return DFG_OK;
    if (dfg_env_finish(env, c->N, step, h->env_rewards, h->given, err, sizeof(err))) return dfg_host_fail(ctx, "%s", err);
    for (int64_t r = 0; r < c->N; r++)
        if (h->given[r] && !(h->messages[r] = strdup(h->given[r]))) return dfg_host_fail(ctx, "tools: out of memory");
    h->finished = true;
    h->scored = dfg_env_source_has_reward(env) != 0;
    return DFG_OK;
}

dfg_status dfg_grpo_tools_answer(dfg_host_ctx *ctx, dfg_grpo_config *c) {
    dfg_grpo_turns *h = c->turns;
    dfg_buffer tok, cmask, tmask, wait, done, pos, answer_to, width, over, calls, fails;
    const char *names[11] = {"tokens", "completion_mask", "tool_mask", "tools.waiting", "gen.done", "gen.row_pos",
                             "tools.answer_to", "tools.width", "tools.over", "tools.calls", "tools.failures"};
    dfg_buffer *bufs[11] = {&tok, &cmask, &tmask, &wait, &done, &pos, &answer_to, &width, &over, &calls, &fails};
    for (int i = 0; i < 11; i++)
        if (dfg_host_buffer(ctx, names[i], bufs[i])) return dfg_host_fail(ctx, "tools: the plan has no tensor '%s'", names[i]);
    int32_t *tokens = tok.data, *col = pos.data;
    float *cm = cmask.data, *tm = tmask.data, *w = wait.data, *d = done.data, *to = answer_to.data;
    int64_t longest = 0; /* the round's longest answer: extend's width */
    int64_t N = c->N, T = c->T, step = dfg_host_step(ctx);
    if (h->step != step) { /* a new step: every row's first turn starts after the prompt */
        h->step = step, h->rounds = h->passes = 0;
        for (int64_t r = 0; r < N; r++) h->turn_start[r] = c->Lp, h->told[r] = false;
    }
    /* past the rounds TRL allows, a turn is the episode's last: the program records it, runs nothing */
    bool last_round = h->rounds >= c->max_tool_rounds, program_serves = uses_program(c);
    int64_t n = 0;
    for (int64_t r = 0; r < N; r++) {
        bool ended = w[r] != 0.0f && d[r] == 0.0f;
        bool cut = d[r] != 0.0f && !h->told[r] && program_serves; /* the budget ended it: the record needs its turn */
        if (ended || cut)
            h->turns[n++] = (dfg_env_turn){.row = r, .turn_ids = tokens + r * T + h->turn_start[r],
                                           .n_turn = col[r] + 1 - h->turn_start[r], .room = T - 1 - col[r],
                                           .last = cut || last_round};
    }
    dfg_status st = !program_serves ? (builtin_answers(c, h, n), DFG_OK) : program_answers(ctx, c, h, n, false);
    if (st) return st;
    if (n) h->rounds++;
    bool all = true;
    for (int64_t i = 0; i < n; i++) {
        const dfg_env_turn *q = &h->turns[i];
        const dfg_env_answer *a = &h->answers[i];
        int64_t r = q->row;
        ((float *)calls.data)[0] += (float)a->calls, ((float *)fails.data)[0] += (float)a->failures;
        dfg_grpo_eval_count_calls(ctx, r, a->calls, a->failures); /* an evaluation counts each row's */
        w[r] = 0.0f;
        h->told[r] = true;
        if (a->done || a->n_suffix < 1 || a->n_suffix > q->room) { /* TRL drops a tool answer past the budget */
            d[r] = 1.0f;
            continue;
        }
        for (int64_t k = 0; k < a->n_suffix; k++) { /* TRL's completion_mask covers the tool's tokens */
            tokens[r * T + col[r] + 1 + k] = a->suffix_ids[k];
            cm[r * T + col[r] + 1 + k] = 1.0f;
            tm[r * T + col[r] + 1 + k] = 0.0f;
        }
        to[r] = (float)(col[r] + a->n_suffix);
        if (a->n_suffix > longest) longest = a->n_suffix;
        h->turn_start[r] = col[r] + a->n_suffix + 1;
        h->told[r] = false;
    }
    for (int64_t r = 0; r < N; r++) all = all && d[r] != 0.0f;
    if (all && program_serves && (st = program_answers(ctx, c, h, 0, true))) return st;
    ((float *)over.data)[0] = all ? 1.0f : 0.0f;
    ((float *)width.data)[0] = all ? 0.0f : (float)longest; /* 0: no extend runs (a replayed rollout's steps too) */
    h->passes++;
    return all ? DFG_OK : next_round_draws(ctx, c, h->passes);
}
