#!/usr/bin/python3
"""grpo_torch.py - the GRPO iteration of dfg's examples/grpo/grpo.c written as a PyTorch user would
write it: eager mode, fp32, CPU, no compilation, no Hugging Face libraries (by default; a GPU
run is described under "--device cuda" below, a transformers model under "--model DIR").

One step (--mode full), as examples/grpo/grpo.c runs it with its defaults:
  data        P problems of the `reverse` task (d random digits then '='), each repeated G times
  rollout     under torch.no_grad: prefill the prompts into a KV cache, then decode exactly
              max_completion_length tokens, one at a time, sampling at temperature 1
              (torch.multinomial); a row stops counting after its first EOS (completion mask)
  reward      the `mixed` reward of examples/tasks/tasks.c, in Python, per completion
  advantages  (r - group mean) / (group std + 1e-4), torch.std (unbiased): scale_rewards=group
  ref         the frozen initial model's per-token log-probs (beta = 0.04), under no_grad
  train       the policy's log-probs (log_softmax + gather on the completion positions only,
              as TRL's logits_to_keep), ratio = exp(logp - logp.detach()) (num_iterations 1),
              clipped surrogate (epsilon 0.2) + beta * k3 KL, loss_type grpo:
              mean over sequences of sum(l * m) / max(sum(m), 1); backward
  update      clip_grad_norm_(1.0), torch.optim.AdamW(lr 1e-3, betas (.9, .999), eps 1e-8, wd 0)

--mode fixed samples one rollout batch at the start (or loads --rollouts FILE, the safetensors
file that `dfg run --rollouts` reads: tokens i32 (N,T), completion_mask f32 (N,T), rewards
f32 (N)) and each step then runs advantages, ref, train and update on those same tokens, as
`dfg run --rollouts` does (which takes the rewards from the file too, so no reward is
recomputed here either).

Output: one JSON line per timed step on stdout, {"step": i, "ms": ..., "reward": ...} (the first
--warmup steps run but are not printed), then one summary line with the median step time and
the process's peak RSS (getrusage(RUSAGE_SELF).ru_maxrss * 1024 bytes).

--model DIR: instead of the GPT-2 above, a Hugging Face model built from DIR/config.json by
transformers (AutoModelForCausalLM.from_config: Qwen2ForCausalLM, LlamaForCausalLM, ...;
transformers 4.40.2 from --hf-site, default .deps/hf-4.40.2 as `tools/deps.sh --test` installs
it), float32, attn_implementation "eager", eval() (no dropout), random weights as transformers
initialises them (linear and embedding weights N(0, initializer_range), biases 0, norms 1;
DIR holds no weights, and dfg's own random init is the same distribution, not the same
numbers). The same step as above, done the Hugging Face way: the rollout's KV cache is the
model's own past_key_values (prefill with use_cache=True, then one token per forward passing
past_key_values back; transformers 4.40's DynamicCache), and the logits are the model's
lm_head on its final hidden states, only at the positions used, as transformers' logits_to_keep
gives them to TRL (the prefill's last position; the completion positions when scoring), then
log_softmax + gather over the whole vocabulary. The reference model is a frozen deep copy.
--model leaves --n_layer .. --vocab_size unused; n_positions is max_position_embeddings.

--lora_r R (with --model; --lora_alpha A, --lora_target_modules M, dfg's --set names): LoRA as
TRL trains with a PEFT LoraConfig: peft 0.11.1 (from --peft-site, default .deps/peft-0.11.1,
with accelerate; `tools/deps.sh --test`) wraps the transformers model with
get_peft_model(model, LoraConfig(r=R, lora_alpha=A, target_modules=M ("all-linear" or a comma
list), lora_dropout=0, bias="none", task_type="CAUSAL_LM")): the base frozen, adapters A (r, in)
and B (out, r) on each targeted linear, y += (alpha / r) x A^T B^T, PEFT's init (A kaiming-uniform,
B zero). The rollout and the policy's log-probs run through the adapted model; there is no
reference copy: the reference log-probs (beta != 0) are the same model under
`with model.disable_adapter():`, as TRL computes them for a PEFT policy; the AdamW optimizer and
clip_grad_norm_ get the adapters only (the parameters with requires_grad).

--stop-at-eos (the `varlen` config of bench.py): generation as transformers' generate() and so
TRL do it: a row that has sampled its EOS gets the pad id (0) from then on, and the decode loop
ends once every row has ended (at max_completion_length at the latest); the completions are as
wide as the batch's longest one, so the reference and policy passes score Lp + that width, not
Lp + max_completion_length (TRL pads to the batch's longest completion). Without it the loop
decodes exactly max_completion_length tokens, dfg's fixed-shape plan (the default, what the
other configs measure). --max_completion_length L (default digits + 2) sets the longest.

--weights FILE.safetensors: the initial policy (and reference) weights from a safetensors file
with Hugging Face GPT-2 names, as `dfg run --save` writes them (wte.weight, wpe.weight,
h.{l}.ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj.{weight,bias}, ln_f.*, with or
without the `transformer.` prefix; Conv1D weights are (in, out) and are transposed into
nn.Linear's (out, in); the attn.bias buffers are skipped). Every parameter must be there with
its shape. Built-in GPT-2 only.

Per step the JSON line also carries the completions' real lengths (`lengths`: per row, the
tokens up to and including EOS, as the completion mask counts them; `len_mean`, `len_max`), the
generated width (`width`) and `flops`: the model FLOPs of the positions this step computes,
counted as dfg's op cost rules count them (ops/matmul.c, ops/attention.c, ops/logprob.c), for
the built-in GPT-2 with L layers, width C, vocabulary V, N rows, prompt Lp, width W:
  per token and layer, the four linear layers   24 C^2          (2 * in * out each)
  causal attention over T positions, per layer  2 N T^2 C      (half of dense QK^T + PV)
  one cached decode token at context t          4 N t C        (QK^T + PV over t positions)
  lm_head + log_softmax of a scored position    2 C V + 10 V   (prefill/decode: 2 C V, last position)
  prefill N x Lp; W - 1 decode forwards (the last sampled token is not fed back); each scoring
  pass (reference when beta != 0, policy) N x (Lp + W) with lm_head on the W completion
  positions; the policy's backward 2x its forward. Layer norms, GELU, softmax, sampling, the
  loss and AdamW are not counted (dfg's counter includes them; for these models they are a
  few percent).

--device cuda: the models, the optimizer state and every tensor of the step on the GPU (the
prompts are drawn on the CPU, as on the CPU run, and copied; the reward stays plain Python on
the completions copied back, as TRL's reward functions are). The initial weights are made on
the CPU from --seed and moved, so they are those of a CPU run. Mixed precision is PyTorch's
usual one, not dfg's: --dtype bf16 (the default on cuda) runs the forward passes (rollout,
reference, policy) under torch.autocast(device_type="cuda", dtype=torch.bfloat16) with fp32
weights, fp32 gradients and fp32 AdamW state (the KV cache is bf16, as autocast's projections
produce it); dfg's cuda plans instead keep bf16 weights and activations with fp32 master
weights and moments, so the two hold the same fp32 optimizer state but different copies of the
weights. --dtype f32 runs everything in fp32 (matmuls without TF32, PyTorch's default), the
counterpart of `dfg compile --target cuda --set torch_dtype=float32`. AdamW is PyTorch's default
for CUDA tensors (foreach). Every timed step is bracketed by torch.cuda.synchronize(), so its
time is the GPU's, not the launches'. --compile wraps the model's forward passes with
torch.compile (--compile-mode, default "default"): the prefill / decode forward up to the
last position's logits, and the per-token log-probs (forward, lm_head, log_softmax, gather) of
the policy and the reference; sampling, the loss, backward and AdamW stay eager. The first
steps compile (keep them in --warmup). The summary line adds the device's name, the peak of
torch's allocator (torch.cuda.max_memory_allocated, and _reserved) and the device memory
measured as dfg measures its own: cudaMemGetInfo's free bytes once the context exists minus
the free bytes after the last step (torch's caching allocator does not give memory back, so
this is its peak reservation plus the libraries' workspaces).
"""
import argparse
import contextlib
import copy
import json
import math
import os
import resource
import struct
import sys
import time

