#!/usr/bin/env python3
"""st_tool.py - small safetensors helpers for the CLI tests (standard library only).

  st_tool.py same A B [--except PREFIX]
                                 tensors of A and B: same names, dtypes, shapes and bytes (any
                                 header order), leaving out names that start with PREFIX; exit 3
                                 listing the tensors that differ
  st_tool.py names F             the tensor names, one per line, sorted
  st_tool.py meta F KEY          a metadata value
  st_tool.py rollouts OUT N T V SEED [--bad-shape] [--group G]
                                 a GRPO rollout file: tokens i32 (N,T) (prompt then completion,
                                 right-padded), completion_mask f32 (N,T), rewards f32 (N)
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
    code, size = DTYPES[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, code), raw))


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


def same(a, b, skip=None):
    ta, _ = read(a)
    tb, _ = read(b)
    if skip:
        ta = {k: v for k, v in ta.items() if not k.startswith(skip)}
        tb = {k: v for k, v in tb.items() if not k.startswith(skip)}
    bad = sorted(set(ta) ^ set(tb))
    bad += sorted(n for n in set(ta) & set(tb) if ta[n] != tb[n])
    if bad:
        print("%d tensor(s) differ: %s" % (len(bad), ", ".join(bad[:10])))
        return 3
    print("%d tensors identical" % len(ta))
    return 0


def rollouts(out, n, t, vocab, seed, bad_shape, group):
    """Prompts of 4 tokens (the same for each group of `group` rows, as a rollout makes them;
    group 1: every row its own), then 1..(T-4) completion tokens ending in EOS (id 1),
    right-padded with 0; the mask is 1 on the completion tokens, EOS included."""
    rng = random.Random(seed)
    tokens, mask, rewards = [], [], []
    lp = 4
    for i in range(n):
        if i % group == 0:
            prompt = [rng.randrange(2, vocab) for _ in range(lp)]
        row = list(prompt)
        k = rng.randrange(1, t - lp + 1)
        comp = [rng.randrange(2, vocab) for _ in range(k - 1)] + [1]
        row += comp + [0] * (t - lp - k)
        tokens += row
        mask += [0.0] * lp + [1.0] * k + [0.0] * (t - lp - k)
        rewards.append(rng.random())
    rows = n + 1 if bad_shape else n
    if bad_shape:
        tokens += tokens[:t]
        mask += mask[:t]
    write(out, {
        "tokens": ("I32", (rows, t), struct.pack("<%di" % len(tokens), *tokens)),
        "completion_mask": ("F32", (rows, t), struct.pack("<%df" % len(mask), *mask)),
        "rewards": ("F32", (n,), struct.pack("<%df" % n, *rewards)),
    }, {"format": "pt"})
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
        return same(argv[2], argv[3], argv[5] if len(argv) > 5 and argv[4] == "--except" else None)
    if cmd == "names":
        print("\n".join(sorted(read(argv[2])[0])))
        return 0
    if cmd == "meta":
        print(read(argv[2])[1].get(argv[3], ""))
        return 0
    if cmd == "rollouts":
        group = int(argv[argv.index("--group") + 1]) if "--group" in argv else 1
        return rollouts(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), "--bad-shape" in argv, group)
    if cmd == "check-dump":
        return check_dump(argv[2], argv[3], int(argv[4]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
