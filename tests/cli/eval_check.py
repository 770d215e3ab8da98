#!/usr/bin/env python3
"""eval_check.py - recomputes `dfg run --eval-only`'s metrics from the completions its reward program saw.

    eval_check.py METRICS.jsonl LOG.jsonl EVAL.jsonl KEY=VALUE...

LOG is eval_reward.py's log of one --eval-only run (each request one batch of the plan's
prompts_per_step x num_generations rows); EVAL the eval_dataset; the settings P, G, GE
(num_generations_eval), E (per_device_eval_batch_size), AGG (multi_objective_aggregation), SCALE
(scale_rewards). The metrics are TRL's (GRPOTrainer._generate_and_score_completions in eval mode,
then log()'s mean over the eval batches), written out here in float64 over the eval rows in the
file's order, the first GE completions of each prompt; the eval line of METRICS must agree within
1e-5. Also checks that each batch's rows hold the eval prompts in order. Exit 0 when all agree."""
import json
import math
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from eval_reward import score  # noqa: E402

NAN = float("nan")
EOS = 1


def nanmean(xs):
    v = [x for x in xs if not math.isnan(x)]
    return sum(v) / len(v) if v else NAN


def nanstd(xs):  # trl.trainer.utils.nanstd
    v = [x for x in xs if not math.isnan(x)]
    if len(v) < 2:
        return NAN
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def isclose0(x):
    return not math.isnan(x) and abs(x) <= 1e-8


def batch_metrics(rows, s):
    """rows: [(values [F], length, truncated)] of one eval batch, in groups of GE"""
    ge, w = s["GE"], [1.0, 1.0]
    vals = [[NAN if v is None else v for v in r[0]] for r in rows]
    rewards = [NAN if all(math.isnan(v) for v in vs) else sum(wf * v for wf, v in zip(w, vs) if not math.isnan(v))
               for vs in vals]
    n = len(rows)
    if s["AGG"] == "normalize_then_sum":
        normed = []
        for q in range(0, n, ge):
            grp = vals[q:q + ge]
            z = [[NAN] * len(w) for _ in grp]
            for f in range(len(w)):
                col = [g[f] for g in grp]
                m, sd = nanmean(col), nanstd(col) if ge > 1 else NAN
                for j, x in enumerate(col):
                    z[j][f] = (x - m) / (sd + 1e-4)
            normed += [sum(wf * x for wf, x in zip(w, zz) if not math.isnan(x)) for zz in z]
        normed = [NAN if math.isnan(r) else x for r, x in zip(rewards, normed)]
        sd = nanstd(normed) if n > 1 else 0.0
        zero = [isclose0(sd)] * n
    elif s["SCALE"] == "batch":
        zero = [isclose0(nanstd(rewards) if n > 1 else 0.0)] * n
    else:
        zero = []
        for q in range(0, n, ge):
            zero += [isclose0(nanstd(rewards[q:q + ge]) if ge > 1 else 0.0)] * ge
    lens = [r[1] for r in rows]
    term = [r[1] for r in rows if not r[2]] or [0]
    out = {"reward": nanmean(rewards), "reward_std": nanstd(rewards), "frac_reward_zero_std": sum(zero) / n,
           "completions/mean_length": sum(lens) / n, "completions/min_length": min(lens),
           "completions/max_length": max(lens), "completions/clipped_ratio": sum(r[2] for r in rows) / n,
           "completions/mean_terminated_length": sum(term) / len(term),
           "completions/min_terminated_length": min(term), "completions/max_terminated_length": max(term)}
    for f, name in enumerate(["digits", "short"]):
        col = [v[f] for v in vals]
        out["rewards/%s/mean" % name], out["rewards/%s/std" % name] = nanmean(col), nanstd(col)
    return out


def main():
    metrics, log, evalf = sys.argv[1:4]
    s = dict(a.split("=", 1) for a in sys.argv[4:])
    for k in ("P", "G", "GE", "E"):
        s[k] = int(s[k])
    prompts = [json.loads(l)["prompt_ids"] for l in open(evalf) if l.strip()]
    seen = [json.loads(l) for l in open(log)]
    per = s["P"] * s["G"]
    rows, bad = [], []
    for q, prompt in enumerate(prompts):
        b, p = divmod(q, s["P"])
        for j in range(s["GE"]):
            r = seen[b * per + p * s["G"] + j]
            if r["request"] != b or r["prompt_ids"] != prompt:
                bad.append("eval row %d: request %d prompt %s, expected request %d prompt %s" %
                           (q, r["request"], r["prompt_ids"], b, prompt))
            c = r["completion_ids"]
            rows.append((score(c), len(c), not (c and c[-1] == EOS)))
    bp = s["E"] // s["GE"]
    sums, counts = {}, {}
    for q in range(0, len(prompts), bp):
        for k, v in batch_metrics(rows[q * s["GE"]:(q + bp) * s["GE"]], s).items():
            if not math.isnan(v):
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
    got = [json.loads(l) for l in open(metrics) if "eval_reward" in l]
    if len(got) != 1:
        bad.append("expected one eval line in %s, got %d" % (metrics, len(got)))
    keys = set(sums) | {k[5:] for k in got[0] if k.startswith("eval_")} - {"runtime", "samples"} if got else set()
    for k in sorted(keys):
        want = sums[k] / counts[k] if k in counts else None
        have = got[0].get("eval_" + k, "missing")
        if want is None or have is None or have == "missing":
            if want is not have:
                bad.append("%s: dfg %r, expected %r" % (k, have, want))
        elif abs(have - want) > 1e-5 * max(1.0, abs(want)):
            bad.append("%s: dfg %r, expected %r" % (k, have, want))
    if got and got[0].get("eval_samples") != len(prompts) * s["GE"]:
        bad.append("eval_samples %r, expected %d" % (got[0].get("eval_samples"), len(prompts) * s["GE"]))
    for b in bad[:20]:
        print(b)
    print("%d metrics over %d eval rows in %d batches: %s" % (len(keys), len(rows), -(-len(prompts) // bp),
                                                              "agree" if not bad else "%d mismatches" % len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
