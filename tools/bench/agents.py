#!/usr/bin/python3
"""agents.py - multi-turn GRPO with a tool (issue 39): three measurements on this machine.

    /usr/bin/python3 tools/bench/agents.py --dfg build/dfg [--parts sleep,memory,torch] [--runs 3]
        [--steps 4] [--threads 2] [--work DIR] [--src TREE] [--out tools/bench/results/DATE-vm-agents]

The world is tools/bench/agents_setup.py's (made in --work when missing): a Qwen2-shaped model
(2 layers x 128, vocabulary 649, Qwen2.5's chat template), 64 rows a step (8 prompts x 8
generations) of 276 to 346 prompt tokens, max_completion_length 256, max_tool_calling_iterations
4, one tool (agents_env.py's Lookup.lookup) served by tools/env_server.py --env-class Lookup, its
get_reward the only reward. Every dfg plan is the same one (`p4`, compiled once per run of this
script); the policies differ by weights only.

  sleep   the tool sleeps 0.2 s (DFG_BENCH_TOOL_SLEEP=0.2) against 0, with the policy that calls
          at every turn (call4: 4 rounds of 64 calls a step, then a last turn): runs alternate
          (0, 0.2, 0, 0.2, ...), each --steps timed steps after one warm-up step; the extra time
          per step over the 4 rounds is the cost of the sleep per turn. Also the tools stage's
          own time (stage_ms).
  memory  the plan's arena (`dfg inspect --json`) against each run's peak RSS (the dfg process's
          VmHWM, read from /proc every 50 ms while it runs: the environment program is a
          process of its own and is not counted) with the policies that call 0 times (call0),
          0 to 4 times (mixed) and 4 times (call4).
  torch   dfg against agents_torch.py (TRL's tool loop with transformers' generate: each turn
          generates again from the whole context) with the mixed policy, runs alternating
          (dfg, torch, dfg, ...), each --steps timed steps after one warm-up step: step time
          medians, the ratio of each pair, completion tokens, calls, peak RSS.

Writes OUT.json (every run's steps) and OUT.md (the tables).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
SLEEP = 0.2


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"agents: {' '.join(cmd[:3])} ... failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def env_cmd(work):
    out = sh([PY, os.path.join(ROOT, "tools", "env_server.py"), "--tokenizer", os.path.join(work, "model"),
              "--module", os.path.join(HERE, "agents_env.py"), "--env-class", "Lookup", "--list"])
    line = [x for x in out.splitlines() if x.startswith("--env-cmd ")][0]
    return line[len("--env-cmd '"):-1]


def compile_plan(a):
    plan = os.path.join(a.work, "p4.dfg")
    sh([a.dfg, "compile", os.path.join(a.src, "examples", "grpo", "grpo.c"), "-o", plan,
        "--set", "model=" + os.path.join(a.work, "model"), "--set", "dataset=" + os.path.join(a.work, "prompts.jsonl"),
        "--set", "tools=lookup", "--set", "reward=external", "--set", "reward_funcs=Lookup",
        "--set", "prompts_per_step=8", "--set", "num_generations=8", "--set", "max_completion_length=256",
        "--set", "max_tool_calling_iterations=4"])
    d = json.loads(sh([a.dfg, "inspect", plan, "--json"]))
    return plan, d["arena_bytes"]


def watch_hwm(p, box):
    """The process's VmHWM (bytes), the last value read before it exits."""
    path = f"/proc/{p.pid}/status"
    while p.poll() is None:
        try:
            for line in open(path):
                if line.startswith("VmHWM:"):
                    box[0] = int(line.split()[1]) * 1024
        except OSError:
            break
        time.sleep(0.05)


