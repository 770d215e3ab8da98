#!/usr/bin/python3
"""bench.py - dfg's GRPO step (examples/grpo/grpo.c) against the same step in eager PyTorch
(tools/bench/grpo_torch.py), side by side on this machine.

For each config and mode it compiles the plan once, then alternates R runs of each program
(dfg, torch, dfg, torch, ...), each a fresh process of N steps whose first W steps are warm-up.
Per step it takes the step time each program reports (dfg: "ms" of `--metrics`; torch: its
JSON lines, perf_counter around the step); per process the peak RSS from os.wait4's rusage
(ru_maxrss, the same measurement for both). It prints a table and writes
OUT/<date>-<host>-<config>.json and .md.

  modes  full   the whole step: data, rollout (prefill + decode with a KV cache), reward,
                advantages, reference log-probs, the GRPO loss, backward, clipping, AdamW
         fixed  one rollout batch made once (by grpo_torch.py from its initial model), and each
                step trains on it: dfg run --rollouts R; grpo_torch.py --mode fixed --rollouts R

The `varlen` config (varlen.py has that half) measures completions of variable length: a
policy warm-started by dfg's sft_steps (the same weights loaded by every process), completions
that end at their EOS, and three programs alternating: dfg with its defaults (decode early exit,
length buckets), torch as TRL (generate() stops when every row has ended; every pass at the
batch's longest completion) and dfg's fixed-shape plan (decode_early_exit=false,
length_buckets=1). Its results add the real completion lengths and tokens/s, each step's FLOPs
(dfg: `dfg inspect --json` x stage_runs) against the machine's sgemm peak (measured once per
harness run), dfg's stage times and its sampling-vs-training log-prob difference.

--device cuda runs on the GPU instead: dfg's plan compiled with --target cuda and run by
`dfg run` on the GPU, against grpo_torch.py --device cuda eager and with torch.compile, three
programs alternating; device memory instead of RSS (bench_gpu.py has that half).

No timing is asserted anywhere: this measures, it does not test.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import bench_gpu
import varlen

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def reverse_digits_for(n_positions):
    """The largest `digits` of the reverse task whose prompt (d + 1) + completion (d + 2) fit."""
    return max(d for d in range(1, 65) if 2 * d + 3 <= n_positions)


# model and batch settings, named as examples/grpo/grpo.c's --set keys; steps/warmup are defaults
CONFIGS = {
    # examples/grpo/grpo.c's defaults: the main job (n_positions defaults to T there, as here)
    "tiny": dict(settings=dict(n_layer=2, n_head=4, n_embd=64, vocab_size=15, digits=3,
                               prompts_per_step=8, num_generations=8), steps=800, warmup=50),
    "small": dict(settings=dict(n_layer=4, n_head=4, n_embd=256, vocab_size=512, n_positions=128,
                                digits=reverse_digits_for(128), prompts_per_step=8, num_generations=8),
                  steps=6, warmup=1),
    # GPT-2 124M: one step for the record (every process pays its first-step costs in it)
    "gpt2-124m": dict(settings=dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024,
                                    digits=64, prompts_per_step=4, num_generations=8),
                      steps=1, warmup=0, runs=1, min_free_gib=14),
    # Qwen2.5-0.5B's shape (models/qwen2.5-0.5b/config.json: 24 layers, 896 wide, 14 query and 2
    # key/value heads, vocabulary 151936, tied; 494 M parameters), random weights on both sides:
    # dfg reads the config.json (--set model=DIR), torch builds transformers' Qwen2ForCausalLM
    # from it (grpo_torch.py --model DIR). A small batch: ~10 GB of fp32 weights, ref copy,
    # gradients and AdamW moments in each program
    "qwen2.5-0.5b": dict(settings=dict(model="tools/bench/models/qwen2.5-0.5b", digits=4, prompts_per_step=2,
                                       num_generations=4, beta=0.04),
                         steps=2, warmup=1, runs=2, min_free_gib=14),
    # the same step with LoRA (r 16, alpha 32, all-linear: PEFT's semantics, TRL's usual rank): dfg's plan
    # with lora_r/lora_alpha/lora_target_modules (a frozen base, the reference = the base with the adapters
    # off), against grpo_torch.py --model ... --lora_r 16: transformers + peft 0.11.1 (get_peft_model with the
    # same LoraConfig, AdamW over the adapters, the reference log-probs under disable_adapter(), as TRL).
    # Lengths as qwen2.5-0.5b's: max_completion_length digits + 2 = 6 decoded by both; loss_type grpo in both
    # (grpo_torch.py's; dfg's default is dapo); learning rate 1e-5 in both (no effect on the time)
    "lora-qwen2.5-0.5b": dict(settings=dict(model="tools/bench/models/qwen2.5-0.5b", digits=4, prompts_per_step=2,
                                            num_generations=4, beta=0.04, loss_type="grpo", learning_rate=1e-5,
                                            lora_r=16, lora_alpha=32, lora_target_modules="all-linear"),
                              steps=3, warmup=1, runs=3, min_free_gib=8),
    # variable completion lengths: the main job's model on `reverse` with 60 digits (answer + EOS:
    # 61 tokens, ~24 % of max_completion_length 256), warm-started by 200 SFT steps of dfg at lr
    # 1e-3; the measured steps train at 1e-6 (TRL's default for a pretrained policy) so that the
    # length distribution stays the warm start's. loss grpo with beta 0.04, as grpo_torch.py's
    "varlen": dict(settings=dict(n_layer=2, n_head=4, n_embd=64, vocab_size=15, n_positions=317, digits=60,
                                 max_completion_length=256, prompts_per_step=8, num_generations=8, beta=0.04,
                                 loss_type="grpo", learning_rate=1e-6),
                   steps=6, warmup=1, runs=3, varlen=dict(sft_steps=200, sft_learning_rate=1e-3)),
}


def lengths(s):
    """examples/grpo/grpo.c, task reverse: prompt = digits + 1 ('='), completion = answer + 2 unless
    max_completion_length says otherwise."""
    Lp, Lc = s["digits"] + 1, s.get("max_completion_length", s["digits"] + 2)
    return Lp, Lc


# ---------------------------------------------------------------- the machine
def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def meminfo(key):
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def git_commit():
    r = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    if r.returncode:
        return "unknown"
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    return r.stdout.strip() + ("-dirty" if dirty else "")


def dfg_identity(dfg):
    """The dfg binary and the libdfg.so it loads: version line, sha256 and mtime, to tell
    whether a rebuild happened in the middle of a benchmark."""
    import hashlib
    out = dict(version=sh([dfg, "--version"]).stdout.strip())
    files = {"dfg": dfg}
    for line in sh(["ldd", dfg]).stdout.splitlines():
        if "libdfg" in line and "=>" in line:
            files["libdfg"] = line.split("=>")[1].split("(")[0].strip()
    for k, p in files.items():
        try:
            with open(p, "rb") as f:
                out[k] = dict(path=p, sha256=hashlib.sha256(f.read()).hexdigest()[:16],
                              mtime=datetime.datetime.fromtimestamp(os.path.getmtime(p)).isoformat(timespec="seconds"))
        except OSError:
            out[k] = dict(path=p)
    return out


def cpu_busy():
    """(busy, total) jiffies of all CPUs from /proc/stat (busy = all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def wait_quiet(limit_s, threshold=0.10):
    """Waits (at most limit_s) until the CPUs were under threshold busy for one second: other
    work on the machine (a build, another benchmark) would otherwise land in the timings.
    Returns the busy fraction last seen."""
    deadline = time.time() + limit_s
    while True:
        b0, t0 = cpu_busy()
        time.sleep(1.0)
        b1, t1 = cpu_busy()
        frac = (b1 - b0) / max(t1 - t0, 1)
        if frac < threshold or time.time() >= deadline:
            return frac


def run_measured(cmd, env, out_path, err_path, quiet_wait):
    """Runs cmd to completion; returns its exit code, wall time, peak RSS (ru_maxrss, bytes),
    its CPU seconds and the other processes' share of the CPUs while it ran."""
    idle_before = wait_quiet(quiet_wait) if quiet_wait > 0 else None
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    with open(out_path, "w") as out, open(err_path, "w") as err:
        b0, _ = cpu_busy()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        b1, _ = cpu_busy()
        p.returncode = os.waitstatus_to_exitcode(status)
    cpu = ru.ru_utime + ru.ru_stime
    other = max(0.0, (b1 - b0) / hz - cpu)
    return dict(rc=p.returncode, wall_s=round(wall, 3), peak_rss_bytes=ru.ru_maxrss * 1024, cpu_s=round(cpu, 3),
                background_cpu_pct=round(100.0 * other / (wall * ncpu), 1),
                busy_before_pct=None if idle_before is None else round(100.0 * idle_before, 1))


def tail(path, n=20):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# ---------------------------------------------------------------- the two programs
def torch_args(s, threads, seed, dev=None):
    """grpo_torch.py's command line; dev: None on the CPU, else (dtype, compile mode or None)."""
    a = [sys.executable, os.path.join(HERE, "grpo_torch.py")]
    for k in ("model", "n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "digits", "prompts_per_step",
              "num_generations", "beta", "max_completion_length", "learning_rate", "lora_r", "lora_alpha",
              "lora_target_modules"):
        if k in s:
            a += [f"--{k}", str(s[k])]
    a += ["--threads", str(threads), "--seed", str(seed)]
    if dev:
        a += ["--device", "cuda", "--dtype", dev[0]] + (["--compile", "--compile-mode", dev[1]] if dev[1] else [])
    return a


def torch_dev(impl, a):
    """The device part of grpo_torch.py's arguments for impl (None on the CPU)."""
    if a.device != "cuda":
        return None
    return (a.dtype, a.compile_mode if impl == "torch.compile" else None)


def torch_env(blas):
    env = dict(os.environ)
    if blas == "openmp":
        if not os.path.isdir(OPENBLAS_OPENMP):
            sys.exit(f"bench: --torch-blas openmp needs {OPENBLAS_OPENMP} (Debian's libopenblas0-openmp)")
        env["LD_LIBRARY_PATH"] = OPENBLAS_OPENMP + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def parse_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def measured_quietly(a, label, measure, discarded, tags):
    """measure() -> (result, summary line), again (at most a.retries times) while other processes
    took more than a.max_background % of the CPUs during it; each discarded result, with tags, goes
    to discarded. Returns the kept result."""
    for attempt in range(a.retries + 1):
        print(f"  {label} ...", end="", flush=True)
        m, line = measure()
        print(f" {line}", flush=True)
        if m["background_cpu_pct"] <= a.max_background or attempt == a.retries:
            return m
        print(f"    (other processes took {m['background_cpu_pct']}% of the CPUs: run again)", flush=True)
        discarded.append(dict(m, **tags))


def stats(xs):
    return dict(min=min(xs), median=statistics.median(xs), max=max(xs)) if xs else None


def one_run(impl, cfg_name, mode, s, a, work, r, plan, rollouts, steps, warmup, vx=None):
    """One process of impl (dfg, torch, on the GPU torch.compile; varlen: dfg-fixed and dfg-invariant too, and vx
    holds the warm start's weights and those plans)."""
    tag = f"{cfg_name}-{mode}-{impl}-{r}"
    out, err = os.path.join(work, tag + ".out"), os.path.join(work, tag + ".err")
    if impl.startswith("dfg"):
        metrics = os.path.join(work, tag + ".jsonl")
        cmd = [a.dfg, "run", vx["plans"].get(impl, plan) if vx else plan, "--steps", str(steps),
               "--threads", str(a.threads), "--seed", str(a.seed), "--metrics", metrics]
        cmd += ["--weights", vx["weights"]] if vx else []
        # on the GPU the header's `device memory:` line is read: not quiet, one step line at the end
        cmd += ["--every", str(steps)] if a.device == "cuda" else ["--quiet"]
        if mode == "fixed":
            cmd += ["--rollouts", rollouts]
        env = dict(os.environ)
    else:
        cmd = (torch_args(s, a.threads, a.seed, torch_dev(impl, a)) +
               ["--mode", mode, "--steps", str(steps), "--warmup", str(warmup)])
        if mode == "fixed":
            cmd += ["--rollouts", rollouts]
        cmd += ["--stop-at-eos", "--weights", vx["weights"]] if vx else []
        env = torch_env(a.torch_blas)
    m = run_measured(cmd, env, out, err, a.quiet_wait)
    if m["rc"] != 0:
        sys.exit(f"bench: {impl} failed (exit {m['rc']}): {' '.join(cmd)}\n{tail(err)}{tail(out)}")
    if impl.startswith("dfg"):
        rows = [x for x in parse_jsonl(metrics) if x.get("step", 0) > warmup]
        ms = [x["ms"] for x in rows]
        m["arena_bytes"] = rows[-1].get("arena_bytes") if rows else None
        m["reward_mean"] = statistics.mean(x["reward"] for x in rows if x.get("reward") is not None) if rows else None
        staged = [x["stage_ms"] for x in rows if x.get("stage_ms")]
        if staged:  # dfg's mean ms per stage over the timed steps
            m["stage_ms_mean"] = {k: round(statistics.mean(x.get(k, 0.0) for x in staged), 3) for k in staged[0]}
        if a.device == "cuda":
            host = [x["host_ms"] for x in rows if x.get("host_ms") is not None]
            m["host_ms_median"] = statistics.median(host) if host else None
            bench_gpu.add_device(m, impl, out, None)
    else:
        rows = parse_jsonl(out)
        summary = next((x for x in rows if x.get("summary")), {})
        rows = [x for x in rows if "ms" in x and not x.get("summary")]
        ms = [x["ms"] for x in rows]
        m["blas"] = summary.get("blas")
        m["self_reported_peak_rss_bytes"] = summary.get("peak_rss_bytes")
        m.update({k: summary.get(k) for k in ("params", "trained_params", "transformers", "peft", "lora")
                  if summary.get(k) is not None})
        m["reward_mean"] = statistics.mean(x["reward"] for x in rows) if rows else None
        if a.device == "cuda":
            bench_gpu.add_device(m, impl, out, summary)
    if not ms:
        sys.exit(f"bench: {impl} reported no timed steps ({steps} steps, {warmup} warm-up)")
    if vx:
        varlen.per_run(m, impl, rows, s, vx)
    m.update(step_ms=ms, median_ms=statistics.median(ms), min_ms=min(ms), max_ms=max(ms), cmd=cmd)
    return m


def bench_config(cfg_name, a, work):
    cfg = CONFIGS[cfg_name]
    s = dict(cfg["settings"])
    if a.device == "cuda":
        cfg = dict(cfg, min_free_gib=None, **bench_gpu.CUDA_DEFAULTS[cfg_name])
    steps = a.steps if a.steps is not None else cfg["steps"]
    warmup = a.warmup if a.warmup is not None else cfg["warmup"]
    runs = a.runs if a.runs is not None else cfg.get("runs", 3)
    if warmup >= steps:
        sys.exit(f"bench: {cfg_name}: --warmup {warmup} leaves no timed step of {steps}")
    need = cfg.get("min_free_gib")
    if need:
        avail = meminfo("MemAvailable")
        if avail is not None and avail < need * 2**30:
            print(f"bench: skipping {cfg_name}: {avail / 2**30:.1f} GiB available, it wants {need} GiB", flush=True)
            return None
    Lp, Lc = lengths(s)
    N = s["prompts_per_step"] * s["num_generations"]
    tokens_per_step = N * Lc
    d = os.path.join(work, cfg_name)
    os.makedirs(d, exist_ok=True)
    plan = os.path.join(d, "plan.dfg")

    def compile_plan(path, overrides=None):
        """examples/grpo/grpo.c with the config's settings (updated by overrides) and --dfg-set."""
        cmd = [a.dfg, "compile", os.path.join(ROOT, "examples", "grpo", "grpo.c"), "-o", path]
        for k, v in dict(s, **(overrides or {})).items():
            cmd += ["--set", f"{k}={v}"]
        for kv in a.dfg_set:  # dfg-only settings (e.g. share_prompts=0): torch's step does not change
            cmd += ["--set", kv]
        if a.device == "cuda":
            cmd += ["--target", "cuda"] + (["--set", "torch_dtype=float32"] if a.dtype == "f32" else [])
        r = sh(cmd, cwd=ROOT)
        if r.returncode:
            sys.exit(f"bench: dfg compile failed:\n{r.stdout}{r.stderr}")
        return r.stdout.strip().splitlines()

    compile_log = compile_plan(plan)
    ident = dfg_identity(a.dfg)
    result = dict(config=cfg_name, settings=s, prompt_len=Lp, completion_len=Lc, sequences=N,
                  completion_tokens_per_step=tokens_per_step, steps=steps, warmup=warmup, runs=runs,
                  dfg_settings=list(a.dfg_set), dfg_compile=compile_log, modes={})
    impls, vx, modes = a.impls, None, a.modes
    if cfg.get("varlen"):  # varlen.py: the warm start, the fixed-shape plan, three programs, full steps only
        if a.device == "cuda":
            sys.exit("bench: the varlen config is for the CPU")
        modes = ["full"]
        vx = varlen.prepare(a, s, cfg, d, compile_plan, run_measured)
        vx["stage_flops"], arenas = {}, {}
        for impl, p in (("dfg", plan), *vx["plans"].items()):
            vx["stage_flops"][impl], arenas[impl] = varlen.stage_flops_per_run(a.dfg, p)
        impls = varlen.IMPLS
        result.update(warm_start=vx["warm_start"], dfg_fixed_settings=varlen.FIXED_SETTINGS,
                      dfg_invariant_settings=varlen.INVARIANT_SETTINGS,
                      dfg_stage_gflop_per_run={k: {n: f * 1e-9 for n, f in v.items()} for k, v in vx["stage_flops"].items()},
                      planned_arena_bytes=arenas, sgemm_peak=a.sgemm_peak,
                      sgemm_peak_gflops=(a.sgemm_peak or {}).get("gflops"))
    for mode in modes:
        rollouts = None
        if mode == "fixed":
            rollouts = os.path.join(d, "rollouts.safetensors")
            mk = (torch_args(s, a.threads, a.seed, torch_dev("torch", a)) +
                  ["--mode", "fixed", "--steps", "0", "--save-rollouts", rollouts])
            rr = sh(mk, env=torch_env(a.torch_blas), cwd=ROOT)
            if rr.returncode:
                sys.exit(f"bench: making the fixed rollouts failed:\n{rr.stdout}{rr.stderr}")
        per, discarded = {impl: [] for impl in impls}, []
        for i in range(runs):
            for impl in impls:
                def measure():
                    m = one_run(impl, cfg_name, mode, s, a, d, i, plan, rollouts, steps, warmup, vx)
                    dev = f", device {m['device_bytes'] / 2**20:.1f} MiB" if a.device == "cuda" else ""
                    return m, (f"{m['median_ms']:.2f} ms/step, peak RSS {m['peak_rss_bytes'] / 2**20:.1f} MiB{dev}, "
                               f"background {m['background_cpu_pct']}% CPU")

                label = f"{cfg_name} {mode} run {i + 1}/{runs} {impl} ({steps} steps, {warmup} warm-up)"
                per[impl].append(measured_quietly(a, label, measure, discarded, dict(impl=impl, run=i)))
        summary = {"discarded_runs": discarded}
        for impl, ms in per.items():
            med = [m["median_ms"] for m in ms]
            summary[impl] = dict(
                step_ms=stats(med),
                tokens_per_s=stats([tokens_per_step / (x * 1e-3) for x in med]),
                peak_rss_mb=stats([m["peak_rss_bytes"] / 2**20 for m in ms]),
                background_cpu_pct=stats([m["background_cpu_pct"] for m in ms]),
                runs=ms)
        dm, dr = summary["dfg"]["step_ms"]["median"], summary["dfg"]["peak_rss_mb"]["median"]
        for o in impls[1:]:  # torch, and on the GPU torch.compile (keys ..._torch_compile); varlen: dfg-fixed, dfg-invariant
            k = bench_gpu.suffix(o)
            summary[f"speedup{k}_ms_over_dfg_ms"] = summary[o]["step_ms"]["median"] / dm
            summary[f"rss_ratio_dfg_over{k}"] = dr / summary[o]["peak_rss_mb"]["median"]
            # run i of dfg and run i of torch ran back to back: their ratio is less exposed to the
            # machine's speed drifting between runs (a shared VM's cores do)
            summary[bench_gpu.pair_key(o)] = stats([t["median_ms"] / d["median_ms"] for d, t in zip(per["dfg"], per[o])])
        if a.device == "cuda":
            bench_gpu.summarize(summary, per, stats)
        if vx:
            varlen.summarize(summary, per, s, stats, result["sgemm_peak_gflops"])
        result["modes"][mode] = summary
    after = dfg_identity(a.dfg)
    result["dfg_binary"] = ident
    if after != ident:
        result["dfg_binary_after"] = after
        print(f"bench: WARNING: {a.dfg} or its libdfg.so changed during the {cfg_name} runs (rebuilt?): "
              f"its numbers mix two builds", flush=True)
    return result


# ---------------------------------------------------------------- the report
def fmt3(st, f="{:.1f}"):
    return f"{f.format(st['median'])} [{f.format(st['min'])}-{f.format(st['max'])}]"


def table(results):
    head = ("| config | mode | impl | step ms median [min-max of runs] | completion tok/s | peak RSS MiB | "
            "torch ms / dfg ms (per pair) | dfg RSS / torch RSS | background CPU % |")
    lines = [head, "|" + "---|" * 9]
    for res in results:
        for mode, sm in res["modes"].items():
            for impl in ("dfg", "torch"):
                x = sm[impl]
                fm = "{:.2f}" if x["step_ms"]["median"] < 100 else "{:.0f}"
                ps = sm["pair_speedups"]
                ratio = (f"{sm['speedup_torch_ms_over_dfg_ms']:.2f} ({ps['min']:.2f}-{ps['max']:.2f})",
                         f"{sm['rss_ratio_dfg_over_torch']:.2f}") if impl == "dfg" else ("", "")
                lines.append(f"| {res['config']} | {mode} | {impl} | {fmt3(x['step_ms'], fm)} | "
                             f"{fmt3(x['tokens_per_s'], '{:.0f}')} | {fmt3(x['peak_rss_mb'])} | {ratio[0]} | {ratio[1]} | "
                             f"{x['background_cpu_pct']['max']:.0f} |")
    return "\n".join(lines)


def stage_note(res):
    """dfg's time per stage (stage_ms of --metrics: the mean over a run's timed steps, then the median
    over runs) in each mode, or ''."""
    out = []
    for mode, sm in res["modes"].items():
        runs = [m["stage_ms_mean"] for m in sm["dfg"]["runs"] if m.get("stage_ms_mean")]
        if not runs:
            continue
        per = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
        parts = ", ".join(f"{k} {v:.0f}" if v >= 10 else f"{k} {v:.2f}" for k, v in per.items() if v >= 0.005)
        out.append(f" dfg's ms per stage ({mode}; mean over the timed steps, median of runs): {parts}.")
    return "".join(out)


def notes(res):
    lora = res["settings"].get("lora_r")
    return (f"{res['config']}: {res['sequences']} sequences of {res['prompt_len']} prompt + {res['completion_len']} "
            f"completion tokens; tok/s = {res['completion_tokens_per_step']} completion positions per step "
            f"(sequences x max_completion_length, generated in `full`, trained on in `fixed`) / median step time; "
            f"{res['runs']} alternating runs per program, {res['steps']} steps each, first {res['warmup']} not timed."
            + (f" LoRA r {lora}, alpha {res['settings'].get('lora_alpha')}, targets "
               f"{res['settings'].get('lora_target_modules')}: torch is transformers + peft (get_peft_model, AdamW "
               f"over the adapters, the reference under disable_adapter())." if lora else "")
            + stage_note(res))


def main():
    ap = argparse.ArgumentParser(description="dfg vs eager PyTorch on examples/grpo/grpo.c's GRPO step")
    ap.add_argument("--configs", default="tiny,small", help="comma list of: " + ", ".join(CONFIGS))
    ap.add_argument("--modes", default="full,fixed", help="comma list of: full, fixed")
    ap.add_argument("--runs", type=int, help="alternating runs per program (default 3; gpt2-124m 1, "
                    "qwen2.5-0.5b 2)")
    ap.add_argument("--steps", type=int, help="steps per process, warm-up included (default per config)")
    ap.add_argument("--warmup", type=int, help="first steps not timed (default per config)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, help="varlen: the warm start's SFT steps (default 200)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dfg", default=os.path.join(ROOT, "build", "dfg"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--torch-blas", choices=("openmp", "system"), default="openmp",
                    help="openmp (default): run torch on Debian's OpenBLAS OpenMP build, the BLAS dfg links; "
                         "system: whatever libblas.so.3 the machine's alternatives select")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each run wait up to this many seconds for the CPUs to be idle (0: do not)")
    ap.add_argument("--max-background", type=float, default=10.0,
                    help="a run during which other processes took more than this %% of the CPUs is run again")
    ap.add_argument("--retries", type=int, default=2, help="how often such a run is repeated at most")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (plans, logs, rollouts)")
    ap.add_argument("--dfg-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra `dfg compile --set` for dfg's plan only (repeatable), e.g. share_prompts=0; "
                         "it is part of the results' file names")
    ap.add_argument("--note", default="", help="free text stored with the results (e.g. which build --dfg is)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: dfg's cuda plan on the GPU against torch eager and torch.compile on the GPU")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16",
                    help="--device cuda: bf16 (dfg's cuda default; torch autocast) or f32 (dfg torch_dtype=float32)")
    ap.add_argument("--compile-mode", default="default", help="--device cuda: torch.compile's mode")
    a = ap.parse_args()
    a.impls = bench_gpu.IMPLS if a.device == "cuda" else ("dfg", "torch")
    a.configs = [c for c in a.configs.split(",") if c]
    a.modes = [m for m in a.modes.split(",") if m]
    for c in a.configs:
        if c not in CONFIGS:
            sys.exit(f"bench: unknown config '{c}' (valid: {', '.join(CONFIGS)})")
    for m in a.modes:
        if m not in ("full", "fixed"):
            sys.exit(f"bench: unknown mode '{m}' (valid: full, fixed)")
    a.dfg = os.path.abspath(a.dfg)
    if not os.access(a.dfg, os.X_OK):
        sys.exit(f"bench: no dfg at {a.dfg} (build it: cmake --build build)")

    gpu = None
    if a.device == "cuda":
        gpu, tinfo = bench_gpu.check(sys.executable)
        a.torch_blas = "system"  # the GEMMs are the GPU's; no BLAS to pin for torch
    torch_version = sh([sys.executable, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    work = tempfile.mkdtemp(prefix="dfg-bench-")
    # the cost of loading torch alone, to read torch's peak RSS against
    base = run_measured([sys.executable, "-c", "import torch"], torch_env(a.torch_blas), os.devnull, os.devnull, 0)
    ldd = sh(["ldd", a.dfg]).stdout
    machine = dict(hostname=socket.gethostname(), cpu=cpu_model(), cores=os.cpu_count(),
                   ram_gib=round((meminfo("MemTotal") or 0) / 2**30, 1), kernel=platform.release(),
                   python=platform.python_version())
    common = dict(date=datetime.date.today().isoformat(), machine=machine, git_commit=git_commit(),
                  note=a.note, torch_version=torch_version, threads=a.threads, seed=a.seed, torch_blas=a.torch_blas,
                  dfg_blas=[l.strip().split(" (0x")[0] for l in ldd.splitlines() if "blas" in l or "gomp" in l],
                  torch_import_peak_rss_mb=round(base["peak_rss_bytes"] / 2**20, 1))
    if a.device == "cuda":
        common.update(device="cuda", dtype=a.dtype, compile_mode=a.compile_mode, gpu=gpu, torch_cuda=tinfo)
    print(f"dfg {git_commit()} vs torch {torch_version}, {a.threads} threads, {machine['cpu']} "
          f"({machine['cores']} cores, {machine['ram_gib']} GiB); importing torch alone peaks at "
          f"{common['torch_import_peak_rss_mb']} MiB RSS", flush=True)
    if a.device == "cuda":
        print(f"on the GPU: {gpu['name']} (driver {gpu['driver']}, CUDA {gpu['cuda_driver']}), torch's CUDA "
              f"{tinfo.get('cuda')}, {a.dtype}, torch.compile mode {a.compile_mode}", flush=True)
    a.sgemm_peak = None
    if any(CONFIGS[c].get("varlen") for c in a.configs):  # once per harness run, before the runs
        a.sgemm_peak = varlen.sgemm_peak(a.dfg, a.threads, wait_quiet, a.quiet_wait)
        common["sgemm_peak"] = a.sgemm_peak
        print(f"sgemm peak: {a.sgemm_peak.get('gflops')} GFLOP/s ({a.sgemm_peak.get('n')}^3, {a.threads} threads, "
              f"{a.sgemm_peak.get('library')}){' ' + a.sgemm_peak['error'] if 'error' in a.sgemm_peak else ''}",
              flush=True)
    os.makedirs(a.out, exist_ok=True)
    results = []
    try:
        for c in a.configs:
            res = bench_config(c, a, work)
            if res is None:
                continue
            results.append(res)
            extra = "".join("-" + kv.replace("=", "_") for kv in a.dfg_set)
            if a.device == "cuda":
                extra = "-cuda" + ("-f32" if a.dtype == "f32" else "") + extra
            stem = os.path.join(a.out, f"{common['date']}-{machine['hostname']}-{c}{extra}")
            with open(stem + ".json", "w") as f:
                json.dump(dict(common, **res), f, indent=1)
                f.write("\n")
            with open(stem + ".md", "w") as f:
                f.write(f"# dfg vs PyTorch, {c}, {common['date']}, {machine['hostname']}\n\n"
                        f"dfg {common['git_commit']}, torch {torch_version} (BLAS: {a.torch_blas}), "
                        f"{a.threads} threads; {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB. "
                        f"Importing torch alone peaks at {common['torch_import_peak_rss_mb']} MiB RSS."
                        + (f" dfg compiled with --set {', --set '.join(a.dfg_set)}." if a.dfg_set else "")
                        + (f" Note: {a.note}." if a.note else "") + "\n\n")
                if a.device == "cuda":
                    f.write(f"GPU: {gpu['name']}, driver {gpu['driver']}, CUDA {gpu['cuda_driver']} (driver), torch's "
                            f"CUDA {tinfo.get('cuda')}; {a.dtype}; torch.compile mode {a.compile_mode}.\n\n")
                    f.write(bench_gpu.table([res], fmt3) + "\n\n" + notes(res) + "\n\n" + bench_gpu.NOTE + "\n")
                elif res.get("warm_start"):
                    f.write(varlen.table(res, fmt3) + "\n\nWhere dfg's step goes (mean ms per step over the timed "
                            "steps, from stage_ms; runs per step from stage_runs):\n\n" + varlen.stage_table(res) +
                            "\n\n" + varlen.notes(res) + "\n")
                else:
                    f.write(table([res]) + "\n\n" + notes(res) + "\n")
            print(f"wrote {stem}.json and .md", flush=True)
    finally:
        if a.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if results:
        print()
        fixed = [r for r in results if not r.get("warm_start")]
        if fixed:
            print(bench_gpu.table(fixed, fmt3) if a.device == "cuda" else table(fixed))
            print()
            for res in fixed:
                print(notes(res))
        for res in results:
            if res.get("warm_start"):
                print(f"{res['config']}:\n{varlen.table(res, fmt3)}\n\n{varlen.stage_table(res)}\n\n{varlen.notes(res)}")


if __name__ == "__main__":
    main()
