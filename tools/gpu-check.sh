#!/usr/bin/env bash
# gpu-check.sh - the one command for the first machine with an NVIDIA GPU. dfg's CUDA code is
# verified without a GPU by the SIMT emulator (`dfg run --emulate-gpu`, docs in
# docs/DESIGN.md 6b); this runs what only real hardware can check, and writes every result
# into tools/bench/results/<date>-gpu-check-<host>.md (GPU, driver, CUDA, the dfg commit, one
# line per step, details and the tails of failing logs).
#
#   tools/gpu-check.sh [--build-dir DIR] [--reuse-build] [--skip c,d,e,f,g,h,i] [--python PY]
#                      [--bench-modes full,fixed] [--out DIR]
#   tools/gpu-check.sh --quick [--rehearse] ...   (tools/gpu-check-quick.sh: its header)
#
# --quick runs tools/gpu-check-quick.sh instead: under 10 minutes of GPU time with its build
# (LoRA/QLoRA GRPO steps at Qwen2.5-0.5B and 1.5B shape against transformers + peft, decode
# against the bandwidth floor, batch_invariant's cost, shared-prompt decode, predicted vs
# measured stage times); --quick --rehearse runs every step of it on the CPU, here. The steps
# below are the full check.
#
# Each step prints PASS, FAIL or SKIP with what it saw; a failed step does not stop the later
# ones (except a failed build). Exit 0: nothing failed (SKIPs allowed, each with its reason);
# 1: some step failed; 2: refused (no usable GPU here, or a bad argument; nothing was run or written).
#
#   a. GPU present: nvidia-smi exists and lists a GPU of compute capability >= 8.0 (the kernels
#      are bf16 and built for sm_80 and sm_90). Refuses with exit 2 otherwise.
#   b. deps and build: tools/deps.sh --test (Debian packages), the CUDA toolkit's nvcc found,
#      then a fresh build in build-gpu (removed first) with CMAKE_CUDA_ARCHITECTURES=native
#      (CMake >= 3.24; else "80;90"; the kernels themselves are fixed to sm_80 and sm_90 by
#      CMakeLists.txt, with PTX, so newer GPUs JIT them), -lineinfo for the sanitizer's
#      reports, and warnings not fatal (they are counted: another nvcc than CI's may warn).
#      PASS: CMake enabled CUDA (the real device layer, cuBLASLt) and everything built.
#   c. kernel tests: ctest -R "test_cuda_|simt_|gpu_emu" (every CUDA kernel against the CPU
#      kernel, under the emulator and, with a device present, the nvcc-built kernel on the
#      GPU). PASS: all passed AND the tests report GPU runs ("N runs on the GPU") with no
#      "GPU half skipped" anywhere: a GPU half that silently skipped is a FAIL.
#   d. whole programs on the GPU: tests/cli/gpu_emu_test.sh with DFG_GPU_REAL=1: GPT-2 training
#      and GRPO on the GPU against the CPU backend (float32 within 1e-5, bf16 within 2e-2,
#      the fixed-rollout GRPO step's dumped log-probs, advantages, loss, KL, gradient norm),
#      CUDA Graph replay against --eager bit for bit, measured device memory against the
#      plan, and the refusals. PASS: every check of the script passed.
#   e. compute-sanitizer (PATH or /usr/local/cuda/bin): memcheck (with leak check) on graph
#      replay and on --eager, racecheck and synccheck on --eager, each on `dfg run` of the
#      default GRPO plan for cuda (bf16, then float32) for 2 steps. PASS: dfg exited 0 under
#      every tool and no tool reported an error (racecheck's warnings are listed, not failed).
#      SKIP when compute-sanitizer is not installed.
#   f. device memory vs the plan: GRPO at GPT-2 124M (the README's settings) run for 2 steps;
#      the measured bytes of its `device memory:` line (cudaMemGetInfo, the CUDA context
#      excluded) against the arena of `dfg inspect --json` plus the workspace the run
#      reports. PASS: arena + workspace <= measured <= arena + workspace + 64 MiB (the driver
#      hands out whole pages); the difference is reported. SKIP when the GPU is too small.
#   g. benchmark: tools/bench/bench.py --device cuda --configs gpt2-124m: dfg on the GPU
#      against grpo_torch.py on the GPU, eager and torch.compile, alternating runs (results
#      in tools/bench/results/*-gpt2-124m-cuda.*). PASS: it ran to the end (it measures, it
#      asserts no speed). SKIP when PY (--python, default python3) has no CUDA PyTorch
#      (Debian's python3-torch is CPU-only: install a CUDA build, e.g. in a venv, and pass
#      --python venv/bin/python).
#   h. decode at Qwen2.5-0.5B shape (issue 31's GPU goal, in part): the GRPO plan with Qwen2.5-0.5B's
#      shapes (24 layers, 896 wide, 14/2 heads, vocab 151936, tied head), bf16, untrained (it
#      writes no EOS, so decode runs max_completion_length 256 runs on 64 rows at 61 + 1..256
#      columns of context) for 3 steps; decode tokens/s over steps 2-3 (stage_ms and stage_runs
#      of --metrics) against the floor of reading the bf16 weights and each row's KV cache once
#      per run at the device's copy bandwidth (a cudaMemcpy of 1 GiB device to device, built
#      here with nvcc). PASS: it ran and printed the figures (it measures, it asserts no speed).
#      Not here yet: the step against PyTorch at this shape (grpo_torch.py builds GPT-2 only).
#   i. LoRA and QLoRA (docs/lora.md): (1) a tiny Qwen3 GRPO step on fixed rollouts, LoRA and
#      QLoRA (4-bit, double quantisation: the nf4_dequant kernel and the remade backward weights),
#      compiled for cuda in float32 and run on the GPU, against the same plans for the CPU: every
#      dumped value within 1e-4 and the adapters within 1e-5 together (st_tool.py close,
#      norm-close), from a random base dfg writes (--steps 0 --save); (2) LoRA r=16 and QLoRA
#      on all linears at Qwen2.5-0.5B shape, bf16, 3 steps each: ms a step (steps 2-3) and the
#      measured device memory against the plan's arena + workspace. PASS: (1) agreed and (2) ran.
#
# Logs of every step stay in a directory under $TMPDIR (printed at the end).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-gpu
REUSE=0
SKIP=""
PY=python3
BENCH_MODES=full,fixed
OUT=$ROOT/tools/bench/results
MIB=1048576