def run_dfg(a, plan, weights, sleep=0.0):
    """One `dfg run` of 1 + a.steps steps: its timed steps' metrics and its peak RSS."""
    metrics = os.path.join(a.work, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ, DFG_BENCH_TOOL_SLEEP=str(sleep))
    cmd = [a.dfg, "run", plan, "--steps", str(a.steps + 1), "--threads", str(a.threads), "--seed", "1", "--quiet",
           "--weights", os.path.join(a.work, weights + ".safetensors"), "--env-cmd", env_cmd(a.work),
           "--metrics", metrics]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    box = [0]
    w = threading.Thread(target=watch_hwm, args=(p, box))
    w.start()
    out, err = p.communicate()
    w.join()
    if p.returncode != 0:
        sys.exit(f"agents: dfg run failed ({p.returncode}):\n{err[-3000:]}")
    rows = [json.loads(x) for x in open(metrics) if x.startswith("{")]
    steps = [dict(ms=x["ms"], tools_ms=(x.get("stage_ms") or {}).get("tools"),
                  calls=round(x.get("tools/call_frequency", 0) * 64), len_mean=x.get("completions/mean_length"),
                  reward=x.get("reward")) for x in rows[1:]]
    return dict(program="dfg", weights=weights, sleep=sleep, steps=steps, peak_rss_bytes=box[0],
                wall_s=round(time.perf_counter() - t0, 2), median_ms=statistics.median(s["ms"] for s in steps))


def run_torch(a, weights):
    cmd = [PY, os.path.join(HERE, "agents_torch.py"), a.work, "--weights", weights, "--steps", str(a.steps + 1),
           "--warmup", "1", "--threads", str(a.threads)]
    lines = [json.loads(x) for x in sh(cmd).splitlines() if x.startswith("{")]
    steps = [x for x in lines if "step" in x]
    s = lines[-1]
    return dict(program="torch", weights=weights, steps=steps, peak_rss_bytes=s["peak_rss_bytes"],
                median_ms=statistics.median(x["ms"] for x in steps), versions=s["summary"])


def part_sleep(a, plan):
    runs = []
    for r in range(a.runs):
        for sleep in (0.0, SLEEP):
            runs.append(run_dfg(a, plan, "call4", sleep))
            print(f"agents: sleep {sleep}: {runs[-1]['median_ms']:.0f} ms/step", file=sys.stderr)
    med = {s: statistics.median(x["median_ms"] for x in runs if x["sleep"] == s) for s in (0.0, SLEEP)}
    tools = {s: statistics.median(st["tools_ms"] for x in runs if x["sleep"] == s for st in x["steps"]
                                  if st["tools_ms"] is not None) for s in (0.0, SLEEP)}
    pairs = [(runs[2 * i + 1]["median_ms"] - runs[2 * i]["median_ms"]) / 4 for i in range(a.runs)]
    calls = statistics.median(st["calls"] for x in runs for st in x["steps"])
    return dict(runs=runs, median_ms=med, tools_stage_ms=tools, extra_per_turn_ms=(med[SLEEP] - med[0.0]) / 4,
                extra_per_turn_pairs_ms=pairs, calls_per_step=calls)


def part_memory(a, plan, arena):
    runs = [run_dfg(a, plan, w) for w in ("call0", "mixed", "call4")]
    return dict(arena_bytes=arena, runs=runs)


