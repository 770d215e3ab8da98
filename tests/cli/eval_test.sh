#!/usr/bin/env bash
# eval_test.sh - evaluation on eval_dataset (TRL's eval loop; docs/cli.md "Evaluation"), end to end on
# examples/grpo/grpo.c: the metrics of --eval-only equal TRL's formulas recomputed from the completions
# the reward program saw (eval_check.py), with num_generations_eval below num_generations, a partial
# last eval batch, filler rows, None and unscorable rows, under both multi_objective_aggregation
# modes; a run trains bit for bit the same with evaluations as without; an evaluation inside a run
# equals --eval-only of that step's checkpoint; the refusals and a malformed eval file, one line each.
#   usage: eval_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
GRPO=$SRC/examples/grpo/grpo.c
REWARD="python3 $SRC/tests/cli/eval_reward.py"
ST=("python3" "$SRC/tests/cli/st_tool.py")
. "$(dirname "$0")/testlib.sh"
testlib_begin eval-test

python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 40 --seed 5 -o train.jsonl >/dev/null
python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 13 --seed 9 -o eval.jsonl >/dev/null
BASE=(--set dataset=train.jsonl --set reward_funcs=digits,short --set prompts_per_step=4 --set num_generations=4
      --set max_completion_length=5)

# ---------------------------------------------------------------- metrics = TRL's, recomputed
for agg in sum_then_normalize normalize_then_sum; do
  run "$DFG" compile "$GRPO" -o "$agg.dfg" "${BASE[@]}" --set eval_dataset=eval.jsonl --set num_generations_eval=2 \
    --set per_device_eval_batch_size=6 --set multi_objective_aggregation=$agg
  expect_rc 0 "compile with eval_dataset, $agg"
  rm -f log.jsonl
  EVAL_REWARD_LOG=log.jsonl run "$DFG" run "$agg.dfg" --eval-only --threads 1 --reward-cmd "$REWARD" --metrics "$agg.jsonl"
  expect_rc 0 "--eval-only, $agg"
  expect_in out.txt "eval 0:  eval_reward " "... prints an eval line"
  run python3 "$SRC/tests/cli/eval_check.py" "$agg.jsonl" log.jsonl eval.jsonl P=4 G=4 GE=2 E=6 AGG=$agg SCALE=group
  if [ "$rc" -eq 0 ]; then ok "$agg: eval metrics equal TRL's over the completions ($(tail -1 out.txt))"
  else fail "$agg: eval metrics differ from TRL's recomputed"; fi
done

# ---------------------------------------------------------------- training is untouched
run "$DFG" compile "$GRPO" -o with.dfg "${BASE[@]}" --set eval_dataset=eval.jsonl --set eval_strategy=steps \
  --set eval_steps=3 --set eval_on_start=true
expect_rc 0 "compile with eval_strategy=steps"
run "$DFG" compile "$GRPO" -o without.dfg "${BASE[@]}" --set eval_dataset=eval.jsonl
expect_in out.txt "evaluates only when asked (--eval-only)" "eval_strategy=no with an eval_dataset says when it evaluates"
run "$DFG" run with.dfg --steps 4 --threads 1 --reward-cmd "$REWARD" --checkpoint-dir cw --metrics with.jsonl
expect_rc 0 "4 steps evaluating before step 1 and after step 3"
check_evals=$(grep -c '"eval_reward"' with.jsonl)
if [ "$check_evals" = 2 ] && grep -q '^eval 0:' out.txt && grep -q '^eval 3:' out.txt; then ok "evaluations at steps 0 and 3"
else fail "evaluations at steps 0 and 3: $check_evals lines"; fi
run "$DFG" run without.dfg --steps 4 --threads 1 --reward-cmd "$REWARD" --checkpoint-dir co --metrics without.jsonl
run "${ST[@]}" same cw/checkpoint.safetensors co/checkpoint.safetensors
expect_rc 0 "the checkpoint after 4 steps is bit for bit the one without evaluations"
grep -v '"eval_reward"' with.jsonl >train_only.jsonl
same_step train_only.jsonl without.jsonl "a run with evaluations" exact

