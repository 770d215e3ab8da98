#!/usr/bin/python3
"""varlen.py - the variable-length half of bench.py (its `varlen` config): completions that end
at their EOS, as a warm-started policy writes them, with dfg's defaults (decode_early_exit,
length_buckets) against TRL's way in PyTorch and against dfg's fixed-shape plan.

What it adds to bench.py's measurement:

  warm start   one dfg plan with the config's settings plus sft_steps=K (learning_rate
               1e-3) runs its K supervised steps on the task's right answers and saves the
               weights (`dfg run --save`); every measured process starts from them
               (`dfg run --weights`, `grpo_torch.py --weights`). Untimed.
  three programs, alternating  dfg (its defaults: the decode loop ends when every row has its
               EOS, the scoring and training passes at the narrowest width bucket that holds
               each length-sorted chunk of groups); torch (grpo_torch.py --stop-at-eos:
               generate()'s semantics, every pass at the batch's longest completion, as TRL);
               dfg-fixed (the same plan compiled with decode_early_exit=false and
               length_buckets=1: max_completion_length decode runs and full-width passes);
               dfg-invariant (dfg's plan with batch_invariant=true: the batch-invariant
               kernels, whose sampler log-probs equal training's bit for bit: their cost).
  per step     the completions' real lengths (dfg: completions/mean_length and max_length of
               --metrics; torch: its completion mask), the real tokens (mean length x rows),
               the step's FLOPs and, for dfg, stage_ms, stage_runs and the sampling-vs-training
               log-prob difference it logs.
  FLOPs        dfg: `dfg inspect --json` gives each stage's flops for all its `repeat` runs,
               so one run is flops / repeat and the step's = sum over stages of that x
               stage_runs. dfg's cost rule counts a cached decode token's attention against the
               whole cache (ops/attention.c: 4 B Tmax C) although its kernel reads only the
               rows up to the token (ops/cpu/attention.c), so a second figure, "model", takes
               that part at the real context, 4 N (Lp + i + 1) C per layer for decode run i, as
               torch's count does. torch: grpo_torch.step_flops, the same cost rules applied to
               the positions torch computes (its docstring has the formula).
  sgemm peak   once per harness run: the best of a few 2048^3 cblas_sgemm calls through the
               OpenBLAS that dfg links (and torch loads with --torch-blas openmp), with
               --threads threads; GFLOP/s are also given as a share of it.

No timing is asserted anywhere: this measures, it does not test.
"""
import array
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

IMPLS = ("dfg", "torch", "dfg-fixed", "dfg-invariant")
FIXED_SETTINGS = dict(decode_early_exit="false", length_buckets=1)
INVARIANT_SETTINGS = dict(batch_invariant="true")
SGEMM_N = 2048
SGEMM_REPS = 7


