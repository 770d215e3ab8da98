#!/usr/bin/env bash
# eval_tools_test.sh - evaluation of a tools plan on eval_dataset (TRL's eval loop runs the same tool
# loop; docs/agents.md "Evaluation"), end to end on examples/grpo/grpo.c with an environment
# program (tests/cli/eval_env.py) that plays its tool from each row's fields: every eval batch's
# rows reset with their eval row's index and fields; the eval metrics (eval_tools/call_frequency and
# eval_tools/failure_frequency among them) equal TRL's recomputed from the program's own log of the
# episodes (eval_tools_check.py), with num_generations_eval below num_generations and a partial last
# eval batch; an evaluation inside a run equals --eval-only of the same weights; and a run trains bit
# for bit the same with evaluations as without (checkpoint and every training metric), on the CPU
# and on the emulated GPU (--target cuda, --emulate-gpu) with a decode tail (decode_tail=3).
#   usage: eval_tools_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
GRPO=$SRC/examples/grpo/grpo.c
HERE=$SRC/tests/cli
ST=("python3" "$HERE/st_tool.py")
. "$HERE/testlib.sh"
testlib_begin eval-tools-test
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
REWARD="$PY $HERE/messages_reward.py"
ENV="$PY $HERE/eval_env.py"

# prompts in the digit vocabulary; the eval rows' fields differ from the training rows' (their
# calls, failures and bonus), so a reset with the wrong row's fields shows in the metrics
"$PY" - <<'PYEOF'
import json
V = "_$0123456789+-=*@"
ids = lambda a, b: [V.index(c) for c in f"{a}*{b}="]
with open("train.jsonl", "w") as f:
    for a, b in [(12, 34), (56, 78), (90, 11), (23, 45), (31, 7), (8, 66)]:
        f.write(json.dumps({"prompt_ids": ids(a, b), "max_calls": 2, "bonus": 0.0, "split": "train"}) + "\n")
with open("eval.jsonl", "w") as f:
    for i, (a, b) in enumerate([(21, 43), (65, 87), (9, 19), (32, 54), (77, 3)]):
        f.write(json.dumps({"prompt_ids": ids(a, b), "max_calls": 1 + i % 3, "fail": i % 2 == 1, "bonus": 1.0 + i,
                            "split": "eval"}) + "\n")
PYEOF
BASE=(--set dataset=train.jsonl --set tools=multiply --set reward=external --set reward_funcs=turns,EvalEnv
      --set vocab_size=17 --set prompts_per_step=3 --set num_generations=4 --set max_completion_length=16
      --set eval_dataset=eval.jsonl --set num_generations_eval=2 --set per_device_eval_batch_size=4)

# ---------------------------------------------------------------- --eval-only: metrics = TRL's, recomputed
run "$DFG" compile "$GRPO" -o only.dfg "${BASE[@]}"
expect_rc 0 "compile a tools plan with eval_dataset"
rm -f only.log
EVAL_ENV_LOG=only.log run "$DFG" run only.dfg --eval-only --threads 1 --seed 3 --reward-cmd "$REWARD" --env-cmd "$ENV" \
  --metrics only.jsonl
expect_rc 0 "--eval-only on a tools plan"
expect_in out.txt "eval_tools/call_frequency" "... prints the tools' eval metrics"
run "$PY" "$HERE/eval_tools_check.py" only.jsonl only.log eval.jsonl P=3 G=4 GE=2 E=4
if [ "$rc" -eq 0 ]; then ok "eval metrics equal TRL's over the program's episodes ($(tail -1 out.txt))"
else fail "eval metrics differ from TRL's recomputed: $(tail -1 out.txt)"; fi
calls=$(jget only.jsonl 'd["eval_tools/call_frequency"]')
if "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$calls"; then ok "the evaluation called the tool ($calls a row)"
else fail "no tool call in the evaluation: the check above proves little"; fi

# ---------------------------------------------------------------- training is untouched
run "$DFG" compile "$GRPO" -o with.dfg "${BASE[@]}" --set eval_strategy=steps --set eval_steps=2 --set eval_on_start=true
expect_rc 0 "compile with eval_strategy=steps"
run "$DFG" compile "$GRPO" -o without.dfg "${BASE[@]}"
rm -f with.log
EVAL_ENV_LOG=with.log run "$DFG" run with.dfg --steps 3 --threads 1 --seed 3 --reward-cmd "$REWARD" --env-cmd "$ENV" \
  --checkpoint-dir cw --metrics with.jsonl
