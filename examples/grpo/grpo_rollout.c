/* grpo_rollout.c - the GRPO pipeline's state and its rollout stages (examples/grpo/grpo.c
 * outlines the step): the persistent tensors and their scopes, the prompt-width stage of prompt
 * buckets, prefill, decode, and decode_tail's stages. Written with dfg's public DSL only. */
#include <stdlib.h>
#include <string.h>

#include "dfg_grpo_state.h"

static dfg_tensor *state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape s, dfg_role role) {
    return dfg_state(p, name, dt, s, role, dfg_init_zeros());
}

/* The decode KV cache. With share_prompts each group's prompt is stored once: the prompt part
 * holds the columns prefill writes (0 .. Lp-2), each row's own part the rest (the prompt's last
 * token, which decode feeds, then the completion and any tool tokens: the columns of per-row
 * positions and of the tools' extend stage too). */
static dfg_status make_kv_cache(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s) {
    if (!c->share_prompts)
        return dfg_model_kv_cache(p, "", s->policy, c->n_gen, c->T, &s->kv);
    return dfg_model_kv_cache_shared(p, "", s->policy, c->n_gen, c->G, c->Lp - 1, c->T - (c->Lp - 1), &s->kv);
}

/* decode_tail's rows come from any group: each width's cache is the gathered rows' own parts (as
 * the copied cache's rows) and the batch's prompt part (dfg_grpo_build_decode_tail finds each
 * row's prompt through the batch row it came from). */
static void share_tail_prompts(dfg_grpo_state *s) {
    for (int i = 0; i < s->tail.n_widths; i++)
        for (int l = 0; s->kv.k_prompt[0] && l < s->kv.n_layer; l++)
            s->tail.w[i].kv.k_prompt[l] = s->kv.k_prompt[l], s->tail.w[i].kv.v_prompt[l] = s->kv.v_prompt[l];
}

/* A width's rows' prompts, (n) i32: its row j's batch row rows[j] is of group rows[j] / G, read
 * from the constant "tail.group_of_row" (N, 1) of each batch row's group (made once, shared). */
