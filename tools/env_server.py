#!/usr/bin/env python3
"""env_server.py - TRL-style tools and environments behind dfg's environment program protocol.

    python3 tools/env_server.py --tokenizer T --module my_tools.py --list
        prints the two settings to use, for example:
    --set tools=multiply,add
    --env-cmd '/usr/bin/python3 /abs/tools/env_server.py --tokenizer /abs/T --module /abs/my_tools.py'

    dfg compile examples/grpo/grpo.c ... --set tools=multiply,add -o P.dfg
    dfg run P.dfg --env-cmd '<the --env-cmd line's value>' ...

The protocol is docs/agents.md: JSON lines, the hello {"tools": [names], "reward": name or null}
first, then requests of three types, each answered by one line (or {"error": "why"}):
  reset   {"type": "reset", "step": S, "rows": [{"index", "prompt_ids", "fields"}, ...]}
          -> {"prompts": [null or [ids], ...]}          a new episode for every row of the step
  turns   {"type": "turns", "step": S, "turns": [{"row", "ids", "room", "last"}, ...]}
          -> {"turns": [{"done", "suffix_ids", "calls", "failures"}, ...]}
  finish  {"type": "finish", "step": S, "n": N}
          -> {"messages": [[...], ...], "rewards": [r or null, ...] (an environment's get_reward)}

Usage:
    python3 tools/env_server.py --tokenizer PATH/tokenizer.json --module my_tools.py
        [--env-class Name] [--tool-timeout 60] [--workers 256] [--tool-format auto|qwen|llama3]
        [--chat-template auto|FILE] [--list]

What it hosts, as TRL's GRPOTrainer(tools=..., environment_factory=...) does:
  tools         the module's TOOLS = [f, g] (plain or async functions with type hints and a
                Google-style docstring: each becomes a JSON schema as transformers'
                get_json_schema makes it, and the chat template shows it to the model)
  --env-class   the module's class Name: __init__() without arguments, reset(**row) -> str | None
                (the text joins the last user message of the prompt), every other public method a
                tool, and optionally get_reward() -> float (the episode's reward, one more reward
                function named after the class). One instance per rollout row, pooled: the row's
                instance is reset at the start of each step. The module's TOOLS, if any, come first.

A turn (the ids the policy generated until its EOS) is decoded and parsed for tool calls in the
chat template's format (--tool-format, by default from the template): Qwen2.5/Qwen3's
<tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks, or Llama 3.1/3.2's bare JSON call
{"name": ..., "parameters": {...}}. A turn without a call ends the episode; so does a malformed
call (the turn is plain text, as TRL's parse_response falls back to). The calls of all rows run
at once (async tools on one event loop, plain ones on a thread pool of --workers threads; a row's
plain calls one after another, in order, then its async ones together, as TRL runs them); a tool
that raises, is unknown, or runs past --tool-timeout seconds gives the tool message
{"error": "..."} and counts as a failure. The answer is the token ids that follow the call: TRL's
_get_tool_suffix_ids (the tool messages rendered by the chat template after a dummy call, the next
assistant header included, cut after the EOS that ends the call's turn). A suffix longer than the
row's room drops that tool turn and ends the episode, as TRL does.

Each row's messages (assistant, with tool_calls when it called; tool; ...; the final assistant)
are kept and returned at finish, for the reward functions (TRL's conversational completions).

Standard output carries the protocol only (reward_server.py's discipline: a print() in a tool
lands on stderr). It exits 0 at the end of its input. `tokenizers` and jinja2 are found as
prepare_prompts.py finds them.
"""
import argparse
import asyncio
import concurrent.futures
import inspect
import json
import os
import platform
import re
import shlex
import sys
import traceback
import types
import typing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from prepare_prompts import Chat, Refused, load_tokenizer, read_config, token_text  # noqa: E402
from reward_server import BadRequest, id_list, is_path, load_module, print_list, protect_stdout, serve  # noqa: E402

PROG = "env_server"
MAX_TOOLS = 64  # runtime/host/dfg_env.h's DFG_ENV_MAX_TOOLS


# ---------------------------------------------------------------- JSON schemas of tools
class SchemaError(Exception):
    """A tool transformers' get_json_schema would refuse: its message says why."""


