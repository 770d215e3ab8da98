#!/usr/bin/python3
"""lengths.py - the warm-started main job's GRPO step at max_completion_length 256 against the
same at 16 (issue 31's goal: 256 / 16 <= 2.0x), dfg only.

Three plans of examples/grpo/grpo.c, each the main job (its defaults: the `reverse` task with 3
digits, a 4-token prompt and 4-token answers with EOS, 2 layers, 64 wide, 8 prompts x 8
generations) with `--set sft_steps=K` (K supervised steps on the task's right answers before
GRPO) and the same n_positions (so the three start from the same initial weights):

  16          max_completion_length=16, dfg's defaults (decode early exit, length buckets)
  256         max_completion_length=256, the same defaults
  256-fixed   max_completion_length=256, decode_early_exit=false length_buckets=1: the
              fixed-shape plan, the "before" figure

Each plan runs in R fresh processes of N steps (`dfg run --steps N --metrics F`), alternating
(16, 256, 256-fixed, 16, ...); the first K steps of each are the warm-up's SFT and are not
counted. Over the GRPO steps (step > K) it reports per plan: the median and mean step ms (per
run, then the median over runs; the ratios 256 / 16 of both), the mean ms per step of each
stage (stage_ms of --metrics, grouped: prefill, decode, train.* ...), the decode runs per step
(stage_runs: tokens generated before every row ended) and which width buckets trained, the
completion lengths (completions/mean_length and max_length) and how many GRPO steps had a
completion longer than 16 tokens (completions/max_length > 16): a step whose longest
completion is longer than the 16-token plan could write costs the 256 plan more, and at 16 that
completion would have been clipped.

The machine check is bench.py's: before each process the harness waits (--quiet-wait) for the
CPUs to be idle, measures the other processes' share of the CPUs while it ran, and runs it again
(at most --retries times) when that share was over --max-background.

Results: OUT/<date>-<host>-lengths.json (every step's ms, lengths, stage_ms, stage_runs) and .md.
No timing is asserted anywhere: this measures, it does not test.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile

import bench
import varlen

PLANS = (("16", dict(max_completion_length=16)),
         ("256", dict(max_completion_length=256)),
         ("256-fixed", dict(max_completion_length=256, decode_early_exit="false", length_buckets=1)))
GROUPS = ("prefill", "decode", "ref", "old", "train", "update", "host")


def compile_plan(a, path, settings):
    cmd = [a.dfg, "compile", os.path.join(bench.ROOT, "examples", "grpo", "grpo.c"), "-o", path]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    r = bench.sh(cmd, cwd=bench.ROOT)
    if r.returncode:
        sys.exit(f"lengths: dfg compile failed:\n{r.stdout}{r.stderr}")
    return r.stdout.strip().splitlines()


def one_run(a, name, plan, work, i):
    metrics = os.path.join(work, f"{name}-{i}.jsonl")
    cmd = [a.dfg, "run", plan, "--steps", str(a.steps), "--threads", str(a.threads), "--seed", str(a.seed), "--quiet",
           "--metrics", metrics]
    m = bench.run_measured(cmd, dict(os.environ), os.path.join(work, f"{name}-{i}.out"),
                           os.path.join(work, f"{name}-{i}.err"), a.quiet_wait)
    if m["rc"]:
        sys.exit(f"lengths: {' '.join(cmd)} failed (exit {m['rc']}):\n{bench.tail(os.path.join(work, f'{name}-{i}.err'))}")
    rows = bench.parse_jsonl(metrics)
    sft = [x for x in rows if x["step"] <= a.sft_steps]
    grpo = [x for x in rows if x["step"] > a.sft_steps]
    m.update(cmd=cmd, arena_bytes=rows[-1].get("arena_bytes"),
             sft_loss_last=sft[-1].get("sft_loss") if sft else None,
             steps=[dict(step=x["step"], ms=x["ms"], len_mean=x["completions/mean_length"],
                         len_max=x["completions/max_length"], clipped=x["completions/clipped_ratio"],
                         reward=x["reward"], stage_ms=x["stage_ms"], stage_runs=x["stage_runs"]) for x in grpo])
    ms = [x["ms"] for x in grpo]
    m.update(median_ms=statistics.median(ms), mean_ms=statistics.mean(ms))
    return m


def summarize(runs, cut):
    steps = [x for m in runs for x in m["steps"]]
    groups, stage_runs = varlen.stage_sums(steps)
    n = len(steps)
    return dict(median_ms=bench.stats([m["median_ms"] for m in runs]), mean_ms=bench.stats([m["mean_ms"] for m in runs]),
                pooled_median_ms=statistics.median(x["ms"] for x in steps), pooled_mean_ms=statistics.mean(x["ms"] for x in steps),
                stage_ms_mean={g: groups.get(g, 0.0) / n for g in GROUPS},
                stage_runs_mean={k: v / n for k, v in sorted(stage_runs.items())},
                grpo_steps=n, steps_longer_than_cut=sum(1 for x in steps if x["len_max"] > cut),
                len_mean=statistics.mean(x["len_mean"] for x in steps), len_max=max(x["len_max"] for x in steps),
                reward_mean=statistics.mean(x["reward"] for x in steps),
                background_cpu_pct=bench.stats([m["background_cpu_pct"] for m in runs]),
                peak_rss_mb=bench.stats([m["peak_rss_bytes"] / 2**20 for m in runs]),
                arena_mb=runs[0]["arena_bytes"] / 2**20 if runs[0].get("arena_bytes") else None,
                sft_loss_last=[m["sft_loss_last"] for m in runs])


def report(res):
    s = res["plans"]
    f3 = lambda x: f"{x['median']:.1f} [{x['min']:.1f}-{x['max']:.1f}]"  # noqa: E731
    lines = ["| plan | GRPO step ms, median [min-max of runs] | mean [min-max of runs] | completion length mean / max | "
             "steps with a completion > 16 | decode runs per step (batch + tail) | reward | arena MiB | peak RSS MiB | background CPU % |",
             "|" + "---|" * 10]
    for name, x in s.items():
        lines.append(f"| {name} | {f3(x['median_ms'])} | {f3(x['mean_ms'])} | {x['len_mean']:.2f} / {x['len_max']:.0f} | "
                     f"{x['steps_longer_than_cut']} of {x['grpo_steps']} | {x['stage_runs_mean'].get('decode', 0):.1f} + "
                     f"{x['stage_runs_mean'].get('decode.tail', 0):.1f} | "
                     f"{x['reward_mean']:.3f} | {x['arena_mb']:.1f} | {x['peak_rss_mb']['median']:.1f} | "
                     f"{x['background_cpu_pct']['max']:.0f} |")
    r = res["ratios"]
    lines += ["", f"256 / 16: median {r['median_256_over_16']:.2f}, mean {r['mean_256_over_16']:.2f}; "
              f"256-fixed / 16: median {r['median_256fixed_over_16']:.2f}, mean {r['mean_256fixed_over_16']:.2f} "
              "(medians over runs of each run's median / mean).", "",
              "Mean ms per GRPO step by stage (stage_ms; host = data, reward, advantages):", "",
              "| plan | " + " | ".join(GROUPS) + " | step | scoring/training runs per step by width |",
              "|" + "---|" * (len(GROUPS) + 3)]
    for name, x in s.items():
        g = x["stage_ms_mean"]
        widths = ", ".join(f"{k} {v:.2f}" for k, v in x["stage_runs_mean"].items() if k.startswith("train"))
        lines.append(f"| {name} | " + " | ".join(f"{g[k]:.2f}" for k in GROUPS) + f" | {x['pooled_mean_ms']:.2f} | {widths} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description="the warm-started main job's GRPO step at max_completion_length 256 vs 16")
    ap.add_argument("--sft-steps", type=int, default=200)
    ap.add_argument("--steps", type=int, default=230, help="steps per process, the SFT steps included")
    ap.add_argument("--runs", type=int, default=3, help="alternating processes per plan")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--n-positions", type=int, default=260, help="the same for every plan (prompt 4 + 256)")
    ap.add_argument("--dfg", default=os.path.join(bench.ROOT, "build", "dfg"))
    ap.add_argument("--out", default=os.path.join(bench.HERE, "results"))
    ap.add_argument("--quiet-wait", type=float, default=60.0)
    ap.add_argument("--max-background", type=float, default=10.0)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    a.dfg = os.path.abspath(a.dfg)
    if a.steps <= a.sft_steps:
        sys.exit(f"lengths: --steps {a.steps} leaves no GRPO step after {a.sft_steps} SFT steps")
    work = tempfile.mkdtemp(prefix="dfg-lengths-")
    plans, compile_logs = {}, {}
    for name, extra in PLANS:
        plans[name] = os.path.join(work, f"{name}.dfg")
        compile_logs[name] = compile_plan(a, plans[name], dict(sft_steps=a.sft_steps, n_positions=a.n_positions, **extra))
    ident = bench.dfg_identity(a.dfg)
    print(f"dfg {bench.git_commit()}, {a.threads} threads, {a.runs} runs of {a.steps} steps ({a.sft_steps} SFT) per plan",
          flush=True)
    per, discarded = {name: [] for name in plans}, []
    for i in range(a.runs):
        for name, plan in plans.items():
            def measure():
                m = one_run(a, name, plan, work, i)
                return m, (f"GRPO median {m['median_ms']:.2f} ms, mean {m['mean_ms']:.2f} ms, background "
                           f"{m['background_cpu_pct']}% CPU")

            per[name].append(bench.measured_quietly(a, f"run {i + 1}/{a.runs} {name}", measure, discarded,
                                                    dict(plan=name, run=i)))
    res = dict(date=datetime.date.today().isoformat(), host=socket.gethostname(), cpu=bench.cpu_model(),
               cores=os.cpu_count(), git_commit=bench.git_commit(), dfg_binary=ident, note=a.note, threads=a.threads,
               seed=a.seed, sft_steps=a.sft_steps, steps=a.steps, runs=a.runs, n_positions=a.n_positions,
               plan_settings={n: dict(e) for n, e in PLANS}, dfg_compile=compile_logs,
               plans={name: summarize(ms, 16) for name, ms in per.items()}, raw={name: ms for name, ms in per.items()},
               discarded_runs=discarded)
    p = res["plans"]
    res["ratios"] = dict(median_256_over_16=p["256"]["median_ms"]["median"] / p["16"]["median_ms"]["median"],
                         mean_256_over_16=p["256"]["mean_ms"]["median"] / p["16"]["mean_ms"]["median"],
                         median_256fixed_over_16=p["256-fixed"]["median_ms"]["median"] / p["16"]["median_ms"]["median"],
                         mean_256fixed_over_16=p["256-fixed"]["mean_ms"]["median"] / p["16"]["mean_ms"]["median"])
    if bench.dfg_identity(a.dfg) != ident:
        res["dfg_binary_after"] = bench.dfg_identity(a.dfg)
        print("lengths: WARNING: the dfg binary changed during the runs", flush=True)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"{res['date']}-{res['host']}-lengths")
    with open(stem + ".json", "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    text = report(res)
    with open(stem + ".md", "w") as f:
        f.write(f"# The warm-started main job at max_completion_length 256 vs 16, {res['date']}, {res['host']}\n\n"
                f"dfg {res['git_commit']}, {a.threads} thread(s), {res['cpu']} ({res['cores']} cores); {a.runs} "
                f"alternating processes per plan of {a.steps} steps, the first {a.sft_steps} SFT (not counted), "
                f"n_positions {a.n_positions}." + (f" Note: {a.note}." if a.note else "") + "\n\n" + text + "\n")
    print("\n" + text + f"\n\nwrote {stem}.json and .md (work directory {work})")


if __name__ == "__main__":
    main()
