#!/usr/bin/env python3
"""test_reward_tools.py - the Python side of docs/rewards.md:

  examples/tasks/digits/tokenizer.json   the digit vocabulary as a Hugging Face tokenizer
  tools/prepare_prompts.py               text -> prompt JSONL (CSV, JSONL, template, refusals), and
                                         conversations through a chat template (TRL's conversational rows)
  tools/reward_server.py                 the reward program protocol, through a subprocess; conversational
                                         rows (messages as prompts and completions); --list; its stderr line
  examples/rewards/reverse_reward.py     0.6 exact + 0.3 partial + 0.1 format == dfg's mixed
  examples/tasks/digits/make_dataset.py  the built-in tasks as a dataset

Usage: test_reward_tools.py SOURCE_DIR
Exit codes: 0 all pass, 1 a failure, 77 (ctest: skipped) when `tokenizers` cannot be imported
(from $DFG_HF_SITE, else SOURCE_DIR/.deps/hf-4.40.2, else the normal path) unless
DFG_REQUIRE_HF=1, which makes that a failure. Without jinja2 (Debian python3-jinja2) the checks
that render a chat template are skipped (said on stdout), a failure with DFG_REQUIRE_HF=1; the
refusal without jinja2 is checked either way (jinja2 hidden from the tool). The chat templates
against transformers' own apply_chat_template: tests/golden/chat_template_golden.py.
"""
import importlib.util
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from fractions import Fraction

SRC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
PY = sys.executable or "/usr/bin/python3"
TOKJSON = os.path.join(SRC, "examples", "tasks", "digits", "tokenizer.json")
VOCAB = "_$0123456789+-="
ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # no __pycache__ in the source tree
sys.dont_write_bytecode = True


def find_tokenizers():
    site = os.environ.get("DFG_HF_SITE") or os.path.join(SRC, ".deps", "hf-4.40.2")
    if os.path.isdir(site):
        sys.path.insert(0, site)
        ENV["DFG_HF_SITE"] = site
    try:
        import tokenizers
        return tokenizers
    except ImportError as e:
        why = f"cannot import tokenizers ({e}; looked in {site} and the normal path): tools/deps.sh --test installs it"
        if os.environ.get("DFG_REQUIRE_HF") == "1":
            print(f"test_reward_tools: FAIL: {why} (DFG_REQUIRE_HF=1)")
            sys.exit(1)
        print(f"test_reward_tools: SKIP: {why}")
        sys.exit(77)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SRC, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(args, **kw):
    kw.setdefault("env", ENV)
    return subprocess.run([PY] + args, capture_output=True, text=True, timeout=120, **kw)


def have_jinja2():
    """Whether jinja2 imports here; without it the rendering checks skip (fail with DFG_REQUIRE_HF=1)."""
    try:
        import jinja2  # noqa: F401
        return True
    except ImportError:
        if os.environ.get("DFG_REQUIRE_HF") == "1":
            raise AssertionError("cannot import jinja2 (DFG_REQUIRE_HF=1): tools/deps.sh --test installs "
                                 "python3-jinja2")
        print("     (no jinja2: the chat template rendering checks are skipped; tools/deps.sh --test installs it)")
        return False


# ---------------------------------------------------------------- tokenizer
def test_tokenizer(tk, tmp):
    tok = tk.Tokenizer.from_file(TOKJSON)
    assert tok.encode("31415=").ids == [5, 3, 6, 3, 7, 14], tok.encode("31415=").ids
    assert tok.get_vocab_size(with_added_tokens=True) == 15
    assert [tok.token_to_id(c) for c in VOCAB] == list(range(15))
    specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    assert specials == {"_", "$"}, specials
    rng = random.Random(1)
    for _ in range(200):
        s = "".join(rng.choice(VOCAB[2:]) for _ in range(rng.randint(1, 30)))
        ids = tok.encode(s).ids
        assert ids == [VOCAB.index(c) for c in s] and tok.decode(ids) == s, (s, ids, tok.decode(ids))
    assert tok.decode([5, 3, 0, 6, 1, 7], skip_special_tokens=True) == "3145"
    assert tok.decode([5, 3, 1], skip_special_tokens=False) == "31$"
    try:
        tok.encode("3 a")
        raise AssertionError("a character outside the vocabulary encoded")
    except Exception as e:
        assert "UNK" in str(e), e
    # the committed file is what tools/make_digits_tokenizer.py builds
    built = json.loads(load("tools/make_digits_tokenizer.py", "mdt").build().to_str())
    with open(TOKJSON, encoding="utf-8") as f:
        assert json.load(f) == built, "tokenizer.json differs from tools/make_digits_tokenizer.py's"


# ---------------------------------------------------------------- prepare_prompts
def prepare(tmp, name, content, *args, tok=TOKJSON, env=None):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    out = os.path.join(tmp, name + ".out.jsonl")
    if os.path.exists(out):
        os.unlink(out)
    r = run([os.path.join(SRC, "tools", "prepare_prompts.py"), path, "--tokenizer", tok, "-o", out]
            + list(args), **({"env": env} if env else {}))
    rows = None
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    return r, rows


