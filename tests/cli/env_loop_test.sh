#!/usr/bin/env bash
# env_loop_test.sh - a multi-turn GRPO plan whose tools an environment program serves (issue 39;
# docs/agents.md): dfg run --env-cmd with tests/cli/fake_env.py (standard library only) over a
# dataset in the digit vocabulary. Checked: the plan refuses to run without the program, saying
# what to add; every step resets every row and finishes; every ended turn reaches the program once,
# the budget's and the last round's marked last; the tool's answers are in the rollout with
# tool_mask 0 there; tools/call_frequency is the calls the program counted; and the reward program
# gets each row's conversation (its "messages").
# Usage: env_loop_test.sh DFG SOURCE_DIR
DFG="$1"
SRC="$2"
GRPO="$SRC/examples/grpo/grpo.c"
HERE="$SRC/tests/cli"
# shellcheck source=testlib.sh
. "$HERE/testlib.sh"
testlib_begin env_loop
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

"$PY" - >calc.jsonl <<'PYEOF'
import json
V = "_$0123456789+-=*@"
for a, b in [(12, 34), (56, 78), (90, 11), (23, 45)]:
    print(json.dumps({"prompt_ids": [V.index(c) for c in f"{a}*{b}="]}))
PYEOF

run "$DFG" compile "$GRPO" --set dataset=calc.jsonl --set tools=multiply --set reward_funcs=turns --set vocab_size=17 \
  --set prompts_per_step=4 --set num_generations=2 --set max_completion_length=12 -o env.dfg
expect_rc 0 "compile a plan with tools=multiply over a dataset"

run "$DFG" run env.dfg --steps 1 --reward-cmd "$PY $HERE/messages_reward.py"
if [ "$rc" -ne 0 ]; then ok "no --env-cmd: refused (exit $rc)"; else fail "no --env-cmd: the run went on"; fi
expect_in err.txt "--env-cmd" "the refusal says what to add"

FAKE_ENV_LOG=env.log run "$DFG" run env.dfg --steps 2 --seed 5 --reward-cmd "$PY $HERE/messages_reward.py" \
  --env-cmd "$PY $HERE/fake_env.py" --metrics m.jsonl --dump d.safetensors
expect_rc 0 "two steps with the environment program"

"$PY" - >check.txt 2>&1 <<'PYEOF'
import json, struct
reqs = [json.loads(l) for l in open("env.log")]
kinds = [r["type"] for r in reqs]
assert kinds.count("reset") == 2 and kinds.count("finish") == 2, kinds
assert kinds[0] == "reset" and kinds[-1] == "finish", kinds
N = 8
for step in (0, 1):
    rs = [r for r in reqs if r["step"] == step]
    assert rs[0]["type"] == "reset" and len(rs[0]["rows"]) == N, rs[0]
    assert rs[-1]["type"] == "finish" and rs[-1]["n"] == N, rs[-1]
    ended = {}
    for r in rs:
        if r["type"] != "turns":
            continue
        rows = [t["row"] for t in r["turns"]]
        assert len(rows) == len(set(rows)), "a row twice in one request: %s" % rows
        for t in r["turns"]:
            ended.setdefault(t["row"], []).append(t)
    assert sorted(ended) == list(range(N)), "rows whose turns never reached the program: %s" % sorted(ended)
    for row, ts in ended.items():
        # fake_env answers a row's first EOS-ended turn with a call; every later one ends it
        assert len(ts) <= 2, (row, ts)
        if ts[0]["ids"][-1] != 1:
            assert ts[0]["last"], ("a turn the budget ended goes as the last", row, ts)

