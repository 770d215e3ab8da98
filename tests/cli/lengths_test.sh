#!/usr/bin/env bash
# lengths_test.sh - GRPO pays for the tokens that exist (issue 31): decode ends once every row has
# its EOS (decode_early_exit), once at most 8 rows are live the rest of the loop runs on them
# alone (decode_tail), and scoring and training run at the narrowest length bucket that holds
# the batch (length_buckets). All must change nothing but the work done:
#   usage: lengths_test.sh /path/to/dfg /path/to/source-tree
# For GPT-2, Llama and Qwen3 policies (tiny, warm-started by a supervised run so that completions
# end early), on the CPU and on the emulated GPU (--emulate-gpu, float32: decode's chunks of runs
# between flag reads, captured graphs per bucket), three steps of
#   - the default plan (early exit, the tail on 8 rows, auto buckets: widths 12 and 24 of max_completion_length 24,
#     and auto length_chunks: the training pass in 8 chunks of one group, sorted by length) and
#   - the fixed-shape plan (decode_early_exit=false length_buckets=1)
# dump the same log-probs (policy, sampler), advantages, loss, gradient norm and metrics within
# 1e-6 of each tensor's largest value (other summation orders: chunks, narrower widths), and the
# same weights within 1e-5 (three AdamW updates turn those orders into relative differences of
# ~1e-6 in small updates). The metrics JSONL's stage_runs must show that the default plan did end decode
# early, run the tail and train at the narrower width (else the comparison proves nothing), and
# the fixed plan that it did not. The sampler's log-probs equal the training forward's within 1e-5
# (f32). An untrained policy with decode_tail=40 runs the tail to the last column (on the emulated
# GPU its chunks overshoot it) and still equals the fixed plan. With batch_invariant (CPU) the
# sampler's log-probs equal the training forward's in every bit and num_iterations=2 runs no
# old stage, except on a rollout file. A dataset's left-padded prompts run prefill, scoring and
# training at the narrowest prompt width that holds the batch's (prompt_buckets).
set -u
DFG=$1
SRC=$2
ST=("python3" "$SRC/tests/cli/st_tool.py")
. "$(dirname "$0")/testlib.sh"
testlib_begin lengths-test
check() { local what=$1; shift; if "$@" >check.txt 2>&1; then ok "$what: $(tail -1 check.txt)"; else cat check.txt; fail "$what"; fi; }

declare -A ARCH
ARCH[gpt2]="--set n_embd=64"
ARCH[llama]="--set model_type=llama --set hidden_size=64 --set num_hidden_layers=2 --set num_attention_heads=4
             --set num_key_value_heads=2 --set intermediate_size=128"
ARCH[qwen3]="--set model_type=qwen3 --set hidden_size=64 --set num_hidden_layers=2 --set num_attention_heads=4
             --set num_key_value_heads=2 --set intermediate_size=128 --set head_dim=16"
COMMON=(--set max_completion_length=24 --set adam_epsilon=1e-3)
FIXED=(--set decode_early_exit=false --set length_buckets=1)
# the dumps hold the weights too: compared on their own, at 1e-5 (three AdamW updates turn the
# gradient sums' other order over chunks into relative differences of ~1e-6 in small updates)
WEIGHTS=(--except h. --except wte --except wpe --except ln_f --except model. --except lm_head
         --except sampling/sampling_logp_difference) # |logp - sampler's|: rounding itself, ~1e-7, no value to compare

# stage_runs over the steps of a metrics file: did decode stop early / the narrow bucket train?
runs_check() { # FILE EXPECT(early|fixed)
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
decode = [l["stage_runs"].get("decode", 0) for l in lines]
narrow = sum(1 for l in lines if "train.0[12]" in l["stage_runs"])
wide = sum(1 for l in lines if "train.0" in l["stage_runs"])
tail = [l["stage_runs"].get("decode.tail", 0) for l in lines]
print(f"decode runs per step {decode} (then on the live rows alone {tail}), narrow-bucket steps {narrow}, "
      f"full-width steps {wide}")
if sys.argv[2] == "early":
    assert min(decode) < 24, "decode never ended early"
    assert max(tail) > 0, "the decode loop's tail never ran on the live rows alone"
    assert narrow >= 1, "the narrow bucket never trained"
else:
    assert decode == [24] * len(lines) and narrow == 0 and wide == len(lines) and max(tail) == 0, \
        "the fixed plan changed shape"
PY
}

