"""bench_gpu.py - the GPU half of bench.py (`bench.py --device cuda`).

On the GPU the harness runs three programs, alternating: dfg's cuda plan (`dfg compile
--target cuda`, run with `dfg run` on the GPU: stages replayed as CUDA Graphs), grpo_torch.py
eager (`--device cuda`) and grpo_torch.py with torch.compile (`--device cuda --compile`). The
memory figure is the device's, not RSS: for dfg the `device memory:` line of `dfg run` (measured
with cudaMemGetInfo against the free bytes once the context exists), for torch the same
measurement made inside grpo_torch.py, beside its allocator's peak (max_memory_allocated).
Host RSS is still recorded for both.
"""
import json
import re
import subprocess
import sys

TORCH_IMPLS = ("torch", "torch.compile")
IMPLS = ("dfg",) + TORCH_IMPLS

# steps, warm-up and runs per config on the GPU (the CPU's defaults are in bench.CONFIGS); the
# warm-up holds dfg's first replay and torch.compile's compilations
CUDA_DEFAULTS = {
    "tiny": dict(steps=200, warmup=20, runs=3),
    "small": dict(steps=20, warmup=3, runs=3),
    "gpt2-124m": dict(steps=10, warmup=3, runs=3),
    "qwen2.5-0.5b": dict(steps=10, warmup=3, runs=3),  # not run on a GPU yet
}

# dfg run's header line on a device backend (tools/cli_run.c, print_header)
DEVICE_LINE = re.compile(r"^device memory: (\d+) bytes allocated .*= the planned arena (\d+) "
                         r"\+ kernel and GEMM workspace (\d+)", re.M)


def suffix(impl):
    """The suffix of an impl's keys in the results: _torch, _torch_compile."""
    return "_" + impl.replace(".", "_")


def pair_key(impl):
    """pair_speedups (torch, the CPU results' name), pair_speedups_torch_compile."""
    return "pair_speedups" + ("" if impl == "torch" else suffix(impl))


def gpu_info():
    """nvidia-smi's view of GPU 0 (name, driver, memory, compute capability, the CUDA version the
    driver supports); None where nvidia-smi is missing or lists no GPU."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                            "--format=csv,noheader"], capture_output=True, text=True)
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
    except OSError:
        return None
    rows = [l for l in r.stdout.splitlines() if l.strip()]
    if r.returncode or not rows:
        return None
    f = [x.strip() for x in rows[0].split(",")]
    m = re.search(r"CUDA Version: *([0-9.]+)", head)
    return dict(name=f[0], driver=f[1] if len(f) > 1 else None, memory=f[2] if len(f) > 2 else None,
                compute_cap=f[3] if len(f) > 3 else None, cuda_driver=m.group(1) if m else None, count=len(rows))


def torch_cuda(python):
    """What `python`'s torch offers: version, its CUDA, whether it sees a device, torch.compile."""
    code = ("import json, torch; print(json.dumps(dict(version=torch.__version__, cuda=torch.version.cuda, "
            "available=torch.cuda.is_available(), compile=hasattr(torch, 'compile'))))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return dict(version=None, available=False, error=(r.stderr or r.stdout).strip()[-500:])


def check(python):
    """Exits with a message naming what is missing for --device cuda; returns (gpu, torch info)."""
    gpu = gpu_info()
    if gpu is None:
        sys.exit("bench: --device cuda, but nvidia-smi is missing or lists no GPU")
    t = torch_cuda(python)
    if not t.get("available"):
        sys.exit(f"bench: --device cuda needs a PyTorch with CUDA; {python} has torch {t.get('version')} "
                 f"(CUDA {t.get('cuda')}) and torch.cuda.is_available() is False "
                 f"(Debian's python3-torch is CPU-only){': ' + t['error'] if t.get('error') else ''}")
    if not t.get("compile"):
        sys.exit(f"bench: torch {t.get('version')} has no torch.compile (PyTorch 2.0+)")
    return gpu, t


def dfg_device_memory(stdout_path):
    """(device bytes measured, planned arena, workspace) from dfg run's output, or None."""
    try:
        with open(stdout_path) as f:
            m = DEVICE_LINE.search(f.read())
    except OSError:
        return None
    return tuple(int(x) for x in m.groups()) if m else None


def add_device(m, impl, out_path, torch_summary):
    """Adds the device memory of one run to its record m."""
    if impl == "dfg":
        dm = dfg_device_memory(out_path)
        if dm is None:
            raise SystemExit(f"bench: no 'device memory:' line in {out_path}: did dfg run on the GPU?")
        m["device_bytes"], m["planned_bytes"] = dm[0], dm[1] + dm[2]
    else:
        m["device_bytes"] = torch_summary.get("device_bytes_measured")
        m["planned_bytes"] = torch_summary.get("peak_device_allocated_bytes")  # the allocator's peak
        m["peak_device_reserved_bytes"] = torch_summary.get("peak_device_reserved_bytes")
        m["device"] = torch_summary.get("device")


def summarize(summary, per, stats):
    """The device figures and the ratios of every torch impl to dfg, added to a mode's summary."""
    for impl, ms in per.items():
        summary[impl]["device_mb"] = stats([m["device_bytes"] / 2**20 for m in ms])
        summary[impl]["planned_or_allocator_peak_mb"] = stats([m["planned_bytes"] / 2**20 for m in ms])
    for o in TORCH_IMPLS:
        summary["device_ratio_dfg_over" + suffix(o)] = (summary["dfg"]["device_mb"]["median"] /
                                                        summary[o]["device_mb"]["median"])


def table(results, fmt3):
    head = ("| config | mode | impl | step ms median [min-max of runs] | completion tok/s | device MiB measured | "
            "planned (dfg) / allocator peak (torch) MiB | host RSS MiB | impl ms / dfg ms (per pair) | "
            "dfg device / impl device | background CPU % |")
    lines = [head, "|" + "---|" * 11]
    for res in results:
        for mode, sm in res["modes"].items():
            for impl in IMPLS:
                x = sm[impl]
                fm = "{:.2f}" if x["step_ms"]["median"] < 100 else "{:.0f}"
                ratio = ("", "")
                if impl != "dfg":
                    ps = sm[pair_key(impl)]
                    ratio = (f"{sm['speedup' + suffix(impl) + '_ms_over_dfg_ms']:.2f} ({ps['min']:.2f}-{ps['max']:.2f})",
                             f"{sm['device_ratio_dfg_over' + suffix(impl)]:.2f}")
                lines.append(f"| {res['config']} | {mode} | {impl} | {fmt3(x['step_ms'], fm)} | "
                             f"{fmt3(x['tokens_per_s'], '{:.0f}')} | {fmt3(x['device_mb'])} | "
                             f"{fmt3(x['planned_or_allocator_peak_mb'])} | {fmt3(x['peak_rss_mb'])} | "
                             f"{ratio[0]} | {ratio[1]} | {x['background_cpu_pct']['max']:.0f} |")
    return "\n".join(lines)


NOTE = ("Device memory measured: cudaMemGetInfo's free bytes once the process's CUDA context exists minus "
        "the free bytes later (dfg: after its one allocation; torch: after the last step, its caching "
        "allocator keeping its peak), so both include library workspaces and exclude the context. "
        "dfg's planned figure is the plan's arena plus its kernel and GEMM workspace; torch's is "
        "torch.cuda.max_memory_allocated. dfg runs bf16 weights with fp32 masters; torch runs "
        "autocast bf16 with fp32 weights (--dtype f32: both fp32).")
