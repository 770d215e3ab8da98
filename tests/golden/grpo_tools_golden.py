#!/usr/bin/python3
"""Golden test: one GRPO step of a multi-turn rollout (tool tokens inside the completions) against
TRL's masked loss in float64.

grpo_golden.py's step (the same GPT-2, the same TRL formulas, the same tolerances: 1e-4 per tensor,
1e-2 per update) on rollouts of the calculator task (task=calculator, 17 ids: '*' 15 and '@' 16)
whose completions hold tool spans: 1 to 4 runs of tool_mask 0 strictly inside a completion (a
generated token before and after each, the token before sometimes the call's EOS, as the
calculator's "@12*34$" call turn ends), some rows without tools, the completion_mask 1 up to the
row's end over the tools' tokens too. The rollout file carries tool_mask (N, T), 1 off the tool
spans (TRL pads it with 1). The reference is TRL's: loss_mask = completion_mask * tool_mask
wherever TRL uses it (the loss and its normalisations, KL, entropy, the clip ratios, the
importance-sampling correction and its metrics, the off-policy mask), and the completion lengths
count tool_mask = 1 tokens; tool tokens' sampler log-probs are 0 (TRL's _tool_call_loop).

Configurations: every loss_type, each with beta 0 and beta > 0, with and without sampling_logps,
num_iterations 1 and 2 (the two configurations of a loss type split these), plus
mask_truncated_completions with top_entropy_quantile, the off-policy mask with an entropy bonus,
and two checks of their own:
  ones_equal    a rollout whose tool_mask is all ones gives the dump (every tensor, bit for bit)
                of the same rollout without tool_mask in the file, and both match the reference;
  every config  the dumped completions/mean_length is the mean of each row's tool_mask = 1
                completion tokens, which the draw makes differ from the completion_mask count.

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
import grpo_golden as gg
from golden_common import run_seed
from gpt2_golden import np, torch, st_write, random_weights, checkpoint_tensors, gpt2_logits

EOS = gg.EOS
VOCAB = 17  # examples/tasks/dfg_tasks.h: the 15 ids, then '*' 15 and '@' 16
STAR, EQUALS = 15, 14
DIGITS, COMPLETION = 2, 16  # prompts "12*34=" (6 tokens); completions of 16 columns
TOOL_TOKENS = np.array(list(range(2, 12)) + [EQUALS])  # a tool's answer: "=408="
IS_MODES = gg.IS_MODES


# CHUNKS: with 16 completion columns the plan has two widths (length_buckets=auto: 16 and 8), and
# where the loss does not depend on how the batch is split dfg trains it in chunks of groups sorted
# by length, whose per-micro-batch metrics (entropy, clip ratios) are token means over the batch:
# TRL's values for gradient_accumulation_steps 1 (docs/pipeline.md). The configurations with
# several micro-batches and sortable chunks therefore take length_chunks=1 (TRL's micro-batches);
# those with one micro-batch keep the chunks, whose sorting then runs on multi-turn rows. There the
# metrics that are no token means (a row's max and min of the clip ratios, VESPO's row mean of phi)
# are the chunks' extremes and the row mean, as TRL's nanmin, nanmax and sequence mean (they were
# token-weighted once: dapo clip_ratio/high_max off by 0.43, vespo/phi_seq_mean by 1.8e-2); all
# are compared.


def tools_configs():
    """Two configurations a loss type: between them beta 0 and > 0, sampling_logps and none,
    num_iterations 1 and 2; then the options whose masks are TRL's loss_mask too."""
    out = []
    for i, lt in enumerate(gg.LOSS_TYPES):
        odd = i % 2
        for kl in (True, False):
            sampled = kl == bool(odd)
            c = dict(name=f"{lt}_{'kl' if kl else 'b0'}{'_is' if sampled else ''}", loss_type=lt,
                     beta=0.04 if kl else 0.0, gradient_accumulation_steps=1 if kl else (2, 3, 4)[i % 3],
                     num_iterations=2 if sampled else 1, learning_rate=1e-3)
            if not kl:  # TRL's micro-batches: see CHUNKS
                c["length_chunks"] = 1
            if kl:
                c["ref"] = "perturbed"
            if sampled:
                modes = IS_MODES[:2] if lt == "vespo" else IS_MODES
                c.update(sampling=True, vllm_importance_sampling_mode=modes[i % len(modes)])
                if i % 3 == 0:
                    c["vllm_importance_sampling_clip_min"] = 0.5
            if lt == "luspo" or (lt != "vespo" and (i + kl) % 3 == 2):
                c["importance_sampling_level"] = "sequence"
            if lt == "cispo":
                c["epsilon_high"] = 1.2
            if lt == "vespo" and not sampled:  # TRL requires a token mode even without sampler log-probs
                c["vllm_importance_sampling_mode"] = "token_truncate"
            out.append(c)
    out.append(dict(name="grpo_mask_truncated_entropy", loss_type="grpo", beta=0.04, ref="perturbed",
                    gradient_accumulation_steps=2, mask_truncated_completions="true", top_entropy_quantile=0.3))
    out.append(dict(name="bnpo_opm_entropy_coef", loss_type="bnpo", beta=0.0, sampling=True, num_iterations=2,
                    gradient_accumulation_steps=3, learning_rate=1e-3, vllm_importance_sampling_mode="token_truncate",
                    off_policy_mask_threshold=0.1, entropy_coef=0.05))
    out.append(dict(name="ones_equal", loss_type="dapo", beta=0.04, ref="perturbed", sampling=True, num_iterations=2,
                    gradient_accumulation_steps=1, learning_rate=1e-3, vllm_importance_sampling_mode="token_mask",
                    ones=True))
    return out


