#!/usr/bin/env python3
"""nf4_golden.py - dfg's NF4 (ops/nf4.c) against a NumPy re-implementation of bitsandbytes'
quantize_4bit(quant_type="nf4", blocksize=64), with and without compress_statistics (double
quantisation), and dequantize_4bit, written from bitsandbytes' source (github.com/
bitsandbytes-foundation/bitsandbytes, commit 95f9af30: csrc/kernels.cu kQuantizeBlockwiseSmall,
dQuantizeNF4, kQuantizeBlockwise, dQuantize, kDequantizeBlockwise; bitsandbytes/functional.py
quantize_4bit, quantize_blockwise, create_dynamic_map, dequantize_4bit).

    nf4_golden.py --driver NF4_DUMP --workdir DIR

For fresh random weights (normal and heavy-tailed Student-t(3), sizes from 1 to 100003: odd ones,
partial last blocks, more than 256 blocks), plus hand-made blocks (values exactly at the code
thresholds, a block of zeros, a constant block), it runs the driver (tests/golden/nf4_dump.c) and
requires:
  - absmax, absmax2 and offset equal to the reference's f32 values, and every code (the packed
    bytes, padding nibble included, and absmax_q) equal to the reference's;
  - the dequantised values (both forms) within 1e-6 of their block's absmax of the float64 product
    code * absmax, and equal to its f32 rounding;
  - dfg's dynamic map (read back through the op) bit for bit create_dynamic_map(signed=True) as
    bitsandbytes builds it with torch (its code, below, needs torch for torch.linspace's f32).
The reference is float64 except where bitsandbytes' f32 arithmetic decides a code: the reciprocal
1/absmax and the product x * (1/absmax), absmax - offset, and dQuantize's midpoints (upper + val) *
0.5 are computed in f32 as the CUDA kernels do, since a code is a function of those bits. Tie
rules (documented in ops/nf4.c): a value exactly at an NF4 threshold takes the lower code (the
tree tests x > t); NaN (0 * inf, a block of zeros) takes code 0; dQuantize's ties go to its final
pivot (transcribed, so the test reproduces whichever neighbour that is). The mean offset is
float64's mean rounded to f32 (torch's f32 mean may differ from it by an ulp; dfg documents that).
Exit 0: all agree; 1: a mismatch (printed); 77: numpy or torch missing."""
import argparse
import os
import subprocess
import sys
import time
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_common import run_seed, summary, unavailable  # noqa: E402

PROG = "nf4_golden"
try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    unavailable(PROG, f"cannot import numpy and torch ({e})")

F32 = np.float32
# bitsandbytes' NF4 values (csrc/kernels.cu, nf4_dequantization_lut)
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0])
NF4_32 = NF4.astype(F32)
# dQuantizeNF4's thresholds, the decimal literals of csrc/kernels.cu (the midpoints of neighbouring
# codes): a C compiler rounds "0.1202552504837513f" straight to f32; np.float32(0.1202552504837513)
# goes through a double, which for 4 of them is exactly halfway between two floats and rounds to
# the other one. f32_literal rounds the decimal once, exactly.
THRESH_DECIMALS = ["-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
                   "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
                   "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
                   "0.5016634166240692", "0.6427869200706482", "0.8614784181118011"]


