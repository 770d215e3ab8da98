#!/usr/bin/python3
"""Golden test: one GRPO step of dfg's pipeline (examples/grpo/grpo.c) against an independent PyTorch one.

For each configuration (every loss_type, beta 0 and > 0, num_iterations 1, 2 and 3 (the later passes clip), each
scale_rewards, temperature != 1, several micro-batches) this script
  1. compiles the pipeline as a user does:  dfg compile examples/grpo/grpo.c -o plan.dfg --set k=v ...
  2. draws a random GPT-2 (Hugging Face names) and fixed rollouts: prompts, completions that stop
     at an EOS (or run to the end), garbage after it with the mask off, rewards with tied groups;
     some configurations also load a reference model that differs from the policy (ref.* names),
     so that the KL term and its gradient are not zero at the first iteration;
  3. trains one step on them:  dfg run plan.dfg --weights W --rollouts R --steps 1 --dump OUT
  4. computes the same step in float64 with the GPT-2 of gpt2_golden.py and the formulas of TRL's
     GRPOTrainer written out below (group advantages, ratio, clipping, k3 KL, the four loss
     normalisations, micro-batch accumulation, torch.nn.utils.clip_grad_norm_, torch.optim.AdamW
     with decay on matrices only), and compares logp, ref_logp, advantages, loss, grad_norm,
     kl, clip_ratio and every updated parameter: max|dfg - torch| / max|torch| <= 1e-4. The loss
     is a sum whose terms cancel (advantages average to 0), so its error is taken relative to the
     larger of |loss| and the same normalisation of |per-token terms|, the sum's own scale in f32.
     Updated weights are also compared as updates (new - old), to 1e-2 of the largest update, so
     that a wrong optimizer step (bias correction, decay) cannot hide behind the weights' size;
     Adam's first step is ~lr * sign(g), so tiny gradients set a floor under this comparison.

Exit codes: 0 all agree, 1 a mismatch or an error, 77 torch/numpy not importable (ctest: skipped).
The seed is fresh each run and printed; DFG_TEST_SEED replays one.
"""
import argparse
import math
import os
import subprocess
import sys
import time

import golden_common
from golden_common import run_seed
from gpt2_golden import np, torch, st_read, st_write, random_weights, checkpoint_tensors, gpt2_logits, rel_err

TOL = 1e-4
TOL_UPDATE = 1e-2
# A reference value this small is 0 up to float64 rounding: the KL with the reference equal to the
# policy is exp(d) - d - 1 at d = 0 in exact arithmetic, but float64's exp leaves ~1e-16 a token
# where d is a rounding-sized nonzero, while dfg's d is exactly 0 (both sides are the same kernels).
# Such a value is compared against this floor instead of its own size (seed 3141240097 failed so).
ZERO_FLOOR = 1e-12
PAD, EOS = 0, 1
VOCAB = 15  # examples/tasks/dfg_tasks.h: PAD, EOS, ten digits, '+', '-', '='

BASE = dict(task="reverse", digits=3, prompts_per_step=3, num_generations=4, n_layer=2, n_head=2, n_embd=32,
            vocab_size=VOCAB, learning_rate=1e-3, adam_epsilon=1e-5, weight_decay=0.1, max_grad_norm=1.0,
            temperature=0.7, epsilon=0.2)
