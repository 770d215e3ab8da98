/* nn_grpo.c - GRPO's pieces (DeepSeekMath, arXiv 2402.03300; TRL's GRPOTrainer) from public DSL
 * calls only: per-token log-probs of the scored tokens, group-normalised advantages, and the
 * clipped per-token loss with the KL penalty and its normalisations. */
#include "dfg_nn.h"

/* hidden (n, T', C) -> (n, T') log p(targets) at the temperature, in f32 */
static dfg_tensor *target_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *hidden, dfg_tensor *targets,
                               float temperature) {
    dfg_tensor *logits = dfg_model_lm_head(g, m, hidden);                           /* (n, T', V) */
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32); /* loss math in f32 */
    if (temperature != 1.0f) logits = dfg_scale(g, logits, 1.0f / temperature);
    return dfg_take(g, dfg_log_softmax(g, logits), targets);
}

dfg_tensor *dfg_grpo_token_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, float temperature,
                                dfg_tensor *start) {
    dfg_shape s = dfg_tensor_shape(tokens); /* (n, T) */
    int64_t T = s.rank == 2 ? s.d[1] : 0;
    dfg_tensor *h = dfg_model_hidden_padded(g, m, tokens, start); /* (n, T, C); column t predicts t + 1 */
    return target_logp(g, m, dfg_slice(g, h, 1, 0, T - 1), dfg_slice(g, tokens, 1, 1, T - 1), temperature);
}

dfg_tensor *dfg_grpo_completion_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts, dfg_tensor *completions,
                                     float temperature, dfg_tensor *start) {
    dfg_tensor *h = dfg_model_hidden_grouped(g, m, prompts, completions, start); /* (n, Tc, C) */
    return target_logp(g, m, h, completions, temperature);                 /* (n, Tc) */
}

/* sqrt(sum(x^2) / (k - 1)) over axis 1 of x (rows, k): torch.std's unbiased estimate */
static dfg_tensor *unbiased_std(dfg_graph *g, dfg_tensor *dev, int64_t k) {
    return dfg_sqrt(g, dfg_scale(g, dfg_sum(g, dfg_mul(g, dev, dev), 1), 1.0f / (float)(k - 1)));
}

dfg_tensor *dfg_grpo_advantages(dfg_graph *g, dfg_tensor *rewards, int64_t group, dfg_grpo_scale scale) {
    int64_t N = dfg_tensor_numel(rewards), P = group > 0 ? N / group : 1;
    dfg_tensor *r = dfg_reshape(g, rewards, DFG_SHAPE(-1, group)); /* (P, G); refuses N not a multiple of G */
    dfg_tensor *dev = dfg_sub(g, r, dfg_reshape(g, dfg_mean(g, r, 1), DFG_SHAPE(P, 1))); /* r - group mean */
    dfg_tensor *a = dev;
    if (scale == DFG_GRPO_SCALE_GROUP) {
        dfg_tensor *sd = unbiased_std(g, dev, group);                                    /* (P) */
        a = dfg_div(g, dev, dfg_reshape(g, dfg_add_scalar(g, sd, 1e-4f), DFG_SHAPE(P, 1)));
    } else if (scale == DFG_GRPO_SCALE_BATCH) {
        dfg_tensor *all = dfg_reshape(g, rewards, DFG_SHAPE(1, N));
        dfg_tensor *d_all = dfg_sub(g, all, dfg_reshape(g, dfg_mean(g, all, 1), DFG_SHAPE(1, 1)));
        dfg_tensor *sd = dfg_reshape(g, unbiased_std(g, d_all, N), DFG_SHAPE(1, 1)); /* one std for the batch */
        a = dfg_div(g, dev, dfg_add_scalar(g, sd, 1e-4f));
    }
    return dfg_reshape(g, a, DFG_SHAPE(N)); /* (N) */
}

/* sum of x over every element: a scalar */
static dfg_tensor *total(dfg_graph *g, dfg_tensor *x) { return dfg_sum(g, dfg_reshape(g, x, DFG_SHAPE(-1)), 0); }

static dfg_tensor *at_least_one(dfg_graph *g, dfg_tensor *x) {
    return dfg_maximum(g, x, dfg_fill(g, DFG_F32, dfg_tensor_shape(x), 1.0f));
}

