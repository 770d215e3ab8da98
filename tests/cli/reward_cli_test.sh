#!/usr/bin/env bash
# reward_cli_test.sh - prompts from a dataset and rewards from outside the plan, end to end on
# examples/grpo/grpo.c (docs/rewards.md): a reward program that dies, hangs or answers garbage, a short
# or mistyped answer, an "error" answer, and a dataset that is malformed or has a prompt too long,
# each stop the run with one line naming the step (and the row or line) and a checkpoint of the
# last good state that --resume continues bit for bit as if nothing had happened. Also: the
# plugin path gives the built-in reward's run exactly, and the dataset's position is resumed.
#   usage: reward_cli_test.sh /path/to/dfg /path/to/source-tree
# Each check prints "ok - ..." or "FAIL - ..."; exit 1 when any failed. Runs use --threads 1.
set -u
DFG=$1
SRC=$2
GRPO=${DFG_TEST_GRPO:-$SRC/examples/grpo/grpo.c}
ST=("python3" "$SRC/tests/cli/st_tool.py")
TOY="python3 $SRC/tests/cli/toy_reward.py"
. "$(dirname "$0")/testlib.sh"
testlib_begin reward-cli-test

check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
# the lines dfg wrote (a reward program's own stderr, such as a shell's "Killed", is not dfg's)
expect_one_line() {
  local n; n=$(grep -c '^dfg ' err.txt)
  if [ "$n" -eq 1 ]; then ok "$1: one line"; else fail "$1: expected one line from dfg on stderr, got $n"; fi
}
ckpt_step() { "${ST[@]}" meta "$1" dfg.step; }
metric_at() { awk -v s="$2" -v m="$3" '$1 == "step" && $2 == s { for (i = 3; i < NF; i++) if ($i == m) print $(i + 1) }' "$1"; }

# ---------------------------------------------------------------- the plugin = the built-in reward
# the three parts of "mixed" as plugin functions, weighted 0.6/0.3/0.1, give the same rewards to
# the bit, so the same run
cc -shared -fPIC -O2 -I "$SRC/runtime/host" -I "$SRC/graph" "$SRC/examples/rewards/digits_plugin.c" -o digits_plugin.so
check "the example plugin builds" [ -f digits_plugin.so ]
run "$DFG" compile "$GRPO" -o builtin.dfg
run "$DFG" compile "$GRPO" --set reward=external --set reward_funcs=exact,partial,format --set reward_weights=0.6,0.3,0.1 -o plugin.dfg
expect_rc 0 "compile with reward=external and three weighted functions"
run "$DFG" run builtin.dfg --steps 4 --threads 1 --checkpoint-dir b
run "$DFG" run plugin.dfg --steps 4 --threads 1 --checkpoint-dir p --reward-lib ./digits_plugin.so
expect_rc 0 "run with --reward-lib"
expect_in out.txt "rewards/partial/mean" "per-function means are metrics"
expect_in out.txt "reward plugin:" "the reward's cost per step is printed"
run "${ST[@]}" same b/checkpoint.safetensors p/checkpoint.safetensors --except metric. --except reward_values
expect_rc 0 "plugin 0.6 exact + 0.3 partial + 0.1 format = built-in mixed, bit for bit after 4 steps"

# ---------------------------------------------------------------- refusals before any step
run "$DFG" run plugin.dfg --steps 1
expect_rc 2 "an external-reward plan without --reward-cmd or --reward-lib"
expect_in err.txt "give --reward-cmd CMD or --reward-lib LIB" "... says what to give"
run "$DFG" run builtin.dfg --steps 1 --reward-cmd "$TOY"
expect_rc 2 "--reward-cmd on a built-in-reward plan"
run "$DFG" run plugin.dfg --steps 1 --reward-cmd "$TOY"
expect_rc 1 "a program whose functions are not the plan's reward_funcs"
expect_in err.txt "declares the reward functions digits,short, but the plan was compiled with reward_funcs=exact,partial,format" \
  "... names both lists"
run "$DFG" run plugin.dfg --steps 1 --reward-cmd "echo not-json"
expect_rc 1 "a program whose first line is not the hello"
expect_in err.txt "its first line must be {\"reward_funcs\": [names]}, got 'not-json'" "... quotes what it said"

