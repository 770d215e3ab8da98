#!/usr/bin/env bash
# tools_test.sh - multi-turn GRPO episodes with tools (issue 39), as a user runs them: the built-in
# calculator task, whose policy calls '@a*b$' and reads the tool's answer '=P=' before its final
# answer 'P$' (docs/agents.md).
#   usage: tools_test.sh /path/to/dfg /path/to/source-tree cpu|emu
# A supervised warm-up (sft_steps) teaches the call format, so that the policy calls the tool
# (seed 7: 9 to 14 of 16 rows call at the first GRPO step, whatever seed was tried: 1, 2, 3, 7, 11);
# then one GRPO step from those weights is dumped and tools_check.py reads its episodes: every
# call the tools answered carries exactly its product, tool_mask 0 exactly on the tool's tokens,
# their sampling log-probs 0 and the loss mask 0 there, each row one contiguous completion, and
# the step's metrics (tools/call_frequency, the completions/ lengths) what the episodes hold.
#   cpu: that step on the CPU (and rules broken on purpose in a copy of its dump, which the checker
#        must refuse); the dump replayed with --rollouts (the tools stage skipped, the same loss
#        and gradient norm; tool_mask all 1 trains differently, and equals a file without it);
#        max_tool_calling_iterations=0; answers wider than the extend stage's widest copy (several
#        passes, the KV cache still what training computes); dfg fit --min on the calculator's
#        plan; the settings the loop refuses, and a tools plan run without its environment program.
#   emu: the same plan compiled for cuda, run on the emulated GPU (--emulate-gpu), in its default
#        bfloat16 and in float32; the float32 plan's sampler log-probs equal the training
#        forward's (the tool's tokens went into the KV cache as training reads them) and every
#        row's episode is the CPU's, token for token, every turn: each round of decode draws from
#        its own part of the step's stream, so the GPU's chunks of runs, which overshoot the CPU's
#        exact end, change nothing sampled after a tool's answer.
# Each check holds whatever the policy samples, except that some row must call the tool.
set -u
DFG=$1
SRC=$2
MODE=${3:-cpu}
. "$(dirname "$0")/testlib.sh"
testlib_begin tools-test
CHK=(python3 "$SRC/tests/cli/tools_check.py")
GRPO=$SRC/examples/grpo/grpo.c
check() { local what=$1; shift; if "$@" >check.txt 2>&1; then ok "$what: $(tail -1 check.txt)"; else cat check.txt; fail "$what"; fi; }
fails() { local what=$1; shift; if "$@" >check.txt 2>&1; then fail "$what: it passed"; else ok "$what: $(tail -1 check.txt)"; fi; }
metric() { python3 -c "import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$1" "$2"; }

# prompts 'ab*cd=' (6 columns), completions of 19: T = 25; rounds of calls: at most 19 (TRL's default)
SET=(--set task=calculator --set digits=2 --set prompts_per_step=4 --set num_generations=4)
LP=6
ROUNDS=19
SFT=150
RUN=(--seed 7 --threads 1)

run "$DFG" compile "$GRPO" "${SET[@]}" --set sft_steps=$SFT -o sft.dfg
expect_rc 0 "compile the calculator's warm-up"
run "$DFG" run sft.dfg --steps $SFT "${RUN[@]}" --quiet --save w.safetensors
expect_rc 0 "$SFT supervised steps on the call format"
run "$DFG" compile "$GRPO" "${SET[@]}" -o rl.dfg
expect_rc 0 "compile the calculator's GRPO plan"
run "$DFG" run rl.dfg --weights w.safetensors --steps 1 "${RUN[@]}" --metrics m.jsonl --dump d.safetensors
expect_rc 0 "one GRPO step with tools on the CPU"
if [ ! -s d.safetensors ]; then fail "no dump of a GRPO step with tools: nothing more to check"; testlib_end; fi
check "the CPU's episodes keep the loop's rules" "${CHK[@]}" episodes d.safetensors m.jsonl $LP $ROUNDS
if [ "$MODE" = cpu ]; then # what a row samples after a tool's answer does not depend on how long decode ran
  run "$DFG" compile "$GRPO" "${SET[@]}" --set decode_early_exit=false -o full.dfg
  run "$DFG" run full.dfg --weights w.safetensors --steps 1 "${RUN[@]}" --metrics m_full.jsonl --dump d_full.safetensors
  expect_rc 0 "the same step with decode_early_exit=false (every round runs max_completion_length times)"
  check "... samples the same episodes, every turn" "${CHK[@]}" episodes-equal d.safetensors d_full.safetensors $LP
