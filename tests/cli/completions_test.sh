#!/usr/bin/env bash
# completions_test.sh - log_completions (examples/grpo/grpo_completions.c; ctest "completions"):
#   - every logging_steps steps (and only then) the run's folder gets completions/completions_STEP.jsonl,
#     one row a completion: its ids, a built-in task's text of them, its reward and advantage;
#   - the rows are the step's: the advantages and completion lengths of the last step's --dump;
#   - num_completions_to_print lines on the progress output, each the file's row: its reward,
#     advantage and text;
#   - with tools (task=calculator) each row carries its tool_mask, as long as its completion ids;
#   - with async_rollouts=1 the rows are the batch the step trained (the --dump's).
#   usage: completions_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
SRC=$2
. "$SRC/tests/cli/testlib.sh"
testlib_begin completions
GRPO="$SRC/examples/grpo/grpo.c"
LOG=(--set log_completions=true --set logging_steps=2 --set num_completions_to_print=3)

run "$DFG" compile "$GRPO" -o plain.dfg "${LOG[@]}"
expect_rc 0 "compile the reverse task with log_completions"
run "$DFG" run plain.dfg --steps 4 --threads 1 --seed 3 --quiet --checkpoint-dir out --dump d.st
expect_rc 0 "4 steps"
cp out.txt console.txt
python3 - "$SRC/tests/cli/st_tool.py" >check.txt 2>&1 <<'PY'
import json, os, re, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import st_tool
VOCAB = "_$0123456789+-=*@"
files = sorted(os.listdir("out/completions"))
assert files == ["completions_00002.jsonl", "completions_00004.jsonl"], files
rows = {}
for f in files:
    step = int(f[12:17])
    got = [json.loads(line) for line in open(os.path.join("out/completions", f))]
    assert len(got) == 64, (f, len(got))
    for i, r in enumerate(got):
        assert r["step"] == step and r["row"] == i, (f, i, r["step"], r["row"])
        assert r["completion"] == "".join(VOCAB[t] for t in r["completion_ids"]), (f, i)
        assert r["prompt"] == "".join(VOCAB[t] for t in r["prompt_ids"]), (f, i)
    rows[step] = got
# the last step's rows are the dump's: its advantages, its completion lengths
d, _ = st_tool.read("d.st")
adv = st_tool.values(d["advantages"])
mask = st_tool.values(d["completion_mask"])
T = len(mask) // 64
for i, r in enumerate(rows[4]):
    assert abs(r["advantage"] - adv[i]) <= 1e-6 * max(1.0, abs(adv[i])), (i, r["advantage"], adv[i])
    assert len(r["completion_ids"]) == sum(mask[i * T:(i + 1) * T]), (i, len(r["completion_ids"]))
# the progress output: 3 lines a logging step, each its file row's reward, advantage and text
lines = [l for l in open("console.txt") if l.startswith("completion step")]
assert len(lines) == 6, len(lines)
for l in lines:
    m = re.match(r'completion step (\d+) row (\d+): reward (\S+) advantage (\S+): "(.*)"$', l.rstrip("\n"))
    assert m, l
    r = rows[int(m[1])][int(m[2])]
    assert int(m[2]) < 3, l
    assert abs(float(m[3]) - r["reward"]) <= 1e-5 * max(1.0, abs(r["reward"])), (l, r["reward"])
    assert abs(float(m[4]) - r["advantage"]) <= 1e-5 * max(1.0, abs(r["advantage"])), (l, r["advantage"])
    assert m[5] == r["completion"], (l, r["completion"])
print("files at steps 2 and 4, 64 rows each, the dump's advantages and lengths, 6 console lines")
PY
if [ $? -eq 0 ]; then ok "$(tail -1 check.txt)"; else fail "the completions files and lines"; cat check.txt; fi

run "$DFG" compile "$GRPO" -o calc.dfg --set task=calculator --set prompts_per_step=4 --set num_generations=4 "${LOG[@]}"
expect_rc 0 "compile the calculator (tools) with log_completions"
run "$DFG" run calc.dfg --steps 2 --threads 1 --seed 3 --quiet --checkpoint-dir calc
expect_rc 0 "2 steps with tools"
python3 - >check.txt 2>&1 <<'PY'
import json
got = [json.loads(line) for line in open("calc/completions/completions_00002.jsonl")]
assert len(got) == 16, len(got)
for r in got:
    assert len(r["tool_mask"]) == len(r["completion_ids"]), r
    assert set(r["tool_mask"]) <= {0, 1}, r
print("16 rows, each with a tool_mask as long as its completion")
PY
if [ $? -eq 0 ]; then ok "$(tail -1 check.txt)"; else fail "the tools plan's completions file"; cat check.txt; fi

# one step off (async_rollouts=1): the rows are the batch the step trained, as --dump writes it
run "$DFG" compile "$GRPO" -o async.dfg --set async_rollouts=1 "${LOG[@]}"
expect_rc 0 "compile an async_rollouts=1 plan with log_completions"
run "$DFG" run async.dfg --steps 2 --threads 1 --seed 3 --quiet --checkpoint-dir async --dump ad.st
expect_rc 0 "2 steps one step off"
python3 - "$SRC/tests/cli/st_tool.py" >check.txt 2>&1 <<'PY'
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import st_tool
got = [json.loads(line) for line in open("async/completions/completions_00002.jsonl")]
d, _ = st_tool.read("ad.st")
adv, mask = st_tool.values(d["advantages"]), st_tool.values(d["completion_mask"])
T = len(mask) // len(got)
for i, r in enumerate(got):
    assert abs(r["advantage"] - adv[i]) <= 1e-6 * max(1.0, abs(adv[i])), (i, r["advantage"], adv[i])
    assert len(r["completion_ids"]) == sum(mask[i * T:(i + 1) * T]), (i, len(r["completion_ids"]))
print("the trained batch's rows: the dump's advantages and completion lengths (%d rows)" % len(got))
PY
if [ $? -eq 0 ]; then ok "$(tail -1 check.txt)"; else fail "the async plan's completions file"; cat check.txt; fi
testlib_end