# compare A B WHAT: two plans' 3 steps from the same weights: dumps within 1e-5, weights 1e-5. Not
# 1e-6 (before TRL 1.10's settings): the sampler's correction (TRL's default, on) multiplies the loss
# by exp of a sequence's summed log-prob differences, which turns the two plans' rounding of the
# log-probs (1e-7 a token, up to 24 tokens) into up to 3.6e-6 of the ratios and the loss (measured)
compare() {
  check "$3: the same dumps (log-probs, sampler's, advantages, loss, grad norm, metrics; 1e-5)" \
    "${ST[@]}" close "$1.safetensors" "$2.safetensors" 1e-5 "${WEIGHTS[@]}"
  check "$3: the same weights after 3 steps (1e-5)" "${ST[@]}" close "$1_w.safetensors" "$2_w.safetensors" 1e-5
}
steps3() { # PLAN WEIGHTS [--emulate-gpu]: 3 steps, metrics, dump and weights as PLAN.*
  run "$DFG" run "$1.dfg" --weights "$2" --steps 3 --threads 1 "${@:3}" --metrics "$1.jsonl" --dump "$1.safetensors" \
    --save "$1_w.safetensors"
  expect_rc 0 "3 GRPO steps, plan $1 ${*:3}"
}

for arch in gpt2 llama qwen3; do
  # a warm start: 80 supervised steps teach the answers' length (EOS after ~5 tokens)
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" --set sft_steps=80 -o sft_$arch.dfg
  run "$DFG" run sft_$arch.dfg --steps 80 --threads 1 --save w_$arch.safetensors
  expect_rc 0 "$arch: the supervised warm start"
  for target in cpu cuda; do
    dev=() tgt=(--target "$target")
    [ "$target" = cuda ] && dev=(--emulate-gpu) tgt+=(--set torch_dtype=float32)
    # shellcheck disable=SC2086
    run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" "${tgt[@]}" -o real.dfg
    # shellcheck disable=SC2086
    run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" "${FIXED[@]}" "${tgt[@]}" -o fixed.dfg
    expect_rc 0 "$arch $target: compile the fixed-shape plan"
    steps3 real w_$arch.safetensors "${dev[@]}"
    steps3 fixed w_$arch.safetensors "${dev[@]}"
    check "$arch $target: the default plan ends decode early and trains the narrow bucket" runs_check real.jsonl early
    check "$arch $target: the fixed plan runs every decode step at full width" runs_check fixed.jsonl fixed
    compare fixed real "$arch $target"
    check "$arch $target: the sampler's log-probs = the training forward's (1e-5)" python3 - real.jsonl <<'PY'
import json, sys
d = [json.loads(l)["sampling/sampling_logp_difference/max"] for l in open(sys.argv[1])]
print(f"max |logp - sampling_logp| per step: {d}")
assert all(v is not None and v <= 1e-5 for v in d), d
PY
    check "$arch $target: the sampling/ metrics of the last step, recomputed from its dump" \
      python3 - real.jsonl real.safetensors "$SRC/tests/cli" <<'PY'
