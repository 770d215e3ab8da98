#!/usr/bin/python3
"""Golden test: dfg's LoRA GRPO step (examples/grpo/grpo.c with lora_r > 0) against Hugging Face PEFT.

For each configuration (Qwen2, Llama and GPT-2 models of hf_golden.py; beta 0 and > 0; adapters on
named modules and on all-linear with use_rslora; QLoRA, below) this script
  1. writes a random model directory with transformers (hf_golden.py's build_model, randomise,
     save_model), wraps it with PEFT 0.11.1 (get_peft_model, LoraConfig(r, lora_alpha,
     target_modules, use_rslora, lora_dropout=0)), redraws every lora_A and lora_B (a nonzero
     adapter: PEFT's default B = 0 would leave A's gradient zero) and writes the adapter with
     PEFT's own save_pretrained (adapter_config.json, adapter_model.safetensors);
  2. compiles and runs the GRPO pipeline as a user does:
       dfg compile examples/grpo/grpo.c -o plan.dfg --set model=DIR --set lora_r=R --set lora_alpha=A
           --set lora_target_modules=q_proj,v_proj [--set use_rslora=true] --set task=reverse ...
       dfg run plan.dfg --weights DIR --adapter ADAPTER/ --rollouts R --steps 1 --dump OUT --save SAVED/
  3. computes the same step in float64 with grpo_golden.py's GRPO (TRL's formulas) on the PEFT
     model's own forward (the PeftModel in double): the trainable parameters are the adapters
     only, the reference model is PEFT's `with model.disable_adapter():` (TRL's reference for a
     PEFT policy), clip_grad_norm_ and AdamW (decay on the adapter matrices) over the adapters;
     and compares with grpo_golden.py's rules (compare_step): logp, ref_logp, advantages, loss,
     grad_norm (the adapters' gradient norm), kl and every updated lora_A / lora_B to 1e-4
     relative, their updates (new - old) to 1e-2 of the largest; any base weight in the dump must
     be bit-identical to the model directory's (frozen);
  4. loads SAVED/ with PeftModel.from_pretrained(base, SAVED/): PEFT's tensor names exactly (those
     PEFT's own save_pretrained wrote), adapter_config.json's r, lora_alpha, use_rslora and
     lora_dropout 0, PEFT's scale, LoRA layers on exactly the adapted modules (from its
     target_modules, however written), and exactly the dump's adapter weights in each;
  5. runs the step again with --save MERGED/ --merge: transformers loads MERGED/, whose weights
     equal PEFT's merge_and_unload() of the base with that run's trained adapter (1e-4 relative,
     every other tensor bit-identical to the base's), as do its logits on the rollouts (1e-4);
and, for a Llama and a GPT-2 configuration, a plan compiled without lora_target_modules adapts
PEFT 0.11.1's default modules (q_proj,v_proj; c_attn), and a run of it without --adapter (--steps
0, or one step at learning_rate 0 where dfg refuses 0 steps) saves PEFT's default initialisation:
every lora_B zero, every lora_A within kaiming-uniform's |a| <= 1/sqrt(in_features) and spread over
it; for a Qwen2 one, an adapter whose r differs from the plan's lora_r is refused.

QLoRA (qwen2_all_4bit_kl: all-linear, beta > 0; llama_qv_4bit_dq_b0: q_proj,v_proj, double
quantisation, beta 0; gpt2_attn_4bit_dq_kl: c_attn,c_proj, double quantisation, use_rslora, beta > 0)
compiles with --set load_in_4bit=true [--set bnb_4bit_use_double_quant=true]: dfg stores every
linear of the blocks (q/k/v/o/gate/up/down_proj; GPT-2's c_attn, attn.c_proj, c_fc, mlp.c_proj),
adapted or not, as NF4, quantised as --weights loads it. The reference is the same PeftModel, but
over a base whose block linear weights were replaced, before PEFT wraps it, by their NF4 round trip:
bitsandbytes' quantize_4bit(nf4, blocksize 64, compress_statistics = double quantisation) and
dequantize_4bit in nf4_golden.py's NumPy transcription (itself checked bit for bit against dfg's
quantiser), applied to each weight tensor as stored in the file, flattened row-major (nn.Linear's
(out, in); GPT-2's Conv1D (in, out)), as dfg quantises it. Embeddings, norms, biases and the
lm_head stay as read. The reference model (disable_adapter()) is that quantised base, as TRL's
reference of a 4-bit PEFT policy is. The comparisons are those above, with two differences: --merge
is compared with merge_and_unload() of the quantised reference, and its unadapted block linears must
be the round trip's values bit for bit (dfg writes the dequantised base); and the reference checks
also require that exactly the block linears changed, each block of 64 on NF4's grid (code * the
block's largest |value|), and that the round trip moves the logits by over 100 x the tolerance.
--wrong-reference leaves the round trip out of those configurations' reference (the test's own
test: they must fail).

Before that it checks its own reference (also alone with --check-reference, no dfg): every LoRA
layer's output in the PEFT model equals base(x) + (x @ A^T @ B^T) * scale written out here
(scale = alpha / r, alpha / sqrt(r) with use_rslora; GPT-2's Conv1D as x @ W + b) and PEFT wraps
exactly the modules the targets name (suffix match; all-linear: every Linear/Conv1D but the output
head); disable_adapter() gives the logits of the plain transformers model; merge_and_unload()
gives PEFT's logits.

--emulate-gpu f32|bf16 (grpo_golden.py's mode): every plan is compiled with --target cuda --set
torch_dtype=float32|bfloat16 and run with dfg run --emulate-gpu --threads 1 (the CUDA backend's own
code, its .cu kernels under the SIMT emulator, GEMMs by the cuBLAS interpreter; a few seconds a
step for these models). In f32 everything above is checked at the CPU's tolerances. In bf16 (the
cuda default: the frozen base and the adapters in bf16, f32 masters for the adapters) the reference
starts from the weights dfg computes with: every base weight and every adapter rounded to the
nearest bf16 (ties to even, grpo_golden.bf16_rounded), for QLoRA the block linears' NF4 round trip
(f32 products code * absmax) rounded to bf16 as the dequantisation kernel writes bf16; the step is
compared at grpo_golden's bf16 tolerances (TOL_BF16 per tensor, TOL_BF16_KL_SUMS for loss, kl and
grad_norm, the sums of exp(ref_logp - logp), with adapters drawn at B_STD_BF16: see there), and the updates (new - old) are not compared: a bf16
parameter cannot show an update smaller than its rounding (the f32 masters hold it). The updated
adapters are still compared as weights: Adam's first step is ~lr * sign(g), and a tiny gradient
whose sign bf16 flips moves an element by up to 2 lr, ~2e-2 of GPT-2's mlp.c_proj lora_A
(|a| <= 1/sqrt(132)), the tightest here against TOL_BF16 (1.97e-2 seen over 12 seeds at B_STD; 1.3e-2
over 4 seeds at B_STD_BF16). A base weight
the dump holds must equal its bf16 rounding bit for bit. The --save, --save --merge, default-init
and mismatched-r checks are left out in bf16 (they check the CLI's files, not the backend's
arithmetic, and --merge's 1e-4 against merge_and_unload() does not hold for a bf16 base); f32
keeps all of them.

Exit codes: 0 all agree, 1 a mismatch or an error, 77 torch, numpy, transformers or peft cannot be
imported (ctest: skipped) -- unless DFG_REQUIRE_HF=1, which makes that a failure (CI). The
transformers directory is --hf-site (DFG_HF_SITE wins), PEFT's and accelerate's --peft-site
(DFG_PEFT_SITE wins), both from tools/deps.sh --test. The seed is fresh each run and printed;
DFG_TEST_SEED replays one.
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import time

import golden_common
from golden_common import run_seed

HERE = os.path.dirname(os.path.abspath(__file__))
HF_VERSION = "4.40.2"
PEFT_VERSION = "0.11.1"
TOL = 1e-4          # as grpo_golden.py's, for every compared quantity of dfg
TOL_SELF = 1e-12    # the float64 reference against its own written-out math
TOL_SELF_MERGE = 1e-5  # PEFT's float32 merged model against its float32 unmerged one
PROG = "peft_golden"
# --emulate-gpu: None, "f32" or "bf16" (the tolerances are grpo_golden's: G.TOL_BF16, G.TOL_BF16_KL_SUMS)
GPU = {"mode": None}


def target_flags():
    """dfg compile's flags for the mode: a cuda plan in float32 or bfloat16 (none on the CPU)."""
    mode = GPU["mode"]
    return ["--target", "cuda", "--set", "torch_dtype=" + ("float32" if mode == "f32" else "bfloat16")] if mode else []


