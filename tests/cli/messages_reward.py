#!/usr/bin/env python3
"""messages_reward.py - a reward program for tests: "turns", each row's number of assistant
messages in the conversation the environment program recorded (the row's "messages"), null when a
row has none. Standard library only."""
import json
import sys

out = sys.stdout
out.write(json.dumps({"reward_funcs": ["turns"]}) + "\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    vals = []
    for row in req["rows"]:
        msgs = row.get("messages")
        vals.append([sum(1 for m in msgs if m.get("role") == "assistant") if msgs else None])
    out.write(json.dumps({"rewards": vals}) + "\n")
    out.flush()
