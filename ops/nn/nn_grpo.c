/* nn_grpo.c - GRPO's pieces (DeepSeekMath, arXiv 2402.03300; TRL's GRPOTrainer) from public DSL
 * calls only: per-token log-probs of the scored tokens, group-normalised advantages, and the
 * clipped per-token loss with the KL penalty and its normalisations. */
#include <float.h>
#include <math.h>

#include "dfg_nn.h"

/* hidden (n, T', C) -> (n, T') log p(targets) at the temperature, in f32; and when entropy is
 * not NULL the entropy of the same distribution, read from the same scaled logits (the fuse pass
 * then folds both into one linear_logprob) */
static dfg_tensor *target_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *hidden, dfg_tensor *targets,
                               float temperature, dfg_tensor **entropy) {
    dfg_tensor *logits = dfg_model_lm_head(g, m, hidden);                           /* (n, T', V) */
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32); /* loss math in f32 */
    if (temperature != 1.0f) logits = dfg_scale(g, logits, 1.0f / temperature);
    dfg_tensor *lp = dfg_take(g, dfg_log_softmax(g, logits), targets);
    if (entropy) *entropy = dfg_entropy(g, logits);
    return lp;
}

dfg_tensor *dfg_grpo_token_logp_entropy(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, float temperature,
                                        dfg_tensor *start, dfg_tensor **entropy) {
    dfg_shape s = dfg_tensor_shape(tokens); /* (n, T) */
    int64_t T = s.rank == 2 ? s.d[1] : 0;
    dfg_tensor *h = dfg_model_hidden_padded(g, m, tokens, start); /* (n, T, C); column t predicts t + 1 */
    return target_logp(g, m, dfg_slice(g, h, 1, 0, T - 1), dfg_slice(g, tokens, 1, 1, T - 1), temperature, entropy);
}

dfg_tensor *dfg_grpo_token_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *tokens, float temperature,
                                dfg_tensor *start) {
    return dfg_grpo_token_logp_entropy(g, m, tokens, temperature, start, NULL);
}

dfg_tensor *dfg_grpo_completion_logp_entropy(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts,
                                             dfg_tensor *completions, float temperature, dfg_tensor *start,
                                             dfg_tensor **entropy) {
    dfg_tensor *h = dfg_model_hidden_grouped(g, m, prompts, completions, start); /* (n, Tc, C) */
    return target_logp(g, m, h, completions, temperature, entropy);       /* (n, Tc) */
}

