# testlib.sh - what the CLI test scripts share (sourced, not run): a private working directory,
# "ok - ..." / "FAIL - ..." lines with the failing command's output, and the exit-code and
# message checks. A script sources it, calls testlib_begin NAME (it then runs in $WORK, removed
# on exit) and ends with testlib_end, which exits 1 when any check failed.
#   run CMD...           runs CMD, keeping stdout, stderr and the exit code in out.txt, err.txt, $rc
#   expect_rc CODE WHAT  the last run exited with CODE
#   expect_in FILE TEXT WHAT
#   expect_one_line WHAT stderr of the last run is exactly one line
#   jget FILE EXPR       a Python expression over d, the JSON in FILE
#   same_step A B WHAT [MODE]  two GRPO runs' metrics (JSONL) trained the same steps
testlib_begin() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dfg-$1-XXXXXX")
  [ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT
  cd "$WORK" || exit 1
  failures=0
}
ok() { echo "ok - $1"; }
fail() {
  echo "FAIL - $1"
  echo "  --- stdout:"; sed 's/^/  | /' out.txt 2>/dev/null | tail -40
  echo "  --- stderr:"; sed 's/^/  | /' err.txt 2>/dev/null | tail -20
  failures=$((failures + 1))
}
run() { "$@" >out.txt 2>err.txt; rc=$?; }
expect_rc() { if [ "$rc" -eq "$1" ]; then ok "$2 (exit $rc)"; else fail "$2: expected exit $1, got $rc"; fi; }
expect_in() { if grep -qF -- "$2" "$1"; then ok "$3"; else fail "$3: '$2' not in $1"; fi; }
expect_one_line() {
  local n; n=$(wc -l <err.txt)
  if [ "$n" -eq 1 ]; then ok "$1: one line"; else fail "$1: expected one line on stderr, got $n"; fi
}
jget() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }
# same_step A.jsonl B.jsonl WHAT [MODE] (GRPO runs): every metric of every step of two runs from one seed agrees:
# rewards and completion lengths exactly (the same tokens were sampled), the rest within 1e-4.
# entropy and the clip ratios are TRL's per-micro-batch means averaged over the micro-batches, so
# they are logged differently when the micro-batches differ (the loss, gradients and updates are
# not): they are compared only between plans with the same micro-batches. The sampling-vs-training
# log-prob differences are rounding noise whose bits depend on the plan's reduction order: both
# runs' must be under 1e-5, not equal.
same_step() {
  if python3 - "$1" "$2" "$4" >cmp.txt 2>&1 <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
skip = {"step", "ms", "host_ms", "tokens_per_s", "arena_bytes", "reward_ms"}
if sys.argv[3] != "same-micro-batches": skip |= {"entropy", "cispo_clip_ratio"} | {k for k in a[0] if k.startswith("clip_ratio/")}
worst, bad = 0.0, []
assert len(a) == len(b) > 0, (len(a), len(b))
for x, y in zip(a, b):
    for k, v in x.items():
        if k in skip or not isinstance(v, (int, float)): continue
        if k.startswith("sampling/sampling_logp_difference/"):
            if max(abs(v), abs(y[k])) > 1e-5: bad.append("step %s %s: %r vs %r (over 1e-5)" % (x["step"], k, v, y[k]))
            continue
        exact = k.startswith("reward") or k.startswith("completions/") or k == "frac_reward_zero_std"
        # the loss is a mean of terms of size ~|advantage| that can cancel to ~1e-4: its floor is
        # 1e-2 (a 2-rank step's loss 2.07995e-4 against 2.07882e-4, Debug build: 1.1e-7 apart)
        err = abs(v - y[k]) / max(abs(v), 1e-2 if k == "loss" else 1e-3)
        worst = max(worst, 0 if exact else err)
        if (exact and v != y[k]) or err > 1e-4: bad.append("step %s %s: %r vs %r" % (x["step"], k, v, y[k]))
print("worst relative difference %.2g over %d metrics x %d steps" % (worst, len([k for k in a[0] if k not in skip]), len(a)))
if bad: print("\n".join(bad[:8])); sys.exit(1)
PY
  then ok "$3 trains the same step: rewards and completions equal, losses within 1e-4 ($(cat cmp.txt))"
  else fail "$3 trains a different step: $(cat cmp.txt)"; fi
}

testlib_end() {
  echo
  if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
  echo "all checks passed"
  exit 0
}
