#!/usr/bin/env python3
"""reward_server.py - TRL-style reward functions behind dfg's reward program protocol.

    python3 tools/reward_server.py --tokenizer T --module my_rewards.py --list
        prints the two settings to use, for example:
    --set reward_funcs=reward_correct,reward_format
    --reward-cmd '/usr/bin/python3 /abs/tools/reward_server.py --tokenizer /abs/T --module /abs/my_rewards.py'

    dfg compile examples/grpo/grpo.c ... --set reward_funcs=reward_correct,reward_format -o P.dfg
    dfg run P.dfg --reward-cmd '<the --reward-cmd line's value>'

The protocol is docs/rewards.md ("Reward programs"): JSON lines, the hello
{"reward_funcs": [names]} first, then for each request {"step": S, "rows": [...]} one answer
{"rewards": [[r_f1, r_f2, ...], ...]} (one array per row, in order) or {"error": "why"}.

Usage:
    python3 tools/reward_server.py --tokenizer PATH/tokenizer.json --module my_rewards.py [--funcs f1,f2] [--list]

--module is a Python file (its directory goes first on sys.path, so it may import its
neighbours) or an importable module name. The reward functions, in this order:
  --funcs f1,f2         the module's functions of these names;
  else REWARD_FUNCS     a module-level list of names (or the functions themselves);
  else                  every function of the module (not imported into it) whose name starts
                        with "reward_", in the order the module defines them.
Their names (__name__, or the string given) are the hello's names: the plan must be compiled
with --set reward_funcs=<the same names, in the same order>, or dfg run stops at the hello.
--list prints that setting and the --reward-cmd to run with (the Python running this script,
sys.executable, and absolute paths; --tokenizer is then optional and only the first line is
printed without it), and exits without serving. Serving, the server first writes one line to
stderr naming its Python (sys.executable and version) and the functions it declares.

Each function is called as TRL calls one, on text decoded with the tokenizer
(skip_special_tokens=True), every argument a list over the request's rows:

    f(prompts=[...], completions=[...], completion_ids=[...], prompt_ids=[...], truncated=[...],
      step=S, **fields)

where each field name of the rows' "fields" becomes a keyword whose list holds each row's value
(None for a row without it); a field named like one of the other arguments is ignored, with a
warning on stderr. So a function should accept **kwargs. It returns a list (or a tuple, a numpy
array, a tensor) of one number per row: None or NaN means "does not apply" (null), any other
value must be a finite number.

Conversational rows (TRL's conversational format): a row whose field "prompt" is a list of
messages (a non-empty list of objects, each with a text "role"; tools/prepare_prompts.py writes
it so for a conversation it rendered with the chat template) gets, as TRL gives it, that message
list as its prompts[i] and [{"role": "assistant", "content": TEXT}] as its completions[i], TEXT
the decoded completion. Every other row gets the decoded texts, as before. The field "prompt" is
also a keyword, as every field. A row of an episode with tools (dfg run --env-cmd; docs/agents.md)
carries its conversation as "messages", and its completions[i] is that list, as TRL gives it:
the assistant's messages (with "tool_calls" where it called), the tool messages, ..., the final
assistant message.

A function that raises, or returns the wrong number of values or a value that is not a finite
number or None, answers {"error": "f: ExceptionType: message"} (the traceback goes to stderr) and
the server reads on; so does a malformed request. It exits 0 at the end of its input. Standard
output carries the protocol and nothing else: from the start, Python's sys.stdout and file
descriptor 1 (what C code and child processes write to) are both stderr, and the protocol goes to
a private copy of the original descriptor; a print() in a reward function lands on stderr.

`tokenizers` is taken from $DFG_HF_SITE, else .deps/hf-4.40.2 of this checkout (tools/deps.sh
--test installs it there), else the normal import path.
"""
import argparse
import importlib
import importlib.util
import inspect
import json
import math
import numbers
import os
import platform
import shlex
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from prepare_prompts import import_tokenizers  # noqa: E402  (one place knows where tokenizers lives)