dfg_tensor *dfg_grpo_completion_logp(dfg_graph *g, const dfg_model *m, dfg_tensor *prompts, dfg_tensor *completions,
                                     float temperature, dfg_tensor *start) {
    return dfg_grpo_completion_logp_entropy(g, m, prompts, completions, temperature, start, NULL);
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

static dfg_tensor *scalar(dfg_graph *g, float v) { return dfg_fill(g, DFG_F32, DFG_SCALAR, v); }

/* comparisons as 0/1 floats (no gradient): a >= b is max(a, b) == a, exactly, ties included */
static dfg_tensor *ge(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return dfg_equal(g, dfg_maximum(g, a, b), a); }
static dfg_tensor *gt(dfg_graph *g, dfg_tensor *a, dfg_tensor *b) { return dfg_affine(g, ge(g, b, a), -1.0f, 1.0f); }

/* the largest element of x (n) */
static dfg_tensor *max_of(dfg_graph *g, dfg_tensor *x) { return dfg_take(g, x, dfg_argmax(g, x)); }

/* TRL's per-micro-batch means of x: (n, T') over the scored tokens, or (n, 1) (sequence level) over
 * the sequences; and over the sequences the least and the largest per-sequence mean (token level:
 * of the sequences with a scored token; TRL's nanmin / nanmax skip the others, pushed out of reach
 * here, which needs x in [0, 1]: the min and max are for the clip flags, the mean for any x) */
typedef struct {
    dfg_tensor *mean, *min, *max;
} flag_means;

static flag_means means_of(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, bool per_sequence) {
    int64_t n = dfg_tensor_shape(mask).d[0];
    dfg_tensor *len = dfg_sum(g, mask, 1); /* (n) */
    if (per_sequence) {
        dfg_tensor *v = dfg_reshape(g, x, DFG_SHAPE(n));
        return (flag_means){dfg_mean(g, v, 0), dfg_neg(g, max_of(g, dfg_neg(g, v))), max_of(g, v)};
    }
    dfg_tensor *per = dfg_div(g, dfg_masked_sum(g, x, mask, 1), at_least_one(g, len)); /* (n) in [0, 1] */
    dfg_tensor *empty = dfg_equal(g, len, scalar(g, 0.0f));                             /* pushed out of reach */
    dfg_tensor *lo = dfg_add(g, per, dfg_scale(g, empty, 2.0f)), *hi = dfg_sub(g, per, dfg_scale(g, empty, 2.0f));
    return (flag_means){dfg_div(g, total(g, dfg_mul(g, x, mask)), at_least_one(g, total(g, len))),
                        dfg_neg(g, max_of(g, dfg_neg(g, lo))), max_of(g, hi)};
}

/* rho: exp of the masked log-ratio per token (n, T'), or of its mean over each sequence (n, 1) */
static dfg_tensor *importance_weights(dfg_graph *g, const dfg_grpo_inputs *in, dfg_tensor *old, dfg_grpo_is_level level) {
    dfg_tensor *lr = dfg_mul(g, dfg_sub(g, in->logp, old), in->mask); /* masked: exp never sees prompt rows */
    if (level == DFG_GRPO_IS_TOKEN) return dfg_exp(g, lr);
    int64_t n = dfg_tensor_shape(in->mask).d[0];
    dfg_tensor *mean = dfg_div(g, dfg_sum(g, lr, 1), at_least_one(g, dfg_sum(g, in->mask, 1)));
    return dfg_exp(g, dfg_reshape(g, mean, DFG_SHAPE(n, 1)));
}

/* The per-token policy loss before the masks, the sampling correction and the KL term ((n, T') or
 * (n, 1)), and the clip metrics of its loss type; phi: vespo's weights (n, 1). */
static dfg_tensor *policy_loss(dfg_graph *g, const dfg_grpo_inputs *in, const dfg_grpo_loss_config *cfg, dfg_tensor *rho,
                               dfg_tensor *adv, dfg_tensor *phi, dfg_grpo_terms *out) {
    bool seq = cfg->is_level == DFG_GRPO_IS_SEQUENCE;
    dfg_tensor *pos = gt(g, adv, scalar(g, 0.0f)), *neg = gt(g, scalar(g, 0.0f), adv); /* (n, 1) */
    dfg_tensor *sg = dfg_detach(g, rho);
    if (cfg->loss_type == DFG_GRPO_LOSS_CISPO) { /* the weight clipped at eps_high, no gradient through it */
        dfg_tensor *w = dfg_clamp(g, sg, -FLT_MAX, cfg->epsilon_high);
        out->cispo_clip_ratio = means_of(g, dfg_mul(g, gt(g, sg, scalar(g, cfg->epsilon_high)), pos), in->mask, seq).mean;
        return dfg_neg(g, dfg_mul(g, dfg_mul(g, w, adv), in->logp));
    }
    if (cfg->loss_type == DFG_GRPO_LOSS_VESPO) {
        out->phi_seq_mean = dfg_mean(g, dfg_reshape(g, phi, DFG_SHAPE(-1)), 0);
        return dfg_neg(g, dfg_mul(g, dfg_mul(g, phi, adv), in->logp));
    }
    if (cfg->loss_type == DFG_GRPO_LOSS_SAPO) { /* tau = tau_pos where A > 0, else tau_neg */
        float tp = cfg->sapo_temperature_pos, tn = cfg->sapo_temperature_neg;
        dfg_tensor *tau = dfg_affine(g, pos, tp - tn, tn); /* (n, 1) */
        dfg_tensor *x = dfg_mul(g, tau, dfg_add_scalar(g, rho, -1.0f));
        /* sigmoid(x) = 1 / (1 + exp(-x)); rho >= 0 keeps x >= -tau, so exp(-x) stays finite */
        dfg_tensor *sig = dfg_div(g, scalar(g, 1.0f), dfg_add_scalar(g, dfg_exp(g, dfg_neg(g, x)), 1.0f));
        return dfg_neg(g, dfg_mul(g, dfg_div(g, dfg_scale(g, sig, 4.0f), tau), adv));
    }
    dfg_tensor *clipped = dfg_clamp(g, rho, 1.0f - cfg->epsilon_low, 1.0f + cfg->epsilon_high);
    dfg_tensor *r1 = cfg->delta > 0.0f ? dfg_clamp(g, rho, -FLT_MAX, cfg->delta) : rho; /* two-sided clipping */
    dfg_tensor *l = dfg_neg(g, dfg_minimum(g, dfg_mul(g, r1, adv), dfg_mul(g, clipped, adv)));
    /* TRL's clip metrics, of the ratio after delta */
    dfg_tensor *r1d = dfg_detach(g, r1);
    dfg_tensor *low = dfg_mul(g, gt(g, scalar(g, 1.0f - cfg->epsilon_low), r1d), neg);
    dfg_tensor *high = dfg_mul(g, gt(g, r1d, scalar(g, 1.0f + cfg->epsilon_high)), pos);
    flag_means fl = means_of(g, low, in->mask, seq), fh = means_of(g, high, in->mask, seq);
    out->clip_low_mean = fl.mean, out->clip_low_min = fl.min;
    out->clip_high_mean = fh.mean, out->clip_high_max = fh.max;
    out->clip_region_mean = means_of(g, dfg_add(g, low, high), in->mask, seq).mean;
    return l;
}

/* top_entropy_quantile: 1 on the scored tokens whose entropy is at or above the micro-batch's
 * (1 - q) quantile (TRL's get_high_entropy_mask), 0 elsewhere. Data parallel: the quantile of
 * every rank's micro-batch together, as TRL gathers them. */
static dfg_tensor *entropy_mask(dfg_graph *g, dfg_tensor *entropy, dfg_tensor *mask, float q, int world) {
    dfg_tensor *h = dfg_detach(g, entropy); /* (n, T') */
    dfg_tensor *thr = world > 1 ? dfg_quantile(g, dfg_all_gather(g, h, world), dfg_all_gather(g, mask, world), 1.0f - q)
                                : dfg_quantile(g, h, mask, 1.0f - q); /* scalar */
    return dfg_mul(g, ge(g, dfg_mul(g, h, mask), thr), mask);
}

/* x where the step has a sampler (has: f32 scalar, or NULL for always), else `none` */
static dfg_tensor *if_sampled(dfg_graph *g, dfg_tensor *has, dfg_tensor *x, dfg_tensor *none) {
    return has ? dfg_where(g, has, x, none) : x;
}

/* TRL's vLLM importance-sampling correction of the sampler's log-probs against old (both without
 * gradient): rho = exp(d) per token or exp(sum of d) per sequence, d = (old - sampling) m, then
 * truncated to [clip_min, clip_max] or 0 outside it. Fills the terms' is_* metrics. */
static dfg_tensor *sampling_weights(dfg_graph *g, const dfg_grpo_inputs *in, dfg_tensor *old, const dfg_grpo_loss_config *cfg,
                                    dfg_grpo_terms *out) {
    dfg_grpo_sampling_mode mode = cfg->sampling_mode;
    bool per_seq = mode == DFG_GRPO_SAMPLING_SEQUENCE_TRUNCATE || mode == DFG_GRPO_SAMPLING_SEQUENCE_MASK;
    bool truncate = mode == DFG_GRPO_SAMPLING_TOKEN_TRUNCATE || mode == DFG_GRPO_SAMPLING_SEQUENCE_TRUNCATE;
    int64_t n = dfg_tensor_shape(in->mask).d[0];
    dfg_tensor *d = dfg_mul(g, dfg_sub(g, old, dfg_detach(g, in->sampling_logp)), in->mask);
    if (per_seq) d = dfg_reshape(g, dfg_sum(g, d, 1), DFG_SHAPE(n, 1)); /* a sum, not a mean, as TRL's */
    dfg_tensor *raw = dfg_exp(g, d);
    float lo = cfg->sampling_clip_min, hi = cfg->sampling_clip_max; /* +-INFINITY: none */
    dfg_tensor *inside = NULL;                                     /* 1 where lo <= raw <= hi */
    if (isfinite(lo)) inside = ge(g, raw, scalar(g, lo));
    if (isfinite(hi)) inside = inside ? dfg_mul(g, inside, ge(g, scalar(g, hi), raw)) : ge(g, scalar(g, hi), raw);
    dfg_tensor *rho = raw;
    if (inside && truncate) rho = dfg_clamp(g, raw, isfinite(lo) ? lo : -FLT_MAX, isfinite(hi) ? hi : FLT_MAX);
    else if (inside) rho = dfg_where(g, inside, raw, scalar(g, 0.0f)); /* where, not a product: exp may be inf */
    dfg_tensor *one = scalar(g, 1.0f);
    out->is_raw = if_sampled(g, in->has_sampling, raw, one);
    out->is_ratio = if_sampled(g, in->has_sampling, rho, one);
    out->is_modified = inside ? if_sampled(g, in->has_sampling, dfg_affine(g, inside, -1.0f, 1.0f), scalar(g, 0.0f))
                              : dfg_fill(g, DFG_F32, dfg_tensor_shape(raw), 0.0f);
    return out->is_ratio;
}

/* DeepSeek-V3.2's off-policy sequence mask (TRL's get_off_policy_mask): (n, 1), 0 for a sequence
 * with A < 0 whose mean over its scored tokens of sampling - logp exceeds the threshold, else 1.
 * sampling: the sampler's log-probs, or old where the step has none. */
static dfg_tensor *off_policy_mask(dfg_graph *g, const dfg_grpo_inputs *in, dfg_tensor *old, dfg_tensor *adv, float thr) {
    int64_t n = dfg_tensor_shape(in->mask).d[0];
    dfg_tensor *sampling = in->sampling_logp ? if_sampled(g, in->has_sampling, dfg_detach(g, in->sampling_logp), old) : old;
    dfg_tensor *gap = dfg_masked_sum(g, dfg_sub(g, sampling, dfg_detach(g, in->logp)), in->mask, 1);
    dfg_tensor *mean = dfg_reshape(g, dfg_div(g, gap, at_least_one(g, dfg_sum(g, in->mask, 1))), DFG_SHAPE(n, 1));
    return dfg_maximum(g, ge(g, adv, scalar(g, 0.0f)), ge(g, scalar(g, thr), mean));
}

/* VESPO's gamma weights (TRL's get_gamma_weights), no gradient: (n, 1) phi = exp(lambda + k log w -
 * lambda w), log w = the sequence's sum of the clamped log-ratios logp - old plus the log of the
 * sampling correction (is, or NULL), clamped to [log 1e-8, 20]; k, lambda by the sign of A. */
static dfg_tensor *vespo_weights(dfg_graph *g, const dfg_grpo_inputs *in, dfg_tensor *old, dfg_tensor *is, dfg_tensor *adv,
                                 const dfg_grpo_loss_config *cfg) {
    int64_t n = dfg_tensor_shape(in->mask).d[0];
    const float floor = logf(1e-8f);
    dfg_tensor *lr = dfg_clamp(g, dfg_sub(g, dfg_detach(g, in->logp), old), -20.0f, 20.0f);
    dfg_tensor *seq = dfg_reshape(g, dfg_masked_sum(g, lr, in->mask, 1), DFG_SHAPE(n, 1));
    if (is) { /* log(0) = -inf of a masked ratio: clamped to the floor */
        dfg_tensor *lis = dfg_clamp(g, dfg_log(g, is), floor, 20.0f);
        seq = dfg_add(g, seq, dfg_tensor_shape(is).d[1] == 1 ? lis
                                                              : dfg_reshape(g, dfg_masked_sum(g, lis, in->mask, 1), DFG_SHAPE(n, 1)));
    }
    dfg_tensor *log_w = dfg_clamp(g, seq, floor, 20.0f);
    dfg_tensor *nonneg = ge(g, adv, scalar(g, 0.0f)); /* (n, 1) */
    dfg_tensor *k = dfg_affine(g, nonneg, cfg->vespo_k_pos - cfg->vespo_k_neg, cfg->vespo_k_neg);
    float lp = fmaxf(cfg->vespo_lambda_pos, 1e-4f), ln = fmaxf(cfg->vespo_lambda_neg, 1e-4f);
    dfg_tensor *lam = dfg_affine(g, nonneg, lp - ln, ln);
    dfg_tensor *log_phi = dfg_sub(g, dfg_add(g, lam, dfg_mul(g, k, log_w)), dfg_mul(g, lam, dfg_exp(g, log_w)));
    return dfg_detach(g, dfg_exp(g, log_phi));
}

dfg_status dfg_grpo_loss(dfg_graph *g, const dfg_grpo_inputs *in, dfg_grpo_loss_config cfg, dfg_grpo_terms *out) {
    if (!g || !in || !out) return DFG_ERR_ARG;
    *out = (dfg_grpo_terms){0};
    if (!in->entropy && (cfg.top_entropy_quantile < 1.0f || cfg.entropy_coef != 0.0f))
        return dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "grpo loss: top_entropy_quantile < 1 and entropy_coef need the entropy");
    dfg_shape s = dfg_tensor_shape(in->logp); /* (n, T') */
    int64_t n = s.rank == 2 ? s.d[0] : 0;
    dfg_tensor *logp = in->logp, *mask = in->mask;
    /* one optimisation pass per rollout: old = the current log-probs with the gradient stopped */
    dfg_tensor *old = in->old_logp ? in->old_logp : dfg_detach(g, logp);
    dfg_tensor *adv = dfg_reshape(g, in->advantages, DFG_SHAPE(n, 1));
    dfg_tensor *is = cfg.sampling_correction && in->sampling_logp ? sampling_weights(g, in, old, &cfg, out) : NULL;
    if (cfg.off_policy_mask) out->off_policy_mask = off_policy_mask(g, in, old, adv, cfg.off_policy_threshold);
    dfg_tensor *rho = importance_weights(g, in, old, cfg.is_level); /* (n, T') or (n, 1) */
    dfg_tensor *phi = cfg.loss_type == DFG_GRPO_LOSS_VESPO ? vespo_weights(g, in, old, is, adv, &cfg) : NULL;
    dfg_tensor *l = dfg_expand(g, policy_loss(g, in, &cfg, rho, adv, phi, out), s); /* (n, T') */
    if (out->off_policy_mask) l = dfg_mul(g, l, out->off_policy_mask);
    dfg_tensor *emask = cfg.top_entropy_quantile < 1.0f ? entropy_mask(g, in->entropy, mask, cfg.top_entropy_quantile, cfg.world) : NULL;
    if (emask) l = dfg_mul(g, l, emask);
    if (is && cfg.loss_type != DFG_GRPO_LOSS_VESPO) l = dfg_mul(g, l, is); /* vespo's w holds it */
    dfg_tensor *kl = NULL;
    if (in->ref_logp && cfg.beta != 0.0f) { /* k3: exp(ref - logp) - (ref - logp) - 1 >= 0 */
        dfg_tensor *d = dfg_mul(g, dfg_sub(g, in->ref_logp, logp), mask);
        kl = dfg_add_scalar(g, dfg_sub(g, dfg_exp(g, d), d), -1.0f);
        if (cfg.bias_correction_kl) kl = dfg_mul(g, kl, rho); /* TRL's: the ratio before delta, with its gradient */
        l = dfg_add(g, l, dfg_scale(g, kl, cfg.beta));
    }
    dfg_tensor *lm_sum = dfg_masked_sum(g, l, mask, 1); /* (n): sum over each sequence's tokens */
    dfg_tensor *len = dfg_sum(g, mask, 1);               /* (n) */
    dfg_tensor *active = in->active_tokens ? at_least_one(g, dfg_reshape(g, in->active_tokens, DFG_SCALAR)) : NULL;
    bool per_active = cfg.loss_type == DFG_GRPO_LOSS_DAPO || cfg.loss_type == DFG_GRPO_LOSS_CISPO ||
                      cfg.loss_type == DFG_GRPO_LOSS_VESPO;
    if (per_active && !active)
        return dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "grpo loss: dapo, cispo and vespo need active_tokens");
    switch (cfg.loss_type) {
    case DFG_GRPO_LOSS_GRPO: /* mean over all the step's sequences of each one's token mean */
    case DFG_GRPO_LOSS_SAPO:
        out->loss = dfg_scale(g, total(g, dfg_div(g, lm_sum, at_least_one(g, len))), 1.0f / (float)cfg.n_total);
        break;
    case DFG_GRPO_LOSS_BNPO: /* this micro-batch's token mean, averaged over the micro-batches */
        out->loss = dfg_scale(g, dfg_div(g, total(g, lm_sum), at_least_one(g, total(g, len))),
                              1.0f / (float)cfg.micro_batches);
        break;
    case DFG_GRPO_LOSS_DR_GRPO: /* a constant normaliser: every sequence at its full length */
        out->loss = dfg_scale(g, total(g, lm_sum), 1.0f / ((float)cfg.n_total * (float)cfg.max_completion_length));
        break;
    case DFG_GRPO_LOSS_LUSPO: /* mean over the step's sequences of each one's loss times its length */
        out->loss = dfg_scale(g, total(g, lm_sum), 1.0f / (float)cfg.n_total);
        break;
    case DFG_GRPO_LOSS_DAPO: /* over the active tokens of the whole step */
    case DFG_GRPO_LOSS_CISPO:
    case DFG_GRPO_LOSS_VESPO:
        out->loss = dfg_div(g, total(g, lm_sum), active);
        break;
    }
    if (cfg.entropy_coef != 0.0f) { /* the bonus: the trained tokens' mean entropy, normalised as TRL does */
        dfg_tensor *eff = emask ? emask : mask;
        dfg_tensor *hsum = total(g, dfg_mul(g, in->entropy, eff));
        dfg_tensor *bonus = per_active ? dfg_div(g, hsum, active)
                                       : dfg_scale(g, dfg_div(g, hsum, at_least_one(g, total(g, eff))),
                                                   1.0f / (float)cfg.micro_batches);
        out->loss = dfg_sub(g, out->loss, dfg_scale(g, bonus, cfg.entropy_coef));
    }
    /* metrics */
    out->tokens = total(g, len);
    out->kl_sum = kl ? total(g, dfg_mul(g, kl, mask)) : dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f);
    if (in->entropy) out->entropy = means_of(g, dfg_detach(g, in->entropy), mask, false).mean;
    return dfg_graph_status(g);
}

