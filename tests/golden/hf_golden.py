#!/usr/bin/python3
"""Golden test: dfg's Llama, Qwen2, Qwen3 and GPT-2 against Hugging Face transformers' own model classes.

For each architecture this script
  1. builds a small model with odd sizes from transformers' own class (LlamaForCausalLM,
     Qwen2ForCausalLM, GPT2LMHeadModel) with random weights (every norm weight and bias redrawn
     too), and writes it with save_pretrained(dir, safe_serialization=True): config.json and
     model.safetensors, or shards and model.safetensors.index.json. transformers 4.40 has no
     Qwen3: its Qwen2 with each layer's attention replaced by Qwen3's (explicit head_dim, no q/k/v
     biases, q_norm/k_norm: transformers' RMSNorm over head_dim on every query and key head, before
     the rotation) stands in, written under Hugging Face's names with a Qwen3 config.json;
  2. reloads the directory with transformers (from_pretrained) as the policy; some configurations
     add a reference model that differs from the policy (the same names prefixed "ref.", in a
     shard of their own listed in the index), so that the KL term and its gradient are not zero;
  3. compiles and runs the GRPO pipeline as a user does:
       dfg compile examples/grpo/grpo.c -o plan.dfg --set model=DIR --set task=reverse ...
       dfg run plan.dfg --weights DIR --rollouts R --steps 1 --dump OUT --save SAVED/
  4. computes the same step in float64 with the GRPO of grpo_golden.py (advantages, ratio and
     clipping, k3 KL, the loss normalisations, micro-batches, clip_grad_norm_, AdamW decaying
     matrices only) on the logits of the transformers model itself (model.double()), and compares
     with grpo_golden.py's rules: logp, ref_logp, advantages, loss, grad_norm, kl, the clip ratios, entropy and
     every updated parameter to 1e-4 relative, the updates (new - old) to 1e-2 of the largest;
  5. loads SAVED/ (dfg's Hugging Face model directory of the trained policy) with transformers:
     the source's tensor names and config.json values, exactly the dump's weights, and the
     source's tokenizer and generation files (add_tokenizer puts them in DIR), byte for byte, that
     AutoTokenizer and GenerationConfig load from SAVED/ as from DIR;
  6. checks that the plan shares prompts as meant (share_prompts auto with micro-batches of whole
     groups: it refuses rollouts whose group holds two prompts) or runs separate copies (=0).
The weights put some inputs of every kind of norm near its epsilon, so that a wrong epsilon shows;
the completions use the model's whole vocabulary (odd sizes above the task's 15 tokens).

Before that it checks its own reference: the float64 log-probs against transformers' float32
forward (1e-5), and the Qwen3 attention against transformers' Qwen2Attention when its QK-norm is
the identity and the biases are zero (1e-12). transformers' forward in double still rounds a few
things through float32 (RMSNorm's and the attention softmax's upcasts, the rotary tables), ~1e-7.

Exit codes: 0 all agree, 1 a mismatch or an error, 77 torch, numpy or transformers cannot be
imported (ctest: skipped) -- unless DFG_REQUIRE_HF=1, which makes that a failure (CI). The
transformers directory (pip --target, tools/deps.sh --test) is --hf-site, or the environment's
DFG_HF_SITE, which wins. The seed is fresh each run and printed; DFG_TEST_SEED replays one.
"""
import argparse
import copy
import filecmp
import json
import math
import os
import shutil
import subprocess
import sys
import time

import golden_common
from golden_common import run_seed

HF_VERSION = "4.40.2"
TOL_SELF = 1e-5  # float64 reference vs transformers' float32 forward (log-probs)
HERE = os.path.dirname(os.path.abspath(__file__))


def unavailable(why, prog="hf_golden"):
    """torch/transformers missing: a skip, or a failure when DFG_REQUIRE_HF=1 (golden_common.py)."""
    golden_common.unavailable(prog, why)


def import_libraries(site, prog="hf_golden"):
    """Imports numpy, torch, transformers (from site) and the shared golden helpers into globals;
    what is missing is prog's skip (peft_golden.py imports through here too)."""
    global np, torch, nn, transformers, st_torch, G
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import numpy as np
        import torch
        from torch import nn
    except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
        unavailable(prog=prog, why=f"/usr/bin/python3 cannot import torch and numpy ({e})")
    if not os.path.isdir(site):
        unavailable(prog=prog, why=f"no transformers directory {site}")
    sys.path.insert(0, site)
    try:
        import transformers
        import safetensors.torch as st_torch
        from transformers.models.qwen2 import modeling_qwen2  # noqa: F401
    except Exception as e:  # noqa: BLE001
        unavailable(prog=prog, why=f"cannot import transformers from {site} ({type(e).__name__}: {e})")
    if transformers.__version__ != HF_VERSION:
        unavailable(prog=prog, why=f"{site} holds transformers {transformers.__version__}, not {HF_VERSION}")
    transformers.utils.logging.disable_progress_bar()
    sys.path.insert(0, HERE)
    import grpo_golden as G  # after torch: gpt2_golden exits 77 without it