BASIC = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}, bool: {"type": "boolean"},
         typing.Any: {}}


def hint_schema(hint):
    """The JSON schema of a type hint, by get_json_schema's rules."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        return dict(BASIC.get(hint, {"type": "object"}))
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        subs = [hint_schema(t) for t in args if t is not type(None)]
        if len(subs) == 1:
            out = subs[0]
        elif all(isinstance(s.get("type"), str) for s in subs):
            out = {"type": sorted(s["type"] for s in subs)}
        else:
            out = {"anyOf": subs}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is list:
        return {"type": "array", "items": hint_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise SchemaError(f"the type hint {hint} is a tuple of one item or of '...': use list[...]")
        return {"type": "array", "prefixItems": [hint_schema(t) for t in args]}
    if origin is dict:
        return {"type": "object", "additionalProperties": hint_schema(args[1])} if len(args) == 2 else {"type": "object"}
    if origin is typing.Literal:
        return {"type": "string" if all(isinstance(a, str) for a in args) else "number", "enum": list(args)}
    raise SchemaError(f"cannot express the type hint {hint} in JSON schema")


def docstring_parts(doc):
    """(description, {argument: description}, returns) of a Google-style docstring."""
    m = re.search(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", doc, re.DOTALL)
    description = m.group(1).strip() if m else None
    m = re.search(r"\n\s*Args:\n\s*(.*?)[\n\s]*(Returns:|Raises:|\Z)", doc, re.DOTALL)
    args = {}
    if m:
        block = "\n".join(line for line in m.group(1).strip().split("\n") if line.strip())
        for name, text in re.findall(r"(?:^|\n)\s*(\w+):\s*(.*?)\s*(?=\n\s*\w+:|\Z)", block, re.DOTALL):
            args[name] = re.sub(r"\s*\n+\s*", " ", text.strip())
    m = re.search(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", doc, re.DOTALL)
    return description, args, (m.group(1).strip() if m else None)


def json_schema(func):
    """{"type": "function", "function": {name, description, parameters[, return]}}, as
    transformers' get_json_schema makes it from type hints and a Google-style docstring."""
    name = func.__name__
    doc = inspect.getdoc(func)
    if not doc:
        raise SchemaError(f"{name} has no docstring (the model reads its description there)")
    description, arg_docs, returns = docstring_parts(doc.strip())
    hints = typing.get_type_hints(func)
    props, required = {}, []
    for pname, param in inspect.signature(func).parameters.items():
        if param.annotation is inspect.Parameter.empty:
            raise SchemaError(f"{name}: the argument {pname} has no type hint")
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    for pname, hint in hints.items():
        props[pname] = hint_schema(hint)
    ret = props.pop("return", None)
    if ret is not None and returns is not None:
        ret["description"] = returns
    for pname, schema in props.items():
        if pname not in arg_docs:
            raise SchemaError(f"{name}: the docstring's Args: has no description of {pname}")
        desc = arg_docs[pname]
        choices = re.search(r"\(choices:\s*(.*?)\)\s*$", desc, flags=re.IGNORECASE)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            desc = desc[:choices.start()].strip()
        schema["description"] = desc
    params = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    out = {"name": name, "description": description, "parameters": params}
    if ret is not None:
        out["return"] = ret
    return {"type": "function", "function": out}


