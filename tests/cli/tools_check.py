#!/usr/bin/env python3
"""tools_check.py - the calculator task's multi-turn episodes, read from a dfg run --dump
(standard library only; tools_test.sh's helper).

  tools_check.py episodes DUMP METRICS.jsonl LP ROUNDS
      every row of DUMP (prompt of LP columns, then the completion) is one episode as the
      tools loop must leave it: its completion columns contiguous; each turn the tools answered
      a call '@a*b$' followed by exactly '=' + str(a*b) + '=' ('==' when an operand has more than
      9 digits: the tool's failure), tool_mask 0 exactly there and 1 everywhere else;
      sampling_logps 0 on the tool's tokens and off the completion, < 0 on the policy's;
      completion_mask (TRL's) 1 on the tool's tokens too (the loss mask, completion_mask *
      tool_mask, is 0 there); every turn ends at its first EOS;
      a final turn that is a call was not answered only because its answer did not fit or ROUNDS
      calls were made. The metrics of the dumped step (the last line of METRICS) agree with the
      counts: tools/call_frequency, tools/failure_frequency and the completions/ lengths (policy
      tokens only). Prints the counts; exit 1 on the first row that breaks a rule.
  tools_check.py rollout DUMP OUT as-dumped|trl|ones|none
      a --rollouts file of DUMP's episodes: its tokens, rewards, sampling_logps, completion_mask
      and tool_mask as they are (as-dumped: completion_mask is TRL's, 1 on the tool's tokens
      too); or that completion_mask made again from the episode's columns with the dump's
      tool_mask (trl), tool_mask all 1 (ones), or no tool_mask (none)
  tools_check.py scalar DUMP NAME
      the dumped scalar NAME (loss, grad_norm), to 9 significant digits
  tools_check.py first-turns A B LP
  tools_check.py episodes-equal A B LP   (every turn of every row, the tools' answers included)
      the dumps A and B sampled the same first turn in every row (up to its EOS)
  tools_check.py break DUMP OUT answer|tool_mask|logp
      DUMP with one rule broken at its first tool token (a wrong digit in the tool's answer; a
      tool token with tool_mask 1; a tool token with a sampling log-prob): what `episodes` must
      refuse
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_tool  # noqa: E402

VOCAB = "_$0123456789+-=*@"  # the calculator's ids: pad 0, EOS 1, digits 2..11, '=' 14, '*' 15, '@' 16
EOS, MAX_OPERAND = 1, 9


def load(path):
    tensors, _ = st_tool.read(path)
    out = {}
    for name in ("tokens", "completion_mask", "tool_mask", "sampling_logps", "rewards"):
        dtype, shape, raw = tensors[name]
        flat = st_tool.values(tensors[name])
        out[name] = [flat[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])] if len(shape) == 2 else flat
    return out


def text(ids):
    return "".join(VOCAB[i] if 0 <= i < len(VOCAB) else "?" for i in ids)


def parse_call(turn):
    """(a, b) digit strings when turn (its EOS cut off) is '@a*b', else None."""
    s = text(turn)
    if len(s) < 4 or s[0] != "@" or s.count("*") != 1:
        return None
    a, b = s[1:].split("*")
    return (a, b) if a.isdigit() and b.isdigit() and a and b else None


def tool_answer(call):
    a, b = call
    if len(a) > MAX_OPERAND or len(b) > MAX_OPERAND:
        return "==", True
    return "=" + str(int(a) * int(b)) + "=", False


class Broken(Exception):
    pass


def episode(r, row, lp, rounds):
    """Checks row r; returns (calls, failures, policy tokens, truncated)."""
    tok, cm, tm, sl = row
    T = len(tok)

    def need(cond, what):
        if not cond:
            raise Broken("row %d %r (completion_mask %s, tool_mask %s): %s" % (
                r, text(tok), "".join("%g" % x for x in cm), "".join("%g" % x for x in tm), what))

    need(all(x in (0.0, 1.0) for x in cm + tm), "masks hold values other than 0 and 1")
    need(all(cm[c] == 0 and tm[c] == 1 and sl[c] == 0 for c in range(lp)), "the prompt columns are not prompt")
    need(all(cm[c] == 1 for c in range(T) if tm[c] == 0), "completion_mask is 0 on a tool token (TRL's covers them)")
    full = [cm[c] == 1 for c in range(T)]
    end = lp
    while end < T and full[end]:
        end += 1
    need(end > lp, "an empty completion")
    need(not any(full[end:]), "the completion's columns are not contiguous")
    need(all(tm[c] == 1 and sl[c] == 0 for c in range(end, T)), "tool_mask or sampling_logps set past the completion")
    for c in range(lp, end):
        need(sl[c] == 0 if tm[c] == 0 else sl[c] < 0, "column %d: sampling_logp %r with tool_mask %g" % (c, sl[c], tm[c]))
    # the completion as turns: policy segments (tool_mask 1) and the tools' answers (0)
    segs, c = [], lp
    while c < end:
        k = c
        while k < end and tm[k] == tm[c]:
            k += 1
        segs.append((tm[c] == 1, c, k))
        c = k
    need(segs[0][0], "the completion starts with tool tokens")
    need(sum(1 for s in segs if not s[0]) <= rounds, "more tool answers than max_tool_calling_iterations=%d" % rounds)
    calls = failures = left = 0
    for i, (policy, a, b) in enumerate(segs):
        if not policy:
            continue
        turn = tok[a:b]
        eos = [j for j, t in enumerate(turn) if t == EOS]
        answered = i + 1 < len(segs)
        if answered or eos:
            need(eos == [len(turn) - 1], "turn %r does not end at its first EOS" % text(turn))
        else:
            need(b == T, "turn %r ends without EOS before the last column" % text(turn))
        call = parse_call(turn[:-1]) if eos else None
        if answered:
            need(call is not None, "the tools answered %r, which is no call" % text(turn))
            want, failed = tool_answer(call)
            got = text(tok[segs[i + 1][1]:segs[i + 1][2]])
            need(got == want, "the tool answered %r to %r, not %r" % (got, text(turn), want))
            calls, failures = calls + 1, failures + failed
        elif call is not None and calls < rounds:  # a last call the tools left: only when its answer did not fit
            want, failed = tool_answer(call)
            need(len(want) > T - b, "the call %r (answer %r, %d columns left) was not answered" % (text(turn), want, T - b))
            calls, failures = calls + 1, failures + failed
        elif call is not None:
            left += 1
    policy_tokens = int(sum(cm[c] * tm[c] for c in range(lp, end)))  # the loss mask's
    need(policy_tokens == sum(1 for c in range(lp, end) if tm[c] == 1), "the loss mask misses policy tokens")
    return calls, failures, left, policy_tokens, end == T and tok[T - 1] != EOS


def close(a, b):
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))


def episodes(dump, metrics, lp, rounds):
    d = load(dump)
    rows = list(zip(d["tokens"], d["completion_mask"], d["tool_mask"], d["sampling_logps"]))
    calls = failures = left = 0
    lengths, truncated, answered = [], [], 0
    try:
        for r, row in enumerate(rows):
            c, f, u, n, t = episode(r, row, lp, rounds)
            calls, failures, left = calls + c, failures + f, left + u
            answered += sum(1 for x in row[2] if x == 0)
            lengths.append(n)
            truncated.append(t)
    except Broken as e:
        print("broken episode: %s" % e)
        return 1
    m = json.loads(open(metrics).read().splitlines()[-1])
    term = [n for n, t in zip(lengths, truncated) if not t] or [0]
    want = {"tools/call_frequency": calls / len(rows), "tools/failure_frequency": failures / max(calls, 1),
            "completions/mean_length": sum(lengths) / len(rows), "completions/min_length": min(lengths),
            "completions/max_length": max(lengths), "completions/clipped_ratio": sum(truncated) / len(rows),
            "completions/mean_terminated_length": sum(term) / len(term),
            "completions/min_terminated_length": min(term), "completions/max_terminated_length": max(term)}
    bad = ["%s %r, the episodes say %r" % (k, m.get(k), v) for k, v in want.items() if k not in m or not close(m[k], v)]
    if bad:
        print("step %s's metrics disagree with its episodes: %s" % (m.get("step"), "; ".join(bad)))
        return 1
    print("%d episodes, %d calls (%d failed), %d calls left unanswered past the rounds allowed, %d tool tokens, "
          "policy tokens %d..%d (mean %.3f); step %s logs tools/call_frequency %g and completions/mean_length %g, "
          "as counted" % (len(rows), calls, failures, left, answered, min(lengths), max(lengths),
                          sum(lengths) / len(rows), m["step"], m["tools/call_frequency"], m["completions/mean_length"]))
    if rounds > 0 and calls == 0:
        print("no tool call in the batch: nothing was checked about the tools")
        return 1
    if rounds == 0 and left == 0:
        print("no row called a tool: max_tool_calling_iterations=0 was not put to the test")
        return 1
    return 0


def rollout(dump, out, mode):
    tensors, _ = st_tool.read(dump)
    d = load(dump)
    n, T = len(d["tokens"]), len(d["tokens"][0])
    outp = {k: tensors[k] for k in ("tokens", "completion_mask", "rewards", "sampling_logps", "tool_mask")}
    if mode != "as-dumped":  # TRL's completion_mask made again: 1 on every column of the episode
        full = [1.0 if (cm == 1 or tm == 0) else 0.0
                for a, b in zip(d["completion_mask"], d["tool_mask"]) for cm, tm in zip(a, b)]
        outp["completion_mask"] = ("F32", (n, T), struct.pack("<%df" % (n * T), *full))
    if mode == "ones":
        outp["tool_mask"] = ("F32", (n, T), struct.pack("<%df" % (n * T), *[1.0] * (n * T)))
    elif mode == "none":
        del outp["tool_mask"]
    st_tool.write(out, outp, {"format": "pt"})
    zeros = sum(1 for row in d["tool_mask"] for x in row if x == 0)
    print("wrote %s: %d rows of %d columns (%s; the dump's tool_mask has %d zeros)" % (out, n, T, mode, zeros))
    return 0


def first_turns(a, b, lp, whole=False):
    """The rows of dumps a and b sample the same first turn (up to its EOS, or the whole row), or
    with whole the same episode, every turn."""
    ta, tb = load(a)["tokens"], load(b)["tokens"]

    def first(row):
        turn = row[lp:]
        return turn[:turn.index(EOS) + 1] if EOS in turn else turn
    differ = [r for r, (x, y) in enumerate(zip(ta, tb)) if (x != y if whole else first(x) != first(y))]
    for r in differ[:4]:
        print("row %d: %r vs %r" % (r, text(ta[r]), text(tb[r])))
    print("%d of %d rows sample the same first turn; %d the same whole episode" % (
        len(ta) - len(differ), len(ta), sum(1 for x, y in zip(ta, tb) if x == y)))
    return 1 if differ or len(ta) != len(tb) else 0


def break_rule(dump, out, rule):
    tensors, _ = st_tool.read(dump)
    d = load(dump)
    T = len(d["tokens"][0])
    at = next(r * T + c for r, row in enumerate(d["tool_mask"]) for c, x in enumerate(row) if x == 0)
    name = {"answer": "tokens", "tool_mask": "tool_mask", "logp": "sampling_logps"}[rule]
    dtype, shape, raw = tensors[name]
    flat = st_tool.values(tensors[name])
    if rule == "answer":  # the '=' that opens the answer becomes a digit
        flat[at] = 2
    else:
        flat[at] = 1.0 if rule == "tool_mask" else -0.5
    tensors[name] = (dtype, shape, struct.pack("<%d%s" % (len(flat), "i" if dtype == "I32" else "f"), *flat))
    st_tool.write(out, tensors, {"format": "pt"})
    return 0


def main(argv):
    if len(argv) == 5 and argv[0] == "episodes":
        return episodes(argv[1], argv[2], int(argv[3]), int(argv[4]))
    if len(argv) == 4 and argv[0] == "rollout" and argv[3] in ("as-dumped", "trl", "ones", "none"):
        return rollout(argv[1], argv[2], argv[3])
    if len(argv) == 3 and argv[0] == "scalar":  # a dumped scalar, every digit of its float32
        print("%.9g" % st_tool.values(st_tool.read(argv[1])[0][argv[2]])[0])
        return 0
    if len(argv) == 4 and argv[0] in ("first-turns", "episodes-equal"):
        return first_turns(argv[1], argv[2], int(argv[3]), argv[0] == "episodes-equal")
    if len(argv) == 4 and argv[0] == "break" and argv[3] in ("answer", "tool_mask", "logp"):
        return break_rule(argv[1], argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