def run_flags():
    """dfg run's flags for the mode: the cuda plan on the emulated GPU, one thread."""
    return ["--emulate-gpu", "--threads", "1"] if GPU["mode"] else []


def bf16_model_(model):
    """model's parameters (the base's and the adapters', tied ones once) rounded to bf16 in place,
    as a bf16 plan computes with them; returns model."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.from_numpy(G.bf16_rounded({"w": p.detach().to(torch.float32).numpy()})["w"]).to(p.dtype))
    return model


def unavailable(why):
    golden_common.unavailable(PROG, why)


def import_libraries(hf_site, peft_site):
    """numpy, torch, transformers (hf_site), peft (peft_site) and hf_golden's helpers (module H,
    whose G is grpo_golden) into globals. A missing library is a skip (golden_common.unavailable)."""
    global np, torch, nn, transformers, peft, st_torch, H, G, NF, NF4_MAP
    if not os.path.isdir(peft_site):
        unavailable(f"no peft directory {peft_site}")
    sys.path.insert(0, peft_site)  # before transformers is imported: it looks for accelerate once
    sys.path.insert(0, HERE)
    import hf_golden as H
    H.import_libraries(hf_site, PROG)  # numpy, torch and transformers (hf_site, ahead of peft_site)
    np, torch, nn, transformers, st_torch, G = H.np, H.torch, H.nn, H.transformers, H.st_torch, H.G
    try:
        import warnings
        warnings.filterwarnings("ignore", module="peft")  # fan_in_fan_out set for Conv1D, etc.
        import peft
        from peft import LoraConfig, PeftModel, get_peft_model  # noqa: F401
    except Exception as e:  # noqa: BLE001
        unavailable(f"cannot import peft from {peft_site} ({type(e).__name__}: {e})")
    if peft.__version__ != PEFT_VERSION:
        unavailable(f"{peft_site} holds peft {peft.__version__}, not {PEFT_VERSION}")
    import nf4_golden as NF  # bitsandbytes' quantize_4bit / dequantize_4bit in NumPy (checked against dfg there)
    NF4_MAP = NF.create_dynamic_map()  # double quantisation's 8-bit map (signed), as bitsandbytes builds it


# ---------------------------------------------------------------- the configurations
# hf_golden.py's architectures (odd sizes, GQA, biases, tied and untied heads, GPT-2's Conv1D).
# r, alpha chosen so that alpha / r, alpha / sqrt(r) and 1 all differ. GPT-2's "c_proj" names
# two modules (attn.c_proj and mlp.c_proj): PEFT matches suffixes, so both get an adapter.
# The "kl" configurations have beta > 0: the reference is the base (adapter off), and the KL term
# and its gradient are nonzero because the adapter is. init_check: also a plan without
# lora_target_modules (PEFT 0.11.1's default targets: Llama q_proj,v_proj, GPT-2 c_attn; it has
# none for Qwen2) run without --adapter; mismatch_check: an adapter of another r is refused.
# QLoRA (load_in_4bit, double_quant: --set load_in_4bit=true [bnb_4bit_use_double_quant=true]):
# every linear of the blocks is NF4, adapted or not; the reference's base has each of those
# weights replaced by its NF4 round trip (nf4_round_trip). Odd in-features (Qwen2's and Llama's
# down_proj, GPT-2's c_attn and c_proj) give partial blocks of 64 and dfg's flat packing.
CONFIGS = [
    dict(name="qwen2_qv_kl", arch="qwen2", targets="q_proj,v_proj", r=4, alpha=8, loss_type="grpo", beta=0.04,
         gradient_accumulation_steps=3, mismatch_check=True),
    dict(name="qwen2_all_rslora_b0", arch="qwen2", targets="all-linear", r=4, alpha=6, rslora=True,
         loss_type="bnpo", beta=0.0, gradient_accumulation_steps=1, scale_rewards="batch"),
    dict(name="llama_all_rslora_kl", arch="llama", targets="all-linear", r=3, alpha=5, rslora=True,
         loss_type="dapo", beta=0.1, gradient_accumulation_steps=2),
    dict(name="llama_qkvo_b0", arch="llama", targets="q_proj,k_proj,v_proj,o_proj", r=2, alpha=7,
         loss_type="grpo", beta=0.0, gradient_accumulation_steps=1, init_check=True),
    dict(name="gpt2_attn_kl", arch="gpt2", targets="c_attn,c_proj", r=4, alpha=2, loss_type="dr_grpo", beta=0.04,
         gradient_accumulation_steps=1),
    dict(name="gpt2_fc_b0", arch="gpt2", targets="c_attn,c_fc", r=3, alpha=9, loss_type="grpo", beta=0.0,
         gradient_accumulation_steps=3, init_check=True),
    dict(name="qwen2_all_4bit_kl", arch="qwen2", targets="all-linear", r=4, alpha=12, load_in_4bit=True,
         loss_type="grpo", beta=0.04, gradient_accumulation_steps=2),
    dict(name="llama_qv_4bit_dq_b0", arch="llama", targets="q_proj,v_proj", r=3, alpha=4, load_in_4bit=True,
         double_quant=True, loss_type="bnpo", beta=0.0, gradient_accumulation_steps=1),
    dict(name="gpt2_attn_4bit_dq_kl", arch="gpt2", targets="c_attn,c_proj", r=2, alpha=5, rslora=True,
         load_in_4bit=True, double_quant=True, loss_type="dapo", beta=0.1, gradient_accumulation_steps=3),
]
LORA_KEYS = ("arch", "targets", "r", "alpha", "rslora", "init_check", "mismatch_check", "load_in_4bit", "double_quant")
# hf_golden.py's adam_epsilon (gradients far below it leave a float32 floor under the updates)
HF_BASE = dict(adam_epsilon=1e-4)
# The adapters as drawn: A like PEFT's kaiming-uniform, B ~ N(0, B_STD^2 / r), so that the adapted
# weights move by a fraction of the base weights' size (alpha / r up to 4.5 here).
B_STD = 0.3
# In bf16 the adapters are drawn smaller: with B_STD the policy is 2-3 nats a token from the reference
# (the base), and the KL term's weights exp(ref_logp - logp) turn bf16's log-prob rounding (~1.6e-2)
# into 12% of grad_norm at some seeds (seed 2132515253: 1.975 vs 2.217, qwen2_all_4bit_kl, kl 2.75),
# which measures the conditioning, not the arithmetic; at B_STD_BF16 the KL is a few tenths.
B_STD_BF16 = 0.1


def settings_of(cfg):
    s = G.settings_of(dict(HF_BASE, **{k: v for k, v in cfg.items() if k not in LORA_KEYS}))
    s["lora_r"] = cfg["r"]
    s["lora_alpha"] = cfg["alpha"]
    s["lora_target_modules"] = cfg["targets"]
    if cfg.get("rslora"):
        s["use_rslora"] = "true"
    if cfg.get("load_in_4bit"):
        s["load_in_4bit"] = "true"
        if cfg.get("double_quant"):
            s["bnb_4bit_use_double_quant"] = "true"
    return s


def lora_scale(cfg):
    return cfg["alpha"] / math.sqrt(cfg["r"]) if cfg.get("rslora") else cfg["alpha"] / cfg["r"]


def lora_config(cfg, r=None, init=False):
    targets = cfg["targets"] if cfg["targets"] == "all-linear" else cfg["targets"].split(",")
    return peft.LoraConfig(r=r or cfg["r"], lora_alpha=cfg["alpha"], target_modules=targets, lora_dropout=0.0,
                           use_rslora=bool(cfg.get("rslora")), bias="none", task_type="CAUSAL_LM",
                           init_lora_weights=init)


# ---------------------------------------------------------------- names
PEFT_PREFIX = "base_model.model."


def module_of(peft_param):
    """"base_model.model.<module>.lora_A.default.weight" (a PeftModel's parameter) or
    "base_model.model.<module>.lora_A.weight" (a saved adapter's tensor) -> ("<module>", "lora_A")."""
    n = peft_param[len(PEFT_PREFIX):] if peft_param.startswith(PEFT_PREFIX) else peft_param
    n = n.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")
    head, kind, _ = n.rsplit(".", 2)
    return head, kind


def dfg_adapter_name(arch, module, kind):
    """dfg's name of an adapter tensor: "<module>.lora_A.weight", the HF module path (GPT-2's
    without "transformer.", as dfg names GPT-2's parameters)."""
    return H.dfg_name(arch, module) + f".{kind}.weight"


def adapter_params(arch, model):
    """dfg name -> the PEFT model's lora_A / lora_B parameter (the active 'default' adapter)."""
    out = {}
    for n, p in model.named_parameters():
        if ".lora_A." in n or ".lora_B." in n:
            module, kind = module_of(n)
            out[dfg_adapter_name(arch, module, kind)] = p
    return out


def lora_layers(model):
    """HF module path -> PEFT's LoRA layer, for every layer PEFT wrapped."""
    from peft.tuners.lora import LoraLayer
    return {n[len(PEFT_PREFIX):]: m for n, m in model.named_modules()
            if isinstance(m, LoraLayer) and n.startswith(PEFT_PREFIX)}


def safetensors_names(path):
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        return {k for k in json.loads(fh.read(n)) if k != "__metadata__"}


# ---------------------------------------------------------------- QLoRA's base
# --wrong-reference: the 4-bit configurations' reference keeps the base's weights as they are (no
# NF4 round trip), to see those configurations fail (the test's own test; never the default).
SKIP_ROUND_TRIP = [False]


def quant_of(cfg):
    """The NF4 form of cfg's base: None (LoRA: the weights as read), "nf4" or "nf4-dq" (double
    quantisation)."""
    if not cfg or not cfg.get("load_in_4bit") or SKIP_ROUND_TRIP[0]:
        return None
    return "nf4-dq" if cfg.get("double_quant") else "nf4"


def nf4_round_trip(w, quant):
    """w (a float32 array) quantised with bitsandbytes' quantize_4bit(nf4, blocksize 64,
    compress_statistics = double quantisation) and dequantised with dequantize_4bit, in
    nf4_golden.py's NumPy transcription: the tensor as stored, flattened row-major (nn.Linear's
    (out, in), GPT-2's Conv1D (in, out)), as dfg quantises a weight of the file; float32 values."""
    x = np.ascontiguousarray(w, dtype=np.float32).reshape(-1)
    r = NF.reference(x, NF4_MAP)
    return r["deq_dq" if quant == "nf4-dq" else "deq"].astype(np.float32).reshape(w.shape)


def block_linears(arch, model):
    """HF parameter name -> parameter, for the weight of every linear of the blocks (nn.Linear and
    GPT-2's Conv1D; not the lm_head): what load_in_4bit stores as NF4."""
    mods = expected_modules(arch, model, "all-linear")
    return {n + ".weight": m.weight for n, m in model.named_modules() if n in mods}


def quantise_base(arch, model, quant):
    """model's block linears replaced, in place, by their NF4 round trip."""
    with torch.no_grad():
        for n, p in block_linears(arch, model).items():
            p.copy_(torch.from_numpy(nf4_round_trip(p.detach().numpy(), quant)))
    return model


# ---------------------------------------------------------------- the PEFT model
BASES = {}


def base_model(arch, model_dir, quant=None):
    """A fresh copy of the float32 model transformers reads from model_dir (read once a directory:
    PEFT wraps the model it is given in place); quant ("nf4", "nf4-dq"; quant_of): its block
    linears replaced by their NF4 round trip, as a load_in_4bit run computes with them."""
    if not any(k[0] == model_dir for k in BASES):
        BASES.clear()
    if (model_dir, quant) not in BASES:
        m = H.load_model(arch, model_dir)
        BASES[(model_dir, quant)] = quantise_base(arch, m, quant) if quant else m
    return copy.deepcopy(BASES[(model_dir, quant)])


def peft_model(arch, model_dir, cfg, r=None, init=False):
    """get_peft_model over the float32 model transformers reads from model_dir (for a 4-bit cfg,
    its NF4 round trip: the base replaced before PEFT wraps it)."""
    return peft.get_peft_model(base_model(arch, model_dir, quant_of(cfg)), lora_config(cfg, r, init)).eval()


def draw_adapter(model, rng):
    """Every lora_A ~ U(-1, 1) / sqrt(in_features), every lora_B ~ N(0, 1) * B_STD / sqrt(r) (B_STD_BF16 in
    bf16)."""
    b_std = B_STD_BF16 if GPU["mode"] == "bf16" else B_STD
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_A." in n:
                v = rng.uniform(-1.0, 1.0, size=tuple(p.shape)) / math.sqrt(p.shape[1])
            elif ".lora_B." in n:
                v = rng.standard_normal(tuple(p.shape)) * b_std / math.sqrt(p.shape[1])
            else:
                continue
            p.copy_(torch.tensor(v, dtype=p.dtype))


def set_adapter(arch, model, w):
    with torch.no_grad():
        for k, p in adapter_params(arch, model).items():
            p.copy_(torch.tensor(w[k], dtype=p.dtype))


def expected_modules(arch, model, targets):
    """The module paths a LoraConfig with these targets adapts, worked out here: a list matches
    module names ending in ".<target>"; all-linear every Linear and Conv1D but the output head."""
    from transformers.pytorch_utils import Conv1D
    linear = {n: m for n, m in model.named_modules() if isinstance(m, (nn.Linear, Conv1D))}
    if targets == "all-linear":
        head = model.get_output_embeddings()
        return {n for n, m in linear.items() if m is not head and n.rsplit(".", 1)[-1] != "lm_head"}
    return {n for n in linear for t in targets.split(",") if n == t or n.endswith("." + t)}


def ref_logits_fn(model):
    """The reference of a PEFT policy in TRL: the same model with the adapter off."""
    f = H.logits_fn(model)

    def logits(tokens):
        with model.disable_adapter():
            return f(tokens)
    return logits


def check_reference(cfg, model_dir, policy32, tokens):
    """The reference's own checks (see the module's docstring); returns whether they hold."""
    arch, ok = cfg["arch"], True
    base = base_model(arch, model_dir, quant_of(cfg))
    policy = copy.deepcopy(policy32).double()
    tok = torch.tensor(tokens, dtype=torch.long)
    # which modules PEFT wrapped
    layers = lora_layers(policy)
    want = expected_modules(arch, base, cfg["targets"])
    if set(layers) != want or not want:
        print(f"  reference check: PEFT wrapped {sorted(set(layers) ^ want)[:6]} against the targets' modules  FAIL")
        ok = False
    # every LoRA layer's output written out: base(x) + (x @ A^T @ B^T) * scale
    from transformers.pytorch_utils import Conv1D
    seen = []

    def hook():
        def f(module, inputs, output):
            x = inputs[0]
            lin = module.get_base_layer()
            W, b = lin.weight, lin.bias
            y = x @ W if isinstance(lin, Conv1D) else x @ W.t()
            if b is not None:
                y = y + b
            A, B = module.lora_A["default"].weight, module.lora_B["default"].weight
            y = y + (x @ A.t() @ B.t()) * lora_scale(cfg)
            seen.append(float((output - y).abs().max() / y.abs().max()))
        return f
    handles = [m.register_forward_hook(hook()) for m in layers.values()]
    with torch.no_grad():
        lp = H.logits_fn(policy)(tok)
    for h in handles:
        h.remove()
    worst = max(seen) if seen else math.inf
    scales = {float(m.scaling["default"]) for m in layers.values()}
    good = len(seen) == len(layers) and worst <= TOL_SELF and scales == {lora_scale(cfg)}
    print(f"  reference check: {len(layers)} LoRA layers, scale {lora_scale(cfg):g}: PEFT's outputs vs "
          f"base(x) + x A^T B^T * scale: rel.err {worst:.2e}{'' if good else '  FAIL'}")
    ok &= good
    # the adapter switched off is the base model; on, it is not
    with torch.no_grad():
        off = ref_logits_fn(policy)(tok)
        plain = H.logits_fn(copy.deepcopy(base).double())(tok)
    e_off = float((off - plain).abs().max() / plain.abs().max())
    e_on = float((lp - plain).abs().max() / plain.abs().max())
    good = e_off <= TOL_SELF and e_on > 1e-3
    nf4 = " (NF4 round trip)" if quant_of(cfg) else ""
    print(f"  reference check: disable_adapter() vs the transformers model{nf4}: "
          f"rel.err {e_off:.2e}; adapter on differs by {e_on:.2e}{'' if good else '  FAIL'}")
    ok &= good
    if cfg.get("load_in_4bit"):
        ok &= check_nf4_base(cfg, model_dir, base, tok)
    # PEFT's merge, float32
    with torch.no_grad():
        unmerged = H.logits_fn(policy32)(tok)
        merged = H.logits_fn(copy.deepcopy(policy32).merge_and_unload())(tok)
    e = float((merged - unmerged).abs().max() / unmerged.abs().max())
    good = e <= TOL_SELF_MERGE
    print(f"  reference check: merge_and_unload() vs PEFT's float32 forward: rel.err {e:.2e}{'' if good else '  FAIL'}")
    return ok & good


def check_nf4_base(cfg, model_dir, base, tok):
    """A 4-bit configuration's reference base (base) against the weights as read: exactly the block
    linears changed (all of them, adapted or not); each of those, flat row-major in blocks of 64,
    holds 4-bit values: NF4 code * the block's largest |value|; and the round trip moves the logits
    far beyond the tolerance, so that a reference without it would fail."""
    arch = cfg["arch"]
    if SKIP_ROUND_TRIP[0]:
        print("  reference check: NF4 round trip left out (--wrong-reference): the 4-bit comparisons must fail")
        return True
    plain = base_model(arch, model_dir)
    want = set(block_linears(arch, plain))
    pq = dict(base.named_parameters())
    changed = {n for n, p in plain.named_parameters() if not torch.equal(p, pq[n])}
    worst_grid, worst_w = 0.0, 0.0
    for n in want:
        v, w = pq[n].detach().numpy().astype(np.float64).reshape(-1), plain.get_parameter(n).detach().numpy()
        blk, _ = NF.blocks_of(v, 64)
        m = np.abs(blk).max(axis=1, keepdims=True)
        nrm = np.divide(blk, m, out=np.zeros_like(blk), where=m > 0)
        grid = np.abs(nrm[..., None] - NF.NF4[None, None, :]).min(axis=-1)
        worst_grid = max(worst_grid, float(grid.max()))
        worst_w = max(worst_w, float(np.abs(v - w.reshape(-1)).max() / np.abs(w).max()))
    with torch.no_grad():
        a = H.logits_fn(copy.deepcopy(base).double())(tok)
        b = H.logits_fn(copy.deepcopy(plain).double())(tok)
    e = float((a - b).abs().max() / b.abs().max())
    good = changed == want and len(want) > 0 and worst_grid <= 1e-6 and e > 100 * TOL
    print(f"  reference check: {quant_of(cfg)} round trip of {len(want)} block linears ({len(changed)} weights "
          f"changed, each block of 64 on NF4's grid to {worst_grid:.1e}): weights move by {worst_w:.2e} of their "
          f"largest, logits by {e:.2e}{'' if good else '  FAIL'}")
    if changed != want:
        print(f"    changed {sorted(changed ^ want)[:4]} against the block linears")
    return good


# ---------------------------------------------------------------- driving dfg
def sh(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        out = r.stdout + r.stderr
        hint = ""
        if "does not use the setting 'lora_" in out or "does not use the setting 'use_rslora'" in out:
            hint = "  (this dfg has no LoRA: examples/grpo/grpo.c does not take lora_r yet)\n"
        raise RuntimeError(f"{what} exited with {r.returncode}:\n{hint}  $ {' '.join(cmd)}\n{out}")
    return r.stdout


def compile_plan(dfg, source, plan, sets):
    sh([dfg, "compile", source, "-o", plan] + sets + target_flags(), "dfg compile")


def run_plan(dfg, plan, model_dir, flags):
    return sh([dfg, "run", plan, "--weights", model_dir] + flags + run_flags(), "dfg run")


def check_frozen(arch, got, base_w):
    """Every base weight the dump holds is the model directory's, bit for bit; the dump's adapter
    tensors are exactly those expected (checked by the caller). Returns problems."""
    held, bf16 = [k for k in base_w if k in got], GPU["mode"] == "bf16"
    changed = [k for k in held if not np.array_equal(got[k].reshape(base_w[k].shape), base_w[k])]
    if changed:
        return [f"base weights {changed[:4]} changed in the step (frozen with lora_r > 0)"]
    if held:
        print(f"  frozen: the dump holds {len(held)} of the {len(base_w)} base weights, each bit-identical to the "
              f"directory's" + (" (bf16-rounded)" if bf16 else "")
              + (" (--merge's unadapted weights check the rest)" if len(held) < len(base_w) and not bf16 else ""))
    else:
        print(f"  frozen: the dump holds none of the {len(base_w)} base weights"
              + (" (not checked in bf16, where --merge is left out)" if bf16 else
                 " (--merge's unadapted weights, bit-identical to the base's, check them)"))
    return []


def check_saved_adapter(cfg, model_dir, saved, got, want_names):
    """SAVED/ as PEFT reads it: PEFT's names, the config's values, the dump's weights exactly."""
    arch, problems = cfg["arch"], []
    st_path = os.path.join(saved, "adapter_model.safetensors")
    cfg_path = os.path.join(saved, "adapter_config.json")
    for p in (st_path, cfg_path):
        if not os.path.isfile(p):
            print(f"  --save {saved}/: no {os.path.basename(p)} (files: {sorted(os.listdir(saved)) if os.path.isdir(saved) else 'none'})  FAIL")
            return False
    names = safetensors_names(st_path)
    if names != want_names:
        problems.append(f"tensor names {sorted(names ^ want_names)[:4]} differ from PEFT's save_pretrained's")
    with open(cfg_path) as f:
        ac = json.load(f)
    for k, v in (("r", cfg["r"]), ("lora_alpha", cfg["alpha"]), ("use_rslora", bool(cfg.get("rslora"))),
                 ("peft_type", "LORA")):
        if k == "use_rslora" and k not in ac and not v:
            continue  # PEFT's default
        if ac.get(k) != v:
            problems.append(f"adapter_config.json {k} = {ac.get(k)!r}, expected {v!r}")
    # target_modules may be written as PEFT does (the names given, or all-linear's resolved names)
    # or otherwise (module paths, "all-linear"): what counts is which layers PEFT builds from it
    if float(ac.get("lora_dropout", 0.0)) != 0.0:
        problems.append(f"adapter_config.json lora_dropout = {ac.get('lora_dropout')!r}, expected 0")
    try:
        loaded = peft.PeftModel.from_pretrained(base_model(arch, model_dir, quant_of(cfg)), saved)
    except Exception as e:  # noqa: BLE001 - whatever PEFT raises is the finding
        print(f"  --save {os.path.basename(saved)}/: PeftModel.from_pretrained fails: {type(e).__name__}: {e}  FAIL")
        return False
    layers = lora_layers(loaded)
    want_layers = {module_of(n)[0] for n in want_names}
    if set(layers) != want_layers:
        problems.append(f"PEFT builds LoRA layers {sorted(set(layers) ^ want_layers)[:4]} that the adapter does not hold")
    scales = {float(m.scaling["default"]) for m in layers.values()}
    if scales != {lora_scale(cfg)}:
        problems.append(f"PEFT's scaling of the loaded adapter is {sorted(scales)}, expected {lora_scale(cfg):g}")
    worst, missing = 0.0, []
    for k, p in adapter_params(arch, loaded).items():
        g = got.get(k)
        if g is None or g.size != p.numel():
            missing.append(k)
            continue
        worst = max(worst, float(np.max(np.abs(p.detach().numpy() - g.reshape(tuple(p.shape))))))
    if missing:
        problems.append(f"{missing[:4]} not in the dump")
    if worst != 0.0:
        problems.append(f"the loaded adapter differs from the dump's by up to {worst:.3e}")
    print(f"  --save {os.path.basename(saved)}/: {', '.join(sorted(os.listdir(saved)))}: PeftModel.from_pretrained loads "
          f"{len(layers)} LoRA layers" + ("; " + "; ".join(problems) + "  FAIL" if problems
                                          else ", PEFT's names, r, alpha and scale, the dump's weights exactly"))
    return not problems


def check_merged(cfg, model_dir, adapter_dir, merged_dir, got, tokens):
    """MERGED/ (dfg run --save --merge): transformers loads it; its weights and logits equal PEFT's
    merge_and_unload() of the base with the adapter of the dump (that run's trained adapter)."""
    arch, problems = cfg["arch"], []
    try:
        dm = H.load_model(arch, merged_dir)
    except Exception as e:  # noqa: BLE001
        print(f"  --save {os.path.basename(merged_dir)}/ --merge: transformers cannot load it: {type(e).__name__}: {e}  FAIL")
        return False
    pm = peft.PeftModel.from_pretrained(base_model(arch, model_dir, quant_of(cfg)), adapter_dir)
    try:
        set_adapter(arch, pm, got)
    except KeyError as e:
        print(f"  --save {os.path.basename(merged_dir)}/ --merge: the dump lacks {e}  FAIL")
        return False
    ref = pm.merge_and_unload().eval()
    base = base_model(arch, model_dir, quant_of(cfg))  # 4-bit: unadapted block linears as dfg dequantises them
    names = {H.dfg_name(arch, n) for n in H.tensor_names(merged_dir)}
    want_names = {H.dfg_name(arch, n) for n in H.tensor_names(model_dir) if not n.startswith("ref.")}
    if names != want_names:
        problems.append(f"tensors {sorted(names ^ want_names)[:4]} differ from the base directory's")
    bw = dict(base.named_parameters())
    worst_m, worst_name, unchanged_bad, merged_n = 0.0, "-", [], 0
    adapted = {H.dfg_name(arch, module_of(n)[0]) + ".weight" for n in
               safetensors_names(os.path.join(adapter_dir, "adapter_model.safetensors"))}
    dmp = dict(dm.named_parameters())
    for n, p in ref.named_parameters():
        q = dmp.get(n)
        if q is None or q.shape != p.shape:
            problems.append(f"'{n}' missing or misshapen in the merged model")
            continue
        if H.dfg_name(arch, n) in adapted:
            merged_n += 1
            e = float((q - p).abs().max() / p.abs().max())
            if e > worst_m:
                worst_m, worst_name = e, n
        elif not torch.equal(q, bw[n]):
            unchanged_bad.append(f"{n} (by {float((q - bw[n]).abs().max() / bw[n].abs().max()):.2e})")
    if worst_m > TOL:
        problems.append(f"merged weights differ from PEFT's merge_and_unload() by {worst_m:.2e} ({worst_name})")
    if unchanged_bad:
        problems.append(f"{unchanged_bad[:4]} are not adapted yet differ from the base's"
                        + (" (block linears: its NF4 round trip's)" if quant_of(cfg) else ""))
    nf4_kept = len(set(block_linears(arch, base)) - {n for n in bw if H.dfg_name(arch, n) in adapted})
    if merged_n != len(adapted):
        problems.append(f"{merged_n} merged weights found, {len(adapted)} adapted modules")
    tok = torch.tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        a, b = H.logits_fn(dm)(tok), H.logits_fn(ref)(tok)
    e_logits = float((a - b).abs().max() / b.abs().max())
    if e_logits > TOL:
        problems.append(f"logits differ from merge_and_unload()'s by {e_logits:.2e}")
    print(f"  --save {os.path.basename(merged_dir)}/ --merge: {merged_n} merged weights vs merge_and_unload(): rel.err "
          f"{worst_m:.2e}, logits {e_logits:.2e}"
          + (f"; {nf4_kept} unadapted NF4 weights written dequantised" if cfg.get("load_in_4bit") else "")
          + ("; " + "; ".join(problems) + "  FAIL" if problems else
             (", bit-identical to the round trip's" if quant_of(cfg) and nf4_kept else "")))
    return not problems


def check_default_init(cfg, dfg, source, model_dir, d, s, rollouts):
    """A plan without lora_target_modules adapts PEFT's default modules for the architecture, and a
    run of it without --adapter starts from PEFT's default initialisation: lora_B zero, lora_A
    kaiming-uniform, |a| <= 1/sqrt(in_features), spread over that range, no two modules alike."""
    arch, init = cfg["arch"], os.path.join(d, "init")
    shutil.rmtree(init, ignore_errors=True)
    plan = os.path.join(d, "plan_default.dfg")
    sets = ["--set", f"model={model_dir}"]
    sets += [a for k, v in s.items() if k not in ("name", "ref", "lora_target_modules") + H.MODEL_SETTINGS
             for a in ("--set", f"{k}={v}")]
    how = "--steps 0"
    try:
        compile_plan(dfg, source, plan, sets)
        run_plan(dfg, plan, model_dir, ["--rollouts", rollouts, "--steps", "0", "--save", init + "/"])
    except (RuntimeError, subprocess.TimeoutExpired) as e0:
        # dfg refuses 0 steps: one step at learning_rate 0 (AdamW's decay is lr * weight_decay)
        shutil.rmtree(init, ignore_errors=True)
        how = "one step at learning_rate 0"
        try:
            compile_plan(dfg, source, plan, sets + ["--set", "learning_rate=0"])
            run_plan(dfg, plan, model_dir, ["--rollouts", rollouts, "--steps", "1", "--save", init + "/"])
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"  default init: --steps 0 failed ({e0}), and {how} too: {e}  FAIL")
            return False
    path = os.path.join(init, "adapter_model.safetensors")
    if not os.path.isfile(path):
        print(f"  default init ({how}): --save {init}/ wrote no adapter_model.safetensors  FAIL")
        return False
    t = st_torch.load_file(path)
    problems, pooled = [], []
    # PEFT's default target modules (its table by model_type) for this architecture
    default = peft.get_peft_model(base_model(arch, model_dir),
                                  peft.LoraConfig(r=cfg["r"], lora_alpha=cfg["alpha"], lora_dropout=0.0))
    want_modules = set(lora_layers(default))
    got_modules = {module_of(k)[0] for k in t}
    if got_modules != want_modules:
        problems.append(f"without lora_target_modules the adapted modules are {sorted(got_modules)[:4]}..., "
                        f"PEFT's default {sorted(want_modules)[:4]}...")
    A = {k: v for k, v in t.items() if ".lora_A." in k}
    B = {k: v for k, v in t.items() if ".lora_B." in k}
    if not A or len(A) != len(B) or len(A) + len(B) != len(t):
        problems.append(f"{len(A)} lora_A and {len(B)} lora_B tensors of {len(t)}")
    nonzero_b = [k for k, v in B.items() if bool(v.abs().max() > 0)]
    if nonzero_b:
        problems.append(f"lora_B not zero: {nonzero_b[:3]}")
    for k, v in A.items():
        bound = 1.0 / math.sqrt(v.shape[1])
        if float(v.abs().max()) > bound * (1 + 1e-6):
            problems.append(f"{k}: max|a| {float(v.abs().max()):.4g} > 1/sqrt(in) {bound:.4g}")
        pooled.append((v.double() / bound).flatten())
    if pooled:
        u = torch.cat(pooled)
        # U(-1, 1): std 1/sqrt(3) = 0.577; hundreds of values put the estimate within ~10%
        std, mx = float(u.std()), float(u.abs().max())
        if not (0.45 < std < 0.70 and mx > 0.9):
            problems.append(f"lora_A / bound has std {std:.3f} and max {mx:.3f}, not U(-1, 1)'s 0.577 and ~1")
        flat = [v.flatten() for v in A.values()]
        if any(torch.equal(flat[i][:8], flat[j][:8]) for i in range(len(flat)) for j in range(i)):
            problems.append("two lora_A tensors start alike (one draw reused)")
    print(f"  default init ({how}, no lora_target_modules): {len(A)} lora_A, {len(B)} lora_B on PEFT's default "
          f"modules" + ("; " + "; ".join(problems) + "  FAIL" if problems
                        else ": every lora_B zero, lora_A kaiming-uniform within 1/sqrt(in_features)"))
    return not problems


def check_mismatch(cfg, dfg, d, model_dir, rollouts):
    """An adapter whose r is not the plan's lora_r is refused (an error, not a crash or a run)."""
    other = os.path.join(d, "adapter_r_other")
    shutil.rmtree(other, ignore_errors=True)
    pm = peft_model(cfg["arch"], model_dir, cfg, r=cfg["r"] + 1)
    pm.save_pretrained(other, safe_serialization=True)
    r = subprocess.run([dfg, "run", os.path.join(d, "plan.dfg"), "--weights", model_dir, "--adapter", other,
                        "--rollouts", rollouts, "--steps", "1"] + run_flags(), capture_output=True, text=True,
                       timeout=300)
    ok = 0 < r.returncode < 128
    said = (r.stdout + r.stderr).strip().splitlines()
    print(f"  an adapter of r={cfg['r'] + 1} for a plan of lora_r={cfg['r']}: dfg run exits {r.returncode}"
          + (f": {said[-1][:160]}" if said else "") + ("" if ok else "  FAIL (meant to be refused with an error)"))
    return ok


# ---------------------------------------------------------------- one configuration
def run_config(cfg, dfg, source, workdir, seed, check_only=False):
    arch = cfg["arch"]
    s = settings_of(cfg)
    d = os.path.join(workdir, cfg["name"])
    model_dir, adapter_dir = os.path.join(d, "model"), os.path.join(d, "adapter")
    for sub in (model_dir, adapter_dir, os.path.join(d, "saved"), os.path.join(d, "merged")):
        shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(model_dir)
    for f in os.listdir(d):
        if os.path.isfile(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    rng = np.random.default_rng([seed, sum(map(ord, cfg["name"]))])
    torch.manual_seed(seed)

    built = H.build_model(arch)
    H.randomise(arch, built, rng)
    H.save_model(arch, built, model_dir)
    H.add_tokenizer(arch, model_dir)
    BASES.clear()
    base_w = H.weights_of(arch, base_model(arch, model_dir))
    policy32 = peft_model(arch, model_dir, cfg)
    draw_adapter(policy32, rng)
    policy32.save_pretrained(adapter_dir, safe_serialization=True)
    adapter_names = safetensors_names(os.path.join(adapter_dir, "adapter_model.safetensors"))
    w = {k: p.detach().numpy().copy() for k, p in adapter_params(arch, policy32).items()}
    print(f"[{cfg['name']}] {H.ARCHS[arch]['arch']} " + " ".join(f"{k}={v}" for k, v in H.ARCHS[arch]["config"].items()
          if not k.endswith("pdrop")))
    print(f"  LoRA r={cfg['r']} alpha={cfg['alpha']} use_rslora={bool(cfg.get('rslora'))} (scale {lora_scale(cfg):g}) "
          f"targets={cfg['targets']}: {len(adapter_names) // 2} modules, "
          f"{sum(v.size for v in w.values())} adapter parameters")
    if cfg.get("load_in_4bit"):
        print(f"  load_in_4bit=true bnb_4bit_use_double_quant={str(bool(cfg.get('double_quant'))).lower()}: "
              f"{len(block_linears(arch, built))} block linears NF4; reference base: their "
              f"{quant_of(cfg) or 'NO (--wrong-reference)'} round trip")
    print("  " + " ".join(f"{k}={s[k]}" for k in ("loss_type", "beta", "gradient_accumulation_steps", "scale_rewards",
                                                  "temperature", "learning_rate", "adam_epsilon", "weight_decay",
                                                  "max_grad_norm")))
    vocab = built.config.vocab_size
    ok, bf16 = True, GPU["mode"] == "bf16"
    if bf16:
        base_w = G.bf16_rounded(base_w)  # what a bf16 plan holds of the base (a dumped one must be this)
    for i in range(20):  # rollouts with no ratio within 1e-5 of a clipping bound (hf_golden's rule)
        tokens, mask, rewards = H.random_rollouts(s, rng, vocab)
        if i == 0:
            ok &= check_reference(cfg, model_dir, policy32, tokens)
            if check_only:
                return ok, None
        # bf16: the reference computes with the weights dfg computes with (each rounded to bf16;
        # QLoRA's block linears are their NF4 round trip already, rounded as the dequantisation writes)
        policy = (bf16_model_(copy.deepcopy(policy32)) if bf16 else copy.deepcopy(policy32)).double()
        params = adapter_params(arch, policy)
        if set(params) != set(w) or any(p.requires_grad is False for p in params.values()):
            print(f"[{cfg['name']}] FAIL: the PEFT model's trainable adapters are not those saved")
            return False, None
        trainable = [n for n, p in policy.named_parameters() if p.requires_grad and ".lora_" not in n]
        if trainable:
            print(f"[{cfg['name']}] FAIL: PEFT leaves base parameters trainable: {trainable[:3]}")
            return False, None
        G.NEAR_BOUND[0] = math.inf
        want = G.grpo_step(s, params, H.logits_fn(policy), ref_logits_fn(policy), tokens, mask, rewards)
        if G.NEAR_BOUND[0] > 1e-5:
            break

    paths = {k: os.path.join(d, k) for k in ("plan.dfg", "rollouts.safetensors", "out.safetensors", "out_merge.safetensors")}
    G.st_write(paths["rollouts.safetensors"], {"tokens": tokens, "completion_mask": mask, "rewards": rewards})
    sets = ["--set", f"model={model_dir}"]
    sets += [a for k, v in s.items() if k not in ("name", "ref") + H.MODEL_SETTINGS for a in ("--set", f"{k}={v}")]
    saved = os.path.join(d, "saved")
    step = ["--adapter", adapter_dir, "--rollouts", paths["rollouts.safetensors"], "--steps", "1"]
    t0 = time.time()
    try:
        compile_plan(dfg, source, paths["plan.dfg"], sets)
        log = run_plan(dfg, paths["plan.dfg"], model_dir,
                       step + ["--dump", paths["out.safetensors"]] + ([] if bf16 else ["--save", saved + "/"]))
        got, _ = G.st_read(paths["out.safetensors"])
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"[{cfg['name']}] FAIL: {e}")
        return False, f"{cfg['name']}: dfg failed"
    t_dfg = time.time() - t0
    good, errs = G.compare_step(want, got, w, GPU["mode"])
    ok &= good
    extra = sorted(k for k in got if (".lora_A." in k or ".lora_B." in k) and k not in w)
    problems = check_frozen(arch, got, base_w)
    if extra:
        problems.append(f"the dump holds adapters PEFT does not build: {extra[:4]}")
    for p in problems:
        print(f"  {p}  FAIL")
    ok &= not problems
    if bf16:  # the module's docstring: --save, --merge, default init and mismatched r are f32's checks
        print("  bf16: --save, --save --merge, default-init and mismatched-r checks left out")
    else:
        ok &= check_saved_and_merged(cfg, dfg, source, d, s, model_dir, adapter_dir, paths, step, got, adapter_names,
                                     tokens)
    print(f"[{cfg['name']}] loss torch {float(want['loss']):+.8f} dfg {float(got.get('loss', np.nan)):+.8f}, "
          f"grad_norm torch {float(want['grad_norm']):.6f} dfg {float(got.get('grad_norm', np.nan)):.6f}, "
          f"kl {float(want.get('kl', 0.0)):.6f}; dfg {t_dfg:.2f}s; {'PASS' if ok else 'FAIL'}")
    if not good:
        print("  dfg run printed:\n" + "\n".join("  | " + line for line in log.splitlines()))
    return ok, H.summary(cfg["name"], errs, w)


def check_saved_and_merged(cfg, dfg, source, d, s, model_dir, adapter_dir, paths, step, got, adapter_names, tokens):
    """Steps 4 and 5 of the module's docstring (SAVED/ as PEFT loads it, --save --merge against
    merge_and_unload()) and, where the configuration asks, the default-init and mismatched-r checks."""
    saved, merged = os.path.join(d, "saved"), os.path.join(d, "merged")
    ok = check_saved_adapter(cfg, model_dir, saved, got, adapter_names)
    try:
        run_plan(dfg, paths["plan.dfg"], model_dir, step + ["--dump", paths["out_merge.safetensors"], "--save", merged + "/",
                                                            "--merge"])
        got_m, _ = G.st_read(paths["out_merge.safetensors"])
        ok &= check_merged(cfg, model_dir, adapter_dir, merged, got_m, tokens)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"  --save {merged}/ --merge: FAIL: {e}")
        ok = False
    if cfg.get("init_check"):
        ok &= check_default_init(cfg, dfg, source, model_dir, d, s, paths["rollouts.safetensors"])
    if cfg.get("mismatch_check"):
        ok &= check_mismatch(cfg, dfg, d, model_dir, paths["rollouts.safetensors"])
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dfg", help="path of the dfg executable (not needed with --check-reference)")
    ap.add_argument("--source", help="path of examples/grpo/grpo.c")
    ap.add_argument("--workdir", required=True, help="directory for the model and adapter directories, plans, dumps")
    root = os.path.join(HERE, "..", "..", ".deps")
    ap.add_argument("--hf-site", default=os.path.join(root, "hf-" + HF_VERSION),
                    help="transformers' directory (pip --target); the environment's DFG_HF_SITE wins")
    ap.add_argument("--peft-site", default=os.path.join(root, "peft-" + PEFT_VERSION),
                    help="peft's and accelerate's directory (pip --target); the environment's DFG_PEFT_SITE wins")
    ap.add_argument("--config", action="append", help="run only these configurations (default: all)")
    ap.add_argument("--check-reference", action="store_true", help="only the reference's own checks (no dfg)")
    ap.add_argument("--wrong-reference", action="store_true",
                    help="the test's own test: leave the NF4 round trip out of the 4-bit configurations' reference "
                         "(they must fail)")
    ap.add_argument("--emulate-gpu", choices=("f32", "bf16"),
                    help="compile for cuda (torch_dtype float32 or bfloat16) and run with dfg run --emulate-gpu "
                         "--threads 1; bf16: the reference from bf16-rounded weights, bf16's tolerances, no updates")
    a = ap.parse_args()
    SKIP_ROUND_TRIP[0] = a.wrong_reference
    GPU["mode"] = a.emulate_gpu
    hf_site = os.path.abspath(os.environ.get("DFG_HF_SITE") or a.hf_site)
    peft_site = os.path.abspath(os.environ.get("DFG_PEFT_SITE") or a.peft_site)
    seed = run_seed(PROG)
    if seed is None:
        return 1
    import_libraries(hf_site, peft_site)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"{PROG}: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {torch.__version__}, transformers "
          f"{transformers.__version__} from {hf_site}, peft {peft.__version__} from {peft_site}; "
          + (f"tolerance {G.TOL_BF16:g} per tensor ({G.TOL_BF16_KL_SUMS:g} for {', '.join(G.KL_SUMS)}), no updates; "
             f"bf16 cuda plans on the emulated GPU" if GPU["mode"] == "bf16" else
             f"tolerance {G.TOL:g} per tensor, {G.TOL_UPDATE:g} per update"
             + ("; f32 cuda plans on the emulated GPU" if GPU["mode"] else "")))
    if not a.check_reference and not (a.dfg and a.source):
        print(f"{PROG}: FAIL: --dfg and --source are needed (or --check-reference)")
        return 1
    configs = golden_common.chosen_configs(PROG, CONFIGS, a.config)
    if configs is None:
        return 1
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    if a.check_reference:
        ok = all([run_config(c, None, None, a.workdir, seed, check_only=True)[0] for c in configs])
        print(f"{PROG}: reference {'agrees' if ok else 'MISMATCH'} in {time.time() - t0:.1f}s (seed {seed})")
        return 0 if ok else 1
    results = [run_config(c, a.dfg, a.source, a.workdir, seed) for c in configs]
    return golden_common.summary(PROG, results, "configurations", t0, seed)


if __name__ == "__main__":
    sys.exit(main())
