#!/usr/bin/env bash
# run_faults_test.sh - what dfg run leaves when it stops, and the commands it prints (issue 38's
# silent faults): a run that stops on an error still writes its --save from the last good step
# (with or without --checkpoint-dir), or ends with the command that exports the checkpoint; the
# command printed to continue a LoRA run works as given (pasted, it lands bit for bit on the
# uninterrupted run); --save names a directory (DIR/) or one file (.safetensors), nothing else;
# --max-steps is a total; piped output keeps the order of events.
#   usage: run_faults_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
ST=("python3" "$SRC/tests/cli/st_tool.py")
TOY="python3 $SRC/tests/cli/toy_reward.py"
. "$(dirname "$0")/testlib.sh"
testlib_begin run-faults-test
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
ckpt_step() { "${ST[@]}" meta "$1" dfg.step; }
last_step() { grep '^step ' "$1" | tail -1 | awk '{print $2}'; }
# wait_for PID CMD...: polls until CMD holds, or until the process PID has ended (then false):
# bounded by the run's progress, not by a clock
wait_for() { local pid=$1; shift; while ! "$@"; do kill -0 "$pid" 2>/dev/null || { "$@"; return; }; sleep 0.1; done; }

run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=5 -o nan.dfg
expect_rc 0 "compile the NaN pipeline (NaN gradients at step 5)"
run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=99 -o fine.dfg
expect_rc 0 "... and one that stays finite"
run "$DFG" run fine.dfg --steps 4 --threads 1 --save good4.safetensors
expect_rc 0 "4 good steps, saved"

# ---------------------------------------------------------------- --save after a failure
run "$DFG" run nan.dfg --steps 10 --threads 1 --save lost.safetensors
expect_rc 1 "NaN at step 5 without --checkpoint-dir"
expect_in err.txt "no checkpoint (no --checkpoint-dir)" "the error says there is no checkpoint"
check "the last line says --save was written, from which step" \
  [ "$(tail -1 err.txt)" = "dfg run: --save: wrote the parameters after step 4 (the last good one) to lost.safetensors" ]
run "${ST[@]}" same lost.safetensors good4.safetensors
expect_rc 0 "--save holds step 4's parameters, bit for bit a run of 4 good steps"
run "$DFG" run nan.dfg --steps 10 --threads 1 --checkpoint-dir ck --save kept.safetensors
expect_rc 1 "NaN at step 5 with --checkpoint-dir"
expect_in err.txt "the state after step 4 (the last good one) is saved to ck/checkpoint.safetensors" "the checkpoint is saved"
check "... and so is --save" [ "$(tail -1 err.txt)" = "dfg run: --save: wrote the parameters after step 4 (the last good one) to kept.safetensors" ]
run "${ST[@]}" same kept.safetensors good4.safetensors
expect_rc 0 "... with step 4's parameters"
# --save that cannot be written (its directory is missing): the last line exports the checkpoint
run "$DFG" run nan.dfg --steps 10 --threads 1 --checkpoint-dir ck2 --save nodir/x.safetensors
expect_rc 1 "NaN at step 5, --save into a missing directory"
cmd=$(tail -1 err.txt | sed -n 's/^dfg run: --save nodir\/x.safetensors was not written; export step 4 from the checkpoint with: //p')
check "the last line is the command that exports step 4 ($cmd)" [ -n "$cmd" ]
mkdir nodir
run eval "$cmd"
expect_rc 0 "that command, as printed"
run "${ST[@]}" same nodir/x.safetensors good4.safetensors
expect_rc 0 "... exports step 4's parameters"

# ---------------------------------------------------------------- piped output keeps the order of events
# a run that fails in its first step: its header (stdout) was printed before the error (stderr),
# and a pipe must show it first (block-buffered, it came out after)
run "$DFG" compile "$SRC/tests/cli/nan_pipeline.c" --set nan_step=1 -o nan1.dfg
"$DFG" run nan1.dfg --steps 3 --threads 1 --save first.safetensors 2>&1 | cat >piped.txt
header=$(grep -n "^nan1.dfg: program" piped.txt | cut -d: -f1)
first_err=$(grep -n '^dfg run: ' piped.txt | head -1 | cut -d: -f1)
in_order() { [ -n "$header" ] && [ -n "$first_err" ] && [ "$header" -lt "$first_err" ]; }
check "piped (2>&1 | ...): the header, then the error (lines ${header:-?}, ${first_err:-?})" in_order
check "... and last, the line about --save (step 0: the initial parameters)" \
  [ "$(tail -1 piped.txt)" = "dfg run: --save: wrote the parameters after step 0 (the last good one) to first.safetensors" ]

# ---------------------------------------------------------------- --save: a directory or one file
run "$DFG" run fine.dfg --steps 0 --save out
expect_rc 2 "--save without '/' nor .safetensors"
expect_one_line "the refusal"
expect_in err.txt "--save out: give DIR/ (ending in '/': a model or adapter directory) or FILE.safetensors (one file)" \
  "... names the two forms"
