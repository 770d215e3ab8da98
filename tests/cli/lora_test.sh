#!/usr/bin/env bash
# lora_test.sh - LoRA and QLoRA plans end to end through dfg run (docs/lora.md): a base model
# directory dfg writes itself, adapters trained on it and checkpointed without the base, a resume
# that takes the base from --weights and lands bit for bit on the uninterrupted run, PEFT's
# adapter format out and in, --merge, 4-bit base weights quantised as they load, and the refusals.
# (tests/golden/peft_golden.py checks the numbers against PEFT; this checks the command line.)
#   usage: lora_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
ST=("python3" "$SRC/tests/cli/st_tool.py")
. "$(dirname "$0")/testlib.sh"
testlib_begin lora-test
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
MODEL=(--set model_type=qwen3 --set num_hidden_layers=2 --set hidden_size=32 --set num_attention_heads=4
       --set num_key_value_heads=2 --set head_dim=8 --set intermediate_size=64)

# ---------------------------------------------------------------- a base model to adapt
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o full.dfg "${MODEL[@]}"
expect_rc 0 "compile a fully trained plan"
run "$DFG" run full.dfg --steps 0 --save base/
expect_rc 0 "write its random initialisation as a Hugging Face directory"
check "base/config.json written" test -s base/config.json

LORA=(--set model="$WORK/base" --set lora_r=4 --set lora_alpha=8 --set lora_target_modules=all-linear --set beta=0.04
      --set learning_rate=1e-3)
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o lora.dfg "${LORA[@]}"
expect_rc 0 "compile a LoRA plan from it"
expect_in out.txt "trained parameters (LoRA adapters) on a" "compile says what trains and what is frozen"
run "$DFG" inspect lora.dfg
expect_in out.txt "base_model" "inspect shows the frozen base as its own category"
expect_in out.txt "the trained weights (LoRA adapters)" "... and the adapters as the params"
check "no reference-model copy: ref_model is empty" grep -qE "ref_model +0 B" out.txt

# ---------------------------------------------------------------- checkpoints hold the adapters only
run "$DFG" run lora.dfg --weights base --steps 4 --threads 1 --checkpoint-dir full
expect_rc 0 "4 LoRA steps with a checkpoint"
"${ST[@]}" names full/checkpoint.safetensors >names.txt
check "the checkpoint holds the adapters" grep -q "^model.layers.1.mlp.down_proj.lora_B.weight$" names.txt
check "... and their optimizer moments" grep -q "^adamw.m.model.layers.0.self_attn.q_proj.lora_A.weight$" names.txt
check "... but no base weight" bash -c '! grep -qE "^model.layers.0.self_attn.q_proj.weight$|embed_tokens" names.txt'
run "$DFG" run lora.dfg --weights base --steps 2 --threads 1 --checkpoint-dir half
expect_rc 0 "2 steps"
run "$DFG" run lora.dfg --resume half --steps 2 --threads 1
expect_rc 2 "--resume of a LoRA checkpoint without --weights"
expect_in err.txt "give it with --weights DIR" "the refusal says the base is missing"
expect_one_line "the refusal"
run "$DFG" run lora.dfg --weights base --resume half --steps 2 --threads 1
expect_rc 0 "--weights base --resume: 2 more steps"
run "${ST[@]}" same full/checkpoint.safetensors half/checkpoint.safetensors
expect_rc 0 "4 steps = 2 + resume + 2: adapters and moments bit-identical"

# a checkpoint records the base it trained on: resuming it on another base is refused, naming both
run "$DFG" run full.dfg --steps 0 --seed 99 --save base2/
expect_rc 0 "another base (another random initialisation)"
run "$DFG" run lora.dfg --weights base2 --resume half --steps 2 --threads 1
expect_rc 2 "--resume on another base"
expect_in err.txt "was trained on base xxh64:" "the refusal names the checkpoint's base digest"
expect_in err.txt "(base), --weights base2 is xxh64:" "... where it came from, and the new base's"
expect_one_line "the other base's refusal"

