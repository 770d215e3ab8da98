"""reverse_reward.py - the digit tasks' "mixed" reward as TRL-style reward functions.

dfg's built-in reward=mixed (examples/tasks/dfg_tasks.h) is 0.6 exact + 0.3 partial + 0.1 format.
These are its three parts, for tools/reward_server.py (or a TRL GRPOTrainer):

    reward_exact    1 when the tokens before the first EOS equal the answer and an EOS is present
    reward_partial  #{i : s[i] == target[i]} / max(len(s), L + 1), where target is the answer then
                    EOS (L + 1 tokens) and s the completion up to and including its first EOS (all
                    of it when there is none)
    reward_format   1 when an EOS is present and the tokens before it are an optional '-' then one
                    or more digits

With reward_weights 0.6, 0.3, 0.1 their weighted sum is dfg_reward_mixed exactly, in exact
arithmetic, for every task (the exact answer of each task is a well-formed number, so exact = 1
brings partial = format = 1). The answer comes from the dataset field `answer`, a string such as
"51413" (examples/tasks/digits/make_dataset.py writes it); a row whose answer is None scores None
("does not apply").

The decoded text is not enough: decoding with skip_special_tokens drops EOS (and PAD), so the
functions read the tokens of `completion_ids` (the digit vocabulary "_$0123456789+-=", id = index)
when they are given, as reward_server.py gives them. Without them (a plain TRL trainer) they read
the text, and a completion has its EOS unless `truncated` says it was cut.

    python3 examples/tasks/digits/make_dataset.py --task reverse --rows 10000 -o reverse.jsonl
    dfg compile examples/grpo/grpo.c --set dataset=reverse.jsonl -o reverse.dfg \\
        --set reward_funcs=reward_exact,reward_partial,reward_format --set reward_weights=0.6,0.3,0.1
    dfg run reverse.dfg --reward-cmd "python3 tools/reward_server.py \\
        --tokenizer examples/tasks/digits/tokenizer.json --module examples/rewards/reverse_reward.py"

reward_server.py takes REWARD_FUNCS below as its functions, in this order (its hello line:
{"reward_funcs": ["reward_exact", "reward_partial", "reward_format"]}); the plan's reward_funcs
must be the same names in the same order. Adding --list to the reward_server.py command prints
that --set line and the --reward-cmd to run with (the same Python, absolute paths).
"""

VOCAB = "_$0123456789+-="  # examples/tasks/tasks.c: index = token id
EOS = 1
MINUS = 13
DIGITS = range(2, 12)

REWARD_FUNCS = ["reward_exact", "reward_partial", "reward_format"]


def _ids(text, what):
    """The token ids of a text in the digit vocabulary (-1 for a character outside it)."""
    if not isinstance(text, str):
        raise TypeError(f"{what} is {type(text).__name__}, not a string")
    return [VOCAB.find(c) for c in text]


def _parts(completions, completion_ids, truncated):
    """For each row: (the ids before the first EOS, whether an EOS is present)."""
    out = []
    for i, text in enumerate(completions):
        ids = completion_ids[i] if completion_ids is not None else None
        if ids is not None:
            ids = list(ids)
            if EOS in ids:
                k = ids.index(EOS)
                out.append((ids[:k], True))
            else:
                out.append((ids, False))
        else:
            cut = bool(truncated[i]) if truncated is not None else False
            out.append((_ids(text, f"completions[{i}]"), not cut))
    return out


def _answers(answer, n):
    if answer is None:
        raise ValueError("no dataset field 'answer' (the expected answer as a string, e.g. \"51413\")")
    if len(answer) != n:
        raise ValueError(f"{len(answer)} answers for {n} completions")
    return [None if a is None else _ids(str(a), f"answer[{i}]") for i, a in enumerate(answer)]


def exact(part, has_eos, target):
    """dfg_reward_exact on token ids."""
    return 1.0 if has_eos and part == target else 0.0


def partial(part, has_eos, target):
    """dfg_reward_partial on token ids (a Python float: hits / denominator, correctly rounded)."""
    s = part + [EOS] if has_eos else part
    goal = target + [EOS]
    hits = sum(1 for a, b in zip(s, goal) if a == b)
    return hits / max(len(s), len(goal))


def well_formed(part, has_eos):
    """dfg_reward_format on token ids."""
    first = 1 if part and part[0] == MINUS else 0
    if not has_eos or len(part) - first < 1:
        return 0.0
    return 1.0 if all(t in DIGITS for t in part[first:]) else 0.0


def reward_exact(prompts, completions, completion_ids=None, truncated=None, answer=None, **kwargs):
    """1.0 for exactly the answer then EOS, else 0.0."""
    targets = _answers(answer, len(completions))
    return [None if t is None else exact(p, e, t)
            for (p, e), t in zip(_parts(completions, completion_ids, truncated), targets)]


def reward_partial(prompts, completions, completion_ids=None, truncated=None, answer=None, **kwargs):
    """Per-position credit against the answer then EOS."""
    targets = _answers(answer, len(completions))
    return [None if t is None else partial(p, e, t)
            for (p, e), t in zip(_parts(completions, completion_ids, truncated), targets)]


def reward_format(prompts, completions, completion_ids=None, truncated=None, answer=None, **kwargs):
    """1.0 for a well-formed number then EOS (the answer is not read, except None: not applicable)."""
    n = len(completions)
    targets = _answers(answer, n) if answer is not None else [()] * n
    return [None if t is None else well_formed(p, e)
            for (p, e), t in zip(_parts(completions, completion_ids, truncated), targets)]
