#!/usr/bin/env bash
# gpt2_accum_test.sh - gradient accumulation in examples/gpt2_train.c trains the same step: the
# program compiled with gradient_accumulation_steps=1 and =4 (4 micro-batches of 4 rows), run 5
# steps from one seed, logs the same loss, acc and grad_norm every step (within 1e-5 relative:
# only the order of float sums differs), and the GA=4 plan's arena is smaller (activations for 4
# rows, not 16). A wrong normalisation of the micro-batch loss (e.g. no division by GA) changes
# the loss and the gradient norm by x4 and fails here. Also: a GA that does not divide the batch
# is refused with exit 2 and a message naming both.
#   usage: gpt2_accum_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
. "$(dirname "$0")/testlib.sh"
testlib_begin accum-test

arena_of() { "$DFG" inspect "$1" --json >"$1.json" && jget "$1.json" 'd["arena_bytes"]'; }

for ga in 1 4; do
  run "$DFG" compile "$SRC/examples/gpt2_train.c" --set gradient_accumulation_steps=$ga -o ga$ga.dfg
  expect_rc 0 "compile gpt2_train with gradient_accumulation_steps=$ga"
  run "$DFG" run ga$ga.dfg --steps 5 --seed 7 --metrics ga$ga.jsonl
  expect_rc 0 "run 5 steps with gradient_accumulation_steps=$ga"
done

if python3 - ga1.jsonl ga4.jsonl >cmp.txt 2>&1 <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 5, (len(a), len(b))
worst, bad = 0.0, []
for x, y in zip(a, b):
    for k in ("loss", "acc", "grad_norm"):
        err = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
        worst = max(worst, err)
        if err > 1e-5: bad.append("step %d %s: GA=1 %r, GA=4 %r" % (x["step"], k, x[k], y[k]))
print("worst relative difference %.2g over loss, acc, grad_norm x 5 steps" % worst)
if bad: print("\n".join(bad)); sys.exit(1)
PY
then ok "GA=4 trains the same step as GA=1 ($(cat cmp.txt))"
else fail "GA=4 and GA=1 disagree: $(cat cmp.txt)"; fi

a1=$(arena_of ga1.dfg) a4=$(arena_of ga4.dfg)
if [ -n "$a1" ] && [ -n "$a4" ] && [ "$a4" -lt "$a1" ]; then ok "GA=4 arena $a4 B < GA=1 arena $a1 B"
else fail "GA=4 arena '$a4' is not smaller than GA=1 arena '$a1'"; fi

run "$DFG" compile "$SRC/examples/gpt2_train.c" --set gradient_accumulation_steps=3 -o bad.dfg
expect_rc 2 "gradient_accumulation_steps=3 does not divide batch 16"
expect_in err.txt "gradient_accumulation_steps 3 must divide batch 16" "the message names both"
expect_one_line "gradient_accumulation_steps=3"

testlib_end