# ---------------------------------------------------------------- PEFT's format out and in
run "$DFG" run lora.dfg --weights base --steps 2 --threads 1 --save adapter/
expect_rc 0 "--save DIR/ of a LoRA plan"
expect_in out.txt "saved the adapter to adapter/" "it says it wrote an adapter"
check "adapter_config.json: LORA, r 4, alpha 8, all seven targets" python3 -c '
import json; c = json.load(open("adapter/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8 and c["bias"] == "none", c
assert sorted(c["target_modules"]) == sorted("q_proj k_proj v_proj o_proj gate_proj up_proj down_proj".split()), c'
"${ST[@]}" names adapter/adapter_model.safetensors >anames.txt
check "PEFT's tensor names" grep -q "^base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight$" anames.txt
check "2 layers x 7 linears x (A, B)" [ "$(wc -l <anames.txt)" = 28 ]
run "$DFG" run lora.dfg --weights base --adapter adapter --steps 0 --save again.safetensors
expect_rc 0 "--adapter loads it"
expect_in out.txt "loaded the adapter from adapter (28 tensors)" "every adapter tensor loaded"
run "$DFG" run lora.dfg --weights base --steps 2 --threads 1 --save same.safetensors
run "${ST[@]}" close again.safetensors same.safetensors 0
expect_rc 0 "the adapter read back equals the adapters that wrote it"

run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o r8.dfg "${LORA[@]}" --set lora_r=8
run "$DFG" run r8.dfg --weights base --adapter adapter --steps 0
expect_rc 2 "an adapter of another rank"
expect_in err.txt "the adapter has r=4, lora_alpha=8; the plan lora_r=8" "the refusal names both ranks"
expect_one_line "the rank refusal"
mkdir -p broken && cp adapter/adapter_model.safetensors broken/ && printf '{"r": 4,' >broken/adapter_config.json
run "$DFG" run lora.dfg --weights base --adapter broken --steps 0
expect_rc 2 "a damaged adapter_config.json"
expect_one_line "the damaged config's refusal"
run "$DFG" run lora.dfg --weights base --adapter nowhere --steps 0
expect_rc 2 "a missing adapter directory"
expect_in err.txt "nowhere/adapter_config.json" "the message names the file"
run "$DFG" run full.dfg --adapter adapter --steps 0
expect_rc 2 "--adapter on a plan without adapters"
expect_in err.txt "needs a LoRA plan" "the refusal says why"
run "$DFG" run lora.dfg --weights base --steps 0 --save merged --merge
expect_rc 2 "--merge without a directory"

# ---------------------------------------------------------------- merged, and 4-bit
run "$DFG" run lora.dfg --weights base --adapter adapter --steps 0 --save merged/ --merge
expect_rc 0 "--save DIR/ --merge"
"${ST[@]}" names merged/model.safetensors >mnames.txt
check "the merged directory holds base weights under their own names, no adapter" \
  bash -c 'grep -q "^model.layers.0.self_attn.q_proj.weight$" mnames.txt && ! grep -q lora mnames.txt'
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o lora_count.dfg "${LORA[@]}"
grep -o 'on a [0-9.]* [kMG] base' out.txt >count_lora.txt
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o q4.dfg "${LORA[@]}" --set load_in_4bit=true --set bnb_4bit_use_double_quant=true
expect_rc 0 "compile a QLoRA plan (double quantisation)"
grep -o 'on a [0-9.]* [kMG] base' out.txt >count_q4.txt
check "QLoRA's base has the parameters of the base it quantises ($(cat count_lora.txt), not its 4-bit storage)" \
  bash -c 'test -s count_lora.txt && cmp -s count_lora.txt count_q4.txt'
run "$DFG" run q4.dfg --weights base --adapter adapter --steps 2 --threads 1 --save q4merged/ --merge
expect_rc 0 "QLoRA: the base quantised as it loads, two steps, merged out"
"${ST[@]}" names q4merged/model.safetensors >qnames.txt
check "its merged weights carry no 4-bit names" bash -c '! grep -qE "nf4|absmax" qnames.txt'
run "${ST[@]}" norm-close merged/model.safetensors q4merged/model.safetensors 0.2
expect_rc 0 "the 4-bit model is the base to NF4's precision"
run "${ST[@]}" same merged/model.safetensors q4merged/model.safetensors
expect_rc 3 "... and not the base itself (4 bits changed it)"

# ---------------------------------------------------------------- use_rslora: one value, however spelt
# (it once trained with alpha/sqrt(r) for =1 and saved "use_rslora": false, so PEFT loaded the
# adapter at alpha/r): every spelling of true trains the same adapter and saves true
for v in 1 true yes; do
  run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o rs_$v.dfg "${LORA[@]}" --set use_rslora=$v
  expect_rc 0 "compile with use_rslora=$v"
  run "$DFG" run rs_$v.dfg --weights base --steps 2 --threads 1 --save rs_$v/
  expect_rc 0 "train with use_rslora=$v"
  check "use_rslora=$v: adapter_config.json says use_rslora true" python3 -c '
import json, sys; c = json.load(open(sys.argv[1] + "/adapter_config.json")); assert c["use_rslora"] is True, c' rs_$v
done
run "${ST[@]}" same rs_1/adapter_model.safetensors rs_true/adapter_model.safetensors
expect_rc 0 "use_rslora=1 trains the adapter use_rslora=true does, bit for bit"
run "${ST[@]}" same rs_yes/adapter_model.safetensors rs_true/adapter_model.safetensors
expect_rc 0 "... and so does use_rslora=yes"
run "$DFG" run lora.dfg --weights base --steps 2 --threads 1 --save rs_off/
run "${ST[@]}" same rs_off/adapter_model.safetensors rs_true/adapter_model.safetensors
expect_rc 3 "... which is not the adapter of use_rslora=false (the scale differs)"
run "$DFG" compile "$SRC/examples/grpo/grpo.c" -o rs_bad.dfg "${LORA[@]}" --set use_rslora=maybe
expect_rc 2 "use_rslora=maybe is refused"
expect_in err.txt "setting 'use_rslora': 'maybe' is not a boolean (true/false, 1/0, yes/no, on/off)" "... naming the key and what it accepts"

testlib_end
