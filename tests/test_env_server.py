#!/usr/bin/env python3
"""test_env_server.py - tools/env_server.py (docs/agents.md) against a Qwen2.5-style chat template:

  - tool JSON schemas as transformers' get_json_schema makes them (hand-written expectations)
  - tool calls parsed as TRL's parse_response parses them (Qwen <tool_call> blocks, Llama 3's
    bare JSON call; a malformed call is plain text)
  - through the protocol (a subprocess): the hello, reset, turns and finish; the suffix ids equal
    TRL's _get_tool_suffix_ids computed by transformers' apply_chat_template when transformers
    imports (else by jinja2 and tokenizers directly, apart from env_server's code); a raising
    tool, an unknown tool, a malformed call, an overlong suffix (its tool turn dropped), a tool
    past --tool-timeout, an environment class (reset's text joins the prompt, get_reward), reset
    raising; --list
  - 64 rows whose tool sleeps 0.2 s run at once: the tool waits at a barrier of 64 parties, which
    only opens when all 64 calls run together (no check of wall time)
  - prepare_prompts.py --tools renders the prompts with the tools' schemas

Usage: test_env_server.py SOURCE_DIR. Exit 0 all pass, 1 a failure, 77 (ctest: skipped) without
tokenizers or jinja2 unless DFG_REQUIRE_HF=1.
"""
import json
import os
import subprocess
import sys
import tempfile
import traceback

SRC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
PY = sys.executable or "/usr/bin/python3"
SITE = os.environ.get("DFG_HF_SITE") or os.path.join(SRC, ".deps", "hf-4.40.2")
ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", DFG_HF_SITE=SITE)
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tools"))

