#!/usr/bin/python3
"""lr_schedule_golden.py - dfg's learning-rate schedules against transformers' own.

1. adamw_schedule_dump (dfg_nn_adamw_step_scheduled) runs K AdamW steps on random weights and
   gradients under each lr_scheduler_type (linear, cosine, constant, constant_with_warmup), with
   and without a warm-up (warmup_steps, warmup_ratio); the reference is torch.optim.AdamW in
   float64 (weight decay on the matrix only, as dfg and the Trainer group them) stepped by
   transformers.get_scheduler with TrainingArguments.get_warmup_steps' warm-up. Each step's rate
   agrees to 1e-7 relative, the weights after K steps to 3e-6 (float32 AdamW against float64 over up
   to 37 steps: 1.26e-6 was measured once at 1e-6's bound).
2. examples/grpo/grpo.c compiled with max_steps (and num_iterations 2, an sft warm-up) and run to
   max_steps: the logged learning_rate of each GRPO step is the scheduler's rate of that step's
   first update (optimizer step (s - 1 - sft_steps) x num_iterations of the schedule), 1e-7.

Exits 77 (skip) when torch or transformers cannot be imported, unless DFG_REQUIRE_HF=1."""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden_common  # noqa: E402
from golden_common import run_seed, unavailable  # noqa: E402

PROG = "lr_schedule_golden"
HF_VERSION = "4.40.2"
RATE_TOL, WEIGHT_TOL = 1e-7, 3e-6

