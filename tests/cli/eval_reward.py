#!/usr/bin/env python3
"""eval_reward.py - a deterministic reward program for eval_test.sh (docs/rewards.md), standard library only.

Declares "digits" (the share of the completion's ids that are digits 2..11; None for a completion
of 5 tokens or more) and "short" (1 for at most 3 tokens, else None), so a completion of 5 tokens
has no value at all (TRL's unscorable row). Every row it scores is appended to $EVAL_REWARD_LOG as
one JSON line {"request": k, "prompt_ids": [...], "completion_ids": [...]}, k counting requests
from 0, for the test to recompute the metrics from the completions."""
import json
import os
import sys


def score(c):
    digits = sum(1 for t in c if 2 <= t <= 11) / max(len(c), 1)
    return [digits if len(c) < 5 else None, 1.0 if len(c) <= 3 else None]


if __name__ == "__main__":
    log = os.environ.get("EVAL_REWARD_LOG")
    sys.stdout.write(json.dumps({"reward_funcs": ["digits", "short"]}) + "\n")
    sys.stdout.flush()
    for k, line in enumerate(sys.stdin):
        rows = json.loads(line)["rows"]
        if log:
            with open(log, "a") as f:
                for r in rows:
                    f.write(json.dumps({"request": k, "prompt_ids": r["prompt_ids"], "completion_ids": r["completion_ids"]}) + "\n")
        sys.stdout.write(json.dumps({"rewards": [score(r["completion_ids"]) for r in rows]}) + "\n")
        sys.stdout.flush()