PAD, EOS, DIGIT0, PLUS, MINUS, EQUALS = 0, 1, 2, 12, 13, 14  # examples/tasks/dfg_tasks.h
TASK_VOCAB = 15


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n_layer", type=int, default=2)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=64)
    ap.add_argument("--vocab_size", type=int, default=TASK_VOCAB)
    ap.add_argument("--n_positions", type=int, default=0, help="default: prompt + completion length (as dfg)")
    ap.add_argument("--digits", type=int, default=3)
    ap.add_argument("--max_completion_length", type=int, default=0, help="default: digits + 2 (as dfg)")
    ap.add_argument("--stop-at-eos", action="store_true", help="generate() semantics: pad after EOS, stop when "
                    "every row has ended, score and train at the batch's longest completion")
    ap.add_argument("--weights", help="initial weights: a safetensors file with Hugging Face GPT-2 names "
                    "(dfg run --save)")
    ap.add_argument("--prompts_per_step", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100, help="steps run in all (the first --warmup are not reported)")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--mode", choices=("full", "fixed"), default="full")
    ap.add_argument("--rollouts", help="fixed mode: train on this safetensors rollout (dfg's --rollouts format)")
    ap.add_argument("--save-rollouts", help="write the first rollout batch (dfg's --rollouts format) and go on")
    ap.add_argument("--model", help="a Hugging Face model directory: build the model from its config.json with "
                    "transformers (random weights) instead of the GPT-2 above")
    ap.add_argument("--hf-site", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), ".deps", "hf-4.40.2"),
        help="where transformers is installed (--model; default: the repository's .deps/hf-4.40.2)")
    ap.add_argument("--lora_r", type=int, default=0, help="--model: LoRA adapters of this rank with PEFT (0: none, "
                    "every weight trains)")
    ap.add_argument("--lora_alpha", type=float, default=8.0, help="LoRA scale = lora_alpha / lora_r (PEFT's default 8)")
    ap.add_argument("--lora_target_modules", default="all-linear",
                    help="PEFT's target_modules: all-linear or a comma-separated list of module names")
    ap.add_argument("--peft-site", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), ".deps", "peft-0.11.1"),
        help="where peft (and accelerate) are installed (--lora_r; default: the repository's .deps/peft-0.11.1)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("f32", "bf16"), help="f32 (the default on cpu) or bf16 autocast (the default "
                    "on cuda; cuda only)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward passes (PyTorch 2.0+)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile's mode (default, reduce-overhead, ...)")
    # the remaining GRPO settings, at examples/grpo/grpo.c's defaults
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--max_grad_norm", type=float, default=1.0)
    return ap.parse_args(argv)