QWEN = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\n\n# Tools\n\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nCall a function as <tool_call>\n{\"name\": <name>, \"arguments\": <args>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "user" or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- elif message.role == "assistant" %}
{{- '<|im_start|>' + message.role }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == "tool" %}
{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response>' }}
{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"""

TOOLS_PY = '''
import asyncio, threading, time

BARRIER = threading.Barrier(64, timeout=60)


def multiply(a: int, b: int) -> int:
    """Multiplies two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b


async def add(a: int, b: int = 0) -> int:
    """Adds two integers.

    Args:
        a: the first term
        b: the second term
    """
    await asyncio.sleep(0)
    return a + b


def boom(x: str) -> str:
    """Always raises.

    Args:
        x: anything
    """
    raise ValueError("no such thing: " + x)


def slow(x: int) -> str:
    """Sleeps 0.2 s with 63 others.

    Args:
        x: a number
    """
    time.sleep(0.2)
    BARRIER.wait()  # opens only when 64 calls run at once
    return "ok"


def hang(x: int) -> str:
    """Never answers in time.

    Args:
        x: a number
    """
    time.sleep(60)
    return "late"


TOOLS = [multiply, add, boom, slow, hang]


class Guess:
    def __init__(self):
        self.target, self.tries = None, 0

    def reset(self, **row):
        if row.get("explode"):
            raise RuntimeError("cannot start")
        self.target, self.tries = row["target"], 0
        return " Guess a number."

    def guess(self, n: int) -> str:
        """Guesses the number.

        Args:
            n: the guess
        """
        self.tries += 1
        return "higher" if n < self.target else "lower" if n > self.target else "right"

    def get_reward(self) -> float:
        return 1.0 / self.tries if self.tries else 0.0
'''


def skip_or_fail(why):
    if os.environ.get("DFG_REQUIRE_HF") == "1":
        print(f"test_env_server: FAIL: {why} (DFG_REQUIRE_HF=1)")
        sys.exit(1)
    print(f"test_env_server: SKIP: {why}")
    sys.exit(77)


def make_tokenizer(tk, d):
    """A byte-level BPE with Qwen's specials (<|im_end|> the EOS) and its tool tags as added tokens."""
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                     show_progress=False, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["You are a helpful assistant.", "multiply the numbers 12 and 34", '{"name": "multiply", '
                             '"arguments": {"a": 12, "b": 34}}', "tool_response user assistant system"] * 3, trainer)
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": QWEN,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return tok


class Proc:
    """env_server.py through the protocol."""

    def __init__(self, tokdir, module, *args):
        self.p = subprocess.Popen([PY, os.path.join(SRC, "tools", "env_server.py"), "--tokenizer", tokdir, "--module",
                                   module, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENV)
        self.hello = self.line()

    def line(self):
        out = self.p.stdout.readline()
        assert out, f"env_server said nothing: {self.p.stderr.read()}"
        return json.loads(out)

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self.line()

    def close(self):
        self.p.stdin.close()
        err = self.p.stderr.read()
        assert self.p.wait(timeout=60) == 0, err
        return err


class Golden:
    """TRL's _get_tool_suffix_ids and prompt rendering, by transformers when it imports, else by
    jinja2 and tokenizers directly (the same formula, apart from env_server's code). transformers
    before 4.43 rendered templates with jinja2's own tojson, which sorts keys: a tool schema then
    reads in another order than TRL 1.10's transformers (5.x) writes it, so such a version is
    not the golden either."""

    def __init__(self, tk, tokdir):
        self.tok = tk.Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
        self.eos = self.tok.token_to_id("<|im_end|>")
        try:
            sys.path.insert(0, SITE)
            import transformers
            major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
            if (major, minor) < (4, 43):
                raise ImportError(f"transformers {transformers.__version__}'s tojson sorts keys")
            self.hf = transformers.PreTrainedTokenizerFast.from_pretrained(tokdir)
            self.by = "transformers " + transformers.__version__
        except Exception as e:  # noqa: BLE001 (numpy or torch missing: transformers 4.40.2 needs numpy)
            import jinja2
            env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
            env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
            self.t, self.hf = env.from_string(QWEN), None
            self.by = f"jinja2 and tokenizers (transformers: {type(e).__name__}: {e})"

    def ids(self, messages, gen, tools=None):
        if self.hf is not None:
            return self.hf.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, tools=tools)
        text = self.t.render(messages=messages, add_generation_prompt=gen, tools=tools)
        return self.tok.encode(text, add_special_tokens=False).ids

    def suffix(self, tool_messages):
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]}]
        prefix = self.ids(dummy, False)
        full = self.ids(dummy + tool_messages, True)
        eos = [i for i, t in enumerate(prefix) if t == self.eos]
        if eos:
            prefix = prefix[:eos[-1] + 1]
        assert full[:len(prefix)] == prefix
        return full[len(prefix):]


def test_schemas():
    import env_server as es
    mod = types_module(TOOLS_PY)
    got = es.json_schema(mod.multiply)
    want = {"type": "function", "function": {"name": "multiply", "description": "Multiplies two integers.",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "description": "the first factor"},
                "b": {"type": "integer", "description": "the second factor"}}, "required": ["a", "b"]},
            "return": {"type": "integer"}}}
    assert got == want, got
    assert es.json_schema(mod.add)["function"]["parameters"]["required"] == ["a"]

    from typing import Optional

    def pick(kind: str, n: Optional[int] = None, xs: list[float] = None, d: dict[str, int] = None) -> str:
        """Picks one.

        Args:
            kind: the kind (choices: ["tea", "coffee"])
            n: how many
                of them
            xs: weights
            d: a table

        Returns:
            the pick
        """
    got = es.json_schema(pick)["function"]
    assert got["parameters"]["properties"] == {
        "kind": {"type": "string", "enum": ["tea", "coffee"], "description": "the kind"},
        "n": {"type": "integer", "nullable": True, "description": "how many of them"},
        "xs": {"type": "array", "items": {"type": "number"}, "description": "weights"},
        "d": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "a table"}}, got
    assert got["return"] == {"type": "string", "description": "the pick"}, got

    def undocumented(x: int):
        """No args block."""
    for bad, words in ((undocumented, "no description of x"), (lambda x: x, "has no docstring")):
        try:
            es.json_schema(bad)
            raise AssertionError(f"{bad} got a schema")
        except es.SchemaError as e:
            assert words in str(e), e
    print("ok - tool schemas as transformers' get_json_schema makes them")


def types_module(text):
    import types
    m = types.ModuleType("tools_under_test")
    exec(compile(text, "tools_under_test.py", "exec"), m.__dict__)
    return m


def test_parse():
    from env_server import parse_turn
    m = parse_turn('I will.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>', "qwen")
    assert m == {"role": "assistant", "content": "I will.", "tool_calls": [
        {"type": "function", "function": {"name": "multiply", "arguments": {"a": 3, "b": 4}}}]}, m
    m = parse_turn('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b"}</tool_call>', "qwen")
    assert [c["function"] for c in m["tool_calls"]] == [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]
    assert parse_turn("just 12<|im_end|>", "qwen") == {"role": "assistant", "content": "just 12"}
    for bad in ('<tool_call>{"name": "multiply", "arguments": {"a": 3</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'):
        try:
            parse_turn(bad, "qwen")
            raise AssertionError(f"{bad!r} parsed")
        except ValueError:
            pass
    m = parse_turn('{"name": "multiply", "parameters": {"a": 3, "b": 4}}<|eot_id|>', "llama3")
    assert m["tool_calls"] == [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 3, "b": 4}}}], m
    assert parse_turn("The answer is 12.<|eot_id|>", "llama3") == {"role": "assistant", "content": "The answer is 12."}
    print("ok - tool calls parsed as TRL's response schemas parse them (Qwen, Llama 3; malformed calls refused)")


def call(name, **args):
    return '<tool_call>\n' + json.dumps({"name": name, "arguments": args}) + '\n</tool_call><|im_end|>'


def test_protocol(tk, tok, tmp, tokdir, module, gold):
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    p = Proc(tokdir, module, "--tool-timeout", "1")
    assert p.hello == {"tools": ["multiply", "add", "boom", "slow", "hang"], "reward": None}, p.hello
    assert p.ask({"type": "reset", "step": 1, "rows": [{"index": i, "prompt_ids": [1], "fields": {}} for i in range(7)]}) \
        == {"prompts": [None] * 7}
    texts = [call("multiply", a=12, b=34), "The answer is 408.<|im_end|>", call("boom", x="it"),
             '<tool_call>\n{"name": "multiply", "arguments": {"a": 1\n</tool_call><|im_end|>', call("nope"),
             call("multiply", a=1, b=2), call("hang", x=1)]
    rooms = [100, 100, 100, 100, 100, 3, 100]
    a = p.ask({"type": "turns", "step": 1, "turns": [{"row": i, "ids": enc(t), "room": rooms[i], "last": False}
                                                     for i, t in enumerate(texts)]})["turns"]
    tm = lambda name, content: [{"role": "tool", "name": name, "content": content}]  # noqa: E731
    want0 = gold.suffix(tm("multiply", "408"))
    assert a[0] == {"done": False, "suffix_ids": want0, "calls": 1, "failures": 0}, a[0]
    assert a[1] == {"done": True, "calls": 0, "failures": 0}, a[1]
    assert a[2] == {"done": False, "suffix_ids": gold.suffix(tm("boom", "{'error': 'no such thing: it'}")),
                    "calls": 1, "failures": 1}, a[2]
    assert a[3] == {"done": True, "calls": 0, "failures": 0}, "a malformed call is plain text: the episode ends"
    assert a[4]["failures"] == 1 and a[4]["suffix_ids"] == gold.suffix(tm("nope", "{'error': 'Tool nope not found.'}"))
    assert a[5] == {"done": True, "calls": 1, "failures": 0}, f"an overlong suffix ends the episode: {a[5]}"
    assert a[6]["failures"] == 1 and a[6]["suffix_ids"] == gold.suffix(tm("hang", "{'error': 'timed out after 1 s'}"))
    # row 0 calls again (async add), then answers
    a = p.ask({"type": "turns", "step": 1, "turns": [{"row": 0, "ids": enc(call("add", a=2, b=3)), "room": 50, "last": False},
                                                     {"row": 2, "ids": enc(call("add", a=1)), "room": 50, "last": True}]})
    assert a["turns"][0] == {"done": False, "suffix_ids": gold.suffix(tm("add", "5")), "calls": 1, "failures": 0}, a
    assert a["turns"][1] == {"done": True, "calls": 0, "failures": 0}, "the last turn runs no call"
    p.ask({"type": "turns", "step": 1, "turns": [{"row": 0, "ids": enc("408<|im_end|>"), "room": 40, "last": False}]})
    msgs = p.ask({"type": "finish", "step": 1, "n": 7})["messages"]
    fn = lambda n, **args: {"type": "function", "function": {"name": n, "arguments": args}}  # noqa: E731
    assert msgs[0] == [{"role": "assistant", "content": "", "tool_calls": [fn("multiply", a=12, b=34)]},
                       {"role": "tool", "name": "multiply", "content": "408"},
                       {"role": "assistant", "content": "", "tool_calls": [fn("add", a=2, b=3)]},
                       {"role": "tool", "name": "add", "content": "5"},
                       {"role": "assistant", "content": "408"}], msgs[0]
    assert msgs[1] == [{"role": "assistant", "content": "The answer is 408."}], msgs[1]
    assert msgs[3] == [{"role": "assistant", "content": tok.decode(enc(texts[3]), skip_special_tokens=True)}], msgs[3]
    assert msgs[5] == [{"role": "assistant", "content": "", "tool_calls": [fn("multiply", a=1, b=2)]}], \
        f"the overlong tool turn is dropped: {msgs[5]}"
    assert p.ask({"type": "bogus", "step": 1})["error"].startswith("malformed request: unknown type")
    assert "malformed request" in p.ask({"type": "turns"})["error"]
    p.close()
    print(f"ok - the protocol: suffixes equal TRL's _get_tool_suffix_ids by {gold.by}; raising, unknown, hanging "
          "tools and malformed calls; an overlong suffix; messages at finish")


def test_concurrency(tok, tokdir, module):
    p = Proc(tokdir, module)
    p.ask({"type": "reset", "step": 1, "rows": [{"index": i, "prompt_ids": [1], "fields": {}} for i in range(64)]})
    ids = tok.encode(call("slow", x=1), add_special_tokens=False).ids
    a = p.ask({"type": "turns", "step": 1, "turns": [{"row": i, "ids": ids, "room": 100, "last": False} for i in range(64)]})
    assert all(t["calls"] == 1 and t["failures"] == 0 for t in a["turns"]), a
    p.close()
    print("ok - 64 rows' calls of a tool that sleeps 0.2 s run at once (a barrier of 64 opened)")


def test_env_class(tok, tokdir, module, gold):
    import env_server as es
    p = Proc(tokdir, module, "--env-class", "Guess")
    assert p.hello == {"tools": ["multiply", "add", "boom", "slow", "hang", "guess"], "reward": "Guess"}, p.hello
    prompt = [{"role": "user", "content": "Play."}]
    a = p.ask({"type": "reset", "step": 3, "rows": [{"index": 0, "prompt_ids": [1], "fields": {"prompt": prompt, "target": 7}},
                                                    {"index": 1, "prompt_ids": [1], "fields": {"prompt": prompt, "target": 2}}]})
    schemas = es.load_hosted(module, "Guess").schemas
    want = gold.ids([{"role": "user", "content": "Play. Guess a number."}], True, tools=schemas)
    assert a == {"prompts": [want, want]}, a
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    a = p.ask({"type": "turns", "step": 3, "turns": [{"row": 0, "ids": enc(call("guess", n=3)), "room": 99, "last": False},
                                                     {"row": 1, "ids": enc(call("guess", n=2)), "room": 99, "last": False}]})
    assert a["turns"][0]["suffix_ids"] == gold.suffix([{"role": "tool", "name": "guess", "content": "higher"}]), a
    p.ask({"type": "turns", "step": 3, "turns": [{"row": 0, "ids": enc(call("guess", n=7)), "room": 60, "last": False}]})
    f = p.ask({"type": "finish", "step": 3, "n": 2})
    assert f["rewards"] == [0.5, 1.0], f
    e = p.ask({"type": "reset", "step": 4, "rows": [{"index": 0, "prompt_ids": [1], "fields": {"explode": True}}]})
    assert e["error"] == "row 0: Guess.reset: RuntimeError: cannot start", e
    p.close()
    r = subprocess.run([PY, os.path.join(SRC, "tools", "env_server.py"), "--module", module, "--env-class", "Guess",
                        "--tokenizer", tokdir, "--list"], capture_output=True, text=True, env=ENV)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "--set tools=multiply,add,boom,slow,hang,guess", r
    assert lines[1].startswith("--env-cmd '") and "--env-class Guess" in lines[1], lines
    print("ok - an environment class: reset's text joins the prompt, get_reward, reset raising; --list")


def test_prepare(tmp, tokdir, module, gold):
    import env_server as es
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps({"prompt": "What is 12 x 34?", "answer": "408"}) + "\n")
    out = os.path.join(tmp, "out.jsonl")
    r = subprocess.run([PY, os.path.join(SRC, "tools", "prepare_prompts.py"), inp, "--tokenizer", tokdir, "-o", out,
                        "--tools", module], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    row = json.loads(open(out).read())
    msgs = [{"role": "user", "content": "What is 12 x 34?"}]
    assert row["prompt"] == msgs and row["answer"] == "408", row
    assert row["prompt_ids"] == gold.ids(msgs, True, tools=es.load_hosted(module, None).schemas), row
    print("ok - prepare_prompts.py --tools renders the prompt with the tools' schemas")


def test_reward_messages(tok):
    import reward_server as rs
    seen = []

    def reward_calls(prompts, completions, **kw):
        seen.extend(completions)
        return [float(sum(1 for m in c if isinstance(c, list) and m.get("role") == "tool")) for c in completions]
    conv = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "multiply", "arguments": {"a": 1, "b": 2}}}]}, {"role": "tool", "name": "multiply", "content": "2"},
        {"role": "assistant", "content": "2"}]
    rows = [{"prompt_ids": [5], "completion_ids": [6], "fields": {"prompt": [{"role": "user", "content": "q"}]},
             "messages": conv},
            {"prompt_ids": [5], "completion_ids": [6], "fields": {"prompt": [{"role": "user", "content": "q"}]}}]
    a = rs.Server(tok, [("reward_calls", reward_calls)]).answer(json.dumps({"step": 1, "rows": rows}))
    assert a == {"rewards": [[1.0], [0.0]]}, a
    assert seen[0] == conv and seen[1] == [{"role": "assistant", "content": tok.decode([6], skip_special_tokens=True)}]
    assert "messages is not an array" in rs.Server(tok, [("r", reward_calls)]).answer(json.dumps(
        {"step": 1, "rows": [dict(rows[0], messages={})]}))["error"]
    print("ok - reward_server.py: a row with messages gets them as its completion (TRL's conversational format)")


def main():
    try:
        sys.path.insert(0, SITE)
        import jinja2  # noqa: F401
        import tokenizers as tk
    except ImportError as e:
        skip_or_fail(f"cannot import tokenizers or jinja2 ({e})")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="test_env_server_") as tmp:
        tokdir = os.path.join(tmp, "qwen")
        tok = make_tokenizer(tk, tokdir)
        module = os.path.join(tmp, "my_tools.py")
        with open(module, "w") as f:
            f.write(TOOLS_PY)
        gold = Golden(tk, tokdir)
        tests = [test_schemas, test_parse, lambda: test_protocol(tk, tok, tmp, tokdir, module, gold),
                 lambda: test_concurrency(tok, tokdir, module), lambda: test_env_class(tok, tokdir, module, gold),
                 lambda: test_prepare(tmp, tokdir, module, gold), lambda: test_reward_messages(tok)]
        for t in tests:
            try:
                t()
            except Exception:  # noqa: BLE001
                failed += 1
                print("FAIL -", traceback.format_exc())
    print(f"test_env_server: {'all passed' if not failed else f'{failed} failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