# ---------------------------------------------------------------- the models
# Odd sizes everywhere; head_dim even where RoPE rotates it. max_position_embeddings >= the
# rollouts' 9 positions.
ARCHS = {
    # GQA with 2 key/value groups, an untied lm_head, rope_theta != 10000; saved in >= 2 shards
    "llama": dict(cls="LlamaForCausalLM", arch="LlamaForCausalLM", shard="24KB",
                  config=dict(hidden_size=40, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=67, vocab_size=37, max_position_embeddings=29, rms_norm_eps=1e-5,
                              rope_theta=5e5, tie_word_embeddings=False, attention_bias=False)),
    # Llama's attention_bias: transformers gives q, k, v and o_proj biases
    "llama_bias": dict(cls="LlamaForCausalLM", arch="LlamaForCausalLM",
                       config=dict(hidden_size=24, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=41, vocab_size=19, max_position_embeddings=11, rms_norm_eps=1e-6,
                                   rope_theta=1e4, tie_word_embeddings=False, attention_bias=True)),
    # tied embeddings, q/k/v biases, GQA (3 query heads per key/value head)
    "qwen2": dict(cls="Qwen2ForCausalLM", arch="Qwen2ForCausalLM",
                  config=dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                              intermediate_size=75, vocab_size=53, max_position_embeddings=32, rms_norm_eps=1e-6,
                              rope_theta=1e6, tie_word_embeddings=True)),
    # tied, n_inner None (4 n_embd), head size 11
    "gpt2": dict(cls="GPT2LMHeadModel", arch="GPT2LMHeadModel",
                 config=dict(n_embd=33, n_layer=2, n_head=3, vocab_size=41, n_positions=13, layer_norm_epsilon=1e-5,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    # head_dim 8 != hidden_size / num_attention_heads = 9 (q_proj is (32, 36)); tied
    "qwen3": dict(cls="qwen3", arch="Qwen3ForCausalLM",
                  config=dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=8, intermediate_size=59, vocab_size=43, max_position_embeddings=40,
                              rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)),
}

# The GRPO settings on top of grpo_golden.py's BASE (task reverse, 3 digits, P x G = 3 x 4,
# temperature 0.7, ...). Micro-batches of whole groups (GA 1, 3) share prompts unless
# share_prompts=0; GA 2 splits groups, so the llama configuration runs separate copies.
CONFIGS = [
    dict(name="llama", arch="llama", loss_type="grpo", beta=0.04, gradient_accumulation_steps=2, ref="perturbed"),
    dict(name="llama_bias", arch="llama_bias", loss_type="dr_grpo", beta=0.0, gradient_accumulation_steps=1),
    dict(name="qwen2", arch="qwen2", loss_type="bnpo", beta=0.04, gradient_accumulation_steps=3,
         scale_rewards="batch"),
    dict(name="gpt2", arch="gpt2", loss_type="dapo", beta=0.0, gradient_accumulation_steps=1, share_prompts=0),
    dict(name="qwen3", arch="qwen3", loss_type="grpo", beta=0.1, gradient_accumulation_steps=1, ref="perturbed"),
]
# Adam's first step is lr * g / (|g| + adam_epsilon): a gradient entry far below the epsilon moves
# its update by lr * (its float32 rounding) / epsilon. With the norms' small inputs above, the
# gradients span ~1e-6 .. 0.2 after clipping, and at grpo_golden's 1e-5 that floor reached 1.4e-2 of
# the largest update (an embedding row scaled by 10^-2.5, qwen2); at 1e-4 it stays well under the
# 1e-2 bound.
HF_BASE = dict(adam_epsilon=1e-4)
MODEL_SETTINGS = ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")  # config.json's, not --set


def dfg_name(arch, hf_name):
    """dfg's name of a parameter: Hugging Face's, less GPT-2's "transformer." prefix."""
    if ARCHS[arch]["cls"] == "GPT2LMHeadModel" and hf_name.startswith("transformer."):
        return hf_name[len("transformer."):]
    return hf_name