expect_rc 0 "3 steps evaluating before step 1 and after step 2"
n_evals=$(grep -c '"eval_reward"' with.jsonl)
if [ "$n_evals" = 2 ] && grep -q '^eval 0:' out.txt && grep -q '^eval 2:' out.txt; then ok "evaluations at steps 0 and 2"
else fail "evaluations at steps 0 and 2: $n_evals lines"; fi
run "$DFG" run without.dfg --steps 3 --threads 1 --seed 3 --reward-cmd "$REWARD" --env-cmd "$ENV" --checkpoint-dir co \
  --metrics without.jsonl
expect_rc 0 "3 steps without evaluations"
run "${ST[@]}" same cw/checkpoint.safetensors co/checkpoint.safetensors
expect_rc 0 "the checkpoint after 3 steps is bit for bit the one without evaluations"
grep -v '"eval_reward"' with.jsonl >train_only.jsonl
same_step train_only.jsonl without.jsonl "a tools run with evaluations" exact
run "$PY" "$HERE/eval_tools_check.py" with.jsonl with.log eval.jsonl P=3 G=4 GE=2 E=4 NTH=1
if [ "$rc" -eq 0 ]; then ok "the evaluation after step 2 equals TRL's over its episodes ($(tail -1 out.txt))"
else fail "the evaluation after step 2 differs from TRL's recomputed: $(tail -1 out.txt)"; fi

# the evaluation before step 1 reads the same weights as --eval-only of the same seed: the same episodes
"$PY" - >cmp.txt 2>&1 <<'PY'
import json
a = [json.loads(l) for l in open("with.jsonl") if '"eval_reward"' in l][0]
b = [json.loads(l) for l in open("only.jsonl") if '"eval_reward"' in l][0]
bad = [k for k in a if k != "eval_runtime" and a[k] != b.get(k)]
print("eval_tools/call_frequency %s; differ: %s" % (a["eval_tools/call_frequency"], bad))
raise SystemExit(1 if bad or len(a) != len(b) else 0)
PY
if [ $? -eq 0 ]; then ok "eval_on_start = --eval-only of the same seed ($(cat cmp.txt))"
else fail "eval_on_start and --eval-only differ: $(cat cmp.txt)"; fi

# ---------------------------------------------------------------- the same on the emulated GPU, with the decode tail
CUDA=(--target cuda --set torch_dtype=float32 --set decode_tail=3) # and the decode tail
run "$DFG" compile "$GRPO" -o gw.dfg "${BASE[@]}" "${CUDA[@]}" --set eval_strategy=steps --set eval_steps=2 \
  --set eval_on_start=true
expect_rc 0 "compile the tools plan with evaluations for cuda"
run "$DFG" compile "$GRPO" -o gwo.dfg "${BASE[@]}" "${CUDA[@]}"
rm -f gw.log
EVAL_ENV_LOG=gw.log run "$DFG" run gw.dfg --emulate-gpu --steps 3 --threads 1 --seed 3 --reward-cmd "$REWARD" \
  --env-cmd "$ENV" --checkpoint-dir gcw --metrics gw.jsonl
expect_rc 0 "--emulate-gpu: 3 steps evaluating before step 1 and after step 2"
run "$DFG" run gwo.dfg --emulate-gpu --steps 3 --threads 1 --seed 3 --reward-cmd "$REWARD" --env-cmd "$ENV" \
  --checkpoint-dir gco --metrics gwo.jsonl
run "${ST[@]}" same gcw/checkpoint.safetensors gco/checkpoint.safetensors
expect_rc 0 "--emulate-gpu: the checkpoint is bit for bit the one without evaluations"
run "$PY" "$HERE/eval_tools_check.py" gw.jsonl gw.log eval.jsonl P=3 G=4 GE=2 E=4 NTH=1
if [ "$rc" -eq 0 ]; then ok "--emulate-gpu: the evaluation after step 2 equals TRL's over its episodes ($(tail -1 out.txt))"
else fail "--emulate-gpu: the evaluation differs from TRL's recomputed: $(tail -1 out.txt)"; fi

# ---------------------------------------------------------------- what is still refused
run "$DFG" compile "$GRPO" -o x.dfg "${BASE[@]}" --set async_rollouts=1
expect_rc 2 "eval_dataset with async_rollouts=1"
expect_in err.txt "async_rollouts=1" "... says so"

testlib_end
