#!/usr/bin/python3
"""seed_plans.py - the seeds' scenarios (the five write-ups docs/seeds.md works through) planned by dfg, before any GPU time.

Compiles examples/grpo/grpo.c for each configuration of a scenario with `dfg compile --target cuda`
(and `--memory-budget` where a row asks for rematerialisation), reads `dfg inspect --json`, and
prints one markdown table: the arena the run would allocate, what is persistent, the KV cache of
the rollout, the activations at the peak, the stage of the peak, and what remat recomputed. A
configuration that cannot fit is printed with the compiler's own message (the smallest plan it
found). Nothing runs on a device: these are the plans' figures, which the runtime allocates
exactly (README, "GPU status": measured on an H100 at GPT-2 124M to within 0.62 MiB).

  tools/seed_plans.py [--dfg build/dfg] [--scenario seed002]   (about 10 minutes on 2 cores: the
                                                                remat searches take most of it)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30

# Seed 002: Qwen3-1.7B (vocabulary 151,936), 8 generations, 2048 generated tokens. The seed's
# batch_size 32 is read as prompts per step (32 x 8 = 256 sequences); its prompts' length is not
# given: 256 tokens here. One 80 GB GPU: budget 78 GiB, leaving room for the CUDA context. "device"
# is the arena plus the device workspace that follows it in the same allocation.
SEED002 = dict(
    title="Seed 002: Qwen3-1.7B GRPO, 8 generations x 2048 tokens, one 80 GB GPU (budget 78 GiB)",
    model="docs/models/qwen3-1.7b",
    base=dict(num_generations=8, max_prompt_length=256, max_completion_length=2048, beta=0.04),
    budget="78GiB",
    rows=[
        dict(prompts_per_step=32, gradient_accumulation_steps=1),
        dict(prompts_per_step=32, gradient_accumulation_steps=32),
        dict(prompts_per_step=32, gradient_accumulation_steps=32, remat=True),
        dict(prompts_per_step=16, gradient_accumulation_steps=1),
        dict(prompts_per_step=16, gradient_accumulation_steps=4, remat=True),
        dict(prompts_per_step=16, gradient_accumulation_steps=8),
        dict(prompts_per_step=16, gradient_accumulation_steps=8, remat=True),
        dict(prompts_per_step=16, gradient_accumulation_steps=16),
        dict(prompts_per_step=8, gradient_accumulation_steps=4, remat=True),
        dict(prompts_per_step=8, gradient_accumulation_steps=8),
    ],
)
SCENARIOS = {"seed002": SEED002}


def gib(b):
    return "%.1f" % (b / GiB)


def plan_row(dfg, sc, row, work):
    settings = dict(sc["base"], **{k: v for k, v in row.items() if k != "remat"})
    name = "_".join("%s%s" % (k[:3], v) for k, v in sorted(settings.items()))
    plan = os.path.join(work, name + ".dfg")
    cmd = [dfg, "compile", os.path.join(ROOT, "examples/grpo/grpo.c"), "--target", "cuda", "-o", plan,
           "--set", "model=" + os.path.join(ROOT, sc["model"])]
    for k, v in settings.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    if row.get("remat"):
        cmd += ["--memory-budget", sc["budget"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        msg = r.stderr.strip().splitlines()[-1]
        return settings, row.get("remat"), None, msg[msg.find("remat:"):] if "remat:" in msg else msg
    r = subprocess.run([dfg, "inspect", plan, "--json"], capture_output=True, text=True, check=True)
    return settings, row.get("remat"), json.loads(r.stdout), None


def category(d, name, key):
    return d["categories"].get(name, {}).get(key, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dfg", default=os.path.join(ROOT, "build", "dfg"))
    ap.add_argument("--scenario", default="seed002", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    sc = SCENARIOS[a.scenario]
    print("### " + sc["title"])
    print()
    print("| prompts x G | micro-batches | remat | device GiB | fits | persistent GiB | KV cache GiB (rollout) "
          "| rollout peak GiB | activations at peak GiB | peak in | recomputed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for row in sc["rows"]:
            s, remat, d, err = plan_row(a.dfg, sc, row, work)
            head = "| %d x %d | %d | %s " % (s["prompts_per_step"], s["num_generations"], s["gradient_accumulation_steps"],
                                              "budget " + sc["budget"] if remat else "off")
            if d is None:
                print(head + "| - | no | %s |||||" % err.replace("|", "/"))
                continue
            budget = 78 * GiB
            ws = d["device_workspace"]["gpu"]["total_bytes"]  # kernel scratch and cuBLASLt, after the arena
            total = d["arena_bytes"] + ws
            rollout_peak = max(st["peak_live_bytes"] for st in d["stages"] if st["name"] in ("prefill", "decode"))
            rem = d["remat"]
            recomputed = "%d nodes, +%.2f%% FLOPs" % (rem["recomputed_nodes"], 100.0 * rem["extra_flops"] / d["flops"]) \
                if rem and rem.get("recomputed_nodes") else "-"
            print(head + "| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                gib(total), "yes" if total <= budget else "no", gib(d["persistent_bytes"]),
                gib(category(d, "kv_cache", "max_bytes")), gib(rollout_peak),
                gib(category(d, "activations", "peak_bytes")), d["peak_stage"], recomputed))


if __name__ == "__main__":
    sys.exit(main())