import json, math, sys
sys.path.insert(0, sys.argv[3])
import st_tool
m = [json.loads(l) for l in open(sys.argv[1])][-1]
t, _ = st_tool.read(sys.argv[2])
lp, sp, mask = (st_tool.values(t[k]) for k in ("logp", "sampling_logps", "completion_mask"))
on = [(a, b) for a, b, w in zip(lp, sp, mask) if w]
diff = [abs(a - b) for a, b in on]
# the default vllm_importance_sampling_mode=sequence_mask: one ratio a sequence, exp of its summed
# log-ratio, 0 above vllm_importance_sampling_clip_max 3, over every sequence
T = t["completion_mask"][1][1]
rows = [sum(lp[i] - sp[i] for i in range(r * T, r * T + T) if mask[i]) for r in range(len(mask) // T)]
ratio = [math.exp(d) if math.exp(d) <= 3 else 0.0 for d in rows]
want = {"sampling_logp_difference/mean": sum(diff) / len(on), "sampling_logp_difference/max": max(diff),
        "importance_sampling_ratio/min": min(ratio), "importance_sampling_ratio/mean": sum(ratio) / len(ratio),
        "importance_sampling_ratio/max": max(ratio)}
bad = {k: (m["sampling/" + k], v) for k, v in want.items() if abs(m["sampling/" + k] - v) > 1e-6 * max(1, abs(v))}
print(f"{len(on)} scored tokens: {', '.join(f'{k} {v:.3g}' for k, v in want.items())}")
assert not bad, bad
PY
  done
done
# batch_invariant: decode and training compute each token's log-prob in one order (the CPU's
# batch-invariant kernels), so the sampler's log-probs are the training forward's bit for bit,
# and with num_iterations=2 they are the old log-probs: no old stage runs. Against the same plan
# without it (OpenBLAS, the old stage computing them) the step is the same within rounding.
INV=(--set num_iterations=2)
for arch in gpt2 llama qwen3; do
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" "${INV[@]}" --set batch_invariant=true -o inv.dfg
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${COMMON[@]}" "${INV[@]}" -o inv_ref.dfg
  expect_rc 0 "$arch: compile the num_iterations=2 plans with and without batch_invariant"
  steps3 inv w_$arch.safetensors
  steps3 inv_ref w_$arch.safetensors
  check "$arch batch_invariant: sampler = training forward bit for bit, no old stage" \
    python3 "$SRC/tests/cli/invariant_check.py" inv.jsonl inv.safetensors inv_ref.jsonl
  compare inv_ref inv "$arch batch_invariant, the sampler's log-probs as the old ones"
done
# a rollout file was not sampled by this step: the old stage runs
run "$DFG" compile "$SRC/examples/grpo/grpo.c" "${INV[@]}" --set batch_invariant=true -o inv_task.dfg
"${ST[@]}" rollouts r.safetensors 64 9 15 7 --group 8
run "$DFG" run inv_task.dfg --rollouts r.safetensors --steps 2 --threads 1 --metrics ro.jsonl
expect_rc 0 "batch_invariant, num_iterations=2, 2 steps on a rollout file"
check "batch_invariant on a rollout file: the old stage runs" python3 - ro.jsonl <<'PY'
import json, sys
runs = [json.loads(l)["stage_runs"] for l in open(sys.argv[1])]
print(f"stage runs per step: {runs}")
assert all(r.get("old", 0) == 1 and "decode" not in r for r in runs), runs
PY
# prompt buckets: a dataset's prompts are left-padded to its longest (33 tokens here); a batch
# whose prompts are all short runs prefill, scoring and training on the last 17 prompt columns
# (prompt_buckets auto: 17 and 33). Unshuffled rows: step 1's eight prompts have 2-4 tokens,
# step 2's 33, step 3's are mixed. Against prompt_buckets=1 (every step at 33 columns): the same
# dumps and weights (1e-6, 1e-5) for every architecture, CPU and emulated GPU; with
# batch_invariant (CPU) the dumps are the same floats.
python3 - "$SRC/examples/tasks/digits/make_dataset.py" <<'PY' >/dev/null 2>&1
import subprocess, sys
rows = {}
for d, n in ((1, 8), (2, 8), (3, 8), (32, 12)):
    subprocess.run([sys.executable, sys.argv[1], "--task", "reverse", "--digits", str(d), "--rows", str(n), "--seed", str(d),
                    "-o", f"p{d}.jsonl"], check=True)
    rows[d] = open(f"p{d}.jsonl").read().splitlines()
short = [r for i in range(8) for r in (rows[1][i], rows[2][i], rows[3][i])]
out = short[:8] + rows[32][:8] + short[8:12] + rows[32][8:12]
open("pb.jsonl", "w").write("\n".join(out) + "\n")
PY
cc -shared -fPIC -O2 -I "$SRC/runtime/host" -I "$SRC/graph" "$SRC/examples/rewards/digits_plugin.c" -o digits_plugin.so
PB=(--set dataset=pb.jsonl --set shuffle_dataset=false --set reward_funcs=exact,partial,format --set max_completion_length=8
    --set adam_epsilon=1e-3)
pb_runs() { # FILE: the prompt buckets each step ran
  python3 - "$1" <<'PY'
import json, sys
runs = [json.loads(l)["stage_runs"] for l in open(sys.argv[1])]
kinds = [sorted(k for k in r if k.startswith(("prefill", "train.0"))) for r in runs]
print(f"prefill and train copies per step: {kinds}")
assert kinds[0] == ["prefill[p17]", "train.0[p17]"] and kinds[1] == ["prefill", "train.0"], kinds
PY
}
for arch in gpt2 llama qwen3; do
  for target in cpu cuda; do
    dev=() tgt=(--target "$target")
    [ "$target" = cuda ] && dev=(--emulate-gpu) tgt+=(--set torch_dtype=float32)
    # shellcheck disable=SC2086
    run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${PB[@]}" "${tgt[@]}" -o pbk.dfg
    # shellcheck disable=SC2086
    run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${PB[@]}" "${tgt[@]}" --set prompt_buckets=1 -o pb1.dfg
    expect_rc 0 "$arch $target: compile the dataset plans with and without prompt buckets"
    for plan in pbk pb1; do
      run "$DFG" run $plan.dfg --steps 3 --threads 1 "${dev[@]}" --reward-lib ./digits_plugin.so --metrics $plan.jsonl \
        --dump $plan.safetensors --save ${plan}_w.safetensors
      expect_rc 0 "3 steps of $plan $arch $target"
    done
    check "$arch $target: short prompts ran at 17 columns, long ones at 33" pb_runs pbk.jsonl
    compare pb1 pbk "$arch $target prompt buckets"
    # the checking mode (poisoned lifetimes) over the copies: the caches' scope begins in
    # whichever prefill copy runs
    run env DFG_CHECK=1 "$DFG" run pbk.dfg --steps 3 --threads 1 "${dev[@]}" --reward-lib ./digits_plugin.so
    expect_rc 0 "$arch $target: DFG_CHECK=1 over the prompt buckets (the narrow copy, then the full width)"
  done
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${PB[@]}" --set batch_invariant=true -o pbk.dfg
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[$arch]} "${PB[@]}" --set batch_invariant=true --set prompt_buckets=1 -o pb1.dfg
  for plan in pbk pb1; do
    run "$DFG" run $plan.dfg --steps 1 --threads 1 --reward-lib ./digits_plugin.so --dump $plan.safetensors
    expect_rc 0 "1 batch-invariant step of $plan $arch"
  done
  check "$arch batch_invariant: the narrow prompt bucket's dumps are the full width's floats" \
    "${ST[@]}" same pb1.safetensors pbk.safetensors --except h. --except wte --except wpe --except ln_f --except model. --except lm_head
done
# a loss whose math depends on the micro-batches (bnpo: a token mean per micro-batch): the chunks
# are gradient_accumulation_steps' micro-batches, unsorted, run narrowest first
BNPO=(--set loss_type=bnpo --set gradient_accumulation_steps=4)
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" "${BNPO[@]}" -o bnpo.dfg
# shellcheck disable=SC2086
run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${COMMON[@]}" "${BNPO[@]}" "${FIXED[@]}" -o bnpo_fixed.dfg
expect_rc 0 "bnpo with 4 micro-batches: compile"
steps3 bnpo w_gpt2.safetensors
steps3 bnpo_fixed w_gpt2.safetensors
check "bnpo: the micro-batches ran at their own widths" python3 - bnpo.jsonl <<'PY'
import json, sys
runs = [json.loads(l)["stage_runs"] for l in open(sys.argv[1])]
print(f"train runs per step: {[{k: v for k, v in r.items() if k.startswith('train')} for r in runs]}")
assert all(sum(v for k, v in r.items() if k.startswith("train.0")) == 4 for r in runs), "4 micro-batches a step"
assert any("train.0[12]" in r for r in runs), "no micro-batch at the narrow width"
PY
compare bnpo_fixed bnpo "bnpo, 4 micro-batches as chunks"
# the tail to the last column: an untrained policy rambles, and with decode_tail=40 of the 64
# rows the tail takes over early and runs to max_completion_length (21: on the emulated GPU the
# batch loop ends after 8 or 16 runs, and the tail's chunks of 8 runs overshoot the last column;
# those runs must write nothing)
RAMBLE=(--set max_completion_length=21 --set adam_epsilon=1e-3)
for target in cpu cuda; do
  dev=() tgt=(--target "$target")
  [ "$target" = cuda ] && dev=(--emulate-gpu) tgt+=(--set torch_dtype=float32)
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${RAMBLE[@]}" "${tgt[@]}" --set decode_tail=40 -o ramble.dfg
  # shellcheck disable=SC2086
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" ${ARCH[gpt2]} "${RAMBLE[@]}" "${tgt[@]}" "${FIXED[@]}" -o ramble_fixed.dfg
  expect_rc 0 "untrained, decode_tail=40, $target: compile"
  for plan in ramble ramble_fixed; do
    run "$DFG" run $plan.dfg --steps 3 --threads 1 "${dev[@]}" --metrics $plan.jsonl --dump $plan.safetensors \
      --save ${plan}_w.safetensors
    expect_rc 0 "3 steps of $plan $target"
  done
  check "untrained $target: the tail reached the last column" python3 - ramble.jsonl <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
runs = [(l["stage_runs"].get("decode", 0), l["stage_runs"].get("decode.tail", 0)) for l in lines]
clipped = [l["completions/clipped_ratio"] for l in lines]
print(f"decode and tail runs per step {runs}, rows without EOS by 21 {clipped}")
assert any(d + t >= 21 and t > 0 for d, t in runs) and max(clipped) > 0, "no tail ran to the last column"
PY
  compare ramble_fixed ramble "untrained, the tail to the last column, $target"
done
testlib_end
