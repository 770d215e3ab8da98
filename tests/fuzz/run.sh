#!/usr/bin/env bash
# Runs the libFuzzer harnesses (ASan + UBSan) for SECONDS each (default 60), side by side (one
# core each); CI runs this from tools/test.sh.
# Usage: tests/fuzz/run.sh [SECONDS] [HARNESS...]
#   HARNESS: safetensors (the safetensors reader), weights_index (the index of a sharded model
#   directory), model_config (a model directory's config.json as settings), plan (the plan
#   loader and the compiler), dataset (a JSONL prompt dataset), reward_answer (a reward program's
#   answer line), config (a TRL config file, dfg compile --config); default all seven.
#   env: CC (default clang), DFG_FUZZ_BUILD (default build-fuzz).
# New interesting inputs go to BUILD/fuzz-HARNESS/corpus (the committed seeds in
# tests/fuzz/corpus/HARNESS stay small); each run's output is in BUILD/fuzz-HARNESS/log. A crash,
# leak, timeout (> 10 s for one input) or allocation over 512 MiB leaves its input in
# BUILD/fuzz-HARNESS/artifacts, and the script names it and exits 1.
# Replay one input: BUILD/tests/fuzz/fuzz_HARNESS INPUT (or fuzz_HARNESS_replay DIR in any build).
set -euo pipefail
secs="${1:-60}"
[ $# -gt 0 ] && shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(safetensors weights_index model_config plan dataset reward_answer config)
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${DFG_FUZZ_BUILD:-$root/build-fuzz}"
targets=()
for h in "${harnesses[@]}"; do
    [ -d "$root/tests/fuzz/corpus/$h" ] || { echo "run.sh: unknown harness '$h' (safetensors, weights_index, model_config, plan, dataset, reward_answer, config)" >&2; exit 2; }
    targets+=("fuzz_$h")
done

# warnings in unrelated files must not stop a fuzzing run; the gcc builds keep -Werror
CC="${CC:-clang}" cmake -S "$root" -B "$build" -DDFG_FUZZ=ON -DDFG_WERROR=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

extra_plan=()
extra_weights_index=()
extra_model_config=(-dict="$root/tests/fuzz/model_config.dict")
extra_safetensors=(-dict="$root/tests/fuzz/safetensors.dict")
extra_dataset=(-dict="$root/tests/fuzz/dataset.dict")
extra_reward_answer=()
extra_config=()
pids=()
for h in "${harnesses[@]}"; do
    work="$build/fuzz-$h"
    mkdir -p "$work/corpus" "$work/artifacts"
    extra="extra_$h[@]"
    "$build/tests/fuzz/fuzz_$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${!extra}" \
        "$work/corpus" "$root/tests/fuzz/corpus/$h" >"$work/log" 2>&1 &
    pids+=($!)
done

failed=0
for i in "${!harnesses[@]}"; do
    h="${harnesses[$i]}" work="$build/fuzz-${harnesses[$i]}"
    status=0
    wait "${pids[$i]}" || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" || true)
    cov=$(grep -a -o 'cov: [0-9]* ft: [0-9]*' "$work/log" | tail -1 || true)
    if [ "$status" -ne 0 ]; then
        failed=1
        grep -a -E '^==[0-9]+==|ERROR|invariant violated|runtime error|Test unit written to' "$work/log" | head -20 >&2 || true
        input=$(sed -n 's/.*Test unit written to //p' "$work/log" | tail -1)
        echo "fuzz_$h: FAILED (exit $status) after ${runs:-?} inputs; input: ${input:-none written}; log: $work/log" >&2
    else
        echo "fuzz_$h: no failures in ${secs}s (${runs:-?} inputs, $cov, corpus $(ls "$work/corpus" | wc -l) new files)"
    fi
done
exit $failed