usage() { sed -n '8,10p' "$0" | sed 's/^# *//'; }
for a in "$@"; do # --quick: the 10-minute check is its own script (tools/gpu-check-quick.sh)
  if [ "$a" = --quick ]; then
    args=()
    for b in "$@"; do [ "$b" != --quick ] && args+=("$b"); done
    exec "$ROOT/tools/gpu-check-quick.sh" "${args[@]}"
  fi
done
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --reuse-build) REUSE=1; shift ;;
    --skip) SKIP=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --bench-modes) BENCH_MODES=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
skipped() { [[ ",$SKIP," == *",$1,"* ]]; }

DATE=$(date +%F)
HOST=$(hostname 2>/dev/null || uname -n)
# verdict, detail, sub_fail, header, gpu_detect, gpu_build, gpu_copy_bandwidth
# shellcheck source=gpu/common.sh
. "$ROOT/tools/gpu/common.sh"
# decode_vs_floor (step h; the quick check's step 2)
# shellcheck source=gpu/decode.sh
. "$ROOT/tools/gpu/decode.sh"

# h_decode: step h (its header above says what it measures)
h_decode() {
  local bw
  if ! bw=$(gpu_copy_bandwidth); then
    verdict "h. decode" FAIL "the bandwidth probe did not build or run" "$LOGS/bw.log"; return
  fi
  DEC_SET=(--set model_type=qwen2 --set hidden_size=896 --set num_hidden_layers=24 --set num_attention_heads=14
           --set num_key_value_heads=2 --set intermediate_size=4864 --set vocab_size=151936 --set tie_word_embeddings=true
           --set rope_theta=1000000 --set max_position_embeddings=32768 --set digits=60
           --set max_completion_length=256 --set prompts_per_step=8 --set num_generations=8)
  DEC_DIMS="24 896 14 2 64 4864 151936 64 61" DEC_STEPS=3 RUN_FLAGS=()
  decode_vs_floor "h. decode" "$bw" "a cudaMemcpy of 1 GiB device to device"
}