# ---------------------------------------------------------------- an evaluation reads the trained state only
run "$DFG" run with.dfg --steps 3 --threads 1 --reward-cmd "$REWARD" --checkpoint-dir c3 --metrics run3.jsonl
run "$DFG" run with.dfg --eval-only --resume c3 --threads 1 --reward-cmd "$REWARD" --metrics only3.jsonl
expect_rc 0 "--eval-only --resume"
python3 - <<'PY' >cmp.txt 2>&1
import json
a = [json.loads(l) for l in open("run3.jsonl") if '"eval_reward"' in l][-1]
b = [json.loads(l) for l in open("only3.jsonl") if '"eval_reward"' in l][-1]
skip = {"eval_runtime"}
bad = [k for k in a if k not in skip and a[k] != b.get(k)]
print("step %s vs %s; differ: %s" % (a["step"], b["step"], bad))
raise SystemExit(1 if bad or len(a) != len(b) else 0)
PY
if [ $? -eq 0 ]; then ok "the evaluation after step 3 = --eval-only of step 3's checkpoint ($(cat cmp.txt))"
else fail "in-run and --eval-only evaluations differ: $(cat cmp.txt)"; fi

# ---------------------------------------------------------------- refusals, one line each
run "$DFG" compile "$GRPO" -o x.dfg "${BASE[@]}" --set eval_strategy=steps
expect_rc 2 "eval_strategy=steps without eval_dataset"
expect_in err.txt "eval_strategy=steps evaluates on eval_dataset, which is not set" "... says what is missing"
run "$DFG" compile "$GRPO" -o x.dfg "${BASE[@]}" --set eval_dataset=eval.jsonl --set eval_strategy=steps \
  --set per_device_eval_batch_size=7
expect_rc 2 "per_device_eval_batch_size not a multiple of num_generations_eval (TRL's check)"
expect_in err.txt "per_device_eval_batch_size 7 must be a multiple of num_generations_eval 4" "... names both"
run "$DFG" compile "$GRPO" -o x.dfg "${BASE[@]}" --set eval_dataset=eval.jsonl --set num_generations_eval=8
expect_rc 2 "num_generations_eval above num_generations"
run "$DFG" compile "$GRPO" -o x.dfg --set eval_dataset=eval.jsonl
expect_rc 2 "eval_dataset with a built-in task"
cp eval.jsonl bad.jsonl
sed -i '4s/.*/{"prompt_ids": [5, "x"]}/' bad.jsonl
run "$DFG" compile "$GRPO" -o x.dfg "${BASE[@]}" --set eval_dataset=bad.jsonl
expect_rc 2 "a malformed eval file at compile"
expect_in err.txt "bad.jsonl:4:" "... names the file and line"
cp eval.jsonl live.jsonl
run "$DFG" compile "$GRPO" -o live.dfg "${BASE[@]}" --set eval_dataset=live.jsonl --set eval_strategy=steps
cp bad.jsonl live.jsonl
run "$DFG" run live.dfg --steps 2 --threads 1 --reward-cmd "$REWARD"
expect_rc 1 "a malformed eval file at run time"
expect_in err.txt "live.jsonl:4:" "... stops before training, naming the line"
if grep -q '^step ' out.txt; then fail "... no step ran"; else ok "... no step ran"; fi
run "$DFG" run without.dfg --steps 1 --eval-only --reward-cmd "$REWARD"
expect_rc 2 "--eval-only with --steps"
run "$DFG" compile "$GRPO" -o plain.dfg "${BASE[@]}"
run "$DFG" run plain.dfg --eval-only --reward-cmd "$REWARD"
expect_rc 2 "--eval-only on a plan without eval_dataset"
expect_in err.txt "has no eval_dataset" "... says so"

run "${ST[@]}" rollouts r.safetensors 16 9 15 3 --group 4 --prompt-len 4
run "$DFG" run normalize_then_sum.dfg --steps 1 --rollouts r.safetensors
expect_rc 2 "normalize_then_sum on a rollout file (it holds no per-function values)"
expect_in err.txt "normalize_then_sum normalises each reward function's values" "... says why"

testlib_end