# ---------------------------------------------------------------- what the module offers
class Hosted:
    """The module's tools and environment class: names, schemas, and a fresh instance per row."""

    def __init__(self, mod, env_class=None):
        self.standalone = list(getattr(mod, "TOOLS", []) or [])
        for f in self.standalone:
            if not callable(f) or not isinstance(getattr(f, "__name__", None), str):
                raise ValueError(f"TOOLS holds {f!r}, not a named function")
        self.cls = None
        self.reward = None  # the class's name when it has get_reward
        methods = []
        if env_class:
            self.cls = getattr(mod, env_class, None)
            if not inspect.isclass(self.cls):
                raise ValueError(f"the module has no class {env_class!r}")
            probe = self.cls()
            names = [n for n, _ in inspect.getmembers(probe, predicate=inspect.ismethod)]
            if "reset" not in names:
                raise ValueError(f"{env_class} has no method reset (TRL's environments define reset(**row))")
            if "get_reward" in names:
                self.reward = self.cls.__name__
            methods = [m for n, m in inspect.getmembers(probe, predicate=inspect.ismethod)
                       if n not in ("reset", "get_reward") and not n.startswith("_")]
        elif not self.standalone:
            raise ValueError("the module has no TOOLS = [f, g] (or give --env-class Name)")
        self.method_names = [m.__name__ for m in methods]
        self.names = [f.__name__ for f in self.standalone] + self.method_names
        if not 1 <= len(self.names) <= MAX_TOOLS:
            raise ValueError(f"{len(self.names)} tools (1 to {MAX_TOOLS})")
        for n in self.names:
            if self.names.count(n) > 1 or any(c in n for c in ", \t\"\\"):
                raise ValueError(f"tool name {n!r} is repeated or not a plain name")
        self.schemas = [json_schema(f) for f in self.standalone + methods]

    def tools_of(self, env):
        """{name: callable} of one row: the standalone tools and its instance's methods."""
        out = {f.__name__: f for f in self.standalone}
        for n in self.method_names:
            out[n] = getattr(env, n)
        return out


def load_hosted(module, env_class):
    """Hosted of a --module (a file or a module name) and --env-class."""
    return Hosted(load_module(module), env_class)


# ---------------------------------------------------------------- tool calls in a turn's text
QWEN_RE = re.compile(r"^(?:<think>\n?(?:(?P<reasoning_content>.*?\S.*?)\n?|[\s]*)</think>\s*)?"
                     r"(?P<content>(?:(?!<tool_call>)[\s\S])*?)(?:\n(?=<tool_call>))?(?=(?:<tool_call>|<\|im_end\|>|$))"
                     r"(?P<tool_calls>(?:<tool_call>(?:(?!</tool_call>)[\s\S])+</tool_call>\s*)+)?\s*(?:<\|im_end\|>|$)",
                     re.DOTALL)
QWEN_CALL = re.compile(r"<tool_call>\s*(.+?)\s*</tool_call>", re.DOTALL)
LLAMA_RE = re.compile(r'^(?:(?P<tool_calls>\{"name":\s*".+?",\s*"parameters":\s*.+\})|(?P<content>.*?))(?:<\|eot_id\|>|$)',
                      re.DOTALL)
LLAMA_CALL = re.compile(r'(\{"name":\s*".+?",\s*"parameters":\s*.+\})', re.DOTALL)


def parse_turn(text, fmt):
    """The assistant message of a turn's text (special tokens kept), TRL's parse_response with the
    response schemas of trl/chat_template_utils.py (qwen3_schema, llama3_schema). Raises
    ValueError when the text is not a well-formed response (the caller falls back to plain text)."""
    m = (QWEN_RE if fmt == "qwen" else LLAMA_RE).search(text)
    if not m:
        raise ValueError("the turn does not match the response format")
    msg = {"role": "assistant"}
    for k in ("reasoning_content", "content"):
        if k in m.groupdict() and m.group(k) is not None:
            msg[k] = m.group(k)
    block = m.group("tool_calls")
    if block is not None:
        calls = []
        for raw in (QWEN_CALL if fmt == "qwen" else LLAMA_CALL).findall(block):
            if fmt != "qwen":
                raw = re.sub(r'^(\{"name":\s*"[^"]+",\s*)"parameters":', r'\1"arguments":', raw)
            calls.append({"type": "function", "function": json.loads(raw)})  # ValueError when malformed
        msg["tool_calls"] = calls
    for i, c in enumerate(msg.get("tool_calls", [])):  # TRL's _validate_tool_calls
        f = c["function"]
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise ValueError(f"tool_calls[{i}] has no function name")
        if f.get("arguments") is None:
            f["arguments"] = {}
    return msg


def guess_format(template_text):
    """qwen (<tool_call> blocks) or llama3 (a bare JSON call), from the chat template's text."""
    if "<tool_call>" in template_text:
        return "qwen"
    if '"parameters"' in template_text or "ipython" in template_text:
        return "llama3"
    raise Refused("cannot tell the tool-call format from the chat template: give --tool-format qwen or llama3")