def make_qwen3_attention_class():
    from transformers.models.qwen2.modeling_qwen2 import (Qwen2RMSNorm, Qwen2RotaryEmbedding, apply_rotary_pos_emb,
                                                          repeat_kv)

    class Qwen3Attention(nn.Module):
        """transformers' Qwen2Attention (eager, no cache) as Qwen3 has it: head_dim from the config,
        no q/k/v biases, q_norm/k_norm (RMSNorm over head_dim) on the (B, T, H, D) view before RoPE."""

        def __init__(self, config, layer_idx):
            super().__init__()
            C, H, Hkv, D = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
            self.layer_idx, self.H, self.Hkv, self.D = layer_idx, H, Hkv, D
            self.q_proj = nn.Linear(C, H * D, bias=False)
            self.k_proj = nn.Linear(C, Hkv * D, bias=False)
            self.v_proj = nn.Linear(C, Hkv * D, bias=False)
            self.o_proj = nn.Linear(H * D, C, bias=False)
            self.q_norm = Qwen2RMSNorm(D, eps=config.rms_norm_eps)
            self.k_norm = Qwen2RMSNorm(D, eps=config.rms_norm_eps)
            self.rotary_emb = Qwen2RotaryEmbedding(D, max_position_embeddings=config.max_position_embeddings,
                                                   base=config.rope_theta)

        def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                    output_attentions=False, use_cache=False, **kwargs):
            assert past_key_value is None, "the golden test runs without a KV cache"
            B, T, _ = hidden_states.shape
            q = self.q_norm(self.q_proj(hidden_states).view(B, T, self.H, self.D)).transpose(1, 2)
            k = self.k_norm(self.k_proj(hidden_states).view(B, T, self.Hkv, self.D)).transpose(1, 2)
            v = self.v_proj(hidden_states).view(B, T, self.Hkv, self.D).transpose(1, 2)
            cos, sin = self.rotary_emb(v, seq_len=T)
            q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)
            k, v = repeat_kv(k, self.H // self.Hkv), repeat_kv(v, self.H // self.Hkv)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.D)
            if attention_mask is not None:
                att = att + attention_mask
            att = nn.functional.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)  # as Qwen2Attention
            y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, self.H * self.D)
            return self.o_proj(y), None, past_key_value

    return Qwen3Attention


def build_model(arch):
    """A float32 model of the architecture (transformers' class; for qwen3 its Qwen2 with Qwen3's
    attention), weights as transformers initialises them."""
    spec = ARCHS[arch]
    attn = dict(attn_implementation="eager")
    if spec["cls"] == "LlamaForCausalLM":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**spec["config"], **attn))
    if spec["cls"] == "Qwen2ForCausalLM":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**spec["config"], **attn))
    if spec["cls"] == "GPT2LMHeadModel":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(**spec["config"], **attn))
    c = dict(spec["config"])
    head_dim = c.pop("head_dim")
    config = transformers.Qwen2Config(**c, **attn)
    config.head_dim = head_dim
    model = transformers.Qwen2ForCausalLM(config)
    Qwen3Attention = make_qwen3_attention_class()
    for i, layer in enumerate(model.model.layers):
        layer.self_attn = Qwen3Attention(config, i)
    return model


def randomise(arch, model, rng):
    """Every parameter redrawn (norm weights around 1, biases around 0, never 1 and 0), large
    enough that every part of the network matters; float32. Some inputs of a norm are made as
    small as its epsilon, so that the epsilon matters too: each embedding row is scaled by
    10^U(-1.5, 0) (GPT-2's wpe is small), and the first query and key head of a QK-normed model
    is 100 times smaller than the others. (Smaller still, the norms' 1/rms would make those
    gradients dominate the clipped norm, leaving the other gradients far below Adam's epsilon,
    where float32 rounding is all the update comparison sees.)"""
    head_dim = ARCHS[arch]["config"]["head_dim"] if ARCHS[arch]["cls"] == "qwen3" else None
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("norm.weight") or ".ln_" in name:
                v = (1.0 + 0.25 * rng.standard_normal(shape)) if name.endswith("weight") else 0.15 * rng.standard_normal(shape)
            elif name.endswith(".bias"):
                v = 0.1 * rng.standard_normal(shape)
            elif name.endswith("wpe.weight"):
                v = 0.03 * rng.standard_normal(shape)
            elif name.endswith(("embed_tokens.weight", "wte.weight")):
                v = 0.2 * rng.standard_normal(shape) * 10.0 ** rng.uniform(-1.5, 0.0, size=(shape[0], 1))
            else:
                fan_in = shape[0] if "transformer." in name else shape[-1]  # GPT-2's Conv1D is (in, out)
                v = (0.9 / math.sqrt(fan_in)) * rng.standard_normal(shape)
                if head_dim and name.endswith(("q_proj.weight", "k_proj.weight")):
                    v[:head_dim] *= 1e-2
            p.copy_(torch.tensor(v, dtype=torch.float32))


