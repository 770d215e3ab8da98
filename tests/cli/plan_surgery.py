#!/usr/bin/env python3
"""plan_surgery.py - damaged copies of a dfg plan file for the CLI tests (format: runtime/formats/planfile.h).

  plan_surgery.py sections P.dfg            prints "KIND NAME PAYLOAD_OFFSET LENGTH" per section
  plan_surgery.py flip P.dfg OUT KIND       flips a byte in the middle of section KIND's payload
  plan_surgery.py cut P.dfg OUT LENGTH      keeps the first LENGTH bytes
  plan_surgery.py arena P.dfg OUT DELTA     adds DELTA to the plan section's arena size and
                                            repairs its CRC: a record valid on its own that no
                                            longer matches what dfg compiles
  plan_surgery.py overlap P.dfg OUT         moves the second buffer onto the first (both live
                                            at step 0: persistent) and repairs the CRC
"""
import struct
import sys
import zlib

NAMES = {1: "info", 2: "settings", 3: "tensors", 4: "graphs", 5: "stages", 6: "hostlib", 7: "plan", 8: "declarations"}


def sections(b):
    count = struct.unpack_from("<I", b, 12)[0]
    off, out = 16, []
    for _ in range(count):
        kind, length, _crc = struct.unpack_from("<IQI", b, off)
        out.append((kind, off + 16, length))
        off += 16 + length
    return out


def plan_section(b):
    return next(s for s in sections(b) if s[0] == 7)


def fix_crc(b, payload, length):
    struct.pack_into("<I", b, payload - 4, zlib.crc32(bytes(b[payload:payload + length])) & 0xFFFFFFFF)


def buffers_at(b):
    """Offset of the plan section's buffer table (after the arena header and the schedule)."""
    _, p, _ = plan_section(b)
    off = p + 8 + 4 + 4 + 4
    n_graphs = struct.unpack_from("<I", b, off)[0]
    off += 4
    for _ in range(n_graphs):
        n_nodes = struct.unpack_from("<I", b, off)[0]
        off += 4
        for _ in range(n_nodes):
            name_len = struct.unpack_from("<I", b, off + 4)[0]
            off += 8 + name_len
    return off


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    b = bytearray(open(path, "rb").read())
    if cmd == "sections":
        for kind, payload, length in sections(b):
            print(kind, NAMES.get(kind, "?"), payload, length)
        return
    out = sys.argv[3]
    if cmd == "flip":
        kind = int(sys.argv[4])
        _, payload, length = next(s for s in sections(b) if s[0] == kind)
        b[payload + length // 2] ^= 0x5A
    elif cmd == "cut":
        b = b[:int(sys.argv[4])]
    elif cmd == "arena":
        _, payload, length = plan_section(b)
        struct.pack_into("<Q", b, payload, struct.unpack_from("<Q", b, payload)[0] + int(sys.argv[4]))
        fix_crc(b, payload, length)
    elif cmd == "overlap":
        _, payload, length = plan_section(b)
        at = buffers_at(b)
        first = struct.unpack_from("<Q", b, at + 4 + 4)[0]       # buffer 0's offset
        struct.pack_into("<Q", b, at + 4 + 28 + 4, first)        # buffer 1's offset
        fix_crc(b, payload, length)
    else:
        sys.exit("unknown command " + cmd)
    open(out, "wb").write(b)


main()
