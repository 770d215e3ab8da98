#!/usr/bin/env bash
# gpu-check-quick.sh (tools/gpu-check.sh --quick) - the 10-minute GPU check, build included, for the
# few minutes a GPU is lent (issue 41): what dfg promises at 0.5B-1.5B scale, measured against
# transformers + peft on the same GPU, and written to tools/bench/results/<date>-gpu-check-quick-<host>.md
# and .json (each step's verdict, figures, seconds taken and estimated).
#
#   tools/gpu-check.sh --quick [--rehearse] [--build-dir DIR] [--reuse-build] [--only 1,2,3,4,5,6]
#                      [--python PY] [--rounds N] [--budget S] [--threads N] [--host NAME] [--out DIR]
#
#   a. GPU present (gpu-check.sh's step a); --rehearse: none needed.
#   b. build: configure with CUDA (gpu-check.sh's step b) and build only dfg_cli and what it needs
#      (the engine, the CUDA and emulator modules), not the tests. --reuse-build: DIR as it is.
#   1. LoRA and QLoRA GRPO training steps at Qwen2.5-0.5B shape (hidden 896, 24 layers, 14/2 heads,
#      intermediate 4864) and 1.5B shape (1536, 28, 12/2, 8960), vocab 151936, tied, random
#      weights, bf16: 8 prompts x 8 generations, 64-token prompts, completions of 1..256 tokens
#      (VARIABLE: one rollouts file, tests/cli/st_tool.py rollouts, trained on by both), TRL's
#      "grpo" loss, beta 0, LoRA r 16 alpha 32 on all linears. dfg: `dfg run --rollouts` of the
#      plan (steps after the first, which captures the graphs); PyTorch: tools/bench/grpo_torch_lora.py
#      (transformers' Qwen2 + peft, TRL's step, gradient checkpointing on as TRL's default; at 1.5B
#      also off, once). ROUNDS alternated runs of each LoRA side (dfg, torch, dfg, torch); QLoRA
#      (4-bit NF4, double quantisation) once each, the torch half SKIPped without bitsandbytes.
#      Step ms medians, dfg's measured `device memory:` against torch.cuda.max_memory_allocated
#      (and torch's device memory measured as dfg measures its own), ratios.
#   2. decode tokens/s at Qwen2.5-0.5B shape against the bandwidth floor (gpu-check.sh step h's
#      workload and method: 64 rows, 61-token prompts, 256 decode runs, bf16 weights and KV caches
#      read once per run at the measured copy bandwidth).
#   3. batch_invariant: the plan with `--set batch_invariant=true` against the default plan (0.5B
#      shape, 64-token completions, 3 steps each): step ms ratio, and the max |sampling_logps - logp|
#      of `dfg run --dump` over the completion tokens, which must be 0 (the default plan's too, for
#      comparison). dfg plans it for cuda since 7dbd21f; a dfg that refuses it there SKIPs (the rehearsal
#      then uses the cpu target).
#   4. shared-prompt decode: `--set share_prompts=0` against `=1` on 2048-token prompts (a dataset
#      of random ids, 8 prompts x 8 generations, 64-token completions): decode ms and the planned KV
#      cache of each (2 steps: with share_prompts=0 the training pass over 64 x 2112 tokens is dear).
#      Decode's cache holds each group's prompt once since e70df66 (a build where both plan the same
#      KV cache SKIPs).
#   5. (run before 4: it only reads) predicted vs measured per stage: `dfg inspect P --device h200|h100|a100|l40s --json`'s per-stage
#      predicted ms against the stage_ms of steps 1 and 2's runs (a dfg whose inspect refuses --device SKIPs).
#   6. the tool loop (issue 39): docs/agents.md's calculator plan (task=calculator, 8 x 8 rows, 300
#      supervised warm-up steps, then 40 GRPO steps) compiled for cuda and run there: ms a GRPO step,
#      tools/call_frequency and reward over the last 20 steps, device memory against the plan.
#
# --rehearse: every step on this CPU, no GPU: cuda plans under --emulate-gpu (step 3 too, on the
# cpu target only where cuda refuses batch_invariant), tiny shapes, the PyTorch side on the CPU (transformers
# 4.40.2 and peft 0.11.1 from .deps, as tools/deps.sh --test installs them), the copy bandwidth the
# host's; the results (figures of nothing real) go to the log directory unless --out says otherwise.
# It checks the commands, the parsing and the report; tests/cli/gpu_check_quick_test.sh runs it.
# --only: the steps to run (a and b always); --rounds: alternated LoRA runs (2; rehearsal 1);
# --budget S: a step whose estimate would end past S seconds from the start is not run (a SKIP that
# says so; default 480 on a GPU, so that a machine's start and a partial rerun fit a 15-minute lease;
# 0: no limit, the rehearsal's default). The results files are rewritten after every step, so a run
# stopped by its lease still leaves them.
# --python PY: the Python of the PyTorch side (default python3; rehearsal: Debian's /usr/bin/python3
# when python3 has no torch; `none`: no PyTorch side, its half of step 1 SKIPs).
# Exit 0: nothing failed; 1: a step failed; 2: refused (no GPU without --rehearse, bad argument).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="" REUSE=0 REHEARSE=0 ONLY=1,2,3,4,5,6 PY="" ROUNDS="" THREADS=2 OUT="" HOST="" BUDGET=""
usage() { sed -n '7,8p' "$0" | sed 's/^# *//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) REHEARSE=1; shift ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --reuse-build) REUSE=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --host) HOST=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check --quick: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $ONLY =~ ^[1-6](,[1-6])*$ ]] || { echo "gpu-check --quick: --only takes steps 1..6 separated by commas, got '$ONLY'" >&2; exit 2; }
[ -z "$ROUNDS" ] || [[ $ROUNDS =~ ^[1-9]$ ]] || { echo "gpu-check --quick: --rounds takes 1..9, got '$ROUNDS'" >&2; exit 2; }
[ -z "$BUDGET" ] || [[ $BUDGET =~ ^[0-9]+$ ]] || { echo "gpu-check --quick: --budget takes seconds, got '$BUDGET'" >&2; exit 2; }
wanted() { [[ ",$ONLY," == *",$1,"* ]]; }
DATE=$(date +%F)
HOST=${HOST:-$(hostname 2>/dev/null || uname -n)}
T_START=$(date +%s)
# shellcheck source=gpu/common.sh
. "$ROOT/tools/gpu/common.sh"
# shellcheck source=gpu/decode.sh
. "$ROOT/tools/gpu/decode.sh"
# shellcheck source=gpu/quick_steps.sh
. "$ROOT/tools/gpu/quick_steps.sh"

if [ "$REHEARSE" = 1 ]; then
  BUILD=${BUILD:-$ROOT/build} REUSE=1 ROUNDS=${ROUNDS:-1} BUDGET=${BUDGET:-0}
  GPU_NAME="none (rehearsal on the CPU: cuda plans under --emulate-gpu)" DRIVER=- GPU_MIB=0 GPU_CAP="" CUDA_DRIVER=-
  DEVICE_KIND=cpu RUN_FLAGS=(--emulate-gpu --threads "$THREADS") TORCH_DEV=cpu
else
  BUILD=${BUILD:-$ROOT/build-gpu} ROUNDS=${ROUNDS:-2} BUDGET=${BUDGET:-480}
  header "a. GPU present"
  gpu_detect || exit 2
  case $GPU_NAME in
    *H200*) DEVICE_KIND=h200 ;; *H100*) DEVICE_KIND=h100 ;; *A100*) DEVICE_KIND=a100 ;; *L40S*) DEVICE_KIND=l40s ;;
    *) DEVICE_KIND="" ;;
  esac
  RUN_FLAGS=() TORCH_DEV=cuda