CONFIGS = [
    dict(name="grpo_kl", loss_type="grpo", beta=0.04, gradient_accumulation_steps=2, ref="perturbed"),
    dict(name="grpo_b0_clip", loss_type="grpo", beta=0.0, gradient_accumulation_steps=3, max_grad_norm=0.01,
         scale_rewards="none"),
    dict(name="bnpo_kl", loss_type="bnpo", beta=0.1, gradient_accumulation_steps=4, ref="perturbed",
         scale_rewards="batch"),
    # small epsilons and learning rates: the later passes clip (asserted) and the ratios spread
    # over both bounds, so the clipped branch's zero gradient and epsilon_high are checked
    dict(name="bnpo_b0_it2", loss_type="bnpo", beta=0.0, gradient_accumulation_steps=2, num_iterations=2,
         learning_rate=1e-4, epsilon=0.02, epsilon_high=0.06, clips=True),
    dict(name="dr_grpo_it2", loss_type="dr_grpo", beta=0.04, gradient_accumulation_steps=2, num_iterations=2,
         learning_rate=1e-4, epsilon=0.01, clips=True),
    dict(name="dr_grpo_b0", loss_type="dr_grpo", beta=0.0, gradient_accumulation_steps=1, temperature=1.0),
    dict(name="dapo_kl_it3", loss_type="dapo", beta=0.04, gradient_accumulation_steps=3, num_iterations=3,
         learning_rate=1e-4, ref="perturbed", epsilon=0.02, epsilon_high=0.08, scale_rewards="batch", clips=True),
    dict(name="dapo_b0", loss_type="dapo", beta=0.0, gradient_accumulation_steps=2, weight_decay=0.0),
    # every configuration whose micro-batches hold whole groups (GA 1 and 3 of P x G = 3 x 4)
    # computes each prompt once per group (share_prompts=auto); this one runs G separate copies
    dict(name="grpo_kl_copies", loss_type="grpo", beta=0.04, gradient_accumulation_steps=1, ref="perturbed",
         share_prompts=0),
    # TRL's mask_truncated_completions: every fifth row has no EOS and leaves the loss (and the
    # active-token count dapo divides by), while its reward still counts in its group's advantages
    dict(name="dapo_mask_truncated", loss_type="dapo", beta=0.04, gradient_accumulation_steps=2, ref="perturbed",
         mask_truncated_completions="true"),
    dict(name="grpo_mask_truncated", loss_type="grpo", beta=0.0, gradient_accumulation_steps=1,
         mask_truncated_completions="true"),
    # TRL's 2026 options. GSPO: one ratio per sequence (exp of its mean log-ratio), clipped per sequence
    dict(name="grpo_sequence_it3", loss_type="grpo", beta=0.0, gradient_accumulation_steps=2, num_iterations=3,
         importance_sampling_level="sequence", learning_rate=3e-4, epsilon=0.005, epsilon_high=0.01, clips=True),
    dict(name="dapo_sequence_kl_it2", loss_type="dapo", beta=0.04, gradient_accumulation_steps=3, num_iterations=2,
         importance_sampling_level="sequence", learning_rate=1e-4, ref="perturbed", epsilon=0.005, clips=True),
    # two-sided clipping (INTELLECT-2): the unclipped ratio capped at delta where A < 0
    dict(name="dapo_delta_it3", loss_type="dapo", beta=0.0, gradient_accumulation_steps=2, num_iterations=3,
         learning_rate=1e-4, epsilon=0.02, epsilon_high=0.02, delta=1.025, clips=True, needs_delta=True),
    # CISPO: the importance weight clipped at epsilon_high (an absolute bound), every token's gradient kept
    dict(name="cispo_it2", loss_type="cispo", beta=0.0, gradient_accumulation_steps=2, num_iterations=2,
         learning_rate=1e-4, epsilon_high=1.01, clips=True),
    dict(name="cispo_sequence_entropy", loss_type="cispo", beta=0.04, gradient_accumulation_steps=1, ref="perturbed",
         importance_sampling_level="sequence", epsilon_high=5.0, top_entropy_quantile=0.3),
    # SAPO: a sigmoid gate with temperatures by the sign of the advantage
    dict(name="sapo_it2", loss_type="sapo", beta=0.0, gradient_accumulation_steps=2, num_iterations=2,
         learning_rate=1e-4, sapo_temperature_pos=1.3, sapo_temperature_neg=0.7),
    dict(name="sapo_kl", loss_type="sapo", beta=0.04, gradient_accumulation_steps=3, ref="perturbed"),
    # entropy: the top 20% / 50% of tokens by entropy train (Beyond the 80/20 Rule), an entropy bonus
    dict(name="dapo_entropy_top", loss_type="dapo", beta=0.04, gradient_accumulation_steps=2, ref="perturbed",
         top_entropy_quantile=0.2),
    dict(name="grpo_entropy_coef_top", loss_type="grpo", beta=0.0, gradient_accumulation_steps=3,
         top_entropy_quantile=0.5, entropy_coef=0.05),
    dict(name="dapo_entropy_coef_it2", loss_type="dapo", beta=0.0, gradient_accumulation_steps=2, num_iterations=2,
         learning_rate=1e-4, entropy_coef=0.1, epsilon=0.02, clips=True),
    dict(name="bnpo_entropy_coef", loss_type="bnpo", beta=0.04, gradient_accumulation_steps=2, ref="perturbed",
         entropy_coef=0.02),
]
# TRL 1.10's importance-sampling correction and off-policy mask, on rollouts whose sampling_logps
# (the sampler's log-probs) differ from the policy's: every loss type x vllm_importance_sampling_mode
# x off_policy_mask_threshold on and off, the importance_sampling_level alternating (--group is;
# vespo takes the token modes only, as TRL requires); plus use_bias_correction_kl.
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")


def is_configs():
    out = []
    for i, lt in enumerate(LOSS_TYPES):
        for j, mode in enumerate(IS_MODES):
            if lt == "vespo" and mode.startswith("sequence"):
                continue
            for opm in (False, True):
                c = dict(name=f"{lt}_{mode}{'_opm' if opm else ''}", loss_type=lt, beta=0.0, sampling=True,
                         vllm_importance_sampling_mode=mode, gradient_accumulation_steps=2, num_iterations=2,
                         learning_rate=1e-3, importance_sampling_level="sequence" if (i + j) % 2 or lt == "luspo" else "token")
                if lt == "vespo":
                    c["importance_sampling_level"] = "token"
                if lt == "cispo":
                    c["epsilon_high"] = 1.2
                if (i + j) % 3 == 0:  # a lower bound too
                    c["vllm_importance_sampling_clip_min"] = 0.5
                if opm:
                    c["off_policy_mask_threshold"] = 0.1
                out.append(c)
    out.append(dict(name="grpo_bias_kl_sequence", loss_type="grpo", beta=0.04, ref="perturbed", sampling=True,
                    use_bias_correction_kl="true", importance_sampling_level="sequence", gradient_accumulation_steps=2,
                    num_iterations=2, learning_rate=1e-3, vllm_importance_sampling_mode="token_truncate"))
    out.append(dict(name="luspo_kl_bias_opm_nosampler", loss_type="luspo", beta=0.04, ref="perturbed",
                    use_bias_correction_kl="true", importance_sampling_level="sequence", gradient_accumulation_steps=3,
                    num_iterations=2, learning_rate=1e-3, off_policy_mask_threshold=2e-4))
    out.append(dict(name="vespo_b0_nocorrection", loss_type="vespo", beta=0.0, sampling=True,
                    vllm_importance_sampling_correction="false", gradient_accumulation_steps=2, num_iterations=2,
                    learning_rate=1e-3, vespo_k_pos=1.5, vespo_lambda_neg=2.5))
    return out


IS_CONFIGS = is_configs()
DEFAULTS = dict(beta=0.04, num_iterations=1, scale_rewards="group", loss_type="grpo", ref="initial",
                importance_sampling_level="token", delta=0.0, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
                top_entropy_quantile=1.0, entropy_coef=0.0, vllm_importance_sampling_correction="true",
                vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_max=3.0,
                use_bias_correction_kl="false", vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                vespo_lambda_neg=2.0)