def f32_literal(text):
    """The float32 nearest the decimal `text` (ties to even), as a C compiler reads `textf`."""
    exact = Fraction(text)
    c = F32(float(exact))
    best = None
    for cand in (np.nextafter(c, F32(-np.inf)), c, np.nextafter(c, F32(np.inf))):
        key = (abs(Fraction(float(cand)) - exact), int(np.array(cand).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


THRESH = np.array([f32_literal(t) for t in THRESH_DECIMALS], dtype=F32)


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes/functional.py's create_dynamic_map (copied: torch's f32 linspace and means are
    what fix the map's bits)."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    if additional_items > 0:
        boundaries = torch.linspace(0.1, 1, additional_items + 1, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    gap = 256 - len(data)
    for _ in range(gap):
        data.append(0)
    data.sort()
    return torch.tensor(data, dtype=torch.float32).numpy()


def blocks_of(v, size):
    """v (n) as (ceil(n/size), size), padded with 0.0 (bitsandbytes' loads pad with 0), and a mask
    of the real elements."""
    n = v.size
    nb = -(-n // size)
    pad = np.zeros(nb * size, dtype=v.dtype)
    pad[:n] = v
    mask = np.zeros(nb * size, dtype=bool)
    mask[:n] = True
    return pad.reshape(nb, size), mask.reshape(nb, size)


def normalise(v, size):
    """bitsandbytes' blockwise scaling: absmax per block (f32), and v * (1.0f / absmax) in f32 (the
    padding included), as kQuantizeBlockwise(Small) computes them."""
    blk, mask = blocks_of(v, size)
    absmax = np.where(mask, np.abs(blk), F32(0)).max(axis=1).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = F32(1) / absmax
        xn = (blk * inv[:, None]).astype(F32)
    return absmax, xn, mask


def nf4_codes(xn):
    """dQuantizeNF4: the number of thresholds strictly below x (x == t takes the lower code); NaN: 0."""
    codes = np.searchsorted(THRESH, xn, side="left").astype(np.uint8)
    codes[np.isnan(xn)] = 0
    return codes


def dquantize(code, x):
    """dQuantize<0> (csrc/kernels.cu) over an array: the binary search from pivot 127 in steps 64 .. 1,
    then the nearer of the final pivot and its neighbour on x's side by the f32 midpoint."""
    n = x.size
    pivot = np.full(n, 127)
    upper_pivot = np.full(n, 255)
    lower_pivot = np.zeros(n, dtype=np.int64)
    lower = np.full(n, F32(-1))
    upper = np.full(n, F32(1))
    val = code[pivot]
    i = 64
    while i > 0:
        gt = x > val
        lower_pivot = np.where(gt, pivot, lower_pivot)
        lower = np.where(gt, val, lower)
        upper_pivot = np.where(gt, upper_pivot, pivot)
        upper = np.where(gt, upper, val)
        pivot = np.where(gt, pivot + i, pivot - i)
        val = code[pivot]
        i >>= 1
    upper = np.where(upper_pivot == 255, code[255], upper)
    lower = np.where(lower_pivot == 0, code[0], lower)
    gt = x > val
    mid_up = ((upper + val).astype(F32) * F32(0.5)).astype(F32)
    mid_lo = ((lower + val).astype(F32) * F32(0.5)).astype(F32)
    out = np.where(gt, np.where(x > mid_up, upper_pivot, pivot), np.where(x < mid_lo, lower_pivot, pivot))
    return out.astype(np.uint8)


def reference(x, dmap):
    """bitsandbytes' quantize_4bit(nf4, 64) with and without compress_statistics, and both
    dequantisations (float64 products)."""
    n = x.size
    absmax, xn, _ = normalise(x, 64)
    codes = nf4_codes(xn).reshape(-1)
    codes = codes[: n + (n % 2)]  # the padding element of an odd n stays: the low nibble of the last byte
    packed = (codes[0::2] << 4) | codes[1::2]
    q = codes[:n].astype(np.int64)
    code64 = NF4_32.astype(np.float64)  # bitsandbytes' table is f32
    deq = code64[q] * np.repeat(absmax.astype(np.float64), 64)[:n]
    # double quantisation: offset = mean (float64, rounded), d = absmax - offset in f32, blocks of 256
    offset = F32(np.mean(absmax.astype(np.float64)))
    d = (absmax - offset).astype(F32)
    absmax2, dn, _ = normalise(d, 256)
    absmax_q = dquantize(dmap, dn.reshape(-1))[: absmax.size]
    rebuilt = ((dmap[absmax_q] * np.repeat(absmax2, 256)[: absmax.size]).astype(F32) + offset).astype(F32)
    deq_dq = code64[q] * np.repeat(rebuilt.astype(np.float64), 64)[:n]
    return dict(packed=packed.astype(np.uint8), absmax=absmax, absmax_q=absmax_q, absmax2=absmax2,
                offset=np.array([offset], dtype=F32), deq=deq, deq_dq=deq_dq, block_absmax=absmax, rebuilt=rebuilt)


def read(path, dtype):
    return np.fromfile(path, dtype=dtype)


def compare(name, x, got, ref):
    """(passed, line) for one case."""
    n = x.size
    errors = []
    for key, dt in (("packed", np.uint8), ("absmax", F32), ("absmax_q", np.uint8), ("absmax2", F32), ("offset", F32)):
        g = got[key]
        r = ref[key]
        if g.size != r.size:
            errors.append(f"{key}: {g.size} values, the reference has {r.size}")
            continue
        bad = np.flatnonzero(g.view(np.uint8 if dt == np.uint8 else np.uint32) != r.astype(dt).view(
            np.uint8 if dt == np.uint8 else np.uint32))
        if bad.size:
            k = bad[0]
            errors.append(f"{key}: {bad.size} differ, first [{k}]: dfg {g[k]!r}, bitsandbytes' {r.astype(dt)[k]!r}")
    worst = 0.0
    for key, scale in (("deq", np.repeat(ref["block_absmax"].astype(np.float64), 64)[:n]),
                       ("deq_dq", np.repeat(ref["rebuilt"].astype(np.float64), 64)[:n])):
        g = got[key].astype(np.float64)
        r = ref[key]
        if g.size != n:
            errors.append(f"{key}: {g.size} values for {n}")
            continue
        err = np.abs(g - r)
        rel = np.where(scale > 0, err / np.where(scale > 0, np.abs(scale), 1), err)
        worst = max(worst, float(rel.max()) if rel.size else 0.0)
        bad = np.flatnonzero(~(rel <= 1e-6))
        exact = np.flatnonzero(got[key] != r.astype(F32))
        if bad.size:
            k = bad[0]
            errors.append(f"{key}: {bad.size} beyond 1e-6 of the block's absmax, first [{k}]: dfg {g[k]!r}, ref {r[k]!r}")
        elif exact.size:
            k = exact[0]
            errors.append(f"{key}: {exact.size} not the f32 rounding of the product, first [{k}]: dfg {g[k]!r}, ref {r[k]!r}")
    line = f"{name:<34} n {n:>6}: worst dequantisation error {worst:.2e} of the block's absmax"
    for e in errors:
        print(f"{PROG}: FAIL: {name}: {e}")
    return (not errors, line)


def cases(rng):
    sizes = [1, 2, 63, 64, 65, 127, 1000, 4097, 64 * 256, 64 * 513 + 37, 100003]
    out = []
    for n in sizes:
        out.append(("normal(0, 0.02)", (rng.standard_normal(n) * 0.02).astype(F32)))
        out.append(("student-t(3)", (rng.standard_t(3, n) * 0.02).astype(F32)))
    # hand-made: absmax 1 (normalised values are the values), each threshold, its neighbours and
    # the code values; then a block of zeros, a constant block, a partial block of one
    t = THRESH
    special = np.concatenate([[1.0], t, np.nextafter(t, F32(2)), np.nextafter(t, F32(-2)), NF4_32]).astype(F32)
    special = np.concatenate([special, np.zeros(64 - special.size % 64, dtype=F32)])
    special = np.concatenate([special, np.zeros(64, dtype=F32), np.full(64, -0.375, dtype=F32), [F32(0.5)]])
    out.append(("hand-made: thresholds, zeros", special.astype(F32)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    seed = run_seed(PROG)
    if seed is None:
        return 1
    t0 = time.time()
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(seed)
    dmap = create_dynamic_map()
    results = []
    # the map dfg dequantises with
    out = os.path.join(args.workdir, "nf4")
    r = subprocess.run([args.driver, "--map", out], capture_output=True, text=True)
    if r.returncode:
        print(f"{PROG}: FAIL: {args.driver} --map: {r.stderr.strip()}")
        return 1
    got_map = read(out + ".map", F32)
    same = got_map.size == 256 and bool(np.all(got_map.view(np.uint32) == dmap.view(np.uint32)))
    if not same:
        k = int(np.flatnonzero(got_map != dmap)[0]) if got_map.size == 256 else -1
        print(f"{PROG}: FAIL: dfg's dynamic map differs from create_dynamic_map(signed=True) (first at {k})")
    results.append((same, f"{'dynamic map (256 values)':<34} bit for bit: {same}"))
    for i, (name, x) in enumerate(cases(rng)):
        src = os.path.join(args.workdir, f"case{i}.f32")
        x.astype("<f4").tofile(src)
        out = os.path.join(args.workdir, f"case{i}")
        r = subprocess.run([args.driver, src, out], capture_output=True, text=True)
        if r.returncode:
            print(f"{PROG}: FAIL: {name} n {x.size}: {args.driver}: {r.stderr.strip()}")
            results.append((False, ""))
            continue
        got = {k: read(f"{out}.{k}", dt) for k, dt in (("packed", np.uint8), ("absmax", F32), ("absmax_q", np.uint8),
                                                        ("absmax2", F32), ("offset", F32), ("deq", F32),
                                                        ("deq_dq", F32))}
        results.append(compare(name, x, got, reference(x, dmap)))
    return summary(PROG, results, "cases", t0, seed)


if __name__ == "__main__":
    sys.exit(main())
