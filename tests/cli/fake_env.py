#!/usr/bin/env python3
"""fake_env.py - an environment program for tests (docs/agents.md's protocol), standard library only.

Serves one tool, "multiply", over the digit vocabulary of dfg's built-in tasks
("_$0123456789+-=*@" by id): a turn that ends with EOS (1) is a call the first time a row ends a
turn in a step (whatever it holds: a random policy then still exercises the tool's path), and its
answer is "=", the digits of 7 * the turn's length, "="; every later turn, and every turn marked
last, ends the episode. finish gives each row's conversation: one assistant message per turn and a
tool message per answer. Each request is appended to $FAKE_ENV_LOG (one JSON line) when set.
With --reward it scores episodes as an environment class with get_reward does (the hello's
"reward": "FakeEnv"): 0.25 per tool call of the row, and null for row 0 (TRL's None).
Failures, one flag each (docs/agents.md, "Where a step goes on and where it stops"):
  --raising      every call raised: the answer is the same suffix, with failures 1 (env_server.py
                 turns a raising tool into a tool message {'error': ...} and goes on)
  --reset-error  reset answers {"error": ...}, as env_server.py does when a reset(**row) raised
  --hang-turns   the first turns request is never answered (a program stuck past --env-timeout)
"""
import time
import json
import os
import sys

VOCAB = "_$0123456789+-=*@"
log = os.environ.get("FAKE_ENV_LOG")
out = sys.stdout


def say(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def text(ids):
    return "".join(VOCAB[i] if 0 <= i < len(VOCAB) else "?" for i in ids)


scores = "--reward" in sys.argv[1:]
raising = "--raising" in sys.argv[1:]
reset_error = "--reset-error" in sys.argv[1:]
hang_turns = "--hang-turns" in sys.argv[1:]
say({"tools": ["multiply"], "reward": "FakeEnv" if scores else None})
turns_seen, messages = {}, {}
for line in sys.stdin:
    req = json.loads(line)
    if log:
        with open(log, "a") as f:
            f.write(line if line.endswith("\n") else line + "\n")
    kind = req.get("type")
    if kind == "reset" and reset_error:
        say({"error": "row 0: FakeEnv.reset: RuntimeError: cannot start"})
    elif kind == "turns" and hang_turns:
        time.sleep(3600)
    elif kind == "reset":
        turns_seen, messages = {}, {i: [] for i in range(len(req["rows"]))}
        say({"prompts": [None for _ in req["rows"]]})
    elif kind == "turns":
        answers = []
        for t in req["turns"]:
            row, ids = t["row"], t["ids"]
            messages.setdefault(row, []).append({"role": "assistant", "content": text(ids)})
            first = row not in turns_seen
            turns_seen[row] = True
            if first and not t["last"] and ids and ids[-1] == 1:
                product = str(7 * len(ids))
                suffix = [14] + [2 + int(c) for c in product] + [14]
                if len(suffix) <= t["room"]:
                    messages[row].append({"role": "tool", "name": "multiply", "content": product})
                    answers.append({"done": False, "suffix_ids": suffix, "calls": 1, "failures": int(raising)})
                    continue
            answers.append({"done": True, "calls": 0, "failures": 0})
        say({"turns": answers})
    elif kind == "finish":
        msgs = [messages.get(i, []) for i in range(req["n"])]
        rewards = [None] * req["n"]
        if scores:
            rewards = [None if i == 0 else 0.25 * sum(m["role"] == "tool" for m in msgs[i]) for i in range(req["n"])]
        say({"messages": msgs, "rewards": rewards})
    else:
        say({"error": "unknown request %r" % kind})
