#!/usr/bin/python3
"""async_rollouts.py - one-step-off rollouts against synchronous ones (issue 40): the varlen shape
(bench.py's `varlen` config: the 2-layer GPT-2 on reverse with 60 digits, max_completion_length
256, 8 x 8 sequences, warm-started by SFT steps of dfg so most completions end near 61 tokens) with
a reward program that takes SECONDS to answer each step (sleep_reward.py: an LLM judge, a sandbox).

    /usr/bin/python3 tools/bench/async_rollouts.py [--dfg build/dfg] [--runs 3] [--steps 6] [--sleep 0.5]

Two plans alternate, RUNS processes each: sync (async_rollouts=0) and async (async_rollouts=1), both
from the warm start's weights, each run STEPS steps of which the first is not timed (the async
plan's first step rolls out twice). Per run: the median of its timed steps' ms (dfg's --metrics);
reported: the median over the runs, their range, and sync / async. Nothing is asserted: this
measures, it does not test. Results: --out (tools/bench/results) DATE-vm-async-rollouts.{json,md}.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the varlen config's settings)


def compile_plan(dfg, path, settings):
    cmd = [dfg, "compile", os.path.join(SRC, "examples/grpo/grpo.c"), "-o", path]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"async_rollouts: compiling failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")


def run(dfg, plan, args, metrics):
    cmd = [dfg, "run", plan, "--quiet", "--metrics", metrics] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"async_rollouts: run failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return [json.loads(line) for line in open(metrics) if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dfg", default=os.path.join(SRC, "build", "dfg"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sleep", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--weights", help="a warm start saved before (skips the SFT steps)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    cfg = bench.CONFIGS["varlen"]
    base = dict(cfg["settings"])
    d = tempfile.mkdtemp(prefix="dfg-async-")
    weights = a.weights or os.path.join(d, "weights.safetensors")
    if not a.weights:
        compile_plan(a.dfg, os.path.join(d, "sft.dfg"), dict(base, sft_steps=a.sft_steps,
                                                              learning_rate=cfg["varlen"]["sft_learning_rate"]))
        print(f"warm start: {a.sft_steps} SFT steps ...", flush=True)
        run(a.dfg, os.path.join(d, "sft.dfg"), ["--steps", str(a.sft_steps), "--threads", str(a.threads), "--seed",
                                                str(a.seed), "--save", weights], os.path.join(d, "sft.jsonl"))
    plans = {"sync": dict(base, reward="external"), "async": dict(base, reward="external", async_rollouts=1)}
    for name, s in plans.items():
        compile_plan(a.dfg, os.path.join(d, name + ".dfg"), s)
    reward = f"/usr/bin/python3 {os.path.join(HERE, 'sleep_reward.py')} {a.sleep}"
    per = {name: [] for name in plans}
    stages = {name: {} for name in plans}
    for i in range(a.runs):
        for name in plans:
            rows = run(a.dfg, os.path.join(d, name + ".dfg"),
                       ["--weights", weights, "--steps", str(a.steps), "--threads", str(a.threads), "--seed",
                        str(a.seed + i), "--reward-cmd", reward], os.path.join(d, f"{name}-{i}.jsonl"))
            timed = rows[1:]
            per[name].append(statistics.median(r["ms"] for r in timed))
            for r in timed:
                for k, v in r.get("stage_ms", {}).items():
                    stages[name].setdefault(k, []).append(v)
            print(f"run {i + 1} {name}: median step {per[name][-1]:.0f} ms, staleness "
                  f"{[r.get('staleness', 0) for r in rows]}", flush=True)
    med = {n: statistics.median(v) for n, v in per.items()}
    ratio = med["sync"] / med["async"]
    date = datetime.date.today().isoformat()
    res = dict(date=date, note=a.note, settings=base, sleep_s=a.sleep, runs=a.runs, steps=a.steps, threads=a.threads,
               sft_steps=a.sft_steps, step_ms=per, median_ms=med, sync_over_async=ratio,
               stage_ms_mean={n: {k: statistics.mean(v) for k, v in s.items()} for n, s in stages.items()})
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"{date}-vm-async-rollouts")
    with open(stem + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(f"# async_rollouts=1 vs synchronous, varlen shape, reward program sleeping {a.sleep} s, {date}, vm\n\n")
        if a.note:
            f.write(f"Note: {a.note}\n\n")
        f.write("| plan | step ms, median of runs [min-max] | per-run medians |\n|---|---|---|\n")
        for n in plans:
            f.write(f"| {n} | {med[n]:.0f} [{min(per[n]):.0f}-{max(per[n]):.0f}] | "
                    f"{', '.join(f'{x:.0f}' for x in per[n])} |\n")
        f.write(f"\nsync / async: {ratio:.2f}x. {a.runs} alternating runs per plan, {a.steps} steps each, the first "
                f"not timed; {a.threads} threads; warm start {a.sft_steps} SFT steps.\n\n")
        f.write("Mean ms per timed step by stage (stage_ms):\n\n| plan | " +
                " | ".join(sorted(set(stages["sync"]) | set(stages["async"]))) + " |\n")
        keys = sorted(set(stages["sync"]) | set(stages["async"]))
        f.write("|---" * (len(keys) + 1) + "|\n")
        for n in plans:
            f.write(f"| {n} | " + " | ".join(f"{res['stage_ms_mean'][n].get(k, 0):.0f}" for k in keys) + " |\n")
    print(f"sync {med['sync']:.0f} ms, async {med['async']:.0f} ms: {ratio:.2f}x; wrote {stem}.md")


if __name__ == "__main__":
    main()