# ---------------------------------------------------------------- the server
class Server:
    def __init__(self, tok, tok_path, hosted, chat, fmt, tool_timeout=60.0, workers=256, log=sys.stderr):
        self.tok, self.hosted, self.chat, self.fmt, self.log = tok, hosted, chat, fmt, log
        self.tool_timeout = tool_timeout
        cfg = read_config(os.path.join(os.path.dirname(tok_path), "tokenizer_config.json"))
        eos = token_text(cfg.get("eos_token"))
        self.eos_text = eos if isinstance(eos, str) else None
        self.eos_id = tok.token_to_id(eos) if isinstance(eos, str) else None
        self.loop = asyncio.new_event_loop()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool")
        self.envs = []       # the pooled instances, one per row
        self.tainted = set()  # rows whose instance a timed-out call may still be using: replaced at reset
        self.records = []    # each row's completion messages this step

    # ---------------- rendering
    def render_ids(self, messages, gen, **extra):
        text = self.chat.template.render(messages, "a conversation", add_generation_prompt=gen, **extra)
        return self.tok.encode(text, add_special_tokens=False).ids

    def suffix_ids(self, tool_messages):
        """TRL's _get_tool_suffix_ids: the ids after a (dummy) call that the tool messages add, up
        to the next assistant header, cut after the EOS that ends the call's turn."""
        dummy = [{"role": "user", "content": "dummy"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]}]
        prefix = self.render_ids(dummy, False)
        full = self.render_ids(dummy + tool_messages, True)
        if self.eos_id is not None and self.eos_id in prefix:
            prefix = prefix[:len(prefix) - prefix[::-1].index(self.eos_id)]
        if full[:len(prefix)] != prefix:
            raise BadRequest("the chat template is not prefix-preserving: the call's ids are not a prefix of the "
                             "ids with its tool messages")
        return full[len(prefix):]

    # ---------------- running calls
    async def run_call(self, fn, args):
        if inspect.iscoroutinefunction(fn):
            return await asyncio.wait_for(fn(**args), self.tool_timeout)
        return await asyncio.wait_for(self.loop.run_in_executor(self.pool, lambda: fn(**args)), self.tool_timeout)

    async def run_row(self, row, calls):
        """[(name, result)] of one row's calls in TRL's order, and its failures."""
        tools = self.hosted.tools_of(self.envs[row]) if self.hosted.cls else self.hosted.tools_of(None)
        results, pending, failures = [], [], 0

        def failed(name, e):
            nonlocal failures
            failures += 1
            if isinstance(e, asyncio.TimeoutError):
                self.tainted.add(row)
                e = f"timed out after {self.tool_timeout:g} s"
            else:
                print(f"{PROG}: row {row}: tool {name}: {type(e).__name__}: {e}", file=self.log)
            return (name, {"error": str(e)})

        for call in calls:
            if call.get("type") != "function":
                failures += 1
                name = call.get("name", "unknown")
                results.append((name, {"error": f"Unsupported tool call type: {call.get('type')}"}))
                continue
            name, args = call["function"]["name"], call["function"].get("arguments", {})
            fn = tools.get(name)
            try:
                if fn is None:
                    raise ValueError(f"Tool {name} not found.")
                if inspect.iscoroutinefunction(fn):
                    pending.append((name, fn, args))
                else:
                    results.append((name, await self.run_call(fn, args)))
            except Exception as e:  # noqa: BLE001 (a tool's failure is the model's to see)
                results.append(failed(name, e))
        if pending:
            got = await asyncio.gather(*(self.run_call(fn, args) for _, fn, args in pending), return_exceptions=True)
            for (name, _, _), r in zip(pending, got):
                results.append(failed(name, r) if isinstance(r, BaseException) else (name, r))
        return results, failures

    # ---------------- requests
    def reset(self, step, rows):
        n = len(rows)
        while len(self.envs) < n:
            self.envs.append(self.hosted.cls() if self.hosted.cls else None)
        for i in sorted(self.tainted):
            if i < len(self.envs) and self.hosted.cls:
                self.envs[i] = self.hosted.cls()
        self.tainted.clear()
        self.records = [[] for _ in range(n)]
        prompts = []
        for i, r in enumerate(rows):
            fields = r.get("fields", {})
            if not isinstance(fields, dict):
                raise BadRequest(f"rows[{i}].fields is not an object")
            id_list(r.get("prompt_ids"), f"rows[{i}].prompt_ids")
            if not self.hosted.cls:
                prompts.append(None)
                continue
            try:
                obs = self.envs[i].reset(**fields)
            except Exception as e:
                traceback.print_exc(file=self.log)
                raise BadRequest(f"row {i}: {self.hosted.cls.__name__}.reset: {type(e).__name__}: {e}")
            prompts.append(None if obs is None else self.prompt_with(i, fields, obs))
        return {"prompts": prompts}

    def prompt_with(self, i, fields, obs):
        """The row's prompt ids with the observation joined to its last message (TRL's reset)."""
        prompt = fields.get("prompt", [{"role": "user", "content": ""}])
        if not (isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt)):
            raise BadRequest(f"row {i}: reset returned text, but the row's prompt is not a conversation "
                             "(tools/prepare_prompts.py --tools writes it as a list of messages)")
        content = prompt[-1].get("content", "")
        if isinstance(obs, list) and isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if isinstance(obs, str) and isinstance(content, list):
            obs = [{"type": "text", "text": obs}]
        messages = prompt[:-1] + [{**prompt[-1], "content": content + obs}]
        return self.render_ids(messages, True, tools=self.hosted.schemas)

    def turns(self, step, turns):
        if not isinstance(turns, list):
            raise BadRequest("malformed request: \"turns\" is not an array")
        answers, work = [], []
        for k, t in enumerate(turns):
            row = t.get("row") if isinstance(t, dict) else None
            if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < len(self.records):
                raise BadRequest(f"turns[{k}].row is not a row of this step (0 .. {len(self.records) - 1})")
            ids = id_list(t.get("ids"), f"turns[{k}].ids")
            msg = self.parse(ids)
            self.records[row].append(msg)
            answers.append({"done": True, "calls": 0, "failures": 0})
            if msg.get("tool_calls") and not t.get("last", False):
                work.append((k, row, t.get("room", 0), msg["tool_calls"]))
        if work:
            async def every_row():  # gathered inside the server's loop
                return await asyncio.gather(*(self.run_row(row, calls) for _, row, _, calls in work))
            ran = self.loop.run_until_complete(every_row())
            for (k, row, room, calls), (results, failures) in zip(work, ran):
                answers[k] = self.after_calls(row, room, calls, results, failures)
        return {"turns": answers}

    def parse(self, ids):
        text = self.tok.decode(ids, skip_special_tokens=False)
        try:
            msg = parse_turn(text, self.fmt)
            if isinstance(msg.get("content"), str) and self.eos_text:
                msg["content"] = msg["content"].removesuffix(self.eos_text)
            if not msg.get("content"):
                msg["content"] = ""
            return msg
        except (ValueError, TypeError):  # a malformed call is plain text, as TRL
            return {"role": "assistant", "content": self.tok.decode(ids, skip_special_tokens=True)}

    def after_calls(self, row, room, calls, results, failures):
        before = len(self.records[row])
        tool_msgs = [{"role": "tool", "name": name, "content": r if isinstance(r, list) else str(r)}
                     for name, r in results]
        self.records[row] += tool_msgs
        suffix = self.suffix_ids(tool_msgs)
        answer = {"done": False, "suffix_ids": suffix, "calls": len(calls), "failures": failures}
        if isinstance(room, bool) or not isinstance(room, int) or len(suffix) > room:  # TRL's overlong rollback
            del self.records[row][before:]
            answer = {"done": True, "calls": len(calls), "failures": failures}
        return answer

    def finish(self, step, n):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(self.records):
            raise BadRequest(f"malformed request: \"n\" is not a row count of this step (0 .. {len(self.records)})")
        out = {"messages": self.records[:n]}
        if self.hosted.reward:
            out["rewards"] = [self.reward_of(i) for i in range(n)]
        return out

    def reward_of(self, i):
        try:
            v = self.envs[i].get_reward()
            if inspect.isawaitable(v):
                v = self.loop.run_until_complete(v)
        except Exception as e:
            traceback.print_exc(file=self.log)
            raise BadRequest(f"row {i}: {self.hosted.reward}.get_reward: {type(e).__name__}: {e}")
        if v is not None and hasattr(v, "item"):
            v = v.item()
        if v is None or (isinstance(v, float) and v != v):
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v in (float("inf"), float("-inf")):
            raise BadRequest(f"row {i}: {self.hosted.reward}.get_reward returned {v!r}, not a finite number or None")
        return float(v)

    def answer(self, line):
        """The answer (a dict) to one request line."""
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise BadRequest(f"malformed request: {e}")
            if not isinstance(req, dict):
                raise BadRequest("malformed request: not an object")
            step, kind = req.get("step"), req.get("type")
            if isinstance(step, bool) or not isinstance(step, int):
                raise BadRequest("malformed request: \"step\" is not an integer")
            if kind == "reset" and isinstance(req.get("rows"), list):
                return self.reset(step, req["rows"])
            if kind == "turns":
                return self.turns(step, req.get("turns"))
            if kind == "finish":
                return self.finish(step, req.get("n"))
            raise BadRequest(f"malformed request: unknown type {kind!r} (reset, turns, finish)")
        except BadRequest as e:
            return {"error": str(e)}
        except Refused as e:
            return {"error": str(e)}
        except Exception as e:  # the tokenizer or the template
            traceback.print_exc(file=self.log)
            return {"error": f"{type(e).__name__}: {e}"}