TOOLS_CONFIGS = tools_configs()


def settings_of(cfg):
    s = gg.settings_of({k: v for k, v in cfg.items() if k != "ones"})
    s.update(task="calculator", digits=DIGITS, vocab_size=VOCAB, max_prompt_length=2 * DIGITS + 2,
             max_completion_length=COMPLETION)
    s["n_positions"] = s["max_prompt_length"] + s["max_completion_length"]
    return s


# ---------------------------------------------------------------- multi-turn rollouts
def tool_spans(rng, k, stop):
    """Up to k (start, end) spans of tool tokens strictly inside a completion of stop tokens:
    positions 1 .. stop - 2, each 1-3 long, a generated token between two of them."""
    inner = stop - 2
    lens = [int(rng.integers(1, 4)) for _ in range(k)]
    while lens and sum(lens) + len(lens) - 1 > inner:
        i = int(np.argmax(lens))
        if lens[i] > 1:
            lens[i] -= 1
        else:
            lens.pop()
    slack = inner - (sum(lens) + len(lens) - 1) if lens else 0
    bins = np.diff([0] + sorted(int(x) for x in rng.integers(0, slack + 1, size=len(lens))) + [slack])
    spans, pos = [], 1 + int(bins[0]) if lens else 0
    for i, n in enumerate(lens):
        spans.append((pos, pos + n))
        pos += n + 1 + int(bins[i + 1])
    return spans


def tool_rollouts(s, rng):
    """tokens (N, T) i32, completion_mask (N, T) f32, tool_mask (N, T) f32, rewards (N) f32: the
    first row of a group calls no tool, the second at least one; every fifth row runs to the end
    without an EOS (TRL's truncated: its last token is no EOS), the others end with one."""
    P, G, Lp, L = s["prompts_per_step"], s["num_generations"], s["max_prompt_length"], s["max_completion_length"]
    N, T = P * G, Lp + L
    tokens = np.zeros((N, T), dtype=np.int32)
    mask = np.zeros((N, T), dtype=np.float32)
    tool = np.ones((N, T), dtype=np.float32)
    for p in range(P):
        a, b = rng.integers(2, 12, size=DIGITS), rng.integers(2, 12, size=DIGITS)
        prompt = list(a) + [STAR] + list(b) + [EQUALS]
        for g in range(G):
            n = p * G + g
            tokens[n, :Lp] = prompt
            k = 0 if g == 0 else int(rng.integers(1, 5)) if g == 1 else int(rng.integers(0, 5))
            truncated = n % 5 == 4
            stop = L if truncated else int(rng.integers(min(2 * k + 2, L), L + 1))
            comp = rng.integers(2, VOCAB, size=L)  # generated tokens: anything but PAD and EOS
            spans = tool_spans(rng, k, stop)
            for lo, hi in spans:
                comp[lo:hi] = rng.choice(TOOL_TOKENS, size=hi - lo)
                tool[n, Lp + lo:Lp + hi] = 0.0
                if not truncated and rng.random() < 0.5:
                    comp[lo - 1] = EOS  # the call's turn ended with its EOS
            if not truncated:
                comp[stop - 1] = EOS
            tokens[n, Lp:] = comp  # garbage after the end stays, as sampling leaves it
            mask[n, Lp:Lp + stop] = 1.0
    rewards = rng.random(N).astype(np.float32)
    rewards[:G] = 0.5  # a group whose rewards tie: its advantages are 0
    rewards[G:2 * G:2] = 1.0
    return tokens, mask, tool, rewards


