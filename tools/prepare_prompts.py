#!/usr/bin/env python3
"""prepare_prompts.py - text prompts and conversations -> dfg's prompt dataset (JSONL, docs/rewards.md).

Reads JSONL (one JSON object per line) or CSV (a header row, then one row per prompt), tokenizes
each row's prompt with a Hugging Face tokenizer.json and writes one line per row:

    {"prompt_ids": [5, 3, 6, 3, 7, 14], <every other column of the row>}

Usage:
    python3 tools/prepare_prompts.py IN.jsonl|IN.csv --tokenizer PATH/tokenizer.json -o OUT.jsonl
        [--prompt-column prompt]        the column holding the prompt (default "prompt"): text, or
                                        a conversation (below)
        [--template "Question: {prompt}\\nAnswer:"]
                                        the prompt is TEMPLATE.format(**row): every column of the
                                        row is available; \\n, \\t and \\\\ in it are escapes
        [--chat-template auto|none|FILE]
                                        the chat template of conversations (below): auto (the
                                        default) takes the tokenizer's, FILE a Jinja file, none
                                        refuses conversations
        [--chat]                        every prompt goes through the chat template: a text prompt
                                        (or the --template text) becomes one user message
        [--tools MODULE [--env-class NAME]]
                                        the tools the policy may call (tools/env_server.py's: the
                                        module's TOOLS, the class's methods): every prompt goes
                                        through the chat template (as --chat) with their JSON
                                        schemas, apply_chat_template(..., tools=...)
        [--add-bos] [--bos-token TEXT]  put the BOS token first (the --bos-token text, else the
                                        bos_token of tokenizer_config.json beside tokenizer.json,
                                        else a special token named <s>, <|begin_of_text|> or <bos>);
                                        not added again when the prompt already starts with it
        [--max-prompt-length N] [--truncate error|left]
                                        a longer prompt is refused (error, the default) or cut
                                        from the left, keeping its last N tokens (left)
        [--format jsonl|csv]            the input's format (default: from the name, .csv is CSV)

IN may be "-" (standard input). Prompts are encoded without the tokenizer's own special tokens
(add_special_tokens=False): --add-bos and the chat template are the ways to add any. The prompt
column itself is not copied (its ids are); every other column is, as it is (CSV cells are
strings), except an input column "prompt_ids" (a dataset this script wrote, tokenized again),
which the new ids replace.

Conversations (TRL's conversational format): a JSONL prompt that is a list of messages,
{"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]} (the
--prompt-column may be "messages"), is rendered with the chat template as transformers'
apply_chat_template(messages, add_generation_prompt=True) does, and the text tokenized with
add_special_tokens=False, as apply_chat_template tokenizes it. The template (auto) is the file
chat_template.jinja beside tokenizer.json, else tokenizer_config.json's "chat_template" (a text,
or a list of {"name", "template"} of which "default" is taken). It is rendered with Jinja2 as
transformers renders it: a sandboxed environment with trim_blocks and lstrip_blocks, the
raise_exception and strftime_now globals, loop controls, a tojson filter that does not escape
HTML, and as variables messages, add_generation_prompt=True and the special tokens of
tokenizer_config.json (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
mask_token, additional_special_tokens). The output row keeps the message list as its field
"prompt" (whatever the prompt column's name): tools/reward_server.py sees a row whose field
"prompt" is a list of messages as conversational and hands its reward functions TRL's
conversational prompts and completions. A text prompt is tokenized as it is unless --chat is
given; --chat with a text prompt writes [{"role": "user", "content": TEXT}] as "prompt".

Refused with one line naming the input's line and exit code 2, writing nothing: malformed JSON
or a line that is not an object, a CSV row with the wrong number of cells, a missing column (the
prompt column, or one the template names), a prompt that is neither text nor a conversation, a
conversation without a chat template (none in the tokenizer's directory, or --chat-template
none) or without jinja2 to render it, a conversation the template refuses (raise_exception),
a prompt that tokenizes to nothing or that the tokenizer cannot encode, a prompt longer than
--max-prompt-length with --truncate error, and an input without rows. Blank JSONL
lines are skipped (line numbers count them). On success it prints one line:

    prepare_prompts: OUT.jsonl: 1000 rows, prompt length min 6 mean 6.00 max 6 (vocabulary 15)

(with ", 1000 conversations rendered with the chat template of FILE" when there are some).

`tokenizers` is taken from $DFG_HF_SITE, else .deps/hf-4.40.2 of this checkout (tools/deps.sh
--test installs it there), else the normal import path; jinja2 (Debian python3-jinja2) from the
normal path, and only when a conversation is rendered.
"""
import argparse
import csv
import datetime
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = "prepare_prompts"
BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>")
# transformers' SPECIAL_TOKENS_ATTRIBUTES: the variables apply_chat_template gives a template
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                      "additional_special_tokens")
JINJA2_HINT = "apt-get install python3-jinja2 (tools/deps.sh --test) or pip install jinja2"