def save_model(arch, model, d):
    """The model directory dfg and transformers read."""
    spec = ARCHS[arch]
    if spec["cls"] != "qwen3":
        kw = {"max_shard_size": spec["shard"]} if spec.get("shard") else {}
        model.save_pretrained(d, safe_serialization=True, **kw)
        return
    c = dict(spec["config"])
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
              "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
              "initializer_range": 0.02, "max_window_layers": c["num_hidden_layers"], "rope_scaling": None,
              "sliding_window": None, "use_sliding_window": False, "use_cache": True, "torch_dtype": "float32",
              "transformers_version": "4.51.0", **c}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()
          if not (c["tie_word_embeddings"] and k == "lm_head.weight")}  # tied: transformers leaves it out
    st_torch.save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


# What dfg run --save DIR/ copies from the source directory (runtime/weights/model_export.c's source_files)
SOURCE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja",
                "chat_template.json")
DIGITS_TOKENIZER = os.path.join(HERE, "..", "..", "examples", "tasks", "digits", "tokenizer.json")


def add_tokenizer(arch, d):
    """A tokenizer and generation defaults in the model directory, as a Hugging Face model has them:
    GPT-2 a slow GPT2Tokenizer (vocab.json, merges.txt, added_tokens.json), the others the digits
    task's fast tokenizer (tokenizer.json); each with tokenizer_config.json, special_tokens_map.json,
    generation_config.json (over the one save_pretrained wrote) and a chat_template.jinja."""
    if ARCHS[arch]["cls"] == "GPT2LMHeadModel":
        vocab = {c: i for i, c in enumerate("0123456789+=")}
        vocab["12"] = len(vocab)
        with open(os.path.join(d, "vocab.json"), "w") as f:
            json.dump(vocab, f)
        with open(os.path.join(d, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n1 2\n")
        # "<|endoftext|>" is not in the vocabulary: an added token (added_tokens.json)
        tok = transformers.GPT2Tokenizer(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt"))
    else:
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=DIGITS_TOKENIZER, eos_token="$", pad_token="_")
    tok.save_pretrained(d)
    transformers.GenerationConfig(bos_token_id=0, eos_token_id=1, do_sample=True, temperature=0.7, top_p=0.9,
                                  max_new_tokens=5).save_pretrained(d)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write("{% for m in messages %}{{ m['content'] }}{% endfor %}")


def check_copies(source, saved):
    """The problems of SAVED/'s copies of the source's tokenizer and generation files: each
    byte-identical, AutoTokenizer and GenerationConfig load them from SAVED/ as from the source."""
    problems = []
    copied = [f for f in SOURCE_FILES if os.path.exists(os.path.join(source, f))]
    differ = [f for f in copied if not os.path.isfile(os.path.join(saved, f))
              or not filecmp.cmp(os.path.join(source, f), os.path.join(saved, f), shallow=False)]
    if differ:
        problems.append(f"{differ} are not the source directory's, byte for byte")
    try:
        text = "12+34="
        ids = transformers.AutoTokenizer.from_pretrained(saved)(text)["input_ids"]
        want = transformers.AutoTokenizer.from_pretrained(source)(text)["input_ids"]
        if ids != want:
            problems.append(f"AutoTokenizer encodes {text!r} as {ids}, the source's tokenizer as {want}")
        gen = transformers.GenerationConfig.from_pretrained(saved).to_dict()
        if gen != transformers.GenerationConfig.from_pretrained(source).to_dict():
            problems.append(f"GenerationConfig {gen} differs from the source's")
    except Exception as e:  # noqa: BLE001 - whatever transformers raises is the finding
        problems.append(f"the tokenizer or generation config does not load: {type(e).__name__}: {e}")
    return problems


def load_model(arch, d):
    """The model transformers reads from the directory (the qwen3 stand-in: built, then its
    safetensors loaded strictly)."""
    spec = ARCHS[arch]
    if spec["cls"] != "qwen3":
        cls = getattr(transformers, spec["cls"])
        model = cls.from_pretrained(d, attn_implementation="eager", torch_dtype=torch.float32)
    else:
        model = build_model(arch)
        sd = {}
        for f in shard_files(d):
            sd.update(st_torch.load_file(os.path.join(d, f)))
        if spec["config"]["tie_word_embeddings"]:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        model.load_state_dict(sd, strict=True)
        if spec["config"]["tie_word_embeddings"]:
            model.tie_weights()
    return model.eval()


def shard_files(d):
    """The safetensors files of a model directory, as transformers picks them."""
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return ["model.safetensors"]
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        return sorted(set(json.load(f)["weight_map"].values()))


def tensor_names(d):
    names = set()
    for f in shard_files(d):
        with open(os.path.join(d, f), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            names |= {k for k in json.loads(fh.read(n)) if k != "__metadata__"}
    return names


def weights_of(arch, model):
    """dfg name -> float32 array of every parameter (tied ones once, as named_parameters has them)."""
    return {dfg_name(arch, n): p.detach().to(torch.float32).numpy().copy() for n, p in model.named_parameters()}


def set_weights(arch, model, w):
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.tensor(w[dfg_name(arch, n)], dtype=p.dtype))


def perturbed(w, rng):
    """A reference model near the policy: every value scaled by 1 + 0.25 N(0, 1), so that the
    small inputs that make the norms' epsilons matter stay small."""
    return {k: (v * (1.0 + 0.25 * rng.standard_normal(v.shape))).astype(np.float32) for k, v in w.items()}


def add_reference_shard(d, ref):
    """Adds the reference model's tensors (ref.* names) to the directory as a shard of their own in
    model.safetensors.index.json (a single model.safetensors becomes shard 1 of an index)."""
    index_path = os.path.join(d, "model.safetensors.index.json")
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        names = tensor_names(d)
        os.replace(single, os.path.join(d, "model-00001-of-00001.safetensors"))
        index = {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in sorted(names)}}
    else:
        with open(index_path) as f:
            index = json.load(f)
    st_torch.save_file({k: torch.tensor(v) for k, v in ref.items()}, os.path.join(d, "model-ref.safetensors"),
                       metadata={"format": "pt"})
    index["weight_map"].update({k: "model-ref.safetensors" for k in ref})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)