i_lora() {
  local st=(python3 "$ROOT/tests/cli/st_tool.py") shape=(--set model_type=qwen3 --set num_hidden_layers=2 --set hidden_size=64
             --set num_attention_heads=4 --set num_key_value_heads=2 --set head_dim=16 --set intermediate_size=128)
  local tiny=(--set model="$LOGS/lora_base" --set lora_r=8 --set lora_alpha=16 --set lora_target_modules=all-linear
              --set beta=0.04 --set learning_rate=1e-3)
  local worst="" f
  # a random base written by dfg itself (a 4-bit base of zeros would test nothing)
  if ! "${st[@]}" rollouts "$LOGS/lora_roll.safetensors" 64 9 15 7 --group 8 >"$LOGS/lora_roll.log" 2>&1 ||
     ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" "${shape[@]}" -o "$LOGS/lora_full.dfg" >>"$LOGS/lora_roll.log" 2>&1 ||
     ! "$DFG" run "$LOGS/lora_full.dfg" --steps 0 --save "$LOGS/lora_base/" >>"$LOGS/lora_roll.log" 2>&1; then
    verdict "i. LoRA" FAIL "the rollouts or the base model could not be made" "$LOGS/lora_roll.log"; return
  fi
  for f in "" "--set load_in_4bit=true --set bnb_4bit_use_double_quant=true"; do
    local tag=lora; [ -n "$f" ] && tag=qlora
    # shellcheck disable=SC2086
    if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" "${tiny[@]}" $f -o "$LOGS/$tag-cpu.dfg" >"$LOGS/$tag.log" 2>&1 ||
       ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda --set torch_dtype=float32 "${tiny[@]}" $f \
           -o "$LOGS/$tag-gpu.dfg" >>"$LOGS/$tag.log" 2>&1 ||
       ! "$DFG" run "$LOGS/$tag-cpu.dfg" --weights "$LOGS/lora_base" --rollouts "$LOGS/lora_roll.safetensors" \
           --dump "$LOGS/$tag-cpu.st" >>"$LOGS/$tag.log" 2>&1 ||
       ! "$DFG" run "$LOGS/$tag-gpu.dfg" --weights "$LOGS/lora_base" --rollouts "$LOGS/lora_roll.safetensors" \
           --dump "$LOGS/$tag-gpu.st" >>"$LOGS/$tag.log" 2>&1; then
      verdict "i. LoRA" FAIL "$tag: a compile or run failed" "$LOGS/$tag.log"; return
    fi
    # the dumped values each within 1e-4; the adapters together (Adam's first step from B = 0 is
    # ~lr sign(g): an entry whose gradient is rounding-sized moves by a rounding-sized fraction)
    if ! "${st[@]}" close "$LOGS/$tag-cpu.st" "$LOGS/$tag-gpu.st" 1e-4 --except model. >>"$LOGS/$tag.log" 2>&1 ||
       ! "${st[@]}" norm-close "$LOGS/$tag-cpu.st" "$LOGS/$tag-gpu.st" 1e-5 >>"$LOGS/$tag.log" 2>&1; then
      verdict "i. LoRA" FAIL "$tag: the GPU's step differs from the CPU's: $(tail -1 "$LOGS/$tag.log")" "$LOGS/$tag.log"; return
    fi
    worst="$worst$tag $(tail -1 "$LOGS/$tag.log"); "
  done
  local q=(--set model_type=qwen2 --set hidden_size=896 --set num_hidden_layers=24 --set num_attention_heads=14
           --set num_key_value_heads=2 --set intermediate_size=4864 --set vocab_size=151936 --set tie_word_embeddings=true
           --set rope_theta=1000000 --set max_position_embeddings=32768 --set digits=60 --set max_completion_length=128
           --set prompts_per_step=8 --set num_generations=8 --set lora_r=16 --set lora_alpha=32 --set lora_target_modules=all-linear
           --set beta=0.04)
  local big=""
  for f in "" "--set load_in_4bit=true --set bnb_4bit_use_double_quant=true"; do
    local tag=lora05; [ -n "$f" ] && tag=qlora05
    # shellcheck disable=SC2086
    if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda "${q[@]}" $f -o "$LOGS/$tag.dfg" >"$LOGS/$tag.log" 2>&1 ||
       ! "$DFG" run "$LOGS/$tag.dfg" --steps 3 --metrics "$LOGS/$tag.jsonl" >>"$LOGS/$tag.log" 2>&1; then
      verdict "i. LoRA" FAIL "$tag (Qwen2.5-0.5B shape) failed" "$LOGS/$tag.log"; return
    fi
    big="$big$tag: $(python3 -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][1:]
print("%.0f ms a step" % (sum(x["ms"] for x in s) / len(s)))' "$LOGS/$tag.jsonl"), $(grep -m1 "^device memory" "$LOGS/$tag.log"); "
  done
  verdict "i. LoRA" PASS "tiny step GPU vs CPU: ${worst}Qwen2.5-0.5B shape: $big"
  { echo "### i. LoRA and QLoRA"; echo; echo '```'; grep -hE "^(device memory|step |[0-9]+ steps in)" "$LOGS"/*lora05.log; echo '```'; echo; } >>"$DETAILS"
}

# ---------------------------------------------------------------- a. a GPU is here
header "a. GPU present"
gpu_detect || exit 2
# a usable GPU: from here on everything is logged and recorded
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/dfg-gpu-check-XXXXXX")
DETAILS=$LOGS/details.md
: >"$DETAILS"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT-dirty"
verdict "a. GPU present" PASS "$GPU_NAME (compute capability ${GPU_CAP:-?}, $GPU_MIB MiB; $n_gpus GPU(s), dfg uses GPU 0), driver $DRIVER, CUDA $CUDA_DRIVER (driver)"
others=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null)
if [ -n "$others" ]; then
  echo "      note: other processes use the GPU (they slow the benchmark and move cudaMemGetInfo): $others"
  detail "Other processes on the GPU at the start: \`$others\`" ""
fi
echo "      dfg $COMMIT; logs in $LOGS"

# ---------------------------------------------------------------- b. deps and a fresh build
header "b. dependencies and a fresh build in $BUILD"
if [ "$REUSE" != 1 ]; then
  if "$ROOT/tools/deps.sh" --test >"$LOGS/deps.log" 2>&1; then
    verdict "b. deps" PASS "$(tail -1 "$LOGS/deps.log")"
  else
    verdict "b. deps" FAIL "tools/deps.sh --test failed (the build goes on; PyTorch is only needed by the golden tests)" "$LOGS/deps.log"
  fi
fi
gpu_build
DFG=$BUILD/dfg

if [ "$BUILD_OK" != 1 ]; then
  for s in "c. kernel tests" "d. programs on the GPU" "e. compute-sanitizer" "f. device memory" "g. benchmark"; do
    verdict "$s" SKIP "not run: no build"
  done
fi

# ---------------------------------------------------------------- c. the kernel tests on the GPU
if [ "$BUILD_OK" = 1 ]; then
  header "c. kernel tests (emulator and GPU)"
  if skipped c; then verdict "c. kernel tests" SKIP "--skip c"; else
    log=$LOGS/ctest.log
    (cd "$BUILD" && ctest -R "test_cuda_|simt_|gpu_emu" --output-on-failure -j"$(nproc)") >"$log" 2>&1
    rc=$?
    full=$BUILD/Testing/Temporary/LastTest.log
    gpu_tests=$(grep -cE "^[a-z_0-9]+: [0-9]+ runs on the GPU" "$full" 2>/dev/null)
    gpu_runs=$(grep -oE "^[a-z_0-9]+: [0-9]+ runs on the GPU" "$full" 2>/dev/null | awk '{s += $2} END {print s + 0}')
    no_gpu=$(grep -E "GPU half skipped" "$full" 2>/dev/null | cut -d: -f1 | sort -u | xargs)
    summary=$(grep -E "tests passed" "$log" | tail -1)
    if [ $rc -ne 0 ]; then
      verdict "c. kernel tests" FAIL "ctest failed: $summary; $(sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | sed 's/^ *//' | xargs)" "$log"
    elif [ -n "$no_gpu" ]; then
      verdict "c. kernel tests" FAIL "passed, but the GPU half was skipped in: $no_gpu (the tests saw no CUDA device)" "$full"
    elif [ "${gpu_tests:-0}" -eq 0 ]; then
      verdict "c. kernel tests" FAIL "passed, but no test reported runs on the GPU" "$full"
    else
      verdict "c. kernel tests" PASS "$summary; $gpu_tests kernel test(s) ran their GPU half: $gpu_runs kernel runs on the GPU compared with the CPU (test_cuda_philox too)"
    fi
    { echo "### c. kernel tests: the GPU halves"; echo; echo '```'
      grep -E "runs on the GPU|cases under the SIMT emulator|GPU half" "$full" 2>/dev/null; echo '```'; echo; } >>"$DETAILS"
  fi

  # -------------------------------------------------------------- d. whole programs on the GPU
  header "d. whole programs on the GPU against the CPU (gpu_emu_test.sh, DFG_GPU_REAL=1)"
  if skipped d; then verdict "d. programs on the GPU" SKIP "--skip d"; else
    log=$LOGS/gpu_real.log
    DFG_GPU_REAL=1 bash "$ROOT/tests/cli/gpu_emu_test.sh" "$DFG" "$ROOT" >"$log" 2>&1
    rc=$?
    oks=$(grep -c "^ok - " "$log") fails=$(grep -c "^FAIL - " "$log")
    if [ $rc -eq 0 ] && [ "$fails" -eq 0 ]; then
      verdict "d. programs on the GPU" PASS "$oks checks: GPT-2 and GRPO on the GPU = the CPU (f32 1e-5, bf16 2e-2), graph replay = --eager bit for bit, device memory, refusals"
    else
      verdict "d. programs on the GPU" FAIL "$fails of $((oks + fails)) checks failed (exit $rc): $(grep '^FAIL - ' "$log" | head -3 | sed 's/^FAIL - //' | paste -sd ';' -)" "$log"
    fi
    { echo "### d. gpu_emu_test.sh with DFG_GPU_REAL=1"; echo; echo '```'; grep -E "^(ok|FAIL) - " "$log"; echo '```'; echo; } >>"$DETAILS"
  fi

  # -------------------------------------------------------------- e. compute-sanitizer
  header "e. compute-sanitizer on a small GRPO run"
  CS=""
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" \
           "$(dirname "${NVCC:-/nonexistent/x}")/compute-sanitizer"; do
    if [ -n "$c" ] && [ -x "$c" ]; then CS=$c; break; fi
  done
  if skipped e; then verdict "e. compute-sanitizer" SKIP "--skip e"
  elif [ -z "$CS" ]; then
    verdict "e. compute-sanitizer" SKIP "compute-sanitizer not found (PATH, /usr/local/cuda/bin, \$CUDA_HOME/bin): it comes with the CUDA toolkit (apt: cuda-sanitizer-<version>)"
  else
    if ! { "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda -o "$LOGS/grpo_bf16.dfg" &&
           "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda --set torch_dtype=float32 -o "$LOGS/grpo_f32.dfg"; } \
         >"$LOGS/cs_compile.log" 2>&1; then
      verdict "e. compute-sanitizer" FAIL "compiling the small GRPO plans failed" "$LOGS/cs_compile.log"
    else
      cs_bad=() cs_ok=() cs_warn=""
      for plan in bf16 f32; do
        for run in "memcheck graphs" "memcheck eager" "racecheck eager" "synccheck eager"; do
          read -r tool mode <<<"$run"
          log=$LOGS/cs_${tool}_${plan}_${mode}.log
          extra=() eager=()
          [ "$tool" = memcheck ] && extra=(--leak-check full)
          [ "$mode" = eager ] && eager=(--eager)
          "$CS" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$DFG" run "$LOGS/grpo_$plan.dfg" --steps 2 "${eager[@]}" >"$log" 2>&1
          rc=$?
          errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -1)
          race=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -1)
          rwarn=$(sed -n 's/.*RACECHECK SUMMARY: .*, \([0-9]*\) warning.*/\1/p' "$log" | tail -1)
          what="$tool $plan $mode"
          if [ $rc -ne 0 ] || [ "${errs:-0}" != 0 ] || [ "${race:-0}" != 0 ]; then
            cs_bad+=("$what: exit $rc${errs:+, $errs error(s)}${race:+, $race race error(s)}")
            sub_fail "e. $what" "exit $rc (99: the tool found errors; otherwise dfg's own exit), ERROR SUMMARY ${errs:-missing}${race:+, RACECHECK errors $race}" "$log"
          elif [ -z "$errs" ] && [ -z "$race" ]; then
            cs_bad+=("$what: no summary line")
            sub_fail "e. $what" "no ERROR/RACECHECK SUMMARY line in the tool's output: did it run?" "$log"
          else
            cs_ok+=("$what")
            if [ "${rwarn:-0}" != 0 ]; then
              cs_warn="$cs_warn $what: $rwarn racecheck warning(s);"
              { echo "### e. $what: $rwarn racecheck warning(s) (the tool's first 60 lines)"; echo; echo '```'
                grep -m 60 "^=========" "$log"; echo '```'; echo; } >>"$DETAILS"
            fi
          fi
        done
      done
      if [ ${#cs_bad[@]} -eq 0 ]; then
        verdict "e. compute-sanitizer" PASS "memcheck (leak check; graph replay and --eager), racecheck and synccheck (--eager) on the default GRPO plan for cuda, bf16 and float32, 2 steps each: no errors${cs_warn:+; warnings:$cs_warn}"
      else
        verdict "e. compute-sanitizer" FAIL "${#cs_bad[@]} of $(( ${#cs_bad[@]} + ${#cs_ok[@]} )) runs: $(printf '%s; ' "${cs_bad[@]}")"
      fi
    fi
  fi

  # -------------------------------------------------------------- f. device memory vs the plan
  header "f. device memory of GRPO at GPT-2 124M against its plan"
  if skipped f; then verdict "f. device memory" SKIP "--skip f"; else
    plan=$LOGS/grpo_124m.dfg
    set124=(--set n_layer=12 --set n_head=12 --set n_embd=768 --set vocab_size=50257 --set n_positions=1024 --set digits=64
            --set prompts_per_step=4 --set num_generations=8 --set gradient_accumulation_steps=2)
    if ! "$DFG" compile "$ROOT/examples/grpo/grpo.c" --target cuda "${set124[@]}" -o "$plan" >"$LOGS/mem_compile.log" 2>&1; then
      verdict "f. device memory" FAIL "dfg compile of the 124M GRPO plan failed" "$LOGS/mem_compile.log"
    else
      A=$("$DFG" inspect "$plan" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["arena_bytes"])')
      if [ -z "$A" ]; then
        verdict "f. device memory" FAIL "dfg inspect --json gave no arena_bytes"
      elif [[ $GPU_MIB =~ ^[0-9]+$ ]] && [ $((GPU_MIB * MIB)) -lt $((A + 256 * MIB)) ]; then
        verdict "f. device memory" SKIP "the plan's arena ($((A / MIB)) MiB) does not fit this GPU's $GPU_MIB MiB"
      else
        log=$LOGS/mem_run.log
        "$DFG" run "$plan" --steps 2 --metrics "$LOGS/mem_metrics.jsonl" >"$log" 2>&1
        rc=$?
        line=$(grep '^device memory:' "$log" | head -1)
        N=$(sed -n 's/^device memory: \([0-9]*\) bytes.*/\1/p' <<<"$line")
        W=$(sed -n 's/.*workspace \([0-9]*\) .*/\1/p' <<<"$line")
        RA=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["arena_bytes"])' "$LOGS/mem_metrics.jsonl" 2>/dev/null)
        if [ $rc -ne 0 ] || [ -z "$N" ] || [ -z "$W" ]; then
          verdict "f. device memory" FAIL "the 124M run failed (exit $rc) or printed no 'device memory:' line" "$log"
        else
          D=$((N - A - W))
          pct=$(awk -v a="$A" -v d="$D" 'BEGIN { printf "%.3f", 100 * d / a }')
          text="measured $N B ($((N / MIB)) MiB) = plan arena $A + workspace $W + $D B ($(awk -v d="$D" 'BEGIN { printf "%.2f", d / 1048576 }') MiB over the plan, $pct% of its arena)"
          [ -n "$RA" ] && [ "$RA" != "$A" ] && text="$text; NOTE: the run's arena_bytes $RA != inspect's $A"
          if [ "$D" -lt 0 ]; then
            verdict "f. device memory" FAIL "$text: LESS than the plan (the measurement or the allocation is wrong)" "$log"
          elif [ "$D" -gt $((64 * MIB)) ]; then
            verdict "f. device memory" FAIL "$text: more than 64 MiB over the plan (another allocation, or other processes on the GPU)" "$log"
          elif [ -n "$RA" ] && [ "$RA" != "$A" ]; then
            verdict "f. device memory" FAIL "$text" "$log"
          else
            verdict "f. device memory" PASS "$text: within the driver's page rounding (<= 64 MiB)"
          fi
          { echo "### f. GRPO at GPT-2 124M for 2 steps on the GPU"; echo; echo '```'
            grep -E "^(device memory|step |[0-9]+ steps in)|backend on" "$log"; echo '```'; echo; } >>"$DETAILS"
        fi
      fi
    fi
  fi

  # -------------------------------------------------------------- g. the benchmark
  header "g. benchmark: GPT-2 124M GRPO, dfg vs PyTorch eager and torch.compile on the GPU"
  if skipped g; then verdict "g. benchmark" SKIP "--skip g"
  elif ! tinfo=$("$PY" -c "import torch; assert torch.cuda.is_available(); print(torch.__version__, 'CUDA', torch.version.cuda)" 2>&1); then
    verdict "g. benchmark" SKIP "$PY has no CUDA PyTorch ($(tail -1 <<<"$tinfo"); Debian's python3-torch is CPU-only): install a CUDA build of torch >= 2.0 and pass --python"
  else
    log=$LOGS/bench.log
    marker=$LOGS/bench.start
    touch "$marker"
    mkdir -p "$OUT"
    (cd "$ROOT" && "$PY" tools/bench/bench.py --device cuda --configs gpt2-124m --modes "$BENCH_MODES" --dfg "$DFG" \
       --out "$OUT" --note "tools/gpu-check.sh, $BUILD") >"$log" 2>&1
    rc=$?
    json=$(find "$OUT" -maxdepth 1 -name "*-gpt2-124m-cuda.json" -newer "$marker" | head -1)
    if [ $rc -ne 0 ] || [ -z "$json" ]; then
      verdict "g. benchmark" FAIL "bench.py failed (exit $rc)" "$log"
    else
      ratios=$(python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
out = []
for mode, s in r["modes"].items():
    d = s["dfg"]["step_ms"]["median"]
    out.append(f"{mode}: dfg {d:.1f} ms, torch x{s['speedup_torch_ms_over_dfg_ms']:.2f}, "
               f"torch.compile x{s['speedup_torch_compile_ms_over_dfg_ms']:.2f} (their ms / dfg's), device memory "
               f"dfg/torch {s['device_ratio_dfg_over_torch']:.2f}")
print("; ".join(out))
PY
)
      verdict "g. benchmark" PASS "torch $tinfo; $ratios; results ${json%.json}.{json,md}"
      { echo "### g. benchmark ($(basename "${json%.json}").md)"; echo; sed '1,/^$/d' "${json%.json}.md"; echo; } >>"$DETAILS"
    fi
  fi

  # -------------------------------------------------------------- h. decode at Qwen2.5-0.5B shape
  header "h. decode tokens/s at Qwen2.5-0.5B shape against the bandwidth floor"
  if skipped h; then verdict "h. decode" SKIP "--skip h"; else
    h_decode
  fi

  # -------------------------------------------------------------- i. LoRA and QLoRA
  header "i. LoRA and QLoRA: a tiny step on the GPU against the CPU; Qwen2.5-0.5B shape step time and memory"
  if skipped i; then verdict "i. LoRA" SKIP "--skip i"; else
    i_lora
  fi
fi

# ---------------------------------------------------------------- the results file
mkdir -p "$OUT"
RESULT=$OUT/$DATE-gpu-check-$HOST.md
overall=PASS
[ "$n_fail" -gt 0 ] && overall=FAIL
{
  echo "# gpu-check, $DATE, $HOST"
  echo
  echo "dfg $COMMIT; GPU 0 of $n_gpus: $GPU_NAME, compute capability ${GPU_CAP:-?}, $GPU_MIB MiB; driver $DRIVER, CUDA $CUDA_DRIVER (the driver's);"
  # shellcheck disable=SC1091
  echo "nvcc ${NVCC_VERSION:-none}; $(cmake --version | head -1); CMAKE_CUDA_ARCHITECTURES=${ARCHS:-n/a}; $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(uname -r);"
  echo "$(nproc) CPU cores, $(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo). Command: \`tools/gpu-check.sh$([ "$REUSE" = 1 ] && echo ' --reuse-build')$([ -n "$SKIP" ] && echo " --skip $SKIP")\`."
  echo
  echo "**$overall**: $n_fail failed, $n_skip skipped (tools/gpu-check.sh's header says what each step checks)."
  echo
  echo "| step | result | what it saw |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  cat "$DETAILS"
} >"$RESULT"
echo
echo "gpu-check: $overall ($n_fail failed, $n_skip skipped); results in $RESULT; logs in $LOGS"
[ "$n_fail" -eq 0 ]
