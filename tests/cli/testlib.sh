# testlib.sh - what the CLI test scripts share (sourced, not run): a private working directory,
# "ok - ..." / "FAIL - ..." lines with the failing command's output, and the exit-code and
# message checks. A script sources it, calls testlib_begin NAME (it then runs in $WORK, removed
# on exit) and ends with testlib_end, which exits 1 when any check failed.
#   run CMD...           runs CMD, keeping stdout, stderr and the exit code in out.txt, err.txt, $rc
#   expect_rc CODE WHAT  the last run exited with CODE
#   expect_in FILE TEXT WHAT
#   expect_one_line WHAT stderr of the last run is exactly one line
#   jget FILE EXPR       a Python expression over d, the JSON in FILE
testlib_begin() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dfg-$1-XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
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
testlib_end() {
  echo
  if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
  echo "all checks passed"
  exit 0
}