# (name, settings): K = max_steps steps each; lr 3e-3 and weight decay 0.1 unless set
DRIVER_CASES = [
    ("linear", {"lr_scheduler_type": "linear"}),
    ("linear_warmup_steps", {"lr_scheduler_type": "linear", "warmup_steps": "3"}),
    ("linear_both", {"lr_scheduler_type": "linear", "warmup_steps": "2", "warmup_ratio": "0.5"}),  # steps win
    ("default_linear", {}),  # max_steps alone: TRL's linear
    ("cosine", {"lr_scheduler_type": "cosine"}),
    ("cosine_warmup_ratio", {"lr_scheduler_type": "cosine", "warmup_ratio": "0.25"}),
    ("constant", {"lr_scheduler_type": "constant"}),
    ("constant_warmup_ignored", {"lr_scheduler_type": "constant", "warmup_steps": "3"}),
    ("constant_with_warmup", {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": "3"}),
    ("constant_with_warmup_ratio", {"lr_scheduler_type": "constant_with_warmup", "warmup_ratio": "0.3"}),
    ("cosine_long", {"lr_scheduler_type": "cosine", "warmup_steps": "5", "max_steps": "37",
                     "learning_rate": "1e-6"}),
]

# the GRPO program: a few small steps of the reverse task
GRPO_SETS = ["prompts_per_step=2", "num_generations=2", "max_completion_length=4", "learning_rate=3e-3"]
GRPO_CASES = [
    ("grpo_linear_warmup", {"lr_scheduler_type": "linear", "warmup_steps": "2", "max_steps": "6"}),
    ("grpo_cosine_iter2", {"lr_scheduler_type": "cosine", "warmup_ratio": "0.2", "max_steps": "5",
                           "num_iterations": "2"}),
    ("grpo_default_sft", {"max_steps": "6", "sft_steps": "2", "warmup_steps": "1"}),
]


def setup(site):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
        unavailable(PROG, f"/usr/bin/python3 cannot import torch and numpy ({e})")
    if not os.path.isdir(site):
        unavailable(PROG, f"no transformers directory {site}")
    sys.path.insert(0, site)
    try:
        import transformers
    except Exception as e:  # noqa: BLE001
        unavailable(PROG, f"cannot import transformers from {site} ({type(e).__name__}: {e})")
    if transformers.__version__ != HF_VERSION:
        unavailable(PROG, f"{site} holds transformers {transformers.__version__}, not {HF_VERSION}")


def warmup_steps(sets, total):
    """TrainingArguments.get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio x total)."""
    from types import SimpleNamespace
    from transformers import TrainingArguments
    # the method itself on the two fields it reads: TrainingArguments() wants accelerate
    args = SimpleNamespace(warmup_steps=int(sets.get("warmup_steps", 0)), warmup_ratio=float(sets.get("warmup_ratio", 0.0)))
    return TrainingArguments.get_warmup_steps(args, total)


def scheduler_rates(sets, total, n, workdir, params=None, lr=None):
    """The rate of each of n optimizer steps (0-based) under transformers' scheduler; with params
    (a list of (tensor, weight_decay)), an AdamW over them whose step(k) the caller drives."""
    import torch
    from transformers import get_scheduler
    lr = float(sets.get("learning_rate", "3e-3")) if lr is None else lr
    groups = params or [(torch.zeros(1, dtype=torch.float64, requires_grad=True), 0.0)]
    opt = torch.optim.AdamW([{"params": [p], "weight_decay": wd} for p, wd in groups], lr=lr, betas=(0.9, 0.999),
                            eps=1e-8)
    name = sets.get("lr_scheduler_type", "linear" if total > 0 else "constant")
    sched = get_scheduler(name, opt, num_warmup_steps=warmup_steps(sets, total), num_training_steps=total)
    return opt, sched


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def driver_case(driver, workdir, name, sets, seed):
    import numpy as np
    import torch
    from gpt2_golden import st_read, st_write
    sets = dict({"learning_rate": "3e-3", "weight_decay": "0.1", "max_steps": "12"}, **sets)
    K = int(sets["max_steps"])
    rng = np.random.default_rng(seed)
    w0 = rng.normal(0, 1, (3, 4)).astype(np.float32)
    b0 = rng.normal(0, 1, (5,)).astype(np.float32)
    gw = rng.normal(0, 1, (K, 3, 4)).astype(np.float32)
    gb = rng.normal(0, 1, (K, 5)).astype(np.float32)
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    st_write(os.path.join(d, "in.safetensors"), {"w": w0, "b": b0, "grads.w": gw, "grads.b": gb})
    r = subprocess.run([driver, d] + [f"{k}={v}" for k, v in sets.items()], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return False, f"{name}: adamw_schedule_dump exited {r.returncode}: {r.stdout}{r.stderr}".strip()
    got, _ = st_read(os.path.join(d, "dfg_out.safetensors"))
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
    opt, sched = scheduler_rates(sets, K, K, d, params=[(w, float(sets["weight_decay"])), (b, 0.0)])
    worst_rate = 0.0
    for k in range(K):
        want = opt.param_groups[0]["lr"]
        worst_rate = max(worst_rate, rel(float(got["lr"][k]), want))
        w.grad = torch.tensor(gw[k], dtype=torch.float64)
        b.grad = torch.tensor(gb[k], dtype=torch.float64)
        opt.step()
        sched.step()
    ew = float(np.max(np.abs(got["w"] - w.detach().numpy()) / np.maximum(1.0, np.abs(w.detach().numpy()))))
    eb = float(np.max(np.abs(got["b"] - b.detach().numpy()) / np.maximum(1.0, np.abs(b.detach().numpy()))))
    moved = float(np.max(np.abs(got["w"] - w0)))
    ok = worst_rate <= RATE_TOL and ew <= WEIGHT_TOL and eb <= WEIGHT_TOL and moved > 0
    return ok, f"{name}: {K} steps, rate {worst_rate:.2e}, w {ew:.2e}, b {eb:.2e}" + ("" if ok else "  FAIL")


def grpo_case(dfg, source, workdir, name, sets):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    plan, metrics = os.path.join(d, "plan.dfg"), os.path.join(d, "metrics.jsonl")
    cmd = [dfg, "compile", source, "-o", plan]
    for s in GRPO_SETS + [f"{k}={v}" for k, v in sets.items()]:
        cmd += ["--set", s]
    max_steps = int(sets["max_steps"])
    for c in (cmd, [dfg, "run", plan, "--max-steps", str(max_steps), "--quiet", "--metrics", metrics]):
        r = subprocess.run(c, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return False, f"{name}: {' '.join(c[:2])} exited {r.returncode}: {r.stdout}{r.stderr}".strip()
    with open(metrics) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    sft, mu = int(sets.get("sft_steps", 0)), int(sets.get("num_iterations", 1))
    total = (max_steps - sft) * mu
    opt, sched = scheduler_rates(sets, total, total, d, lr=3e-3)
    rates = []
    for _ in range(total):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    worst, bad = 0.0, []
    for x in lines:
        s = x["step"]
        if s <= sft:
            continue
        want = rates[(s - 1 - sft) * mu]
        got = x.get("learning_rate")
        if got is None:
            bad.append(f"step {s}: no learning_rate")
            continue
        worst = max(worst, rel(got, want))
        if rel(got, want) > RATE_TOL:
            bad.append(f"step {s}: {got!r} vs {want!r}")
    ok = len(lines) == max_steps and not bad
    if len(lines) != max_steps:
        bad.append(f"{len(lines)} steps logged, want {max_steps}")
    return ok, f"{name}: {len(lines)} steps, rate {worst:.2e}" + ("" if ok else "  FAIL: " + "; ".join(bad))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("--dfg", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--hf-site", default=os.path.join(HERE, "..", "..", ".deps", "hf-" + HF_VERSION))
    a = ap.parse_args()
    setup(os.environ.get("DFG_HF_SITE") or a.hf_site)
    seed = run_seed(PROG)
    if seed is None:
        return 1
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    results = [driver_case(a.driver, a.workdir, n, s, seed + i) for i, (n, s) in enumerate(DRIVER_CASES)]
    results += [grpo_case(a.dfg, a.source, a.workdir, n, s) for n, s in GRPO_CASES]
    return golden_common.summary(PROG, results, "configurations", t0, seed)


if __name__ == "__main__":
    sys.exit(main())