fi
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/dfg-gpu-check-quick-XXXXXX")
DETAILS=$LOGS/details.md ROWS_TSV=$LOGS/rows.tsv DATA_DIR=$LOGS/data
mkdir -p "$DATA_DIR"
: >"$DETAILS"
: >"$ROWS_TSV"
[ -n "$OUT" ] || { if [ "$REHEARSE" = 1 ]; then OUT=$LOGS; else OUT=$ROOT/tools/bench/results; fi; }
tag=gpu-check-quick; [ "$REHEARSE" = 1 ] && tag=gpu-check-quick-rehearsal
RESULT=$OUT/$DATE-$tag-$HOST
# write_results: the .md and .json as they stand (after every step: a lease that ends mid-run keeps them)
write_results() {
  WALL=$(( $(date +%s) - T_START ))
  mkdir -p "$OUT"
  quick_meta "$WALL" >"$LOGS/meta.json"
  overall=$(python3 "$ROOT/tools/gpu/quick.py" report "$ROWS_TSV" "$DETAILS" "$LOGS/meta.json" "$DATA_DIR" "$RESULT.md" "$RESULT.json")
}
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT-dirty"
quick_shapes
quick_print_estimates

STEP_T0=$T_START STEP_EST=${EST[a]}
if [ "$REHEARSE" = 1 ]; then
  verdict "a. GPU present" SKIP "rehearsal: no GPU; cuda plans run under the SIMT emulator"
else
  verdict "a. GPU present" PASS "$GPU_NAME (compute capability ${GPU_CAP:-?}, $GPU_MIB MiB; dfg uses GPU 0), driver $DRIVER, CUDA $CUDA_DRIVER (driver)"
fi
echo "      dfg $COMMIT; logs in $LOGS"

header "b. build ($BUILD)"
STEP_T0=$(date +%s) STEP_EST=${EST[b]}
if [ "$REHEARSE" = 1 ]; then
  find_nvcc
  if [ -x "$BUILD/dfg" ]; then
    verdict "b. build" SKIP "rehearsal: $BUILD as it is (its dfg runs cuda plans under --emulate-gpu)"; BUILD_OK=1
  else
    verdict "b. build" FAIL "rehearsal: no $BUILD/dfg (build it, or pass --build-dir)"; BUILD_OK=0
  fi
else
  gpu_build dfg_cli
fi
DFG=$BUILD/dfg

if [ "$BUILD_OK" = 1 ]; then
  quick_torch_env
  write_results
  for s in 1 2 3 5 6 4; do # 5 reads what 1 and 2 ran; 4 last: the dearest per second of what it shows
    wanted $s || continue
    header "$s. ${STEP_NAME[$s]} (estimate ${EST[$s]} s on a GPU)"
    STEP_T0=$(date +%s) STEP_EST=${EST[$s]}
    if [ "$BUDGET" -gt 0 ] && [ $((STEP_T0 - T_START + EST[$s])) -gt "$BUDGET" ]; then
      verdict "${STEP_ROW[$s]}" SKIP "not run: $((STEP_T0 - T_START)) s gone and its estimate ${EST[$s]} s would pass --budget $BUDGET"
    else
      "quick_step$s"
    fi
    write_results
  done
fi

# ---------------------------------------------------------------- the results files
write_results
echo
echo "gpu-check --quick: ${overall:-FAIL} ($n_fail failed, $n_skip skipped) in $WALL s; results in $RESULT.{md,json}; logs in $LOGS"
[ "$n_fail" -eq 0 ] && [ "$overall" = PASS ]