# ---------------------------------------------------------------- a reward program's faults
# each stops step 3 with one line and saves the state after step 2; --resume with a good program
# then gives exactly the checkpoint of an uninterrupted 4-step run
run "$DFG" compile "$GRPO" --set reward=external --set reward_funcs=digits,short -o toy.dfg
cp out.txt toy_compile.txt
export TOY_REWARD_LOG="$WORK/requests.log"
run "$DFG" run toy.dfg --steps 4 --threads 1 --checkpoint-dir ref --reward-cmd "$TOY" --metrics ref.jsonl
expect_rc 0 "a run scored by a reward program"
expect_in ref.jsonl '"reward_ms":' "the metrics file has the reward's time per step"
check "the program got one request per step, every row" [ "$(cat requests.log)" = "$(printf '1 64\n2 64\n3 64\n4 64')" ]
check "a function's null leaves its mean (rewards/short/mean is 1 where defined)" \
  [ "$(metric_at out.txt 1 rewards/short/mean)" = 1 ]
# No check depends on how fast this machine is: only "hang" needs a deadline to pass, and the
# others run with a deadline no answer comes near (the program answers at once, or dies, which
# dfg sees at once). The hang's deadline must also not pass before step 3, while the program
# starts (Python's start-up, on a loaded machine) or answers steps 1 and 2: when it did, the run
# is tried again with a deadline four times as long (2, 8, 32, 128 s), so that a slow machine
# costs time, never a false failure; the checks are those of the last try.
fault_run() { # fault_run MODE TIMEOUT
  rm -rf "f_$1"
  run "$DFG" run toy.dfg --steps 5 --threads 1 --checkpoint-dir "f_$1" --reward-cmd "$TOY $1 3 $WORK" --reward-timeout "$2"
}
fault() { # fault MODE WHAT NEEDLE
  if [ "$1" = hang ]; then
    local t
    for t in 2 8 32 128; do
      fault_run hang $t
      grep -q "step 3, host stage 'reward'.*no answer within" err.txt && break
      grep -q "no answer within" err.txt || break # another failure: reported by the checks below
      echo "  (the ${t} s deadline passed before step 3 on this machine: trying again with $((t * 4)) s)"
    done
    set -- "$1" "$2" "no answer within $t s (--reward-timeout): killed it"
  else
    fault_run "$1" 600
  fi
  expect_rc 1 "reward program $2 at step 3"
  expect_one_line "$1"
  expect_in err.txt "step 3, host stage 'reward'" "$1: the line names the step"
  expect_in err.txt "$3" "$1: ... and the reason"
  expect_in err.txt "the state after step 2 (the last good one) is saved to f_$1/checkpoint.safetensors" "$1: ... and the checkpoint"
  check "$1: the checkpoint is step 2" [ "$(ckpt_step "f_$1/checkpoint.safetensors")" = 2 ]
  run "$DFG" run toy.dfg --steps 2 --threads 1 --resume "f_$1" --reward-cmd "$TOY"
  expect_rc 0 "$1: --resume with a working program"
  check "$1: resumed = uninterrupted, bit for bit" cmp -s "f_$1/checkpoint.safetensors" ref/checkpoint.safetensors
}
fault die "exits" "exited with status 3"
fault hang "hangs" "(set by fault)"
fault sigkill "is killed" "(a shell's report of signal 9"
fault garbage "answers garbage" "the reward program's answer is not a JSON object: 'rewards: lots'"
fault short "answers a row short" "the reward program answered 63 rows, expected 64 (row 63 has none)"
fault string "answers a string" "row 1: the reward program's value for 'digits' is \"abc\", not a finite number or null"
fault error "reports an error" "the reward program reported an error: the grader is down"
fault nan "answers a raw NaN" "the reward program's answer holds NaN or Infinity, which are not JSON (a value that does not apply is null, TRL's None"
# this test's own programs (their command lines end in $WORK): another test running beside this
# one may have its own toy programs running
check "no reward program is left running" [ -z "$(pgrep -f "toy_reward.py [a-z]* 3 $WORK" || true)" ]

