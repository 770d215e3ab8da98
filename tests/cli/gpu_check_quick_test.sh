#!/usr/bin/env bash
# gpu_check_quick_test.sh DFG SRC - the rehearsal of tools/gpu-check.sh --quick (ctest
# "gpu_check_quick", label emu): every step on the CPU, cuda plans under the SIMT emulator, tiny
# shapes, without the PyTorch side (--python none: transformers' import alone takes longer than this
# test may; tools/gpu-check.sh --quick --rehearse runs it). Checks the results files' rows, then the
# parsers of quick.py on made-up inputs whose answers are known: step 1's ratios, the roofline's
# comparison and its refusal of a JSON without predictions, the log-prob difference of a dump.
set -u
DFG=$(realpath "$1") SRC=$(realpath "$2")
QUICK=$SRC/tools/gpu/quick.py
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dfg-gpu-check-quick-test-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1"; fails=$((fails + 1)); }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# ---------------------------------------------------------------- the rehearsal, end to end
TMPDIR=$WORK bash "$SRC/tools/gpu-check-quick.sh" --rehearse --build-dir "$(dirname "$DFG")" --python none --threads 1 \
  --host test --out "$WORK/out" >"$WORK/rehearsal.log" 2>&1
rc=$?
cat "$WORK/rehearsal.log"
check "the rehearsal exits 0 (exit $rc)" '[ $rc -eq 0 ]'
MD=$(ls "$WORK"/out/*-gpu-check-quick-rehearsal-test.md 2>/dev/null | head -1)
JSON=${MD%.md}.json
check "it writes the results' .md and .json" '[ -s "$MD" ] && [ -s "$JSON" ]'
[ -s "$MD" ] && grep -E "^\| [ab1-6]\. " "$MD" | awk -F' \\| ' '{print "  " $1 " " $2 ": took " $(NF-1) " s"}'
# row_re STEP VERDICTS REGEX: the row of STEP has one of VERDICTS (a|b) and its text matches REGEX
row_re() { grep -E "^\| $1 \| \*\*($2)\*\* \| " "$MD" | grep -qE -- "$3"; }
check "row a: SKIP (no GPU in a rehearsal)" 'row_re "a. GPU present" SKIP "rehearsal: no GPU"'
check "row b: SKIP (the build as it is)" 'row_re "b. build" SKIP "as it is"'
check "row 1: PASS with both shapes' LoRA and QLoRA step times, the torch half SKIPped" \
  'row_re "1. LoRA/QLoRA vs peft" PASS "tiny-0.5b-role lora: dfg [0-9]+ ms.*tiny-1.5b-role qlora: dfg [0-9]+ ms.*torch half SKIP"'
check "row 2: PASS with tokens/s and the floor" 'row_re "2. decode" PASS "[0-9]+ tokens/s.*floor [0-9.]+ ms a run"'
check "row 3: PASS, the difference 0" 'row_re "3. batch_invariant" PASS "sampling_logps - logp.{1,2} 0 over [1-9]"'
check "row 4: decode ms with share_prompts 0 and 1 (SKIP rehearsed anyway, or PASS)" \
  'row_re "4. share_prompts" "PASS|SKIP" "decode [0-9.]+ ms a step with share_prompts=0, [0-9.]+ ms with 1"'
check "row 5: PASS, or a SKIP naming what is missing" \
  'row_re "5. predicted vs measured" "PASS|SKIP" "(decode: [0-9]+ of [0-9]+ stages.*lora-tiny-0.5b-role: [0-9]+ of|dfg inspect refuses --device)"'
check "every row has seconds taken and estimated" \
  '[ "$(grep -cE "^\| [ab1-6]\. .* \| [0-9]+ \| [0-9]+ \|$" "$MD")" = 8 ]'
check "row 6: PASS, the GRPO steps with their call frequency and the device memory" \
  'row_re "6. tools loop" PASS "2 GRPO steps after 2 warm-up steps: [0-9.]+ ms a step.*tools/call_frequency [0-9.]+, reward [0-9.]+"'
check "the JSON: 8 steps, 0 failed, the data of steps 1-3 and 6" \
  'python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert len(d[\"steps\"]) == 8 and d[\"failed\"] == 0 and d[\"rehearsal\"]
assert {\"1-lora\", \"2-decode\", \"3-batch-invariant\", \"6-tools-loop\"} <= set(d[\"data\"]), d[\"data\"].keys()
assert d[\"data\"][\"3-batch-invariant\"][\"batch_invariant_logp_diff\"][\"max_abs_diff\"] == 0" "$JSON"'

# ---------------------------------------------------------------- quick.py on known inputs
cd "$WORK" || exit 1
printf 'device memory: 2147483648 bytes allocated (2.00 GiB) = ...\n' >d.log
printf '{"step":1,"ms":999,"stage_ms":{"decode":99,"train.0":99},"stage_runs":{}}\n{"step":2,"ms":100,"stage_ms":{"decode":15,"train.0":200},"stage_runs":{}}\n{"step":3,"ms":120,"stage_ms":{"decode":15,"train.0":200},"stage_runs":{}}\n' >d.jsonl
printf '{"step": 2, "ms": 200}\n{"summary": true, "median_ms": 220.0, "max_memory_allocated": 4294967296, "device_used_bytes": 5368709120}\n' >t.out
printf '{"skip": "no bitsandbytes here"}\n' >tq.out
printf 'm dfg lora d.log d.jsonl\nm torch lora t.out\nm dfg qlora d.log d.jsonl\nm torch qlora tq.out\n' >runs.manifest
out=$(python3 "$QUICK" lora runs.manifest lora.json)
check "lora: dfg's median of steps 2.. (110 ms), torch/dfg x2.00, memory 0.50" \
  'grep -F "| m | lora | 110.0 (110.0) | 220.0 (220.0) | x2.00 | 2.00 GiB | 4.00 GiB (5.00 GiB) | 0.50 |" <<<"$out" >/dev/null'
check "lora: a torch SKIP names its reason" 'grep -F "SKIP: no bitsandbytes here" <<<"$out" >/dev/null'
check "lora: the summary line" 'grep -F "SUMMARY: m lora: dfg 110 ms, torch 220 ms (x2.00), memory dfg/torch 0.50; m qlora: dfg 110 ms, torch SKIP" <<<"$out" >/dev/null'
printf '{"stages":[{"name":"decode"}],"prediction":{"device":"h200","step_ms":61.0,"stages":[{"name":"data","predicted_ms":null},{"name":"decode","predicted_ms":10.0,"bound":"memory"},{"name":"train.0","predicted_ms":50.0,"bound":"compute"},{"name":"update.0","predicted_ms":1.0}]}}\n' >ins.json
out=$(python3 "$QUICK" roofline ins.json d.jsonl)
check "roofline: decode 15 against 10 (within 2x), train.0 200 against 50 (not), update.0 not run; the step 110 against 61" \
  'grep -F "\"within_2x\": 1, \"compared\": 2" <<<"$out" >/dev/null && grep -F "\"predicted_step_ms\": 61.0, \"measured_step_ms\": 110" <<<"$out" >/dev/null && grep -F "| decode | 10 | 15 | 1.5 | memory |" <<<"$out" >/dev/null && grep -F "| update.0 | 1 | not run |" <<<"$out" >/dev/null'
printf '{"stages":[{"name":"decode","flops":1}],"prediction":null}\n' >noins.json
python3 "$QUICK" roofline noins.json d.jsonl >/dev/null
check "roofline: no predicted times is exit 4 (the step's SKIP)" '[ $? -eq 4 ]'
python3 -c 'import struct, sys
sys.path.insert(0, sys.argv[1])
import st_tool
f = lambda v: ("F32", (len(v),), struct.pack("<%df" % len(v), *v))
st_tool.write("dump.st", {"sampling_logps": f([-1, -2, -3, -4]), "logp": f([-1, -2.5, -3, -9]), "completion_mask": f([1, 1, 1, 0])}, {})' \
  "$SRC/tests/cli"
out=$(python3 "$QUICK" logp-diff dump.st)
check "logp-diff: 0.5 on one of three masked tokens (the unmasked one not counted)" \
  'grep -F "\"max_abs_diff\": 0.5, \"tokens\": 3, \"tokens_differing\": 1" <<<"$out" >/dev/null'

[ $fails -eq 0 ] && echo "gpu_check_quick_test: all passed" || echo "gpu_check_quick_test: $fails failed"
[ $fails -eq 0 ]