def refused(r, rows, where, words):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert rows is None, "a refusal wrote the output"
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1 and where in lines[0] and words in lines[0], r.stderr


def test_prepare_prompts(tk, tmp):
    r, rows = prepare(tmp, "a.csv", 'prompt,answer,note\n31415=,51413,"x, y"\n\n27=,72,\n')
    assert r.returncode == 0, r.stderr
    assert rows == [{"prompt_ids": [5, 3, 6, 3, 7, 14], "answer": "51413", "note": "x, y"},
                    {"prompt_ids": [4, 9, 14], "answer": "72", "note": ""}], rows
    assert "2 rows" in r.stdout and "min 3 mean 4.50 max 6" in r.stdout and r.stdout.count("\n") == 1, r.stdout
    # JSONL with a template over other columns; non-string fields are kept as they are
    jl = '{"a": "12", "b": 34, "answer": "46", "id": 7, "meta": {"k": [1]}}\n\n{"a": "9", "b": 1, "answer": null}\n'
    r, rows = prepare(tmp, "b.jsonl", jl, "--template", "{a}+{b}=")
    assert r.returncode == 0, r.stderr
    assert rows == [{"prompt_ids": [3, 4, 12, 5, 6, 14], "a": "12", "b": 34, "answer": "46", "id": 7, "meta": {"k": [1]}},
                    {"prompt_ids": [11, 12, 3, 14], "a": "9", "b": 1, "answer": None}], rows
    # another prompt column, BOS, truncation
    r, rows = prepare(tmp, "c.jsonl", '{"q": "123456="}\n{"q": "1="}\n', "--prompt-column", "q",
                      "--add-bos", "--bos-token", "=", "--max-prompt-length", "4", "--truncate", "left")
    assert r.returncode == 0, r.stderr
    assert rows == [{"prompt_ids": [6, 7, 8, 14]}, {"prompt_ids": [14, 3, 14]}], rows
    assert "1 cut from the left" in r.stdout, r.stdout
    pp = load("tools/prepare_prompts.py", "pp")
    assert pp.unescape(r"Q: {prompt}\nA:\t\\n") == "Q: {prompt}\nA:\t\\n"
    # refusals: exit 2, one line naming the line, nothing written
    refused(*prepare(tmp, "d.jsonl", '{"prompt": "1="}\n\n{"text": "2="}\n'), "d.jsonl:3:", "no column 'prompt'")
    refused(*prepare(tmp, "e.jsonl", '{"prompt": "1="}\n{"prompt": "1=" \n'), "e.jsonl:2:", "malformed JSON")
    refused(*prepare(tmp, "f.jsonl", '{"prompt": ""}\n'), "f.jsonl:1:", "tokenizes to nothing")
    refused(*prepare(tmp, "g.jsonl", '[1, 2]\n'), "g.jsonl:1:", "not a JSON object")
    refused(*prepare(tmp, "h.jsonl", '{"prompt": "1 2"}\n'), "h.jsonl:1:", "cannot encode")
    refused(*prepare(tmp, "i.jsonl", '{"prompt": "12345="}\n', "--max-prompt-length", "4"), "i.jsonl:1:",
            "longer than --max-prompt-length 4")
    refused(*prepare(tmp, "j.csv", 'prompt,answer\n1=,1\n2=,2,extra\n'), "j.csv:3:", "3 cells")
    refused(*prepare(tmp, "k.csv", 'question,answer\n1=,1\n'), "k.csv:2:", "no column 'prompt'")
    refused(*prepare(tmp, "l.jsonl", '{"x": "1"}\n', "--template", "{y}="), "l.jsonl:1:", "no column 'y'")
    refused(*prepare(tmp, "m.jsonl", '\n'), "m.jsonl", "no rows")


# ---------------------------------------------------------------- reward_server
USER_MODULE = '''
import os, sys
from neighbour import reward_imported        # a neighbour of the module: importable, not selected
print("module noise at import")

def reward_len(prompts, completions, **kwargs):
    print("noise from print")
    os.write(1, b"noise on fd 1\\n")
    os.system("echo noise from a child process")
    return [float(len(c)) for c in completions]

def helper():
    return 0

def reward_answer(prompts, completions, answer=None, **kwargs):
    if "99" in completions:
        raise ValueError("boom\\nsecond line")
    return [None if a is None else float(c == a) for c, a in zip(completions, answer)]

def reward_check(prompts, completions, completion_ids, prompt_ids, truncated, step, **kw):
    want = kw.pop("want")[0]  # a field: one value per row
    assert sorted(kw) == want["fields"], sorted(kw)
    got = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
           "prompt_ids": prompt_ids, "truncated": truncated, "step": step, "answer": kw["answer"], "id": kw.get("id")}
    for k, v in got.items():
        assert v == want[k], (k, v, want[k])
    return [1] * len(prompts)

def reward_shape(prompts, completions, mode, **kwargs):
    return {"short": [1.0], "inf": [float("inf")] * len(prompts), "nan": [float("nan")] * len(prompts),
            "str": ["1"] * len(prompts), "dict": {"a": 1}}[mode[0]]
'''