# ---------------------------------------------------------------- null for every row: TRL's None
# a function that applies to no row of a step has no mean (TRL logs NaN): the step goes on, the
# metric is n/a on the line and null in --metrics; a row no function applies to scores 0, with a
# warning as TRL's
run "$DFG" run toy.dfg --steps 4 --threads 1 --every 1 --checkpoint-dir none --reward-cmd "$TOY none 2" --metrics none.jsonl
expect_rc 0 "'short' answers null for every row from step 2: the run goes on"
check "steps 1-4 ran" [ "$(grep -c '^step ' out.txt)" = 4 ]
check "rewards/short/mean is n/a on the line of step 3" [ "$(metric_at out.txt 3 rewards/short/mean)" = "n/a" ]
check "... and null in --metrics; the reward is digits' alone" python3 -c '
import json
rows = [json.loads(l) for l in open("none.jsonl")]
assert rows[0]["rewards/short/mean"] == 1 and rows[2]["rewards/short/mean"] is None, rows[2]
assert rows[2]["rewards/short/std"] is None and rows[2]["reward"] == rows[2]["rewards/digits/mean"], rows[2]'
if grep -q "last good\|not finite\|is nan" err.txt; then fail "no step is called bad: $(cat err.txt)"; else ok "no step is called bad"; fi
run "$DFG" run toy.dfg --steps 6 --threads 1 --every 1 --reward-cmd "$TOY allnone 2"
expect_rc 0 "no function applies to any row from step 2: the run goes on"
expect_in err.txt "warning: step 2: no reward function applied (all answered null) to 64 of 64 rows (the first: row 0): their reward is 0" \
  "... with TRL's warning, naming the step and the rows"
expect_in err.txt "warning: step 4: no reward function applied" "... once a step"
expect_in err.txt "(further such warnings are not shown)" "... for the first three such steps"
check "... and no more" [ "$(grep -c 'no reward function applied' err.txt)" = 3 ]
check "the reward of step 3 is 0" [ "$(metric_at out.txt 3 reward)" = 0 ]

# ---------------------------------------------------------------- the plan says what the reward program must declare
expect_in toy_compile.txt "note: reward=external: the reward program (dfg run --reward-cmd) or plugin (--reward-lib) must declare the functions reward_funcs=digits,short, in this order" \
  "dfg compile names the functions the reward program must declare"
expect_in toy_compile.txt "tools/reward_server.py --list" "... and how to list a module's"

# ---------------------------------------------------------------- a dataset
python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 40 --seed 5 -o reverse.jsonl >/dev/null
check "make_dataset writes the reverse task" [ "$(wc -l <reverse.jsonl)" = 40 ]
run "$DFG" compile "$GRPO" --set dataset=reverse.jsonl --set reward_funcs=exact,partial,format \
  --set reward_weights=0.6,0.3,0.1 --set max_completion_length=5 -o ds.dfg
expect_rc 0 "compile with a dataset"
expect_in out.txt "reward=external" "a dataset's reward is external by default"
if grep -q " task=\| digits=" out.txt; then fail "a dataset plan's settings name no built-in task: $(grep '^settings' out.txt)"
else ok "a dataset plan's settings name no built-in task"; fi
run "$DFG" compile "$GRPO" --set dataset=reverse.jsonl --set task=add -o dstask.dfg
expect_rc 2 "a dataset plan refuses task="
expect_in err.txt "task picks a built-in task, but the prompts come from the dataset" "... saying why"
run "$DFG" run ds.dfg --steps 6 --threads 1 --checkpoint-dir dsref --reward-lib ./digits_plugin.so
expect_rc 0 "train on the dataset (6 steps of 8 prompts: 48 draws over 40 rows, into epoch 2)"
check "the dataset position is checkpointed: epoch 1, 8 rows into it" \
  [ "$(python3 "$SRC/tests/cli/st_tool.py" get dsref/checkpoint.safetensors dataset.position)" = "1 8" ]
run "$DFG" run ds.dfg --steps 4 --threads 1 --checkpoint-dir ds4 --reward-lib ./digits_plugin.so
run "$DFG" run ds.dfg --steps 2 --threads 1 --resume ds4 --reward-lib ./digits_plugin.so
check "a resumed dataset run continues where it stopped (= uninterrupted, bit for bit)" \
  cmp -s ds4/checkpoint.safetensors dsref/checkpoint.safetensors
