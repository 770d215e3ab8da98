#!/usr/bin/env python3
"""sleep_reward.py - a reward program (docs/rewards.md) that takes SECONDS to answer each request, as
an LLM judge or a code sandbox does: the reward program of async_rollouts.py's measurement.

    sleep_reward.py [SECONDS]      (default 0.5)

One function, "reward": the share of a completion's ids that are digits (ids 2..11 of the built-in
tasks' vocabulary). Standard library only."""
import json
import sys
import time

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
out = sys.stdout
out.write(json.dumps({"reward_funcs": ["reward"]}) + "\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    time.sleep(delay)
    rewards = []
    for row in req["rows"]:
        ids = row["completion_ids"]
        rewards.append(sum(1 for i in ids if 2 <= i <= 11) / len(ids) if ids else 0.0)
    out.write(json.dumps({"rewards": rewards}) + "\n")
    out.flush()