# ---------------------------------------------------------------- one configuration
def draw(cfg, s, w_run, w_ref, mcfg, rng):
    """Rollouts whose reference step has no ratio or entropy within 1e-5 of a bound and exercises
    what the configuration is for (grpo_golden.run_config's rule); (tokens, mask, tool, rewards,
    sampling, the reference step)."""
    for _ in range(40):
        tokens, mask, tool, rewards = tool_rollouts(s, rng)
        if cfg.get("ones"):
            tool[:] = 1.0
        loss_mask = mask * tool  # TRL's loss_mask
        sampling = None
        if cfg.get("sampling"):
            params = {k: torch.tensor(v, dtype=torch.float64) for k, v in w_run.items()}
            with torch.no_grad():
                lp0 = gg.token_logp(lambda t: gpt2_logits(params, t, mcfg), torch.tensor(tokens, dtype=torch.long),
                                    s["temperature"])
            sampling = gg.sampling_logps(lp0, loss_mask, rng)  # 0 on the tools' tokens, as TRL's logprobs
        gg.NEAR_BOUND[0] = math.inf
        gg.DELTA_BOUND[0] = False
        gg.OFF_POLICY[0] = 0
        want = gg.reference(s, w_run, w_ref, tokens, loss_mask, rewards, sampling)
        if gg.NEAR_BOUND[0] > 1e-5 and gg.exercised(cfg, want):
            break
    return tokens, mask, tool, rewards, sampling, want


def check_lengths(got, mask, tool, s):
    """The dumped completions/mean_length counts tool_mask = 1 tokens only."""
    Lp = s["max_prompt_length"]
    generated = float((mask * tool)[:, Lp:].sum(1).mean())
    whole = float(mask[:, Lp:].sum(1).mean())
    dumped = float(got.get("completions/mean_length", np.nan))
    ok = abs(dumped - generated) <= 1e-4 * generated and (generated < whole or bool(tool.all()))
    print(f"  completions/mean_length {dumped:.6g}: tool_mask=1 tokens {generated:.6g}, with the tools' "
          f"{whole:.6g}{'' if ok else '  FAIL'}")
    return ok


def bit_identical(a, b):
    """Do two dumps hold the same names and the same bytes under each?"""
    ok = set(a) == set(b)
    if not ok:
        print(f"  the dumps name different tensors: {sorted(set(a) ^ set(b))}  FAIL")
    same = [k for k in a if k in b and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            and a[k].tobytes() == b[k].tobytes()]
    differ = sorted(k for k in a if k in b and k not in same)
    print(f"  tool_mask all ones against no tool_mask: {len(same)} tensors bit-identical"
          f"{', differ: ' + ', '.join(differ) + '  FAIL' if differ else ''}")
    return ok and not differ