# a malformed dataset is refused naming its line, at compile and at the start of a run
cp reverse.jsonl bad.jsonl
sed -i '7s/.*/{"prompt_ids": [5, 3, "x"]}/' bad.jsonl
run "$DFG" compile "$GRPO" --set dataset=bad.jsonl -o bad.dfg
expect_rc 2 "compile refuses a malformed dataset"
expect_in err.txt "bad.jsonl:7:" "... naming the file and line"
cp reverse.jsonl live.jsonl
run "$DFG" compile "$GRPO" --set dataset=live.jsonl --set reward_funcs=exact,partial,format -o live.dfg
run "$DFG" run live.dfg --steps 2 --threads 1 --checkpoint-dir live --reward-lib ./digits_plugin.so
cp bad.jsonl live.jsonl
run "$DFG" run live.dfg --steps 2 --threads 1 --resume live --reward-lib ./digits_plugin.so
expect_rc 1 "a dataset damaged between runs stops the resumed run before any step"
expect_one_line "damaged dataset"
expect_in err.txt "live.jsonl:7:" "... naming the line"
check "... and leaves the checkpoint as it was (step 2)" [ "$(ckpt_step live/checkpoint.safetensors)" = 2 ]
cp reverse.jsonl live.jsonl
run "$DFG" run live.dfg --steps 2 --threads 1 --resume live --reward-lib ./digits_plugin.so
expect_rc 0 "with the dataset repaired, the checkpoint resumes"
run "$DFG" run live.dfg --steps 4 --threads 1 --checkpoint-dir live4 --reward-lib ./digits_plugin.so
check "... to the state of an uninterrupted run, bit for bit" cmp -s live/checkpoint.safetensors live4/checkpoint.safetensors
echo '{"prompt_ids": [5, 6, 7, 14], "answer": "654"}' >>live.jsonl
run "$DFG" run live.dfg --steps 1 --threads 1 --resume live --reward-lib ./digits_plugin.so
expect_rc 0 "a dataset edited between runs (a row appended) resumes"
expect_in err.txt "warning: step 5: the dataset is not the one the checkpoint's run drew from (its content differs; 41 rows now)" \
  "... with a warning that it changed"
# a prompt longer than max_prompt_length with truncate_prompts=error: compile counts and refuses
# it; a dataset edited after compiling stops the run at the step that draws it
printf '{"prompt_ids": [5, 6, 14]}\n%.0s' $(seq 8) >long.jsonl
printf '{"prompt_ids": [5, 6, 7, 8, 9, 14]}\n' >>long.jsonl
run "$DFG" compile "$GRPO" --set dataset=long.jsonl --set shuffle_dataset=false --set max_prompt_length=4 \
  --set truncate_prompts=error --set reward_funcs=digits,short --set max_completion_length=4 -o long.dfg
expect_rc 2 "compile with truncate_prompts=error and a prompt over max_prompt_length"
expect_in err.txt "truncate_prompts=error: 1 of the 9 prompts of $(pwd -P)/long.jsonl are longer than max_prompt_length 4 (the first at line 9, 6 tokens" \
  "... counts them and names the first"
run "$DFG" compile "$GRPO" --set dataset=long.jsonl --set shuffle_dataset=false --set max_prompt_length=4 \
  --set reward_funcs=digits,short --set max_completion_length=4 -o cut.dfg
expect_in out.txt "note: 1 of the 9 prompts of $(pwd -P)/long.jsonl are longer than max_prompt_length 4 (the longest 6 tokens): they are cut from the left" \
  "truncate_prompts=left: compile notes how many prompts it will cut"
printf '{"prompt_ids": [5, 6, 14]}\n%.0s' $(seq 9) >long.jsonl
run "$DFG" compile "$GRPO" --set dataset=long.jsonl --set shuffle_dataset=false --set max_prompt_length=4 \
  --set truncate_prompts=error --set reward_funcs=digits,short --set max_completion_length=4 -o long.dfg
expect_rc 0 "compile with truncate_prompts=error, every prompt fits"
sed -i '9s/.*/{"prompt_ids": [5, 6, 7, 8, 9, 14]}/' long.jsonl
run "$DFG" run long.dfg --steps 3 --threads 1 --checkpoint-dir long --reward-cmd "$TOY"
expect_rc 1 "a dataset edited after compiling, a prompt now over max_prompt_length, truncate_prompts=error"
expect_in err.txt "truncate_prompts=error: 1 of the 9 prompts of $(pwd -P)/long.jsonl are longer than max_prompt_length 4" \
  "... is refused when the run starts (the pipeline's settings are checked again), before any step"
expect_one_line "the edited dataset's refusal"
check "... and nothing was trained or saved" [ ! -e long/checkpoint.safetensors ]
run "$DFG" compile "$GRPO" --set dataset=long.jsonl --set shuffle_dataset=false --set max_prompt_length=4 \
  --set reward_funcs=digits,short --set max_completion_length=4 -o cut.dfg
