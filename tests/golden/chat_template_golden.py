#!/usr/bin/python3
"""Golden test: tools/prepare_prompts.py's chat templates against transformers' apply_chat_template.

It writes a tokenizer directory (a byte-level BPE tokenizer.json trained here, with special
tokens <s>, </s>, <|im_start|>, <|im_end|>, <|tool|>, <pad>, <unk>) and, for each of three chat
templates written in the style of real ones, a tokenizer_config.json:

  chatml     Qwen2-like: a default system message, loops, conditionals, raise_exception on an
             unknown role, trim, tojson on tool results, bos_token (an AddedToken object in the
             config) first, eos_token after each assistant turn, add_generation_prompt
  llama2     Llama-2-like: the system message folded into the first user turn, roles that must
             alternate (raise_exception), bos/eos around each exchange; given as the "default" of
             a list of named templates (transformers' multi-template form)
  jinja_file a chat_template.jinja file beside the config, which holds another template: the
             file wins (newer transformers read it; 4.40.2 is handed its text); it uses
             additional_special_tokens, pad_token and unk_token

Then it writes the conversations as TRL conversational rows ({"prompt": [messages], "answer":
...}), runs prepare_prompts.py on them, and requires every row's prompt_ids to equal
PreTrainedTokenizerFast.from_pretrained(dir).apply_chat_template(messages,
add_generation_prompt=True, tokenize=True), the row's other fields kept and the messages kept as
"prompt". Text prompts with --chat equal the same call on [{"role": "user", "content": text}].
A conversation a template refuses (raise_exception) is refused by both, with the template's
message. As a check of the check, rendering chatml without trim_blocks/lstrip_blocks gives
other ids.

Exit codes: 0 all agree, 1 a mismatch or an error, 77 tokenizers, transformers or jinja2 cannot
be imported (ctest: skipped) -- unless DFG_REQUIRE_HF=1, which makes that a failure. The
transformers directory (pip --target, tools/deps.sh --test) is --hf-site, or the environment's
DFG_HF_SITE, which wins.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import golden_common

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
PREPARE = os.path.join(SRC, "tools", "prepare_prompts.py")
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|tool|>", "<pad>", "<unk>"]

CHATML = """{%- if messages[0]['role'] == 'system' -%}
    {%- set system_message = messages[0]['content'] -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set system_message = 'You are a helpful assistant.' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{{ bos_token }}<|im_start|>system
{{ system_message }}<|im_end|>
{% for message in loop_messages %}
    {% if message['role'] not in ['user', 'assistant', 'tool'] %}
        {{ raise_exception('Unknown role: ' + message['role']) }}
    {% endif %}
<|im_start|>{{ message['role'] }}
    {% if message['role'] == 'tool' %}
{{ message['content'] | tojson }}
    {% else %}
{{ message['content'] | trim }}
    {% endif %}
<|im_end|>{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}

{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}")

JINJA_FILE = """{% for m in messages %}
{% if m.role == 'tool' %}
{{ additional_special_tokens[0] }}{{ m.content }}{{ eos_token }}
{% elif loop.first and m.role != 'system' %}
{{ unk_token }}[default system]{{ pad_token }}
{{ m.role | upper }}: {{ m.content }}{{ eos_token }}
{% else %}
{{ m.role | upper }}: {{ m.content }}{{ eos_token }}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}ASSISTANT:{% endif %}"""

CONVERSATIONS = {
    "chatml": [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "  Hello there!  \n"}],
        [{"role": "user", "content": "Reverse 123."}, {"role": "assistant", "content": "321"},
         {"role": "user", "content": "And 4567?"}],
        [{"role": "user", "content": "Ünïcödé — 日本語 ✓ and <|im_end|> inside"}],
        [{"role": "user", "content": "Call the tool."}, {"role": "assistant", "content": "calling add(40, 2)"},
         {"role": "tool", "content": "42"}],
        [{"role": "user", "content": ""}],
    ],
    "llama2": [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": " Name a prime. "}],
        [{"role": "user", "content": "Reverse 123."}, {"role": "assistant", "content": "321"},
         {"role": "user", "content": "And 4567?"}],
    ],
    "jinja_file": [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}, {"role": "tool", "content": "7"}],
    ],
}
REFUSED = {"chatml": ([{"role": "robot", "content": "beep"}], "Unknown role: robot"),
           "llama2": ([{"role": "assistant", "content": "hi"}], "Conversation roles must alternate")}
