#!/usr/bin/env bash
# grpo_cli_test.sh - dfg run's checkpoints, resume, interrupts, fixed rollouts, dumps and
# metrics, end to end on examples/grpo/grpo.c (its default settings are tiny: a step takes ~20 ms).
#   usage: grpo_cli_test.sh /path/to/dfg /path/to/source-tree
# Each check prints "ok - ..." or "FAIL - ..." (with the command's output); the script exits 1
# when any check failed. Runs use --threads 1: results are compared bit for bit.
set -u
DFG=$1
SRC=$2
ST=("python3" "$SRC/tests/cli/st_tool.py")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dfg-grpo-cli-test-XXXXXX")
bg_pid=
trap '[ -n "$bg_pid" ] && kill -9 "$bg_pid" 2>/dev/null; rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
. "$(dirname "$0")/testlib.sh"

check() { # check WHAT CMD...: ok when CMD succeeds
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
# metric_at FILE STEP NAME: the value printed after NAME on "step STEP"
metric_at() { awk -v s="$2" -v m="$3" '$1 == "step" && $2 == s { for (i = 3; i < NF; i++) if ($i == m) print $(i + 1) }' "$1"; }
last_step() { awk '$1 == "step" { s = $2 } END { print s }' "$1"; }
ckpt_step() { "${ST[@]}" meta "$1" dfg.step; }
# wait_for COND_CMD...: polls for up to 20 s
wait_for() { for _ in $(seq 200); do "$@" && return 0; sleep 0.1; done; return 1; }
has_steps() { local n; n=$(grep -c '^step ' "$1" 2>/dev/null); [ "${n:-0}" -ge "$2" ]; }

# ---------------------------------------------------------------- the plan
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o grpo.dfg --set beta=0.04 # a KL-penalised run: kl is a metric
expect_rc 0 "compile examples/grpo/grpo.c"
run "$DFG" info grpo.dfg
expect_in out.txt "rollouts  dfg run --rollouts sets tokens, completion_mask, rewards, sampling_logps and skips stages data, prefill, decode, decode.compact, decode.tail, decode.merge, reward" \
  "the plan says what a rollout holds (dfg_declare_rollout)"
expect_in out.txt "groups of 8 rows of tokens share their first 4 tokens" "and which rows share a prompt"
cp out.txt info.txt

# the plan's setting "seed" is --seed's default; --seed wins
run "$DFG" compile "$SRC/examples/grpo/grpo.c" --set seed=77 -o seed77.dfg
run "$DFG" run seed77.dfg --steps 0
expect_in out.txt "seed 77" "the plan's setting seed is the default seed"
# no step touches the activations' pages: the run's share of RSS is under the arena, said as such
# (a sanitizer build's RSS holds the sanitizer's own memory too)
if ldd "$DFG" 2>/dev/null | grep -q libasan; then echo "ok - # SKIP host memory under the arena: a sanitizer build"
else
  expect_in out.txt "less than the arena" "host memory under the arena says so"
  if grep -q "other (" out.txt; then fail "host memory under the arena shows an 'other': $(grep 'host memory' out.txt)"
  else ok "host memory under the arena shows no 'other'"; fi
fi
# a negative 'other' (or one wrapped around as an unsigned size) is never printed, in any build
if grep -qE "(\+ -[0-9]+|[0-9]{19,}) other| - [0-9]+ other" out.txt; then
  fail "host memory shows a negative 'other': $(grep 'host memory' out.txt)"
else ok "host memory never shows a negative 'other'"; fi
run "$DFG" run seed77.dfg --steps 0 --seed 5
expect_in out.txt "seed 5" "--seed overrides the plan's setting"

# ---------------------------------------------------------------- metrics
run "$DFG" run grpo.dfg --steps 3 --threads 1 --metrics m.jsonl
expect_rc 0 "run 3 steps with --metrics"
expect_in out.txt " tok/s" "step lines show tokens per second"
check "--metrics: one JSON object per step with every metric, ms, tokens_per_s, arena_bytes" python3 -c '
import json, sys
lines = open("m.jsonl").read().splitlines()
rows = [json.loads(l) for l in lines]
assert [r["step"] for r in rows] == [1, 2, 3], rows
for r in rows:
    for k in ("reward", "completions/mean_length", "loss", "kl", "entropy", "clip_ratio/region_mean", "grad_norm", "ms", "tokens_per_s", "arena_bytes"):
        assert k in r, k
    assert r["tokens_per_s"] > 0 and r["ms"] > 0 and r["arena_bytes"] > 0
'
loss3=$(metric_at out.txt 3 loss)
check "--metrics holds the printed values (loss at step 3: $loss3)" python3 -c '
import json, sys
r = json.loads(open("m.jsonl").read().splitlines()[2])
assert "%.5g" % r["loss"] == sys.argv[1], (r["loss"], sys.argv[1])' "$loss3"

# ---------------------------------------------------------------- dfg plot
run "$DFG" plot m.jsonl -o curves.svg
expect_rc 0 "plot the metrics of 3 steps"
expect_in out.txt "wrote curves.svg (reward, kl over steps 1-3)" "plot says what it drew"
expect_in curves.svg "<svg" "the plot is an SVG"
expect_in curves.svg ">reward (every step)<" "... with a reward panel"
expect_in curves.svg ">kl (every step)<" "... and a kl panel"
run "$DFG" plot m.jsonl --y loss,grad_norm
expect_rc 0 "plot --y loss,grad_norm (default output m.svg)"
expect_in m.svg ">grad_norm (every step)<" "--y picks the panels"
run "$DFG" plot m.jsonl --y nope -o x.svg
expect_rc 2 "plot of a metric the file lacks"
expect_in err.txt "no values of 'nope'" "the message names it"
expect_one_line "plot of a missing metric"
printf '{"step":1,"reward":0.5}\nnot json\n' >bad.jsonl
run "$DFG" plot bad.jsonl -o x.svg
expect_rc 2 "plot of a damaged file"
expect_in err.txt "bad.jsonl:2: not a line of dfg run --metrics" "the message names the line"
run "$DFG" plot missing.jsonl
expect_rc 2 "plot of a missing file"

# --every K prints each metric's mean over the K steps since the previous line
run "$DFG" run grpo.dfg --steps 5 --threads 1 --every 2 --metrics e.jsonl
expect_rc 0 "run 5 steps with --every 2"
check "--every 2 prints steps 2, 4 and the last, 5" [ "$(grep '^step ' out.txt | awk '{ printf "%s ", $2 }')" = "2 4 5 " ]
check "the printed values are means over the interval (reward, loss at steps 4 and 5)" python3 -c '
import json, sys
rows = [json.loads(l) for l in open("e.jsonl")]
want = {4: (rows[2:4]), 5: (rows[4:5])}
for i, step in enumerate((4, 5)):
    for k, got in (("reward", sys.argv[1 + 2 * i]), ("loss", sys.argv[2 + 2 * i])):
        mean = sum(r[k] for r in want[step]) / len(want[step])
        assert abs(float(got) - mean) <= 1e-4 * max(1e-3, abs(mean)), (step, k, got, mean)
assert rows[2]["reward"] != rows[3]["reward"] or rows[2]["loss"] != rows[3]["loss"], "steps 3, 4 alike: the test cannot tell"
' "$(metric_at out.txt 4 reward)" "$(metric_at out.txt 4 loss)" "$(metric_at out.txt 5 reward)" "$(metric_at out.txt 5 loss)"

# ---------------------------------------------------------------- checkpoints and resume
run "$DFG" run grpo.dfg --steps 6 --threads 1 --save-every 2 --checkpoint-dir full
expect_rc 0 "6 steps with --save-every 2"
expect_in out.txt "checkpoint: step 2 saved to full/checkpoint.safetensors" "a checkpoint every 2 steps"
expect_in out.txt "checkpoint: step 6 saved to full/checkpoint.safetensors" "the checkpoint at the end"
check "the checkpoint records the step" [ "$(ckpt_step full/checkpoint.safetensors)" = 6 ]
cp out.txt full.txt
cp full/checkpoint.safetensors full6.safetensors
# a fresh run (no --resume) into a directory holding a checkpoint would overwrite it: refused
run "$DFG" run grpo.dfg --steps 1 --threads 1 --checkpoint-dir full
expect_rc 2 "a fresh run into a directory that holds a checkpoint"
expect_in err.txt "already holds a checkpoint: continue it with --resume full" "the message says how to go on"
expect_one_line "the refusal"
check "the checkpoint there is untouched" cmp -s full/checkpoint.safetensors full6.safetensors

run "$DFG" run grpo.dfg --steps 3 --threads 1 --save-every 2 --checkpoint-dir half --metrics half.jsonl
expect_rc 0 "3 steps, then stop"
check "stopped at step 3" [ "$(ckpt_step half/checkpoint.safetensors)" = 3 ]
run "$DFG" run grpo.dfg --resume half --steps 3 --threads 1 --metrics half.jsonl
expect_rc 0 "--resume: 3 more steps"
expect_in out.txt "resumed from half/checkpoint.safetensors: step 3" "--resume says where it continues"
expect_in out.txt "checkpoint: step 6 saved to half/checkpoint.safetensors" "--resume checkpoints into the same directory"
check "the resumed run numbers its steps 4..6" [ "$(grep '^step ' out.txt | awk '{ printf "%s ", $2 }')" = "4 5 6 " ]
check "step 6's loss is the uninterrupted run's ($(metric_at full.txt 6 loss))" \
  [ "$(metric_at out.txt 6 loss)" = "$(metric_at full.txt 6 loss)" ]
run "${ST[@]}" same full/checkpoint.safetensors half/checkpoint.safetensors
expect_rc 0 "6 steps = 3 steps + resume + 3 steps: every tensor bit-identical"
check "... and the checkpoint files byte for byte" cmp -s full/checkpoint.safetensors half/checkpoint.safetensors
check "--metrics with --resume appends: steps 1..6" python3 -c '
import json
assert [json.loads(l)["step"] for l in open("half.jsonl")] == [1, 2, 3, 4, 5, 6]'

# what --resume refuses
run "$DFG" run grpo.dfg --resume nowhere
expect_rc 2 "--resume of a missing directory"
expect_in err.txt "no checkpoint there" "--resume names what is missing"
run "$DFG" compile "$SRC/examples/gpt2_train.c" -o gpt2.dfg
run "$DFG" run gpt2.dfg --steps 0 --checkpoint-dir gpt2ck
run "$DFG" run grpo.dfg --resume gpt2ck
expect_rc 2 "a checkpoint of another plan is refused"
expect_one_line "another plan's checkpoint"
run "$DFG" run grpo.dfg --save-every 2
expect_rc 2 "--save-every without --checkpoint-dir"
run "$DFG" run grpo.dfg --resume half --weights w.safetensors
expect_rc 2 "--resume with --weights"

# ---------------------------------------------------------------- a full disk at a checkpoint
# tests/cli/full_disk.c fails the writes of chosen saves with ENOSPC, as a disk that fills up: the
# previous checkpoint stays whole, the warning names the step, the reason and what is safe, and
# training goes on; the next interval saves again. A failed last save fails the run (after
# --save, which may go to another disk, is still written).
cc -shared -fPIC -O2 "$SRC/tests/cli/full_disk.c" -o full_disk.so -ldl
check "the full-disk shim builds" [ -f full_disk.so ]
# an LD_PRELOAD library before a sanitizer build's runtime is fine here: it only wraps write()
full_disk() { local saves=$1; shift; FULL_DISK_SAVES=$saves LD_PRELOAD=$WORK/full_disk.so \
  ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0" run "$@"; }
full_disk 2 "$DFG" run grpo.dfg --steps 6 --threads 1 --save-every 2 --checkpoint-dir disk
expect_rc 0 "the save at step 4 fails, the one at step 6 does not: the run ends well"
expect_in err.txt "warning: step 4: the checkpoint was not saved:" "the warning names the step"
expect_in err.txt "No space left on device" "... and the reason"
expect_in err.txt "disk/checkpoint.safetensors still holds step 2 (continue with: $DFG run grpo.dfg --resume disk --threads 1 --steps 4 --save-every 2)" "... and what is safe"
expect_in err.txt "training goes on and saves again at step 6" "... and when it tries again"
check "steps 5 and 6 ran" [ "$(last_step out.txt)" = 6 ]
check "the checkpoint is step 6's, byte for byte the run without a full disk" cmp -s disk/checkpoint.safetensors full6.safetensors
check "no partial file is left" [ -z "$(ls -A disk | grep -v '^checkpoint.safetensors$' | grep -v '^.dfg-run.lock$')" ]
full_disk 1 "$DFG" run grpo.dfg --steps 3 --threads 1 --save-every 2 --checkpoint-dir disk1
expect_rc 0 "the first save fails, the end of the run saves"
expect_in err.txt "warning: step 2: the checkpoint was not saved: " "a failed first save is a warning"
expect_in err.txt "no checkpoint of this run is in disk1" "... that says nothing is saved yet"
expect_in err.txt "saves again at the end of the run" "... and when it tries again"
check "the end's checkpoint is step 3" [ "$(ckpt_step disk1/checkpoint.safetensors)" = 3 ]
# saves 3 and 4: step 6's periodic save and the end's second try
full_disk 3,4 "$DFG" run grpo.dfg --steps 6 --threads 1 --save-every 2 --checkpoint-dir disk3 --save disk3.safetensors
expect_rc 1 "the last save fails (twice): the run fails"
expect_in err.txt "grpo.dfg: step 6: the checkpoint was not saved: " "the error names the step"
expect_in err.txt "disk3/checkpoint.safetensors still holds step 4 (continue with: $DFG run grpo.dfg --resume disk3 --threads 1 --steps 2 --save-every 2 --save disk3.safetensors)" "... and what is safe"
check "the checkpoint on disk is step 4's, whole" [ "$(ckpt_step disk3/checkpoint.safetensors)" = 4 ]
check "--save still wrote the trained parameters" [ -s disk3.safetensors ]
run "$DFG" run grpo.dfg --resume disk3 --steps 2 --threads 1
expect_rc 0 "the run resumes from step 4"
check "... and its step 6 is the uninterrupted run's" cmp -s disk3/checkpoint.safetensors full6.safetensors

# ---------------------------------------------------------------- kill -9
"$DFG" run grpo.dfg --steps 1000000 --threads 1 --save-every 1 --checkpoint-dir k9 >k9.txt 2>&1 &
bg_pid=$!
wait_for has_steps k9.txt 20
sleep 0.3
kill -9 "$bg_pid"
wait "$bg_pid" 2>/dev/null
rc=$?
bg_pid=
expect_rc 137 "kill -9 during a run with --save-every 1"
printed=$(last_step k9.txt)
saved=$(ckpt_step k9/checkpoint.safetensors)
within() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
check "the checkpoint loses at most the step in flight (printed $printed, saved $saved)" within "$saved" $((printed - 1)) "$printed"
# a partial write a killed run left (dfg_st_write's temp name), and any other leftover, are
# never read; the partial one is removed by the next run
printf 'partial' >k9/.checkpoint.safetensors.x1y2z3
run "$DFG" run grpo.dfg --resume k9 --steps 2 --threads 1
expect_rc 0 "--resume after kill -9"
expect_in out.txt "resumed from k9/checkpoint.safetensors: step $saved" "it continues from the last checkpoint"
expect_in out.txt "removed k9/.checkpoint.safetensors.x1y2z3" "the partial checkpoint file is removed"
check "no partial checkpoint file remains" [ -z "$(find k9 -name '.checkpoint.safetensors.*')" ]
run "$DFG" run grpo.dfg --steps $((saved + 2)) --threads 1 --checkpoint-dir k9ref
check "resumed after kill -9 = uninterrupted, bit for bit (step $((saved + 2)))" \
  cmp -s k9/checkpoint.safetensors k9ref/checkpoint.safetensors

# ---------------------------------------------------------------- NaN and Inf
# gradients that turn NaN at step 5 stop the run there, naming the step and the gradient, and
# the checkpoint is the state after step 4: equal, tensor for tensor, to a run of 4 steps
run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=5 -o nan.dfg
expect_rc 0 "compile the NaN pipeline"
run "$DFG" run nan.dfg --steps 10 --threads 1 --checkpoint-dir nanck
expect_rc 1 "NaN gradients at step 5"
expect_in err.txt "step 5, stage 'train'" "the message names the step"
expect_in err.txt "gradient 'grad.w' holds NaN or Inf" "... and the gradient"
expect_in err.txt "the state after step 4 (the last good one) is saved to nanck/checkpoint.safetensors" \
  "... and where the last good state is"
check "steps 1-4 printed, step 5 not" [ "$(last_step out.txt)" = 4 ]
check "the checkpoint records step 4" [ "$(ckpt_step nanck/checkpoint.safetensors)" = 4 ]
run "$DFG" run nan.dfg --steps 4 --threads 1 --checkpoint-dir nanref
run "${ST[@]}" same nanck/checkpoint.safetensors nanref/checkpoint.safetensors --except metric.
expect_rc 0 "the saved state = 4 good steps (weights, moments, step counter, zeroed gradients)"
run "$DFG" run nan.dfg --steps 10 --threads 1
expect_rc 1 "NaN without --checkpoint-dir"
expect_in err.txt "nothing saved (no --checkpoint-dir, no --save)" "... says nothing was saved"
# a metric that is not finite (gradients finite) stops the run too, after its update: that state
# is kept beside the checkpoint, which stays the last one before the doubt
run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=3 --set nan_in=loss -o inf.dfg
run "$DFG" run inf.dfg --steps 10 --threads 1 --checkpoint-dir infck --save-every 1
expect_rc 1 "an Inf metric at step 3"
expect_in err.txt "step 3: metric 'spike' is inf" "the message names the step and the metric"
expect_in err.txt "the state after step 3 (not known to be good) is saved to infck/checkpoint-step-3.safetensors" \
  "... calls the state after it what it is"
expect_in err.txt "infck/checkpoint.safetensors still holds step 2" "... and says the last checkpoint is kept"
if grep -q "last good" err.txt; then fail "a step whose metric is not finite is never 'the last good one'"
else ok "a step whose metric is not finite is never 'the last good one'"; fi
check "that file holds step 3 (its update was applied)" [ "$(ckpt_step infck/checkpoint-step-3.safetensors)" = 3 ]
check "the checkpoint is still step 2's" [ "$(ckpt_step infck/checkpoint.safetensors)" = 2 ]
run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=99 --set nan_in=loss -o fin.dfg
run "$DFG" run fin.dfg --steps 3 --threads 1 --checkpoint-dir infref
run "${ST[@]}" same infck/checkpoint-step-3.safetensors infref/checkpoint.safetensors --except metric.
expect_rc 0 "the saved state is step 3's whole (weights, moments, counters): a run of 3 good steps"

# ---------------------------------------------------------------- --quiet
run "$DFG" run grpo.dfg --steps 3 --threads 1 --quiet --metrics q.jsonl
expect_rc 0 "--quiet"
check "--quiet prints nothing" [ ! -s out.txt ] && [ ! -s err.txt ]
check "--quiet still writes --metrics" [ "$(wc -l <q.jsonl)" = 3 ]

# ---------------------------------------------------------------- SIGINT
"$DFG" run grpo.dfg --steps 1000000 --threads 1 --checkpoint-dir si >si.txt 2>si.err &
bg_pid=$!
wait_for has_steps si.txt 5
# while it runs, the directory is locked: a second run there is refused
run "$DFG" run grpo.dfg --steps 1 --checkpoint-dir si
expect_rc 2 "a second run in a checkpoint directory in use"
expect_in err.txt "in use by another dfg run" "the message says why"
kill -INT "$bg_pid"
wait "$bg_pid"
rc=$?
bg_pid=
expect_rc 130 "SIGINT"
expect_in si.err "checkpoint saved to si/checkpoint.safetensors" "SIGINT says where it saved"
check "the checkpoint holds the last step printed ($(last_step si.txt))" \
  [ "$(ckpt_step si/checkpoint.safetensors)" = "$(last_step si.txt)" ]
run "$DFG" run grpo.dfg --resume si --steps 1 --threads 1
expect_rc 0 "--resume after SIGINT"

# a second SIGINT stops at once; the checkpoint on disk stays whole. Both signals land inside
# step 2 whatever the machine's speed: its reward program holds the step open (toy_reward.py's
# gate) until the test is done with it.
run "$DFG" compile "$SRC/examples/grpo/grpo.c" --set reward=external --set reward_funcs=digits,short -o slow.dfg
TOY_REWARD_GATE=$WORK/gate "$DFG" run slow.dfg --steps 1000000 --threads 1 --save-every 1 --checkpoint-dir si2 \
  --reward-cmd "python3 $SRC/tests/cli/toy_reward.py gate 2" >si2.txt 2>si2.err &
bg_pid=$!
wait_for test -e "$WORK/gate.waiting"
kill -INT "$bg_pid"
# the second only once the first was handled: two SIGINTs pending at once are delivered as one
# (a loaded machine can hold the process off the CPU for longer than any fixed pause)
wait_for grep -q "interrupted: stopping after this step" si2.err
kill -INT "$bg_pid" 2>/dev/null
wait "$bg_pid"
rc=$?
bg_pid=
expect_rc 130 "two SIGINTs"
touch "$WORK/gate" # the reward program, if still there, answers and sees dfg gone
expect_in si2.err "interrupted again" "the second SIGINT stops without saving"
check "the checkpoint on disk is step 1's" [ "$(ckpt_step si2/checkpoint.safetensors)" = 1 ]
run "$DFG" run slow.dfg --resume si2 --steps 0 --reward-cmd "python3 $SRC/tests/cli/toy_reward.py"
expect_rc 0 "the checkpoint left by a double SIGINT loads"

# ---------------------------------------------------------------- fixed rollouts and --dump
# N = prompts_per_step 8 x num_generations 8 = 64 sequences of T = 4 + 5 = 9 tokens, vocab 15
"${ST[@]}" rollouts r.safetensors 64 9 15 7 --group 8
"${ST[@]}" rollouts rows.safetensors 64 9 15 7 --bad-shape --group 8
"${ST[@]}" rollouts long.safetensors 64 10 15 7 --group 8
"${ST[@]}" rollouts mixed.safetensors 64 9 15 7
run "$DFG" run grpo.dfg --rollouts rows.safetensors
expect_rc 2 "rollouts with 65 sequences"
expect_one_line "wrong N"
expect_in err.txt "tensor 'tokens' has shape (65,9) in the file but the plan's is (64,9) (N = prompts_per_step x num_generations = 8 x 8" \
  "the message names the tensor, both shapes and the settings"
run "$DFG" run grpo.dfg --rollouts long.safetensors
expect_rc 2 "rollouts of 10 tokens"
expect_in err.txt "T = max_prompt_length + max_completion_length = 4 + 5" "the message names T's settings"
# the plan computes each group's prompt once (share_prompts=auto), so a group's prompts must agree
run "$DFG" run grpo.dfg --rollouts mixed.safetensors
expect_rc 2 "rollouts whose groups do not share their prompt"
expect_one_line "a group with several prompts"
expect_in err.txt "'tokens' row 1 differs from row 0 at column 0, but rows 0..7 are one prompt's group" \
  "the message names the rows and the column"
"$DFG" compile "$SRC/examples/grpo/grpo.c" --set share_prompts=0 -o copies.dfg >/dev/null
run "$DFG" run copies.dfg --rollouts mixed.safetensors --steps 1 --quiet
expect_rc 0 "share_prompts=0 trains on rollouts with a prompt per row"
run "$DFG" run gpt2.dfg --rollouts r.safetensors
expect_rc 2 "--rollouts on a plan without rollout settings"
expect_in err.txt "cannot train on fixed rollouts" "the message says why"
run "$DFG" run gpt2.dfg --dump d.safetensors
expect_rc 2 "--dump on a plan that declares no dumps"

run "$DFG" run grpo.dfg --rollouts r.safetensors --dump d.safetensors --save w.safetensors --threads 1
expect_rc 0 "--rollouts R --dump OUT"
expect_in out.txt "stages data, prefill, decode, decode.compact, decode.tail, decode.merge, reward skipped" "the rollout stages are skipped"
expect_in out.txt "dumped step 1 to d.safetensors" "the dump is written"
# the pipeline's dump declarations (dfg info lists them) name the values; the issue's five must be there
dumped=$(grep '^dump ' info.txt | sed 's/^dump *dfg run --dump writes every parameter and //; s/ ([^)]*)//g' | tr ',' '\n' | tr -d ' ')
check "the declared dumps list logp, ref_logp, advantages, loss, grad_norm" \
  [ "$(printf '%s\n' $dumped | grep -cxE 'logp|ref_logp|advantages|loss|grad_norm')" = 5 ]
{ "${ST[@]}" names w.safetensors; printf '%s\n' $dumped; } | LC_ALL=C sort >want.txt
"${ST[@]}" names d.safetensors >got.txt
check "OUT holds exactly the $(printf '%s\n' $dumped | wc -l) declared values and the $(($(wc -l <want.txt) - $(printf '%s\n' $dumped | wc -l))) params" \
  cmp -s want.txt got.txt
run "${ST[@]}" check-dump d.safetensors r.safetensors 8
expect_rc 0 "logp is 0 off the mask and finite on it; advantages are centred per group"
check "the dumped params are the updated ones (= --save)" python3 -c '
import sys; sys.path.insert(0, sys.argv[1]); import st_tool as s
d, _ = s.read("d.safetensors"); w, _ = s.read("w.safetensors")
assert all(d[n] == w[n] for n in w)' "$SRC/tests/cli"
run "$DFG" run grpo.dfg --rollouts r.safetensors --dump d2.safetensors --threads 1
check "the same rollouts give the same dump" cmp -s d.safetensors d2.safetensors
# weights in by Hugging Face names change what the step computes
run "$DFG" run grpo.dfg --weights w.safetensors --rollouts r.safetensors --dump d3.safetensors --threads 1
expect_rc 0 "--weights W --rollouts R --dump OUT"
run "${ST[@]}" same d.safetensors d3.safetensors
expect_rc 3 "other weights give another dump"

# --weights DIR: a sharded model directory (an index and 3 shards) loads as the single file does
"${ST[@]}" shard w.safetensors wdir 3
run "$DFG" run grpo.dfg --weights w.safetensors --steps 1 --threads 1 --save w1.safetensors
run "$DFG" run grpo.dfg --weights wdir --steps 1 --threads 1 --save wdir1.safetensors
expect_rc 0 "--weights DIR (model.safetensors.index.json and 3 shards)"
n_w=$("${ST[@]}" names w.safetensors | wc -l)
expect_in out.txt "loaded $n_w tensors from wdir" "it loads every tensor of the shards ($n_w)"
check "one step from the shards = one step from the single file, bit for bit" cmp -s w1.safetensors wdir1.safetensors
rm wdir/model-00002-of-00003.safetensors
run "$DFG" run grpo.dfg --weights wdir --steps 1
expect_rc 2 "--weights DIR with a shard missing"
expect_one_line "a missing shard"
expect_in err.txt "wdir/model.safetensors.index.json: shard 'model-00002-of-00003.safetensors'" "the message names the index and the shard"

# ---------------------------------------------------------------- --save OUT/: a Hugging Face model directory
files_of() { (cd "$1" && ls -A | tr '\n' ' '); }
# a model made from settings alone: its config.json and weights, nothing to copy
run "$DFG" run grpo.dfg --steps 0 --threads 1 --save src/
expect_rc 0 "--save DIR/ of a model made from settings alone"
check "... writes config.json and model.safetensors ($(files_of src))" test "$(files_of src)" = "config.json model.safetensors "
# src/ as the source of a plan (--set model=src), with a tokenizer, generation defaults and a chat
# template; tokenizer.json a symbolic link to its blob, as in a Hugging Face cache
cp "$SRC/examples/tasks/digits/tokenizer.json" blob.json
ln -s ../blob.json src/tokenizer.json
cp "$SRC/examples/tasks/digits/tokenizer_config.json" src/
echo '{"bos_token_id": 0, "eos_token_id": 1, "max_new_tokens": 7}' >src/generation_config.json
printf '%s' "{% for m in messages %}{{ m['content'] }}{% endfor %}" >src/chat_template.jinja
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o from_src.dfg --set beta=0.04 --set model=src
expect_rc 0 "compile with --set model=DIR"
expect_in out.txt " learning_rate=1e-06 " "a pretrained model's default learning rate is TRL's 1e-6"
expect_in out.txt "note: learning_rate is 1e-06 (TRL's default for fine-tuning a pretrained model" "... and compile says so"
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o from_src_lr.dfg --set model=src --set learning_rate=3e-6
if grep -q "note: learning_rate" out.txt; then fail "a learning rate given is not noted"; else ok "a learning rate given is not noted"; fi
mkdir out && echo stale >out/tokenizer.json && echo stale >out/merges.txt # an earlier save's
run "$DFG" run from_src.dfg --steps 1 --threads 1 --save out/
expect_rc 0 "--save DIR/ of a model compiled from a directory"
expect_in out.txt "saved the parameters to out/ (a Hugging Face model directory; copied from the source: generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja)" \
  "... and says what it copied"
for f in tokenizer.json tokenizer_config.json generation_config.json chat_template.jinja; do
  check "... copies the source's $f byte for byte" cmp -s "src/$f" "out/$f"
done
check "... as a file, not the link" test ! -L out/tokenizer.json
check "... removes an earlier save's merges.txt, which the source lacks" test ! -e out/merges.txt
want="chat_template.jinja config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json "
check "... and copies nothing else, no temp file left ($(files_of out))" test "$(files_of out)" = "$want"
check "... its weights are dfg's after step 1, not the source's (step $(ckpt_step src/model.safetensors))" \
  test "$(ckpt_step out/model.safetensors)" = 1
# a source file that cannot be copied: one line naming it; the weights and config.json are written all the same
mkfifo src/vocab.json
run "$DFG" run from_src.dfg --steps 0 --threads 1 --save out2/
expect_rc 1 "--save DIR/ when the source's vocab.json is a FIFO"
expect_one_line "a source file that is not a regular file"
expect_in err.txt "save: $(pwd -P)/src/vocab.json: cannot copy it: not a regular file" "the message names the file"
check "... and config.json and model.safetensors are saved" test -s out2/config.json -a -s out2/model.safetensors
rm src/vocab.json
ln -s nowhere src/merges.txt
run "$DFG" run from_src.dfg --steps 0 --threads 1 --save out2/
expect_rc 1 "--save DIR/ when the source's merges.txt is a symbolic link to nothing"
expect_in err.txt "save: $(pwd -P)/src/merges.txt: cannot copy it: a symbolic link to nothing" "the message names the file"
rm src/merges.txt

echo
if [ "$failures" -eq 0 ]; then echo "grpo_cli_test: all checks passed"; exit 0; fi
echo "grpo_cli_test: $failures check(s) failed"
exit 1
