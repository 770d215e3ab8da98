/* gpt2_124m.c - the memory shape of one GRPO training step on GPT-2 124M.
 *
 *   dfg compile examples/gpt2_124m.c --target cuda -o g124.dfg      # plan for a GPU (bf16)
 *   dfg compile examples/gpt2_124m.c -o small.dfg --set n_layer=2 --set n_embd=64 --set n_head=4 \
 *       --set vocab_size=97 --set prompt_len=8 --set completion_len=16  # small enough to run on a CPU
 *   dfg run small.dfg --steps 5
 *
 * The case: GPT-2 124M (L=12, H=12, C=768, V=50257), one prompt with a group of 8 completions
 * (N = 8 sequences), 30 prompt + 144 completion tokens (T = 174). One step is
 *   data  (host)  tokens, targets, completion mask and per-sequence advantages (below);
 *   ref   (graph) no-grad forward of a frozen reference copy of the policy: the per-token
 *                 log-probs of the targets, kept in a STATE until the loss reads them;
 *   train (graph) policy forward, the GRPO per-token loss with its KL term, backward,
 *                 global-norm clipping, AdamW (f32 masters and moments under bf16 weights on
 *                 cuda, as a mixed-precision GPU run keeps them), metrics loss, kl, grad_norm.
 * Rollout generation is not part of this step: the data stage writes random tokens in its
 * place (the full GRPO pipeline replaces it). The point is the plan: every byte of the step
 * is placed before it runs, and the planner's report says where the peak comes from.
 *
 * The loss, per sequence i and completion token t (TRL's GRPO with num_iterations = 1):
 *   loss_it = -A_i * ratio_it + beta * (exp(ref_it - logp_it) - (ref_it - logp_it) - 1)
 *   loss    = mean_i( sum_t(loss_it * mask_it) / sum_t(mask_it) )
 * with ratio = exp(logp - logp.detach()). With one optimisation pass per rollout the old
 * policy is the current one, so the ratio is exactly 1 and its gradient is d(logp): backward
 * runs on the surrogate with -A * logp in place of -A * ratio, whose gradient is identical (dfg
 * has no detach op, and needs none for this), and the metric `loss` reports the true value,
 * beta * kl - A, averaged the same way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"

typedef struct {
    dfg_model_config model;
    int64_t prompts, group, prompt_len, completion_len;
    int64_t N, T; /* sequences = prompts x group; tokens per sequence = prompt + completion */
    float beta, max_grad_norm;
    dfg_adamw_config adamw;
} grpo_config;

