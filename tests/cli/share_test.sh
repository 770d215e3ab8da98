#!/usr/bin/env bash
# share_test.sh - each group's prompt cached once (issue 41, item 2): with share_prompts the decode
# KV cache holds a group's prompt once (P rows of max_prompt_length - 1 columns) and each row's own
# columns (N rows of max_completion_length + 1), and decode attends with attention_shared_cached.
#   usage: share_test.sh /path/to/dfg /path/to/source-tree
#   - the planner's KV cache category (dfg inspect --json, the most bytes at any step) of the plan
#     with max_prompt_length 48, max_completion_length 16, num_generations 8 is at most 0.45 of the
#     same plan's with share_prompts=0 (copied cache: the same before this change, ratio 1);
#   - one GRPO step with share_prompts on and off samples the same completions (every row's
#     tokens, as log_completions prints them; the same completion_mask) and the same sampler's and
#     policy's log-probs within 1e-6, on the CPU and under --emulate-gpu; the runs use left-padded
#     prompts in two prompt buckets (the task's 4 tokens in 48 columns), and decode_tail=40 makes
#     the tail (whose gathered rows find their prompts through prompt_of) run, which the metrics'
#     stage_runs must show; rollout_sub_batches=2 too;
#   - with batch_invariant (CPU) both plans dump the same bits of the rollout and the forward (mask,
#     log-probs, advantages, loss; the weights after the update differ in rounding: the training
#     backward of a shared prompt sums its gradient in another order), and the sampler's log-probs
#     equal the training forward's (sampling_logp_difference 0);
#   - a tools plan (multi-turn episodes; the extend stage writes the tools' answers into the rows'
#     own parts): its KV cache smaller with share_prompts, and share on and off give the same
#     episodes (tokens, completion_mask, tool_mask, rewards) with log-probs within 1e-6, the same
#     bits with batch_invariant.
set -u
DFG=$1
SRC=$2
GRPO="$SRC/examples/grpo/grpo.c"
ST=("python3" "$SRC/tests/cli/st_tool.py")
. "$(dirname "$0")/testlib.sh"
testlib_begin share-test
check() { local what=$1; shift; if "$@" >check.txt 2>&1; then ok "$what: $(tail -1 check.txt)"; else cat check.txt; fail "$what"; fi; }
SHAPE=(--set max_prompt_length=48 --set max_completion_length=16 --set num_generations=8)
LOG=(--set log_completions=true --set logging_steps=1)

# ---------------------------------------------------------------- the planner's KV cache
for s in 1 0; do
    run "$DFG" compile "$GRPO" "${SHAPE[@]}" --set share_prompts=$s -o kv$s.dfg
    expect_rc 0 "compile share_prompts=$s"
    "$DFG" inspect kv$s.dfg --json >kv$s.json
done
check "KV cache with share_prompts at most 0.45 of the copied cache's" python3 - kv1.json kv0.json <<'PY'
import json, sys
on, off = (json.load(open(f))["categories"]["kv_cache"] for f in sys.argv[1:3])
r = on["max_bytes"] / off["max_bytes"]
print("KV cache %d of %d bytes at most (ratio %.3f), %d of %d at the peak" % (on["max_bytes"], off["max_bytes"], r,
      on["peak_bytes"], off["peak_bytes"]))
sys.exit(0 if r <= 0.45 else 1)
PY
expect_in kv1.dfg "kv.0.k_prompt" "the shared plan's prompt part is a state of its own"

