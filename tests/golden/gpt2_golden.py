#!/usr/bin/python3
"""Golden test: dfg's GPT-2 forward and backward against an independent PyTorch implementation.

For each configuration this script
  1. draws a random GPT-2 (float32, HF names with the "transformer." prefix and the
     h.{i}.attn.bias causal-mask buffers of real checkpoints) and a random batch (tokens,
     targets, a 0/1 mask with an all-zero and an all-one row), and writes them as
     weights.safetensors and batch.safetensors into a work directory;
  2. runs the C driver (gpt2_dump), which loads both with dfg, runs one step and writes the
     logits, the loss and the gradient of every parameter to dfg_out.safetensors;
  3. computes the same in float64 with the GPT-2 written below from its definition (it does not
     import dfg, nor Hugging Face transformers);
  4. compares, per tensor, max|dfg - torch| / max|torch| <= 1e-4, and fails when a tensor is
     missing, has the wrong shape or holds a NaN.

The loss, on both sides:  loss = -mean_b [ sum_t mask[b,t] * log p(target[b,t]) / max(sum_t mask[b,t], 1) ].

Exit codes: 0 all tensors agree, 1 a mismatch or an error, 77 torch/numpy are not importable
(ctest reports the test as skipped). The seed is fresh each run and printed; DFG_TEST_SEED
replays one.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

import golden_common
from golden_common import run_seed

try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001 - any import failure means "cannot run here"
    print(f"gpt2_golden: SKIP: /usr/bin/python3 cannot import torch and numpy ({e})")
    sys.exit(77)

TOL = 1e-4
LN_EPS = 1e-5  # GPT-2's layer_norm_epsilon

CONFIGS = [
    dict(name="small", n_layer=2, n_head=3, n_embd=48, vocab_size=97, block_size=32, batch=4, T=19, variant="plain"),
    # stronger: deeper, wider, T close to block_size, and a checkpoint that also carries the
    # old attn.masked_bias scalars and a tied lm_head.weight (both must be skipped by dfg)
    dict(name="large", n_layer=3, n_head=4, n_embd=64, vocab_size=131, block_size=24, batch=5, T=23, variant="extras"),
]


# ---------------------------------------------------------------- safetensors (independent, minimal)
ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
             "U8": np.uint8, "BOOL": np.bool_}
ST_NAMES = {np.dtype(v): k for k, v in ST_DTYPES.items()}


def st_write(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (C order). Writes the safetensors format by hand."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": ST_NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)  # the format allows trailing spaces; keeps the data 8-aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def st_read(path):
    """Returns (dict name -> numpy array, metadata dict); checks offsets against the data."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        bf16 = info["dtype"] == "BF16"  # the top half of an f32: read as u16, widened below
        dt = np.dtype(np.uint16 if bf16 else ST_DTYPES[info["dtype"]]).newbyteorder("<")
        shape = tuple(info["shape"])
        lo, hi = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= lo <= hi <= len(body)) or hi - lo != count * dt.itemsize:
            raise ValueError(f"{path}: tensor '{name}' has bad data_offsets {lo}..{hi}")
        out[name] = np.frombuffer(body[lo:hi], dtype=dt).reshape(shape).astype(dt.newbyteorder("="))
        if bf16:
            out[name] = (out[name].astype(np.uint32) << 16).view(np.float32)
    return out, meta


