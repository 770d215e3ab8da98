#!/usr/bin/env python3
"""make_digits_tokenizer.py - writes the Hugging Face tokenizer of dfg's digit tasks.

The built-in tasks (examples/tasks/dfg_tasks.h) use a 15-token character vocabulary:

    id:    0   1   2 .. 11      12  13  14
    char:  _   $   0 .. 9       +   -   =
           PAD EOS digits

This script writes it as a `tokenizers` file: a WordLevel model over single characters behind a
pre-tokenizer that isolates every character, a Fuse decoder (tokens are joined without spaces),
and "_" (PAD) and "$" (EOS) as special tokens, so decode(..., skip_special_tokens=True) drops
them. A character outside the vocabulary is an encoding error (there is no unknown token). It
also writes tokenizer_config.json beside it so that transformers' AutoTokenizer loads the
directory (eos_token "$", pad_token "_").

Usage:
    python3 tools/make_digits_tokenizer.py [OUT_DIR]     (default examples/tasks/digits)

`tokenizers` is taken from $DFG_HF_SITE, else .deps/hf-4.40.2 of this checkout (tools/deps.sh
--test installs it there), else the normal import path.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = "_$0123456789+-="  # index = token id, as in examples/tasks/tasks.c


def import_tokenizers():
    """Imports `tokenizers` from $DFG_HF_SITE or .deps/hf-4.40.2, else the normal path."""
    site = os.environ.get("DFG_HF_SITE") or os.path.join(HERE, "..", ".deps", "hf-4.40.2")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.insert(0, site)
    import tokenizers  # noqa: F401  (ImportError reaches the caller)
    return tokenizers


def build():
    """The tokenizer (a tokenizers.Tokenizer)."""
    tk = import_tokenizers()
    tok = tk.Tokenizer(tk.models.WordLevel({c: i for i, c in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = tk.decoders.Fuse()
    tok.add_special_tokens([tk.AddedToken("_", special=True, normalized=False),
                            tk.AddedToken("$", special=True, normalized=False)])
    return tok


def main():
    default = os.path.join(HERE, "..", "examples", "tasks", "digits")
    out = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else default)
    try:
        tok = build()
    except ImportError as e:
        sys.exit(f"make_digits_tokenizer: cannot import tokenizers ({e}); run tools/deps.sh --test")
    enc = tok.encode("31415=").ids
    assert enc == [5, 3, 6, 3, 7, 14], enc
    assert tok.decode([5, 3, 6, 3, 7, 14, 1, 0], skip_special_tokens=True) == "31415="
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=True) + "\n")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "$", "pad_token": "_",
              "padding_side": "left", "clean_up_tokenization_spaces": False, "model_max_length": 1024}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"make_digits_tokenizer: wrote {path} and tokenizer_config.json ({len(VOCAB)} tokens)")


if __name__ == "__main__":
    main()