class Refused(Exception):
    """A refusal: one line for stderr, exit code 2."""


def import_tokenizers():
    """Imports `tokenizers` from $DFG_HF_SITE or .deps/hf-4.40.2, else the normal path."""
    site = os.environ.get("DFG_HF_SITE") or os.path.join(HERE, "..", ".deps", "hf-4.40.2")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.insert(0, site)
    import tokenizers
    return tokenizers


def load_tokenizer(path):
    """(tokenizers.Tokenizer, the path of the file) for a tokenizer.json or its directory."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    try:
        tk = import_tokenizers()
    except ImportError as e:
        raise Refused(f"cannot import tokenizers ({e}): run tools/deps.sh --test or pip install tokenizers")
    try:
        return tk.Tokenizer.from_file(path), path
    except Exception as e:  # tokenizers raises its own Exception type
        raise Refused(f"{path}: not a tokenizer.json: {e}")


def read_config(path):
    """A JSON object file beside tokenizer.json (tokenizer_config.json...): {} when there is none."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise Refused(f"{path}: {e}")
    if not isinstance(cfg, dict):
        raise Refused(f"{path}: not a JSON object")
    return cfg


def token_text(v):
    """A special token's text: tokenizer_config.json gives a string or an AddedToken object."""
    return v.get("content") if isinstance(v, dict) else v


def find_bos(tok, tok_path, text):
    """The BOS token's id (see --add-bos)."""
    if text is None:
        b = read_config(os.path.join(os.path.dirname(tok_path), "tokenizer_config.json")).get("bos_token")
        text = token_text(b)
        if text is not None and not isinstance(text, str):
            raise Refused(f"{os.path.dirname(tok_path)}/tokenizer_config.json: bos_token is not text")
    candidates = [text] if text else list(BOS_NAMES)
    for c in candidates:
        i = tok.token_to_id(c)
        if i is not None:
            return i
    if text:
        raise Refused(f"--add-bos: the tokenizer has no token {text!r}")
    raise Refused("--add-bos: the tokenizer names no BOS token (no bos_token in tokenizer_config.json, "
                  f"no {', '.join(BOS_NAMES)}): name it with --bos-token")


class ChatTemplate:
    """A chat template rendered as transformers' apply_chat_template renders one.

    transformers (tokenization_utils_base.py, _compile_jinja_template and apply_chat_template):
    an ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), raise_exception;
    newer releases add strftime_now, loop controls, {% generation %} (a marker for assistant
    masks: its body renders as it is) and a tojson filter that is json.dumps without HTML
    escapes, keys in their order. The variables: messages, add_generation_prompt and the
    special tokens (special_tokens_map: those set, as text)."""

    def __init__(self, text, where, tokens, why="a prompt"):
        try:
            import jinja2
            import jinja2.ext
            import jinja2.sandbox
        except ImportError as e:
            raise Refused(f"{why}: its chat template ({where}) needs jinja2, which cannot be imported ({e}): "
                          f"{JINJA2_HINT}")
        if int(jinja2.__version__.split(".")[0]) < 3:
            raise Refused(f"{why}: its chat template ({where}) needs jinja2 3 or newer, not {jinja2.__version__}: "
                          f"{JINJA2_HINT}")

        class Generation(jinja2.ext.Extension):
            tags = {"generation"}

            def parse(self, parser):
                next(parser.stream)
                return parser.parse_statements(("name:endgeneration",), drop_needle=True)

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                           extensions=[Generation, jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self.template = env.from_string(text)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise Refused(f"{where}: the chat template is not valid Jinja (its line {e.lineno}: {e.message})")
        self.where, self.tokens, self.error = where, tokens, jinja2.exceptions.TemplateError

    def render(self, messages, where, add_generation_prompt=True, **extra):
        """The conversation's text, ending with the assistant's turn (add_generation_prompt=True);
        extra: more variables (tools=[schemas], as apply_chat_template's tools)."""
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, **extra,
                                        **self.tokens)
        except self.error as e:
            raise Refused(f"{where}: the chat template ({self.where}) refused the conversation: {e}")
        except Exception as e:  # a template's own bug (a type error, a sandbox refusal)
            raise Refused(f"{where}: the chat template ({self.where}) failed: {type(e).__name__}: {e}")


