#!/usr/bin/python3
"""Golden test: GRPO's advantages from several reward functions against TRL's formulas, in float64.

For each configuration (multi_objective_aggregation sum_then_normalize with scale_rewards group,
batch and none, and normalize_then_sum, at max_completion_length 5, where a completion of 5 tokens
gets no value from any function: TRL's unscorable rows; and sum_then_normalize at 4, where every row
has one) this script compiles examples/grpo/grpo.c on a reverse-task dataset with two
reward functions weighted 0.7 and -0.4 (tests/cli/eval_reward.py: "digits", None at 5 tokens, and
"short", None past 3), trains two steps with that reward program (dfg run --reward-cmd --dump), and
recomputes the last step's advantages from the dumped reward_values with TRL's code
(GRPOTrainer._generate_and_score_completions: nansum of the weighted values, nanmean and nanstd per
group or over the batch, + 1e-4, unscorable rows NaN then 0) written out below in float64:
max|dfg - TRL| <= 1e-4 (times max(1, |TRL|)); also the logged frac_reward_zero_std (TRL's
is_std_zero: the group's std, or the batch's with scale batch or normalize_then_sum), reward and
reward_std (nanmean and nanstd of the weighted sums over the scorable rows). A configuration at 5
tokens whose step has no unscorable row would not exercise them: the test says so and fails.
Exit codes: 0 all agree, 1 a mismatch or an error, 77 numpy not importable (ctest: skipped)."""
import argparse
import json
import math
import os
import subprocess
import sys

import golden_common

try:
    import numpy as np
except ImportError:
    golden_common.unavailable("aggregation_golden", "numpy is not importable")

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "cli"))
import st_tool  # noqa: E402

WEIGHTS = [0.7, -0.4]
CONFIGS = [
    dict(name="sum_group", agg="sum_then_normalize", scale="group", max_new=5),
    dict(name="sum_batch", agg="sum_then_normalize", scale="batch", max_new=5),
    dict(name="sum_none", agg="sum_then_normalize", scale="none", max_new=5),
    dict(name="sum_group_scorable", agg="sum_then_normalize", scale="group", max_new=4),
    dict(name="normalize_then_sum", agg="normalize_then_sum", scale="group", max_new=5),
]


def nanmean(x, axis=None, keepdims=False):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(x, axis=axis, keepdims=keepdims) / np.sum(~np.isnan(x), axis=axis, keepdims=keepdims)


def nanstd(x, axis=None, keepdims=False):  # trl.trainer.utils.nanstd
    m = nanmean(x, axis=axis, keepdims=True)
    var = nanmean((x - m) ** 2, axis=axis, keepdims=True)
    count = np.sum(~np.isnan(x), axis=axis, keepdims=True).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.where(count > 1, count / (count - 1), np.nan)
    out = np.sqrt(var * corr)
    return out if keepdims else (out.reshape(()) if axis is None else np.squeeze(out, axis=axis))


def trl_advantages(values, G, agg, scale):
    """values (N, F) float64, NaN for None -> advantages (N), is_std_zero (N)"""
    w = np.array(WEIGHTS)
    unscorable = np.isnan(values).all(axis=1)
    if agg == "sum_then_normalize":
        rewards = np.nansum(values * w[None, :], axis=1)
        rewards[unscorable] = np.nan
        mean = np.repeat(nanmean(rewards.reshape(-1, G), axis=1), G)
        if scale in ("group", "none"):
            std = np.repeat(nanstd(rewards.reshape(-1, G), axis=1), G)
        else:
            std = np.broadcast_to(nanstd(rewards), rewards.shape)
        adv = rewards - mean
        if scale != "none":
            adv = adv / (std + 1e-4)
    else:
        grouped = values.reshape(-1, G, values.shape[1])
        mean_k = nanmean(grouped, axis=1, keepdims=True)
        std_k = nanstd(grouped, axis=1, keepdims=True)
        reward_k = ((grouped - mean_k) / (std_k + 1e-4)).reshape(-1, values.shape[1])
        rewards = np.nansum(reward_k * w[None, :], axis=1)
        rewards[unscorable] = np.nan
        std = np.broadcast_to(nanstd(rewards), rewards.shape)
        adv = (rewards - nanmean(rewards)) / (std + 1e-4)
    zero = np.isclose(std, 0.0, rtol=1e-5, atol=1e-8)
    raw = np.nansum(values * w[None, :], axis=1)  # the logged reward stats: TRL's, unscorable rows NaN
    raw[unscorable] = np.nan
    return np.nan_to_num(adv, nan=0.0), zero, unscorable, (float(nanmean(raw)), float(nanstd(raw)))