class Server:
    def __init__(self, tmp, module, *args):
        self.p = subprocess.Popen([PY, os.path.join(SRC, "tools", "reward_server.py"), "--tokenizer", TOKJSON,
                                   "--module", module] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "server.err"), "w"),
                                  text=True, env=ENV)
        self.err = os.path.join(tmp, "server.err")

    def line(self):
        s = self.p.stdout.readline()
        assert s.endswith("\n"), f"no answer line ({s!r}); stderr: {open(self.err).read()}"
        return json.loads(s)

    def ask(self, step, rows):
        self.p.stdin.write(json.dumps({"step": step, "rows": rows}) + "\n")
        self.p.stdin.flush()
        return self.line()

    def close(self):
        self.p.stdin.close()
        rest = self.p.stdout.read()
        assert self.p.wait(timeout=30) == 0 and rest == "", (self.p.returncode, rest)
        with open(self.err) as f:
            return f.read()


def row(p, c, trunc=False, **fields):
    return {"index": 0, "prompt_ids": [VOCAB.index(x) for x in p], "completion_ids": [VOCAB.index(x) for x in c],
            "truncated": trunc, "fields": fields}


def test_reward_server(tk, tmp):
    mod = os.path.join(tmp, "user_rewards.py")
    with open(mod, "w") as f:
        f.write(USER_MODULE)
    with open(os.path.join(tmp, "neighbour.py"), "w") as f:
        f.write("def reward_imported(prompts, completions, **kw):\n    return [0.0] * len(prompts)\n")
    s = Server(tmp, mod)
    assert s.line() == {"reward_funcs": ["reward_len", "reward_answer", "reward_check", "reward_shape"]}
    err = s.close()  # one line names the Python that runs the functions, and the setting to compile with
    names = "reward_len,reward_answer,reward_check,reward_shape"
    assert f"reward_server: Python {platform.python_version()} ({PY}) serves {names} from {mod}: the plan must be " \
           f"compiled with --set reward_funcs={names}\n" in err, err
    s = Server(tmp, mod, "--funcs", "reward_len,reward_answer,reward_check")
    assert s.line() == {"reward_funcs": ["reward_len", "reward_answer", "reward_check"]}
    want = {"fields": ["answer", "id"], "prompts": ["31=", "27=", "5="], "completions": ["13", "7", "555"],
            "completion_ids": [[3, 5, 1], [9, 0, 1], [7, 7, 7]], "prompt_ids": [[5, 3, 14], [4, 9, 14], [7, 14]],
            "truncated": [False, False, True], "step": 3, "answer": ["13", "72", None], "id": [1, None, 3]}
    rows = [row("31=", "13$", answer="13", id=1, want=want), row("27=", "7_$", answer="72", want=want),
            row("5=", "555", True, id=3, want=want)]
    ans = s.ask(3, rows)
    assert ans == {"rewards": [[2.0, 1.0, 1.0], [1.0, 0.0, 1.0], [3.0, None, 1.0]]}, ans
    bad = s.ask(4, [row("1=", "99$", answer="1")])
    assert bad == {"error": "reward_answer: ValueError: boom second line"}, bad
    s.p.stdin.write("{not json\n\n")
    s.p.stdin.flush()
    assert "malformed request" in s.line()["error"]
    s.p.stdin.write('{"step": 5, "rows": [{"prompt_ids": [1], "completion_ids": "x"}]}\n')
    s.p.stdin.flush()
    assert "completion_ids" in s.line()["error"]
    want.update(prompts=["9="], completions=["9"], completion_ids=[[11, 1]], prompt_ids=[[11, 14]],
                truncated=[False], step=6, answer=["9"], id=None, fields=["answer"])  # no row has an id
    ans = s.ask(6, [row("9=", "9$", answer="9", want=want)])
    assert ans == {"rewards": [[1.0, 1.0, 1.0]]}, ans  # still running
    assert s.ask(7, []) == {"rewards": []}
    err = s.close()
    for noise in ("module noise at import", "noise from print", "noise on fd 1", "noise from a child process",
                  "ValueError: boom"):
        assert noise in err, (noise, err)
    for mode, words in (("short", "returned 1 values for 2 rows"), ("inf", "row 0: inf, not finite"),
                        ("str", "row 0: str '1', not a number"), ("dict", "returned dict, not a list")):
        s = Server(tmp, mod, "--funcs", "reward_shape")
        s.line()
        ans = s.ask(1, [row("1=", "1$", mode=mode), row("2=", "2$", mode=mode)])
        assert list(ans) == ["error"] and ans["error"].startswith("reward_shape: " + words), ans
        s.close()
    s = Server(tmp, mod, "--funcs", "reward_shape")
    s.line()
    assert s.ask(1, [row("1=", "1$", mode="nan")]) == {"rewards": [[None]]}  # NaN: does not apply, as in TRL
    s.close()
    r = run([os.path.join(SRC, "tools", "reward_server.py"), "--tokenizer", TOKJSON, "--module", mod,
             "--funcs", "nope"], input="")
    assert r.returncode == 1 and r.stdout == "" and "no function 'nope'" in r.stderr, (r.returncode, r.stdout, r.stderr)