# the rollout: every answer of the tool, "=" digits "=", sits after its call with tool_mask 0
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        fmt = {"F32": "f", "I32": "i"}[v["dtype"]]
        vals = struct.unpack("<%d%s" % ((e - s) // 4, fmt), b[8 + n + s:8 + n + e])
        cols = v["shape"][-1] if v["shape"] else 1
        out[k] = [list(vals[i:i + cols]) for i in range(0, len(vals), cols)]
    return out
d = load("d.safetensors")
V = "_$0123456789+-=*@"
calls = 0
last = [r for r in reqs if r["step"] == 1]
first_turn = {}
for r in last:
    if r["type"] == "turns":
        for t in r["turns"]:
            first_turn.setdefault(t["row"], t)
for row in range(N):
    toks, tm = d["tokens"][row], d["tool_mask"][row]
    t = first_turn[row]
    zero = [i for i, x in enumerate(tm) if x == 0.0]
    if t["ids"][-1] == 1 and not t["last"]:
        want = "=%d=" % (7 * len(t["ids"]))
        if len(want) <= t["room"]:
            calls += 1
            got = "".join(V[toks[i]] for i in zero)
            assert got == want, (row, got, want)
            assert zero == list(range(zero[0], zero[0] + len(zero))), (row, zero)
            continue
    assert not zero, ("tool_mask 0 without a tool answer", row, zero)
m = [json.loads(l) for l in open("m.jsonl")][-1]
assert abs(m["tools/call_frequency"] - calls / N) < 1e-6, (m["tools/call_frequency"], calls, N)
assert calls > 0, "no call in the checked step"
# the reward is each row's count of assistant messages: 1 or 2, never null
assert 1.0 <= m["reward"] <= 2.0, m["reward"]
print("checked: %d calls of %d rows in step 2, reward %.3f" % (calls, N, m["reward"]))
PYEOF
if [ $? -eq 0 ]; then ok "$(tail -1 check.txt)"; else fail "the program's requests, the rollout and the metrics: $(tail -3 check.txt)"; fi

# an environment that scores episodes (get_reward): one more reward function, the plan's last
run "$DFG" compile "$GRPO" --set dataset=calc.jsonl --set tools=multiply --set reward=external \
  --set reward_funcs=turns,FakeEnv --set vocab_size=17 --set prompts_per_step=4 --set num_generations=2 \
  --set max_completion_length=12 -o scored.dfg
expect_rc 0 "compile with reward_funcs=turns,FakeEnv"
run "$DFG" run scored.dfg --steps 2 --seed 5 --reward-cmd "$PY $HERE/messages_reward.py" \
  --env-cmd "$PY $HERE/fake_env.py --reward" --metrics ms.jsonl
expect_rc 0 "the reward program's functions, then the environment's"
"$PY" - >check2.txt 2>&1 <<'PYEOF'
import json
a = [json.loads(l) for l in open("m.jsonl")]
b = [json.loads(l) for l in open("ms.jsonl")]
for x, y in zip(a, b):
    # the same rollouts (same seed, same policy before the update of step 1): turns + 0.25 a call
    assert abs(y["rewards/turns/mean"] - x["reward"]) < 1e-6, (x["reward"], y["rewards/turns/mean"])
    assert "rewards/FakeEnv/mean" in y, sorted(y)
step1 = b[0]
calls = step1["tools/call_frequency"] * 8
# row 0's episode reward is null (left out of the mean), the other rows' 0.25 a call
print("rewards/FakeEnv/mean %.4f, call frequency %.3f" % (step1["rewards/FakeEnv/mean"], step1["tools/call_frequency"]))
assert 0.0 <= step1["rewards/FakeEnv/mean"] <= 0.25, step1["rewards/FakeEnv/mean"]
PYEOF
if [ $? -eq 0 ]; then ok "$(tail -1 check2.txt)"; else fail "the environment's reward column: $(tail -3 check2.txt)"; fi

run "$DFG" compile "$GRPO" --set dataset=calc.jsonl --set tools=multiply --set reward=external --set reward_funcs=FakeEnv \
  --set vocab_size=17 --set prompts_per_step=4 --set num_generations=2 --set max_completion_length=12 -o envonly.dfg
run "$DFG" run envonly.dfg --steps 1 --env-cmd "$PY $HERE/fake_env.py --reward" --metrics me.jsonl
expect_rc 0 "reward_funcs=FakeEnv: the environment alone scores, no --reward-cmd"
run "$DFG" run env.dfg --steps 1 --reward-cmd "$PY $HERE/messages_reward.py" --env-cmd "$PY $HERE/fake_env.py --reward"
expect_rc 2 "a scoring environment for a plan whose reward_funcs lack it"
expect_in err.txt "reward_funcs=turns,FakeEnv" "the refusal names the setting that fixes it"

# ---------------------------------------------------------------- where a step goes on and where it stops
# A tool that raised (its message {'error': ...}, as env_server.py writes it): the step goes on,
# every row's episode ends and is scored, and the call counts as a failure (TRL's loop).
FAKE_ENV_LOG=raising.log run "$DFG" run env.dfg --steps 1 --seed 5 --reward-cmd "$PY $HERE/messages_reward.py" \
  --env-cmd "$PY $HERE/fake_env.py --raising" --metrics mr.jsonl
expect_rc 0 "tools that raise: the step goes on"
"$PY" - >check3.txt 2>&1 <<'PYEOF'
import json
m = [json.loads(l) for l in open("mr.jsonl")][-1]
reqs = [json.loads(l) for l in open("raising.log")]
assert reqs[-1]["type"] == "finish" and reqs[-1]["n"] == 8, reqs[-1]
assert m["tools/call_frequency"] > 0 and m["tools/failure_frequency"] == 1.0, m
assert 1.0 <= m["reward"] <= 2.0, m["reward"]
print("call frequency %.3f, failure frequency %.1f, every row finished and scored" % (
    m["tools/call_frequency"], m["tools/failure_frequency"]))
PYEOF
if [ $? -eq 0 ]; then ok "$(tail -1 check3.txt)"; else fail "raising tools: $(tail -3 check3.txt)"; fi
# An environment whose reset raised: TRL's step stops there too; here the run stops with one line
# naming the step, the request and the program's reason, before any weight moves.
run "$DFG" run env.dfg --steps 2 --reward-cmd "$PY $HERE/messages_reward.py" --env-cmd "$PY $HERE/fake_env.py --reset-error"
if [ "$rc" -ne 0 ]; then ok "reset raising: the run stops (exit $rc)"; else fail "reset raising: the run went on"; fi
expect_one_line "reset raising"
expect_in err.txt "step 0" "... naming the step"
expect_in err.txt "FakeEnv.reset: RuntimeError: cannot start" "... and the environment's reason"
# A program stuck on a turn past --env-timeout (TRL's loop would wait for ever): one line naming
# the step and the request; the program's process group is killed.
run "$DFG" run env.dfg --steps 1 --reward-cmd "$PY $HERE/messages_reward.py" --env-timeout 1 \
  --env-cmd "$PY $HERE/fake_env.py --hang-turns"
if [ "$rc" -ne 0 ]; then ok "a program hanging past --env-timeout: the run stops (exit $rc)"; else fail "a hanging program: the run went on"; fi
expect_one_line "the hang"
expect_in err.txt "step 0" "... naming the step"
expect_in err.txt "turns" "... and the request"
if pgrep -f "fake_env.py --hang-turns" >/dev/null; then fail "the hanging program is still running"; else ok "... and the program is gone"; fi

testlib_end