/* Writes src (n, 1) into column col (an i32 scalar read at run time) of rows row0 .. row0+n-1 of
 * dst (N, T): the whole column is read, the rows replaced, and the column written back. With
 * `ok` (an f32 scalar) 0 the column keeps what it held. */
static void write_rows_at(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int64_t row0, dfg_tensor *col, dfg_tensor *ok) {
    int64_t n = dfg_tensor_shape(src).d[0], all = dfg_tensor_shape(dst).d[0];
    dfg_tensor *now = dfg_slice_at(g, dst, 1, col, 1); /* (N, 1) */
    if (ok) src = dfg_where(g, ok, src, row0 || n != all ? dfg_slice(g, now, 0, row0, n) : now);
    if (n == all) {
        dfg_slice_assign_at(g, dst, src, 1, col);
        return;
    }
    dfg_tensor *parts[3];
    int k = 0;
    if (row0 > 0) parts[k++] = dfg_slice(g, now, 0, 0, row0);
    parts[k++] = src;
    if (row0 + n < all) parts[k++] = dfg_slice(g, now, 0, row0 + n, all - row0 - n);
    dfg_slice_assign_at(g, dst, dfg_concat(g, parts, k, 0), 1, col);
}

dfg_tensor *dfg_grpo_draw(dfg_graph *g, const dfg_grpo_rollout *r, dfg_tensor *logits, dfg_sampling s, dfg_tensor **logp) {
    int64_t N = dfg_tensor_numel(r->done), all = dfg_tensor_shape(r->tokens).d[0];
    dfg_tensor *draw0 = r->row0 || N != all || r->draw_row0 ? dfg_fill(g, DFG_I32, DFG_SCALAR, (float)r->row0) : NULL;
    if (r->draw_row0) draw0 = dfg_add(g, draw0, r->draw_row0);
    if (r->draw_rows) draw0 = draw0 ? dfg_add(g, r->draw_rows, draw0) : r->draw_rows; /* (N) each row's */
    /* the penalty counts each row's tokens so far: its prompt and completion, columns 0 .. pos, the pads not */
    dfg_shape ls = dfg_tensor_shape(logits);
    int64_t V = ls.rank ? ls.d[ls.rank - 1] : 0;
    bool penalty = s.repetition_penalty > 0.0f && s.repetition_penalty != 1.0f;
    bool reshaped = penalty || (s.top_k > 0 && s.top_k < V) || (s.top_p > 0.0f && s.top_p < 1.0f) || s.min_p > 0.0f;
    dfg_tensor *drawn_lp = NULL; /* (N, 1): the log-prob under what the token was drawn from */
    dfg_sample_io io = {.row0 = draw0, .history_skip = r->pad, .logp = logp && reshaped ? &drawn_lp : NULL};
    if (penalty)
        io.history = N == all ? r->tokens : dfg_slice(g, r->tokens, 0, r->row0, N),
        io.history_len = dfg_add_scalar(g, r->pos, 1.0f);
    dfg_tensor *tok = dfg_sample_with(g, logits, r->rng, &s, &io); /* (N, 1) i32 */
    if (!logp) return tok;
    /* the sampler's log-prob (TRL's); untruncated, the one training computes, as training does */
    *logp = drawn_lp ? dfg_reshape(g, drawn_lp, DFG_SHAPE(N)) : NULL;
    if (!*logp) {
        dfg_tensor *z = dfg_reshape(g, logits, DFG_SHAPE(N, -1)); /* (N, V) */
        if (s.temperature > 0.0f && s.temperature != 1.0f) z = dfg_scale(g, z, 1.0f / s.temperature);
        *logp = dfg_take(g, dfg_log_softmax(g, z), dfg_reshape(g, tok, DFG_SHAPE(N))); /* (N) */
    }
    return tok;
}