# ---------------------------------------------------------------- the same rollouts, on and off
# rollouts A B WHAT TOL: the same completions (log_completions' lines), completion_mask, and the
# sampler's and policy's log-probs within TOL (0: the same bits for every dumped tensor)
rollouts() {
    if diff <(grep '^completion step' "$1.txt") <(grep '^completion step' "$2.txt") >diff.txt &&
        [ "$(grep -c '^completion step' "$1.txt")" -gt 0 ]; then
        ok "$3: the same completions ($(grep -c '^completion step' "$1.txt") rows)"
    else
        fail "$3: the completions differ"; head -5 diff.txt
    fi
    check "$3: the same log-probs" python3 - "$1.st" "$2.st" "$4" "$SRC/tests/cli" <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
import st_tool
a, _ = st_tool.read(sys.argv[1]); b, _ = st_tool.read(sys.argv[2]); tol = float(sys.argv[3])
bad = []
if tol == 0:  # the rollout and the forward; the backward of a shared prompt sums in another order
    keys = ("completion_mask", "sampling_logps", "logp", "advantages", "loss")
    bad = [k for k in keys if a[k] != b[k]]
    print("%s: the same bits" % ", ".join(keys) if not bad else "differ: " + ", ".join(bad))
    sys.exit(1 if bad else 0)
if a["completion_mask"][2] != b["completion_mask"][2]: bad.append("completion_mask")
worst = 0.0
for k in ("sampling_logps", "logp"):
    d = max(abs(x - y) for x, y in zip(st_tool.values(a[k]), st_tool.values(b[k])))
    worst = max(worst, d)
    if d > tol: bad.append("%s %.3g" % (k, d))
print("completion_mask equal, log-probs within %.3g" % worst if not bad else "differ: " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
}
# step NAME ARGS...: compile and run one step of the plan with ARGS, into NAME.txt, NAME.st, NAME.jsonl
step() {
    local name=$1 emu=""; shift
    if [ "$1" = "--emulate-gpu" ]; then emu=--emulate-gpu; shift; fi
    run "$DFG" compile "$GRPO" "$@" -o "$name.dfg"
    expect_rc 0 "compile $name"
    run "$DFG" run "$name.dfg" --steps 1 $emu --dump "$name.st" --metrics "$name.jsonl"
    expect_rc 0 "run $name"
    cp out.txt "$name.txt"
}
for s in 1 0; do step cpu$s "${SHAPE[@]}" "${LOG[@]}" --set decode_tail=40 --set share_prompts=$s; done
rollouts cpu1 cpu0 "CPU, share_prompts on and off" 1e-6
check "the steps ran the tail and the narrower prompt bucket" python3 - cpu1.jsonl <<'PY'
import json, sys
runs = json.loads(open(sys.argv[1]).readline())["stage_runs"]
print("stage runs: decode.tail %s, prefill[p24] %s" % (runs.get("decode.tail"), runs.get("prefill[p24]")))
sys.exit(0 if runs.get("decode.tail", 0) > 0 and runs.get("prefill[p24]", 0) == 1 else 1)
PY
for s in 1 0; do step sub$s "${SHAPE[@]}" "${LOG[@]}" --set rollout_sub_batches=2 --set share_prompts=$s; done
rollouts sub1 sub0 "rollout_sub_batches=2, share_prompts on and off" 1e-6
for s in 1 0; do step inv$s "${SHAPE[@]}" "${LOG[@]}" --set batch_invariant=true --set share_prompts=$s; done
rollouts inv1 inv0 "batch_invariant, share_prompts on and off" 0
check "batch_invariant: the sampler's log-probs are the training forward's" \
    python3 -c 'import json,sys; v=json.loads(open(sys.argv[1]).readline())["sampling/sampling_logp_difference/max"]; print("max difference", v); sys.exit(v != 0)' inv1.jsonl

# ---------------------------------------------------------------- multi-turn episodes (tools)
# The tools' answers go into the rows' own parts (the extend stage, ops/nn/nn_extend.c): a dataset
# plan with left-padded prompts of 4 to 6 tokens, G 8, whose environment (answer_env.py) answers
# each row's first turn with 10 tokens (extend's widest copy of 8 takes two passes). Share on and
# off: the KV cache smaller on; the same episodes (tokens, both masks, rewards) with log-probs
# within 1e-6, and batch-invariant the same bits.
python3 -c "
import json
V = '_\$0123456789+-=*@'
for a, b in [(12, 34), (5, 678), (9, 1), (23, 45)]:
    print(json.dumps({'prompt_ids': [V.index(c) for c in '%d*%d=' % (a, b)]}))" >calc.jsonl
TOOLS=(--set dataset=calc.jsonl --set tools=multiply --set reward_funcs=turns --set vocab_size=17 --set prompts_per_step=4
       --set num_generations=8 --set max_prompt_length=8 --set max_completion_length=16)
ENV=(--seed 3 --threads 1 --reward-cmd "python3 $SRC/tests/cli/messages_reward.py" --env-cmd "python3 $SRC/tests/cli/answer_env.py")
for inv in false true; do
    for s in 1 0; do
        run "$DFG" compile "$GRPO" "${TOOLS[@]}" --set batch_invariant=$inv --set share_prompts=$s -o tools$inv$s.dfg
        expect_rc 0 "compile the tools plan (batch_invariant=$inv, share_prompts=$s)"
        run "$DFG" run tools$inv$s.dfg --steps 1 "${ENV[@]}" --dump tools$inv$s.st --metrics tools$inv$s.jsonl
        expect_rc 0 "run it"
    done
done
"$DFG" inspect toolsfalse1.dfg --json >tkv1.json
"$DFG" inspect toolsfalse0.dfg --json >tkv0.json
check "tools: the KV cache with share_prompts smaller" python3 - tkv1.json tkv0.json <<'PY'
import json, sys
on, off = (json.load(open(f))["categories"]["kv_cache"]["max_bytes"] for f in sys.argv[1:3])
print("KV cache %d of %d bytes at most (ratio %.3f)" % (on, off, on / off))
sys.exit(0 if on < off else 1)
PY
check "tools: share_prompts on and off, the same episodes" python3 - toolsfalse1.st toolsfalse0.st \
    toolstrue1.st toolstrue0.st toolsfalse1.jsonl "$SRC/tests/cli" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[6])