def settings_of(cfg):
    s = dict(BASE)
    s.update(DEFAULTS)
    s.update({k: v for k, v in cfg.items() if k not in ("name", "clips", "needs_delta", "sampling")})
    s.setdefault("epsilon_high", s["epsilon"])
    s["max_prompt_length"] = s["digits"] + 1          # the reverse task: "ddd="
    s["max_completion_length"] = s["digits"] + 2
    s["n_positions"] = s["max_prompt_length"] + s["max_completion_length"]
    return s


def model_cfg(s):
    return dict(n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["n_embd"], vocab_size=s["vocab_size"],
                block_size=s["n_positions"], variant="plain")


# ---------------------------------------------------------------- fixed rollouts
def random_rollouts(s, rng):
    """tokens (N, T) i32, completion_mask (N, T) f32, rewards (N) f32, as a rollout leaves them."""
    P, G, Lp, L = s["prompts_per_step"], s["num_generations"], s["max_prompt_length"], s["max_completion_length"]
    N, T = P * G, Lp + L
    tokens = np.zeros((N, T), dtype=np.int32)
    mask = np.zeros((N, T), dtype=np.float32)
    for p in range(P):
        prompt = list(rng.integers(2, 12, size=Lp - 1)) + [14]  # digits then '='
        for g in range(G):
            n = p * G + g
            tokens[n, :Lp] = prompt
            comp = rng.integers(1, VOCAB, size=L)  # any token; EOS = 1 among them
            stop = int(rng.integers(1, L + 1))  # a completion of `stop` tokens ...
            if n % 5 != 4:
                comp[stop - 1] = EOS  # ... ending with its EOS (every fifth runs to the end)
                comp[:stop - 1][comp[:stop - 1] == EOS] = 2
            else:
                comp[comp == EOS] = 3
                stop = L
            tokens[n, Lp:] = comp  # garbage after the EOS stays, as sampling leaves it
            mask[n, Lp:Lp + stop] = 1.0
    rewards = rng.random(N).astype(np.float32)
    rewards[:G] = 0.5  # a group whose rewards tie: its advantages are 0
    rewards[G:2 * G:2] = 1.0
    return tokens, mask, rewards


def sampling_logps(lp0, mask, rng, scale=0.5):
    """(N, T) f32 a sampler's log-probs of the rollout's tokens: the policy's (lp0 (N, T-1), entry t
    for column t + 1) moved by N(0, scale) per token and kept <= 0; 0 on the prompt and off the mask."""
    out = np.zeros(mask.shape, dtype=np.float32)
    noisy = np.minimum(lp0.numpy() + scale * rng.standard_normal(lp0.shape), 0.0)
    out[:, 1:] = (noisy * mask[:, 1:]).astype(np.float32)
    return out


def perturbed(w, rng, scale=0.05):
    return {k: (v + scale * rng.standard_normal(v.shape)).astype(np.float32) for k, v in w.items()}


# ---------------------------------------------------------------- GRPO from its definition (TRL)
def token_logp(logits_of, tokens, temperature, entropy=False):
    """(n, T-1): log p(tokens[:, t+1] | tokens[:, <= t]) of the logits divided by the temperature;
    logits_of(tokens (n, T)) -> (n, T, V) is the model. With entropy, also the entropy of that
    distribution at every position (n, T-1), from the full logits (TRL's entropy_from_logits)."""
    logits = logits_of(tokens)[:, :-1] / temperature
    ls = torch.log_softmax(logits, dim=-1)
    lp = ls.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (lp, -(ls.exp() * ls).sum(-1)) if entropy else lp


def advantages(rewards, G, scale):
    r = rewards.view(-1, G)
    dev = r - r.mean(dim=1, keepdim=True)
    if scale == "group":
        dev = dev / (r.std(dim=1, keepdim=True) + 1e-4)
    elif scale == "batch":
        dev = dev / (rewards.std() + 1e-4)
    return dev.reshape(-1)


# The closest any scored token's ratio came to a clipping bound (relative) in the last reference
# run. A ratio within float rounding of a bound is clipped or not depending on the last bits
# (dfg's fp32 against this float64), and one flipped token changes the later passes' updates;
# run_config redraws the rollouts rather than test a tie. The entropy mask's threshold is held to
# the same rule (no other entropy within 1e-5 of it), and DELTA_BOUND records whether the delta
# bound was reached (a configuration with delta must exercise it).
NEAR_BOUND = [math.inf]
DELTA_BOUND = [False]
OFF_POLICY = [0]  # sequences the off-policy mask dropped in the last reference run (every pass)
KEEPS = []  # the off-policy masks of the micro-batches of the current pass
GRPO_FAMILY = ("grpo", "bnpo", "dr_grpo", "dapo")


def near(values, bounds):
    """Records the least relative distance of values from any of the bounds."""
    if values.numel():
        for b in bounds:
            NEAR_BOUND[0] = min(NEAR_BOUND[0], float(((values - b).abs() / abs(b)).min()))


def float32_rank(q, n):
    """torch.quantile's rank of q among n values as torch computes it for TRL's float32 entropies:
    q as a float32 times (n - 1) in float32 (at q = 0.8, n = 21: 16 exactly, where float64 lands
    a hair above or below an integer for other q and n)."""
    return float(np.float32(q) * np.float32(n - 1))


def quantile_float32_rank(v, q):
    """torch.quantile(v, q) at float32_rank; the values and the lerp stay float64."""
    s = torch.sort(v).values
    pos = float32_rank(q, s.numel())
    lo = min(int(math.floor(pos)), s.numel() - 1)
    w = pos - lo if lo < s.numel() - 1 else 0.0
    return s[lo] if w == 0.0 else torch.lerp(s[lo], s[lo + 1], w)