# ---------------------------------------------------------------- random model and batch
def param_shapes(cfg):
    """HF GPT-2 parameter names (without the transformer. prefix) and Conv1D (in, out) shapes."""
    C, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["block_size"]
    shapes = [("wte.weight", (V, C)), ("wpe.weight", (P, C))]
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        shapes += [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
                   (h + "attn.c_attn.weight", (C, 3 * C)), (h + "attn.c_attn.bias", (3 * C,)),
                   (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
                   (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
                   (h + "mlp.c_fc.weight", (C, 4 * C)), (h + "mlp.c_fc.bias", (4 * C,)),
                   (h + "mlp.c_proj.weight", (4 * C, C)), (h + "mlp.c_proj.bias", (C,))]
    shapes += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return shapes


def random_weights(cfg, rng):
    """float32 weights large enough that every part of the network matters."""
    w = {}
    for name, shape in param_shapes(cfg):
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            v = 1.0 + 0.25 * rng.standard_normal(shape)
        elif name.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias")):
            v = 0.15 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(shape)
        elif name in ("wte.weight", "wpe.weight"):
            v = 0.2 * rng.standard_normal(shape)
        else:
            v = 0.15 * rng.standard_normal(shape)
        w[name] = v.astype(np.float32)
    return w


def checkpoint_tensors(cfg, w):
    """What a GPT2LMHeadModel state dict holds: transformer.-prefixed names plus buffers."""
    P = cfg["block_size"]
    out = {}
    for name, arr in w.items():
        out["transformer." + name] = arr
    for i in range(cfg["n_layer"]):
        mask = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
        if cfg["variant"] == "extras":
            out[f"transformer.h.{i}.attn.bias"] = mask.astype(np.bool_)
            out[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
        else:
            out[f"transformer.h.{i}.attn.bias"] = mask
    if cfg["variant"] == "extras":
        out["lm_head.weight"] = w["wte.weight"].copy()  # tied
    # shuffle the file order so that nothing depends on it
    keys = list(out.keys())
    order = np.random.default_rng(len(keys)).permutation(len(keys))
    return {keys[i]: out[keys[i]] for i in order}


def random_batch(cfg, rng):
    B, T, V = cfg["batch"], cfg["T"], cfg["vocab_size"]
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int64).astype(np.int32)
    targets = rng.integers(0, V, size=(B, T), dtype=np.int64).astype(np.int32)
    tokens[0, 0], tokens[-1, -1] = V - 1, 0  # the ends of the vocabulary
    targets[0, 1], targets[-1, 0] = 0, V - 1
    mask = (rng.random((B, T)) < 0.6).astype(np.float32)
    rows = rng.permutation(B)
    mask[rows[0]] = 0.0  # a sequence that counts for nothing (divides by max(0, 1))
    mask[rows[1]] = 1.0  # a fully counted one
    if B > 2:  # and one with a single counted token
        mask[rows[2]] = 0.0
        mask[rows[2], rng.integers(0, T)] = 1.0
    return tokens, targets, mask


# ---------------------------------------------------------------- GPT-2 in PyTorch, from its definition
def layernorm(x, w, b):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)  # biased, as torch.nn.LayerNorm
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def conv1d(x, w, b):  # HF Conv1D: weight stored (in, out)
    return x @ w + b


def attention(x, p, h, n_head):
    B, T, C = x.shape
    D = C // n_head
    qkv = conv1d(x, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])  # (B, T, 3C)
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.reshape(B, T, n_head, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, T)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return conv1d(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])


def mlp(x, p, h):
    a = gelu_tanh(conv1d(x, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]))
    return conv1d(a, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])


def gpt2_logits(p, tokens, cfg):
    B, T = tokens.shape
    x = p["wte.weight"][tokens] + p["wpe.weight"][torch.arange(T)]
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        x = x + attention(layernorm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]), p, h, cfg["n_head"])
        x = x + mlp(layernorm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"]), p, h)
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].T  # tied lm_head


def masked_mean_nll(logits, targets, mask):
    lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    per_seq = (lp * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1.0)
    return -per_seq.mean()


def reference(cfg, w, tokens, targets, mask):
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    tok = torch.tensor(tokens, dtype=torch.long)
    logits = gpt2_logits(p, tok, cfg)
    loss = masked_mean_nll(logits, torch.tensor(targets, dtype=torch.long), torch.tensor(mask, dtype=torch.float64))
    loss.backward()
    out = {"logits": logits.detach().numpy(), "loss": loss.detach().numpy()}
    for k, t in p.items():
        out["grad." + k] = t.grad.numpy()
    return out