dfg_status dfg_grpo_sample_step(dfg_graph *g, const dfg_grpo_rollout *r, dfg_tensor *logits, dfg_sampling s,
                                const int32_t *eos, int n_eos) {
    if (!g || !r) return DFG_ERR_ARG;
    if (!eos || n_eos < 1 || n_eos > DFG_GRPO_MAX_EOS)
        return dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "dfg_grpo_sample_step: %d EOS ids (1 .. %d allowed)",
                                n_eos, DFG_GRPO_MAX_EOS);
    int64_t N = dfg_tensor_numel(r->done), all = dfg_tensor_shape(r->tokens).d[0];
    if (r->row0 < 0 || r->row0 + N > all)
        return dfg_program_fail(dfg_graph_program(g), DFG_ERR_ARG, "dfg_grpo_sample_step: rows %lld .. %lld are not rows "
                                "of the %lld sequences", (long long)r->row0, (long long)(r->row0 + N - 1), (long long)all);
    dfg_tensor *lp = NULL; /* (N) */
    dfg_tensor *tok = dfg_grpo_draw(g, r, logits, s, r->logp ? &lp : NULL); /* (N, 1) i32 */
    dfg_tensor *next = dfg_add_scalar(g, r->pos, 1.0f); /* where it goes */
    dfg_tensor *ok = NULL, *at_end = NULL; /* last_col: 1 while a column is left, 1 once none is */
    if (r->last_col > 0) {
        dfg_tensor *last = dfg_fill(g, DFG_F32, DFG_SCALAR, (float)r->last_col);
        dfg_tensor *pos = dfg_cast(g, r->pos, DFG_F32);
        ok = dfg_affine(g, dfg_equal(g, pos, last), -1.0f, 1.0f);
        dfg_tensor *next_f = dfg_minimum(g, dfg_add_scalar(g, pos, 1.0f), last);
        at_end = dfg_equal(g, next_f, last);
        next = dfg_cast(g, next_f, DFG_I32);
    }
    /* a sequence counts its tokens up to and including its first EOS */
    dfg_tensor *counts = dfg_affine(g, r->done, -1.0f, 1.0f); /* (N) 1 - done */
    write_rows_at(g, r->mask, dfg_reshape(g, counts, DFG_SHAPE(N, 1)), r->row0, next, ok);
    if (r->logp) write_rows_at(g, r->logp, dfg_reshape(g, dfg_mul(g, lp, counts), DFG_SHAPE(N, 1)), r->row0, next, ok);
    tok = dfg_where(g, dfg_reshape(g, r->done, DFG_SHAPE(N, 1)), dfg_fill(g, DFG_I32, DFG_SCALAR, (float)r->pad), tok);
    write_rows_at(g, r->tokens, tok, r->row0, next, ok);
    dfg_tensor *is_eos = NULL; /* (N, 1) f32: 1 when tok is any of the EOS ids */
    for (int i = 0; i < n_eos; i++) {
        dfg_tensor *hit = dfg_equal(g, tok, dfg_fill(g, DFG_I32, DFG_SCALAR, (float)eos[i]));
        is_eos = is_eos ? dfg_maximum(g, is_eos, hit) : hit;
    }
    dfg_tensor *done = dfg_maximum(g, r->done, dfg_reshape(g, is_eos, DFG_SHAPE(N))); /* (N) */
    dfg_assign(g, r->done, done);
    if (r->finished) { /* every row done: the sum of N ones, exact in f32 (or no column left) */
        dfg_tensor *all_done = dfg_equal(g, dfg_sum(g, done, 0), dfg_fill(g, DFG_F32, DFG_SCALAR, (float)N));
        dfg_assign(g, r->finished, at_end ? dfg_maximum(g, all_done, at_end) : all_done);
    }
    dfg_assign(g, r->token, tok);
    dfg_assign(g, r->pos, next);
    return dfg_graph_status(g);
}
