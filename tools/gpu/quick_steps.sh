# shellcheck shell=bash disable=SC2034
# tools/gpu/quick_steps.sh - steps 1-6 of tools/gpu-check-quick.sh (sourced after common.sh and
# decode.sh; that script's header says what each measures). Each step records one verdict; a feature
# dfg does not have yet (a setting, an inspect flag) is a SKIP that names what is missing.
QUICK=$ROOT/tools/gpu/quick.py
declare -A EST STEP_NAME SHAPE_KV
# Seconds each step is expected to take on an H200 (a guess before the first run there, from the
# H100's 106 s build of everything with 16 cores; the results file puts the seconds taken beside it)
EST=([a]=2 [b]=100 [1]=170 [2]=25 [3]=35 [4]=60 [5]=5 [6]=30)
# the rows' names (a step the budget leaves out gets its row too)
declare -A STEP_ROW=([1]="1. LoRA/QLoRA vs peft" [2]="2. decode" [3]="3. batch_invariant" [4]="4. share_prompts"
                     [5]="5. predicted vs measured" [6]="6. tools loop")
STEP_NAME=([1]="LoRA and QLoRA GRPO steps, dfg against transformers + peft"
           [2]="decode tokens/s against the bandwidth floor"
           [3]="batch_invariant: its cost and the sampling/training log-prob difference"
           [4]="shared-prompt decode (share_prompts) on and off"
           [5]="predicted (dfg inspect --device) against measured stage times"
           [6]="the calculator's multi-turn tool loop on the device")

# quick_shapes: the models and batches of each step, a GPU's or the rehearsal's tiny ones
quick_shapes() {
  COMMON_KV="tie_word_embeddings=true rope_theta=1000000 max_position_embeddings=32768 rms_norm_eps=1e-06"
  if [ "$REHEARSE" = 1 ]; then
    SHAPES=(tiny-0.5b-role tiny-1.5b-role)
    SHAPE_KV[tiny-0.5b-role]="hidden_size=64 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 intermediate_size=128 vocab_size=512"
    SHAPE_KV[tiny-1.5b-role]="hidden_size=64 num_hidden_layers=3 num_attention_heads=4 num_key_value_heads=2 intermediate_size=96 vocab_size=512"
    V=512 P=1 G=4 LP=8 LC=8 DFG_STEPS=2 TORCH_WARMUP=1 TORCH_STEPS=1
    DEC_DIMS="2 64 4 2 16 128 512 4 8" DEC_STEPS=2 BI_LC=8 SH_LP=48 SH_LC=4 SH_STEPS=2 CALC_SFT=2 CALC_STEPS=4
  else
    SHAPES=(qwen2.5-0.5b qwen2.5-1.5b)
    SHAPE_KV[qwen2.5-0.5b]="hidden_size=896 num_hidden_layers=24 num_attention_heads=14 num_key_value_heads=2 intermediate_size=4864 vocab_size=151936"
    SHAPE_KV[qwen2.5-1.5b]="hidden_size=1536 num_hidden_layers=28 num_attention_heads=12 num_key_value_heads=2 intermediate_size=8960 vocab_size=151936"
    V=151936 P=8 G=8 LP=64 LC=256 DFG_STEPS=3 TORCH_WARMUP=1 TORCH_STEPS=2
    # step 4: 2 steps (the first captures the graphs): with share_prompts=0 the training pass over
    # 64 rows of 2112 tokens alone is predicted at 9 s a step on an H200 (dfg inspect --device h200)
    DEC_DIMS="24 896 14 2 64 4864 151936 64 61" DEC_STEPS=3 BI_LC=64 SH_LP=2048 SH_LC=64 SH_STEPS=2
    # step 6: docs/agents.md's calculator demo (300 supervised warm-up steps, then GRPO) on the device
    CALC_SFT=300 CALC_STEPS=340
  fi
}
# shape_set SHAPE: the dfg --set pairs of a shape (into the array SET)
shape_set() {
  local kv
  SET=(--set model_type=qwen2)
  for kv in ${SHAPE_KV[$1]} $COMMON_KV; do SET+=(--set "$kv"); done
}

