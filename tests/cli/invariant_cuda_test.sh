#!/bin/bash
# Batch-invariant CUDA kernels end to end (ctest "invariant_cuda", label "c"; docs/gpu.md): a GRPO
# plan for cuda with batch_invariant=true and num_iterations=2 runs a step on the emulated GPU
# (--emulate-gpu: the same .cu kernels, compiled for the SIMT emulator), for gpt2, llama, qwen2
# and qwen3, in f32 and bf16. Decode samples each token from one new row against the KV cache;
# the training forward scores the whole sequence: with ops/cuda/invariant.cu's kernels every
# scored token's log-prob is the same float both ways (the dump's logp and sampling_logps, bit
# for bit), the sampling/ metrics say 0 and ratio 1 every step, and no old stage runs (the
# sampler's log-probs are the old ones); with temperature 0.7 too (cuda bf16 and cpu f32). Decode reads the KV cache that holds each group's prompt
# once (share_prompts, attention_shared_cached's batch-invariant form): the plans hold the prompt
# part as a state, and the planner's KV cache is the default cuda plan's, below the copied cache's.
# The same plan without batch_invariant runs its old stage and differs in rounding: the property
# is the kernels', not the test's.
set -u
DFG=$1
SRC=$2
. "$(dirname "$0")/testlib.sh"
testlib_begin invariant-cuda-test
check() { local what=$1; shift; if "$@" >check.txt 2>&1; then ok "$what: $(tail -1 check.txt)"; else cat check.txt; fail "$what"; fi; }

declare -A ARCH
ARCH[gpt2]="--set n_embd=64"
SMALL="--set hidden_size=64 --set num_hidden_layers=2 --set num_attention_heads=4 --set num_key_value_heads=2
       --set intermediate_size=128"
ARCH[llama]="--set model_type=llama $SMALL"
ARCH[qwen2]="--set model_type=qwen2 $SMALL"
ARCH[qwen3]="--set model_type=qwen3 $SMALL --set head_dim=16"
STEP=(--set max_completion_length=8 --set num_iterations=2)
COMMON=(--target cuda "${STEP[@]}")

bits_check() { python3 "$SRC/tests/cli/invariant_check.py" "$@"; } # METRICS DUMP: bit for bit, no old stage, metrics 0

for arch in gpt2 llama qwen2 qwen3; do
  for dt in float32 bfloat16; do
    # shellcheck disable=SC2086
    run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" --set torch_dtype=$dt \
      --set batch_invariant=true -o inv.dfg
    expect_rc 0 "$arch $dt: compile the batch-invariant cuda plan"
    expect_in inv.dfg "kv.0.k_prompt" "$arch $dt: the decode cache holds each group's prompt once"
    run "$DFG" run inv.dfg --emulate-gpu --steps 1 --threads 1 --metrics inv.jsonl --dump inv.safetensors
    expect_rc 0 "$arch $dt: a step on the emulated GPU"
    check "$arch $dt: sampler = training forward bit for bit, no old stage" bits_check inv.jsonl inv.safetensors
  done
done

# temperature 0.7: decode scales the bf16 logits by 1/T inside the fused log-prob (the fuse pass
# folds the scale in), in f32 as training's linear_logprob scales its logits; the CPU (f32) too
for target in cuda cpu; do
  dt=bfloat16 emu=(--emulate-gpu)
  [ $target = cpu ] && dt=float32 emu=()
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[qwen2]} "${STEP[@]}" --target $target --set torch_dtype=$dt \
    --set batch_invariant=true --set temperature=0.7 -o temp.dfg
  expect_rc 0 "qwen2 $dt temperature 0.7: compile for $target"
  run "$DFG" run temp.dfg "${emu[@]}" --steps 1 --threads 1 --metrics temp.jsonl --dump temp.safetensors
  expect_rc 0 "qwen2 $dt temperature 0.7: a step on $target"
  check "qwen2 $dt temperature 0.7 on $target: sampler = training forward bit for bit" bits_check temp.jsonl temp.safetensors
done

# the planner's KV cache: the batch-invariant plan's is the shared layout's (the default plan's),
# below the copied cache's (share_prompts=0)
kv_bytes() { "$DFG" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["categories"]["kv_cache"]["max_bytes"])'; }
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" --set batch_invariant=true -o kv_inv.dfg
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" -o kv_default.dfg
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" --set batch_invariant=true \
  --set share_prompts=0 -o kv_copied.dfg
inv=$(kv_bytes kv_inv.dfg) def=$(kv_bytes kv_default.dfg) cop=$(kv_bytes kv_copied.dfg)
if [ -n "$inv" ] && [ "$inv" = "$def" ] && [ "$inv" -lt "$cop" ]; then
  ok "KV cache of the batch-invariant plan: $inv bytes = the default plan's, copied cache $cop"
else
  fail "KV cache: batch-invariant '$inv', default '$def', copied '$cop' bytes"
fi

# the control: without batch_invariant the sampler's log-probs differ from training's in rounding
# (cuBLAS-shaped GEMMs and the tiled attention order sums by the shapes), and the old stage runs
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" --set torch_dtype=float32 -o ref.dfg
run "$DFG" run ref.dfg --emulate-gpu --steps 1 --threads 1 --metrics ref.jsonl
expect_rc 0 "gpt2 f32 without batch_invariant: 1 step on the emulated GPU"
check "without batch_invariant: the old stage runs and the log-probs differ in rounding" python3 - ref.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
d = [l["sampling/sampling_logp_difference/max"] for l in m]
print(f"max |logp - sampling_logp| per step {d}, stage runs {m[0]['stage_runs']}")
assert all(0 < v <= 1e-5 for v in d), d
assert all(any(k.startswith("old") for k in l["stage_runs"]) for l in m)
PY
testlib_end