def template_tokens(tok_dir, cfg):
    """The special tokens transformers 4.40 gives a template: tokenizer_config.json's, where a
    config without added_tokens_decoder (legacy) takes special_tokens_map.json's over them."""
    vals = {k: cfg[k] for k in SPECIAL_TOKEN_KEYS if k in cfg}
    if "added_tokens_decoder" not in cfg:
        legacy = read_config(os.path.join(tok_dir, "special_tokens_map.json"))
        vals.update((k, v) for k, v in legacy.items() if k in SPECIAL_TOKEN_KEYS)
    out = {}
    for k, v in vals.items():
        v = [token_text(x) for x in v] if isinstance(v, list) else token_text(v)
        if v:
            out[k] = v
    return out


def find_chat_template(tok_dir, choice):
    """(the template's text, where it is) for --chat-template CHOICE, or (None, why there is none)."""
    if choice == "none":
        return None, "--chat-template none was given"
    path = choice if choice != "auto" else os.path.join(tok_dir, "chat_template.jinja")
    if choice != "auto" or os.path.exists(path):  # transformers: chat_template.jinja wins over the config
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except (OSError, UnicodeDecodeError) as e:
            raise Refused(f"--chat-template {path}: {getattr(e, 'strerror', None) or e}")
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    t = read_config(cfg_path).get("chat_template")
    if isinstance(t, list):
        named = {x.get("name"): x.get("template") for x in t if isinstance(x, dict)}
        if "default" not in named:
            raise Refused(f"{cfg_path}: chat_template names {', '.join(map(repr, named))} but no 'default': "
                          "give the template with --chat-template FILE")
        t = named["default"]
    if t is None:
        has = "has no chat_template" if os.path.exists(cfg_path) else "does not exist"
        return None, f"the tokenizer has no chat template ({cfg_path} {has}, and there is no {path}): " \
                     "give one with --chat-template FILE"
    if not isinstance(t, str):
        raise Refused(f"{cfg_path}: chat_template is neither text nor a list of {{\"name\", \"template\"}}")
    return t, cfg_path


class Chat:
    """The chat template of --chat-template, compiled when a conversation first needs it."""

    def __init__(self, tok_path, choice):
        self.dir, self.choice, self.template, self.used = os.path.dirname(tok_path), choice, None, 0
        self.text, self.tools = None, None  # the template's text; the tools' JSON schemas (--tools)

    def load(self, why):
        """Compiles the template (once); `why` starts the refusal when there is none."""
        if self.template is None:
            text, source = find_chat_template(self.dir, self.choice)
            if text is None:
                raise Refused(f"{why} and needs a chat template: {source}")
            cfg = read_config(os.path.join(self.dir, "tokenizer_config.json"))
            self.template = ChatTemplate(text, source, template_tokens(self.dir, cfg), why)
            self.text = text

    def render(self, messages, where):
        self.load(f"{where}: the prompt is a conversation (a list of messages)")
        self.used += 1
        return self.template.render(messages, where, **({"tools": self.tools} if self.tools else {}))


