#!/usr/bin/env bash
# setup.sh - installs what is missing, builds dfg, and runs the main job: the GPT-2 example
# pipeline (examples/gpt2_train.c) compiled into a plan and trained on the CPU.
#   tools/setup.sh [STEPS]     (default 200 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
jobs=$(nproc 2>/dev/null || echo 2)

tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"

build/dfg compile examples/gpt2_train.c -o build/gpt2_train.dfg
build/dfg run build/gpt2_train.dfg --steps "$steps" --every 20 --save build/gpt2_train.safetensors