TEXTS = ["What is 2+2?", "  spaced  ", "日本語"]  # --chat: text prompts as one user message


def unavailable(why):
    """A library missing: a skip, or a failure when DFG_REQUIRE_HF=1 (golden_common.py)."""
    golden_common.unavailable("chat_template_golden", why)


def write_tokenizer(tk, d):
    """A byte-level BPE tokenizer.json trained on the conversations (deterministic for a corpus)."""
    corpus = [m["content"] for convs in CONVERSATIONS.values() for c in convs for m in c] + TEXTS
    corpus += ["You are a helpful assistant.", "system user assistant tool [INST] [/INST] <<SYS>> <</SYS>>",
               "ASSISTANT: USER: SYSTEM: TOOL: [default system]"] * 3
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS, show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.save(os.path.join(d, "tokenizer.json"))


def write_config(d, name):
    """tokenizer_config.json (and chat_template.jinja) of one template."""
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
           "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "rstrip": False,
                         "normalized": False, "single_word": False},  # the form transformers 4.x writes
           "eos_token": "</s>", "pad_token": "<pad>", "unk_token": {"__type": "AddedToken", "content": "<unk>"},
           "additional_special_tokens": ["<|tool|>"]}
    if name == "chatml":
        cfg["chat_template"] = CHATML
    elif name == "llama2":
        cfg["chat_template"] = [{"name": "tool_use", "template": CHATML}, {"name": "default", "template": LLAMA2}]
    else:
        cfg["chat_template"] = CHATML  # the file beside it wins
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(JINJA_FILE)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


def prepare(site, d, inp, rows, *args):
    """prepare_prompts.py on rows: (the process, the output rows or None)."""
    with open(inp, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = inp + ".out"
    if os.path.exists(out):
        os.unlink(out)
    env = dict(os.environ, DFG_HF_SITE=site, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, PREPARE, inp, "--tokenizer", os.path.join(d, "tokenizer.json"), "-o", out]
                       + list(args), capture_output=True, text=True, env=env, timeout=120)
    got = None
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            got = [json.loads(line) for line in f]
    return r, got


