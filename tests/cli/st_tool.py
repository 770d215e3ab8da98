#!/usr/bin/env python3
"""st_tool.py - small safetensors helpers for the CLI tests (standard library only).

  st_tool.py same A B [--except PREFIX]...
                                 tensors of A and B: same names, dtypes, shapes and bytes (any
                                 header order), leaving out names that start with any PREFIX;
                                 exit 3 listing the tensors that differ
  st_tool.py get F NAME          tensor NAME's values, space-separated (i32 or f32)
  st_tool.py close A B RTOL [--except PREFIX]...
                                 tensors of A and B (f32, bf16 or f16 in either) agree: the same
                                 names and shapes, and per tensor max|a - b| <= RTOL * max|a|
                                 (integer tensors equal); prints the worst tensor; exit 3 when
                                 one does not
  st_tool.py update W0 A B RTOL [--from W0B] [--prefix P]
                                 the update B - W0B (W0B: B's start, default W0) agrees with the
                                 update A - W0 over all the float tensors together:
                                 ||(B - W0B) - (A - W0)|| <= RTOL * ||A - W0|| (2-norms); with
                                 --prefix, B and W0B hold tensor N as P + N (a mixed-precision
                                 run's f32 masters, "master."); exit 3 when not
  st_tool.py norm-close A B RTOL all the float tensors of A and B together: ||B - A|| <= RTOL ||A||
                                 (2-norms); exit 3 when not
  st_tool.py names F             the tensor names, one per line, sorted
  st_tool.py meta F KEY          a metadata value
  st_tool.py rollouts OUT N T V SEED [--bad-shape] [--group G] [--prompt-len L] [--left-pad K]
                                 a GRPO rollout file: tokens i32 (N,T) (prompt then completion,
                                 right-padded), completion_mask f32 (N,T), rewards f32 (N); prompts
                                 of L tokens (default 4); --left-pad K: the same rows with K pad
                                 tokens (id 0) before each prompt (T grows by K) and TRL's
                                 attention_mask i32 (N,T) (0 on the pads)
  st_tool.py shard F DIR N       DIR as transformers' save_pretrained writes a sharded model: F's
                                 tensors cut in file order into N shards
                                 model-0000k-of-0000N.safetensors and the index
                                 model.safetensors.index.json mapping each tensor to its shard
  st_tool.py check-dump OUT R G  OUT's logp is 0 off R's completion mask and finite, < 0 on it;
                                 its loss and grad_norm are finite scalars; its advantages have
                                 mean 0 within each group of G
"""
import json
import math
import random
import struct
import sys

DTYPES = {"F32": ("f", 4), "I32": ("i", 4), "BF16": (None, 2), "F16": ("e", 2), "U8": ("B", 1)}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors[name] = (t["dtype"], tuple(t["shape"]), body[a:b])
    return tensors, meta


def values(t):
    dtype, shape, raw = t
    if dtype == "BF16":  # the top half of an f32
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % (len(raw) // 2), raw)]
    code, size = DTYPES[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, code), raw))


def close(a, b, rtol, skip=()):
    ta, _ = read(a)
    tb, _ = read(b)
    if skip:
        ta = {k: v for k, v in ta.items() if not k.startswith(tuple(skip))}
        tb = {k: v for k, v in tb.items() if not k.startswith(tuple(skip))}
    if set(ta) != set(tb):
        print("names differ: %s" % ", ".join(sorted(set(ta) ^ set(tb))[:10]))
        return 3
    worst, worst_name, bad = 0.0, "", []
    for n in sorted(ta):
        if ta[n][1] != tb[n][1]:
            bad.append("%s shape %s vs %s" % (n, ta[n][1], tb[n][1]))
            continue
        va, vb = values(ta[n]), values(tb[n])
        if any(math.isnan(x) != math.isnan(y) for x, y in zip(va, vb)):
            bad.append("%s (NaN in one only)" % n)
            continue
        # NaN in both: a value neither has (a metric with no value, e.g. the sampler's without a sampler)
        kept = [(x, y) for x, y in zip(va, vb) if not math.isnan(x)]
        va, vb = [x for x, _ in kept], [y for _, y in kept]
        if ta[n][0] in ("I32", "U8") or tb[n][0] in ("I32", "U8"):
            if va != vb:
                bad.append("%s (integers differ)" % n)
            continue
        scale = max((abs(x) for x in va), default=0.0)
        err = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        rel = err / scale if scale > 0 else err
        if not math.isfinite(rel) or rel > rtol:
            bad.append("%s rel %.3g" % (n, rel))
        if rel > worst or not math.isfinite(rel):
            worst, worst_name = rel, n
    print("%d tensors, worst %s at %.3g of its largest value (bound %g)" % (len(ta), worst_name or "-", worst, rtol))
    if bad:
        print("%d tensor(s) off: %s" % (len(bad), "; ".join(bad[:10])))
        return 3
    return 0