run "$DFG" run cut.dfg --steps 2 --threads 1 --reward-cmd "$TOY"
expect_rc 0 "truncate_prompts=left (the default) cuts it instead"
check "prompts_truncated counts it at step 2" [ "$(metric_at out.txt 2 prompts_truncated)" = 1 ]
sed -i '9s/.*/{"prompt_ids": [5, 6, 14]}/' long.jsonl
run "$DFG" run long.dfg --steps 2 --threads 1 --reward-cmd "$TOY"
expect_rc 0 "with the long prompt shortened, the truncate_prompts=error plan runs"

# ---------------------------------------------------------------- fixed rollouts of left-padded prompts
# a dataset plan's rollout says where each prompt starts: prompt_start, or TRL's attention_mask;
# the two give the same step, and so do other pad token ids (pads are never attended)
printf '{"prompt_ids": [5, 14]}\n{"prompt_ids": [3, 4, 5, 14]}\n' >two.jsonl
run "$DFG" compile "$GRPO" --set dataset=two.jsonl --set prompts_per_step=2 --set num_generations=2 \
  --set max_completion_length=3 --set reward_funcs=digits,short -o two.dfg
expect_rc 0 "compile a dataset plan with prompts of 2 and 4 tokens"
python3 - "$SRC/tests/cli" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import struct
from st_tool import write
T, rows = 7, [([0, 0, 5, 14], 2), ([0, 0, 5, 14], 2), ([3, 4, 5, 14], 0), ([3, 4, 5, 14], 0)]
comp = [[6, 7, 1], [8, 1, 1], [2, 2, 2], [9, 1, 4]]
cmask = [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]]
def f32(v): return ("F32", (len(v),) if not isinstance(v[0], list) else (len(v), len(v[0])), struct.pack("<%df" % len(sum(v, []) if isinstance(v[0], list) else v), *(sum(v, []) if isinstance(v[0], list) else v)))
def i32(v): return ("I32", (len(v),) if not isinstance(v[0], list) else (len(v), len(v[0])), struct.pack("<%di" % len(sum(v, []) if isinstance(v[0], list) else v), *(sum(v, []) if isinstance(v[0], list) else v)))
def rollout(pad, with_mask, hole=False):
    tok = [[pad if i < s else p[i] for i in range(4)] + c for (p, s), c in zip(rows, comp)]
    mask = [[0.0] * 4 + [float(x) for x in m] for m in cmask]
    t = {"tokens": i32(tok), "completion_mask": f32(mask), "rewards": f32([0.25, 1.0, 0.5, 0.0])}
    if with_mask:
        am = [[0 if i < s else 1 for i in range(T)] for (_, s) in rows]
        if hole: am[2][1] = 0
        t["attention_mask"] = i32(am)
    else:
        t["prompt_start"] = i32([s for _, s in rows])
    return t
write("start.safetensors", rollout(0, False), {})
write("amask.safetensors", rollout(0, True), {})
write("pads.safetensors", rollout(11, True), {})
write("hole.safetensors", rollout(0, True, hole=True), {})
PY
for r in start amask pads; do
  run "$DFG" run two.dfg --steps 1 --threads 1 --rollouts $r.safetensors --dump d_$r.safetensors
  expect_rc 0 "train one step on the $r rollout"
done
run "${ST[@]}" same d_start.safetensors d_amask.safetensors
expect_rc 0 "attention_mask = prompt_start: the same step, bit for bit"
run "${ST[@]}" same d_start.safetensors d_pads.safetensors
expect_rc 0 "other pad token ids: the same step, bit for bit (pads are never attended)"
run "$DFG" run two.dfg --steps 1 --rollouts hole.safetensors
expect_rc 2 "an attention_mask with a hole in the prompt is refused"
expect_in err.txt "attention_mask row 2 has a 0 at prompt column 1 after its prompt began at column 0: only left padding is supported" \
  "... naming the row and column"

# ---------------------------------------------------------------- a task plan, other prompt lengths, rollout files
# with --rollouts the task never runs, so nothing about it refuses the run; a plan whose task
# cannot make its rollouts says so when compiled, and a run without --rollouts is refused at once
run "$DFG" compile "$GRPO" --set max_prompt_length=3 --set share_prompts=0 -o short.dfg
expect_rc 0 "a task plan whose prompts (4 tokens) do not fit max_prompt_length 3 compiles"
expect_in out.txt "note: this plan trains only on fixed rollouts (dfg run --rollouts FILE): task 'reverse' (digits 3) has prompts of 4 tokens, more than max_prompt_length 3" \
  "... and dfg compile says it trains only on rollout files"