fi
check "the sampler's log-probs are the training forward's (the tool's tokens in the KV cache as training sees them)" \
  python3 -c "import sys; v = float(sys.argv[1]); print('max difference %g' % v); sys.exit(v > 1e-4)" \
  "$(metric m.jsonl sampling/sampling_logp_difference/max)"

# ---------------------------------------------------------------- decode_tail: a waiting row costs nothing
# With decode_tail=n a round goes on with the live rows alone once few rows generate (a row that
# waits for its tool, or is done, is not among them, or only as a filler), in the narrowest width
# of the ladder N/2, N/4, ... n that holds them, moving to a narrower one when it holds them; a
# width's rows go back with their KV rows (for the next width, or the next round). Each plan
# against decode_tail=0: the same tokens, masks and rewards, and the sampler's log-probs within
# 1e-6 (w rows' matmuls round apart from N rows'), in fewer decode row-runs, only the plan's
# widths run, and each gather is merged back. The calculator (trained: 2 steps, the second ends
# its rounds with few rows) at n=2 (widths 8, 4, 2; a device's chunks of runs, which overshoot
# the switch, may leave only the narrowest to run); answer_env.py's answers after long first turns
# (untrained, a budget of 32) at n=8 (one width) and n=2, where every width runs and rows that
# were in a width decode again after their answer: a KV row left behind moves their log-probs by
# ~1e-2.
if [ "$MODE" = emu ]; then TAIL=(--target cuda --set torch_dtype=float32) TAILRUN=(--emulate-gpu); else TAIL=() TAILRUN=(); fi
python3 -c "
import json
V = '_\$0123456789+-=*@'
for a, b in [(12, 34), (56, 78), (90, 11), (23, 45)]:
    print(json.dumps({'prompt_ids': [V.index(c) for c in '%d*%d=' % (a, b)]}))" >tail_calc.jsonl
ANSWERS=(--set dataset=tail_calc.jsonl --set tools=multiply --set reward_funcs=turns --set vocab_size=17
  --set prompts_per_step=4 --set num_generations=4 --set max_completion_length=32)
ANSWERS_RUN=(--steps 3 --seed 3 --threads 1 --reward-cmd "python3 $SRC/tests/cli/messages_reward.py"
  --env-cmd "python3 $SRC/tests/cli/answer_env.py")
tail_check() { # NAME N LADDER USED SETTINGS... -- RUN ARGS...: the plan with decode_tail=N (its widths
  local name=$1 n=$2 ladder=$3 used=$4 sets=() t; shift 4 # LADDER, at least USED of them run) and 0
  while [ "$1" != -- ]; do sets+=("$1"); shift; done; shift
  for t in 0 "$n"; do
    run "$DFG" compile "$GRPO" "${sets[@]}" "${TAIL[@]}" --set decode_tail=$t -o ${name}_tail$t.dfg
    expect_rc 0 "$name: compile with decode_tail=$t ($MODE)"
    run "$DFG" run ${name}_tail$t.dfg "${TAILRUN[@]}" "$@" --metrics ${name}_tail$t.jsonl --dump ${name}_tail$t.st
    expect_rc 0 "$name: run with decode_tail=$t ($MODE)"
  done
  check "$name: decode_tail=$n and 0 make the same episodes ($MODE)" python3 - ${name}_tail$n.st ${name}_tail0.st \
    ${name}_tail$n.jsonl ${name}_tail0.jsonl "$n" "$SRC/tests/cli" "$ladder" "$used" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[6])
import st_tool
a, _ = st_tool.read(sys.argv[1]); b, _ = st_tool.read(sys.argv[2]); n = int(sys.argv[5])
bad = [k for k in ("tokens", "completion_mask", "tool_mask", "rewards") if a[k] != b[k]]
d = max(abs(x - y) for x, y in zip(st_tool.values(a["sampling_logps"]), st_tool.values(b["sampling_logps"])))
if d > 1e-6: bad.append("sampling_logps %.3g" % d)
def rows_of(stage):  # decode's rows: 16 in the batch, n in decode.tail, w in decode.tail[w]
    if stage == "decode": return 16
    if stage == "decode.tail": return n
    return int(stage[len("decode.tail["):-1]) if stage.startswith("decode.tail[") else 0