def logits_fn(model):
    """tokens (n, T) -> logits (n, T, V) of the transformers model. The default dtype follows the
    model's while it runs: transformers 4.40's Qwen2 builds its causal mask as torch.full(...,
    finfo(dtype).min) in the default dtype, which float64's min overflows in float32."""
    dtype = next(model.parameters()).dtype

    def logits(tokens):
        saved = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            return model(input_ids=tokens, use_cache=False).logits
        finally:
            torch.set_default_dtype(saved)
    return logits


# ---------------------------------------------------------------- checks of the reference itself
def check_reference_forward(name, model32, model64, tokens, temperature):
    """float64 log-probs (what the step uses) against transformers' own float32 forward."""
    tok = torch.tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        lp64 = G.token_logp(logits_fn(model64), tok, temperature)
        lp32 = G.token_logp(logits_fn(model32), tok, temperature).double()
    e = float((lp64 - lp32).abs().max() / lp64.abs().max())
    ok = e <= TOL_SELF
    print(f"  reference check: float64 log-probs vs transformers float32: rel.err {e:.2e}{'' if ok else '  FAIL'}")
    return ok


def check_qwen3_attention(rng):
    """The Qwen3 stand-in's attention equals transformers' Qwen2Attention (eager) when its QK-norm
    is the identity and Qwen2's biases are zero (head_dim = hidden_size / heads there)."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention
    config = transformers.Qwen2Config(hidden_size=24, num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                                      max_position_embeddings=16, attn_implementation="eager")
    config.head_dim = 6
    ours, theirs = make_qwen3_attention_class()(config, 0).double(), Qwen2Attention(config, 0).double()
    with torch.no_grad():
        for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w = torch.tensor(0.3 * rng.standard_normal(tuple(getattr(ours, m).weight.shape)))
            getattr(ours, m).weight.copy_(w)
            getattr(theirs, m).weight.copy_(w)
            if getattr(theirs, m).bias is not None:
                getattr(theirs, m).bias.zero_()
    ours.q_norm = ours.k_norm = nn.Identity()
    x = torch.tensor(rng.standard_normal((2, 7, 24)))
    mask = torch.full((7, 7), -1e30, dtype=torch.float64).triu(1)[None, None].expand(2, 1, 7, 7)
    pos = torch.arange(7)[None].expand(2, 7)
    with torch.no_grad():
        a = ours(x, attention_mask=mask, position_ids=pos)[0]
        b = theirs(x, attention_mask=mask, position_ids=pos)[0]
    e = float((a - b).abs().max() / b.abs().max())
    ok = e <= 1e-12
    print(f"hf_golden: qwen3 attention vs transformers' Qwen2Attention (identity QK-norm, zero biases): rel.err {e:.2e}"
          f"{'' if ok else '  FAIL'}")
    return ok


# ---------------------------------------------------------------- one configuration
def random_rollouts(s, rng, vocab):
    """grpo_golden's rollouts, the completions' tokens drawn from the model's whole vocabulary
    (dfg accepts any token id below vocab_size): the prompts keep the task's digits and '='."""
    tokens, mask, rewards = G.random_rollouts(s, rng)
    Lp = s["max_prompt_length"]
    comp = tokens[:, Lp:]
    wide = rng.integers(G.VOCAB, vocab, size=comp.shape)
    swap = (rng.random(comp.shape) < 0.3) & (comp != G.EOS)  # keep every EOS where it stands
    comp[swap] = wide[swap]
    return tokens, mask, rewards