PROG = "reward_server"
MAX_FUNCS = 16  # docs/rewards.md: 1 to 16 names
RESERVED = ("prompts", "completions", "completion_ids", "prompt_ids", "truncated", "step")


class BadRequest(Exception):
    """A request this server cannot answer: its message is the error line's."""


def protect_stdout():
    """Points fd 1 and sys.stdout at stderr; returns a text stream on the original stdout."""
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", encoding="utf-8", newline="\n")


def is_path(spec):
    """Whether --module names a file (else an importable module name)."""
    return spec.endswith(".py") or os.path.sep in spec or os.path.exists(spec)


def load_module(spec):
    """The module of a file path or an importable name."""
    if is_path(spec):
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise ImportError(f"{spec}: no such file")
        name = os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))
        s = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(s)
        sys.modules[name] = mod
        s.loader.exec_module(mod)
        return mod
    return importlib.import_module(spec)


def select_funcs(mod, funcs):
    """[(name, function)] chosen as the module docstring says."""
    if funcs:
        items = [n.strip() for n in funcs.split(",") if n.strip()]
    elif hasattr(mod, "REWARD_FUNCS"):
        items = list(mod.REWARD_FUNCS)
    else:
        items = [n for n, f in vars(mod).items()
                 if n.startswith("reward_") and inspect.isfunction(f) and f.__module__ == mod.__name__]
    out = []
    for it in items:
        if isinstance(it, str):
            f = getattr(mod, it, None)
            if not callable(f):
                raise ValueError(f"the module has no function {it!r}")
            out.append((it, f))
        elif callable(it) and isinstance(getattr(it, "__name__", None), str):
            out.append((it.__name__, it))
        else:
            raise ValueError(f"REWARD_FUNCS holds {it!r}, neither a name nor a named function")
    if not 1 <= len(out) <= MAX_FUNCS:
        raise ValueError(f"{len(out)} reward functions (give 1 to {MAX_FUNCS}: --funcs, REWARD_FUNCS or "
                         "functions named reward_*)")
    names = [n for n, _ in out]
    for n in names:
        if names.count(n) > 1 or not n or any(c in n for c in ", \t\"\\"):
            raise ValueError(f"reward function name {n!r} is repeated or not a plain name")
    return out


def id_list(v, what):
    """A list of ints, else BadRequest."""
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise BadRequest(f"{what} is not a list of integers")
    return v


def parse_request(line):
    """(step, rows) of a request line."""
    try:
        req = json.loads(line)
    except ValueError as e:
        raise BadRequest(f"malformed request: {e}")
    if not isinstance(req, dict) or not isinstance(req.get("rows"), list):
        raise BadRequest("malformed request: not an object with a \"rows\" array")
    step = req.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise BadRequest("malformed request: \"step\" is not an integer")
    rows = req["rows"]
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise BadRequest(f"malformed request: rows[{i}] is not an object")
        id_list(r.get("prompt_ids"), f"rows[{i}].prompt_ids")
        id_list(r.get("completion_ids"), f"rows[{i}].completion_ids")
        if not isinstance(r.get("truncated", False), bool):
            raise BadRequest(f"rows[{i}].truncated is not true or false")
        if not isinstance(r.get("fields", {}), dict):
            raise BadRequest(f"rows[{i}].fields is not an object")
        if not isinstance(r.get("messages", []), list):
            raise BadRequest(f"rows[{i}].messages is not an array")
    return step, rows


def check_values(name, out, n):
    """The function's result as a list of n floats or None; else BadRequest."""
    if hasattr(out, "tolist") and not isinstance(out, (list, tuple)):
        out = out.tolist()  # numpy array, torch tensor
    if not isinstance(out, (list, tuple)):
        raise BadRequest(f"{name}: returned {type(out).__name__}, not a list")
    if len(out) != n:
        raise BadRequest(f"{name}: returned {len(out)} values for {n} rows")
    vals = []
    for i, v in enumerate(out):
        if v is not None and not isinstance(v, numbers.Real) and hasattr(v, "item"):
            v = v.item()  # numpy scalar, 0-d tensor
        if v is None:
            vals.append(None)
            continue
        if not isinstance(v, numbers.Real):
            raise BadRequest(f"{name}: row {i}: {type(v).__name__} {str(v)[:40]!r}, not a number or None")
        v = float(v)
        if math.isinf(v):
            raise BadRequest(f"{name}: row {i}: {v}, not finite")
        vals.append(None if math.isnan(v) else v)
    return vals