def unescape(template):
    """\\n, \\t and \\\\ of a template given on the command line."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], template)


def next_record(reader, name, line):
    """The next record of a CSV reader, None at the end; a malformed one is refused at its first line."""
    try:
        return next(reader)
    except StopIteration:
        return None
    except csv.Error as e:
        raise Refused(f"{name}:{line}: {e}")


def read_rows(f, name, fmt):
    """Yields (line number, row dict) of the input."""
    if fmt == "csv":
        reader = csv.reader(f)
        header = next_record(reader, name, 1)
        if header is None:
            return
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise Refused(f"{name}:1: the header names column {dup[0]!r} twice")
        while True:
            start = reader.line_num + 1
            cells = next_record(reader, name, start)
            if cells is None:
                return
            if not cells:
                continue  # a blank line
            if len(cells) != len(header):
                raise Refused(f"{name}:{start}: {len(cells)} cells, the header has {len(header)}")
            yield start, dict(zip(header, cells))
    else:
        for lineno, line in enumerate(f, 1):
            if not line.strip(" \t\r\n"):
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                raise Refused(f"{name}:{lineno}: malformed JSON at column {e.colno}: {e.msg}")
            if not isinstance(row, dict):
                raise Refused(f"{name}:{lineno}: not a JSON object")
            yield lineno, row


def describe(v):
    """What a JSON value is, in a few words (never a cut piece of it)."""
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, str):
        return "a text"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, list):
        return "a JSON array"
    if isinstance(v, dict):
        return "a JSON object"
    return type(v).__name__


def short(text):
    """A text for a message: its repr, the first 40 characters of a longer one and its length."""
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"


def conversation(v, where):
    """The message list of a conversational prompt (TRL: a list whose first item is an object with
    a "role"), None for text; refused when it is a list but not of messages."""
    if not isinstance(v, list):
        return None
    if not v:
        raise Refused(f"{where}: the prompt is an empty list (a conversation needs at least one message)")
    for i, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            what = "an object without a text \"role\"" if isinstance(m, dict) else f"{describe(m)}, not a message"
            raise Refused(f"{where}: the prompt is a list, but its item {i} is {what} (a conversation is a list of "
                          "{\"role\": ..., \"content\": ...} messages)")
    return v


def prompt_value(row, where, column, template):
    """The row's prompt: its text, or its conversation (a list of messages)."""
    if template is not None:
        try:
            text = template.format(**row)
        except KeyError as e:
            raise Refused(f"{where}: no column {e.args[0]!r} (the template names it; the row has "
                          f"{', '.join(map(repr, row)) or 'none'})")
        except (IndexError, ValueError, AttributeError) as e:
            raise Refused(f"{where}: the template does not apply: {e}")
    else:
        if column not in row:
            raise Refused(f"{where}: no column {column!r} (the row has {', '.join(map(repr, row)) or 'none'})")
        text = row[column]
    messages = conversation(text, where)
    if messages is not None:
        return messages
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise Refused(f"{where}: the prompt ({column!r}) is {describe(text)}, neither text nor a conversation "
                      "(a list of {\"role\": ..., \"content\": ...} messages)")
    return str(text)