def row_runs(f):  # the decode stages' runs times their rows, and each width's runs
    runs = [json.loads(l)["stage_runs"] for l in open(f)]
    widths = {}
    for r in runs:
        for k, v in r.items():
            if k.startswith("decode.tail") and v: widths[rows_of(k)] = widths.get(rows_of(k), 0) + v
        for k, v in r.items():  # a width that gathers merges back, as often
            if k.startswith("decode.compact") and v != r.get(k.replace("compact", "merge"), 0):
                bad.append("%s ran %d times, its merge %d" % (k, v, r.get(k.replace("compact", "merge"), 0)))
    return sum(v * rows_of(k) for r in runs for k, v in r.items()), widths
(on, widths), (off, _) = row_runs(sys.argv[3]), row_runs(sys.argv[4])
ladder = [int(w) for w in sys.argv[7].split(",")]  # the plan's widths: some of them ran, no other
if set(widths) - set(ladder) or len(widths) < int(sys.argv[8]) or on >= off:
    bad.append("the widths ran %s (the ladder %s), %d decode row-runs against %d" % (widths, ladder, on, off))
print("differ: " + ", ".join(bad) if bad else "tokens, masks, rewards equal, sampling log-probs within %.3g; "
      "runs of each width %s: %d decode row-runs, %d without them" % (d, widths, on, off))
sys.exit(1 if bad else 0)
PY
}
tail_check calculator 2 8,4,2 1 "${SET[@]}" -- --weights w.safetensors --steps 2 "${RUN[@]}"
tail_check answers 8 8 1 "${ANSWERS[@]}" -- "${ANSWERS_RUN[@]}"
tail_check answers 2 8,4,2 3 "${ANSWERS[@]}" -- "${ANSWERS_RUN[@]}"

if [ "$MODE" = emu ]; then
  # ---------------------------------------------------------------- the emulated GPU
  for dt in bfloat16 float32; do
    run "$DFG" compile "$GRPO" "${SET[@]}" --target cuda --set torch_dtype=$dt -o rl_$dt.dfg
    expect_rc 0 "compile the calculator for cuda ($dt)"
    run "$DFG" run rl_$dt.dfg --emulate-gpu --weights w.safetensors --steps 1 "${RUN[@]}" --metrics m_$dt.jsonl \
      --dump d_$dt.safetensors
    expect_rc 0 "one GRPO step with tools on the emulated GPU ($dt)"
    check "the emulated GPU's episodes keep the loop's rules ($dt)" "${CHK[@]}" episodes d_$dt.safetensors m_$dt.jsonl $LP $ROUNDS
  done
  check "float32 on the emulated GPU: the sampler's log-probs are the training forward's" \
    python3 -c "import sys; v = float(sys.argv[1]); print('max difference %g' % v); sys.exit(v > 1e-4)" \
    "$(metric m_float32.jsonl sampling/sampling_logp_difference/max)"
  check "float32 on the emulated GPU: every row's episode is the CPU's, every turn" \
    "${CHK[@]}" episodes-equal d.safetensors d_float32.safetensors $LP
  testlib_end
fi

# ---------------------------------------------------------------- the checker can fail
for rule in answer tool_mask logp; do
  "${CHK[@]}" break d.safetensors broken_$rule.safetensors $rule || { fail "breaking $rule in a copy of the dump"; continue; }
  fails "the checker refuses a dump with a broken $rule" "${CHK[@]}" episodes broken_$rule.safetensors m.jsonl $LP $ROUNDS
done
fails "the checker refuses metrics that are not the dump's step's" "${CHK[@]}" episodes d.safetensors <(sed 's/"tools\/call_frequency": *[0-9.e+-]*/"tools\/call_frequency": 0.001/' m.jsonl) $LP $ROUNDS

# ---------------------------------------------------------------- a fixed multi-turn rollout replays
loss0=$("${CHK[@]}" scalar d.safetensors loss)
gn0=$("${CHK[@]}" scalar d.safetensors grad_norm)
for m in as-dumped trl ones none; do
  "${CHK[@]}" rollout d.safetensors r_$m.safetensors $m >/dev/null