def check_template(site, transformers, jinja2, work, name):
    """The failures (strings) of one template."""
    d = os.path.join(work, name)
    os.makedirs(d)
    shutil.copy(os.path.join(work, "tokenizer.json"), d)
    write_config(d, name)
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(d)
    kw = {"chat_template": JINJA_FILE} if name == "jinja_file" else {}  # 4.40.2 does not read the file
    fails = []
    convs = CONVERSATIONS[name]
    rows = [{"prompt": c, "answer": f"a{i}", "id": i} for i, c in enumerate(convs)]
    r, got = prepare(site, d, os.path.join(d, "conv.jsonl"), rows)
    if r.returncode != 0 or got is None:
        return [f"{name}: prepare_prompts exited {r.returncode}: {r.stderr.strip()}"]
    specials = {hf.convert_tokens_to_ids(t) for t in SPECIALS}
    for i, c in enumerate(convs):
        want = hf.apply_chat_template(c, add_generation_prompt=True, tokenize=True, **kw)
        if got[i]["prompt_ids"] != want:
            text = hf.apply_chat_template(c, add_generation_prompt=True, tokenize=False, **kw)
            fails.append(f"{name}: conversation {i}: prepare_prompts {got[i]['prompt_ids']}, transformers {want} "
                         f"(its text {text!r})")
        if got[i] != {"prompt_ids": got[i]["prompt_ids"], "prompt": c, "answer": f"a{i}", "id": i}:
            fails.append(f"{name}: row {i}: fields not kept: {got[i]}")
        if not specials & set(want):
            fails.append(f"{name}: conversation {i}: no special token in {want} (the test would not see them)")
    if f"{len(convs)} conversations rendered" not in r.stdout:
        fails.append(f"{name}: summary {r.stdout.strip()!r}")
    # text prompts with --chat: one user message each
    r, got = prepare(site, d, os.path.join(d, "text.jsonl"), [{"q": t} for t in TEXTS], "--chat",
                     "--prompt-column", "q")
    for i, t in enumerate(TEXTS):
        msgs = [{"role": "user", "content": t}]
        want = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kw)
        if got is None or got[i] != {"prompt_ids": want, "prompt": msgs}:
            fails.append(f"{name}: --chat text {t!r}: {got and got[i]} (rc {r.returncode} {r.stderr.strip()}), "
                         f"transformers {want}")
    if name in REFUSED:
        msgs, words = REFUSED[name]
        try:
            hf.apply_chat_template(msgs, add_generation_prompt=True, **kw)
            fails.append(f"{name}: transformers rendered {msgs}")
        except jinja2.exceptions.TemplateError as e:
            if words not in str(e):
                fails.append(f"{name}: transformers refused with {e}")
        r, got = prepare(site, d, os.path.join(d, "bad.jsonl"), rows[:1] + [{"prompt": msgs}])
        lines = r.stderr.strip().split("\n")
        if r.returncode != 2 or got is not None or len(lines) != 1 or "bad.jsonl:2:" not in lines[0] \
                or words not in lines[0]:
            fails.append(f"{name}: refusal: rc {r.returncode}, stderr {r.stderr!r}")
    if name == "chatml":  # the check of the check: Jinja without trim_blocks/lstrip_blocks renders other text
        env = jinja2.sandbox.ImmutableSandboxedEnvironment()
        loose = env.from_string(CHATML).render(messages=convs[2], add_generation_prompt=True, **hf.special_tokens_map)
        strict = hf.apply_chat_template(convs[2], add_generation_prompt=True)
        if hf(loose, add_special_tokens=False)["input_ids"] == strict:
            fails.append("chatml: rendering without trim_blocks/lstrip_blocks gives the same ids")
    print(f"chat_template_golden: {name}: {len(convs)} conversations, {len(TEXTS)} --chat texts"
          f"{', a refusal' if name in REFUSED else ''}: {'FAIL' if fails else 'ok'}")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hf-site", default=os.path.join(SRC, ".deps", "hf-4.40.2"),
                    help="directory transformers was installed into (pip --target); DFG_HF_SITE wins")
    a = ap.parse_args()
    site = os.path.abspath(os.environ.get("DFG_HF_SITE") or a.hf_site)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.dont_write_bytecode = True
    if os.path.isdir(site):
        sys.path.insert(0, site)
    try:
        import jinja2
        import jinja2.sandbox
        import tokenizers
        import transformers
        transformers.PreTrainedTokenizerFast  # noqa: B018 - its lazy import
    except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
        unavailable(f"cannot import jinja2, tokenizers and transformers ({e}; transformers from {site})")
    print(f"chat_template_golden: transformers {transformers.__version__} ({site}), jinja2 {jinja2.__version__}")
    fails = []
    with tempfile.TemporaryDirectory(prefix="dfg_chat_golden.") as work:
        write_tokenizer(tokenizers, work)
        for name in CONVERSATIONS:
            fails += check_template(site, transformers, jinja2, work, name)
    for f in fails:
        print(f"chat_template_golden: FAIL: {f}")
    print(f"chat_template_golden: {'FAIL' if fails else 'all ids equal'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
