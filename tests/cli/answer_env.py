"""answer_env.py - an environment program for dfg run --env-cmd (tools/env_server.py's protocol)
that answers each row's first turn, when it fits, with the same 10 tokens whatever the row wrote
('=' 8 digits '=' in the calculator's vocabulary), and ends every later turn: an episode with one
tool answer wider than extend's copies of 4 and 8 columns, from any policy, trained or not.
tests/cli/tools_test.sh and share_test.sh run it."""
import json
import sys


def say(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


say({"tools": ["multiply"], "reward": None})
seen = set()
for line in sys.stdin:
    req = json.loads(line)
    if req["type"] == "reset":
        seen = set()
        say({"prompts": [None for _ in req["rows"]]})
    elif req["type"] == "turns":
        out = []
        for t in req["turns"]:
            answer = [14] + [2 + (t["row"] + i) % 10 for i in range(8)] + [14]  # '=' 8 digits '='
            if t["row"] not in seen and not t["last"] and len(answer) <= t["room"]:
                out.append({"done": False, "suffix_ids": answer, "calls": 1, "failures": 0})
            else:
                out.append({"done": True, "calls": 0, "failures": 0})
            seen.add(t["row"])
        say({"turns": out})
    elif req["type"] == "finish":
        say({"messages": [[{"role": "assistant", "content": "x"}] for _ in range(req["n"])], "rewards": [None] * req["n"]})
