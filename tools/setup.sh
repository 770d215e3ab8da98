#!/usr/bin/env bash
# setup.sh - installs what is missing, builds dfg, and runs the main job: the GRPO pipeline
# (examples/grpo/grpo.c, defaults: a 2-layer GPT-2 policy learns to reverse 3-digit strings from
# verifiable rewards alone) compiled into a plan and trained on the CPU, printing the mean
# reward every 100 steps. Checkpoints go to build/grpo_ckpt (a new run replaces it; continue a
# run with: build/dfg run build/grpo.dfg --resume build/grpo_ckpt --steps N).
#   tools/setup.sh [STEPS]     (default 3000 steps, about a minute on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3000}
jobs=$(nproc 2>/dev/null || echo 2)

tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"

build/dfg compile examples/grpo/grpo.c -o build/grpo.dfg
rm -rf build/grpo_ckpt
build/dfg run build/grpo.dfg --steps "$steps" --every 100 --checkpoint-dir build/grpo_ckpt \
  --metrics build/grpo_metrics.jsonl