static dfg_tensor *tail_prompt_of(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *rows) {
    dfg_program *p = dfg_graph_program(g);
    dfg_tensor *table = dfg_find(p, "tail.group_of_row");
    if (!table) {
        float *group = malloc(sizeof(float) * (size_t)c->N);
        if (!group) {
            dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (int64_t r = 0; r < c->N; r++) group[r] = (float)(r / c->G);
        table = dfg_const(p, "tail.group_of_row", DFG_F32, DFG_SHAPE(c->N, 1), group);
        free(group);
    }
    return dfg_cast(g, dfg_reshape(g, dfg_embed(g, table, rows), DFG_SHAPE(dfg_tensor_shape(rows).d[0])), DFG_I32);
}

/* Each width's tensors live from its gather to its merge; go and entered through the ladder's
 * stages (with tools from decode.live); gen.stop in the batch decode alone. */
static void scope_tail(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s) {
    const dfg_grpo_tail *t = &s->tail;
    char compact[48], loop[48], merge[48], last[48];
    dfg_grpo_tail_stage(last, sizeof(last), "decode.merge", t, t->n_widths - 1);
    for (int i = 0; i < t->n_widths; i++) {
        const dfg_grpo_tail_width *w = &t->w[i];
        dfg_grpo_tail_stage(compact, sizeof(compact), "decode.compact", t, i);
        dfg_grpo_tail_stage(loop, sizeof(loop), "decode.tail", t, i);
        dfg_grpo_tail_stage(merge, sizeof(merge), "decode.merge", t, i);
        const char *kv_last = c->tools ? merge : loop; /* with tools merge writes them back */
        for (int l = 0; l < c->model.n_layer; l++) {
            dfg_set_scope(p, w->kv.k[l], compact, kv_last);
            dfg_set_scope(p, w->kv.v[l], compact, kv_last);
        }
        dfg_tensor *rows[12] = {w->rows,  w->back,     w->tokens,   w->mask,    w->logp, w->done,
                                w->token, w->kv.start, w->finished, w->waiting, w->pos,  w->stop};
        for (int k = 0; k < 12; k++)
            if (rows[k]) dfg_set_scope(p, rows[k], compact, merge);
    }
    dfg_set_scope(p, t->go, c->tools ? "decode.live" : "decode", last);
    dfg_set_scope(p, t->entered, c->tools ? "decode.live" : "decode", last);
    dfg_set_scope(p, t->stop, "decode", "decode");
}

dfg_status dfg_grpo_make_state(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s) {
    int64_t N = c->N, T = c->T;
    dfg_status st = dfg_model_params(p, "", c->model, s->policy);
    if (!st && c->beta != 0.0f && c->model.lora.r > 0) dfg_model_adapter_off(s->policy, s->ref); /* the base: no copy */
    else if (!st && c->beta != 0.0f && !(st = dfg_model_frozen(p, "ref.", c->model, s->ref)))
        st = dfg_nn_init_copy(p, s->ref->params, s->policy->params, s->ref->n_params); /* ref starts as the policy */
    if (!st) st = make_kv_cache(p, c, s);
    if (!st) st = dfg_nn_grad_buffers(p, s->policy->params, s->policy->n_params, "", s->grads);
    if (st) return st;
    s->tokens = state(p, "tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->mask = state(p, "completion_mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->loss_mask = c->tools ? state(p, "loss_mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_NONE) : s->mask;
    s->rewards = state(p, "rewards", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    s->advantages = state(p, "advantages", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    s->active = state(p, "active_tokens", DFG_F32, DFG_SCALAR, DFG_ROLE_ROLLOUT);
    if (c->padded) { /* each row's first prompt column: left padding is never attended */
        s->start = state(p, "prompt_start", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
        s->kv.start = s->start;
    }
    if (c->ds) {
        /* [epoch, rows drawn in it]: a stream position like the RNG's, kept in checkpoints */
        state(p, "dataset.position", DFG_I32, DFG_SHAPE(2), DFG_ROLE_RNG);
        state(p, "dataset.hash", DFG_I32, DFG_SHAPE(2), DFG_ROLE_RNG); /* to notice an edited file on resume */
        s->truncated_prompts = state(p, "prompts_truncated", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    } else {
        state(p, "answers", DFG_I32, DFG_SHAPE(N, c->task.max_answer_len), DFG_ROLE_ROLLOUT);
        state(p, "answer_len", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    }
    if (!strcmp(c->reward, "external"))
        s->reward_values = state(p, "reward_values", DFG_F32, DFG_SHAPE(c->N, c->n_funcs), DFG_ROLE_NONE);
    s->logp = state(p, "logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->sampling_logp = state(p, "sampling_logps", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->loss.sampling_correction) s->is_ratio = state(p, "importance_sampling_ratio", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->loss.off_policy_mask) s->off_policy = state(p, "off_policy_mask", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    dfg_grpo_sampling_state(p, &s->sampling);
    if (c->chunks) {
        s->chunks = (dfg_grpo_chunks){.groups = c->P, .G = c->G, .chunks = c->chunks, .regroup = c->regroup,
                                      .n_widths = c->n_widths, .widths = c->widths};
        if ((st = dfg_grpo_chunk_state(p, &s->chunks))) return st;
    }
    if (c->n_widths > 1) {
        if (!c->chunks) s->width = state(p, "rollout.width", DFG_F32, DFG_SCALAR, DFG_ROLE_ROLLOUT);
        float *cols = malloc(sizeof(float) * (size_t)c->max_new);
        if (!cols) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < c->max_new; i++) cols[i] = (float)(i + 1);
        s->columns = dfg_const(p, "rollout.columns", DFG_F32, DFG_SHAPE(c->max_new), cols);
        free(cols);
    }
    s->ref_logp = state(p, "ref_logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->iterations > 1) s->old_logp = state(p, "old_logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->iterations > 1 && c->invariant) s->sampled = state(p, "rollout.sampled", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    if (c->n_pwidths > 1) s->prompt_width = state(p, "prompt.width", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    if ((!c->chunks && c->n_widths > 1) || c->n_pwidths > 1 || s->sampled) {
        s->pass_key = state(p, "pass.key", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
        if (s->sampled) s->old_key = state(p, "old.key", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    }
    if (c->sft_steps > 0) {
        s->sft_tokens = state(p, "sft_tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
        s->sft_mask = state(p, "sft_mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    }
    s->cur_tok = state(p, "gen.token", DFG_I32, DFG_SHAPE(c->n_gen, 1), DFG_ROLE_ROLLOUT);
    if (c->tools && (st = dfg_grpo_tools_state(p, c, &s->tools))) return st;
    /* one column for every row, or with tools one a row (a row waits for its tool while others decode) */
    s->pos = c->tools ? s->tools.pos : state(p, "gen.pos", DFG_I32, DFG_SCALAR, DFG_ROLE_ROLLOUT);
    s->done = state(p, "gen.done", DFG_F32, DFG_SHAPE(c->n_gen), DFG_ROLE_ROLLOUT);
    s->rng = state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG);
    s->gen_rng = state(p, "gen.rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_NONE);
    if (c->early_exit) s->finished = state(p, "gen.finished", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    bool loops = c->GA > 1 || c->chunks; /* the scoring passes run in micro-batches or chunks */
    if (loops && c->beta != 0.0f) s->ref_micro = state(p, "ref.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    if (loops && c->iterations > 1) s->old_micro = state(p, "old.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    s->micro = state(p, "train.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_loss = state(p, "train.loss", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_kl = state(p, "train.kl", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_stats = state(p, "train.stats", DFG_F32, DFG_SHAPE(DFG_GRPO_STATS), DFG_ROLE_NONE);
    if (c->chunks && c->regroup) s->acc_ext = state(p, "train.stats_ext", DFG_F32, DFG_SHAPE(4), DFG_ROLE_NONE);
    s->acc_tokens = state(p, "train.tokens", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    if (c->tail && (st = dfg_grpo_tail_state(p, s->policy, &s->kv, N, c->tail, T, true, c->tools, &s->tail))) return st;
    if (c->tail) share_tail_prompts(s);
    /* the KV cache and the decode loop's own state live only while the rollout is made: their
     * bytes go to the training activations afterwards */
    char first[48], last[32];
    dfg_grpo_prefill_stage(first, sizeof(first), c, 0, 0);
    dfg_grpo_rollout_stage(last, sizeof(last), "decode", c, (int)c->R - 1);
    /* with tools every round reads the caches again: they live through the loop */
    const char *kv_last = c->tools ? "tools" : last;
    const char *gen_last = c->tools ? "tools" : last;
    char tail_first[48], tail_last[48]; /* without tools the batch caches' last readers: the gather, the loop */
    if (c->tail) {
        dfg_grpo_tail_stage(tail_first, sizeof(tail_first), "decode.compact", &s->tail, 0);
        dfg_grpo_tail_stage(tail_last, sizeof(tail_last), "decode.tail", &s->tail, s->tail.n_widths - 1);
        if (!c->tools) kv_last = tail_first, gen_last = "decode.merge";
    }
    for (int l = 0; l < c->model.n_layer && !dfg_program_status(p); l++) {
        dfg_set_scope(p, s->kv.k[l], first, kv_last);
        dfg_set_scope(p, s->kv.v[l], first, kv_last);
        if (s->kv.k_prompt[l]) { /* decode_tail's rows read the batch's prompts */
            dfg_set_scope(p, s->kv.k_prompt[l], first, c->tail && !c->tools ? tail_last : kv_last);
            dfg_set_scope(p, s->kv.v_prompt[l], first, c->tail && !c->tools ? tail_last : kv_last);
        }
    }
    dfg_tensor *gen[5] = {s->cur_tok, s->pos, s->done, s->gen_rng, s->finished};
    for (int i = 0; i < 5; i++)
        if (gen[i]) dfg_set_scope(p, gen[i], first, gen_last);
    if (c->tail) scope_tail(p, c, s);
    return dfg_program_status(p);
}

/* ---------------------------------------------------------------- the rollout */
/* The first len tokens of the first row of every group of G rows: tokens (n, T) -> (n/G, len). */
dfg_tensor *dfg_grpo_group_prompts(dfg_graph *g, dfg_tensor *tokens, int64_t G, int64_t len) {
    dfg_shape s = dfg_tensor_shape(tokens);
    dfg_tensor *groups = dfg_reshape(g, tokens, DFG_SHAPE(s.d[0] / G, G, s.d[1]));
    return dfg_reshape(g, dfg_slice(g, dfg_slice(g, groups, 1, 0, 1), 2, 0, len), DFG_SHAPE(s.d[0] / G, len));
}

/* Sub-batch k's rows of x (rows k n_gen .. k n_gen + n_gen - 1), or x itself in one batch. */
static dfg_tensor *gen_rows(dfg_graph *g, const dfg_grpo_config *c, dfg_tensor *x, int k) {
    return c->R == 1 || !x ? x : dfg_slice(g, x, 0, (int64_t)k * c->n_gen, c->n_gen);
}

/* The KV cache as sub-batch k's graphs see it: its rows' prompt starts (left padding). */
static dfg_model_kv sub_batch_kv(dfg_graph *g, const dfg_grpo_config *c, const dfg_grpo_state *s, int k) {
    dfg_model_kv kv = s->kv;
    kv.start = gen_rows(g, c, s->start, k);
    return kv;
}

/* prompt buckets: the rank's longest prompt (its pad columns left out), for prefill's copies */
dfg_status dfg_grpo_build_prompt_width(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s) {
    dfg_graph *g = dfg_graph_new(p, "prompts");
    dfg_assign(g, s->prompt_width, dfg_grpo_longest_prompt(g, c, s->start, 1));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* Prefill of sub-batch k, over the prompt's last pwidths[pb] columns (prompt bucket pb). */
dfg_status dfg_grpo_build_prefill(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s, int k, int pb) {
    char name[48];
    dfg_grpo_prefill_stage(name, sizeof(name), c, k, pb);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_tensor *tokens = gen_rows(g, c, s->tokens, k); /* (n_gen, T) */
    dfg_model_kv kv = sub_batch_kv(g, c, s, k);
    int64_t Wp = c->pwidths[pb]; /* the prompt columns Lp - Wp .. Lp - 1: every row's real ones */
    kv.col0 = c->Lp - Wp;
    /* every prompt token but the last goes into the cache; the last one starts the decoding */
    dfg_tensor *prompts = c->share_prompts /* (n_gen/G, Wp-1) or (n_gen, Wp-1) */
                              ? dfg_grpo_group_prompts(g, kv.col0 ? dfg_slice(g, tokens, 1, kv.col0, Wp - 1) : tokens, c->G, Wp - 1)
                              : dfg_slice(g, tokens, 1, kv.col0, Wp - 1);
    dfg_model_prefill(g, s->policy, &kv, prompts);
    dfg_assign(g, s->cur_tok, dfg_slice(g, tokens, 1, c->Lp - 1, 1));
    dfg_assign_fill(g, s->pos, (float)(c->Lp - 1));
    dfg_assign_fill(g, s->done, 0.0f);
    if (s->finished) dfg_assign_fill(g, s->finished, 0.0f);
    if (k == 0) { /* what decode writes, as no column written yet */
        dfg_assign_fill(g, s->mask, 0.0f), dfg_assign_fill(g, s->sampling_logp, 0.0f);
        if (c->tools) dfg_grpo_tools_start(g, c, &s->tools);
        dfg_grpo_sampling_start(g, &s->sampling);
        if (s->sampled) dfg_assign_fill(g, s->sampled, 1.0f);
    }
    /* every sub-batch draws from where the rollout starts (the row index tells the rows apart);
     * the step's stream moves on by the whole loop's draws, however early decode ends */
    dfg_assign(g, s->gen_rng, s->rng);
    if (k == c->R - 1) /* with tools every round of calls may run decode again: as many runs */
        dfg_rng_advance(g, s->rng, c->max_new * (c->tools ? c->max_tool_rounds + 1 : 1));
    dfg_status st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
    if (st || c->n_pwidths == 1) return st;
    return dfg_stage_when(p, name, s->prompt_width, pb == 0 ? 0.0 : (double)c->pwidths[pb - 1], (double)Wp);
}

dfg_status dfg_grpo_build_decode(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s, int k) {
    if (c->tools) { /* the tools' answers go into the cache before decode: extend starts the loop */
        dfg_grpo_extend_io io = {.policy = s->policy, .kv = &s->kv, .tokens = s->tokens, .token = s->cur_tok,
                                  .done = s->done};
        dfg_status st = dfg_grpo_tools_extend(p, c, &s->tools, &io);
        if (!st && c->tail) st = dfg_grpo_tail_live(p, &s->tail, s->done, s->tools.waiting); /* few live: no batch run */
        if (st) return st;
    }
    char name[32];
    dfg_grpo_rollout_stage(name, sizeof(name), "decode", c, k);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_model_kv kv = sub_batch_kv(g, c, s, k);
    dfg_tensor *h = dfg_model_decode(g, s->policy, &kv, s->cur_tok, s->pos); /* (n_gen, 1, C) */
    dfg_tensor *logits = dfg_model_lm_head(g, s->policy, h);                  /* (n_gen, 1, V) */
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    dfg_grpo_rollout r = {.tokens = s->tokens, .mask = s->mask, .done = s->done, .token = s->cur_tok, .pos = s->pos,
                          .rng = s->gen_rng, .row0 = (int64_t)k * c->n_gen, .draw_row0 = dfg_grpo_rank_row0(g, c->W, c->N),
                          .pad = c->pad_id, .finished = s->finished, .logp = s->sampling_logp};
    if (c->tools) dfg_grpo_tools_step(g, c, &s->tools, &r, logits);
    else dfg_grpo_sample_step(g, &r, logits, dfg_grpo_sample_settings(c), c->eos, c->n_eos);
    dfg_tensor *waiting = c->tools ? s->tools.waiting : NULL;
    dfg_tensor *end = c->tail ? dfg_grpo_tail_switch(g, &s->tail, s->done, waiting, s->pos, s->finished) : s->finished;
    dfg_status st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->max_new);
    if (!st && end) st = dfg_stage_until(p, name, end);
    return st || !(c->tools && c->tail) ? st : dfg_stage_when(p, name, s->tail.go, -0.5, 0.5);
}

/* Width i of decode_tail's ladder: its rows gathered (decode.compact[w]), decoded until they
 * end or (a wider width, with tools) the next narrower width holds the live ones
 * (decode.tail[w]: each draws as its batch row), and written back (decode.merge[w]). The first
 * two run when go is in (next width, w]; the merge when this width gathered last. */
static dfg_status build_tail_width(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s, int i) {
    const dfg_grpo_tail *ladder = &s->tail;
    const dfg_grpo_tail_width *t = &ladder->w[i];
    char compact[48], loop[48], merge[48];
    dfg_grpo_tail_stage(compact, sizeof(compact), "decode.compact", ladder, i);
    dfg_grpo_tail_stage(loop, sizeof(loop), "decode.tail", ladder, i);
    dfg_grpo_tail_stage(merge, sizeof(merge), "decode.merge", ladder, i);
    dfg_grpo_tail_from batch = {.tokens = s->tokens, .mask = s->mask, .logp = s->sampling_logp, .done = s->done,
                                .token = s->cur_tok, .waiting = t->waiting ? s->tools.waiting : NULL,
                                .pos = t->pos ? s->pos : NULL};
    dfg_graph *g = dfg_graph_new(p, compact);
    dfg_grpo_tail_gather(g, ladder, i, &s->kv, &batch);
    dfg_status st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
    g = dfg_graph_new(p, loop);
    /* a run past the last column (the loop's chunks overshoot) writes nothing: its cache row is
     * the last one's, never read again */
    dfg_tensor *pos = t->pos ? t->pos /* with tools a row that has no column left is done: it writes nothing */
                             : dfg_cast(g, dfg_minimum(g, dfg_cast(g, s->pos, DFG_F32),
                                                       dfg_fill(g, DFG_F32, DFG_SCALAR, (float)(c->T - 2))), DFG_I32);
    dfg_model_kv tail_kv = t->kv;
    if (tail_kv.k_prompt[0]) tail_kv.prompt_of = tail_prompt_of(g, c, t->rows);
    dfg_tensor *h = dfg_model_decode(g, s->policy, &tail_kv, t->token, pos);
    dfg_tensor *logits = dfg_model_lm_head(g, s->policy, h);
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    dfg_grpo_rollout r = {.tokens = t->tokens, .mask = t->mask, .done = t->done, .token = t->token,
                          .pos = t->pos ? t->pos : s->pos, .rng = s->gen_rng, .draw_row0 = dfg_grpo_rank_row0(g, c->W, c->N),
                          .draw_rows = t->rows, .pad = c->pad_id, .finished = t->finished, .logp = t->logp,
                          .last_col = c->T - 1};
    dfg_grpo_tools rows = c->tools ? s->tools : (dfg_grpo_tools){0}; /* the width's rows' columns and waits */
    rows.pos = t->pos, rows.waiting = t->waiting;
    if (c->tools) dfg_grpo_tools_step(g, c, &rows, &r, logits);
    else dfg_grpo_sample_step(g, &r, logits, dfg_grpo_sample_settings(c), c->eos, c->n_eos);
    if (c->tools) dfg_grpo_tail_width_switch(g, ladder, i);
    if (!st) st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->max_new);
    if (!st) st = dfg_stage_until(p, loop, t->stop);
    g = dfg_graph_new(p, merge);
    dfg_grpo_tail_scatter(g, ladder, i, &s->kv, &batch);
    if (!st) st = dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
    double lo = (double)t->next + 0.5, hi = (double)t->n + 0.5; /* go counts rows: integers */
    if (!st) st = dfg_stage_when(p, compact, ladder->go, lo, hi);
    if (!st) st = dfg_stage_when(p, loop, ladder->go, lo, hi);
    if (!st) st = dfg_stage_when(p, merge, ladder->entered, (double)t->n - 0.5, (double)t->n + 0.5);
    return st;
}

/* decode_tail: once few rows are live, they move to the narrowest width of the ladder that holds
 * them, decode there, and go back (build_tail_width); the widths' stages widest first. */
dfg_status dfg_grpo_build_decode_tail(dfg_program *p, const dfg_grpo_config *c, dfg_grpo_state *s) {
    dfg_status st = DFG_OK;
    for (int i = 0; i < s->tail.n_widths && !st; i++) st = build_tail_width(p, c, s, i);
    return st;
}