# ---------------------------------------------------------------- comparison
def rel_err(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    denom = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got - want))) if want.size else 0.0
    if not np.all(np.isfinite(got)):
        return float("nan")
    return diff / denom if denom > 0 else diff


def run_config(cfg, driver, workdir, seed):
    rng = np.random.default_rng([seed, len(cfg["name"]), cfg["n_layer"]])
    d = os.path.join(workdir, cfg["name"])
    os.makedirs(d, exist_ok=True)
    for f in ("weights.safetensors", "batch.safetensors", "dfg_out.safetensors"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    w = random_weights(cfg, rng)
    tokens, targets, mask = random_batch(cfg, rng)
    meta = {k: cfg[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size")}
    st_write(os.path.join(d, "weights.safetensors"), checkpoint_tensors(cfg, w), meta)
    st_write(os.path.join(d, "batch.safetensors"), {"tokens": tokens, "targets": targets, "mask": mask})

    print(f"[{cfg['name']}] L={cfg['n_layer']} H={cfg['n_head']} C={cfg['n_embd']} V={cfg['vocab_size']} "
          f"block={cfg['block_size']} B={cfg['batch']} T={cfg['T']}  mask rows sum={mask.sum(axis=1).astype(int).tolist()}")
    t0 = time.time()
    try:
        r = subprocess.run([driver, d], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"[{cfg['name']}] FAIL: cannot run the driver {driver}: {e}")
        return False
    if r.stdout.strip():
        print("\n".join("  driver: " + line for line in r.stdout.strip().splitlines()))
    if r.returncode != 0:
        print(r.stderr.strip())
        print(f"[{cfg['name']}] FAIL: driver exited with {r.returncode}")
        return False
    t_dfg = time.time() - t0
    try:
        got, _ = st_read(os.path.join(d, "dfg_out.safetensors"))
    except (OSError, ValueError, KeyError) as e:
        print(f"[{cfg['name']}] FAIL: cannot read dfg's output: {e!r}")
        return False
    want = reference(cfg, w, tokens, targets, mask)

    ok = True
    print(f"  {'tensor':<34} {'shape':<16} {'max|torch|':>11} {'rel.err':>10}")
    for name, ref in want.items():
        g = got.get(name)
        if g is None:
            print(f"  {name:<34} MISSING from dfg's output")
            ok = False
            continue
        if tuple(g.shape) != tuple(ref.shape) and not (ref.size == 1 and g.size == 1):
            print(f"  {name:<34} shape {tuple(g.shape)} from dfg, {tuple(ref.shape)} expected")
            ok = False
            continue
        e = rel_err(g.reshape(ref.shape), ref)
        good = e <= TOL  # False for NaN
        ok &= good
        print(f"  {name:<34} {str(tuple(ref.shape)):<16} {float(np.max(np.abs(ref))):11.4e} {e:10.2e}"
              f"{'' if good else '  FAIL'}")
    print(f"[{cfg['name']}] loss torch {float(want['loss']):.8f} dfg {float(got.get('loss', np.nan)):.8f}; "
          f"driver {t_dfg:.2f}s; {'PASS' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True, help="path of the gpt2_dump executable")
    ap.add_argument("--workdir", required=True, help="directory for the exchanged safetensors files")
    ap.add_argument("--config", action="append", help="run only these configurations (default: all)")
    a = ap.parse_args()
    seed = run_seed("gpt2_golden")
    if seed is None:
        return 1
    print(f"gpt2_golden: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {torch.__version__}, "
          f"tolerance {TOL:g} per tensor")
    torch.manual_seed(seed)
    os.makedirs(a.workdir, exist_ok=True)
    if not os.access(a.driver, os.X_OK):
        print(f"gpt2_golden: FAIL: driver {a.driver} is not an executable")
        return 1
    configs = golden_common.chosen_configs("gpt2_golden", CONFIGS, a.config)
    if configs is None:
        return 1
    results = [run_config(c, a.driver, a.workdir, seed) for c in configs]
    ok = all(results)
    print(f"gpt2_golden: {'all tensors agree' if ok else 'MISMATCH'} (seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
