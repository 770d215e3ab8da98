#!/usr/bin/env python3
"""Writes the seed files of tests/fuzz/corpus/safetensors: small valid safetensors files that
between them use every header feature the reader checks (each dtype, rank 0 to 6, empty
tensors, gaps, metadata, escapes and non-ASCII names). The seeds are committed; run this again
only to change them."""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")
SIZES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2, "U16": 2,
         "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def write(name, tensors, metadata=None, gap=0, pad=True):
    """tensors: list of (name, dtype, shape). Data bytes are a counting pattern."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for tname, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[tname] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n + gap
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if pad:
        hb += b" " * (-len(hb) % 8)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + bytes(i % 251 for i in range(offset)))


def main():
    os.makedirs(OUT, exist_ok=True)
    write("empty.safetensors", [])
    write("one_f32.safetensors", [("w", "F32", (2, 3))], {"format": "pt"})
    write("gpt2_like.safetensors", [
        ("wte.weight", "F32", (5, 4)), ("h.0.attn.c_attn.weight", "BF16", (4, 12)), ("h.0.attn.c_attn.bias", "F16", (12,)),
        ("h.0.attn.bias", "U8", (1, 1, 3, 3)), ("step", "I32", ()), ("mask", "U8", (0, 7))],
        {"format": "pt", "producer": "dfg", "dfg.step": "3"})
    write("foreign_dtypes.safetensors", [(d.lower(), d, (2,)) for d in SIZES])
    write("gaps_rank6.safetensors", [("a", "F32", (1, 2, 1, 2, 1, 2)), ("b", "I64", (1,)), ("c", "BOOL", (3,))], gap=5)
    write("names_escaped.safetensors", [("caf\u00e9 \"q\" \\ \n\u2603", "F16", (2, 1)), ("", "U8", (1,))],
          {"k\u00e9y": "v\u00e0lue", "empty": ""})
    write("unpadded.safetensors", [("x", "F64", (1, 1))], pad=False)


if __name__ == "__main__":
    main()
