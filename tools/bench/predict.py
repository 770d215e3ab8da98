#!/usr/bin/env python3
"""predict.py - dfg's predicted stage times (`dfg inspect --device cpu`) against measured ones.

For each of bench.py's configs (tiny, small, gpt2-124m: the same settings) it compiles
examples/grpo/grpo.c, runs the plan `dfg run --steps N --threads T --metrics` (the first W steps a
warm-up, not timed), then predicts it with `dfg inspect PLAN --device cpu --runs timed.jsonl --json`
(each stage at the run's own mean runs a step, so only the time a run is predicted), on the same T
threads (OMP_NUM_THREADS: the CPU's rates are measured and cached per thread count). It writes a
table per config: each graph stage's predicted and measured ms a step, their ratio and the bound,
and the step (graph stages), to results/DATE-vm-predict[-CONFIGS].{json,md}.

It measures; it asserts nothing and alternates nothing. The machine's load average (uptime) at
the start and the end is in the results: a loaded machine slows the runs and the CPU's
measurement alike, and not by the same factor.

  tools/bench/predict.py --dfg build/dfg                      # tiny, small, gpt2-124m on 2 threads
  tools/bench/predict.py --dfg build/dfg --configs tiny,small --threads 1
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
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench import CONFIGS, cpu_model, dfg_identity, git_commit  # noqa: E402  (the same settings as bench.py)

# steps a process, warm-up included, and the warm-up: a few timed steps each (gpt2-124m's take minutes)
STEPS = {"tiny": (30, 10), "small": (4, 1), "gpt2-124m": (3, 1)}
ALL = ("tiny", "small", "gpt2-124m")


def uptime():
    r = subprocess.run(["uptime"], capture_output=True, text=True)
    return dict(uptime=r.stdout.strip(), loadavg=list(os.getloadavg()))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"predict: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def measure(name, a, work):
    s = CONFIGS[name]["settings"]
    steps, warmup = (a.steps or STEPS[name][0]), (STEPS[name][1] if a.warmup is None else a.warmup)
    plan, metrics, timed = (os.path.join(work, f"{name}{x}") for x in (".dfg", ".jsonl", "-timed.jsonl"))
    compile_cmd = [a.dfg, "compile", os.path.join(ROOT, "examples", "grpo", "grpo.c"), "-o", plan]
    for k, v in s.items():
        compile_cmd += ["--set", f"{k}={v}"]
    run(compile_cmd)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))  # the threads the CPU's rates are measured on
    load_before = uptime()
    run_cmd = [a.dfg, "run", plan, "--steps", str(steps), "--threads", str(a.threads), "--seed", str(a.seed),
               "--metrics", metrics, "--quiet"]
    run(run_cmd, env)
    rows = [json.loads(x) for x in open(metrics) if x.strip()]
    rows = [x for x in rows if x.get("step", 0) > warmup]
    if not rows:
        sys.exit(f"predict: {name}: no steps after the {warmup} warm-up ({steps} steps)")
    with open(timed, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in rows)
    inspect_cmd = [a.dfg, "inspect", plan, "--device", "cpu", "--runs", timed, "--json"]
    pred = json.loads(run(inspect_cmd, env))["prediction"]
    load_after = uptime()
    stages = []
    for st in pred["stages"]:
        if st["kind"] != "graph":
            continue
        got = [x["stage_ms"].get(st["name"], 0.0) for x in rows if x.get("stage_ms") is not None]
        meas = statistics.mean(got) if got else None
        p = st["predicted_ms"]
        stages.append(dict(stage=st["name"], runs=st["runs"], predicted_ms=p, measured_ms=meas, bound=st["bound"],
                           ratio=(meas / p) if meas and p else None))
    pred_step = sum(x["predicted_ms"] for x in stages)
    meas_step = sum(x["measured_ms"] or 0.0 for x in stages)
    return dict(config=name, settings=s, steps=steps, warmup=warmup, timed_steps=len(rows),
                device_label=pred["device_label"], kernel_s=pred["kernel_s"], stages=stages,
                step=dict(predicted_ms=pred_step, measured_ms=meas_step, ratio=meas_step / pred_step if pred_step else None),
                step_ms_mean=statistics.mean(x["ms"] for x in rows), load_before=load_before, load_after=load_after,
                commands=[compile_cmd, run_cmd, inspect_cmd])


def fmt(x, f="{:.4g}"):
    return "-" if x is None else f.format(x)


def markdown(res):
    out = [f"# Predicted against measured stage times on the CPU ({res['date']})", "",
           f"`tools/bench/predict.py`, dfg {res['git_commit']}, {res['machine']['cpu']} ({res['machine']['cores']} cores), "
           f"{res['threads']} thread{'s' if res['threads'] != 1 else ''}. Each config's plan run `dfg run --steps N "
           f"--threads {res['threads']} --metrics`, the warm-up's steps dropped, then `dfg inspect --device cpu --runs` on "
           "the timed steps' counts. Measured: the mean stage ms a step; the step: the graph stages' sum.", "",
           f"Load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in res['load_start']['loadavg'])}; "
           f"at the end: {', '.join(f'{x:.2f}' for x in res['load_end']['loadavg'])}."
           + (f" {res['note']}" if res.get("note") else ""), "",
           "| config | stage | runs a step | predicted ms | measured ms | measured / predicted | bound |",
           "|---|---|---|---|---|---|---|"]
    for c in res["configs"]:
        first = True
        for s in c["stages"]:
            if not s["runs"] and not s["measured_ms"]:  # a variant this run did not take (in the JSON)
                continue
            out.append(f"| {c['config'] if first else ''} | {s['stage']} | {fmt(s['runs'])} | {fmt(s['predicted_ms'])} | "
                       f"{fmt(s['measured_ms'])} | {fmt(s['ratio'], '{:.2f}')} | {s['bound']} |")
            first = False
        st = c["step"]
        out.append(f"| | **step** (graph stages) | | **{fmt(st['predicted_ms'])}** | **{fmt(st['measured_ms'])}** | "
                   f"**{fmt(st['ratio'], '{:.2f}')}** | |")
    out += ["", "The CPU as each config's `inspect` measured it (or read it from its cache):", ""]
    out += [f"- {c['config']} ({c['timed_steps']} timed steps after {c['warmup']}; load "
            f"{c['load_before']['loadavg'][0]:.2f} before its run, {c['load_after']['loadavg'][0]:.2f} after): "
            f"{c['device_label']}" for c in res["configs"]]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description="dfg inspect --device cpu's predicted stage times against a run's")
    ap.add_argument("--configs", default=",".join(ALL), help="comma list of: " + ", ".join(ALL))
    ap.add_argument("--threads", type=int, default=2, help="dfg run --threads, and OMP_NUM_THREADS for inspect")
    ap.add_argument("--steps", type=int, help="steps a run, warm-up included (default: tiny 30, small 4, gpt2-124m 3)")
    ap.add_argument("--warmup", type=int, help="first steps not timed (default: tiny 10, small 1, gpt2-124m 1)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dfg", default=os.path.join(ROOT, "build", "dfg"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--note", default="", help="free text stored with the results (e.g. what else ran)")
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in ALL:
            sys.exit(f"predict: unknown config '{c}' (valid: {', '.join(ALL)})")
    a.dfg = os.path.abspath(a.dfg)
    if not os.access(a.dfg, os.X_OK):
        sys.exit(f"predict: no dfg at {a.dfg} (build it: cmake --build build --target dfg_cli)")
    res = dict(date=datetime.date.today().isoformat(), git_commit=git_commit(), dfg=dfg_identity(a.dfg),
               machine=dict(cpu=cpu_model(), cores=os.cpu_count()), threads=a.threads, note=a.note,
               load_start=uptime(), configs=[])
    print(f"predict: start, {res['load_start']['uptime']}", flush=True)
    work = tempfile.mkdtemp(prefix="dfg-predict-")
    for c in configs:
        r = measure(c, a, work)
        res["configs"].append(r)
        print(f"predict: {c}: step {r['step']['predicted_ms']:.4g} ms predicted, {r['step']['measured_ms']:.4g} measured "
              f"({fmt(r['step']['ratio'], '{:.2f}')}x)", flush=True)
    res["load_end"] = uptime()
    print(f"predict: end, {res['load_end']['uptime']}", flush=True)
    base = f"{res['date']}-vm-predict" + ("" if configs == list(ALL) else "-" + "-".join(configs))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, base + ".json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, base + ".md"), "w") as f:
        f.write(markdown(res))
    print(f"predict: wrote {os.path.join(a.out, base)}.{{json,md}}")


if __name__ == "__main__":
    main()
