#!/usr/bin/env python3
"""eval_env.py - an environment program for the evaluation tests of tools plans (docs/agents.md's
protocol), standard library only, in the digit vocabulary of dfg's built-in tasks ("_$0123456789+-=*@").

It plays one tool, "multiply", as an environment class would, from each row's dataset fields
(reset(**row)): a turn that ends with EOS (1) is a call while the row has made fewer than its
field "max_calls" calls (default 1); the answer is "=", the digits of 7 * the turn's length, "=";
a call fails (an {'error': ...} message, counted in failures) when the field "fail" is true.
get_reward (the hello's "reward": "EvalEnv") is the field "bonus" + 0.25 a call. Every reset,
ended turn and finish is appended to $EVAL_ENV_LOG (one JSON line each, with what it answered),
so a test recomputes the metrics from what the program saw.
"""
import json
import os
import sys

log_path = os.environ.get("EVAL_ENV_LOG")
out = sys.stdout


def say(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def log(obj):
    if log_path:
        with open(log_path, "a") as f:
            f.write(json.dumps(obj) + "\n")


say({"tools": ["multiply"], "reward": "EvalEnv"})
fields, calls, messages = [], [], []
for line in sys.stdin:
    req = json.loads(line)
    kind = req.get("type")
    if kind == "reset":
        fields = [json.loads(r["fields"]) if isinstance(r["fields"], str) else r["fields"] for r in req["rows"]]
        calls = [0] * len(fields)
        messages = [[] for _ in fields]
        log({"type": "reset", "step": req["step"], "rows": [{"index": r["index"], "fields": f}
                                                             for r, f in zip(req["rows"], fields)]})
        say({"prompts": [None] * len(fields)})
    elif kind == "turns":
        answers = []
        for t in req["turns"]:
            row, ids, f = t["row"], t["ids"], fields[t["row"]]
            messages[row].append({"role": "assistant", "content": "".join(map(str, ids))})
            a = {"done": True, "calls": 0, "failures": 0}
            if not t["last"] and ids and ids[-1] == 1 and calls[row] < f.get("max_calls", 1):
                suffix = [14] + [2 + int(c) for c in str(7 * len(ids))] + [14]
                fails = int(bool(f.get("fail")))
                a = {"done": len(suffix) > t["room"], "calls": 1, "failures": fails}
                if not a["done"]:
                    a["suffix_ids"] = suffix
                    messages[row].append({"role": "tool", "name": "multiply", "content": "x"})
                calls[row] += 1
            log({"type": "turn", "step": req["step"], "row": row, "n_ids": len(ids),
                 "last_id": ids[-1] if ids else None, **a})
            answers.append(a)
        say({"turns": answers})
    elif kind == "finish":
        n = req["n"]
        rewards = [fields[i].get("bonus", 0.0) + 0.25 * calls[i] for i in range(n)]
        log({"type": "finish", "step": req["step"], "rewards": rewards, "calls": calls[:n]})
        say({"messages": messages[:n], "rewards": rewards})
    else:
        say({"error": "unknown request %r" % kind})