dfg_status dfg_grpo_loss(dfg_graph *g, const dfg_grpo_inputs *in, dfg_grpo_loss_config cfg, dfg_grpo_terms *out) {
    if (!g || !in || !out) return DFG_ERR_ARG;
    dfg_shape s = dfg_tensor_shape(in->logp); /* (n, T') */
    int64_t n = s.rank == 2 ? s.d[0] : 0;
    dfg_tensor *logp = in->logp, *mask = in->mask;
    /* one optimisation pass per rollout: old = the current log-probs with the gradient stopped */
    dfg_tensor *old = in->old_logp ? in->old_logp : dfg_detach(g, logp);
    dfg_tensor *rho = dfg_exp(g, dfg_mul(g, dfg_sub(g, logp, old), mask)); /* masked: exp never sees prompt rows */
    dfg_tensor *adv = dfg_reshape(g, in->advantages, DFG_SHAPE(n, 1));
    dfg_tensor *unclipped = dfg_mul(g, rho, adv);
    dfg_tensor *clipped = dfg_mul(g, dfg_clamp(g, rho, 1.0f - cfg.epsilon_low, 1.0f + cfg.epsilon_high), adv);
    dfg_tensor *surrogate = dfg_minimum(g, unclipped, clipped);
    dfg_tensor *l = dfg_neg(g, surrogate); /* (n, T') */
    dfg_tensor *kl = NULL;
    if (in->ref_logp && cfg.beta != 0.0f) { /* k3: exp(ref - logp) - (ref - logp) - 1 >= 0 */
        dfg_tensor *d = dfg_mul(g, dfg_sub(g, in->ref_logp, logp), mask);
        kl = dfg_add_scalar(g, dfg_sub(g, dfg_exp(g, d), d), -1.0f);
        l = dfg_add(g, l, dfg_scale(g, kl, cfg.beta));
    }
    dfg_tensor *lm_sum = dfg_masked_sum(g, l, mask, 1); /* (n): sum over each sequence's tokens */
    dfg_tensor *len = dfg_sum(g, mask, 1);               /* (n) */
    switch (cfg.loss_type) {
    case DFG_GRPO_LOSS_GRPO: /* mean over all the step's sequences of each one's token mean */
        out->loss = dfg_scale(g, total(g, dfg_div(g, lm_sum, at_least_one(g, len))), 1.0f / (float)cfg.n_total);
        break;
    case DFG_GRPO_LOSS_BNPO: /* this micro-batch's token mean, averaged over the micro-batches */
        out->loss = dfg_scale(g, dfg_div(g, total(g, lm_sum), at_least_one(g, total(g, len))),
                              1.0f / (float)cfg.micro_batches);
        break;
    case DFG_GRPO_LOSS_DR_GRPO: /* a constant normaliser: every sequence at its full length */
        out->loss = dfg_scale(g, total(g, lm_sum), 1.0f / ((float)cfg.n_total * (float)cfg.max_completion_length));
        break;
    case DFG_GRPO_LOSS_DAPO: /* over the active tokens of the whole step */
        out->loss = dfg_div(g, total(g, lm_sum), at_least_one(g, dfg_reshape(g, in->active_tokens, DFG_SCALAR)));
        break;
    }
    /* metrics, as sums over this micro-batch's scored tokens */
    out->tokens = total(g, len);
    out->kl_sum = kl ? total(g, dfg_mul(g, kl, mask)) : dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f);
    /* clipping is active where the clipped term is the smaller one and differs */
    dfg_tensor *active = dfg_sub(g, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f), dfg_equal(g, surrogate, unclipped));
    out->clipped_sum = total(g, dfg_mul(g, dfg_detach(g, active), mask));
    return dfg_graph_status(g);
}

dfg_status dfg_grpo_sample_step(dfg_graph *g, const dfg_grpo_rollout *r, dfg_tensor *logits, float temperature,
                                int top_k, const int32_t *eos, int n_eos) {
    if (!g || !r) return DFG_ERR_ARG;
    if (!eos || n_eos < 1 || n_eos > DFG_GRPO_MAX_EOS)
        return dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "dfg_grpo_sample_step: %d EOS ids (1 .. %d allowed)",
                                n_eos, DFG_GRPO_MAX_EOS);
    int64_t N = dfg_tensor_numel(r->done);
    dfg_tensor *tok = dfg_sample(g, logits, r->rng, temperature, top_k); /* (N, 1) i32 */
    dfg_tensor *next = dfg_add_scalar(g, r->pos, 1.0f);                   /* where it goes */
    /* a sequence counts its tokens up to and including its first EOS */
    dfg_tensor *counts = dfg_affine(g, r->done, -1.0f, 1.0f); /* (N) 1 - done */
    dfg_slice_assign_at(g, r->mask, dfg_reshape(g, counts, DFG_SHAPE(N, 1)), 1, next);
    dfg_slice_assign_at(g, r->tokens, tok, 1, next);
    dfg_tensor *is_eos = NULL; /* (N, 1) f32: 1 when tok is any of the EOS ids */
    for (int i = 0; i < n_eos; i++) {
        dfg_tensor *hit = dfg_equal(g, tok, dfg_fill(g, DFG_I32, DFG_SCALAR, (float)eos[i]));
        is_eos = is_eos ? dfg_maximum(g, is_eos, hit) : hit;
    }
    dfg_assign(g, r->done, dfg_maximum(g, r->done, dfg_reshape(g, is_eos, DFG_SHAPE(N))));
    dfg_assign(g, r->token, tok);
    dfg_assign(g, r->pos, next);
    return dfg_graph_status(g);
}