# ---------------------------------------------------------------- conversations (chat templates)
# A chat template in the digit vocabulary: each line ends in a block tag, so the text has no
# newline or indentation only because of trim_blocks and lstrip_blocks, as transformers renders.
DIGIT_TEMPLATE = """{% for m in messages %}
    {% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('no role ' + m.role) }}{% endif %}
    {% if m.role == 'system' %}
{{ m.content }}+{% else %}
{{ m.content }}{{ '=' if m.role == 'user' else eos_token }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}-{% endif %}"""
CONV1 = [{"role": "system", "content": "9"}, {"role": "user", "content": "12"}]  # 9+12=-
CONV1_IDS = [11, 12, 3, 4, 14, 13]
CONV2 = [{"role": "user", "content": "3"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "5"}]
CONV2_IDS = [5, 14, 6, 1, 7, 14, 13]  # 3=4$5=-


def chat_tokenizer(tmp, name, template=DIGIT_TEMPLATE, jinja_file=None):
    """A directory with the digit tokenizer.json and a tokenizer_config.json holding the template."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    shutil.copy(TOKJSON, d)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "_",
           "eos_token": {"__type": "AddedToken", "content": "$", "special": True}}
    if template is not None:
        cfg["chat_template"] = template
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    if jinja_file is not None:
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write(jinja_file)
    return d


def jsonl(*rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_chat_prepare(tk, tmp):
    plain = chat_tokenizer(tmp, "plain", template=None)
    # refusals that need no jinja2: one line naming the line, never a cut piece of the value
    refused(*prepare(tmp, "n.jsonl", jsonl({"prompt": "1="}, {"prompt": CONV1}), tok=plain), "n.jsonl:2:",
            "the prompt is a conversation (a list of messages) and needs a chat template: the tokenizer has no chat "
            f"template ({plain}/tokenizer_config.json has no chat_template, and there is no "
            f"{plain}/chat_template.jinja)"
            ": give one with --chat-template FILE")
    r, rows = prepare(tmp, "o.jsonl", jsonl({"prompt": {"role": "user", "content": "x" * 80}}))
    refused(r, rows, "o.jsonl:1:", "the prompt ('prompt') is a JSON object, neither text nor a conversation "
            "(a list of {\"role\": ..., \"content\": ...} messages)")
    assert r.stderr.rstrip().endswith("messages)"), r.stderr
    refused(*prepare(tmp, "p.jsonl", jsonl({"prompt": []})), "p.jsonl:1:", "empty list")
    refused(*prepare(tmp, "q.jsonl", jsonl({"prompt": [{"content": "1"}]})), "q.jsonl:1:",
            "its item 0 is an object without a text \"role\"")
    refused(*prepare(tmp, "q2.jsonl", jsonl({"prompt": CONV1 + ["2="]})), "q2.jsonl:1:",
            "its item 2 is a text, not a message")
    refused(*prepare(tmp, "r.jsonl", jsonl({"prompt": "1="}), "--chat", tok=plain), "--chat renders every prompt",
            "needs a chat template")
    long = "1" * 30 + " " + "2" * 29
    refused(*prepare(tmp, "s.jsonl", jsonl({"prompt": long})), "s.jsonl:1:",
            f"cannot encode the prompt {long[:40]!r}... (60 characters)")
    with_t = chat_tokenizer(tmp, "with_t")
    refused(*prepare(tmp, "t.jsonl", jsonl({"prompt": CONV1}), "--chat-template", "none", tok=with_t), "t.jsonl:1:",
            "needs a chat template: --chat-template none was given")
    # without jinja2 (hidden from the tool): one line saying what to install
    hide = os.path.join(tmp, "nojinja", "jinja2")
    os.makedirs(hide)
    with open(os.path.join(hide, "__init__.py"), "w") as f:
        f.write("raise ImportError(\"No module named 'jinja2' (hidden by the test)\")\n")
    env = dict(ENV, PYTHONPATH=os.path.dirname(hide))
    refused(*prepare(tmp, "u.jsonl", jsonl({"prompt": "1="}, {"prompt": CONV1}), tok=with_t, env=env), "u.jsonl:2:",
            f"its chat template ({with_t}/tokenizer_config.json) needs jinja2, which cannot be imported")
    r, rows = prepare(tmp, "u2.jsonl", jsonl({"prompt": "1="}), tok=with_t, env=env)  # text: jinja2 not needed
    assert r.returncode == 0 and rows == [{"prompt_ids": [3, 14]}], (r.stderr, rows)
    if not have_jinja2():
        return
    # conversational rows beside a text row; the messages are kept as "prompt", the other fields too
    r, rows = prepare(tmp, "a.jsonl", jsonl({"prompt": CONV1, "answer": "21", "id": 1},
                                            {"prompt": "31=", "answer": "13"}, {"prompt": CONV2}), tok=with_t)
    assert r.returncode == 0, r.stderr
    assert rows == [{"prompt_ids": CONV1_IDS, "prompt": CONV1, "answer": "21", "id": 1},
                    {"prompt_ids": [5, 3, 14], "answer": "13"},
                    {"prompt_ids": CONV2_IDS, "prompt": CONV2}], rows
    assert f"2 conversations rendered with the chat template of {with_t}/tokenizer_config.json" in r.stdout, r.stdout
    # a "messages" column; text prompts with --chat (one user message); --template's text with --chat
    r, rows = prepare(tmp, "b.jsonl", jsonl({"messages": CONV2, "answer": "6"}), "--prompt-column", "messages",
                      tok=with_t)
    assert r.returncode == 0 and rows == [{"prompt_ids": CONV2_IDS, "prompt": CONV2, "answer": "6"}], (r.stderr, rows)
    refused(*prepare(tmp, "b2.jsonl", jsonl({"messages": CONV2, "prompt": "1="}), "--prompt-column", "messages",
                     tok=with_t), "b2.jsonl:1:", "a column 'prompt' besides the prompt column 'messages'")
    r, rows = prepare(tmp, "c.csv", "q,answer\n12,21\n", "--prompt-column", "q", "--chat", tok=with_t)
    assert r.returncode == 0, r.stderr
    assert rows == [{"prompt_ids": [3, 4, 14, 13], "prompt": [{"role": "user", "content": "12"}], "answer": "21"}], rows
    r, rows = prepare(tmp, "c2.jsonl", jsonl({"a": 4, "b": 5}), "--template", "{a}+{b}", "--chat", tok=with_t)
    want = [{"prompt_ids": [6, 12, 7, 14, 13], "prompt": [{"role": "user", "content": "4+5"}], "a": 4, "b": 5}]
    assert rows == want, (r.stderr, rows)
    # transformers' named templates: "default" is taken; chat_template.jinja beside the config wins over it
    named = chat_tokenizer(tmp, "named", template=[{"name": "tool_use", "template": "0"},
                                                   {"name": "default", "template": DIGIT_TEMPLATE}])
    r, rows = prepare(tmp, "d.jsonl", jsonl({"prompt": CONV1}), tok=named)
    assert r.returncode == 0 and rows[0]["prompt_ids"] == CONV1_IDS, (r.stderr, rows)
    nodefault = chat_tokenizer(tmp, "nodefault", template=[{"name": "tool_use", "template": "0"}])
    refused(*prepare(tmp, "d2.jsonl", jsonl({"prompt": CONV1}), tok=nodefault), "tokenizer_config.json",
            "chat_template names 'tool_use' but no 'default'")
    filed = chat_tokenizer(tmp, "filed", jinja_file="{% for m in messages %}{{ m.content }}{% endfor %}=")
    r, rows = prepare(tmp, "e.jsonl", jsonl({"prompt": CONV1}), tok=filed)
    assert r.returncode == 0 and rows[0]["prompt_ids"] == [11, 3, 4, 14], (r.stderr, rows)
    assert f"of {filed}/chat_template.jinja" in r.stdout, r.stdout
    # --chat-template FILE with a tokenizer that has none; a template that does not compile
    r, rows = prepare(tmp, "f.jsonl", jsonl({"prompt": CONV1}), "--chat-template",
                      os.path.join(filed, "chat_template.jinja"), tok=plain)
    assert r.returncode == 0 and rows[0]["prompt_ids"] == [11, 3, 4, 14], (r.stderr, rows)
    bad = os.path.join(tmp, "bad.jinja")
    with open(bad, "w") as f:
        f.write("{% for m in messages %}\n{{ m.content }")
    refused(*prepare(tmp, "g.jsonl", jsonl({"prompt": "1="}), "--chat-template", bad, tok=plain), bad,
            "the chat template is not valid Jinja (its line 2:")
    # a conversation the template refuses (raise_exception), and special tokens as template variables
    refused(*prepare(tmp, "h.jsonl", jsonl({"prompt": CONV1}, {"prompt": [{"role": "robot", "content": "1"}]}),
                     tok=with_t), "h.jsonl:2:", "refused the conversation: no role robot")
    # tojson as newer transformers: no HTML escapes, non-ASCII kept, keys in their order
    pp = load("tools/prepare_prompts.py", "pp_chat")
    t = pp.ChatTemplate("{{ messages[0] | tojson }}|{{ bos_token }}|{% for m in messages %}{% if loop.index > 1 %}"
                        "{% break %}{% endif %}{{ m.role }}{% endfor %}", "test", {"bos_token": "<s>"})
    got = t.render([{"role": "u", "content": "<&'é>"}, {"role": "x"}], "here")
    assert got == '{"role": "u", "content": "<&\'é>"}|<s>|u', got
    assert pp.template_tokens(with_t, {"eos_token": {"content": "$"}, "pad_token": None, "bos_token": "",
                                       "additional_special_tokens": [{"content": "+"}, "-"]}) == \
        {"eos_token": "$", "additional_special_tokens": ["+", "-"]}
    # the prepared conversation through reward_server: TRL's conversational prompts and completions
    mod = os.path.join(tmp, "conv_rewards.py")
    with open(mod, "w") as f:
        f.write(CONV_MODULE)
    s = Server(tmp, mod)
    assert s.line() == {"reward_funcs": ["reward_kind", "reward_seen"]}
    prepared = [json.loads(x) for x in open(os.path.join(tmp, "a.jsonl.out.jsonl"))]
    want = {"prompts": [CONV1, "31=", CONV2], "completions": [[{"role": "assistant", "content": "21"}], "13",
                                                              [{"role": "assistant", "content": "6"}]]}
    req = [{"index": i, "prompt_ids": x["prompt_ids"], "completion_ids": c, "truncated": False,
            "fields": dict({k: v for k, v in x.items() if k != "prompt_ids"}, want=want)}
           for i, (x, c) in enumerate(zip(prepared, [[4, 3, 1], [3, 5, 1], [8, 1]]))]
    assert s.ask(1, req) == {"rewards": [[1.0, None], [0.0, None], [1.0, None]]}
    s.close()


CONV_MODULE = '''
def reward_kind(prompts, completions, **kwargs):
    """1 for a conversational row (messages in, messages out), 0 for text."""
    out = []
    for p, c in zip(prompts, completions):
        if isinstance(c, list):
            assert len(c) == 1 and c[0]["role"] == "assistant" and isinstance(c[0]["content"], str), c
            assert isinstance(p, list) and all(isinstance(m["role"], str) for m in p), p
            out.append(1.0)
        else:
            assert isinstance(c, str) and isinstance(p, str), (p, c)
            out.append(0.0)
    return out


def reward_seen(prompts, completions, want, **kwargs):
    assert prompts == want[0]["prompts"], (prompts, want[0]["prompts"])
    assert completions == want[0]["completions"], (completions, want[0]["completions"])
    return [float("nan")] * len(prompts)  # NaN: does not apply
'''


def test_reward_server_chat(tk, tmp):
    """Which rows are conversational: a field "prompt" that is a list of messages, nothing else."""
    mod = os.path.join(tmp, "conv_rewards.py")
    with open(mod, "w") as f:
        f.write(CONV_MODULE)
    want = {"prompts": [CONV1, "31=", "1=", "2=", "3="],
            "completions": [[{"role": "assistant", "content": "34"}], "13", "1", "2", "3"]}
    rows = [row("9+12=-", "34$", prompt=CONV1, want=want), row("31=", "13$", want=want),
            row("1=", "1$", prompt="1=", want=want),  # make_dataset.py's text prompt field
            row("2=", "2$", prompt=[1, 2], want=want), row("3=", "3$", prompt=[], want=want)]
    s = Server(tmp, mod)
    s.line()
    ans = s.ask(1, rows)
    assert ans == {"rewards": [[1.0, None], [0.0, None], [0.0, None], [0.0, None], [0.0, None]]}, ans
    s.close()


def test_reward_server_list(tk, tmp):
    """--list: the reward_funcs setting and a --reward-cmd that runs with the same Python, whatever PATH."""
    with open(os.path.join(tmp, "user_rewards.py"), "w") as f:
        f.write(USER_MODULE)
    with open(os.path.join(tmp, "neighbour.py"), "w") as f:
        f.write("def reward_imported(prompts, completions, **kw):\n    return [0.0] * len(prompts)\n")
    os.makedirs(os.path.join(tmp, "bin"))
    mypy = os.path.join(tmp, "bin", "my python")  # not "python3", and a space to quote
    os.symlink(os.path.realpath(PY), mypy)
    server = os.path.join(SRC, "tools", "reward_server.py")
    r = subprocess.run([mypy, server, "--tokenizer", TOKJSON, "--module", "user_rewards.py", "--list"], cwd=tmp,
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert len(lines) == 3 and lines[2] == "" and lines[0] == \
        "--set reward_funcs=reward_len,reward_answer,reward_check,reward_shape", r.stdout
    assert "module noise at import" in r.stderr and lines[1].startswith("--reward-cmd "), (r.stdout, r.stderr)
    (cmd,) = shlex.split(lines[1][len("--reward-cmd "):])
    argv = shlex.split(cmd)
    assert argv[0] == mypy and os.path.samefile(argv[1], server), argv
    assert argv[2:4] == ["--tokenizer", TOKJSON] and argv[4] == "--module" and os.path.isabs(argv[5]), argv
    assert os.path.samefile(argv[5], os.path.join(tmp, "user_rewards.py")) and len(argv) == 6, argv
    # dfg runs it through /bin/sh -c: no python3 on PATH, another directory
    p = subprocess.run(["/bin/sh", "-c", cmd], cwd="/", input="", capture_output=True, text=True, timeout=120,
                       env=dict(ENV, PATH="/nonexistent"))
    assert p.returncode == 0 and json.loads(p.stdout) == \
        {"reward_funcs": ["reward_len", "reward_answer", "reward_check", "reward_shape"]}, (p.stdout, p.stderr)
    assert f"reward_server: Python {platform.python_version()} ({mypy}) serves reward_len,reward_answer," in p.stderr, \
        p.stderr
    # --funcs is kept; without --tokenizer only the first line
    r = subprocess.run([mypy, server, "--tokenizer", TOKJSON, "--module", "user_rewards.py", "--funcs",
                        "reward_check,reward_len", "--list"], cwd=tmp, capture_output=True, text=True, env=ENV,
                       timeout=120)
    lines = r.stdout.splitlines()
    assert lines[0] == "--set reward_funcs=reward_check,reward_len", r.stdout
    assert shlex.split(shlex.split(lines[1][len("--reward-cmd "):])[0])[-2:] == ["--funcs", "reward_check,reward_len"]
    r = run([server, "--module", os.path.join(tmp, "user_rewards.py"), "--list"])
    names = "reward_len,reward_answer,reward_check,reward_shape"
    assert r.returncode == 0 and r.stdout == f"--set reward_funcs={names}\n", (r.stdout, r.stderr)
    assert "give --tokenizer to print the --reward-cmd line too" in r.stderr, r.stderr
    r = run([server, "--module", os.path.join(tmp, "user_rewards.py")], input="")
    assert r.returncode == 2 and "--tokenizer" in r.stderr and r.stdout == "", (r.returncode, r.stderr)
    # the naming rule is in --help
    r = run([server, "--help"])
    for words in ("--funcs f1,f2", "REWARD_FUNCS", "reward_*", "--set reward_funcs=", "--list", "does not apply",
                  "\"role\": \"assistant\""):
        assert words in r.stdout, (words, r.stdout)


# ---------------------------------------------------------------- reverse_reward against dfg's mixed
def ref_mixed(comp, ans):
    """dfg_reward_{exact,partial,format,mixed} (examples/tasks/tasks.c) in exact arithmetic."""
    m = comp.index(1) if 1 in comp else len(comp)
    eos = m < len(comp)
    exact = Fraction(int(eos and comp[:m] == ans))
    k = m + 1 if eos else m
    tgt = ans + [1]
    hits = sum(comp[i] == tgt[i] for i in range(min(k, len(tgt))))
    partial = Fraction(hits, max(k, len(tgt)))
    first = 1 if m > 0 and comp[0] == 13 else 0
    fmt = Fraction(int(eos and m - first >= 1 and all(2 <= t <= 11 for t in comp[first:m])))
    mixed = Fraction(1) if exact == 1 else Fraction(3, 10) * partial + Fraction(1, 10) * fmt
    return exact, partial, fmt, mixed


def test_reverse_reward(tk, tmp):
    R = load("examples/rewards/reverse_reward.py", "reverse_reward")
    tok = tk.Tokenizer.from_file(TOKJSON)
    rng = random.Random(7)
    comps, answers = [], []
    for _ in range(5000):
        ans = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.15:
            ans = "-" + ans  # sub's answers
        a = [VOCAB.index(c) for c in ans]
        kind = rng.randrange(5)
        if kind == 0:
            body = list(a)  # right
        elif kind == 1:
            body = [t if rng.random() < 0.7 else rng.randrange(15) for t in a]  # some wrong tokens
        elif kind == 2:
            body = a[:rng.randint(0, len(a))] + [rng.randrange(2, 12) for _ in range(rng.randint(0, 3))]  # wrong length
        elif kind == 3:
            body = ([13] if rng.random() < 0.5 else []) + [rng.randrange(2, 12) for _ in range(rng.randint(0, 9))]
        else:
            body = [rng.randrange(15) for _ in range(rng.randint(0, 12))]  # anything, PAD and EOS included
        if rng.random() < 0.7:  # EOS, then junk that must not count
            body = body + [1] + [rng.randrange(15) for _ in range(rng.randint(0, 4))]
        comps.append(body)
        answers.append(ans)
    text = tok.decode_batch(comps, skip_special_tokens=True)
    n = len(comps)
    kw = dict(prompts=[""] * n, completions=text, completion_ids=comps, truncated=[1 not in c for c in comps],
              answer=answers, step=1)
    E, P, F = R.reward_exact(**kw), R.reward_partial(**kw), R.reward_format(**kw)
    hits = 0
    for i in range(n):
        e, p, f, m = ref_mixed(comps[i], [VOCAB.index(c) for c in answers[i]])
        assert (E[i], P[i], F[i]) == (float(e), float(p), float(f)), (comps[i], answers[i], E[i], P[i], F[i])
        # the floats are the rationals, so the weights 0.6, 0.3, 0.1 give mixed exactly
        got = [Fraction(v).limit_denominator(1000) for v in (E[i], P[i], F[i])]
        assert got == [e, p, f] and Fraction(3, 5) * got[0] + Fraction(3, 10) * got[1] + Fraction(1, 10) * got[2] == m
        assert abs(0.6 * E[i] + 0.3 * P[i] + 0.1 * F[i] - float(m)) < 1e-12
        hits += e == 1
    assert 500 < hits < n, hits
    # text only (a plain TRL trainer): the same wherever the text says it all (no PAD, nothing after EOS)
    clean = [i for i in range(n) if 0 not in comps[i] and comps[i].count(1) <= 1 and comps[i][-1:] in ([1], [])
             and 1 not in comps[i][:-1]]
    tkw = dict(prompts=[""] * len(clean), completions=[text[i] for i in clean],
               truncated=[1 not in comps[i] for i in clean], answer=[answers[i] for i in clean])
    ckw = dict(tkw, completion_ids=[comps[i] for i in clean])
    for f in (R.reward_exact, R.reward_partial, R.reward_format):
        assert f(**tkw) == f(**ckw), f.__name__
    assert len(clean) > 200, len(clean)
    assert R.reward_exact([""], ["1"], completion_ids=[[3, 1]], answer=[None]) == [None]
    # through the server
    s = Server(tmp, os.path.join(SRC, "examples", "rewards", "reverse_reward.py"))
    assert s.line() == {"reward_funcs": ["reward_exact", "reward_partial", "reward_format"]}
    ans = s.ask(1, [row("123=", "321$", answer="321"), row("123=", "32", True, answer="321"),
                    row("123=", "3211$", answer="321")])
    assert ans == {"rewards": [[1.0, 1.0, 1.0], [0.0, 0.5, 0.0], [0.0, 0.6, 1.0]]}, ans
    s.close()


# ---------------------------------------------------------------- make_dataset
def test_make_dataset(tk, tmp):
    tok = tk.Tokenizer.from_file(TOKJSON)
    md = os.path.join(SRC, "examples", "tasks", "digits", "make_dataset.py")
    out = os.path.join(tmp, "reverse.jsonl")
    r = run([md, "--task", "reverse", "--digits", "5", "--rows", "300", "--seed", "7", "-o", out])
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 300
    for x in rows:
        assert sorted(x) == ["answer", "prompt", "prompt_ids"], x
        p = x["prompt"]
        assert len(p) == 6 and p[-1] == "=" and p[:-1].isdigit() and x["answer"] == p[-2::-1], x
        assert x["prompt_ids"] == tok.encode(p).ids, x
    # dfg_task_sample's own draws (examples/tasks/tasks.c, rng state 7)
    assert [(x["prompt"], x["answer"]) for x in rows[:3]] == [("74634=", "43647"), ("58255=", "55285"),
                                                                ("36040=", "04063")]
    assert len({x["prompt"] for x in rows}) > 250  # uniform digits, not a constant
    r = run([md, "--task", "sub", "--digits", "3", "--rows", "3", "--seed", "7"])
    assert [(x["prompt"], x["answer"]) for x in map(json.loads, r.stdout.splitlines())] == \
        [("746-345=", "401"), ("825-536=", "289"), ("040-071=", "-31")], r.stdout
    for task, d in (("copy", 4), ("sort", 6), ("add", 4), ("sub", 4)):
        r = run([md, "--task", task, "--digits", str(d), "--rows", "200", "--seed", "1"])
        for x in map(json.loads, r.stdout.splitlines()):
            p, a = x["prompt"], x["answer"]
            if task in ("add", "sub"):
                u, v = p[:d], p[d + 1:2 * d + 1]
                assert p[d] == ("+" if task == "add" else "-") and len(p) == 2 * d + 2, p
                assert a == str(int(u) + int(v) if task == "add" else int(u) - int(v)), x
            else:
                assert a == (p[:-1] if task == "copy" else "".join(sorted(p[:-1]))), x
    # the dataset through prepare_prompts (its "prompt" column) gives the same ids
    r = run([os.path.join(SRC, "tools", "prepare_prompts.py"), out, "--tokenizer", TOKJSON, "-o", out + ".2"])
    assert r.returncode == 0, r.stderr
    with open(out + ".2") as f:
        again = [json.loads(line) for line in f]
    assert again == [{"prompt_ids": x["prompt_ids"], "answer": x["answer"]} for x in rows]


def main():
    tk = find_tokenizers()
    failed = 0
    tests = [test_tokenizer, test_prepare_prompts, test_reward_server, test_chat_prepare, test_reward_server_chat,
             test_reward_server_list, test_reverse_reward, test_make_dataset]
    for t in tests:
        with tempfile.TemporaryDirectory(prefix="dfg_reward_tools.") as tmp:
            try:
                t(tk, tmp)
                print(f"ok   {t.__name__}")
            except Exception:
                failed += 1
                print(f"FAIL {t.__name__}")
                traceback.print_exc(file=sys.stdout)
    print(f"test_reward_tools: {len(tests) - failed}/{len(tests)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
