#!/usr/bin/env python3
"""toy_reward.py - a reward program for tests (docs/rewards.md), standard library only.

    toy_reward.py [MODE [STEP [TAG]]]

Declares two functions: "digits" (the share of the completion's ids that are digits 2..11 of the
digit vocabulary) and "short" (1 for a completion of at most 4 tokens, else null: TRL's None).
From step STEP on (default 3) it misbehaves as MODE says:
  ok       never (the default)
  die      exits with status 3 before answering
  hang     sleeps for an hour instead of answering
  garbage  answers a line that is not JSON
  short    answers one row too few
  string   answers "abc" as row 1's first value
  error    answers {"error": ...}
  sigkill  kills itself with SIGKILL
  none     "short" answers null for every row (the function applies to none of them)
  allnone  both functions answer null for every row (no function applies to any row)
  nan      answers a raw NaN (Python's json.dumps default), which is not JSON
  kill-dfg  kills the dfg process that started it with SIGKILL (a data-parallel rank that dies)
  stop-dfg  stops the dfg process that started it with SIGSTOP (a rank that hangs), then answers
  gate     creates the file $TOY_REWARD_GATE.waiting, then holds its answer until the file
           $TOY_REWARD_GATE exists (at most 120 s; it gives up at once when dfg is gone): a step
           that a test holds open for as long as it needs
The data-parallel modes act only in the rank $TOY_REWARD_RANK (default 1) of an mpirun run
($OMPI_COMM_WORLD_RANK), from step STEP on.
TAG is ignored: a test puts its own in the command line, to find its programs with pgrep.
Each request is also appended to $TOY_REWARD_LOG when set (one line: step and row count)."""
import json
import os
import signal
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
bad_step = int(sys.argv[2]) if len(sys.argv) > 2 else 3
log = os.environ.get("TOY_REWARD_LOG")

out = sys.stdout
out.write(json.dumps({"reward_funcs": ["digits", "short"]}) + "\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    step, rows = req["step"], req["rows"]
    if log:
        with open(log, "a") as f:
            f.write("%d %d\n" % (step, len(rows)))
    answer = []
    for r in rows:
        c = r["completion_ids"]
        digits = sum(1 for t in c if 2 <= t <= 11) / max(len(c), 1)
        answer.append([digits, 1.0 if len(c) <= 4 else None])
    text = json.dumps({"rewards": answer})
    rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    if step >= bad_step and mode in ("kill-dfg", "stop-dfg") and rank == os.environ.get("TOY_REWARD_RANK", "1"):
        dfg = os.getppid()  # dfg, or the /bin/sh -c that dfg started when it did not exec the command
        with open("/proc/%d/comm" % dfg) as f:
            if f.read().strip() in ("sh", "dash", "bash"):
                with open("/proc/%d/stat" % dfg) as st:
                    dfg = int(st.read().rsplit(")", 1)[1].split()[1])
        os.kill(dfg, signal.SIGKILL if mode == "kill-dfg" else signal.SIGSTOP)
    if step >= bad_step and mode == "gate":
        gate, parent = os.environ["TOY_REWARD_GATE"], os.getppid()
        open(gate + ".waiting", "w").close()
        for _ in range(1200):
            if os.path.exists(gate) or os.getppid() != parent:
                break
            time.sleep(0.1)
    if step >= bad_step:
        if mode == "die":
            sys.exit(3)
        if mode == "hang":
            time.sleep(3600)
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "garbage":
            text = "rewards: lots"
        if mode == "short":
            text = json.dumps({"rewards": answer[:-1]})
        if mode == "string":
            answer[1][0] = "abc"
            text = json.dumps({"rewards": answer})
        if mode == "error":
            text = json.dumps({"error": "the grader is down"})
        if mode in ("none", "allnone"):
            text = json.dumps({"rewards": [[None if mode == "allnone" else a[0], None] for a in answer]})
        if mode == "nan":
            answer[1][0] = float("nan")
            text = json.dumps({"rewards": answer})
    out.write(text + "\n")
    out.flush()