def conversation(fields):
    """The row's prompt messages when the row is conversational (its field "prompt" is a
    non-empty list of objects with a text "role"), else None."""
    p = fields.get("prompt")
    if isinstance(p, list) and p and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in p):
        return p
    return None


class Server:
    def __init__(self, tok, funcs, log=sys.stderr):
        self.tok, self.funcs, self.log = tok, funcs, log
        self.warned = set()

    def kwargs(self, step, rows):
        """The keyword arguments of one call (see the module docstring)."""
        pids = [r["prompt_ids"] for r in rows]
        cids = [r["completion_ids"] for r in rows]
        prompts = self.tok.decode_batch(pids, skip_special_tokens=True)
        completions = self.tok.decode_batch(cids, skip_special_tokens=True)
        for i, r in enumerate(rows):  # TRL's conversational rows: messages in, messages out
            messages = conversation(r.get("fields", {}))
            if messages is not None:
                prompts[i] = messages
                completions[i] = [{"role": "assistant", "content": completions[i]}]
            if "messages" in r:  # an environment's episode: its whole conversation, as TRL gives it
                completions[i] = r["messages"]
        kw = {
            "prompts": prompts,
            "completions": completions,
            "completion_ids": cids,
            "prompt_ids": pids,
            "truncated": [bool(r.get("truncated", False)) for r in rows],
            "step": step,
        }
        names = []
        for r in rows:
            for k in r.get("fields", {}):
                if k not in names:
                    names.append(k)
        for k in names:
            if k in RESERVED:
                if k not in self.warned:
                    self.warned.add(k)
                    print(f"{PROG}: warning: the dataset field {k!r} is ignored (a reward argument has its name)",
                          file=self.log)
                continue
            kw[k] = [r.get("fields", {}).get(k) for r in rows]
        return kw

    def answer(self, line):
        """The answer (a dict) to one request line."""
        try:
            step, rows = parse_request(line)
            if not rows:
                return {"rewards": []}  # (dfg sends none such) the functions are not called
            kw = self.kwargs(step, rows)
        except BadRequest as e:
            return {"error": str(e)}
        except Exception as e:  # the tokenizer (an id outside its vocabulary)
            return {"error": f"decoding: {type(e).__name__}: {e}"}
        cols = []
        for name, f in self.funcs:
            try:
                out = f(**kw)
            except Exception as e:
                traceback.print_exc(file=self.log)
                return {"error": f"{name}: {type(e).__name__}: {e}"}
            try:
                cols.append(check_values(name, out, len(rows)))
            except BadRequest as e:
                return {"error": str(e)}
        return {"rewards": [list(vals) for vals in zip(*cols)]}


def write(proto, obj):
    """One protocol line, flushed (a value that is not JSON, which only an environment's messages
    can hold, is its str())."""
    if "error" in obj:  # a readable line (json.dumps would keep it one line anyway)
        obj = {"error": " ".join(str(obj["error"]).split("\n"))}
    proto.write(json.dumps(obj, allow_nan=False, ensure_ascii=False, default=str) + "\n")
    proto.flush()


def print_list(proto, setting, names, option, command, tokenizer, prog=PROG):
    """--list: the compile setting (setting=names) and, given a tokenizer, the dfg run option's line
    (option 'command'); 0, the exit status. prog names the server in its note."""
    proto.write(f"--set {setting}={names}\n")
    if tokenizer:
        proto.write(f"{option} {shlex.quote(command)}\n")
    else:
        print(f"{prog}: give --tokenizer to print the {option} line too", file=sys.stderr)
    proto.flush()
    return 0


