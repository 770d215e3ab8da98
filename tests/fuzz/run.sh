#!/usr/bin/env bash
# Fuzzes the safetensors reader with libFuzzer (ASan + UBSan) for SECONDS (default 60).
# Usage: tests/fuzz/run.sh [SECONDS]   (env: CC, default clang; DFG_FUZZ_BUILD, default build-fuzz)
# New interesting inputs go to BUILD/fuzz-safetensors/corpus (the committed seeds stay small);
# a crash leaves its input in BUILD/fuzz-safetensors/artifacts and the script exits non-zero.
set -euo pipefail
secs="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${DFG_FUZZ_BUILD:-$root/build-fuzz}"
# warnings in unrelated files must not stop a fuzzing run; the gcc builds keep -Werror
CC="${CC:-clang}" cmake -S "$root" -B "$build" -DDFG_FUZZ=ON -DDFG_WERROR=OFF >/dev/null
cmake --build "$build" --target fuzz_safetensors -j"$(nproc)"
work="$build/fuzz-safetensors"
mkdir -p "$work/corpus" "$work/artifacts"
status=0
"$build/tests/fuzz/fuzz_safetensors" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    -dict="$root/tests/fuzz/safetensors.dict" \
    "$work/corpus" "$root/tests/fuzz/corpus/safetensors" || status=$?
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
    echo "fuzz_safetensors: found a failure (exit $status); inputs in $work/artifacts" >&2
    exit 1
fi
echo "fuzz_safetensors: no failures in ${secs}s"