def high_entropy_mask(ent, m, q):
    """TRL's get_high_entropy_mask: the scored tokens whose entropy is at or above the q-quantile.
    Entropies tie exactly where contexts do (a group's first completion token: one prompt), and a
    threshold on such a tie keeps all or some of them depending on the last bits of each (dfg's
    float32 against this float64): rollouts whose threshold has another entropy within 1e-5 of it
    (or, falling between two ranks, any) are redrawn, as ratios at a clipping bound are."""
    local = ent[m > 0]
    if local.numel() == 0:
        return torch.zeros_like(ent)
    thr = quantile_float32_rank(local, q)
    pos = float32_rank(q, local.numel())
    close = int(((local - thr).abs() <= 1e-5 * max(float(thr), 1e-3)).sum())
    if close > (1 if pos == math.floor(pos) else 0):
        NEAR_BOUND[0] = 0.0
    return ((ent * m >= thr) & (m > 0)).double()


def trl_means(x, m):
    """TRL's global_masked_mean, nanmin and nanmax of masked_seq_mean of x (n, T) or (n, 1)."""
    if x.shape[1] == 1:
        per = x.squeeze(1)
        return float(x.mean()), float(per.min()), float(per.max())
    per = (x * m).sum(-1) / m.sum(-1)
    per = per[~torch.isnan(per)]
    return float((x * m).sum() / m.sum().clamp(min=1)), float(per.min()), float(per.max())


def is_bounds(s):
    """vllm_importance_sampling_clip_min and _max, TRL's None as None (dfg's clip_max 0)."""
    lo = s.get("vllm_importance_sampling_clip_min")
    hi = float(s["vllm_importance_sampling_clip_max"]) or None
    return (None if lo is None else float(lo)), hi


def importance_sampling(s, old, sampling, m):
    """TRL's _generate_and_score_completions: the vLLM importance-sampling ratio (n, T-1) or (n, 1)
    of old (the policy before the step) to the sampler's log-probs, truncated or masked; and the raw
    ratio and the modified flags its metrics count."""
    mode = s["vllm_importance_sampling_mode"]
    d = (old - sampling) * m
    if mode.startswith("sequence"):
        d = d.sum(dim=-1, keepdim=True)
    raw = torch.exp(d)
    lo, hi = is_bounds(s)
    near(raw[(m > 0) if not mode.startswith("sequence") else torch.ones_like(raw, dtype=torch.bool)],
         [b for b in (lo, hi) if b is not None])
    bad = torch.zeros_like(raw, dtype=torch.bool)
    if lo is not None:
        bad |= raw < lo
    if hi is not None:
        bad |= raw > hi
    rho = torch.clamp(raw, min=lo, max=hi) if mode.endswith("truncate") else raw.masked_fill(bad, 0.0)
    return rho, raw, bad.double()