def run_config(cfg, dfg, source, workdir, seed):
    s = settings_of(cfg)
    d = os.path.join(workdir, cfg["name"])
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    rng = np.random.default_rng([seed, sum(map(ord, cfg["name"]))])
    mcfg = gg.model_cfg(s)
    w = random_weights(mcfg, rng)
    w_ref = gg.perturbed(w, rng) if s["ref"] == "perturbed" else w
    bf16 = gg.GPU_MODE["mode"] == "bf16"
    w_run = gg.bf16_rounded(w) if bf16 else w
    tokens, mask, tool, rewards, sampling, want = draw(cfg, s, w_run, gg.bf16_rounded(w_ref) if bf16 else w_ref,
                                                       mcfg, rng)
    files = checkpoint_tensors(mcfg, w)
    if s["ref"] == "perturbed":
        files.update({"ref." + k: v for k, v in w_ref.items()})
    paths = {k: os.path.join(d, k) for k in ("plan.dfg", "weights.safetensors", "rollouts.safetensors", "out.safetensors")}
    st_write(paths["weights.safetensors"], files)
    rollout = {"tokens": tokens, "completion_mask": mask, "rewards": rewards, "tool_mask": tool}
    if sampling is not None:
        rollout["sampling_logps"] = sampling
    st_write(paths["rollouts.safetensors"], rollout)
    sets = [a for k, v in s.items() if k not in ("name", "ref") for a in ("--set", f"{k}={v}")]
    run_flags = []
    if gg.GPU_MODE["mode"]:
        sets += ["--target", "cuda", "--set", "torch_dtype=" + ("float32" if gg.GPU_MODE["mode"] == "f32" else "bfloat16")]
        run_flags = ["--emulate-gpu", "--threads", "1"]
    Lp = s["max_prompt_length"]
    calls = [len([1 for j in range(Lp + 1, tool.shape[1]) if tool[n, j] == 0 and tool[n, j - 1] == 1]) for n in range(len(tool))]
    print(f"[{cfg['name']}] " + " ".join(f"{k}={s[k]}" for k in ("loss_type", "importance_sampling_level", "beta",
          "num_iterations", "gradient_accumulation_steps", "ref"))
          + (f" vllm_importance_sampling_mode={s['vllm_importance_sampling_mode']}" if sampling is not None else "")
          + f"; tool spans a row: {calls}, tool tokens {int((mask * (1 - tool)).sum())} of {int(mask.sum())}")
    t0 = time.time()
    try:
        got, log = gg.dfg_step(dfg, source, sets, paths, run_flags)
        if cfg.get("ones"):  # the same rollout without tool_mask in the file
            del rollout["tool_mask"]
            paths_none = dict(paths, **{"rollouts.safetensors": os.path.join(d, "rollouts_none.safetensors"),
                                        "out.safetensors": os.path.join(d, "out_none.safetensors")})
            st_write(paths_none["rollouts.safetensors"], rollout)
            got_none, _ = gg.dfg_step(dfg, source, sets, paths_none, run_flags)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"[{cfg['name']}] FAIL: {e}")
        return False
    t_dfg = time.time() - t0
    ok, errs = gg.compare_step(want, got, w, gg.GPU_MODE["mode"], cfg.get("clips", False))
    worst = max((e for e, _ in errs.values()), default=math.nan)
    worst_update = max((u for _, u in errs.values() if u is not None), default=math.nan)
    ok &= check_lengths(got, mask, tool, s)
    if cfg.get("ones"):
        ok &= bit_identical(got, got_none)
    if cfg.get("off_policy_mask_threshold") is not None and not gg.OFF_POLICY[0]:
        print("  the off-policy mask dropped no sequence: it is not exercised  FAIL")
        ok = False
    frac = want.get("sampling/frac_modified_importance_sampling_ratio")
    if frac is not None and not 0 < float(frac) < 1:
        print(f"  the correction's bounds changed {float(frac):.3g} of its ratios: they are not exercised  FAIL")
        ok = False
    print(f"[{cfg['name']}] loss torch {float(want['loss']):+.8f} dfg {float(got.get('loss', np.nan)):+.8f}, "
          f"grad_norm torch {float(want['grad_norm']):.6f} dfg {float(got.get('grad_norm', np.nan)):.6f}; "
          f"worst rel.err {worst:.2e}, update {worst_update:.2e}; dfg {t_dfg:.2f}s; {'PASS' if ok else 'FAIL'}")
    if not ok:
        print("  dfg run printed:\n" + "\n".join("  | " + line for line in log.splitlines()))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dfg", required=True, help="path of the dfg executable")
    ap.add_argument("--source", required=True, help="path of examples/grpo/grpo.c")
    ap.add_argument("--workdir", required=True, help="directory for the plans and exchanged files")
    ap.add_argument("--config", action="append", help="run only these configurations (default: all)")
    ap.add_argument("--emulate-gpu", choices=("f32", "bf16"),
                    help="compile for cuda (torch_dtype float32 or bfloat16) and run with dfg run --emulate-gpu")
    a = ap.parse_args()
    gg.GPU_MODE["mode"] = a.emulate_gpu
    seed = run_seed("grpo_tools_golden")
    if seed is None:
        return 1
    print(f"grpo_tools_golden: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {torch.__version__}, "
          f"tolerance {gg.TOL_BF16 if a.emulate_gpu == 'bf16' else gg.TOL:g} per tensor, "
          f"{'no' if a.emulate_gpu == 'bf16' else gg.TOL_UPDATE} per update"
          f"{'; cuda plans on the emulated GPU in ' + a.emulate_gpu if a.emulate_gpu else ''}")
    torch.manual_seed(seed)
    os.makedirs(a.workdir, exist_ok=True)
    configs = golden_common.chosen_configs("grpo_tools_golden", TOOLS_CONFIGS, a.config)
    if configs is None:
        return 1
    results = [run_config(c, a.dfg, a.source, a.workdir, seed) for c in configs]
    print(f"grpo_tools_golden: {sum(results)}/{len(results)} configurations agree (seed {seed})")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