def write(path, tensors, meta):
    header, off, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def same(a, b, skip=()):
    ta, _ = read(a)
    tb, _ = read(b)
    ta = {k: v for k, v in ta.items() if not any(k.startswith(p) for p in skip)}
    tb = {k: v for k, v in tb.items() if not any(k.startswith(p) for p in skip)}
    bad = sorted(set(ta) ^ set(tb))
    bad += sorted(n for n in set(ta) & set(tb) if ta[n] != tb[n])
    if bad:
        print("%d tensor(s) differ: %s" % (len(bad), ", ".join(bad[:10])))
        return 3
    print("%d tensors identical" % len(ta))
    return 0


def update(w0, a, b, rtol, w0b=None, prefix=""):
    t0, _ = read(w0)
    t0b = read(w0b)[0] if w0b else t0
    ta, _ = read(a)
    tb, _ = read(b)
    if prefix:
        tb = {k[len(prefix):]: v for k, v in tb.items() if k.startswith(prefix)}
        t0b = {k[len(prefix):]: v for k, v in t0b.items() if k.startswith(prefix)} if w0b else t0b
    diff = ref = 0.0
    for n in sorted(t0):
        if t0[n][0] in ("I32", "U8") or n not in ta or n not in tb or n not in t0b:
            continue
        for x0, y0, xa, xb in zip(values(t0[n]), values(t0b[n]), values(ta[n]), values(tb[n])):
            diff += ((xb - y0) - (xa - x0)) ** 2
            ref += (xa - x0) ** 2
    rel = math.sqrt(diff / ref) if ref > 0 else float("inf")
    print("update of %d tensors: |B - A| / |A - W0| = %.3g (bound %g)" % (len(t0), rel, rtol))
    return 0 if rel <= rtol else 3


def norm_close(a, b, rtol):
    """All the float tensors of A and B together: ||B - A|| <= RTOL * ||A|| (2-norms)."""
    ta, _ = read(a)
    tb, _ = read(b)
    diff = ref = 0.0
    for n in sorted(ta):
        if ta[n][0] in ("I32", "U8") or n not in tb:
            continue
        for xa, xb in zip(values(ta[n]), values(tb[n])):
            diff += (xb - xa) ** 2
            ref += xa ** 2
    rel = math.sqrt(diff / ref) if ref > 0 else float("inf")
    print("%d tensors together: |B - A| / |A| = %.3g (bound %g)" % (len(ta), rel, rtol))
    return 0 if rel <= rtol else 3


def rollouts(out, n, t, vocab, seed, bad_shape, group, lp=4, left_pad=0):
    """Prompts of lp tokens (the same for each group of `group` rows, as a rollout makes them;
    group 1: every row its own), then 1..(T-lp) completion tokens ending in EOS (id 1),
    right-padded with 0; the mask is 1 on the completion tokens, EOS included. left_pad: the
    same rows, each with left_pad pad tokens before its prompt, and an attention_mask."""
    rng = random.Random(seed)
    tokens, mask, rewards, amask = [], [], [], []
    for i in range(n):
        if i % group == 0:
            prompt = [rng.randrange(2, vocab) for _ in range(lp)]
        row = [0] * left_pad + list(prompt)
        k = rng.randrange(1, t - lp + 1)
        comp = [rng.randrange(2, vocab) for _ in range(k - 1)] + [1]
        row += comp + [0] * (t - lp - k)
        tokens += row
        mask += [0.0] * (left_pad + lp) + [1.0] * k + [0.0] * (t - lp - k)
        amask += [0] * left_pad + [1] * (lp + k) + [0] * (t - lp - k)
        rewards.append(rng.random())
    rows = n + 1 if bad_shape else n
    t += left_pad
    if bad_shape:
        tokens += tokens[:t]
        mask += mask[:t]
    tensors = {
        "tokens": ("I32", (rows, t), struct.pack("<%di" % len(tokens), *tokens)),
        "completion_mask": ("F32", (rows, t), struct.pack("<%df" % len(mask), *mask)),
        "rewards": ("F32", (n,), struct.pack("<%df" % n, *rewards)),
    }
    if left_pad:
        tensors["attention_mask"] = ("I32", (n, t), struct.pack("<%di" % len(amask), *amask))
    write(out, tensors, {"format": "pt"})
    return 0