import st_tool
m = json.loads(open(sys.argv[5]).readline())
bad = [] if m["tools/call_frequency"] > 0 and m["stage_runs"].get("extend", 0) == 2 else \
    ["the tools answered %g calls a row, extend ran %s times" % (m["tools/call_frequency"], m["stage_runs"].get("extend"))]
a, _ = st_tool.read(sys.argv[1]); b, _ = st_tool.read(sys.argv[2])
bad += [k for k in ("tokens", "completion_mask", "tool_mask", "rewards") if a[k] != b[k]]
worst = max(max(abs(x - y) for x, y in zip(st_tool.values(a[k]), st_tool.values(b[k]))) for k in ("sampling_logps", "logp"))
if worst > 1e-6: bad.append("log-probs %.3g apart" % worst)
a, _ = st_tool.read(sys.argv[3]); b, _ = st_tool.read(sys.argv[4])
keys = ("tokens", "completion_mask", "tool_mask", "rewards", "sampling_logps", "logp", "advantages", "loss")
bad += ["batch-invariant " + k for k in keys if a[k] != b[k]]
print("differ: " + ", ".join(bad) if bad else "%g calls a row, extend ran twice; tokens, masks, rewards equal, log-probs "
      "within %.3g; batch-invariant the same bits" % (m["tools/call_frequency"], worst))
sys.exit(1 if bad else 0)
PY

# ---------------------------------------------------------------- the emulated GPU
SMALL=(--target cuda --set max_prompt_length=12 --set max_completion_length=6 --set num_generations=4
       --set prompts_per_step=2)
for s in 1 0; do step gpu$s --emulate-gpu "${SMALL[@]}" "${LOG[@]}" --set share_prompts=$s; done
expect_in gpu1.dfg "attention_shared_cached" "the emulated plan decodes with attention_shared_cached"
rollouts gpu1 gpu0 "--emulate-gpu, share_prompts on and off" 1e-6
testlib_end