done
same_loss() { # LOSS LOSS0 GN GN0: a finite loss and its gradient norm within 1e-6 of the dumped ones
  python3 -c "
import math, sys
a, b, c, d = map(float, sys.argv[1:])
print('loss %r (dumped %r), grad_norm %r (dumped %r)' % (a, b, c, d))
sys.exit(not (math.isfinite(a) and abs(a - b) <= 1e-6 * abs(b) and abs(c - d) <= 1e-6 * d))" "$@"
}
replay() { # FILE WHAT: one step from w.safetensors on FILE's rollout; $loss, $gn its loss and gradient norm
  run "$DFG" run rl.dfg --weights w.safetensors --rollouts "$1" --steps 1 "${RUN[@]}" --metrics "$1.jsonl"
  expect_rc 0 "$2"
  loss=$(metric "$1.jsonl" loss) gn=$(metric "$1.jsonl" grad_norm)
}
replay r_as-dumped.safetensors "the dump's tokens, completion_mask, rewards, sampling_logps and tool_mask as a --rollouts file"
check "the rollout skips the decode and tools stages" grep -oE "stages data, prefill, (.*, )?decode, (.*, )?tools, reward skipped" out.txt
expect_in out.txt "prefill, extend[4], extend, decode" "... and extend's copies (the answers into the KV cache)"
check "... and trains the dumped step" same_loss "$loss" "$loss0" "$gn" "$gn0"
replay r_trl.safetensors "the same with TRL's completion_mask (1 on the tool's tokens too)"
check "... and trains the dumped step" same_loss "$loss" "$loss0" "$gn" "$gn0"
loss_dump=$loss
check "... and logs the dumped step's reward, loss and completions/ metrics (lengths, clipped_ratio)" \
  python3 -c "
import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
keys = [k for k in a if k.startswith('completions/')] + ['reward', 'reward_std', 'loss', 'grad_norm']
bad = ['%s %r, replayed %r' % (k, a[k], b.get(k)) for k in keys if b.get(k) != a[k]]
print('; '.join(bad) or '%d metrics equal (clipped_ratio %g)' % (len(keys), a['completions/clipped_ratio']))
sys.exit(len(bad) > 0)" m.jsonl r_trl.safetensors.jsonl
check "... and so does the dump as it is (its completion_mask is TRL's, not the loss mask)" \
  python3 -c "
import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
keys = [k for k in a if k.startswith('completions/')] + ['reward', 'loss', 'grad_norm']
bad = ['%s %r, replayed %r' % (k, a[k], b.get(k)) for k in keys if b.get(k) != a[k]]
print('; '.join(bad) or '%d metrics equal' % len(keys))
sys.exit(len(bad) > 0)" m.jsonl r_as-dumped.safetensors.jsonl
replay r_ones.safetensors "the rollout with tool_mask all 1"
loss_ones=$loss gn_ones=$gn
check "tool_mask's zeros change the training" \
  python3 -c "import sys; a, b = map(float, sys.argv[1:]); print('loss %g with them, %g without' % (a, b)); sys.exit(abs(a - b) <= 1e-4 * max(abs(a), abs(b)))" \
  "$loss_dump" "$loss_ones"
replay r_none.safetensors "the rollout without a tool_mask"
check "a file without tool_mask trains as tool_mask all 1 (the same floats)" \
  python3 -c "import math, sys; a, b, c, d = sys.argv[1:]; print('loss %s = %s, grad_norm %s = %s' % (a, b, c, d)); sys.exit(a != b or c != d or not all(math.isfinite(float(x)) for x in (a, c)))" \
  "$loss" "$loss_ones" "$gn" "$gn_ones"

# ---------------------------------------------------------------- max_tool_calling_iterations=0
run "$DFG" compile "$GRPO" "${SET[@]}" --set max_tool_calling_iterations=0 -o r0.dfg
expect_rc 0 "compile with max_tool_calling_iterations=0"
run "$DFG" run r0.dfg --weights w.safetensors --steps 1 "${RUN[@]}" --metrics m0.jsonl --dump d0.safetensors
expect_rc 0 "one step with max_tool_calling_iterations=0"
check "no call runs, every row ends at its first turn, tools/call_frequency 0" \
  "${CHK[@]}" episodes d0.safetensors m0.jsonl $LP 0