def worst(errs, names):
    found = [(e, n) for n, (e, _) in errs.items() if n in names]
    return max(found, key=lambda t: (math.isnan(t[0]), t[0])) if found else (math.nan, "-")


def summary(arch, errs, w):
    """The worst relative errors of one configuration, by kind."""
    weights = [n for n in errs if n in w]
    wu = [(eu, n) for n, (_, eu) in errs.items() if eu is not None]
    eu, nu = max(wu, key=lambda t: (math.isnan(t[0]), t[0])) if wu else (math.nan, "-")
    parts = []
    for label, names in (("logp", ("logp",)), ("ref_logp", ("ref_logp",)), ("advantages", ("advantages",)),
                         ("loss", ("loss",)), ("grad_norm", ("grad_norm",)), ("kl", ("kl",)),
                         ("clip_ratio/region_mean", ("clip_ratio/region_mean",)), ("entropy", ("entropy",))):
        e, _ = worst(errs, names)
        if not math.isnan(e) or any(n in errs for n in names):
            parts.append(f"{label} {e:.2e}")
    e, n = worst(errs, weights)
    parts.append(f"weights {e:.2e} ({n})")
    parts.append(f"updates {eu:.2e} ({nu})")
    return f"{arch}: " + ", ".join(parts)


def check_saved(arch, saved, got, source, source_names, config):
    """dfg run --save DIR/ after the step: a model directory transformers loads, holding the
    source directory's tensor names (no ref.*), config.json's values, exactly the weights of the
    dump, and the source's tokenizer and generation files (check_copies)."""
    problems = []
    try:
        model = load_model(arch, saved)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises is the finding
        print(f"  --save {saved}/: transformers cannot load it: {type(e).__name__}: {e}  FAIL")
        return False
    # by dfg's names: GPT-2's may come without "transformer." (as the original checkpoints), which
    # transformers loads as well
    names = {dfg_name(arch, n) for n in tensor_names(saved)}
    want = {dfg_name(arch, n) for n in source_names}
    if names != want:
        problems.append(f"tensors {sorted(names ^ want)[:4]} differ from the source directory's")
    with open(os.path.join(saved, "config.json")) as f:
        written = json.load(f)
    for k, v in dict(config, architectures=[ARCHS[arch]["arch"]]).items():
        if written.get(k) != v:
            problems.append(f"config.json {k} = {written.get(k)!r}, the source's is {v!r}")
    worst = 0.0
    for n, p in model.named_parameters():
        g = got.get(dfg_name(arch, n))
        if g is None or tuple(g.shape) != tuple(p.shape):
            problems.append(f"'{n}' is not in the dump as {tuple(p.shape)}")
            continue
        worst = max(worst, float(np.max(np.abs(p.detach().numpy() - g))))
    if worst != 0.0:
        problems.append(f"weights differ from the dump's by up to {worst:.3e}")
    problems += check_copies(source, saved)
    files = ", ".join(f for f in sorted(os.listdir(saved)))
    print(f"  --save {os.path.basename(saved)}/: {files}: transformers loads it"
          + ("; " + "; ".join(problems) + "  FAIL" if problems
             else ", the dump's weights exactly, the source's tokenizer and generation config"))
    return not problems


