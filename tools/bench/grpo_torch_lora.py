#!/usr/bin/env python3
"""grpo_torch_lora.py - the GRPO training step on fixed rollouts, as TRL runs it with a PEFT
LoRA (or QLoRA) policy: the PyTorch side of `tools/gpu-check.sh --quick` step 1, against
`dfg run P.dfg --rollouts R` of a plan with the same shapes and settings.

The model is transformers' Qwen2ForCausalLM built from a Qwen2Config with the dims given
(random weights as transformers initialises them; no download, no config.json needed). It
runs on transformers 5.x with PyTorch 2.x on a GPU, and on transformers 4.40.2 + peft 0.11.1
(--site DIR puts them first on sys.path) with torch 1.13 on the CPU, where gpu-check-quick's
--rehearse runs it.

The rollouts: dfg's --rollouts file (safetensors: tokens i32 (N,T), completion_mask f32
(N,T), rewards f32 (N)), prompts of --prompt_len tokens (default: the first masked column),
completions right-padded, of VARIABLE lengths. One step, as TRL's GRPOTrainer does it with
num_iterations 1, beta 0 (TRL's default: no reference model) and loss_type "grpo":
  advantages   (r - group mean) / (group std + 1e-4) over groups of --num_generations
               (scale_rewards "group", torch.std unbiased)
  forward      the adapted model on prompt + completions, the completions cut to the batch's
               longest (TRL pads to it), attention_mask = prompt ones + completion mask;
               logits at the completion positions only (logits_to_keep), / temperature;
               TRL's selective_log_softmax (a loop over rows for bf16) and its entropy
               (entropy_from_logits, chunks of 128, no gradient: the logged metric)
  loss         ratio = exp(logp - logp.detach()), clipped (epsilon, epsilon_high),
               -min(ratio A, clip(ratio) A); per sequence sum(l m) / max(sum(m), 1), mean
  update       backward, clip_grad_norm_(max_grad_norm) and torch.optim.AdamW over the
               adapters (wd 0); zero_grad
LoRA: peft's get_peft_model(LoraConfig(r, lora_alpha, target_modules ("all-linear" or a
list), lora_dropout 0, bias "none", task_type CAUSAL_LM)). bf16 (the default on cuda): the base
in bf16, the adapters in float32 (peft >= 0.12's autocast_adapter_dtype), the forward under
torch.autocast(bfloat16), as TRL's bf16=True runs it. --gradient_checkpointing on|off: TRL's
GRPOConfig turns it on by default (use_reentrant False); on is the default here too.
QLoRA (--load_in_4bit): every linear of the decoder layers becomes bitsandbytes'
Linear4bit (nf4, --bnb_4bit_use_double_quant, compute dtype bf16), quantised when moved to
the GPU, then peft as above. Without bitsandbytes it prints {"skip": reason} and exits 3.

Output: a JSON line per timed step ({"step", "ms", "loss", "entropy", "grad_norm"}), then one
summary line ({"summary": true, "median_ms", "max_memory_allocated": torch's peak over the
run (weights included), "max_memory_reserved", "device_used_bytes": cudaMemGetInfo's free
bytes once the context exists minus after the last step, as dfg measures its own; versions,
shapes}). Each timed step is bracketed by torch.cuda.synchronize().
"""
import argparse
import json
import os
import statistics
import struct
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("hidden_size", 64), ("num_hidden_layers", 2), ("num_attention_heads", 4),
                          ("num_key_value_heads", 2), ("intermediate_size", 128), ("vocab_size", 512),
                          ("head_dim", 0), ("max_position_embeddings", 0)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--tie_word_embeddings", choices=("true", "false"), default="true")
    ap.add_argument("--rope_theta", type=float, default=1000000.0)
    ap.add_argument("--rms_norm_eps", type=float, default=1e-6)
    ap.add_argument("--rollouts", required=True, help="dfg's --rollouts safetensors file")
    ap.add_argument("--prompt_len", type=int, default=0, help="default: the first column any row masks")
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--lora_r", type=int, default=16)
    ap.add_argument("--lora_alpha", type=float, default=32.0)
    ap.add_argument("--lora_target_modules", default="all-linear")
    ap.add_argument("--load_in_4bit", action="store_true")
    ap.add_argument("--bnb_4bit_use_double_quant", action="store_true")
    ap.add_argument("--gradient_checkpointing", choices=("on", "off"), default="on")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("f32", "bf16"), help="default: bf16 on cuda, f32 on cpu")
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--learning_rate", type=float, default=1e-5)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--epsilon_high", type=float, default=0.0, help="default: epsilon")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max_grad_norm", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.0, help="only 0 (TRL's default): no reference model")
    ap.add_argument("--site", action="append", default=[], help="a directory put first on sys.path "
                    "(transformers, peft); repeatable, the last given first")
    a = ap.parse_args(argv)
    if a.beta != 0:
        ap.error("--beta: only 0 is measured here (TRL's default; no reference pass)")
    a.epsilon_high = a.epsilon_high or a.epsilon
    a.dtype = a.dtype or ("bf16" if a.device == "cuda" else "f32")
    return a


def read_rollouts(path):
    """tokens (N,T) i32, completion_mask (N,T) f32, rewards (N) f32 as nested lists (standard library)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name in ("tokens", "completion_mask", "rewards"):
        if name not in header:
            raise SystemExit(f"grpo_torch_lora: {path} has no tensor '{name}' (dfg's --rollouts format)")
        t = header[name]
        a, b = t["data_offsets"]
        fmt = {"I32": "i", "F32": "f"}[t["dtype"]]
        out[name] = (list(struct.unpack("<%d%s" % ((b - a) // 4, fmt), body[a:b])), t["shape"])
    return out


# ---------------------------------------------------------------- TRL's helpers (trl/trainer/utils.py)
def selective_log_softmax(logits, index):
    import torch
    import torch.nn.functional as F
    index = index.unsqueeze(-1)
    if logits.dtype in (torch.float32, torch.float64):
        selected = torch.gather(logits, dim=-1, index=index)
        lse = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        return (selected - lse.unsqueeze(-1)).squeeze(-1)
    rows = []
    for row_logits, row_labels in zip(logits, index):  # bf16: TRL's loop, log_softmax per row
        rows.append(F.log_softmax(row_logits, dim=-1).gather(dim=-1, index=row_labels))
    return torch.stack(rows).squeeze(-1)


def entropy_from_logits(logits, chunk_size=128):
    import torch
    import torch.nn.functional as F
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(chunk_size, dim=0):
        logps = F.log_softmax(chunk, dim=-1)
        parts.append(-(torch.exp(logps) * logps).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


# ---------------------------------------------------------------- the model
def build_model(a, T):
    import torch
    import transformers
    from transformers import Qwen2Config, Qwen2ForCausalLM
    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention") and \
        tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 1)
    kw = dict(hidden_size=a.hidden_size, num_hidden_layers=a.num_hidden_layers,
              num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
              intermediate_size=a.intermediate_size, vocab_size=a.vocab_size,
              max_position_embeddings=a.max_position_embeddings or T, rope_theta=a.rope_theta,
              rms_norm_eps=a.rms_norm_eps, tie_word_embeddings=a.tie_word_embeddings == "true",
              attention_dropout=0.0, use_cache=False)
    if a.head_dim:
        kw["head_dim"] = a.head_dim  # transformers 4.40's Qwen2 derives it (hidden / heads) and ignores this
    cfg = Qwen2Config(**kw)
    cfg._attn_implementation = "sdpa" if sdpa else "eager"  # a settable property in 4.40 and 5.x
    torch.manual_seed(a.seed)
    if a.device == "cuda" and not a.load_in_4bit:
        with torch.device("cuda"):  # initialised on the GPU: minutes faster at 1.5B than on the host
            model = Qwen2ForCausalLM(cfg)
    else:
        model = Qwen2ForCausalLM(cfg)
    if a.dtype == "bf16":
        model = model.to(torch.bfloat16)
    if a.load_in_4bit:
        model = quantize_4bit(model, a)
    elif a.device == "cuda":
        model = model.to("cuda")
    return model, transformers.__version__


def quantize_4bit(model, a):
    """bitsandbytes' Linear4bit for each linear of the decoder layers (what from_pretrained with a
    BitsAndBytesConfig(load_in_4bit, nf4) does), quantised as it moves to the GPU."""
    import torch
    import bitsandbytes as bnb
    for layer in model.model.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, torch.nn.Linear):
                    continue
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.bfloat16, compress_statistics=a.bnb_4bit_use_double_quant,
                                      quant_type="nf4")
                q.weight = bnb.nn.Params4bit(child.weight.data.to("cpu", torch.float16), requires_grad=False,
                                             compress_statistics=a.bnb_4bit_use_double_quant, quant_type="nf4")
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(parent, name, q)
    return model.to("cuda")


def wrap_lora(model, a):
    import torch
    import peft
    targets = a.lora_target_modules if a.lora_target_modules == "all-linear" else a.lora_target_modules.split(",")
    model = peft.get_peft_model(model, peft.LoraConfig(r=a.lora_r, lora_alpha=a.lora_alpha, target_modules=targets,
                                                       lora_dropout=0.0, bias="none", task_type="CAUSAL_LM"))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # adapters in float32 (peft >= 0.12 autocast_adapter_dtype)
    base = model.get_base_model()
    if a.gradient_checkpointing == "on":
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, base, peft.__version__


# ---------------------------------------------------------------- one step
def grpo_step(a, base, params, opt, batch):
    import torch
    ids, attn, mask, adv, Lp, W = batch
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if a.dtype == "bf16" and a.device == "cuda" else \
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    with ctx:  # the model's forward, as accelerate's autocast wraps it; the log-probs outside, as TRL
        hidden = base.model(input_ids=ids, attention_mask=attn, use_cache=False)[0]
        logits = base.lm_head(hidden[:, Lp - 1:Lp - 1 + W])  # logits_to_keep: the completion positions
    if a.temperature != 1.0:
        logits = logits / a.temperature
    logp = selective_log_softmax(logits, ids[:, Lp:Lp + W])
    with torch.no_grad():
        entropy = entropy_from_logits(logits)
    logp = logp.float()
    coef_1 = torch.exp(logp - logp.detach())
    coef_2 = torch.clamp(coef_1, 1 - a.epsilon, 1 + a.epsilon_high)
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ent = float((entropy.float() * mask).sum() / mask.sum().clamp(min=1.0))
    return float(loss), ent, float(grad_norm)


def make_batch(a, r, dev):
    import torch
    (tok, (N, T)), (msk, _), (rew, _) = r["tokens"], r["completion_mask"], r["rewards"]
    tokens = torch.tensor(tok, dtype=torch.long).view(N, T)
    mask = torch.tensor(msk, dtype=torch.float32).view(N, T)
    Lp = a.prompt_len or int((mask.sum(0) > 0).nonzero()[0])
    W = int(mask[:, Lp:].sum(1).max())  # the batch's longest completion: TRL pads to it
    rewards = torch.tensor(rew, dtype=torch.float32)
    G = a.num_generations
    if N % G:
        raise SystemExit(f"grpo_torch_lora: {N} rows are not groups of --num_generations {G}")
    g = rewards.view(-1, G)
    adv = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)).view(N, 1)
    ids = tokens[:, :Lp + W]
    comp = mask[:, Lp:Lp + W]
    attn = torch.cat([torch.ones(N, Lp, dtype=torch.long), comp.long()], 1)
    return (ids.to(dev), attn.to(dev), comp.to(dev), adv.to(dev), Lp, W), int(comp.sum())


def main(argv=None):
    a = parse_args(argv)
    if a.load_in_4bit:
        import importlib.util
        if importlib.util.find_spec("bitsandbytes") is None:
            print(json.dumps({"skip": "bitsandbytes is not installed (QLoRA in PyTorch is bitsandbytes' Linear4bit)"}))
            return 3
        if a.device != "cuda":
            print(json.dumps({"skip": "bitsandbytes' 4-bit layers need --device cuda"}))
            return 3
    for site in a.site:
        sys.path.insert(0, os.path.abspath(site))
    if a.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("grpo_torch_lora: --device cuda, but torch sees no CUDA device")
        torch.zeros(1, device="cuda")
        free0 = torch.cuda.mem_get_info()[0]
    r = read_rollouts(a.rollouts)
    batch, n_tokens = make_batch(a, r, a.device)
    model, tf_version = build_model(a, r["tokens"][1][1])
    model, base, peft_version = wrap_lora(model, a)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    if a.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(a.warmup + a.steps):
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss, ent, gn = grpo_step(a, base, params, opt, batch)
        if a.device == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= a.warmup:
            times.append(ms)
            print(json.dumps({"step": i + 1, "ms": round(ms, 3), "loss": loss, "entropy": ent, "grad_norm": gn}),
                  flush=True)
    s = {"summary": True, "median_ms": round(statistics.median(times), 3), "steps": len(times),
         "rows": batch[0].shape[0], "prompt_len": batch[4], "width": batch[5], "completion_tokens": n_tokens,
         "trainable_params": sum(p.numel() for p in params), "dtype": a.dtype,
         "gradient_checkpointing": a.gradient_checkpointing, "load_in_4bit": a.load_in_4bit,
         "torch": torch.__version__, "transformers": tf_version, "peft": peft_version, "device": a.device}
    if a.device == "cuda":
        s.update(device_name=torch.cuda.get_device_name(0), max_memory_allocated=torch.cuda.max_memory_allocated(),
                 max_memory_reserved=torch.cuda.max_memory_reserved(),
                 device_used_bytes=free0 - torch.cuda.mem_get_info()[0])
    print(json.dumps(s), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
