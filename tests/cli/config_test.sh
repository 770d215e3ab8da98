#!/usr/bin/env bash
# config_test.sh - dfg compile --config FILE (docs/cli.md, "TRL GRPOConfig fields"): a TRL
# GRPOConfig as JSON and as YAML (TRL's own layout too: each value on the line below its key)
# compiles to the same plan, byte for byte, as the --set line that says the same; a --set after
# --config overrides the file, one before it that disagrees is refused; fields dfg does not
# support (at a value other than TRL's default), fields TRL does not have, a batch that is not
# whole groups and malformed files are refused in one line (exit 2) naming the field or the
# line; docs/cli.md's table is `dfg compile --config-fields`.
#   usage: config_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
GRPO=$SRC/examples/grpo/grpo.c
. "$(dirname "$0")/testlib.sh"
testlib_begin config-test

# TRL's batch: 8 completions a micro-batch x 2 micro-batches = 16 = 4 prompts x 4 generations
cat >trl.yaml <<'YAML'
# grpo_config.yaml, as for trl grpo --config
learning_rate: 1e-5        # TRL's
num_generations: 4
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
max_completion_length: 8
temperature: 0.9
beta: 0.04
loss_type: "grpo"
scale_rewards: false       # TRL reads it as none
report_to:
  - none
bf16: true
use_vllm: false            # TRL's default: accepted
max_steps: 50
output_dir: 'out'
logging_steps: 5
seed: 7
YAML
cat >trl.json <<'JSON'
{"seed": 7, "logging_steps": 5, "output_dir": "out", "max_steps": 50, "use_vllm": false, "bf16": true,
 "report_to": ["none"], "scale_rewards": false, "loss_type": "grpo", "beta": 0.04, "temperature": 0.9,
 "max_completion_length": 8, "gradient_accumulation_steps": 2, "per_device_train_batch_size": 8,
 "num_generations": 4, "learning_rate": 0.00001}
JSON
# the same fields in TRL's example_config.yaml layout, in another order
cat >trl_layout.yaml <<'YAML'
seed:
  7
logging_steps:
  5
output_dir:
  out
max_steps:
  50
report_to:
  none
scale_rewards:
  false
loss_type:
  grpo
beta:
  0.04
temperature:
  0.9
max_completion_length:
  8
gradient_accumulation_steps:
  2
per_device_train_batch_size:
  8
num_generations:
  4
learning_rate:
  1.0e-05
YAML
# the table's order: learning_rate ... loss_type, then the batch, then max_steps and the rest
SETS=(--set learning_rate=1e-5 --set num_generations=4 --set max_completion_length=8 --set temperature=0.9
      --set beta=0.04 --set scale_rewards=none --set loss_type=grpo --set prompts_per_step=4 --set max_steps=50
      --set gradient_accumulation_steps=2 --set logging_steps=5 --set seed=7)

run "$DFG" compile "$GRPO" "${SETS[@]}" -o set.dfg
expect_rc 0 "the --set line compiles"
for f in trl.yaml trl.json trl_layout.yaml; do
  run "$DFG" compile "$GRPO" --config $f -o $f.dfg
  expect_rc 0 "--config $f compiles"
  if cmp -s set.dfg $f.dfg; then ok "--config $f: the --set line's plan, byte for byte"; else fail "--config $f: the plan differs from the --set line's"; fi
done
run "$DFG" compile "$GRPO" --config trl.yaml -o trl.yaml.dfg
expect_in out.txt "note: trl.yaml is ${SETS[*]}" "compile prints the --set line the file is"
expect_in out.txt "dfg run PLAN --checkpoint-dir out --save-every 500" "output_dir (and TRL's save_steps) as dfg run's options"

# a --set after --config overrides; before it, a disagreeing one is refused, an agreeing one is not
run "$DFG" compile "$GRPO" --config trl.yaml --set beta=0.1 -o over.dfg
expect_rc 0 "--set after --config"
OVER=("${SETS[@]}")
OVER[9]=beta=0.1
run "$DFG" compile "$GRPO" "${OVER[@]}" -o over_set.dfg
if cmp -s over.dfg over_set.dfg; then ok "--set beta=0.1 after --config overrides the file's beta"; else fail "--set after --config did not override"; fi
run "$DFG" compile "$GRPO" --set beta=0.1 --config trl.yaml -o x.dfg
expect_rc 2 "a --set before --config that disagrees"
expect_one_line "the disagreement"
expect_in err.txt "trl.yaml:8: 'beta' gives beta=0.04, but --set beta=0.1 before --config" "it names the field, its line and the --set"
run "$DFG" compile "$GRPO" --set beta=4e-2 --config trl.yaml -o agree.dfg
expect_rc 0 "a --set before --config that agrees (4e-2 is 0.04)"