quick_print_estimates() {
  local s total=0
  echo "gpu-check --quick: estimated GPU seconds per step (a guess until the first run; the report gives the seconds taken):"
  for s in a b 1 2 3 4 5 6; do
    if [[ $s =~ [ab] ]] || wanted "$s"; then printf '  %s. %4s s\n' "$s" "${EST[$s]}"; total=$((total + EST[$s])); fi
  done
  echo "  in all about $total s ($((total / 60)) min $((total % 60)) s) of the lease, plus the machine's start;" \
       "$([ "$BUDGET" -gt 0 ] && echo "a step that would end past --budget $BUDGET s is not run" || echo "no --budget")"
}

# quick_torch_env: the Python of the PyTorch side (TORCH_PY, TORCH_SITES) or why there is none
quick_torch_env() {
  TORCH_SITES=() TORCH_OK=0 TORCH_WHY="" TORCH_VERSIONS=""
  TORCH_PY=${PY:-python3}
  if [ "$PY" = none ]; then TORCH_WHY="--python none: the PyTorch side is not run"; echo "      PyTorch side: none ($TORCH_WHY)"; return; fi
  if [ -z "$PY" ] && [ "$REHEARSE" = 1 ] && ! python3 -c "import torch" 2>/dev/null && [ -x /usr/bin/python3 ]; then
    TORCH_PY=/usr/bin/python3 # Debian's python3-torch, when the python3 on PATH is another
  fi
  if [ "$REHEARSE" = 1 ]; then
    local d
    for d in "$ROOT/.deps/peft-0.11.1" "$ROOT/.deps/hf-4.40.2"; do [ -d "$d" ] && TORCH_SITES+=(--site "$d"); done
  fi
  local probe
  probe=$("$TORCH_PY" - "${TORCH_SITES[@]}" <<'PY' 2>&1
import sys
for p in sys.argv[2::2]:
    sys.path.insert(0, p)
import torch, transformers, peft
from transformers import Qwen2Config
cuda = torch.cuda.is_available()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda if cuda else 'none'}), transformers {transformers.__version__}, "
      f"peft {peft.__version__}, {sys.executable}")
PY
  )
  if [ $? -eq 0 ]; then
    TORCH_OK=1 TORCH_VERSIONS=$(tail -1 <<<"$probe")
    if [ "$TORCH_DEV" = cuda ] && ! "$TORCH_PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
      TORCH_OK=0 TORCH_WHY="$TORCH_PY's torch has no CUDA ($TORCH_VERSIONS)"
    fi
  else
    TORCH_WHY="$TORCH_PY cannot import torch, transformers (with Qwen2) and peft: $(tail -1 <<<"$probe")"
  fi
  echo "      PyTorch side: ${TORCH_VERSIONS:-none}${TORCH_WHY:+ ($TORCH_WHY)}"
}

# ---------------------------------------------------------------- 1. LoRA / QLoRA against transformers + peft
# q1_dfg SHAPE VARIANT ROUND: one dfg run on the rollouts; its manifest line, or a failure
q1_dfg() {
  local log=$LOGS/$1-$2-dfg-$3.log jsonl=$LOGS/$1-$2-dfg-$3.jsonl
  if "$DFG" run "$LOGS/$1-$2.dfg" "${RUN_FLAGS[@]}" --rollouts "$LOGS/rollouts.st" --steps "$DFG_STEPS" \
       --metrics "$jsonl" >"$log" 2>&1; then
    echo "$1 dfg $2 $log $jsonl" >>"$LOGS/lora.manifest"
    [ "$1-$2-$3" = "${SHAPES[0]}-lora-1" ] && Q1_PLAN=$LOGS/$1-$2.dfg Q1_JSONL=$jsonl
  else
    Q1_FAILS+=("dfg $1 $2 run $3 (log $log)")
    sub_fail "1. dfg $1 $2" "the run failed" "$log"
  fi
}
# q1_torch SHAPE VARIANT ROUND [FLAGS...]: one grpo_torch_lora.py run (exit 3: a SKIP it explains)
q1_torch() {
  local shape=$1 variant=$2 out=$LOGS/$1-$2-torch-$3.out kv targs=() rc
  shift 3
  for kv in ${SHAPE_KV[$shape]} $COMMON_KV; do targs+=("--${kv%%=*}" "${kv#*=}"); done
  "$TORCH_PY" "$ROOT/tools/bench/grpo_torch_lora.py" "${TORCH_SITES[@]}" "${targs[@]}" --rollouts "$LOGS/rollouts.st" \
    --prompt_len "$LP" --num_generations "$G" --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear \
    --learning_rate 1e-5 --device "$TORCH_DEV" --warmup "$TORCH_WARMUP" --steps "$TORCH_STEPS" \
    --threads "$([ "$TORCH_DEV" = cpu ] && echo "$THREADS" || echo 0)" "$@" >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 3 ]; then
    echo "$shape torch $variant $out" >>"$LOGS/lora.manifest"
  else
    Q1_FAILS+=("torch $shape $variant run (exit $rc, log $out)")
    sub_fail "1. torch $shape $variant" "grpo_torch_lora.py failed (exit $rc)" "$out"
  fi
}

