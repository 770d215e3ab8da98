# shellcheck shell=bash disable=SC2034
# tools/gpu/decode.sh - decode tokens/s against the bandwidth floor (gpu-check step h, quick step 2;
# sourced after common.sh). The GRPO plan of DEC_SET (--set pairs: the shape, rows and lengths) is
# compiled for cuda and run DEC_STEPS steps with RUN_FLAGS (empty on a GPU; --emulate-gpu in a
# rehearsal); decode's stage_ms and stage_runs of steps 2.. (step 1 captures the graphs) against
# the time to read the bf16 weights and each row's KV cache once per decode run at BW GB/s.
# DEC_DIMS: "layers width heads kv_heads head_dim intermediate vocab rows prompt_len" for the floor.
# Leaves DEC_PLAN and DEC_JSONL (the run's --metrics) for the roofline step.

# decode_vs_floor STEP BW_GBS BW_WHAT
decode_vs_floor() {
  local step=$1 bw=$2 bw_what=$3 text
  DEC_PLAN=$LOGS/decode.dfg DEC_JSONL=$LOGS/decode.jsonl
  local log=$LOGS/decode_run.log
  if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda "${DEC_SET[@]}" -o "$DEC_PLAN" >"$LOGS/decode_compile.log" 2>&1; then
    verdict "$step" FAIL "dfg compile of the decode plan failed" "$LOGS/decode_compile.log"; DEC_PLAN=""; return
  fi
  if ! "$DFG" run "$DEC_PLAN" "${RUN_FLAGS[@]}" --steps "${DEC_STEPS:-3}" --metrics "$DEC_JSONL" --every 1 >"$log" 2>&1; then
    verdict "$step" FAIL "the decode plan's run failed" "$log"; DEC_PLAN=""; return
  fi
  # shellcheck disable=SC2086
  if ! text=$(python3 "$ROOT/tools/gpu/quick.py" decode "$DEC_JSONL" "$bw" $DEC_DIMS 2>&1); then
    verdict "$step" FAIL "reading the run's metrics failed: $text" "$log"; return
  fi
  [ -n "${DATA_DIR:-}" ] && tail -1 <<<"$text" >"$DATA_DIR/2-decode.json"
  verdict "$step" PASS "$(head -1 <<<"$text") [$bw_what]"
  { echo "### $step"; echo; echo '```'; grep -E "^(device memory|step |[0-9]+ steps in)" "$log"; echo '```'; echo; } >>"$DETAILS"
}