def sh(cmd, what, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError("%s failed (exit %d): %s" % (what, r.returncode, (r.stderr or r.stdout).strip()[-800:]))
    return r.stdout


def run_config(cfg, dfg, workdir, seed):
    G = 4
    sets = dict(dataset="reverse.jsonl", reward_funcs="digits,short", reward_weights="0.7,-0.4", prompts_per_step=6,
                num_generations=G, max_completion_length=cfg["max_new"], scale_rewards=cfg["scale"],
                multi_objective_aggregation=cfg["agg"])
    plan = os.path.join(workdir, cfg["name"] + ".dfg")
    cmd = [dfg, "compile", os.path.join(SRC, "examples", "grpo", "grpo.c"), "-o", plan]
    for k, v in sets.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    sh(cmd, "dfg compile")
    dump, metrics = os.path.join(workdir, cfg["name"] + ".safetensors"), os.path.join(workdir, cfg["name"] + ".jsonl")
    sh([dfg, "run", plan, "--steps", "2", "--threads", "1", "--seed", str(seed), "--quiet", "--dump", dump,
        "--metrics", metrics, "--reward-cmd", "python3 " + os.path.join(SRC, "tests", "cli", "eval_reward.py")], "dfg run")
    t, _ = st_tool.read(dump)
    vals = np.array(st_tool.values(t["reward_values"]), dtype=np.float64).reshape(-1, 2)
    adv = np.array(st_tool.values(t["advantages"]), dtype=np.float64)
    want, zero, unscorable, (r_mean, r_std) = trl_advantages(vals, G, cfg["agg"], cfg["scale"])
    err = float(np.max(np.abs(adv - want) / np.maximum(1.0, np.abs(want))))
    ok = err <= 1e-4
    line = "%-20s advantages max rel err %.2e over %d rows (%d unscorable)" % (cfg["name"], err, len(adv), unscorable.sum())
    last = [json.loads(l) for l in open(metrics)][-1]
    frac = float(zero.mean())
    ok = ok and abs(last["frac_reward_zero_std"] - frac) <= 1e-6
    line += ", frac_reward_zero_std %g (TRL %g)" % (last["frac_reward_zero_std"], frac)
    for name, want_v in (("reward", r_mean), ("reward_std", r_std)):
        e = abs(last[name] - want_v) / max(1.0, abs(want_v))
        ok = ok and e <= 1e-5
        line += ", %s %.6g (TRL %.6g)" % (name, last[name], want_v)
    if cfg["max_new"] == 5:
        if not unscorable.any():
            ok = False
            line += ": no unscorable row, the case is not exercised"
    print(line + ("" if ok else "  FAIL"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dfg", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.dfg = os.path.abspath(a.dfg)
    seed = golden_common.run_seed("aggregation_golden")
    if seed is None:
        return 1
    os.makedirs(a.workdir, exist_ok=True)
    os.chdir(a.workdir)
    print("aggregation_golden: seed %d (DFG_TEST_SEED=%d replays it)" % (seed, seed))
    sh([sys.executable, os.path.join(SRC, "examples", "tasks", "digits", "make_dataset.py"), "--task", "reverse",
        "--digits", "3", "--rows", "40", "--seed", str(seed % 1000), "-o", "reverse.jsonl"], "make_dataset")
    ok = True
    for cfg in CONFIGS:
        try:
            ok = run_config(cfg, a.dfg, a.workdir, seed % 100000) and ok
        except RuntimeError as e:
            print("%s: FAIL: %s" % (cfg["name"], e))
            ok = False
    print("aggregation_golden: %s" % ("all agree" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
