#!/usr/bin/env python3
"""tiny_qwen.py - a tiny Qwen2-shaped Hugging Face model directory, for trying tools and
environments on a CPU in minutes (docs/agents.md): the files a Qwen2.5 directory has, small.

    python3 examples/envs/tiny_qwen.py OUT_DIR [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2]
        [--intermediate 128] [--vocab 512] [--positions 1024] [--add-token TEXT ...]

Writes OUT_DIR/config.json (Qwen2ForCausalLM, float32), generation_config.json, tokenizer.json
and tokenizer_config.json. The tokenizer is a byte-level BPE trained here on a little English
(so any text encodes), with Qwen2.5's special tokens (<|endoftext|> the pad, <|im_start|>,
<|im_end|> the EOS) and its tool tags (<tool_call>, </tool_call>, <tool_response>,
</tool_response>) as added tokens; its chat template is Qwen2.5's with tools: the tools' JSON
schemas in the system message, calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>,
tool answers in a user turn between <tool_response> tags. --add-token adds more tokens (one
token per text; tools/bench/agents_setup.py gives a whole tool call one id). There are no
weights: dfg makes random ones from config.json (`dfg run --save DIR/` writes them), as
transformers' from_config does.

Needs `tokenizers` ($DFG_HF_SITE, else .deps/hf-4.40.2 of this checkout: tools/deps.sh --test).
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.environ.get("DFG_HF_SITE") or os.path.join(ROOT, ".deps", "hf-4.40.2")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2.5's chat template with tools (its system default and tool blocks), as tokenizer_config.json
# of Qwen/Qwen2.5-*-Instruct writes it, less the multi-line system prompt's wording.
CHAT_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
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

CORPUS = """You are a helpful assistant. You may call one or more functions to assist with the user query.
Guess the number between 1 and 100. Is it higher or lower? The number is higher. The number is lower.
You guessed it: the answer is right. Let me think about the question and then call the function.
function name arguments description parameters properties type integer string number object required
the first number the second number the guess the answer tool response user assistant system
What is the product of 12 and 34? Call the tool, read its answer, then say the result in one line.
Each turn, the model writes a call; the environment answers; the model goes on until it is done.
"""


def tokenizer(tk, vocab, extra):
    """A byte-level BPE with Qwen2.5's specials (added first: ids 0, 1, 2) and tool tags."""
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab - len(TOOL_TAGS) - len(extra), special_tokens=SPECIALS,
                                     show_progress=False, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    text = CORPUS + CHAT_TEMPLATE.replace("\\n", "\n")  # the template's words, so that prompts are short
    tok.train_from_iterator([text] * 4 + text.split("\n"), trainer)
    tok.add_tokens(TOOL_TAGS + list(extra))
    return tok


def write(out, a):
    sys.path.insert(0, SITE)
    try:
        import tokenizers as tk
    except ImportError as e:
        sys.exit(f"tiny_qwen: needs tokenizers (looked in {SITE}: run tools/deps.sh --test): {e}")
    os.makedirs(out, exist_ok=True)
    tok = tokenizer(tk, a.vocab, a.add_token)
    tok.save(os.path.join(out, "tokenizer.json"))
    eos, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    files = {
        "tokenizer_config.json": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                                  "chat_template": CHAT_TEMPLATE, "tokenizer_class": "Qwen2TokenizerFast",
                                  "model_max_length": a.positions},
        "config.json": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": a.hidden,
                        "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
                        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
                        "vocab_size": tok.get_vocab_size(), "max_position_embeddings": a.positions,
                        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu",
                        "initializer_range": 0.02, "tie_word_embeddings": False, "use_sliding_window": False,
                        "bos_token_id": pad, "eos_token_id": eos, "torch_dtype": "float32"},
        "generation_config.json": {"bos_token_id": pad, "eos_token_id": [eos], "pad_token_id": pad},
    }
    for name, obj in files.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
    return tok


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tiny_qwen", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512, help="the tokenizer's size, added tokens included")
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--add-token", action="append", default=[], help="one more token (repeatable)")
    a = ap.parse_args(argv)
    tok = write(a.out, a)
    print(f"tiny_qwen: {a.out}: Qwen2 {a.layers} layers x {a.hidden}, vocabulary {tok.get_vocab_size()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
