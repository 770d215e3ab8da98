#!/usr/bin/env bash
# async_test.sh - one-step-off rollouts (async_rollouts=1, examples/grpo/grpo_async.c; ctest
# "async_cli"):
#   - the first step rolls out twice and trains on the first batch: with batch_invariant (the
#     sampler's log-probs equal training's bit for bit) its metrics and weights are the
#     synchronous plan's first step's exactly; its staleness is 0, every later step's 1, and
#     the later steps differ from the synchronous ones (they train on the batch before);
#   - the reward program is asked for the batches in order, each numbered by the step that trains
#     it (1 and 2 in the first step, then one a step); two requests are in flight from the second
#     pass of the first step on (batch k+2's goes out before batch k+1's answer is read), so the
#     program scores while the next batch rolls out;
#   - a checkpoint keeps the pending batch: 2 steps, then --resume for 2, equals 4 steps bit for
#     bit, with an external reward program; the resumed process sends the trained batch's request
#     again (the stopped one's program had it), the same request byte for byte;
#   - the plan holds both batches' buffers (dfg inspect's persistent bytes grow);
#   - what it cannot run is refused at compile time with one line (num_iterations > 1, tools,
#     sft_steps, max_staleness 0) and --rollouts files at run time (log_completions: completions_test.sh).
#   usage: async_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
. "$SRC/tests/cli/testlib.sh"
testlib_begin async
GRPO="$SRC/examples/grpo/grpo.c"
ST="python3 $SRC/tests/cli/st_tool.py"
TOY="python3 $SRC/tests/cli/toy_reward.py ok"
SMALL=(--set prompts_per_step=4 --set num_generations=4)
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }

# ---------------------------------------------------------------- the first step
run "$DFG" compile "$GRPO" -o sync.dfg "${SMALL[@]}" --set batch_invariant=true
expect_rc 0 "compile the synchronous plan (batch_invariant)"
run "$DFG" compile "$GRPO" -o async.dfg "${SMALL[@]}" --set batch_invariant=true --set async_rollouts=1
expect_rc 0 "compile the async plan (batch_invariant)"
run "$DFG" run sync.dfg --steps 1 --threads 1 --seed 7 --quiet --metrics sync.jsonl --save sync1.safetensors
expect_rc 0 "synchronous: 1 step"
run "$DFG" run async.dfg --steps 1 --threads 1 --seed 7 --quiet --metrics async1.jsonl --save async1.safetensors
expect_rc 0 "async: 1 step"
check "the first async step trains the synchronous first batch: the same weights, bit for bit" \
  $ST same sync1.safetensors async1.safetensors
python3 - sync.jsonl async1.jsonl >cmp.txt 2>&1 <<'PY'
import json, sys
s, a = (json.loads(open(f).readline()) for f in sys.argv[1:])
for k in ("reward", "loss", "grad_norm", "completions/mean_length"):
    assert s[k] == a[k], (k, s[k], a[k])
assert a["staleness"] == 0, a["staleness"]
assert "staleness" not in s, "a synchronous plan logs no staleness"
PY
if [ $? -eq 0 ]; then ok "... and the same reward, loss and grad_norm, with staleness 0"; else fail "first step"; cat cmp.txt; fi
run "$DFG" run sync.dfg --steps 3 --threads 1 --seed 7 --quiet --metrics sync3.jsonl
run "$DFG" run async.dfg --steps 3 --threads 1 --seed 7 --quiet --metrics async3.jsonl
expect_rc 0 "async: 3 steps"
python3 - sync3.jsonl async3.jsonl >cmp.txt 2>&1 <<'PY'
import json, sys
s, a = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert [r["staleness"] for r in a] == [0, 1, 1], [r["staleness"] for r in a]
assert a[0]["loss"] == s[0]["loss"]
assert a[1]["loss"] != s[1]["loss"], "step 2 trains the batch rolled out before step 1's update"
# the stale batch's sampler log-probs are the policy's before the last update: they differ now
assert a[1]["sampling/sampling_logp_difference/mean"] > 1e-4, a[1]["sampling/sampling_logp_difference/mean"]
assert a[0]["sampling/sampling_logp_difference/max"] == 0
PY
if [ $? -eq 0 ]; then ok "staleness 0, 1, 1; the later steps train the batch before"; else fail "staleness"; cat cmp.txt; fi

# ---------------------------------------------------------------- the reward program's requests
run "$DFG" compile "$GRPO" -o toy_async.dfg "${SMALL[@]}" --set reward=external --set reward_funcs=digits,short \
  --set async_rollouts=1
expect_rc 0 "compile the async plan with an external reward"
TOY_REWARD_LOG=$WORK/requests.log run "$DFG" run toy_async.dfg --steps 3 --threads 1 --quiet --reward-cmd "$TOY"
expect_rc 0 "async with a reward program: 3 steps"
check "the requests name the steps that train them: 1 2 (the first step), 3, 4 (the last step's, never trained)" \
  test "$(cut -d' ' -f1 requests.log | tr '\n' ' ')" = "1 2 3 4 "
# two in flight: a program that answers a request only once the next one has come (or its stdin
# ended) serves the run; one request at a time would wait for it until --reward-timeout
cat >lag_reward.py <<'PY'
import json, sys
print(json.dumps({"reward_funcs": ["digits", "short"]}), flush=True)
held = None
for line in sys.stdin:
    if held is not None:
        print(json.dumps({"rewards": [[0.5, 1.0]] * len(held["rows"])}), flush=True)
    held = json.loads(line)
