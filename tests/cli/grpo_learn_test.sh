#!/usr/bin/env bash
# grpo_learn_test.sh - GRPO learns: the README's main job in short (ctest "grpo_learn").
#   usage: grpo_learn_test.sh /path/to/dfg /path/to/source-tree [--set k=v ...] [--run ARGS...]
# Compiles examples/grpo/grpo.c with its defaults (reverse 3 digits, reward "mixed", no warm-up) and
# the extra settings (e.g. another model_type; @SRC@ in them is the source tree, @WORK@ a scratch
# directory), runs with the arguments after --run as well (e.g. --reward-cmd ...),
# trains with a fresh seed and follows the per-step reward. It passes as soon as the mean reward
# of the last 50 steps reaches 0.6 and at least 0.4 above the mean of the first 20 steps (a policy
# that reverses most strings; guessing scores ~0.06), and fails if that has not happened within
# 4000 steps. The bound is steps, never seconds: a loaded machine (ctest -j2 beside other
# suites) makes the steps slower, not fewer (ctest's TIMEOUT only catches a hang). A run that
# ends without a clear rise is tried
# again, up to three seeds, each derived from the one before: with TRL's defaults (no KL term)
# this small policy sometimes settles on partial answers (seed 95920 of the dataset case stayed
# near 0.2 for 4000 steps; seeds 657786 and 157795 of the default case near 0.53, the same
# numbers on the builds before and after 2026-11-28's settings work), and a learner that is
# broken fails all three. Set DFG_TEST_SEED to replay a seed (and the ones derived from it).
set -u
DFG=$1
SRC=$2
shift 2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dfg-learn-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
compile_args=()
run_args=()
into=compile
for a in "$@"; do
  a=${a//@SRC@/$SRC}
  a=${a//@WORK@/$WORK}
  if [ "$a" = "--run" ]; then into=run; continue; fi
  if [ $into = compile ]; then compile_args+=("$a"); else run_args+=("$a"); fi
done
# a dataset the settings name that does not exist yet: the reverse task exported (make_dataset.py)
for a in "${compile_args[@]}"; do
  case $a in
    dataset=$WORK/*.jsonl) python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 3 --rows 5000 \
                             --seed 1 -o "${a#dataset=}" 2>/dev/null ;;
  esac
done
seed=${DFG_TEST_SEED:-$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000 ))}
echo "grpo_learn: seed $seed (replay with DFG_TEST_SEED=$seed), at most 4000 steps"

if ! "$DFG" compile "$SRC/examples/grpo/grpo.c" -o "$WORK/grpo.dfg" "${compile_args[@]}" >"$WORK/compile.txt" 2>&1; then
  cat "$WORK/compile.txt"
  echo "grpo_learn: FAIL: the pipeline did not compile"
  exit 1
fi
grep -E "^plan for|^fused" "$WORK/compile.txt"

# train SEED: dfg stops on SIGPIPE once awk has seen enough. Exit 0: learned; 1: no clear rise;
# 2: the run failed (an error line, or no steps at all)
train() {
"$DFG" run "$WORK/grpo.dfg" --steps 4000 --every 1 --seed "$1" "${run_args[@]}" 2>&1 | awk '
  $1 == "step" {
    for (i = 3; i < NF; i++) if ($i == "reward") r = $(i + 1) + 0
    n++; hist[n] = r
    if (n <= 20) first += r
    win += r; if (n > 50) win -= hist[n - 50]
    if (n % 100 == 0 || n == 1) printf "step %4d  reward %.3f  mean of the last 50 %.3f\n", n, r, win / (n < 50 ? n : 50)
    if (n >= 50 && win / 50 >= 0.6 && win / 50 >= first / 20 + 0.4) {
      printf "grpo_learn: PASS: at step %d the mean reward of the last 50 steps is %.3f (first 20 steps: %.3f)\n", n, win / 50, first / 20
      ok = 1; exit 0
    }
    next
  }
  /error|failed/ { print; bad = 1 }
  END {
    if (ok) exit 0
    if (bad || n == 0) { printf "grpo_learn: the run failed after %d steps\n", n; exit 2 }
    printf "grpo_learn: after %d steps the mean reward of the last 50 is %.3f (first 20: %.3f); no clear rise\n", n, (n >= 50 ? win / 50 : 0), (n >= 20 ? first / 20 : 0)
    exit 1
  }'
}

train "$seed"
rc=$?
s=$seed
for try in 2 3; do
  [ $rc = 1 ] || break
  s2=$(( (s + 500009) % 1000000 ))
  echo "grpo_learn: seed $s did not learn; try $try with seed $s2 (derived from it)"
  s=$s2
  train "$s"
  rc=$?
done
[ $rc = 0 ] || echo "grpo_learn: FAIL"
exit $rc
