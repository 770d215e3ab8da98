#!/usr/bin/env python3
"""make_dataset.py - the built-in digit tasks as a dfg prompt dataset (JSONL, docs/rewards.md).

Writes one problem per line:

    {"prompt_ids": [5, 3, 6, 3, 7, 14], "prompt": "31415=", "answer": "51413"}

The tasks are examples/tasks/tasks.c's (dfg_tasks.h), on the 15-token vocabulary
"_$0123456789+-=" (id = index: 0 PAD, 1 EOS, digits 2..11, '+' 12, '-' 13, '=' 14):

    task     --digits  prompt       answer
    copy     1..64     "31415="     "31415"
    reverse  1..64     "31415="     "51413"
    sort     1..64     "31415="     "11345"  (ascending)
    add      1..18     "042+317="   "359"    (no leading zeros, "0" for zero)
    sub      1..18     "042-317="   "-275"   ('-' when negative)

Operands are uniform digit strings drawn exactly as dfg_task_sample draws them: each digit is
splitmix64 (dfg_host_rand) % 10 from a state that starts at --seed, so row i is the i-th problem
dfg_task_sample(task, &state) writes with state = seed. "answer" is the text that
examples/rewards/reverse_reward.py (and the built-in rewards) score against; the answer string
has no EOS (the model must add one).

Usage:
    python3 examples/tasks/digits/make_dataset.py [--task reverse] [--digits 3] [--rows 1000]
                                                  [--seed 1] [-o OUT.jsonl]   (default: stdout)
"""
import argparse
import json
import sys

VOCAB = "_$0123456789+-="
MASK64 = (1 << 64) - 1
MAX_DIGITS = {"copy": 64, "reverse": 64, "sort": 64, "add": 18, "sub": 18}


class SplitMix64:
    """dfg_host_rand (runtime/dfg_runtime.h) on a state of its own."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def sample(task, digits, rng):
    """(prompt, answer) texts of one problem, drawn as dfg_task_sample draws it."""
    a = [rng.next() % 10 for _ in range(digits)]
    sa = "".join(map(str, a))
    if task in ("add", "sub"):
        b = [rng.next() % 10 for _ in range(digits)]
        sb = "".join(map(str, b))
        va, vb = int(sa), int(sb)
        answer = str(va + vb) if task == "add" else str(va - vb)  # no leading zeros; '-' when negative
        return f"{sa}{'+' if task == 'add' else '-'}{sb}=", answer
    if task == "copy":
        answer = sa
    elif task == "reverse":
        answer = sa[::-1]
    else:
        answer = "".join(sorted(sa))
    return sa + "=", answer


def encode(text):
    """The token ids of a text of the vocabulary."""
    return [VOCAB.index(c) for c in text]


def main(argv=None):
    ap = argparse.ArgumentParser(description="the built-in digit tasks as a dfg prompt dataset")
    ap.add_argument("--task", default="reverse", choices=sorted(MAX_DIGITS))
    ap.add_argument("--digits", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args(argv)
    if not 1 <= a.digits <= MAX_DIGITS[a.task]:
        ap.error(f"task '{a.task}': --digits must be in 1 .. {MAX_DIGITS[a.task]}, got {a.digits}")
    if a.rows < 1:
        ap.error(f"--rows must be at least 1, got {a.rows}")
    rng = SplitMix64(a.seed)
    lines = []
    for _ in range(a.rows):
        prompt, answer = sample(a.task, a.digits, rng)
        lines.append(json.dumps({"prompt_ids": encode(prompt), "prompt": prompt, "answer": answer}))
    text = "\n".join(lines) + "\n"
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"make_dataset: {a.output}: {a.rows} {a.task} problems, {a.digits} digits, seed {a.seed}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