def serve(proto, hello, answer):
    """Writes the hello, then answers each request line of stdin with answer(line) until its end:
    0, or 1 when dfg has gone (a closed pipe). Also tools/env_server.py's loop."""
    try:
        write(proto, hello)
        stdin = sys.stdin.buffer
        while True:
            raw = stdin.readline()
            if not raw:
                return 0
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                write(proto, {"error": f"malformed request: not UTF-8 ({e})"})
                continue
            if line.strip():
                write(proto, answer(line))
    except BrokenPipeError:  # dfg has gone
        return 1


RULES = """reward functions, in this order (their names are the hello's; compile the plan with
--set reward_funcs=<the same names, in the same order>; --list prints that line):
  --funcs f1,f2       the module's functions of these names
  else REWARD_FUNCS   a module-level list of names (or of the functions themselves)
  else                the module's own functions named reward_*, in the order it defines them
Each is called as TRL calls one: f(prompts, completions, completion_ids, prompt_ids, truncated,
step, **dataset_fields) -> one number per row; None or NaN means "does not apply".
Rows whose field "prompt" is a list of messages are conversational: prompts[i] is that list,
completions[i] is [{"role": "assistant", "content": text}]; a row of an episode with tools gets
its whole conversation as completions[i]. See docs/rewards.md and docs/agents.md."""


def reward_cmd(a):
    """The --reward-cmd that runs this server again: this Python, absolute paths, shell-quoted."""
    parts = [sys.executable or "python3", os.path.abspath(__file__), "--tokenizer", os.path.abspath(a.tokenizer),
             "--module", os.path.abspath(a.module) if is_path(a.module) else a.module]
    if a.funcs:
        parts += ["--funcs", a.funcs]
    return " ".join(shlex.quote(p) for p in parts)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="TRL-style reward functions behind dfg run --reward-cmd",
                                 epilog=RULES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", help="tokenizer.json (or its directory); optional with --list")
    ap.add_argument("--module", required=True, help="a Python file (or module name) with the reward functions")
    ap.add_argument("--funcs", help="comma-separated names of the functions to use, in order")
    ap.add_argument("--list", action="store_true",
                    help="print the --set reward_funcs=... to compile with and the --reward-cmd to run with, "
                         "then exit")
    a = ap.parse_args(argv)
    if not a.tokenizer and not a.list:
        ap.error("the following arguments are required: --tokenizer (optional with --list only)")
    proto = protect_stdout()
    path = a.tokenizer and (os.path.join(a.tokenizer, "tokenizer.json") if os.path.isdir(a.tokenizer) else a.tokenizer)
    tok = None
    if a.list:
        if path and not os.path.isfile(path):
            print(f"{PROG}: {path}: no such file", file=sys.stderr)
            return 1
    else:
        try:
            tok = import_tokenizers().Tokenizer.from_file(path)
        except ImportError as e:
            print(f"{PROG}: cannot import tokenizers ({e}): run tools/deps.sh --test or pip install tokenizers",
                  file=sys.stderr)
            return 1
        except Exception as e:
            print(f"{PROG}: {path}: not a tokenizer.json: {e}", file=sys.stderr)
            return 1
    try:
        funcs = select_funcs(load_module(a.module), a.funcs)
    except Exception as e:
        traceback.print_exc()
        print(f"{PROG}: {a.module}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    names = ",".join(n for n, _ in funcs)
    if a.list:
        return print_list(proto, "reward_funcs", names, "--reward-cmd", reward_cmd(a) if a.tokenizer else "", a.tokenizer)
    print(f"{PROG}: Python {platform.python_version()} ({sys.executable}) serves {names} from "
          f"{os.path.abspath(a.module) if is_path(a.module) else a.module}: "
          f"the plan must be compiled with --set reward_funcs={names}", file=sys.stderr)
    return serve(proto, {"reward_funcs": [n for n, _ in funcs]}, Server(tok, funcs).answer)


if __name__ == "__main__":
    sys.exit(main())