# ---------------------------------------------------------------- answers wider than extend's widest copy
# With max_completion_length 16 extend's copies are 4 and 8 columns wide; answer_env.py answers each
# row's first turn (when it fits) with 10 tokens, so the widest copy takes two passes, and near a
# row's last columns its second window starts before the row's column (the columns it keeps must
# stay as they were). The sampler's log-probs after the answers are the training forward's only if
# every answer's keys and values went into the KV cache as training computes them.
python3 -c "
import json
V = '_\$0123456789+-=*@'
for a, b in [(12, 34), (56, 78), (90, 11), (23, 45)]:
    print(json.dumps({'prompt_ids': [V.index(c) for c in '%d*%d=' % (a, b)]}))" >calc.jsonl
run "$DFG" compile "$GRPO" --set dataset=calc.jsonl --set tools=multiply --set reward_funcs=turns --set vocab_size=17 \
  --set prompts_per_step=4 --set num_generations=4 --set max_completion_length=16 -o long.dfg
expect_rc 0 "compile a plan whose answers can be wider than extend's widest copy"
run "$DFG" run long.dfg --steps 3 --seed 3 --threads 1 --reward-cmd "python3 $SRC/tests/cli/messages_reward.py" \
  --env-cmd "python3 $SRC/tests/cli/answer_env.py" --metrics m_long.jsonl
expect_rc 0 "three steps with 10-token answers"
check "the widest copy ran twice for them, and the sampler's log-probs are the training forward's" python3 -c "
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
passes = [m['stage_runs'].get('extend', 0) for m in lines]
worst = max(m['sampling/sampling_logp_difference/max'] for m in lines)
calls = sum(m['tools/call_frequency'] for m in lines)
print('extend passes a step %s, tools/call_frequency summed %g, sampling_logp_difference/max %g' % (passes, calls, worst))
sys.exit(not (max(passes) == 2 and calls > 0 and worst <= 1e-4))" m_long.jsonl

# ---------------------------------------------------------------- dfg fit
# a tools plan declares no rollout_sub_batches knob (the loop decodes every row at once)
run "$DFG" fit "$GRPO" --min "${SET[@]}" -o fit.dfg
expect_rc 0 "dfg fit --min on the calculator's plan"
expect_in out.txt "chose #" "... chooses a plan"

# ---------------------------------------------------------------- refusals: one line, exit 2
run "$DFG" compile "$GRPO" "${SET[@]}" --set max_completion_length=12 -o short.dfg
run "$DFG" run short.dfg --steps 1
expect_rc 2 "max_completion_length 12 under the calculator's longest episode (18): refused before a step"
expect_in err.txt "has completions of up to 18 tokens, more than max_completion_length 12" "... saying so"
run "$DFG" compile "$GRPO" "${SET[@]}" --set rollout_sub_batches=2 -o x.dfg
expect_rc 2 "the calculator with rollout_sub_batches=2"
expect_one_line "rollout_sub_batches=2 with tools"
expect_in err.txt "needs rollout_sub_batches=1" "... saying what it needs"
run "$DFG" compile "$GRPO" "${SET[@]}" --set decode_tail=4 --set decode_early_exit=false -o x.dfg
expect_rc 2 "the calculator with decode_tail=4 and decode_early_exit=false"
expect_one_line "decode_tail=4 with decode_early_exit=false"
expect_in err.txt "needs decode_early_exit=true" "... saying why"
python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 16 --seed 5 -o rev.jsonl >/dev/null 2>&1
run "$DFG" compile "$GRPO" --set dataset=rev.jsonl --set tools=a,b --set reward_funcs=digits,short \
  --set prompts_per_step=4 --set num_generations=4 --set max_completion_length=8 -o env.dfg
expect_rc 0 "compile a dataset plan with tools=a,b"
run "$DFG" run env.dfg --steps 1 --threads 1 --reward-cmd "python3 $SRC/tests/cli/toy_reward.py"
expect_rc 2 "run it without --env-cmd"
expect_one_line "a tools plan without its environment program"
expect_in err.txt "give --env-cmd CMD" "... naming --env-cmd"

testlib_end
