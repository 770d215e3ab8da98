#!/usr/bin/env bash
# test.sh - builds dfg and runs the whole test suite:
#   1. the release build and every ctest suite (unit, gradcheck, golden vs PyTorch, planfile, CLI, fuzz replay,
#      the GRPO learning tests), side by side: the learning tests are bounded by steps, not seconds;
#   2. the C tests again in a build with AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the libFuzzer harnesses (tests/fuzz: the safetensors reader, the sharded-model index,
#      config.json, the plan loader, the prompt dataset reader, a reward program's answer) for
#      DFG_FUZZ_SECONDS each (default 60; 0 skips them), side by side; any finding fails.
# GPU tests report "skipped" on machines without an NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

tools/deps.sh --test
# the golden test against Hugging Face transformers (golden_hf) fails instead of skipping when
# transformers cannot be imported: deps.sh has just installed it
export DFG_REQUIRE_HF=1

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDFG_SANITIZE=ON
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -L c --output-on-failure -j"$jobs")

fuzz_secs="${DFG_FUZZ_SECONDS:-60}"
if [ "$fuzz_secs" != 0 ]; then
  tests/fuzz/run.sh "$fuzz_secs"
fi
echo "test.sh: all suites passed"