def tool_schemas(module, env_class):
    """The JSON schemas of --tools MODULE [--env-class NAME], as tools/env_server.py serves them."""
    from env_server import load_hosted  # (env_server imports this file: imported when needed)
    try:
        return load_hosted(module, env_class).schemas
    except Exception as e:
        raise Refused(f"--tools {module}: {type(e).__name__}: {e}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="text prompts -> dfg prompt JSONL (docs/rewards.md)")
    ap.add_argument("input", help="JSONL or CSV file, - for standard input")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (or its directory)")
    ap.add_argument("-o", "--output", required=True, help="the dataset to write (- for standard output)")
    ap.add_argument("--prompt-column", default="prompt")
    ap.add_argument("--template")
    ap.add_argument("--chat-template", default="auto", metavar="auto|none|FILE",
                    help="the chat template of conversations: the tokenizer's (auto), none, or a Jinja file")
    ap.add_argument("--chat", action="store_true", help="render text prompts too, as one user message each")
    ap.add_argument("--tools", metavar="MODULE", help="render every prompt with the tools of MODULE (its TOOLS, and "
                    "the methods of --env-class): the chat template shows the model their JSON schemas")
    ap.add_argument("--env-class", metavar="NAME", help="with --tools: the module's environment class")
    ap.add_argument("--add-bos", action="store_true")
    ap.add_argument("--bos-token")
    ap.add_argument("--max-prompt-length", type=int)
    ap.add_argument("--truncate", choices=("error", "left"), default="error")
    ap.add_argument("--format", choices=("jsonl", "csv"))
    a = ap.parse_args(argv)
    try:
        return run(a)
    except Refused as e:
        print(f"{PROG}: {' '.join(str(e).splitlines())}", file=sys.stderr)  # always one line
        return 2


def run(a):
    if a.max_prompt_length is not None and a.max_prompt_length < 1:
        raise Refused(f"--max-prompt-length must be at least 1, got {a.max_prompt_length}")
    tok, tok_path = load_tokenizer(a.tokenizer)
    bos = find_bos(tok, tok_path, a.bos_token) if a.add_bos else None
    template = unescape(a.template) if a.template is not None else None
    chat = Chat(tok_path, a.chat_template)
    if a.env_class and not a.tools:
        raise Refused("--env-class names a class of the --tools module: give --tools MODULE too")
    if a.tools:
        chat.tools = tool_schemas(a.tools, a.env_class)
        a.chat = True  # tools live in the chat template
    if a.chat or a.chat_template not in ("auto", "none"):  # asked for: its absence is said before any row
        chat.load("--chat renders every prompt" if a.chat else f"--chat-template {a.chat_template}")
    fmt = a.format or ("csv" if a.input.lower().endswith(".csv") else "jsonl")
    name = "<stdin>" if a.input == "-" else a.input
    lines, lengths, truncated = [], [], 0
    try:
        f = sys.stdin if a.input == "-" else open(a.input, encoding="utf-8", newline="" if fmt == "csv" else None)
    except OSError as e:
        raise Refused(f"{name}: {e.strerror}")
    with f:
        try:
            for lineno, row in read_rows(f, name, fmt):
                where = f"{name}:{lineno}"
                value = prompt_value(row, where, a.prompt_column, template)
                messages = value if isinstance(value, list) else None
                if messages is None and a.chat:
                    messages = [{"role": "user", "content": value}]
                if messages is not None:
                    if a.prompt_column != "prompt" and "prompt" in row:
                        raise Refused(f"{where}: the row has a column 'prompt' besides the prompt column "
                                      f"{a.prompt_column!r}; the conversation is written as 'prompt' (where "
                                      "reward_server.py reads it): rename that column")
                    text = chat.render(messages, where)
                else:
                    text = value
                try:
                    ids = tok.encode(text, add_special_tokens=False).ids
                except Exception as e:
                    raise Refused(f"{where}: the tokenizer cannot encode the prompt {short(text)}: {e}")
                if bos is not None and (not ids or ids[0] != bos):
                    ids = [bos] + ids
                if not ids:
                    raise Refused(f"{where}: the prompt {short(text)} tokenizes to nothing")
                if a.max_prompt_length is not None and len(ids) > a.max_prompt_length:
                    if a.truncate == "error":
                        raise Refused(f"{where}: the prompt is {len(ids)} tokens, longer than "
                                      f"--max-prompt-length {a.max_prompt_length} (--truncate left cuts it)")
                    ids = ids[len(ids) - a.max_prompt_length:]
                    truncated += 1
                out = {"prompt_ids": ids}
                if messages is not None:
                    out["prompt"] = messages
                skip = (a.prompt_column, "prompt_ids") + (("prompt",) if messages is not None else ())
                out.update((k, v) for k, v in row.items() if k not in skip)
                lines.append(json.dumps(out, ensure_ascii=False))
                lengths.append(len(ids))
        except UnicodeDecodeError as e:
            raise Refused(f"{name}: not UTF-8: {e}")
    if not lines:
        raise Refused(f"{name}: no rows")
    text = "\n".join(lines) + "\n"
    if a.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        d = os.path.dirname(os.path.abspath(a.output))
        tmp = None
        try:  # written whole or not at all
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".prepare_prompts.")
            with os.fdopen(fd, "w", encoding="utf-8") as g:
                g.write(text)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 otherwise
            os.replace(tmp, a.output)
        except OSError as e:
            if tmp and os.path.exists(tmp):
                os.unlink(tmp)
            raise Refused(f"{a.output}: {e.strerror}")
    summary = (f"{PROG}: {'<stdout>' if a.output == '-' else a.output}: {len(lines)} rows, prompt length "
               f"min {min(lengths)} mean {sum(lengths) / len(lengths):.2f} max {max(lengths)} "
               f"(vocabulary {tok.get_vocab_size(with_added_tokens=True)})")
    if truncated:
        summary += f", {truncated} cut from the left to {a.max_prompt_length}"
    if chat.used:
        summary += f", {chat.used} conversations rendered with the chat template of {chat.template.where}"
    print(summary, file=sys.stderr if a.output == "-" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