# ---------------------------------------------------------------- the machine's sgemm peak
def openblas_of(dfg):
    """The libopenblas.so.0 the dfg binary loads (ldd)."""
    out = subprocess.run(["ldd", dfg], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libopenblas" in line and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    return None


def sgemm_child(lib, n, reps):
    """In a child process (its thread count fixed by the environment): reps n x n x n sgemm
    calls; prints their GFLOP/s as JSON."""
    blas = ctypes.CDLL(lib)
    f = ctypes.c_float
    blas.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [f, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                      f, ctypes.c_void_p, ctypes.c_int]
    blas.openblas_get_num_threads.restype = ctypes.c_int
    blas.openblas_get_config.restype = ctypes.c_char_p
    a = array.array("f", [0.5]) * (n * n)
    b = array.array("f", [0.25]) * (n * n)
    c = array.array("f", [0.0]) * (n * n)
    pa, pb, pc = (x.buffer_info()[0] for x in (a, b, c))
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        blas.cblas_sgemm(101, 111, 111, n, n, n, 1.0, pa, n, pb, n, 0.0, pc, n)  # row-major, no transposes
        out.append(2.0 * n ** 3 / (time.perf_counter() - t0) * 1e-9)
    print(json.dumps(dict(gflops=out, threads=blas.openblas_get_num_threads(),
                          config=blas.openblas_get_config().decode())))


def sgemm_peak(dfg, threads, wait_quiet, quiet_wait):
    """The machine's sgemm peak with the OpenBLAS dfg links: the best of SGEMM_REPS calls of
    SGEMM_N^3 (the first warms the library up), in a fresh process with `threads` threads."""
    lib = openblas_of(dfg)
    if not lib:
        return dict(error=f"{dfg} loads no libopenblas")
    busy = wait_quiet(quiet_wait) if quiet_wait > 0 else None
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--sgemm-child", lib, str(SGEMM_N), str(SGEMM_REPS)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        return dict(error=f"the sgemm measurement failed: {r.stderr.strip()[-500:]}")
    x = json.loads(r.stdout.strip().splitlines()[-1])
    g = x["gflops"][1:]
    return dict(gflops=round(max(g), 2), median_gflops=round(statistics.median(g), 2), all_gflops=[round(v, 2) for v in g],
                n=SGEMM_N, threads=x["threads"], library=lib, openblas_config=x["config"],
                busy_before_pct=None if busy is None else round(100.0 * busy, 1))


# ---------------------------------------------------------------- plans
def stage_flops_per_run(dfg, plan):
    """{stage: GFLOP of one run} from `dfg inspect --json` (a stage's flops cover its repeat runs)."""
    r = subprocess.run([dfg, "inspect", plan, "--json"], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench: dfg inspect {plan} failed:\n{r.stderr}")
    d = json.loads(r.stdout)
    return {s["name"]: s["flops"] / max(s["repeat"], 1) for s in d["stages"]}, d["arena_bytes"]


def prepare(a, s, cfg, d, compile_plan, run_measured):
    """The warm start (weights.safetensors in d) and the fixed-shape plan; returns facts to
    store. compile_plan(path, overrides) compiles examples/grpo/grpo.c with the config's settings
    updated by overrides."""
    vl = dict(cfg["varlen"])
    if a.sft_steps is not None:
        vl["sft_steps"] = a.sft_steps
    sft_plan = os.path.join(d, "sft.dfg")
    weights = os.path.join(d, "weights.safetensors")
    compile_plan(sft_plan, dict(sft_steps=vl["sft_steps"], learning_rate=vl["sft_learning_rate"]))
    metrics = os.path.join(d, "sft.jsonl")
    cmd = [a.dfg, "run", sft_plan, "--steps", str(vl["sft_steps"]), "--threads", str(a.threads), "--seed", str(a.seed),
           "--quiet", "--metrics", metrics, "--save", weights]
    print(f"  warm start: {vl['sft_steps']} SFT steps (lr {vl['sft_learning_rate']}) ...", end="", flush=True)
    m = run_measured(cmd, dict(os.environ), os.path.join(d, "sft.out"), os.path.join(d, "sft.err"), 0)
    if m["rc"] != 0:
        sys.exit(f"bench: the warm start failed (exit {m['rc']}): {' '.join(cmd)}")
    losses = [json.loads(line).get("sft_loss") for line in open(metrics) if line.startswith("{")]
    print(f" {m['wall_s']:.0f} s, sft_loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    plans = {"dfg-fixed": os.path.join(d, "plan-fixed.dfg"), "dfg-invariant": os.path.join(d, "plan-invariant.dfg")}
    compile_plan(plans["dfg-fixed"], FIXED_SETTINGS)
    compile_plan(plans["dfg-invariant"], INVARIANT_SETTINGS)
    return dict(weights=weights, plans=plans,
                warm_start=dict(sft_steps=vl["sft_steps"], learning_rate=vl["sft_learning_rate"], wall_s=m["wall_s"],
                                sft_loss_first=losses[0], sft_loss_last=losses[-1],
                                sft_loss_last10=statistics.mean(losses[-10:]), cmd=cmd))


def decode_overcount(s, runs, tail_runs=0):
    """The FLOPs dfg's cost rule adds to `runs` decode runs of the batch, then `tail_runs` of its
    tail (decode_tail auto: N / 8 rows), by counting each token's attention over the whole cache
    (Tmax = Lp + max_completion_length) instead of its Lp + i + 1 rows."""
    L, C, N = s["n_layer"], s["n_embd"], s["prompts_per_step"] * s["num_generations"]
    Lp = s["digits"] + 1
    T = Lp + s["max_completion_length"]
    n = N // 8 if N >= 16 else 0
    return (sum(L * 4 * N * C * (T - (Lp + i + 1)) for i in range(runs)) +
            sum(L * 4 * n * C * max(T - (Lp + i + 1), 0) for i in range(runs, runs + tail_runs)))


# ---------------------------------------------------------------- one run's steps
def per_run(m, impl, rows, s, vx):
    """Adds the varlen facts of one run's timed steps to m (rows: dfg's metrics lines or
    grpo_torch.py's step lines)."""
    N = s["prompts_per_step"] * s["num_generations"]
    Lc = s["max_completion_length"]
    steps = []
    for x in rows:
        if impl == "torch":
            lens = x["lengths"]
            steps.append(dict(ms=x["ms"], len_mean=x["len_mean"], len_max=x["len_max"], tokens=sum(lens),
                              rows_at_max=sum(1 for v in lens if v >= Lc) / len(lens), width=x["width"],
                              flops=x["flops"], flops_model=x["flops"], lengths=lens))
            continue
        runs = x.get("stage_runs") or {}
        per = vx["stage_flops"][impl]
        f = sum(per.get(k, 0.0) * v for k, v in runs.items())
        steps.append(dict(ms=x["ms"], len_mean=x["completions/mean_length"], len_max=x["completions/max_length"],
                          len_min=x["completions/min_length"], tokens=x["completions/mean_length"] * N,
                          rows_at_max=x["completions/clipped_ratio"], width=runs.get("decode", 0) + runs.get("decode.tail", 0), flops=f,
                          flops_model=f - decode_overcount(s, runs.get("decode", 0), runs.get("decode.tail", 0)),
                          logp_diff_mean=x.get("sampling/sampling_logp_difference/mean"),
                          logp_diff_max=x.get("sampling/sampling_logp_difference/max"),
                          stage_runs=runs, stage_ms=x.get("stage_ms") or {}))
    m["varlen_steps"] = steps
    secs = sum(x["ms"] for x in steps) * 1e-3
    m["real_tokens_per_s"] = sum(x["tokens"] for x in steps) / secs
    m["gflops"] = sum(x["flops"] for x in steps) / secs * 1e-9
    m["gflops_model"] = sum(x["flops_model"] for x in steps) / secs * 1e-9
    m["gflop_per_step"] = statistics.mean(x["flops"] for x in steps) * 1e-9


# ---------------------------------------------------------------- the summary over runs
def stage_group(name):
    for g in ("prefill", "decode", "ref", "train", "update", "old"):
        if name == g or name.startswith(g + "[") or name.startswith(g + "."):
            return g
    return "host"  # data, reward, advantages and other small stages


def stage_sums(steps):
    """Over steps (each with stage_ms and stage_runs of --metrics): ms summed by stage group, and
    runs summed by stage."""
    groups, runs = {}, {}
    for v in steps:
        for k, t in v["stage_ms"].items():
            groups[stage_group(k)] = groups.get(stage_group(k), 0.0) + t
        for k, n in v["stage_runs"].items():
            runs[k] = runs.get(k, 0) + n
    return groups, runs


def summarize(summary, per, s, stats, peak):
    Lc = s["max_completion_length"]
    for impl, ms in per.items():
        allsteps = [x for m in ms for x in m["varlen_steps"]]
        x = summary[impl]
        x["real_tokens_per_s"] = stats([m["real_tokens_per_s"] for m in ms])
        x["gflop_per_step"] = stats([m["gflop_per_step"] for m in ms])
        x["gflops"] = stats([m["gflops"] for m in ms])
        x["gflops_model"] = stats([m["gflops_model"] for m in ms])
        if peak:
            x["pct_of_sgemm_peak"] = 100.0 * x["gflops"]["median"] / peak
            x["pct_of_sgemm_peak_model"] = 100.0 * x["gflops_model"]["median"] / peak
        x["lengths"] = dict(steps=len(allsteps), mean_of_step_means=statistics.mean(v["len_mean"] for v in allsteps),
                            mean_of_step_max=statistics.mean(v["len_max"] for v in allsteps),
                            max=max(v["len_max"] for v in allsteps),
                            steps_reaching_max=sum(1 for v in allsteps if v["len_max"] >= Lc),
                            mean_rows_at_max=statistics.mean(v["rows_at_max"] for v in allsteps),
                            mean_tokens_per_step=statistics.mean(v["tokens"] for v in allsteps))
        if impl == "torch":
            lens = sorted(v for st in allsteps for v in st["lengths"])
            q = lambda p: lens[min(len(lens) - 1, int(p * len(lens)))]  # noqa: E731
            x["lengths"]["rows"] = dict(n=len(lens), p10=q(0.10), p50=q(0.50), p90=q(0.90), p95=q(0.95), p99=q(0.99),
                                        max=lens[-1], mean=statistics.mean(lens))
            x["lengths"]["mean_width"] = statistics.mean(v["width"] for v in allsteps)
            continue
        x["arena_mb"] = stats([m["arena_bytes"] / 2**20 for m in ms if m.get("arena_bytes")])
        d = [v["logp_diff_mean"] for v in allsteps if v["logp_diff_mean"] is not None]
        dm = [v["logp_diff_max"] for v in allsteps if v["logp_diff_max"] is not None]
        x["sampling_logp_difference"] = dict(mean=statistics.mean(d) if d else None, max=max(dm) if dm else None)
        groups, runs = stage_sums(allsteps)
        n = len(allsteps)
        x["stage_ms_mean"] = {k: t / n for k, t in groups.items()}
        x["stage_runs_mean"] = {k: r / n for k, r in runs.items()}
        x["step_ms_mean"] = statistics.mean(v["ms"] for v in allsteps)


# ---------------------------------------------------------------- the report
def table(res, fmt3):
    sm = res["modes"]["full"]
    peak = res.get("sgemm_peak_gflops")
    Lc = res["completion_len"]
    head = ("| impl | step ms median [min-max of runs] | completion tok/s (real tokens) | completion length: mean / "
            f"mean of step max / max | steps reaching {Lc} | GFLOP per step | GFLOP/s (% of sgemm peak) | "
            "GFLOP/s, decode attention at real context (%) | peak RSS MiB | arena MiB | ms / dfg ms (pairs) | "
            "background CPU % |")
    lines = [head, "|" + "---|" * 12]
    for impl in IMPLS:
        x = sm[impl]
        lg = x["lengths"]
        ratio = "1"
        if impl != "dfg":
            ps = sm[f"pair_speedups_{impl}" if impl != "torch" else "pair_speedups"]
            ratio = f"{x['step_ms']['median'] / sm['dfg']['step_ms']['median']:.2f} ({ps['min']:.2f}-{ps['max']:.2f})"
        pct = lambda k: f" ({x[k]:.1f} %)" if peak else ""  # noqa: E731
        model = "same" if impl == "torch" else f"{x['gflops_model']['median']:.2f}{pct('pct_of_sgemm_peak_model')}"
        arena = fmt3(x["arena_mb"]) if "arena_mb" in x else "-"
        lines.append(f"| {impl} | {fmt3(x['step_ms'], '{:.0f}')} | {fmt3(x['real_tokens_per_s'], '{:.0f}')} | "
                     f"{lg['mean_of_step_means']:.1f} / {lg['mean_of_step_max']:.1f} / {lg['max']} | "
                     f"{lg['steps_reaching_max']} of {lg['steps']} | {x['gflop_per_step']['median']:.2f} | "
                     f"{x['gflops']['median']:.2f}{pct('pct_of_sgemm_peak')} | {model} | {fmt3(x['peak_rss_mb'])} | "
                     f"{arena} | {ratio} | {x['background_cpu_pct']['max']:.0f} |")
    return "\n".join(lines)


def stage_table(res):
    sm = res["modes"]["full"]
    cols = ("prefill", "decode", "ref", "train", "update", "host")
    lines = ["| impl | step ms (mean) | " + " | ".join(cols) + " | decode runs per step (batch + tail) | scoring/training runs per "
             "step by width |", "|" + "---|" * (len(cols) + 4)]
    for impl in ("dfg", "dfg-fixed", "dfg-invariant"):
        x = sm[impl]
        g, r = x["stage_ms_mean"], x["stage_runs_mean"]
        widths = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.items()) if k.startswith("train"))
        lines.append(f"| {impl} | {x['step_ms_mean']:.0f} | " + " | ".join(f"{g.get(c, 0.0):.0f}" for c in cols) +
                     f" | {r.get('decode', 0):.1f} + {r.get('decode.tail', 0):.1f} | {widths} |")
    return "\n".join(lines)


def notes(res):
    sm = res["modes"]["full"]
    t, w = sm["torch"]["lengths"], res["warm_start"]
    rows = t["rows"]
    lp = sm["dfg"]["sampling_logp_difference"]
    peak = res.get("sgemm_peak") or {}
    fmt = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
    return "\n".join([
        f"- Warm start: {w['sft_steps']} SFT steps of dfg (learning_rate {w['learning_rate']}, {w['wall_s']:.0f} s, "
        f"untimed), sft_loss {w['sft_loss_first']:.3f} -> {w['sft_loss_last10']:.3f} (mean of the last 10); the "
        f"measured runs start from those weights, at learning_rate {res['settings'].get('learning_rate')}.",
        f"- Completion lengths (torch's rows, {rows['n']} over {t['steps']} timed steps): mean {rows['mean']:.1f}, "
        f"p10 {rows['p10']}, median {rows['p50']}, p90 {rows['p90']}, p95 {rows['p95']}, p99 {rows['p99']}, max "
        f"{rows['max']}; the generated width (the batch's longest) averaged {t['mean_width']:.1f} of "
        f"{res['completion_len']}. dfg: per-step mean {sm['dfg']['lengths']['mean_of_step_means']:.1f}, rows without "
        f"EOS by {res['completion_len']} (clipped_ratio) {100 * sm['dfg']['lengths']['mean_rows_at_max']:.1f} %.",
        f"- dfg's sampling vs training log-probs (sampling/sampling_logp_difference): mean {fmt(lp['mean'])}, max "
        f"{fmt(lp['max'])} (dfg-fixed: mean {fmt(sm['dfg-fixed']['sampling_logp_difference']['mean'])}, max "
        f"{fmt(sm['dfg-fixed']['sampling_logp_difference']['max'])}; dfg-invariant: mean "
        f"{fmt(sm['dfg-invariant']['sampling_logp_difference']['mean'])}, max "
        f"{fmt(sm['dfg-invariant']['sampling_logp_difference']['max'])}).",
        f"- sgemm peak: {peak.get('gflops')} GFLOP/s (best of {len(peak.get('all_gflops', []))} {peak.get('n')}^3 "
        f"cblas_sgemm, {peak.get('threads')} threads, {peak.get('library')}; median {peak.get('median_gflops')}).",
        f"- {res['runs']} alternating runs per program (dfg, torch, dfg-fixed, dfg-invariant), {res['steps']} steps each, the first "
        f"{res['warmup']} not timed. tok/s: the real completion tokens (up to and including EOS) of the timed steps / "
        f"their time. GFLOP: dfg's from `dfg inspect --json` x stage_runs, torch's from grpo_torch.step_flops.",
    ])


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--sgemm-child":
    sgemm_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