check "... and writes nothing" [ ! -e out ]
run "$DFG" run fine.dfg --steps 0 --save one.safetensors
expect_rc 0 "--save FILE.safetensors"
check "... writes one file" [ -f one.safetensors ]

# ---------------------------------------------------------------- --max-steps: a total
run "$DFG" run fine.dfg --max-steps 3 --threads 1 --checkpoint-dir ms
expect_rc 0 "--max-steps 3 on a fresh run"
steps_were() { [ "$(grep -c '^step ' out.txt)" = "$1" ] && [ "$(last_step out.txt)" = "$2" ]; }
check "... runs steps 1-3" steps_were 3 3
run "$DFG" run fine.dfg --resume ms --max-steps 5 --threads 1
expect_rc 0 "--resume at step 3 with --max-steps 5"
check "... runs steps 4 and 5" steps_were 2 5
check "... and the checkpoint is step 5" [ "$(ckpt_step ms/checkpoint.safetensors)" = 5 ]
run "$DFG" run fine.dfg --resume ms --max-steps 4 --threads 1
expect_rc 0 "--resume at step 5 with --max-steps 4"
expect_in out.txt "the step counter is at 5, at or past --max-steps 4: no steps to run" "... runs none, and says so"
check "... the checkpoint is still step 5" [ "$(ckpt_step ms/checkpoint.safetensors)" = 5 ]
run "$DFG" run fine.dfg --steps 2 --max-steps 4
expect_rc 2 "--steps and --max-steps together"
# a plan whose learning-rate schedule is max_steps long runs to its end, and never past it
run "$DFG" compile "$SRC/examples/grpo/grpo.c" --set max_steps=3 --set lr_scheduler_type=linear \
  --set prompts_per_step=2 --set num_generations=2 -o sched.dfg
run "$DFG" run sched.dfg --threads 1
expect_rc 0 "a max_steps=3 plan without --steps"
check "... runs its 3 steps" steps_were 3 3
run "$DFG" run sched.dfg --max-steps 5
expect_rc 2 "--max-steps 5 for a max_steps=3 plan"
expect_in err.txt "differs from the plan's max_steps 3" "... names the plan's"
run "$DFG" run sched.dfg --steps 4
expect_rc 2 "--steps 4 past a max_steps=3 plan's schedule"
expect_in err.txt "give --steps 3 at most" "... says how many it may run"

# ---------------------------------------------------------------- the continue command of a LoRA run works as given
# a base written by dfg, a LoRA plan scored by a reward program; SIGINT lands inside step 2
# whatever the machine's speed: the program holds the step open (toy_reward.py's gate)
MODEL=(--set model_type=qwen3 --set num_hidden_layers=2 --set hidden_size=32 --set num_attention_heads=4
       --set num_key_value_heads=2 --set head_dim=8 --set intermediate_size=64)
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o full.dfg "${MODEL[@]}"
run "$DFG" run full.dfg --steps 0 --save base/
expect_rc 0 "a base model directory"
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o lora.dfg --set model="$WORK/base" --set lora_r=4 --set lora_alpha=8 \
  --set reward=external --set reward_funcs=digits,short
expect_rc 0 "a LoRA plan with an external reward"
run "$DFG" run lora.dfg --weights base --steps 4 --threads 1 --checkpoint-dir ref --reward-cmd "$TOY"
expect_rc 0 "4 uninterrupted LoRA steps"
export TOY_REWARD_GATE=$WORK/gate
"$DFG" run lora.dfg --weights base --steps 4 --threads 1 --checkpoint-dir int --reward-cmd "$TOY gate 2" \
  --save adapter/ >int.txt 2>int.err &
bg_pid=$!
wait_for "$bg_pid" test -e "$WORK/gate.waiting"
kill -INT "$bg_pid"
wait_for "$bg_pid" grep -q "interrupted: stopping after this step" int.err
touch "$WORK/gate"
wait "$bg_pid"
rc=$?
expect_rc 130 "SIGINT during step 2 of a LoRA run"
cmd=$(sed -n 's/.*interrupted after step 2: checkpoint saved to int\/checkpoint.safetensors (continue with: \(.*\))$/\1/p' int.err)
check "the hint is a whole command ($cmd)" [ -n "$cmd" ]
case "$cmd" in *"--weights base"*) ok "... with the base (--weights)";; *) fail "... without --weights: $cmd";; esac
case "$cmd" in *"--reward-cmd"*) ok "... and the reward program";; *) fail "... without --reward-cmd: $cmd";; esac
run eval "$cmd"
expect_rc 0 "the printed command, run as given"
run "${ST[@]}" same int/checkpoint.safetensors ref/checkpoint.safetensors
expect_rc 0 "... lands on the uninterrupted run's step 4, bit for bit"
check "... and writes the --save the interrupted run was given" [ -f adapter/adapter_config.json ]

testlib_end