/* Reads every setting (recording its default in the plan) and checks the ranges. */
static dfg_status read_config(dfg_program *p, grpo_config *c) {
    dfg_model_config gpt2 = dfg_gpt2_config_default(); /* 124M; 1024 positions: wpe has the checkpoint's shape */
    dfg_status st = dfg_model_config_from_settings(p, gpt2, &c->model);
    if (st) return st;
    c->prompts = dfg_setting_int(p, "prompts", 1);
    c->group = dfg_setting_int(p, "group", 8);
    c->prompt_len = dfg_setting_int(p, "prompt_len", 30);
    c->completion_len = dfg_setting_int(p, "completion_len", 144);
    c->beta = (float)dfg_setting_float(p, "beta", 0.04);
    c->max_grad_norm = (float)dfg_setting_float(p, "max_grad_norm", 1.0);
    dfg_adamw_config adamw = {.lr = 1e-6f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
    if ((st = dfg_adamw_config_from_settings(p, adamw, &c->adamw))) return st;
    if (dfg_program_status(p)) return dfg_program_status(p);

    const dfg_model_config *m = &c->model;
    if (c->prompts < 1 || c->group < 2 || c->prompts * c->group > (1 << 16))
        return dfg_program_fail(p, DFG_ERR_ARG, "need prompts >= 1 and group >= 2 (advantages compare a group), "
                                "got %lld x %lld", (long long)c->prompts, (long long)c->group);
    c->N = c->prompts * c->group;
    c->T = c->prompt_len + c->completion_len;
    if (c->prompt_len < 1 || c->completion_len < 1 || c->T > m->block_size)
        return dfg_program_fail(p, DFG_ERR_ARG, "need prompt_len, completion_len >= 1 and their sum <= n_positions "
                                "%d, got %lld + %lld", m->block_size, (long long)c->prompt_len,
                                (long long)c->completion_len);
    if (!(c->beta >= 0) || !(c->max_grad_norm > 0))
        return dfg_program_fail(p, DFG_ERR_ARG, "need beta >= 0 and max_grad_norm > 0, got %g and %g", c->beta,
                                c->max_grad_norm);
    return DFG_OK;
}

/* The batch the data stage writes, shared by the ref and train graphs. */
typedef struct {
    dfg_tensor *tokens;     /* (N, T) i32: prompt then completion */
    dfg_tensor *targets;    /* (N, T) i32: the next token */
    dfg_tensor *mask;       /* (N, T) f32: 1 where the target is a completion token */
    dfg_tensor *advantages; /* (N) f32: group-normalised rewards */
    dfg_tensor *ref_logp;   /* (N, T) f32 STATE: the reference model's log-probs of the targets */
} grpo_batch;

/* Per-token log-probabilities of the targets under model m: (N, T) f32. On bf16 the logits are
 * cast to f32 first, so the log-softmax over 50257 entries and the loss math stay in f32. */
static dfg_tensor *token_logp(dfg_graph *g, const dfg_model *m, const grpo_batch *b) {
    dfg_tensor *logits = dfg_model_logits(g, m, b->tokens); /* (N, T, V) */
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    return dfg_take(g, dfg_log_softmax(g, logits), b->targets); /* (N, T) */
}

/* Graph "ref": the frozen copy starts as the policy (dfg_init_from: weights loaded with --weights
 * reach it too), then only ever runs forward. */
static dfg_status build_ref_graph(dfg_program *p, dfg_graph *g, dfg_model *ref, const dfg_model *policy,
                                  const grpo_batch *b) {
    dfg_status st = dfg_nn_init_copy(p, ref->params, policy->params, ref->n_params);
    if (st) return st;
    dfg_assign(g, b->ref_logp, token_logp(g, ref, b));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* Mean over sequences of the per-sequence mean of x (N, T) over the mask: a scalar. */
static dfg_tensor *seq_mean(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask) {
    dfg_tensor *per_seq = dfg_div(g, dfg_masked_sum(g, x, mask, 1), dfg_sum(g, mask, 1)); /* (N) */
    return dfg_mean(g, per_seq, 0);
}

static dfg_status build_train_graph(dfg_program *p, const grpo_config *c, const dfg_model *policy,
                                    const grpo_batch *b) {
    int64_t N = c->N;
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *logp = token_logp(g, policy, b);          /* (N, T) */
    /* ref - logp, zero on the prompt so exp() never sees positions the loss ignores */
    dfg_tensor *d = dfg_mul(g, dfg_sub(g, b->ref_logp, logp), b->mask); /* (N, T) */
    dfg_tensor *kl = dfg_add_scalar(g, dfg_sub(g, dfg_exp(g, d), d), -1.0f); /* (N, T) k3 estimator, >= 0 */
    dfg_tensor *adv = dfg_reshape(g, b->advantages, DFG_SHAPE(N, 1)); /* (N, 1) */
    /* -A * ratio with ratio = exp(logp - logp.detach()) = 1: same gradient as -A * logp (see top) */
    dfg_tensor *per_token = dfg_sub(g, dfg_scale(g, kl, c->beta), dfg_mul(g, logp, adv)); /* (N, T) */
    dfg_tensor *surrogate = dfg_name(seq_mean(g, per_token, b->mask), "surrogate");

    /* gradients accumulate into persistent buffers (PyTorch's .grad; what micro-batches need),
     * are clipped in place, feed the optimizer, and are zeroed for the next step */
    int n = policy->n_params;
    dfg_tensor **buf = calloc((size_t)n, sizeof(*buf)), **grads = calloc((size_t)n, sizeof(*grads));
    dfg_status st = buf && grads ? dfg_nn_grad_buffers(p, policy->params, n, "", buf) : DFG_ERR_NOMEM;
    if (!st) st = dfg_backward_accumulate(g, surrogate, policy->params, n, buf);
    if (!st) memcpy(grads, buf, sizeof(*grads) * (size_t)n);
    dfg_tensor *grad_norm = st ? NULL : dfg_clip_grad_norm(g, grads, n, c->max_grad_norm);
    if (!st) st = dfg_nn_adamw_step(p, g, policy->params, grads, n, c->adamw, "");
    for (int i = 0; i < n && !st; i++) dfg_assign_fill(g, buf[i], 0.0f);
    free(buf);
    free(grads);
    if (st) return st == DFG_ERR_NOMEM ? dfg_program_fail(p, st, "out of memory") : st;

    /* the loss's value with ratio = 1: beta * kl - A, per sequence over the mask, then the mean */
    dfg_tensor *kl_mean = seq_mean(g, kl, b->mask);
    dfg_metric(g, "loss", dfg_sub(g, dfg_scale(g, kl_mean, c->beta), dfg_mean(g, b->advantages, 0)));
    dfg_metric(g, "kl", kl_mean);
    dfg_metric(g, "grad_norm", grad_norm);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

dfg_status dfg_pipeline(dfg_program *p) {
    grpo_config c = {0};
    dfg_status st = read_config(p, &c);
    if (st) return st;
    /* ~7 KB of tensor pointers each: off the stack */
    dfg_model *policy = calloc(1, sizeof(*policy)), *ref = calloc(1, sizeof(*ref));
    if (!policy || !ref) {
        free(policy), free(ref);
        return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    }
    st = dfg_model_params(p, "", c.model, policy);
    if (!st) st = dfg_model_frozen(p, "ref.", c.model, ref); /* STATEs of role REF_MODEL */

    grpo_batch b = {0};
    dfg_graph *ref_g = NULL;
    if (!st) st = dfg_stage_host(p, "data", "gpt2_124m_make_batch");
    if (!st) {
        /* inputs are program-wide: declared with the first graph that reads them, read by both */
        ref_g = dfg_graph_new(p, "ref");
        b.tokens = dfg_input(ref_g, "tokens", DFG_I32, DFG_SHAPE(c.N, c.T));
        b.targets = dfg_input(ref_g, "targets", DFG_I32, DFG_SHAPE(c.N, c.T));
        b.mask = dfg_input(ref_g, "mask", DFG_F32, DFG_SHAPE(c.N, c.T));
        b.advantages = dfg_input(ref_g, "advantages", DFG_F32, DFG_SHAPE(c.N));
        b.ref_logp = dfg_state(p, "ref_logp", DFG_F32, DFG_SHAPE(c.N, c.T), DFG_ROLE_ROLLOUT, dfg_init_zeros());
        /* written by ref, read by train: its bytes are free for the rest of the step */
        st = dfg_set_scope(p, b.ref_logp, "ref", "train");
    }
    if (!st) st = dfg_graph_status(ref_g);
    if (!st) st = build_ref_graph(p, ref_g, ref, policy, &b);
    if (!st) st = build_train_graph(p, &c, policy, &b);
    free(policy);
    free(ref);
    return st ? st : dfg_program_status(p);
}

/* ---------------------------------------------------------------- the host stage: a batch in place of rollouts */
static double uniform01(uint64_t *s) { return (double)(dfg_host_rand(s) >> 11) * (1.0 / 9007199254740992.0); }

/* An int setting the pipeline read at compile time (so the plan records it, checked). */
static bool setting_int(dfg_host_ctx *ctx, const char *key, int64_t *out) {
    const dfg_program *p = dfg_host_program(ctx);
    *out = dfg_program_int(p, key);
    return dfg_program_has(p, key);
}

/* One sequence s[0 .. T-1]: P prompt tokens, then T - P completion tokens, all random ids in
 * 1 .. vocab-1. Position t predicts s[t+1], so the targets that are completion tokens sit at
 * t = P-1 .. T-2: the mask is 1 there (T - P positions). The last position has no next token
 * (target 0, mask 0), as the logit a causal LM makes after the last token is never scored. */
static void make_row(uint64_t *rng, int64_t T, int64_t P, int64_t vocab, int32_t *tok, int32_t *tgt, float *mask) {
    for (int64_t t = 0; t < T; t++) tok[t] = 1 + (int32_t)(dfg_host_rand(rng) % (uint64_t)(vocab - 1));
    for (int64_t t = 0; t < T; t++) {
        tgt[t] = t + 1 < T ? tok[t + 1] : 0;
        mask[t] = (t >= P - 1 && t + 1 < T) ? 1.0f : 0.0f;
    }
}

/* Advantages as GRPO computes them: each sequence's reward minus its group's mean, over the
 * group's standard deviation (rewards here are uniform random in [0, 1)). */
static void make_advantages(uint64_t *rng, int64_t N, int64_t group, float *adv) {
    for (int64_t i = 0; i < N; i++) adv[i] = (float)uniform01(rng); /* the rewards */
    for (int64_t g0 = 0; g0 + group <= N; g0 += group) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < group; i++) mean += adv[g0 + i];
        mean /= (double)group;
        for (int64_t i = 0; i < group; i++) var += (adv[g0 + i] - mean) * (adv[g0 + i] - mean);
        double sd = group > 1 ? sqrt(var / (double)(group - 1)) : 0.0; /* torch.std: unbiased */
        for (int64_t i = 0; i < group; i++) adv[g0 + i] = (float)((adv[g0 + i] - mean) / (sd + 1e-4));
    }
}

dfg_status gpt2_124m_make_batch(dfg_host_ctx *ctx) {
    dfg_buffer tok, tgt, mask, adv;
    if (dfg_host_buffer(ctx, "tokens", &tok) || dfg_host_buffer(ctx, "targets", &tgt) ||
        dfg_host_buffer(ctx, "mask", &mask) || dfg_host_buffer(ctx, "advantages", &adv))
        return dfg_host_fail(ctx, "the program has no tokens/targets/mask/advantages inputs");
    int64_t vocab, P, group;
    if (!setting_int(ctx, "vocab_size", &vocab) || vocab < 3 || !setting_int(ctx, "prompt_len", &P) || P < 1 ||
        !setting_int(ctx, "group", &group) || group < 1)
        return dfg_host_fail(ctx, "settings 'vocab_size' (>= 3), 'prompt_len' and 'group' (>= 1) are required");
    if (tok.shape.rank != 2 || tok.dtype != DFG_I32 || tgt.dtype != DFG_I32 || mask.dtype != DFG_F32 ||
        adv.dtype != DFG_F32 || adv.shape.rank != 1 || adv.shape.d[0] != tok.shape.d[0])
        return dfg_host_fail(ctx, "tokens/targets must be i32 (N, T), mask f32 (N, T), advantages f32 (N)");
    int64_t N = tok.shape.d[0], T = tok.shape.d[1];
    if (P >= T || N % group)
        return dfg_host_fail(ctx, "prompt_len %lld >= T %lld, or group %lld does not divide N %lld", (long long)P,
                             (long long)T, (long long)group, (long long)N);
    /* one stream per (seed, step): the same run gives the same batches on every machine */
    uint64_t rng = dfg_host_seed(ctx) ^ ((uint64_t)dfg_host_step(ctx) * 0xD1B54A32D192ED03ull);
    for (int64_t i = 0; i < N; i++)
        make_row(&rng, T, P, vocab, (int32_t *)tok.data + i * T, (int32_t *)tgt.data + i * T,
                 (float *)mask.data + i * T);
    make_advantages(&rng, N, group, (float *)adv.data);
    return DFG_OK;
}