PY
run "$DFG" run toy_async.dfg --steps 3 --threads 1 --quiet --reward-timeout 60 --reward-cmd "python3 $WORK/lag_reward.py"
expect_rc 0 "a program that answers request k once request k+1 has come serves 3 steps"

# every request as sent (tee keeps them), the toy program answering
TEE_TOY() { echo "tee -a $WORK/$1 | $TOY"; }

# ---------------------------------------------------------------- checkpoints keep the pending batch
run "$DFG" run toy_async.dfg --steps 4 --threads 1 --quiet --checkpoint-dir ref --reward-cmd "$(TEE_TOY ref.jsonl)"
expect_rc 0 "4 steps uninterrupted"
run "$DFG" run toy_async.dfg --steps 2 --threads 1 --quiet --checkpoint-dir half --reward-cmd "$(TEE_TOY first.jsonl)"
expect_rc 0 "2 steps, checkpointed"
run "$DFG" run toy_async.dfg --steps 2 --threads 1 --quiet --resume half --checkpoint-dir half \
  --reward-cmd "$(TEE_TOY resumed.jsonl)"
expect_rc 0 "--resume for 2 more"
check "resumed = uninterrupted, bit for bit (the pending batch is in the checkpoint, its rewards asked again)" \
  cmp -s half/checkpoint.safetensors ref/checkpoint.safetensors
steps() { python3 -c "import json, sys; print(*[json.loads(l)['step'] for l in open(sys.argv[1])])" "$1"; }
check "the stopped run sent 1 2 3 (3: the batch its checkpoint holds, unanswered): $(steps first.jsonl)" \
  test "$(steps first.jsonl)" = "1 2 3"
check "the resumed run sends 3 again before its own 4 and 5: $(steps resumed.jsonl)" \
  test "$(steps resumed.jsonl)" = "3 4 5"
check "... the same request as the uninterrupted run's third, byte for byte (tokens, answers)" \
  test "$(sed -n 1p resumed.jsonl)" = "$(sed -n 3p ref.jsonl)"
# ... and with a dataset: the resent request names the trained batch's rows, not the ones drawn
# since (the checkpoint keeps them: async.dataset.rows)
python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 40 --seed 5 -o rows.jsonl >/dev/null
run "$DFG" compile "$GRPO" -o ds_async.dfg "${SMALL[@]}" --set dataset=rows.jsonl --set reward_funcs=digits,short \
  --set async_rollouts=1
expect_rc 0 "compile the async plan with a dataset"
run "$DFG" run ds_async.dfg --steps 3 --threads 1 --quiet --checkpoint-dir dsref --reward-cmd "$(TEE_TOY dsref.jsonl)"
run "$DFG" run ds_async.dfg --steps 2 --threads 1 --quiet --checkpoint-dir dshalf --reward-cmd "$TOY"
run "$DFG" run ds_async.dfg --steps 1 --threads 1 --quiet --resume dshalf --checkpoint-dir dshalf \
  --reward-cmd "$(TEE_TOY dsresumed.jsonl)"
expect_rc 0 "a dataset plan: --resume for 1 more"
check "a dataset plan: resumed = uninterrupted, bit for bit" cmp -s dshalf/checkpoint.safetensors dsref/checkpoint.safetensors
check "a dataset plan: the resent request is the uninterrupted run's third, byte for byte (its rows' index and fields)" \
  test "$(sed -n 1p dsresumed.jsonl)" = "$(sed -n 3p dsref.jsonl)"

# ---------------------------------------------------------------- the cost: both batches' buffers
run "$DFG" compile "$GRPO" -o toy_sync.dfg "${SMALL[@]}" --set reward=external --set reward_funcs=digits,short
persistent() { "$DFG" inspect "$1" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['persistent_bytes'])"; }
# the second batch: tokens, completion_mask and sampling_logps (16 x 9 each), rewards, reward_values
check "dfg inspect: the async plan's persistent bytes hold a second batch" \
  test $(( $(persistent toy_async.dfg) - $(persistent toy_sync.dfg) )) -ge $(( 3 * 16 * 9 * 4 + 16 * 4 * 3 ))

# ---------------------------------------------------------------- refusals
refused() { # refused WHAT TEXT SETTINGS...
  local what=$1 text=$2; shift 2
  run "$DFG" compile "$GRPO" -o bad.dfg "${SMALL[@]}" --set async_rollouts=1 "$@"
  expect_rc 2 "refused: $what"
  expect_in err.txt "$text" "refused: $what: says why"
}
refused "num_iterations 2" "async_rollouts=1 cannot run with num_iterations > 1" --set num_iterations=2
refused "tools" "async_rollouts=1 cannot run with multi-turn episodes" --set task=calculator --set digits=2
refused "sft_steps" "async_rollouts=1 cannot run with sft_steps > 0" --set sft_steps=2
refused "max_staleness 0" "max_staleness 0 must be at least that" --set max_staleness=0
$ST rollouts r.safetensors 16 9 15 1 --group 4 --prompt-len 4 >/dev/null 2>&1
run "$DFG" run async.dfg --steps 1 --threads 1 --rollouts r.safetensors
expect_rc 2 "--rollouts with an async plan is refused"
expect_in err.txt "cannot train on fixed rollouts" "--rollouts: says why"
testlib_end