def off_policy_keep(s, lp, sampling, A, m):
    """TRL's get_off_policy_mask: (n, 1), 1 = kept."""
    gap = ((sampling - lp.detach()) * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    thr = float(s["off_policy_mask_threshold"])
    if gap.numel():
        NEAR_BOUND[0] = min(NEAR_BOUND[0], float((gap - thr).abs().min()) / max(abs(thr), 1e-2))
    keep = ((A >= 0) | (gap <= thr)).double()
    OFF_POLICY[0] += int((keep == 0).sum())
    KEEPS.append(keep)
    return keep


def gamma_weights(s, log_ratio, m, is_ratio, A):
    """TRL's get_gamma_weights (VESPO), without gradient: (n, 1)."""
    with torch.no_grad():
        floor = math.log(1e-8)
        seq = (torch.clamp(log_ratio, -20.0, 20.0) * m).sum(dim=-1, keepdim=True)
        if is_ratio is not None:
            seq = seq + torch.clamp(torch.log(is_ratio), floor, 20.0).sum(dim=-1, keepdim=True)
        log_w = torch.clamp(seq, floor, 20.0)
        nonneg = A >= 0
        k = torch.where(nonneg, torch.full_like(A, s["vespo_k_pos"]), torch.full_like(A, s["vespo_k_neg"]))
        lam = torch.where(nonneg, torch.full_like(A, s["vespo_lambda_pos"]), torch.full_like(A, s["vespo_lambda_neg"])).clamp(min=1e-4)
        return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def micro_loss(s, lp, ent, old, ref, adv, m, n_total, active, sampling=None, is_ratio=None):
    """One micro-batch's share of the step's loss as TRL's _compute_loss makes it, plus the kl sum
    and the metrics it logs for the micro-batch. sampling: the sampler's log-probs or None (TRL
    without vLLM); is_ratio: their correction (importance_sampling) or None."""
    lt, A = s["loss_type"], adv[:, None]
    keep = None
    if s.get("off_policy_mask_threshold") is not None:
        keep = off_policy_keep(s, lp, sampling if sampling is not None else old, A, m)
    log_ratio = lp - old
    if s["importance_sampling_level"] == "sequence":
        liw = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        scored = m.sum(-1, keepdim=True) > 0
    else:
        liw, scored = log_ratio, m > 0
    coef_1 = torch.exp(liw)
    lo, hi, delta = 1 - s["epsilon"], 1 + s["epsilon_high"], float(s["delta"])
    stats = {}
    kl = torch.zeros_like(lp)
    if s["beta"] != 0:
        kl = torch.exp(ref - lp) - (ref - lp) - 1
        if s["use_bias_correction_kl"] == "true":
            kl = kl * coef_1
    if lt == "cispo":
        near(coef_1[scored.expand_as(coef_1)], [s["epsilon_high"]])
        w = torch.clamp(coef_1, max=s["epsilon_high"]).detach()
        per_token = -w * A * lp
        stats["cispo_clip_ratio"] = trl_means(((coef_1 > s["epsilon_high"]) & (A > 0)).double(), m)[0]
    elif lt in GRPO_FAMILY + ("luspo",):
        near(coef_1[scored.expand_as(coef_1)], [lo, hi] + ([delta] if delta > 0 else []))
        coef_2 = torch.clamp(coef_1, lo, hi)
        if delta > 0:
            DELTA_BOUND[0] |= bool(((coef_1 > delta) & (A < 0) & scored).any())
            coef_1 = torch.clamp(coef_1, max=delta)
        per_token = -torch.min(coef_1 * A, coef_2 * A)
        low = ((coef_1 < lo) & (A < 0)).double()
        high = ((coef_1 > hi) & (A > 0)).double()
        stats["clip_ratio/low_mean"], stats["clip_ratio/low_min"], _ = trl_means(low, m)
        stats["clip_ratio/high_mean"], _, stats["clip_ratio/high_max"] = trl_means(high, m)
        stats["clip_ratio/region_mean"] = trl_means(((low + high) > 0).double(), m)[0]
    elif lt == "vespo":
        phi = gamma_weights(s, log_ratio, m, is_ratio, A)
        per_token = -phi * A * lp
        stats["vespo/phi_seq_mean"] = float(phi.mean())
    else:  # sapo
        temps = torch.where(A > 0, torch.full_like(A, s["sapo_temperature_pos"]), torch.full_like(A, s["sapo_temperature_neg"]))
        per_token = -torch.sigmoid(temps * (coef_1 - 1)) * 4 / temps * A
    if keep is not None:
        per_token = per_token * keep
    emask = None
    if s["top_entropy_quantile"] < 1.0:
        emask = high_entropy_mask(ent.detach(), m, 1 - s["top_entropy_quantile"])
        per_token = per_token * emask
    if is_ratio is not None and lt != "vespo":
        per_token = per_token * is_ratio
    if s["beta"] != 0:
        per_token = per_token + s["beta"] * kl
    per_token = per_token.expand_as(lp)
    loss = normalise(s, per_token * m, m, n_total, active)
    scale = float(normalise(s, (per_token * m).abs().detach(), m, n_total, active))
    if s["entropy_coef"] != 0:
        eff = m if emask is None else m * emask
        if lt in ("cispo", "dapo", "vespo"):
            bonus = (ent * eff).sum() / max(active, 1.0)
        else:
            bonus = (ent * eff).sum() / eff.sum().clamp(min=1.0) / s["gradient_accumulation_steps"]
        loss = loss - s["entropy_coef"] * bonus
        scale += abs(s["entropy_coef"] * float(bonus))
    stats["entropy"] = trl_means(ent.detach(), m)[0]
    return loss, scale, float((kl * m).sum()), stats


def normalise(s, lm, m, n_total, active):
    """A micro-batch's share of the loss from its masked per-token terms lm (n, T-1)."""
    lt = s["loss_type"]
    if lt in ("grpo", "sapo"):
        return (lm.sum(dim=1) / m.sum(dim=1).clamp(min=1)).sum() / n_total
    if lt == "bnpo":
        return lm.sum() / m.sum().clamp(min=1) / s["gradient_accumulation_steps"]
    if lt == "dr_grpo":
        return lm.sum() / (n_total * s["max_completion_length"])
    if lt == "luspo":
        # TRL: (per_token_loss * mask.sum(1, keepdim=True)).mean() / GA, which for a sequence-level
        # per_token_loss (n, 1) is this; with a per-token factor (KL, token ratios) TRL averages over
        # every column, padding included, and dfg sums the scored tokens (docs/pipeline.md)
        return lm.sum() / n_total
    return lm.sum() / max(active, 1.0)  # dapo, cispo, vespo


def completion_metrics(tok, m_full, s):
    """TRL's completions/ metrics from the rollout: lengths up to and with the first EOS (the mask),
    truncated = no EOS among them."""
    Lp = s["max_prompt_length"]
    m = m_full[:, Lp:]
    lengths = m.sum(-1)
    truncated = ~((tok[:, Lp:] == EOS) & (m > 0)).any(-1)
    term = lengths[~truncated]
    if term.numel() == 0:
        term = torch.zeros(1, dtype=torch.float64)
    return {"completions/mean_length": np.array(float(lengths.mean())),
            "completions/min_length": np.array(float(lengths.min())),
            "completions/max_length": np.array(float(lengths.max())),
            "completions/clipped_ratio": np.array(float(truncated.double().mean())),
            "completions/mean_terminated_length": np.array(float(term.mean())),
            "completions/min_terminated_length": np.array(float(term.min())),
            "completions/max_terminated_length": np.array(float(term.max()))}


def reference(s, w, w_ref, tokens_np, mask_np, rewards_np, sampling_np=None):
    """The step in float64 with the GPT-2 of gpt2_golden.py, from the float32 weights w (policy) and w_ref."""
    mcfg = model_cfg(s)
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    ref_params = {k: torch.tensor(v, dtype=torch.float64) for k, v in w_ref.items()}
    return grpo_step(s, params, lambda t: gpt2_logits(params, t, mcfg), lambda t: gpt2_logits(ref_params, t, mcfg),
                     tokens_np, mask_np, rewards_np, sampling_np)


def sampling_metrics(s, lp0, sampling, m, rho, raw, bad):
    """TRL's sampling/ metrics of the step (with the correction), and the raw ratio's (TRL #5243)."""
    on = (m > 0) if rho.shape[1] > 1 else torch.ones_like(rho, dtype=torch.bool)
    delta = (lp0 - sampling).abs()[m > 0]
    out = {"sampling/sampling_logp_difference/mean": delta.mean(), "sampling/sampling_logp_difference/max": delta.max(),
           "sampling/importance_sampling_ratio/min": rho[on].min(), "sampling/importance_sampling_ratio/mean": rho[on].mean(),
           "sampling/importance_sampling_ratio/max": rho[on].max(), "sampling/raw_importance_sampling_ratio/min": raw[on].min(),
           "sampling/raw_importance_sampling_ratio/mean": raw[on].mean(),
           "sampling/raw_importance_sampling_ratio/max": raw[on].max(),
           "sampling/frac_modified_importance_sampling_ratio": bad[on].mean()}
    return {k: np.array(float(v)) for k, v in out.items()}


def grpo_step(s, params, policy, ref_model, tokens_np, mask_np, rewards_np, sampling_np=None):
    """One GRPO step (num_iterations passes) of any model: params maps dfg's parameter names to the
    float64 leaf tensors that policy(tokens) -> logits depends on (updated in place); ref_model(tokens)
    -> logits is the frozen reference; sampling_np (N, T) the sampler's log-probs or None. Returns
    what dfg's --dump holds, plus "loss_scale"."""
    tok = torch.tensor(tokens_np, dtype=torch.long)
    m_full = torch.tensor(mask_np, dtype=torch.float64)
    if s.get("mask_truncated_completions") == "true":  # TRL: completion_mask * ~truncated
        is_eos = tok == EOS
        truncated = ~(is_eos & (m_full > 0)).any(dim=1)
        m_full = m_full * (~truncated).double().unsqueeze(1)
    m = m_full[:, 1:]
    N, GA, temp = tok.shape[0], s["gradient_accumulation_steps"], s["temperature"]
    n = N // GA
    with torch.no_grad():
        lp0 = token_logp(policy, tok, temp)
        ref = token_logp(ref_model, tok, temp)
    adv = advantages(torch.tensor(rewards_np, dtype=torch.float64), s["num_generations"], s["scale_rewards"])
    active = float(m_full.sum())
    decay = [p for k, p in params.items() if p.dim() >= 2]
    no_decay = [p for k, p in params.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=s["learning_rate"], betas=(0.9, 0.999), eps=s["adam_epsilon"])
    out = completion_metrics(tok, torch.tensor(mask_np, dtype=torch.float64), s)
    sampling = None if sampling_np is None else torch.tensor(sampling_np, dtype=torch.float64)[:, 1:]
    is_ratio = None
    if sampling is not None and s["vllm_importance_sampling_correction"] == "true":
        is_ratio, raw, bad = importance_sampling(s, lp0, sampling, m)
        out.update(sampling_metrics(s, lp0, sampling, m, is_ratio, raw, bad))
        zero = torch.zeros(N, 1, dtype=torch.float64)
        out["importance_sampling_ratio"] = torch.cat([zero, is_ratio.expand_as(m) * m], dim=1).numpy()
    KEEPS.clear()
    calls = []  # the metrics of every micro-batch of every pass, averaged as TRL's log() does
    for k in range(s["num_iterations"]):
        opt.zero_grad()
        loss_sum, scale_sum, kl_sum = 0.0, 0.0, 0.0
        for mb in range(GA):
            rows = slice(mb * n, (mb + 1) * n)
            lp, ent = token_logp(policy, tok[rows], temp, entropy=True)
            old = lp0[rows] if s["num_iterations"] > 1 else lp.detach()
            loss, scale, kl, stats = micro_loss(s, lp, ent, old, ref[rows], adv[rows], m[rows], N, active,
                                                None if sampling is None else sampling[rows],
                                                None if is_ratio is None else is_ratio[rows])

            loss.backward()
            loss_sum, scale_sum, kl_sum = loss_sum + float(loss), scale_sum + scale, kl_sum + kl
            calls.append(stats)
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), s["max_grad_norm"])
        if k == 0 and KEEPS:
            out["off_policy_mask"] = torch.cat(KEEPS).reshape(-1).numpy()
        if k == 0:
            out["loss"] = np.array(loss_sum)
            out["loss_scale"] = max(abs(loss_sum), scale_sum)
            out["grad_norm"] = np.array(float(norm))
            if s["beta"] != 0:
                out["kl"] = np.array(kl_sum / max(active, 1.0))
        opt.step()
    for name in calls[0]:
        out[name] = np.array(sum(c[name] for c in calls) / len(calls))
    zero = torch.zeros(N, 1, dtype=torch.float64)
    out["logp"] = torch.cat([zero, lp0 * m], dim=1).numpy()
    if s["beta"] != 0:
        out["ref_logp"] = torch.cat([zero, ref * m], dim=1).numpy()
    out["advantages"] = adv.numpy()
    for k, p in params.items():
        out[k] = p.detach().numpy()
    return out