def part_torch(a, plan):
    runs = []
    for r in range(a.runs):
        runs.append(run_dfg(a, plan, "mixed"))
        runs.append(run_torch(a, "mixed"))
        print(f"agents: dfg {runs[-2]['median_ms']:.0f} ms, torch {runs[-1]['median_ms']:.0f} ms", file=sys.stderr)
    med = {p: statistics.median(x["median_ms"] for x in runs if x["program"] == p) for p in ("dfg", "torch")}
    pairs = [runs[2 * i + 1]["median_ms"] / runs[2 * i]["median_ms"] for i in range(a.runs)]
    return dict(runs=runs, median_ms=med, ratio=med["torch"] / med["dfg"], ratio_pairs=pairs)


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def report(res, a):
    md = [f"# agents.py, {res['date']}, dfg at {res['commit']}", "",
          f"`{' '.join(res['argv'])}`; load average before: {res['load_before']}", ""]
    if "sleep" in res:
        s = res["sleep"]
        md += ["## A tool that sleeps 0.2 s (64 rows, 4 rounds of calls a step)", "",
               "| tool | step (median of runs) | tools stage per step (median) | calls a step |", "|---|---|---|---|",
               f"| no sleep | {s['median_ms'][0.0]:.0f} ms | {s['tools_stage_ms'][0.0]:.0f} ms | {s['calls_per_step']} |",
               f"| sleeps 0.2 s | {s['median_ms'][SLEEP]:.0f} ms | {s['tools_stage_ms'][SLEEP]:.0f} ms | "
               f"{s['calls_per_step']} |", "",
               f"Extra per turn: {s['extra_per_turn_ms']:.0f} ms (pairs: "
               f"{', '.join(f'{x:.0f}' for x in s['extra_per_turn_pairs_ms'])} ms); 64 x 0.2 s would be 12800 ms.", ""]
    if "memory" in res:
        m = res["memory"]
        md += ["## The 4-round plan's arena against the run's peak RSS", "",
               f"Arena: {mib(m['arena_bytes'])}.", "",
               "| policy | calls a row (mean) | completion length (mean) | step (median) | peak RSS | RSS - arena |",
               "|---|---|---|---|---|---|"]
        for r in m["runs"]:
            calls = statistics.mean(st["calls"] for st in r["steps"]) / 64
            ln = statistics.mean(st["len_mean"] for st in r["steps"])
            md.append(f"| {r['weights']} | {calls:.2f} | {ln:.1f} | {r['median_ms']:.0f} ms | "
                      f"{mib(r['peak_rss_bytes'])} | {mib(r['peak_rss_bytes'] - m['arena_bytes'])} |")
        md.append("")
    if "torch" in res:
        t = res["torch"]
        md += ["## dfg against TRL's tool loop in PyTorch (mixed policy)", "",
               "| program | step (median of runs) | generated tokens a step (mean) | calls a step (mean) | peak RSS |",
               "|---|---|---|---|---|"]
        for p in ("dfg", "torch"):
            rs = [r for r in t["runs"] if r["program"] == p]
            if p == "dfg":
                toks = statistics.mean(st["len_mean"] * 64 for r in rs for st in r["steps"])
            else:
                toks = statistics.mean(st["gen_tokens"] for r in rs for st in r["steps"])  # the policy's, as dfg's
            calls = statistics.mean(st["calls"] for r in rs for st in r["steps"])
            md.append(f"| {p} | {t['median_ms'][p]:.0f} ms | {toks:.0f} | {calls:.1f} | "
                      f"{mib(statistics.median(r['peak_rss_bytes'] for r in rs))} |")
        md += ["", f"torch / dfg: {t['ratio']:.2f} (pairs {', '.join(f'{x:.2f}' for x in t['ratio_pairs'])})", ""]
    return "\n".join(md)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agents", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dfg", required=True)
    ap.add_argument("--parts", default="sleep,memory,torch")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/dfg-bench-agents")
    ap.add_argument("--src", default=ROOT, help="the source tree dfg was built from (its examples/grpo/grpo.c)")
    ap.add_argument("--commit", default=None, help="the dfg commit to name (default: git rev-parse of this tree)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    a.dfg = os.path.abspath(a.dfg)
    if not os.path.exists(os.path.join(a.work, "prompts.jsonl")):
        sh([PY, os.path.join(HERE, "agents_setup.py"), a.work, "--hidden", "128", "--layers", "2",
            "--intermediate", "384"])
    date = datetime.date.today().isoformat()
    commit = a.commit or sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
    res = dict(date=date, commit=commit, argv=sys.argv, load_before=os.getloadavg())
    plan, arena = compile_plan(a)
    parts = a.parts.split(",")
    if "sleep" in parts:
        res["sleep"] = part_sleep(a, plan)
    if "memory" in parts:
        res["memory"] = part_memory(a, plan, arena)
    if "torch" in parts:
        res["torch"] = part_torch(a, plan)
    res["load_after"] = os.getloadavg()
    out = a.out or os.path.join(HERE, "results", f"{date}-vm-agents")
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    text = report(res, a)
    with open(out + ".md", "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
