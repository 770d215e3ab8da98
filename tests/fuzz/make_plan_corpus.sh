#!/usr/bin/env bash
# Writes the seed files of tests/fuzz/corpus/plan: small plan files (a few KB each, no host stages,
# so no embedded shared object) compiled by `dfg compile` from the pipelines in tests/fuzz/plans
# with different compile options. The seeds are committed; run this again when the plan format's
# version (runtime/formats/planfile.h) changes, or to change them. The regression seeds (regress_*.dfg,
# inputs that once crashed the loader, kept byte for byte) are left alone.
# Usage: tests/fuzz/make_plan_corpus.sh [BUILD_DIR]   (default build; it must hold the dfg tool)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
out="$root/tests/fuzz/corpus/plan"
mkdir -p "$out"
cd "$root" # so that the plans record the pipelines as tests/fuzz/plans/X.c
seed() { # NAME PIPELINE [dfg compile options...]
    local name="$1" pipeline="tests/fuzz/plans/$2.c"
    shift 2
    "$build/dfg" compile "$pipeline" -o "$out/$name.dfg" "$@" >/dev/null
    echo "$out/$name.dfg: $(stat -c %s "$out/$name.dfg") bytes ($pipeline${*:+ $*})"
}
seed mlp mlp
seed mlp_nofuse_order mlp --no-fuse --keep-order --set hidden=6 --set eval=false
seed mlp_cuda_noreuse mlp --target cuda --no-reuse --align 128 --set batch=2
seed accum accum
seed accum_cuda_budget accum --target cuda --memory-budget 14500 --set micro_batches=2
seed gpt_decode gpt_decode