# ---------------------------------------------------------------- driving dfg
def sh(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{what} exited with {r.returncode}:\n  $ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


# --emulate-gpu: the plan compiled for cuda and run through the CUDA backend on the emulated device.
# In float32 the tolerances stay the CPU's; in bf16 (the cuda default) the step's values are held
# to bf16's precision, and the updates are not compared: a bf16 parameter cannot show an update
# smaller than its rounding (the f32 masters hold it; tests/cli/gpu_emu_test.sh checks those).
# The reference also starts from the weights dfg computes with in bf16: each rounded to bf16 as
# dfg rounds its f32 masters into the bf16 parameters. Without it the comparison measures how far
# the bf16 model is from the f32 one, which a KL term against a perturbed reference amplifies
# past any fixed bound (kl ~ 7 moved 5-7% on some seeds), not dfg's arithmetic.
# The step's scalars that sum exp(ref_logp - logp) over tokens (loss, kl, grad_norm) are held to
# 1e-1 instead: bf16's absolute error in a log-prob (~1e-2 here) enters them multiplied by
# exp(ref_logp - logp), and with this test's far-off reference model (kl ~ 2-7) that moved them
# by up to 5.3% on the worst seed seen (2.6% at most over 20 random seeds; 3 seeds in 15 failed a
# 3% bound); a wrong cast or layout moves them by far more.
TOL_BF16 = 3e-2
TOL_BF16_KL_SUMS = 1e-1
KL_SUMS = ("loss", "kl", "grad_norm")
GPU_MODE = {"mode": None}


def bf16_rounded(w):
    """Each array rounded to the nearest bf16 (ties to even), kept as float32."""
    out = {}
    for k, v in w.items():
        u = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        out[k] = u.astype(np.uint32).view(np.float32)
    return out


def exercised(cfg, want):
    """Does the reference step clip as the configuration means it to (compare_step's rules) and,
    with needs_delta, reach the delta bound?"""
    if cfg.get("needs_delta") and not DELTA_BOUND[0]:
        return False
    if cfg.get("off_policy_mask_threshold") is not None and not OFF_POLICY[0]:
        return False  # the mask must drop a sequence
    frac = want.get("sampling/frac_modified_importance_sampling_ratio")
    if frac is not None and not 0 < float(frac) < 1:
        return False  # the bounds must change some ratios and not all
    if not cfg.get("clips"):
        return True
    if "cispo_clip_ratio" in want:
        return float(want["cispo_clip_ratio"]) > 0
    return float(want["clip_ratio/low_mean"]) > 0 and float(want["clip_ratio/high_mean"]) > 0


def run_config(cfg, dfg, source, workdir, seed):
    s = settings_of(cfg)
    d = os.path.join(workdir, cfg["name"])
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    rng = np.random.default_rng([seed, sum(map(ord, cfg["name"]))])
    mcfg = model_cfg(s)
    w = random_weights(mcfg, rng)
    w_ref = perturbed(w, rng) if s["ref"] == "perturbed" else w
    # rollouts with no ratio within 1e-5 of a clipping bound in any pass, and that exercise what the
    # configuration is for (clipping on both sides, the delta bound): a draw that does not is a
    # draw that tests less, not a failure of dfg; the checks after the run still require it
    w_run = bf16_rounded(w) if GPU_MODE["mode"] == "bf16" else w
    for _ in range(40):
        tokens, mask, rewards = random_rollouts(s, rng)
        sampling = None
        if cfg.get("sampling"):
            params = {k: torch.tensor(v, dtype=torch.float64) for k, v in w_run.items()}
            with torch.no_grad():
                lp0 = token_logp(lambda t: gpt2_logits(params, t, mcfg), torch.tensor(tokens, dtype=torch.long), s["temperature"])
            sampling = sampling_logps(lp0, mask, rng)
        NEAR_BOUND[0] = math.inf
        DELTA_BOUND[0] = False
        OFF_POLICY[0] = 0
        want = reference(s, w_run, bf16_rounded(w_ref) if GPU_MODE["mode"] == "bf16" else w_ref, tokens, mask, rewards,
                         sampling)
        if NEAR_BOUND[0] > 1e-5 and exercised(cfg, want):
            break
    files = checkpoint_tensors(mcfg, w)
    if s["ref"] == "perturbed":
        files.update({"ref." + k: v for k, v in w_ref.items()})
    paths = {k: os.path.join(d, k) for k in ("plan.dfg", "weights.safetensors", "rollouts.safetensors", "out.safetensors")}
    st_write(paths["weights.safetensors"], files)
    rollout = {"tokens": tokens, "completion_mask": mask, "rewards": rewards}
    if sampling is not None:
        rollout["sampling_logps"] = sampling
    st_write(paths["rollouts.safetensors"], rollout)
    sets = [a for k, v in s.items() if k not in ("name", "ref") for a in ("--set", f"{k}={v}")]
    mode = GPU_MODE["mode"]
    run_flags = []
    if mode:
        sets += ["--target", "cuda", "--set", "torch_dtype=" + ("float32" if mode == "f32" else "bfloat16")]
        run_flags = ["--emulate-gpu", "--threads", "1"]
    print(f"[{cfg['name']}] " + " ".join(f"{k}={s[k]}" for k in ("loss_type", "importance_sampling_level", "beta", "num_iterations",
          "gradient_accumulation_steps", "scale_rewards", "temperature", "learning_rate", "max_grad_norm", "ref"))
          + (f" vllm_importance_sampling_mode={s['vllm_importance_sampling_mode']}" if sampling is not None else "")
          + (f" off_policy_mask_threshold={s['off_policy_mask_threshold']}" if "off_policy_mask_threshold" in s else ""))
    t0 = time.time()
    try:
        got, log = dfg_step(dfg, source, sets, paths, run_flags)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"[{cfg['name']}] FAIL: {e}")
        return False
    t_dfg = time.time() - t0
    ok, _ = compare_step(want, got, w, mode, cfg.get("clips", False))
    if cfg.get("off_policy_mask_threshold") is not None and not OFF_POLICY[0]:
        print("  the off-policy mask dropped no sequence: it is not exercised  FAIL")
        ok = False
    frac = want.get("sampling/frac_modified_importance_sampling_ratio")
    if frac is not None and not 0 < float(frac) < 1:
        print(f"  the correction's bounds changed {float(frac):.3g} of its ratios: they are not exercised  FAIL")
        ok = False
    if cfg.get("needs_delta") and not DELTA_BOUND[0]:
        print(f"  no ratio reached delta {s['delta']} with a negative advantage: delta is not exercised  FAIL")
        ok = False
    clip = want.get("clip_ratio/region_mean", want.get("cispo_clip_ratio", np.array(0.0)))
    print(f"[{cfg['name']}] loss torch {float(want['loss']):+.8f} dfg {float(got.get('loss', np.nan)):+.8f}, "
          f"grad_norm {float(want['grad_norm']):.6f}, clip ratio {float(clip):.4f}, "
          f"entropy {float(want['entropy']):.4f}; "
          f"dfg {t_dfg:.2f}s; {'PASS' if ok else 'FAIL'}")
    if not ok:
        print("  dfg run printed:\n" + "\n".join("  | " + line for line in log.splitlines()))
    return ok


