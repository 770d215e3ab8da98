#!/usr/bin/env python3
"""eval_tools_check.py - checks an evaluation of a tools plan against what the environment program
(eval_env.py) saw: every eval batch's rows reset with their eval row's index and fields (TRL's
reset(**row)), and the logged eval metrics equal TRL's recomputed from the program's log: per TRL
eval batch of E completions (the first GE of each prompt's group of G), tools/call_frequency (calls
a row), tools/failure_frequency (failed calls per call, 0 without calls), the lengths of the
policy's tokens, the clipped ratio, and the rewards (the reward program's "turns", the number of
assistant messages, and EvalEnv's bonus + 0.25 a call), averaged over the batches.
  usage: eval_tools_check.py METRICS.jsonl EVAL_ENV_LOG EVAL.jsonl P=.. G=.. GE=.. E=.. [NTH=0] [EOS=1]
NTH: which evaluation of METRICS (0: the first), and of the log's evaluation episodes."""
import json
import math
import sys

metrics_path, log_path, eval_path = sys.argv[1:4]
opt = dict(a.split("=", 1) for a in sys.argv[4:])
P, G, GE, E = (int(opt[k]) for k in ("P", "G", "GE", "E"))
NTH, EOS = int(opt.get("NTH", 0)), int(opt.get("EOS", 1))
rows = [json.loads(l) for l in open(eval_path)]
n_batches = (len(rows) + P - 1) // P

# the log's episodes (reset .. finish), the evaluation's those whose rows are eval rows
episodes, cur = [], None
for rec in (json.loads(l) for l in open(log_path)):
    if rec["type"] == "reset":
        cur = {"reset": rec, "turns": []}
    elif rec["type"] == "turn":
        cur["turns"].append(rec)
    else:
        cur["finish"] = rec
        episodes.append(cur)
evals = [e for e in episodes if all(r["fields"].get("split") == "eval" for r in e["reset"]["rows"])]
assert len(evals) >= (NTH + 1) * n_batches, "%d eval episodes in the log, want %d" % (len(evals), (NTH + 1) * n_batches)
evals = evals[NTH * n_batches:(NTH + 1) * n_batches]

per_row = []  # (calls, failures, policy tokens, truncated, turns reward, env reward) of each counted row
for b, ep in enumerate(evals):
    for r, got in enumerate(ep["reset"]["rows"]):
        want = min(b * P + r // G, len(rows) - 1)
        fields = {k: v for k, v in rows[want].items() if k != "prompt_ids"}
        assert got["index"] == want and got["fields"] == fields, ("batch %d row %d reset with" % (b, r), got, want)
    for p in range(P):
        if b * P + p >= len(rows):
            continue
        for j in range(GE):
            r = p * G + j
            ts = [t for t in ep["turns"] if t["row"] == r]
            assert ts, "row %d of eval batch %d: no turn reached the program" % (r, b)
            calls, fails = sum(t["calls"] for t in ts), sum(t["failures"] for t in ts)
            truncated = ts[-1]["n_ids"] == 0 or ts[-1]["last_id"] != EOS
            per_row.append((calls, fails, sum(t["n_ids"] for t in ts), truncated, len(ts), ep["finish"]["rewards"][r]))


def batch_metrics(rs):
    n, calls = len(rs), sum(x[0] for x in rs)
    env = [x[5] for x in rs]
    return {"eval_tools/call_frequency": calls / n,
            "eval_tools/failure_frequency": sum(x[1] for x in rs) / calls if calls else 0.0,
            "eval_completions/mean_length": sum(x[2] for x in rs) / n,
            "eval_completions/max_length": max(x[2] for x in rs),
            "eval_completions/clipped_ratio": sum(x[3] for x in rs) / n,
            "eval_rewards/turns/mean": sum(x[4] for x in rs) / n,
            "eval_rewards/EvalEnv/mean": sum(env) / n,
            "eval_reward": sum(x[4] + x[5] for x in rs) / n}


batches = [batch_metrics(per_row[i:i + E]) for i in range(0, len(per_row), E)]
want = {k: sum(bm[k] for bm in batches) / len(batches) for k in batches[0]}
got = [json.loads(l) for l in open(metrics_path) if '"eval_reward"' in l][NTH]
bad = [(k, got.get(k), v) for k, v in want.items() if got.get(k) is None or not math.isclose(got[k], v, rel_tol=1e-5, abs_tol=1e-5)]
if bad:
    print("differ (metric, logged, recomputed): %s" % bad)
    sys.exit(1)
print("%d eval rows in %d TRL batches: call frequency %.4f, failure frequency %.4f, mean length %.3f, reward %.4f" % (
    len(per_row), len(batches), want["eval_tools/call_frequency"], want["eval_tools/failure_frequency"],
    want["eval_completions/mean_length"], want["eval_reward"]))
