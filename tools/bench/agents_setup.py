#!/usr/bin/python3
"""agents_setup.py - the world of tools/bench/agents.py: a Qwen2-shaped model directory whose
policy calls a tool at a rate it is set to, its prompts, and its environment.

    /usr/bin/python3 tools/bench/agents_setup.py WORK [--hidden 256] [--layers 4] [--seed 1]

Writes, under WORK:
  model/               examples/envs/tiny_qwen.py's directory (Qwen2.5's chat template and
                       special tokens, a byte-level BPE of --vocab ids), one more token holding a
                       whole call, <tool_call>{"name": "lookup", "arguments": {"key": 7}}</tool_call>
  call0.safetensors    weights (Hugging Face Qwen2 names) of a policy that never calls the tool
  mixed.safetensors    ... that calls it with probability 1/2 at each turn's start
  call4.safetensors    ... that always calls it (4 calls a row with max_tool_calling_iterations=4)
  prompts.jsonl        64 conversations of 4 to 60 words, rendered with the tools' schemas
                       (tools/prepare_prompts.py --tools agents_env.py --env-class Lookup)

Why a scripted policy: a random model's text never parses as a call, and a benchmark of the tool
loop needs episodes with calls, of real and varied lengths, that both programs sample from the
same distribution. The weights are a real Qwen2 of the given shape whose every attention and MLP
block writes zero (o_proj and down_proj are 0; the other matrices random, so every pass costs
what it costs at this shape), so the logits depend on the last token only: a bigram chain.
After the assistant header the policy writes the call token (probability p) or a word; after
the call, its EOS (<|im_end|>); after a word, another word or (1/24) its EOS. An answer is thus
1 to ~100 words (mean 24); a turn with a call is 2 tokens, and the tool's answer ~20 more. The
learning rate of the benchmark (1e-6, TRL's) leaves the chain as it is over a few steps.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "envs"))
sys.path.insert(0, HERE)
import tiny_qwen  # noqa: E402

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": 7}}\n</tool_call>'
ENV_MODULE = os.path.join(HERE, "agents_env.py")
WORDS_PER_EOS = 24
POLICIES = {"call0": 0.0, "mixed": 0.5, "call4": 1.0}


def word_ids(tok, n, rng):
    """n ids of plain words (letters and a leading space only): no text of theirs looks like a
    call, a special token or a line break."""
    vocab = tok.get_vocab()
    plain = sorted(i for t, i in vocab.items() if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 2)
    return sorted(rng.sample(plain, min(n, len(plain))))


def bigram_weights(cfg, tok, p_call, seed):
    """The Qwen2 state dict (torch tensors, Hugging Face names) of the chain above."""
    import torch
    g = torch.Generator().manual_seed(seed)
    V, C, L, I = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = C // H
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False).ids[-1]
    call, eos = tok.token_to_id(CALL), tok.token_to_id("<|im_end|>")
    words = word_ids(tok, 64, random.Random(seed))
    state = torch.full((V,), 3, dtype=torch.long)  # 0 header, 1 call, 2 word, 3 anything else
    state[header], state[call] = 0, 1
    state[words] = 2
    logp = torch.full((4, V), -30.0)  # log p(next | state of the last token)
    lw = math.log(1.0 / len(words))
    if p_call > 0:
        logp[0, call] = math.log(p_call)
    if p_call < 1:
        logp[0, words] = math.log(1 - p_call) + lw
    logp[1, eos] = 0.0
    logp[2, words] = math.log(1 - 1.0 / WORDS_PER_EOS) + lw
    logp[2, eos] = math.log(1.0 / WORDS_PER_EOS)
    logp[3, words] = lw
    # the final norm of a one-hot residual s * e_k is sqrt(C) * e_k: lm_head's column k holds the logits
    emb = torch.zeros(V, C)
    emb[torch.arange(V), state] = 1.0
    head = torch.zeros(V, C)
    head[:, :4] = logp.t() / math.sqrt(C)
    sd = {"model.embed_tokens.weight": emb, "model.norm.weight": torch.ones(C), "lm_head.weight": head}
    for i in range(L):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": torch.ones(C), p + "post_attention_layernorm.weight": torch.ones(C),
                   p + "self_attn.q_proj.weight": rnd(H * dh, C), p + "self_attn.q_proj.bias": torch.zeros(H * dh),
                   p + "self_attn.k_proj.weight": rnd(KV * dh, C), p + "self_attn.k_proj.bias": torch.zeros(KV * dh),
                   p + "self_attn.v_proj.weight": rnd(KV * dh, C), p + "self_attn.v_proj.bias": torch.zeros(KV * dh),
                   p + "self_attn.o_proj.weight": torch.zeros(C, H * dh),
                   p + "mlp.gate_proj.weight": rnd(I, C), p + "mlp.up_proj.weight": rnd(I, C),
                   p + "mlp.down_proj.weight": torch.zeros(C, I)})
    return sd


def st_write(path, tensors):
    """A safetensors file of float32 torch tensors."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def prompts(path, n, seed):
    rng = random.Random(seed)
    words = tiny_qwen.CORPUS.split()
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 60)))
            f.write(json.dumps({"prompt": [{"role": "user", "content": text}], "id": i}) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agents_setup", description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=704)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    model = os.path.join(a.work, "model")
    t = argparse.Namespace(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                           intermediate=a.intermediate, vocab=a.vocab, positions=2048, add_token=[CALL])
    tok = tiny_qwen.write(model, t)
    cfg = json.load(open(os.path.join(model, "config.json")))
    for name, p in POLICIES.items():
        st_write(os.path.join(a.work, name + ".safetensors"), bigram_weights(cfg, tok, p, a.seed))
    raw = os.path.join(a.work, "prompts_text.jsonl")
    prompts(raw, a.rows, a.seed)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "prepare_prompts.py"), raw, "--tokenizer", model,
                    "-o", os.path.join(a.work, "prompts.jsonl"), "--tools", ENV_MODULE, "--env-class", "Lookup"],
                   check=True)
    print(f"agents_setup: {a.work}: Qwen2 {a.layers} x {a.hidden}, vocabulary {cfg['vocab_size']}, "
          f"policies {', '.join(POLICIES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