def check_sharing(dfg, s, paths, tokens, mask, rewards):
    """Whether the plan computes each group's prompt once (share_prompts: auto does when the
    micro-batches hold whole groups, 0 never) as this configuration means it to: such a plan
    refuses rollouts whose group holds two prompts, which a plan of separate copies trains on."""
    N, G_, GA = tokens.shape[0], s["num_generations"], s["gradient_accumulation_steps"]
    meant = str(s.get("share_prompts", "auto")) != "0" and (N // GA) % G_ == 0
    mixed = tokens.copy()
    mixed[1, 0] = 2 + (mixed[0, 0] - 1) % 10  # another digit: row 1's prompt differs from row 0's
    path = os.path.join(os.path.dirname(paths["plan.dfg"]), "rollouts_two_prompts.safetensors")
    G.st_write(path, {"tokens": mixed, "completion_mask": mask, "rewards": rewards})
    r = subprocess.run([dfg, "run", paths["plan.dfg"], "--weights", paths["weights.safetensors"], "--rollouts", path,
                        "--steps", "1"], capture_output=True, text=True, timeout=300)
    shares = r.returncode != 0 and "one prompt's group" in r.stdout + r.stderr
    ok = shares == meant and (shares or r.returncode == 0)
    what = "computes each prompt once per group" if shares else "runs separate copies"
    meant_what = "share prompts" if meant else "run separate copies"
    print(f"  share_prompts: the plan {what}" + ("" if ok else f", meant to {meant_what}  FAIL"))
    if not ok and r.returncode != 0 and not shares:
        print("  dfg run printed:\n" + "\n".join("  | " + line for line in (r.stdout + r.stderr).splitlines()))
    return ok


def run_config(cfg, dfg, source, workdir, seed):
    arch = cfg["arch"]
    s = G.settings_of(dict(HF_BASE, **{k: v for k, v in cfg.items() if k != "arch"}))
    d = os.path.join(workdir, cfg["name"])
    model_dir = os.path.join(d, "model")
    os.makedirs(model_dir, exist_ok=True)
    for root in (model_dir, d):
        for f in os.listdir(root):
            if os.path.isfile(os.path.join(root, f)):
                os.remove(os.path.join(root, f))
    rng = np.random.default_rng([seed, sum(map(ord, cfg["name"]))])
    torch.manual_seed(seed)

    built = build_model(arch)
    randomise(arch, built, rng)
    save_model(arch, built, model_dir)
    add_tokenizer(arch, model_dir)
    policy32 = load_model(arch, model_dir)  # what transformers reads back from the directory
    w = weights_of(arch, policy32)
    drawn = weights_of(arch, built)
    if set(w) != set(drawn) or any(not np.array_equal(w[k], drawn[k]) for k in w):
        print(f"[{cfg['name']}] FAIL: transformers did not read back the weights it saved")
        return False, None
    files = sorted(os.listdir(model_dir))
    vocab = built.config.vocab_size
    print(f"[{cfg['name']}] {ARCHS[arch]['arch']} " + " ".join(f"{k}={v}" for k, v in ARCHS[arch]["config"].items()
          if not k.endswith("pdrop")))
    print(f"  {model_dir}: {', '.join(files)}")
    print("  " + " ".join(f"{k}={s[k]}" for k in ("loss_type", "beta", "gradient_accumulation_steps", "scale_rewards",
                                                  "temperature", "learning_rate", "adam_epsilon", "max_grad_norm", "ref"))
          + f" share_prompts={s.get('share_prompts', 'auto')}")
    if ARCHS[arch].get("shard") and sum(f.endswith(".safetensors") for f in files) < 2:
        print(f"[{cfg['name']}] FAIL: save_pretrained wrote fewer than 2 shards")
        return False, None

    source_names = tensor_names(model_dir)
    w_ref = perturbed(w, rng) if s["ref"] == "perturbed" else w
    ref32 = copy.deepcopy(policy32)
    set_weights(arch, ref32, w_ref)
    if s["ref"] == "perturbed":
        add_reference_shard(model_dir, {"ref." + k: v for k, v in w_ref.items()})
    ok = True
    for _ in range(20):  # rollouts with no ratio within 1e-5 of a clipping bound in any pass
        tokens, mask, rewards = random_rollouts(s, rng, vocab)
        policy, ref = copy.deepcopy(policy32).double(), copy.deepcopy(ref32).double()
        for p in ref.parameters():
            p.requires_grad_(False)
        params = {dfg_name(arch, n): p for n, p in policy.named_parameters()}
        if _ == 0:
            ok &= check_reference_forward(cfg["name"], policy32, policy, tokens, s["temperature"])
        G.NEAR_BOUND[0] = math.inf
        want = G.grpo_step(s, params, logits_fn(policy), logits_fn(ref), tokens, mask, rewards)
        if G.NEAR_BOUND[0] > 1e-5:
            break

    paths = {k: os.path.join(d, k) for k in ("plan.dfg", "rollouts.safetensors", "out.safetensors")}
    paths["weights.safetensors"] = model_dir
    G.st_write(paths["rollouts.safetensors"], {"tokens": tokens, "completion_mask": mask, "rewards": rewards})
    sets = ["--set", f"model={model_dir}"]
    sets += [a for k, v in s.items() if k not in ("name", "ref") + MODEL_SETTINGS for a in ("--set", f"{k}={v}")]
    saved = os.path.join(d, "saved")
    shutil.rmtree(saved, ignore_errors=True)
    run_flags = ["--save", saved + "/"]
    if ARCHS[arch].get("shard"):
        run_flags += ["--max-shard-size", ARCHS[arch]["shard"]]
    t0 = time.time()
    try:
        got, log = G.dfg_step(dfg, source, sets, paths, run_flags)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"[{cfg['name']}] FAIL: {e}")
        return False, f"{cfg['name']}: dfg failed"
    t_dfg = time.time() - t0
    good, errs = G.compare_step(want, got, w)
    ok &= good
    ok &= check_saved(arch, saved, got, model_dir, source_names, ARCHS[arch]["config"])
    ok &= check_sharing(dfg, s, paths, tokens, mask, rewards)
    print(f"[{cfg['name']}] loss torch {float(want['loss']):+.8f} dfg {float(got.get('loss', np.nan)):+.8f}, "
          f"grad_norm {float(want['grad_norm']):.6f}, kl {float(want.get('kl', 0.0)):.6f}; dfg {t_dfg:.2f}s; "
          f"{'PASS' if ok else 'FAIL'}")
    if not good:
        print("  dfg run printed:\n" + "\n".join("  | " + line for line in log.splitlines()))
    return ok, summary(cfg["name"], errs, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dfg", required=True, help="path of the dfg executable")
    ap.add_argument("--source", required=True, help="path of examples/grpo/grpo.c")
    ap.add_argument("--workdir", required=True, help="directory for the model directories, plans and dumps")
    ap.add_argument("--hf-site", default=os.path.join(HERE, "..", "..", ".deps", "hf-" + HF_VERSION),
                    help="directory transformers was installed into (pip --target); the environment's "
                         "DFG_HF_SITE wins over it")
    ap.add_argument("--config", action="append", help="run only these configurations (default: all)")
    ap.add_argument("--check-reference", action="store_true",
                    help="only check the reference against transformers' float32 forward (no dfg)")
    a = ap.parse_args()
    site = os.path.abspath(os.environ.get("DFG_HF_SITE") or a.hf_site)
    seed = run_seed("hf_golden")
    if seed is None:
        return 1
    import_libraries(site)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"hf_golden: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {torch.__version__}, transformers "
          f"{transformers.__version__} from {site}; tolerance {G.TOL:g} per tensor, {G.TOL_UPDATE:g} per update")
    configs = golden_common.chosen_configs("hf_golden", CONFIGS, a.config)
    if configs is None:
        return 1
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    ok = check_qwen3_attention(np.random.default_rng([seed, 3]))
    if a.check_reference:
        for cfg in configs:
            rng = np.random.default_rng([seed, sum(map(ord, cfg["name"]))])
            d = os.path.join(a.workdir, cfg["name"], "model")
            os.makedirs(d, exist_ok=True)
            m = build_model(cfg["arch"])
            randomise(cfg["arch"], m, rng)
            save_model(cfg["arch"], m, d)
            m32 = load_model(cfg["arch"], d)
            s = G.settings_of({k: v for k, v in cfg.items() if k != "arch"})
            tokens, _, _ = random_rollouts(s, rng, m.config.vocab_size)
            print(f"[{cfg['name']}]")
            ok &= check_reference_forward(cfg["name"], m32, copy.deepcopy(m32).double(), tokens, s["temperature"])
        print(f"hf_golden: reference {'agrees' if ok else 'MISMATCH'} (seed {seed})")
        return 0 if ok else 1
    results = [run_config(c, a.dfg, a.source, a.workdir, seed) for c in configs]
    return golden_common.summary("hf_golden", results, "configurations", t0, seed, ok)


if __name__ == "__main__":
    sys.exit(main())