def dfg_step(dfg, source, sets, paths, run_flags=()):
    """dfg compile SOURCE --set ... then dfg run --weights --rollouts --steps 1 --dump, as a user
    does; paths names plan.dfg, the weights (file or model directory), the rollouts and the dump.
    Returns (the dump's tensors, what dfg run printed)."""
    sh([dfg, "compile", source, "-o", paths["plan.dfg"]] + list(sets), "dfg compile")
    log = sh([dfg, "run", paths["plan.dfg"], "--weights", paths["weights.safetensors"], "--rollouts",
              paths["rollouts.safetensors"], "--steps", "1", "--dump", paths["out.safetensors"]] + list(run_flags),
             "dfg run")
    got, _ = st_read(paths["out.safetensors"])
    return got, log


def compare_step(want, got, w, mode=None, clips=False):
    """Prints dfg's dump against the reference step (want, from grpo_step) tensor by tensor; w holds
    the weights before the step, by dfg's names (the updated ones are compared as updates too).
    Returns (all agree, {name: (rel.err, update rel.err or None)})."""
    tol = TOL_BF16 if mode == "bf16" else TOL
    ok, errs = True, {}
    nw = max([30] + [len(k) for k in want])  # the name column
    print(f"  {'tensor':<{nw}} {'shape':<12} {'max|torch|':>11} {'rel.err':>10} {'update err':>10}")
    for name, ref in want.items():
        if name == "loss_scale":
            continue
        g = got.get(name)
        if g is None:
            print(f"  {name:<{nw}} MISSING from dfg's dump")
            ok = False
            errs[name] = (math.nan, None)
            continue
        if g.size != ref.size or (ref.ndim and tuple(g.shape) != tuple(ref.shape)):
            print(f"  {name:<{nw}} shape {tuple(g.shape)} from dfg, {tuple(ref.shape)} expected")
            ok = False
            errs[name] = (math.nan, None)
            continue
        g = g.reshape(ref.shape)
        e = rel_err(g, ref)
        if 0 < float(np.max(np.abs(ref))) < ZERO_FLOOR:  # zero up to float64 rounding (the KL with ref = policy)
            e = float(np.max(np.abs(g.astype(np.float64) - ref))) / ZERO_FLOOR
        if name == "loss":
            e = abs(float(g) - float(ref)) / want["loss_scale"] if want["loss_scale"] > 0 else abs(float(g) - float(ref))
        good = e <= (TOL_BF16_KL_SUMS if mode == "bf16" and name in KL_SUMS else tol)
        upd, eu = "", None
        if name in w and mode != "bf16":  # an updated weight: compare the update too
            eu = rel_err(g.astype(np.float64) - w[name], ref - w[name])
            good &= eu <= TOL_UPDATE
            upd = f"{eu:10.2e}"
        ok &= bool(good)
        errs[name] = (e, eu)
        print(f"  {name:<{nw}} {str(tuple(ref.shape)):<12} {float(np.max(np.abs(ref))):11.4e} {e:10.2e} {upd:>10}"
              f"{'' if good else '  FAIL'}")
    if clips and "cispo_clip_ratio" in want and not float(want["cispo_clip_ratio"]) > 0:
        print(f"  cispo_clip_ratio is 0: this configuration is meant to exercise clipping and does not  FAIL")
        ok = False
    if clips and "clip_ratio/low_mean" in want and not (float(want["clip_ratio/low_mean"]) > 0 and
                                                        float(want["clip_ratio/high_mean"]) > 0):
        print(f"  clip_ratio/low_mean {float(want['clip_ratio/low_mean'])}, high_mean {float(want['clip_ratio/high_mean'])}: "
              f"this configuration is meant to clip on both sides and does not  FAIL")
        ok = False
    return ok, errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dfg", required=True, help="path of the dfg executable")
    ap.add_argument("--source", required=True, help="path of examples/grpo/grpo.c")
    ap.add_argument("--workdir", required=True, help="directory for the plans and exchanged files")
    ap.add_argument("--config", action="append", help="run only these configurations (default: all)")
    ap.add_argument("--group", choices=("loss", "is"), default="loss",
                    help="loss: the loss types and options of TRL 1.9; is: TRL 1.10's importance-sampling "
                         "correction, off-policy mask, luspo and vespo on rollouts with sampler log-probs")
    ap.add_argument("--emulate-gpu", choices=("f32", "bf16"),
                    help="compile for cuda (torch_dtype float32 or bfloat16) and run with dfg run --emulate-gpu")
    a = ap.parse_args()
    GPU_MODE["mode"] = a.emulate_gpu
    seed = run_seed("grpo_golden")
    if seed is None:
        return 1
    print(f"grpo_golden: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {torch.__version__}, "
          f"tolerance {TOL_BF16 if a.emulate_gpu == 'bf16' else TOL:g} per tensor, "
          f"{'no' if a.emulate_gpu == 'bf16' else TOL_UPDATE} per update"
          f"{'; cuda plans on the emulated GPU in ' + a.emulate_gpu if a.emulate_gpu else ''}")
    torch.manual_seed(seed)
    os.makedirs(a.workdir, exist_ok=True)
    configs = golden_common.chosen_configs("grpo_golden", IS_CONFIGS if a.group == "is" else CONFIGS, a.config)
    if configs is None:
        return 1
    results = [run_config(c, a.dfg, a.source, a.workdir, seed) for c in configs]
    ok = all(results)
    print(f"grpo_golden: {sum(results)}/{len(results)} configurations agree (seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