quick_step1() {
  local step=${STEP_ROW[1]} shape variant r text qlora=(--set load_in_4bit=true --set bnb_4bit_use_double_quant=true)
  Q1_FAILS=() Q1_PLAN="" Q1_JSONL=""
  : >"$LOGS/lora.manifest"
  if ! python3 "$ROOT/tests/cli/st_tool.py" rollouts "$LOGS/rollouts.st" $((P * G)) $((LP + LC)) "$V" 7 --group "$G" \
       --prompt-len "$LP" >"$LOGS/rollouts.log" 2>&1; then
    verdict "$step" FAIL "the rollouts file could not be made" "$LOGS/rollouts.log"; return
  fi
  for shape in "${SHAPES[@]}"; do
    shape_set "$shape"
    SET+=(--set digits=$((LP - 1)) --set max_completion_length="$LC" --set prompts_per_step="$P" --set num_generations="$G"
          --set loss_type=grpo --set beta=0 --set learning_rate=1e-5 --set lora_r=16 --set lora_alpha=32
          --set lora_target_modules=all-linear)
    for variant in lora qlora; do
      local extra=(); [ $variant = qlora ] && extra=("${qlora[@]}")
      if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda "${SET[@]}" "${extra[@]}" -o "$LOGS/$shape-$variant.dfg" \
           >"$LOGS/$shape-$variant-compile.log" 2>&1; then
        Q1_FAILS+=("dfg compile $shape $variant"); sub_fail "1. compile $shape $variant" "dfg compile failed" "$LOGS/$shape-$variant-compile.log"
      fi
    done
    for ((r = 1; r <= ROUNDS; r++)); do # alternated: dfg, torch, dfg, torch
      [ -f "$LOGS/$shape-lora.dfg" ] && q1_dfg "$shape" lora $r
      [ "$TORCH_OK" = 1 ] && q1_torch "$shape" lora $r
    done
    [ -f "$LOGS/$shape-qlora.dfg" ] && q1_dfg "$shape" qlora 1
    [ "$TORCH_OK" = 1 ] && q1_torch "$shape" qlora 1 --load_in_4bit --bnb_4bit_use_double_quant
    # TRL checkpoints by default; without it torch is faster and holds more: once, at the larger shape
    [ "$TORCH_OK" = 1 ] && [ "$shape" = "${SHAPES[1]}" ] && q1_torch "$shape" lora-no-checkpointing 1 --gradient_checkpointing off
  done
  if ! text=$(python3 "$QUICK" lora "$LOGS/lora.manifest" "$DATA_DIR/1-lora.json" 2>&1); then
    verdict "$step" FAIL "reading the runs failed: $(tail -1 <<<"$text")"; return
  fi
  { echo "### $step: GRPO training step on one rollouts file ($((P * G)) rows, $LP-token prompts, completions of 1..$LC tokens)"
    echo
    echo "dfg \`run --rollouts\`, ms of steps 2..$DFG_STEPS; torch: tools/bench/grpo_torch_lora.py, $TORCH_WARMUP warm-up + $TORCH_STEPS timed steps"
    echo "(${TORCH_VERSIONS:-no PyTorch side: $TORCH_WHY}; gradient checkpointing on unless the variant says no). Memory: dfg's measured"
    echo "\`device memory:\` line; torch.cuda.max_memory_allocated (in brackets: the device memory torch's process took, measured as dfg measures its own)."
    echo; grep -v '^SUMMARY: ' <<<"$text"; echo; } >>"$DETAILS"
  local summary; summary=$(sed -n 's/^SUMMARY: //p' <<<"$text")
  [ "$TORCH_OK" = 1 ] || summary="$summary; torch half SKIP: $TORCH_WHY"
  if [ ${#Q1_FAILS[@]} -gt 0 ]; then
    verdict "$step" FAIL "${#Q1_FAILS[@]} failed: $(printf '%s; ' "${Q1_FAILS[@]}")ran: $summary"
  else
    verdict "$step" PASS "$summary"
  fi
}

# ---------------------------------------------------------------- 2. decode against the floor
quick_step2() {
  local bw what
  if [ "$REHEARSE" = 1 ]; then
    bw=$(python3 "$QUICK" copy-bandwidth) what="rehearsal: the host's copy bandwidth, emulated decode"
  elif ! bw=$(gpu_copy_bandwidth); then
    verdict "${STEP_ROW[2]}" FAIL "the bandwidth probe did not build or run" "$LOGS/bw.log"; return
  else
    what="a cudaMemcpy of 1 GiB device to device"
  fi
  shape_set "${SHAPES[0]}"
  DEC_SET=("${SET[@]}" --set digits=$((${DEC_DIMS##* } - 1)) --set max_completion_length="$LC"
           --set prompts_per_step="$P" --set num_generations="$G")
  decode_vs_floor "${STEP_ROW[2]}" "$bw" "$what"
}

# ---------------------------------------------------------------- 3. batch_invariant
quick_step3() {
  local step=${STEP_ROW[3]} tgt=cuda flags=("${RUN_FLAGS[@]}") note="" p
  if ! "$DFG" info --settings 2>/dev/null | grep -qE '^  batch_invariant '; then
    verdict "$step" SKIP "this dfg has no setting batch_invariant (dfg info --settings)"; return
  fi
  shape_set "${SHAPES[0]}"
  SET+=(--set digits=$((LP - 1)) --set max_completion_length="$BI_LC" --set prompts_per_step="$P" --set num_generations="$G")
  q3_compile() {
    "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target "$tgt" "${SET[@]}" -o "$LOGS/bi-default.dfg" >"$LOGS/bi-compile.log" 2>&1 &&
      "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target "$tgt" "${SET[@]}" --set batch_invariant=true -o "$LOGS/bi-on.dfg" \
        >>"$LOGS/bi-compile.log" 2>&1
  }
  if ! q3_compile; then
    local why; why=$(grep -m1 -E "^dfg compile:.*batch_invariant" "$LOGS/bi-compile.log" | sed 's/^dfg compile: [^ ]*: //')
    if [ -z "$why" ]; then verdict "$step" FAIL "dfg compile failed" "$LOGS/bi-compile.log"; return; fi
    if [ "$REHEARSE" != 1 ]; then verdict "$step" SKIP "dfg refuses it for cuda: $why"; return; fi
    tgt=cpu flags=(--threads "$THREADS") note=" (rehearsal on the cpu target: cuda refused it: $why)"
    if ! q3_compile; then verdict "$step" FAIL "dfg compile for cpu failed" "$LOGS/bi-compile.log"; return; fi
  fi
  for p in default on; do # the dump: sampling_logps (decode's) and logp (training's) of the last step
    if ! "$DFG" run "$LOGS/bi-$p.dfg" "${flags[@]}" --steps "$DEC_STEPS" --metrics "$LOGS/bi-$p.jsonl" \
         --dump "$LOGS/bi-$p.st" >"$LOGS/bi-$p.log" 2>&1; then
      verdict "$step" FAIL "the $p plan's run failed" "$LOGS/bi-$p.log"; return
    fi
  done
  local ms0 ms1 d0 d1 max
  ms0=$(python3 "$QUICK" median-ms "$LOGS/bi-default.jsonl") ms1=$(python3 "$QUICK" median-ms "$LOGS/bi-on.jsonl")
  if ! d1=$(python3 "$QUICK" logp-diff "$LOGS/bi-on.st" 2>&1); then verdict "$step" FAIL "the dump: $d1" "$LOGS/bi-on.log"; return; fi
  d0=$(python3 "$QUICK" logp-diff "$LOGS/bi-default.st" 2>&1) || d0='{"max_abs_diff": null}'
  python3 - "$ms0" "$ms1" "$d0" "$d1" "$tgt" >"$DATA_DIR/3-batch-invariant.json" <<'PY'
import json, sys
print(json.dumps({"target": sys.argv[5], "default_ms": float(sys.argv[1]), "batch_invariant_ms": float(sys.argv[2]),
                  "ratio": float(sys.argv[2]) / float(sys.argv[1]), "default_logp_diff": json.loads(sys.argv[3]),
                  "batch_invariant_logp_diff": json.loads(sys.argv[4])}))
PY
  max=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["max_abs_diff"])' "$d1")
  local text
  text=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
b, o = d["batch_invariant_logp_diff"], d["default_logp_diff"]
print("step %.1f ms against the default plan%s %.1f ms: x%.2f; max |sampling_logps - logp| %g over %d completion tokens (%d differ); default plan: %s"
      % (d["batch_invariant_ms"], "\x27s", d["default_ms"], d["ratio"], b["max_abs_diff"], b["tokens"], b["tokens_differing"],
         "n/a" if o.get("max_abs_diff") is None else "%g, %d of %d tokens differ" % (o["max_abs_diff"], o["tokens_differing"], o["tokens"])))' \
    "$DATA_DIR/3-batch-invariant.json")
  if [ "$max" = 0.0 ] || [ "$max" = 0 ]; then verdict "$step" PASS "$text$note"
  else verdict "$step" FAIL "$text (must be 0)$note" "$LOGS/bi-on.log"; fi
}

# ---------------------------------------------------------------- 4. share_prompts in decode
quick_step4() {
  local step=${STEP_ROW[4]} s kv0 kv1 skip="" ms0 ms1
  if ! "$DFG" info --settings 2>/dev/null | grep -qE '^  share_prompts '; then
    verdict "$step" SKIP "this dfg has no setting share_prompts (dfg info --settings)"; return
  fi
  python3 -c 'import json, random, sys
r = random.Random(5)
for _ in range(int(sys.argv[1])):
    print(json.dumps({"prompt_ids": [r.randrange(2, int(sys.argv[3])) for _ in range(int(sys.argv[2]))]}))' \
    "$P" "$SH_LP" "$V" >"$LOGS/long_prompts.jsonl"
  shape_set "${SHAPES[0]}"
  SET+=(--set dataset="$LOGS/long_prompts.jsonl" --set max_prompt_length="$SH_LP" --set max_completion_length="$SH_LC"
        --set prompts_per_step="$P" --set num_generations="$G" --set prompt_buckets=1 --set reward_funcs=reward)
  for s in 0 1; do
    if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda "${SET[@]}" --set share_prompts=$s -o "$LOGS/share$s.dfg" \
         >"$LOGS/share$s-compile.log" 2>&1 ||
       ! "$DFG" inspect "$LOGS/share$s.dfg" --json >"$LOGS/share$s-inspect.json" 2>>"$LOGS/share$s-compile.log"; then
      verdict "$step" FAIL "dfg compile or inspect of the share_prompts=$s plan failed" "$LOGS/share$s-compile.log"; return
    fi
  done
  kv0=$(python3 "$QUICK" kv-bytes "$LOGS/share0-inspect.json") kv1=$(python3 "$QUICK" kv-bytes "$LOGS/share1-inspect.json")
  if [ "$kv0" = "$kv1" ]; then
    skip="share_prompts=1 plans the same KV cache as =0 ($kv0 B): decode does not share the prompt in this build"
    [ "$REHEARSE" = 1 ] || { verdict "$step" SKIP "$skip"; return; }
  fi
  for s in 0 1; do
    if ! "$DFG" run "$LOGS/share$s.dfg" "${RUN_FLAGS[@]}" --steps "$SH_STEPS" --metrics "$LOGS/share$s.jsonl" \
         --reward-cmd "python3 $QUICK reward-server" >"$LOGS/share$s.log" 2>&1; then
      verdict "$step" FAIL "the share_prompts=$s run failed" "$LOGS/share$s.log"; return
    fi
  done
  ms0=$(python3 "$QUICK" stage-ms "$LOGS/share0.jsonl" decode) ms1=$(python3 "$QUICK" stage-ms "$LOGS/share1.jsonl" decode)
  python3 -c 'import json, sys; a = [float(x) for x in sys.argv[1:5]]
print(json.dumps({"kv_cache_bytes_0": a[0], "kv_cache_bytes_1": a[1], "decode_ms_0": a[2], "decode_ms_1": a[3],
                  "kv_ratio": a[1] / a[0] if a[0] else None, "decode_speedup": a[2] / a[3] if a[3] else None}))' \
    "$kv0" "$kv1" "$ms0" "$ms1" >"$DATA_DIR/4-share-prompts.json"
  local text="$SH_LP-token prompts, $((P * G)) rows, $SH_LC-token completions: decode $ms0 ms a step with share_prompts=0, $ms1 ms with 1 (x$(python3 -c "print('%.2f' % ($ms0 / $ms1))")); KV cache $kv0 B against $kv1 B"
  if [ -n "$skip" ]; then verdict "$step" SKIP "$skip (rehearsed anyway: $text)"; else verdict "$step" PASS "$text"; fi
}

# ---------------------------------------------------------------- 5. predicted against measured
quick_step5() {
  local step=${STEP_ROW[5]} pairs=() pr name plan jsonl out rc texts=()
  [ -n "$DEVICE_KIND" ] || { verdict "$step" SKIP "dfg inspect --device has no name for '$GPU_NAME'"; return; }
  [ -n "${DEC_PLAN:-}" ] && pairs+=("decode:$DEC_PLAN:$DEC_JSONL")
  [ -n "${Q1_PLAN:-}" ] && pairs+=("lora-${SHAPES[0]}:$Q1_PLAN:$Q1_JSONL")
  [ ${#pairs[@]} -gt 0 ] || { verdict "$step" SKIP "steps 1 and 2 made no measured plan to compare (not run, or failed)"; return; }
  for pr in "${pairs[@]}"; do
    IFS=: read -r name plan jsonl <<<"$pr"
    # --runs: the stages' runs a step as this run made them (decode stops early, chunks vary)
    if ! "$DFG" inspect "$plan" --device "$DEVICE_KIND" --runs "$jsonl" --json >"$LOGS/roof-$name.json" 2>"$LOGS/roof-$name.err" &&
       ! "$DFG" inspect "$plan" --device "$DEVICE_KIND" --json >"$LOGS/roof-$name.json" 2>>"$LOGS/roof-$name.err"; then
      verdict "$step" SKIP "dfg inspect refuses --device $DEVICE_KIND: $(tail -1 "$LOGS/roof-$name.err")"; return
    fi
    out=$(python3 "$QUICK" roofline "$LOGS/roof-$name.json" "$jsonl" 2>&1)
    rc=$?
    if [ $rc -eq 4 ]; then verdict "$step" SKIP "$(tail -1 <<<"$out")"; return; fi
    if [ $rc -ne 0 ]; then verdict "$step" FAIL "reading $name's prediction failed: $(tail -1 <<<"$out")"; return; fi
    tail -1 <<<"$out" >"$DATA_DIR/5-roofline-$name.json"
    { echo "### $step: the $name plan, --device $DEVICE_KIND ($(python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("device_label") or "")' "$(tail -1 <<<"$out")"))"
      echo; sed '$d' <<<"$out"; echo; } >>"$DETAILS"
    texts+=("$name: $(python3 -c 'import json, sys; d = json.loads(sys.argv[1])
print("%d of %d stages within 2x of the prediction; those stages predicted %.1f ms, measured %.1f ms%s" % (d["within_2x"], d["compared"],
      d["predicted_ms"], d["measured_ms"], "" if d.get("predicted_step_ms") is None else
      "; the step predicted %.1f ms (a floor: no launch or host time), measured %.1f ms" % (d["predicted_step_ms"], d["measured_step_ms"])))' "$(tail -1 <<<"$out")")")
  done
  verdict "$step" PASS "$(printf '%s; ' "${texts[@]}")"
}

# ---------------------------------------------------------------- 6. the tool loop on the device
# Issue 39's GPU goal: the calculator plan (task=calculator: extend, decode and the built-in tool in a
# loop of rounds, docs/agents.md) compiled for cuda runs there: CALC_SFT warm-up steps, then GRPO
# steps; the figures of the GRPO steps (ms, call frequency, reward) and the device memory against
# the plan. PASS: it ran every step and logged tools/call_frequency (it measures, it asserts no rate).
quick_step6() {
  local step=${STEP_ROW[6]} text
  if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda --set task=calculator --set digits=2 \
       --set prompts_per_step=8 --set num_generations=8 --set sft_steps="$CALC_SFT" -o "$LOGS/calc.dfg" \
       >"$LOGS/calc-compile.log" 2>&1 ||
     ! "$DFG" inspect "$LOGS/calc.dfg" --json >"$LOGS/calc-inspect.json" 2>>"$LOGS/calc-compile.log"; then
    verdict "$step" FAIL "dfg compile or inspect of the calculator plan for cuda failed" "$LOGS/calc-compile.log"; return
  fi
  if ! "$DFG" run "$LOGS/calc.dfg" "${RUN_FLAGS[@]}" --steps "$CALC_STEPS" --seed 1 --quiet --metrics "$LOGS/calc.jsonl" \
       >"$LOGS/calc.log" 2>&1; then
    verdict "$step" FAIL "the calculator run failed" "$LOGS/calc.log"; return
  fi
  if ! text=$(python3 "$QUICK" tools-loop "$LOGS/calc.jsonl" "$LOGS/calc.log" "$LOGS/calc-inspect.json" "$CALC_SFT" \
              "$DATA_DIR/6-tools-loop.json" 2>&1); then
    verdict "$step" FAIL "$(tail -1 <<<"$text")" "$LOGS/calc.log"; return
  fi
  verdict "$step" PASS "$text"
}

# quick_meta WALL_S: the results file's header as JSON (the values through the environment: any text)
quick_meta() {
  local os cmd="tools/gpu-check.sh --quick"
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  [ "$REHEARSE" = 1 ] && cmd="$cmd --rehearse"
  [ "$REUSE" = 1 ] && [ "$REHEARSE" != 1 ] && cmd="$cmd --reuse-build"
  Q_COMMIT=$COMMIT Q_GPU=$GPU_NAME Q_CAP=${GPU_CAP:-?} Q_MIB=$GPU_MIB Q_DRIVER=$DRIVER Q_CUDA=$CUDA_DRIVER \
  Q_NVCC=${NVCC_VERSION:-none} Q_TORCH=${TORCH_VERSIONS:-none} Q_TORCH_WHY=$TORCH_WHY Q_CORES=$(nproc) Q_OS="$os, $(uname -r)" \
  Q_CMD="$cmd --only $ONLY --rounds $ROUNDS" Q_DATE=$DATE Q_HOST=$HOST Q_REHEARSE=$REHEARSE Q_ROUNDS=$ROUNDS Q_ONLY=$ONLY \
  Q_EST="${EST[a]} ${EST[b]} ${EST[1]} ${EST[2]} ${EST[3]} ${EST[4]} ${EST[5]} ${EST[6]}" python3 - "$1" <<'PY'
import json, os, sys
e = os.environ
hdr = [f"dfg {e['Q_COMMIT']}; GPU: {e['Q_GPU']}, compute capability {e['Q_CAP']}, {e['Q_MIB']} MiB; driver {e['Q_DRIVER']}, "
       f"CUDA {e['Q_CUDA']} (the driver's);",
       f"nvcc {e['Q_NVCC']}; PyTorch side: {e['Q_TORCH']}" + (f" ({e['Q_TORCH_WHY']})" if e["Q_TORCH_WHY"] else "") + ";",
       f"{e['Q_CORES']} CPU cores; {e['Q_OS']}. Command: `{e['Q_CMD']}`."]
if e["Q_REHEARSE"] == "1":
    hdr += ["", "A REHEARSAL on a CPU: tiny shapes, cuda plans under the SIMT emulator, the PyTorch side on the CPU in "
                "float32. Its figures measure nothing real: they check the commands, the parsing and this report."]
print(json.dumps({"date": e["Q_DATE"], "host": e["Q_HOST"], "rehearsal": e["Q_REHEARSE"] == "1", "commit": e["Q_COMMIT"],
                  "gpu": e["Q_GPU"], "driver": e["Q_DRIVER"], "cuda_driver": e["Q_CUDA"], "nvcc": e["Q_NVCC"],
                  "torch_side": e["Q_TORCH"], "rounds": int(e["Q_ROUNDS"]), "only": e["Q_ONLY"], "wall_s": float(sys.argv[1]),
                  "header": hdr, "estimates_s": dict(zip("a b 1 2 3 4 5 6".split(), map(float, e["Q_EST"].split())))}))
PY
}