ARGS = parse_args()
# Debian's torch runs its matrix products in OpenBLAS (pthreads build), whose thread count
# torch.set_num_threads does not set: fix it (and OpenMP's) before torch is loaded.
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---------------------------------------------------------------- the model (GPT-2)
def attention(q, k, v, causal):
    """(B, H, Tq, hd) x (B, H, Tk, hd): SDPA where torch has it (2.0+), else nanoGPT's fallback."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    if causal:
        Tq, Tk = q.size(-2), k.size(-2)
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - Tq)
        att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.n_head = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, cache=None, pos=0):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        if cache is not None:  # a preallocated (B, H, n_positions, hd) K and V per layer
            kc, vc = cache
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            k, v = kc[:, :, :pos + T], vc[:, :, :pos + T]
        y = attention(q, k, v, causal=T > 1)  # one new token attends to the whole cache
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab_size, n_positions):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        # the initialisation of dfg's GPT-2 (ops/nn/nn.c): N(0, 0.02), wpe N(0, 0.01), the residual
        # projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1 / 0
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif name.startswith("wpe"):
                    p.normal_(0.0, 0.01)
                elif name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, idx, caches=None, pos=0):
        """Hidden states (B, T, C) after ln_f of tokens idx (B, T) at positions pos .. pos+T-1."""
        T = idx.size(1)
        x = self.wte(idx) + self.wpe.weight[pos:pos + T]
        for l, block in enumerate(self.h):
            x = block(x, None if caches is None else caches[l], pos)
        return self.ln_f(x)

    def lm_head(self, h):
        return F.linear(h, self.wte.weight)  # tied to wte, as GPT-2


# ---------------------------------------------------------------- a Hugging Face model (--model DIR)
def load_hf(directory, site):
    """transformers' causal LM for directory/config.json: float32, eager attention, random
    weights (transformers' own init, under the seed already set), eval()."""
    for k, v in (("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                 ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)
    if site and os.path.isdir(site):
        sys.path.insert(0, site)
    try:
        import transformers
    except ImportError as e:
        sys.exit(f"grpo_torch: --model needs transformers (looked in {site}: run tools/deps.sh --test): {e}")
    cfg = transformers.AutoConfig.from_pretrained(directory)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    model.float().eval()  # config.json's torch_dtype (bfloat16) is the checkpoint's; the CPU run is fp32
    return model, transformers.__version__


def wrap_lora(model, a):
    """get_peft_model(model, LoraConfig(...)) with PEFT from a.peft_site: returns (the PeftModel,
    peft's version). PEFT injects its LoRA layers into model itself, so model (the transformers
    model) keeps working with HF's passes below, adapters on unless under disable_adapter()."""
    if a.peft_site and os.path.isdir(a.peft_site):
        sys.path.insert(0, a.peft_site)
    try:
        import warnings
        warnings.filterwarnings("ignore", module="peft")
        import peft
    except ImportError as e:
        sys.exit(f"grpo_torch: --lora_r needs peft (looked in {a.peft_site}: run tools/deps.sh --test): {e}")
    targets = a.lora_target_modules if a.lora_target_modules == "all-linear" else a.lora_target_modules.split(",")
    cfg = peft.LoraConfig(r=a.lora_r, lora_alpha=a.lora_alpha, target_modules=targets, lora_dropout=0.0,
                          bias="none", task_type="CAUSAL_LM")
    pm = peft.get_peft_model(model, cfg)
    pm.eval()
    return pm, peft.__version__


class HF:
    """The forward passes of the step for a transformers causal LM: its base model (the
    decoder, final norm included) and its lm_head (get_output_embeddings)."""

    @staticmethod
    def n_positions(model):
        return model.config.max_position_embeddings

    @staticmethod
    def vocab_size(model):
        return model.config.vocab_size

    @staticmethod
    def last_logits(model, idx, past, temperature):
        """(logits of the last position (N, V), the cache): lm_head at that position only, as
        transformers' generate asks for with logits_to_keep=1."""
        out = model.base_model(input_ids=idx, past_key_values=past, use_cache=True)
        logits = model.get_output_embeddings()(out.last_hidden_state[:, -1])
        if temperature != 1.0:
            logits = logits / temperature
        return logits, out.past_key_values

    @staticmethod
    @torch.no_grad()
    def generate(model, prompts, max_new, temperature):
        N = prompts.size(0)
        out = torch.empty(N, max_new, dtype=torch.long, device=prompts.device)
        logits, past = HF.last_logits(model, prompts, None, temperature)  # prefill
        for i in range(max_new):
            tok = torch.multinomial(F.softmax(logits, dim=-1), 1)
            out[:, i] = tok[:, 0]
            if i + 1 < max_new:
                logits, past = HF.last_logits(model, tok, past, temperature)  # positions from the cache's length
        return out

    @staticmethod
    def token_logp(model, tokens, Lp, temperature):
        """Per-token log-probs of the completion tokens: the final hidden states, lm_head on the
        positions that predict the completion (TRL's logits_to_keep), log_softmax, gather."""
        h = model.base_model(input_ids=tokens, use_cache=False).last_hidden_state[:, Lp - 1:-1]
        logits = model.get_output_embeddings()(h)
        if temperature != 1.0:
            logits = logits / temperature
        return torch.gather(F.log_softmax(logits, dim=-1), 2, tokens[:, Lp:].unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------- the task and its reward
def make_prompts(P, G, digits):
    """reverse task: P prompts of `digits` digits then '=', each repeated G times; answers (P*G, d)."""
    d = torch.randint(0, 10, (P, digits))
    prompt = torch.cat([d + DIGIT0, torch.full((P, 1), EQUALS)], dim=1)
    answer = d.flip(1) + DIGIT0
    return prompt.repeat_interleave(G, dim=0), answer.repeat_interleave(G, dim=0)


def reward_mixed(completion, answer):
    """examples/tasks/tasks.c's `mixed`: 0.6 exact + 0.3 partial + 0.1 format, 1 only for the exact answer."""
    m = completion.index(EOS) if EOS in completion else len(completion)
    eos = m < len(completion)
    L = len(answer)
    if eos and completion[:m] == answer:
        return 1.0
    k = m + 1 if eos else m
    target = answer + [EOS]
    hits = sum(1 for i in range(min(k, L + 1)) if completion[i] == target[i])
    partial = hits / max(k, L + 1)
    first = 1 if m > 0 and completion[0] == MINUS else 0
    fmt = 1.0 if eos and m - first >= 1 and all(DIGIT0 <= t < DIGIT0 + 10 for t in completion[first:m]) else 0.0
    return 0.3 * partial + 0.1 * fmt


def rewards_of(completions, answers):
    return torch.tensor([reward_mixed(c, a) for c, a in zip(completions.tolist(), answers.tolist())])


# ---------------------------------------------------------------- GRPO
def last_logits(model, idx, caches, pos, temperature):
    """The next-token logits after tokens idx (B, T) at positions pos .. pos+T-1, which go into
    the KV caches: (B, vocab_size)."""
    logits = model.lm_head(model(idx, caches, pos)[:, -1])
    if temperature != 1.0:
        logits = logits / temperature
    return logits


@torch.no_grad()
def generate(model, prompts, max_new, temperature, fwd=last_logits, cache_dtype=torch.float32, stop_at_eos=False):
    """Samples max_new tokens after each prompt with a KV cache: (N, max_new) token ids. fwd is
    last_logits or its torch.compile'd version. stop_at_eos: as transformers' generate(), a row
    that has sampled EOS gets PAD from then on and the loop ends once every row has ended:
    (N, W) with W the longest completion (max_new if a row never ended)."""
    N, Lp = prompts.shape
    cfg = model.h[0]
    C = model.wte.embedding_dim
    H = cfg.n_head
    T = Lp + max_new
    dev = prompts.device
    caches = [(torch.empty(N, H, T, C // H, dtype=cache_dtype, device=dev),
               torch.empty(N, H, T, C // H, dtype=cache_dtype, device=dev)) for _ in model.h]
    out = torch.empty(N, max_new, dtype=torch.long, device=dev)
    finished = torch.zeros(N, 1, dtype=torch.bool, device=dev)
    logits = fwd(model, prompts, caches, 0, temperature)  # prefill the whole prompt
    for i in range(max_new):
        tok = torch.multinomial(F.softmax(logits, dim=-1), 1)  # (N, 1)
        if stop_at_eos:  # generate(): next = next * unfinished + pad * (1 - unfinished)
            tok = tok.masked_fill(finished, PAD)
            finished |= tok == EOS
        out[:, i] = tok[:, 0]
        if stop_at_eos and bool(finished.all()):  # generate()'s stopping criteria: every row has ended
            return out[:, :i + 1]
        if i + 1 < max_new:
            logits = fwd(model, tok, caches, Lp + i, temperature)
    return out


def completion_mask(completions):
    """1 on the tokens up to and including the first EOS, 0 after it."""
    is_eos = (completions == EOS).long()
    return ((is_eos.cumsum(1) - is_eos) == 0).float()


def token_logp(model, tokens, Lp, temperature):
    """log p(tokens[:, t] | tokens[:, <t]) for the completion positions t = Lp .. T-1: (N, T - Lp)."""
    h = model(tokens)[:, Lp - 1:-1]  # the hidden states that predict the completion tokens
    logits = model.lm_head(h)
    if temperature != 1.0:
        logits = logits / temperature
    return torch.gather(F.log_softmax(logits, dim=-1), 2, tokens[:, Lp:].unsqueeze(-1)).squeeze(-1)


def advantages_of(rewards, G):
    r = rewards.view(-1, G)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)


def train_step(policy, ref, opt, tokens, mask, rewards, Lp, a, logp_fn=token_logp, amp=contextlib.nullcontext,
               ref_off=None, trained=None):
    """advantages, reference log-probs, the GRPO loss, backward, clipping and AdamW. logp_fn is
    token_logp or its torch.compile'd version; amp() the autocast context of the forward passes.
    ref_off (LoRA): a context under which policy is the reference (PEFT's disable_adapter), used
    instead of ref; trained: the parameters clipped (default: all of policy's)."""
    adv = advantages_of(rewards, a.num_generations)
    if a.beta != 0.0:
        with torch.no_grad(), amp(), (ref_off() if ref_off else contextlib.nullcontext()):
            ref_logp = logp_fn(policy if ref_off else ref, tokens, Lp, a.temperature)
    with amp():
        logp = logp_fn(policy, tokens, Lp, a.temperature)
    old_logp = logp.detach()  # num_iterations 1: the ratio is 1, its gradient is not
    ratio = torch.exp(logp - old_logp)
    A = adv.unsqueeze(1)
    per_token = -torch.min(ratio * A, torch.clamp(ratio, 1 - a.epsilon, 1 + a.epsilon) * A)
    if a.beta != 0.0:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1  # k3
        per_token = per_token + a.beta * kl
    loss = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()  # loss_type grpo
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters() if trained is None else trained, a.max_grad_norm)
    opt.step()
    return loss.item()


# ---------------------------------------------------------------- safetensors (dfg's rollout files)
ST_DTYPES = {"I32": (torch.int32, 4), "F32": (torch.float32, 4), "I64": (torch.int64, 8),
             "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}
TORCH_ST = {torch.int32: "I32", torch.float32: "F32", torch.int64: "I64"}


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": TORCH_ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt, _ = ST_DTYPES[e["dtype"]]
        lo, hi = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[8 + n + lo:8 + n + hi]), dtype=dt).view(e["shape"]).clone()
    return out


# ---------------------------------------------------------------- dfg's saved weights (--weights)
def gpt2_hf_name(name):
    """This file's GPT-2 parameter name -> (Hugging Face GPT-2's name, whether its weight is a
    Conv1D (in, out) to transpose into nn.Linear's (out, in))."""
    parts = name.split(".")
    if parts[0] != "h":
        return name, False
    l, rest = parts[1], ".".join(parts[2:])
    hf = {"c_attn": "attn.c_attn", "c_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}
    mod, leaf = rest.rsplit(".", 1)
    if mod in hf:
        return f"h.{l}.{hf[mod]}.{leaf}", leaf == "weight"
    return name, False


def load_gpt2_weights(model, path):
    """Sets every parameter of the built-in GPT-2 from a safetensors file with Hugging Face
    GPT-2 names (dfg run --save); returns how many tensors were set."""
    t = st_read(path)
    t = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in t.items()}
    used = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            hf, conv1d = gpt2_hf_name(name)
            if hf not in t:
                sys.exit(f"grpo_torch: {path} has no '{hf}' (for {name})")
            w = t[hf].float()
            if conv1d:
                w = w.t()
            if tuple(w.shape) != tuple(p.shape):
                sys.exit(f"grpo_torch: {path}: '{hf}' is {tuple(t[hf].shape)}, the model's {name} needs "
                         f"{tuple(p.shape)}{' transposed' if conv1d else ''}")
            p.copy_(w)
            used.add(hf)
    extra = [k for k in t if k not in used and not k.endswith(("attn.bias", "attn.masked_bias")) and k != "lm_head.weight"]
    if extra:
        sys.exit(f"grpo_torch: {path} has tensors the GPT-2 here does not use: {', '.join(sorted(extra)[:8])}")
    return len(used)


# ---------------------------------------------------------------- model FLOPs of a step (built-in GPT-2)
def step_flops(L, C, V, N, Lp, W, beta, rollout):
    """The model FLOPs of one step as dfg's op cost rules count them (see the module docstring):
    prefill and W - 1 decode forwards (rollout), a reference pass (beta != 0) and the policy's
    forward + backward (3x) over N rows of Lp + W tokens with W scored positions each."""
    lin = 24 * C * C  # c_attn 3C^2, c_proj C^2, c_fc 4C^2, mlp proj 4C^2; 2 flops a multiply-add

    def full(T, scored):
        return L * (lin * N * T + 2 * N * T * T * C) + N * scored * (2 * C * V + 10 * V)

    f = 0
    if rollout:
        f += L * (lin * N * Lp + 2 * N * Lp * Lp * C) + 2 * N * C * V  # prefill, logits of the last position
        for i in range(W - 1):  # the token at position Lp + i, attending to Lp + i + 1 positions
            f += L * (lin * N + 4 * N * (Lp + i + 1) * C) + 2 * N * C * V
    score = full(Lp + W, W)
    return f + (score if beta != 0.0 else 0) + 3 * score


# ---------------------------------------------------------------- main
def loaded_blas():
    """The BLAS / OpenMP libraries this process mapped (Debian's alternatives decide which)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if any(k in line for k in ("blas", "gomp", "mkl"))}
        return sorted(os.path.realpath(p) for p in libs if p.startswith("/"))
    except OSError:
        return []


def cuda_setup(a):
    """--device cuda: checks, and returns the device's free bytes once the context exists (the
    baseline of the measured device memory, as dfg's)."""
    if not torch.cuda.is_available():
        sys.exit(f"grpo_torch: --device cuda, but this PyTorch ({torch.__version__}, CUDA {torch.version.cuda}) "
                 f"sees no CUDA device (torch.cuda.is_available() is False)")
    free, _ = torch.cuda.mem_get_info()  # creates the context first
    return free


def main(a):
    if a.dtype is None:
        a.dtype = "bf16" if a.device == "cuda" else "f32"
    if a.dtype == "bf16" and a.device != "cuda":
        sys.exit("grpo_torch: --dtype bf16 is for --device cuda (the CPU runs are fp32)")
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"grpo_torch: --compile needs PyTorch 2.0+ (this is {torch.__version__})")
    dev = torch.device(a.device)
    free_at_start = cuda_setup(a) if a.device == "cuda" else None
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if a.dtype == "bf16":
        def amp():
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        amp = contextlib.nullcontext
    cache_dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    fwd, logp_fn = last_logits, token_logp
    if a.compile:
        fwd = torch.compile(last_logits, mode=a.compile_mode)
        logp_fn = torch.compile(token_logp, mode=a.compile_mode)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    Lp, max_new = a.digits + 1, a.max_completion_length or a.digits + 2  # examples/grpo/grpo.c's defaults
    T = Lp + max_new
    P, G = a.prompts_per_step, a.num_generations
    hf_version = peft_version = peft_model = None
    if a.lora_r and not a.model:
        sys.exit("grpo_torch: --lora_r is for --model (a transformers model wrapped by PEFT)")
    if a.model:  # a transformers model from config.json (random weights)
        if a.stop_at_eos or a.weights:
            sys.exit("grpo_torch: --stop-at-eos and --weights are for the built-in GPT-2, not --model")
        if a.compile:
            sys.exit("grpo_torch: --compile is for the built-in GPT-2, not --model")
        policy, hf_version = load_hf(a.model, a.hf_site)
        if a.lora_r:
            peft_model, peft_version = wrap_lora(policy, a)  # policy is the adapted model from here on
        n_positions, vocab_size = HF.n_positions(policy), HF.vocab_size(policy)
    else:
        n_positions, vocab_size = a.n_positions or T, a.vocab_size
    if T > n_positions:
        sys.exit(f"grpo_torch: prompt {Lp} + completion {max_new} tokens exceed n_positions {n_positions}")
    if vocab_size < TASK_VOCAB:
        sys.exit(f"grpo_torch: vocab_size {vocab_size} is smaller than the task's vocabulary ({TASK_VOCAB})")
    if a.model:
        ref = None
        if a.beta != 0.0 and not a.lora_r:  # LoRA: the reference is the policy under disable_adapter()
            ref = copy.deepcopy(policy)  # the frozen initial policy
            ref.requires_grad_(False)
            ref.to(dev)
        gen = lambda m, prompts: HF.generate(m, prompts, max_new, a.temperature)  # noqa: E731
        logp_fn = HF.token_logp
    else:
        policy = GPT2(a.n_layer, a.n_head, a.n_embd, a.vocab_size, n_positions)
        if a.weights:
            load_gpt2_weights(policy, a.weights)
        ref = None
        if a.beta != 0.0:
            ref = GPT2(a.n_layer, a.n_head, a.n_embd, a.vocab_size, n_positions)
            ref.load_state_dict(policy.state_dict())  # the frozen initial policy
            ref.requires_grad_(False)
            ref.to(dev)
        gen = lambda m, prompts: generate(m, prompts, max_new, a.temperature, fwd, cache_dtype,  # noqa: E731
                                          a.stop_at_eos)
    policy.to(dev)  # made on the CPU from the seed, so the weights are a CPU run's
    trained = [p for p in policy.parameters() if p.requires_grad]  # LoRA: the adapters only
    ref_off = peft_model.disable_adapter if peft_model is not None else None
    opt = torch.optim.AdamW(trained, lr=a.learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    def rollout():
        prompts, answers = make_prompts(P, G, a.digits)
        prompts = prompts.to(dev)
        with amp():
            completions = gen(policy, prompts)
        mask = completion_mask(completions)
        rewards = rewards_of(completions, answers).to(dev)
        tokens = torch.cat([prompts, completions], dim=1)
        return tokens, torch.cat([torch.zeros(P * G, Lp, device=dev), mask], dim=1), rewards

    def padded(tokens, mask):
        """A rollout narrower than T (--stop-at-eos) padded to T columns: dfg's --rollouts format."""
        pad = T - tokens.size(1)
        return F.pad(tokens, (0, pad), value=PAD), F.pad(mask, (0, pad), value=0.0)

    if a.mode == "fixed" and a.stop_at_eos:
        sys.exit("grpo_torch: --stop-at-eos is for --mode full (fixed rollouts have a fixed width)")
    fixed = None
    if a.mode == "fixed":
        if a.rollouts:
            r = st_read(a.rollouts)
            tok, m, rw = r["tokens"], r["completion_mask"], r["rewards"]
            if tuple(tok.shape) != (P * G, T) or tuple(m.shape) != (P * G, T) or tuple(rw.shape) != (P * G,):
                sys.exit(f"grpo_torch: {a.rollouts} holds tokens {tuple(tok.shape)}, completion_mask "
                         f"{tuple(m.shape)}, rewards {tuple(rw.shape)}; this config needs ({P * G}, {T}) and ({P * G},)")
            fixed = (tok.long().to(dev), m.float().to(dev), rw.float().to(dev))
        else:
            fixed = rollout()
        if a.save_rollouts:
            st_write(a.save_rollouts, {"tokens": fixed[0].int(), "completion_mask": fixed[1], "rewards": fixed[2]})

    times = []
    for step in range(1, a.steps + 1):
        sync()
        t0 = time.perf_counter()
        if fixed is None:
            tokens, full_mask, rewards = rollout()
            if step == 1 and a.save_rollouts:
                tw = time.perf_counter()
                tk, mk = padded(tokens, full_mask)
                st_write(a.save_rollouts, {"tokens": tk.int(), "completion_mask": mk, "rewards": rewards})
                t0 += time.perf_counter() - tw  # the write is no part of the step's time
        else:
            tokens, full_mask, rewards = fixed
        loss = train_step(policy, ref, opt, tokens, full_mask[:, Lp:], rewards, Lp, a, logp_fn, amp, ref_off, trained)
        sync()
        ms = 1e3 * (time.perf_counter() - t0)
        if step > a.warmup:
            times.append(ms)
            W = tokens.size(1) - Lp  # the completions' width: the longest one with --stop-at-eos
            lengths = full_mask[:, Lp:].sum(1).round().int().tolist()  # real tokens, EOS included
            flops = None if a.model else step_flops(a.n_layer, a.n_embd, vocab_size, P * G, Lp, W, a.beta,
                                                    fixed is None)
            print(json.dumps({"step": step, "ms": round(ms, 3), "reward": round(rewards.mean().item(), 6),
                              "loss": round(loss, 6), "width": W, "len_mean": sum(lengths) / len(lengths),
                              "len_max": max(lengths), "lengths": lengths, "flops": flops}), flush=True)
    times.sort()
    med = times[len(times) // 2] if len(times) % 2 else (sum(times[len(times) // 2 - 1:len(times) // 2 + 1]) / 2 if times else None)
    summary = {"summary": True, "mode": a.mode, "steps": a.steps, "warmup": a.warmup, "timed_steps": len(times),
               "median_ms": med, "threads": a.threads, "torch": torch.__version__,
               "sequences": P * G, "prompt_len": Lp, "completion_len": max_new, "stop_at_eos": a.stop_at_eos,
               "weights": a.weights,
               "params": sum(p.numel() for p in policy.parameters()),
               "trained_params": sum(p.numel() for p in trained), "blas": loaded_blas(),
               "model": a.model or "gpt2 (built in)", "transformers": hf_version, "peft": peft_version,
               "lora": dict(r=a.lora_r, alpha=a.lora_alpha, target_modules=a.lora_target_modules) if a.lora_r else None,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if a.device == "cuda":
        sync()
        free_now, _ = torch.cuda.mem_get_info()
        summary.update(device=torch.cuda.get_device_name(), cuda=torch.version.cuda, dtype=a.dtype,
                       compile=a.compile_mode if a.compile else None,
                       peak_device_allocated_bytes=torch.cuda.max_memory_allocated(),
                       peak_device_reserved_bytes=torch.cuda.max_memory_reserved(),
                       device_bytes_measured=free_at_start - free_now)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main(ARGS)