def shard(path, out, n):
    import os
    tensors, meta = read(path)
    names = list(tensors)
    os.makedirs(out, exist_ok=True)
    weight_map = {}
    for k in range(n):
        part = names[k * len(names) // n:(k + 1) * len(names) // n]
        file = "model-%05d-of-%05d.safetensors" % (k + 1, n)
        write(os.path.join(out, file), {name: tensors[name] for name in part}, meta)
        weight_map.update({name: file for name in part})
    total = sum(len(t[2]) for t in tensors.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return 0


def check_dump(out, r, g):
    to, _ = read(out)
    tr, _ = read(r)
    logp, mask = values(to["logp"]), values(tr["completion_mask"])
    if to["logp"][1] != tr["completion_mask"][1]:
        print("logp has shape %s, the mask %s" % (to["logp"][1], tr["completion_mask"][1]))
        return 1
    off = sum(1 for x, m in zip(logp, mask) if m == 0 and x != 0)
    on_bad = sum(1 for x, m in zip(logp, mask) if m != 0 and not (math.isfinite(x) and x < 0))
    on = sum(1 for m in mask if m != 0)
    scalars = [values(to[k])[0] for k in ("loss", "grad_norm")]
    if off or on_bad or not all(math.isfinite(x) for x in scalars) or to["loss"][1] != ():
        print("logp: %d nonzero off the mask, %d of %d not finite and < 0 on it; loss, grad_norm = %s" %
              (off, on_bad, on, scalars))
        return 1
    adv = values(to["advantages"])
    means = [sum(adv[i:i + g]) / g for i in range(0, len(adv), g)]
    if len(adv) != len(values(tr["rewards"])) or max(abs(m) for m in means) > 1e-5 or max(map(abs, adv)) == 0:
        print("advantages %s: group means %s" % (adv[:g], means))
        return 1
    print("logp: 0 off the mask, finite and < 0 on its %d tokens; loss %g, grad_norm %g" % (on, *scalars))
    return 0


def main(argv):
    cmd = argv[1]
    if cmd == "same":
        return same(argv[2], argv[3], [argv[i + 1] for i in range(4, len(argv) - 1) if argv[i] == "--except"])
    if cmd == "get":
        print(" ".join("%g" % v for v in values(read(argv[2])[0][argv[3]])))
        return 0
    if cmd == "close":
        return close(argv[2], argv[3], float(argv[4]), [argv[i + 1] for i in range(5, len(argv) - 1) if argv[i] == "--except"])
    if cmd == "update":
        opt = lambda flag: argv[argv.index(flag) + 1] if flag in argv else None
        return update(argv[2], argv[3], argv[4], float(argv[5]), opt("--from"), opt("--prefix") or "")
    if cmd == "norm-close":
        return norm_close(argv[2], argv[3], float(argv[4]))
    if cmd == "names":
        print("\n".join(sorted(read(argv[2])[0])))
        return 0
    if cmd == "meta":
        print(read(argv[2])[1].get(argv[3], ""))
        return 0
    if cmd == "rollouts":
        opt = lambda flag, d: int(argv[argv.index(flag) + 1]) if flag in argv else d
        return rollouts(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), "--bad-shape" in argv,
                        opt("--group", 1), opt("--prompt-len", 4), opt("--left-pad", 0))
    if cmd == "shard":
        return shard(argv[2], argv[3], int(argv[4]))
    if cmd == "check-dump":
        return check_dump(argv[2], argv[3], int(argv[4]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