run "$DFG" run short.dfg --steps 1
expect_rc 2 "... run without --rollouts: refused before any step"
expect_in err.txt "this plan trains only on fixed rollouts (give --rollouts FILE): task 'reverse'" "... saying why and what to give"
"${ST[@]}" rollouts r3.safetensors 64 8 15 7 --prompt-len 3
run "$DFG" run short.dfg --steps 2 --threads 1 --rollouts r3.safetensors
expect_rc 0 "... and trains on a rollout file of 3-token prompts"
run "$DFG" compile "$GRPO" --set max_prompt_length=7 --set padded_prompts=false -o nopad.dfg
expect_in out.txt "has prompts of 4 tokens, fewer than max_prompt_length 7, and padded_prompts=false leaves no room" \
  "padded_prompts=false with longer prompt columns: rollout files only"
# a longer max_prompt_length left-pads the task's prompts (padded_prompts=auto): it runs
run "$DFG" compile "$GRPO" --set max_prompt_length=7 -o pad7.dfg
expect_rc 0 "a task plan with max_prompt_length 7 > the task's 4 compiles"
expect_in out.txt " padded_prompts=auto " "... padded_prompts is a setting"
if grep -q "^note: this plan trains only" out.txt; then fail "... and makes its own rollouts"; else ok "... and makes its own rollouts"; fi
run "$DFG" run pad7.dfg --steps 2 --threads 1 --every 1 --dump pad7_dump.safetensors
expect_rc 0 "... which it trains on, left-padded"
check "... its loss is finite" python3 -c 'import math, sys; assert math.isfinite(float(sys.argv[1]))' "$("${ST[@]}" get pad7_dump.safetensors loss)"
# left-padded rollout files without a dataset (padded_prompts=true): TRL's attention_mask or
# prompt_start; a padded row trains as the same row unpadded (pads are never attended)
"${ST[@]}" rollouts plain.safetensors 64 9 15 11 --group 8
"${ST[@]}" rollouts leftpad.safetensors 64 9 15 11 --group 8 --left-pad 3
run "$DFG" compile "$GRPO" --set n_positions=12 -o plain.dfg
run "$DFG" compile "$GRPO" --set padded_prompts=true --set max_prompt_length=7 --set n_positions=12 -o padded.dfg
expect_rc 0 "padded_prompts=true without a dataset compiles"
run "$DFG" run plain.dfg --steps 1 --threads 1 --rollouts plain.safetensors --dump plain_d.safetensors
expect_rc 0 "one step on unpadded rows"
run "$DFG" run padded.dfg --steps 1 --threads 1 --rollouts leftpad.safetensors --dump padded_d.safetensors
expect_rc 0 "one step on the same rows left-padded by 3, with TRL's attention_mask"
# the log-probs, loss and gradient norm before the update (the update itself goes through Adam,
# which turns the key bias's zero gradient, float noise either way, into full-size steps)
check "... scores every token as the unpadded rows do (log-probs, loss, grad_norm within 1e-6)" python3 - "$SRC/tests/cli" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from st_tool import read, values
a, b = read("plain_d.safetensors")[0], read("padded_d.safetensors")[0]
la, lb = values(a["logp"]), values(b["logp"])
T, P = a["logp"][1][1], 3  # (N, 9) and (N, 12): the padded rows' columns 3.. are the plain rows'
rows = len(la) // T
worst = max(abs(la[r * T + j] - lb[r * (T + P) + P + j]) for r in range(rows) for j in range(T))
assert worst <= 1e-6 and any(v != 0 for v in la), worst
for k in ("loss", "grad_norm"):
    x, y = values(a[k])[0], values(b[k])[0]
    assert abs(x - y) <= 1e-6 * max(1.0, abs(x)), (k, x, y)
print("worst log-prob difference %.3g" % worst)
PY
"${ST[@]}" rollouts nomask.safetensors 64 12 15 11 --group 8 --prompt-len 7
run "$DFG" run padded.dfg --steps 1 --threads 1 --rollouts nomask.safetensors
expect_rc 0 "a padded plan takes a file without attention_mask or prompt_start"
expect_in out.txt "prompt_start (none in the file: no padding)" "... and says it reads no padding"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