# refused: fields dfg does not support, away from TRL's default; fields TRL does not have
refused() { # FILE-CONTENT EXPECTED WHAT
  printf '%b' "$1" >r.yaml
  run "$DFG" compile "$GRPO" --config r.yaml -o r.dfg
  expect_rc 2 "$3"
  expect_one_line "$3"
  expect_in err.txt "$2" "$3: the message"
  [ ! -e r.dfg ] || fail "$3: a plan was written"
}
refused 'beta: 0.1\nuse_vllm: true\n' "r.yaml:2: dfg does not support 'use_vllm' yet (only TRL's default, false)" "use_vllm: true"
refused 'fp16: yes\n' "r.yaml:1: dfg does not support 'fp16' yet" "fp16: yes (YAML 1.1's true)"
refused 'deepspeed: ds.json\n' "dfg does not support 'deepspeed' yet" "deepspeed"
refused 'model_init_kwargs:\n  torch_dtype: bfloat16\n' "r.yaml:1: dfg does not support 'model_init_kwargs' yet" "a nested model_init_kwargs"
refused 'steps_per_generation: 4\n' "dfg does not support 'steps_per_generation' 4 yet" "steps_per_generation"
refused 'num_train_epochs: 1\n' "dfg does not support 'num_train_epochs' yet" "num_train_epochs without max_steps"
refused 'optim: sgd\n' "dfg does not support 'optim' sgd yet" "optim: sgd"
refused 'learnin_rate: 1e-5\n' "r.yaml:1: 'learnin_rate' is not a field of TRL's GRPOConfig (the nearest is 'learning_rate'" "an unknown field"
refused 'num_generations: 16\n' "TRL's batch of 8 completions" "a batch that is not whole groups"
refused 'num_iterations: 2\nmax_steps: 101\n' "'max_steps' 101 is not whole dfg steps" "max_steps not a multiple of num_iterations"
refused 'beta: 0.1\nbeta: 0.2\n' "r.yaml:2: 'beta' is given twice (first on line 1)" "a field given twice"
printf '{"use_peft": true, "lora_dropout": 0.0, "lora_r": 4,\n "fsdp": "full_shard"}\n' >r.json
run "$DFG" compile "$GRPO" --config r.json -o r.dfg
expect_rc 2 "JSON: fsdp"
expect_in err.txt "r.json:2: dfg does not support 'fsdp' yet" "JSON: the field and its line"
# accepted: unsupported fields at TRL's default, and fields that change nothing dfg trains
printf 'use_vllm: false\nreport_to: wandb\ngradient_checkpointing: false\nvllm_gpu_memory_utilization: 0.9\n' >a.yaml
run "$DFG" compile "$GRPO" --config a.yaml -o a.dfg
expect_rc 0 "TRL's defaults and fields that change nothing are accepted"
expect_in out.txt "note: a.yaml is no setting" "they give no setting"

# malformed files name the line
printf '{"beta": 0.1,\n "loss_type": "grpo"\n "epsilon": 0.3}\n' >bad.json
run "$DFG" compile "$GRPO" --config bad.json -o bad.dfg
expect_rc 2 "malformed JSON"
expect_one_line "malformed JSON"
expect_in err.txt "bad.json:3: '\"' where ',' or '}' was expected" "malformed JSON: the line"
printf 'beta: 0.1\nloss_type: grpo\n  epsilon: 0.3\n' >bad.yaml
run "$DFG" compile "$GRPO" --config bad.yaml -o bad.dfg
expect_rc 2 "malformed YAML"
expect_in err.txt "bad.yaml:3: an indented line after 'loss_type'" "malformed YAML: the line"
printf 'beta: &b 0.1\n' >anchor.yaml
run "$DFG" compile "$GRPO" --config anchor.yaml -o bad.dfg
expect_rc 2 "a YAML anchor"
expect_in err.txt "anchor.yaml:1: '&' starts an anchor" "a YAML anchor: refused, not half read"

# docs/cli.md's table is the table
run "$DFG" compile --config-fields
expect_rc 0 "--config-fields"
sed -n '/<!-- trl-fields: begin -->/,/<!-- trl-fields: end -->/p' "$SRC/docs/cli.md" | sed '1d;$d' >doc_table.txt
if [ -s out.txt ] && cmp -s out.txt doc_table.txt; then ok "docs/cli.md's TRL fields section is dfg compile --config-fields"
else fail "docs/cli.md's TRL fields section differs from dfg compile --config-fields: paste its output between the markers"; fi
rows=$(grep -c '^DFG_TRL_FIELD(' "$SRC/tools/trl_fields.def")
[ "$(($(wc -l <out.txt) - 2))" -eq "$rows" ] && ok "one docs row per table row ($rows)" || fail "the docs table has not $rows rows"
testlib_end