def env_cmd(a):
    """The --env-cmd that runs this server again: this Python, absolute paths, shell-quoted."""
    parts = [sys.executable or "python3", os.path.abspath(__file__), "--tokenizer", os.path.abspath(a.tokenizer),
             "--module", os.path.abspath(a.module) if is_path(a.module) else a.module]
    for opt, val, default in (("--env-class", a.env_class, None), ("--tool-timeout", a.tool_timeout, 60.0),
                              ("--workers", a.workers, 256), ("--tool-format", a.tool_format, "auto"),
                              ("--chat-template", a.chat_template, "auto")):
        if val is not None and val != default:
            parts += [opt, os.path.abspath(val) if opt == "--chat-template" else str(val)]
    return " ".join(shlex.quote(p) for p in parts)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="TRL-style tools and environments behind dfg run --env-cmd")
    ap.add_argument("--tokenizer", help="tokenizer.json (or its directory, with the chat template); optional with --list")
    ap.add_argument("--module", required=True, help="a Python file (or module name) with TOOLS or the environment class")
    ap.add_argument("--env-class", help="the environment class (TRL's environment_factory)")
    ap.add_argument("--tool-timeout", type=float, default=60.0, help="seconds a tool call may take (default 60)")
    ap.add_argument("--workers", type=int, default=256, help="threads running plain tools at once (default 256)")
    ap.add_argument("--tool-format", choices=("auto", "qwen", "llama3"), default="auto")
    ap.add_argument("--chat-template", default="auto", metavar="auto|FILE")
    ap.add_argument("--list", action="store_true", help="print the --set tools=... and the --env-cmd, then exit")
    a = ap.parse_args(argv)
    if not a.tokenizer and not a.list:
        ap.error("the following arguments are required: --tokenizer (optional with --list only)")
    if not a.tool_timeout > 0 or a.workers < 1:
        ap.error("--tool-timeout must be > 0 and --workers at least 1")
    proto = protect_stdout()
    try:
        hosted = load_hosted(a.module, a.env_class)
    except Exception as e:
        traceback.print_exc()
        print(f"{PROG}: {a.module}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    names = ",".join(hosted.names)
    if a.list:
        return print_list(proto, "tools", names, "--env-cmd", env_cmd(a) if a.tokenizer else "", a.tokenizer, PROG)
    try:
        tok, tok_path = load_tokenizer(a.tokenizer)
        chat = Chat(tok_path, a.chat_template)
        chat.load("tools need the chat template")
        fmt = a.tool_format if a.tool_format != "auto" else guess_format(chat.text)
    except Refused as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: Python {platform.python_version()} ({sys.executable}) serves the tools {names}"
          f"{' of ' + a.env_class if a.env_class else ''} ({fmt} calls): the plan must be compiled with "
          f"--set tools={names}", file=sys.stderr)
    server = Server(tok, tok_path, hosted, chat, fmt, a.tool_timeout, a.workers)
    try:
        return serve(proto, {"tools": hosted.names, "reward": hosted.reward}, server.answer)
    finally:
        server.pool.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # not waiting for a tool thread that is still running past its timeout
