#!/usr/bin/env python3
"""prepare_prompts.py - text prompts -> dfg's prompt dataset (JSONL, docs/rewards.md).

Reads JSONL (one JSON object per line) or CSV (a header row, then one row per prompt), tokenizes
each row's prompt with a Hugging Face tokenizer.json and writes one line per row:

    {"prompt_ids": [5, 3, 6, 3, 7, 14], <every other column of the row>}

Usage:
    python3 tools/prepare_prompts.py IN.jsonl|IN.csv --tokenizer PATH/tokenizer.json -o OUT.jsonl
        [--prompt-column prompt]        the column holding the prompt text (default "prompt")
        [--template "Question: {prompt}\\nAnswer:"]
                                        the prompt is TEMPLATE.format(**row): every column of the
                                        row is available; \\n, \\t and \\\\ in it are escapes
        [--add-bos] [--bos-token TEXT]  put the BOS token first (the --bos-token text, else the
                                        bos_token of tokenizer_config.json beside tokenizer.json,
                                        else a special token named <s>, <|begin_of_text|> or <bos>);
                                        not added again when the prompt already starts with it
        [--max-prompt-length N] [--truncate error|left]
                                        a longer prompt is refused (error, the default) or cut
                                        from the left, keeping its last N tokens (left)
        [--format jsonl|csv]            the input's format (default: from the name, .csv is CSV)

IN may be "-" (standard input). Prompts are encoded without the tokenizer's own special tokens
(add_special_tokens=False): --add-bos is the one way to add any. The prompt column itself is not
copied (its ids are); every other column is, as it is (CSV cells are strings), except an input
column "prompt_ids" (a dataset this script wrote, tokenized again), which the new ids replace.

Refused with one line naming the input's line and exit code 2, writing nothing: malformed JSON
or a line that is not an object, a CSV row with the wrong number of cells, a missing column (the
prompt column, or one the template names), a prompt that is not text, a prompt that tokenizes
to nothing or that the tokenizer cannot encode, a prompt longer than --max-prompt-length with
--truncate error, and an input without rows. Blank JSONL
lines are skipped (line numbers count them). On success it prints one line:

    prepare_prompts: OUT.jsonl: 1000 rows, prompt length min 6 mean 6.00 max 6 (vocabulary 15)

`tokenizers` is taken from $DFG_HF_SITE, else .deps/hf-4.40.2 of this checkout (tools/deps.sh
--test installs it there), else the normal import path.
"""
import argparse
import csv
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = "prepare_prompts"
BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>")


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


def find_bos(tok, tok_path, text):
    """The BOS token's id (see --add-bos)."""
    if text is None:
        cfg = os.path.join(os.path.dirname(tok_path), "tokenizer_config.json")
        if os.path.exists(cfg):
            try:
                with open(cfg, encoding="utf-8") as f:
                    b = json.load(f).get("bos_token")
                text = b.get("content") if isinstance(b, dict) else b
            except (OSError, ValueError, AttributeError) as e:
                raise Refused(f"{cfg}: {e}")
    candidates = [text] if text else list(BOS_NAMES)
    for c in candidates:
        i = tok.token_to_id(c)
        if i is not None:
            return i
    if text:
        raise Refused(f"--add-bos: the tokenizer has no token {text!r}")
    raise Refused("--add-bos: the tokenizer names no BOS token (no bos_token in tokenizer_config.json, "
                  f"no {', '.join(BOS_NAMES)}): name it with --bos-token")


def unescape(template):
    """\\n, \\t and \\\\ of a template given on the command line."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], template)


def read_rows(f, name, fmt):
    """Yields (line number, row dict) of the input."""
    if fmt == "csv":
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise Refused(f"{name}:1: {e}")
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise Refused(f"{name}:1: the header names column {dup[0]!r} twice")
        while True:
            start = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise Refused(f"{name}:{start}: {e}")
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


def prompt_text(row, where, column, template):
    """The row's prompt text."""
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
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise Refused(f"{where}: the prompt is {json.dumps(text)[:40]}, not text")
    return str(text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="text prompts -> dfg prompt JSONL (docs/rewards.md)")
    ap.add_argument("input", help="JSONL or CSV file, - for standard input")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (or its directory)")
    ap.add_argument("-o", "--output", required=True, help="the dataset to write (- for standard output)")
    ap.add_argument("--prompt-column", default="prompt")
    ap.add_argument("--template")
    ap.add_argument("--add-bos", action="store_true")
    ap.add_argument("--bos-token")
    ap.add_argument("--max-prompt-length", type=int)
    ap.add_argument("--truncate", choices=("error", "left"), default="error")
    ap.add_argument("--format", choices=("jsonl", "csv"))
    a = ap.parse_args(argv)
    try:
        return run(a)
    except Refused as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2


def run(a):
    if a.max_prompt_length is not None and a.max_prompt_length < 1:
        raise Refused(f"--max-prompt-length must be at least 1, got {a.max_prompt_length}")
    tok, tok_path = load_tokenizer(a.tokenizer)
    bos = find_bos(tok, tok_path, a.bos_token) if a.add_bos else None
    template = unescape(a.template) if a.template is not None else None
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
                text = prompt_text(row, where, a.prompt_column, template)
                try:
                    ids = tok.encode(text, add_special_tokens=False).ids
                except Exception as e:
                    raise Refused(f"{where}: the tokenizer cannot encode the prompt {text[:40]!r}: {e}")
                if bos is not None and (not ids or ids[0] != bos):
                    ids = [bos] + ids
                if not ids:
                    raise Refused(f"{where}: the prompt {text[:40]!r} tokenizes to nothing")
                if a.max_prompt_length is not None and len(ids) > a.max_prompt_length:
                    if a.truncate == "error":
                        raise Refused(f"{where}: the prompt is {len(ids)} tokens, longer than "
                                      f"--max-prompt-length {a.max_prompt_length} (--truncate left cuts it)")
                    ids = ids[len(ids) - a.max_prompt_length:]
                    truncated += 1
                out = {"prompt_ids": ids}
                out.update((k, v) for k, v in row.items() if k not in (a.prompt_column, "prompt_ids"))
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
    print(summary, file=sys.stderr if a.output == "-" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
