#!/usr/bin/env bash
# predict_shapes_test.sh - dfg inspect --device cpu's shaped model (tools/cli_device_predict.c,
# cli_device_rates.c) on made-up rates (DFG_CPU_RATES: nothing measured, no wall time): each
# GEMM-like node at the rate of its own GEMM shape, each node's bytes at the bandwidth of their
# size and thread column, its other FLOPs at its kernel class's rate. The grid is a power law,
# exact in log space, so each stage's time is computed here by hand:
#   mm      (64 x 128) @ (128 x 256): the run's threads at (64, 256, 128), between grid points
#   mm_b    (4, 20, 128) @ (128, 256): a shared weight, the batch folded into M = 80
#   head    (8 x 768) @ (768 x 50257): N past the grid, clamped to 1024
#   att     attention (2, 16, 3 x 64), 4 heads: per head (16, 16, 16) and (16, 16, 16), one thread
#           a job, 8 jobs on the 4 threads
#   gelu    65536 elements (512 KiB moved: split over the threads), transcendental
#   scale   1000 elements (8000 bytes: one thread), arithmetic
#   adam    AdamW over two parameters, 1000 elements (one thread) and 100000 (the threads): each
#           parameter's share of the node's bytes at AdamW's rate for its thread count
#   usage: predict_shapes_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
. "$(dirname "$0")/testlib.sh"
testlib_begin predict-shapes-test
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }

cat >shapes.c <<'C'
#include <stdio.h>

#include "dfg.h"

/* tensor names are the program's: each stage's carry the stage's name */
static const char *named(const char *stage, const char *what) {
    static char buf[64];
    snprintf(buf, sizeof(buf), "%s.%s", stage, what);
    return buf;
}

static dfg_status stage(dfg_program *p, dfg_graph *g, const char *name, dfg_tensor *y, dfg_status st) {
    dfg_output(g, y, named(name, "y"));
    return st ? st : dfg_stage_graph(p, g, 1);
}

#define IN(s, what, ...) dfg_input(g, named(s, what), DFG_F32, DFG_SHAPE(__VA_ARGS__))

dfg_status dfg_pipeline(dfg_program *p) {
    dfg_graph *g = dfg_graph_new(p, "mm");
    dfg_status st = stage(p, g, "mm", dfg_matmul(g, IN("mm", "x", 64, 128), IN("mm", "w", 128, 256), false, false), DFG_OK);
    g = dfg_graph_new(p, "mm_b");
    st = stage(p, g, "mm_b", dfg_matmul(g, IN("mm_b", "x", 4, 20, 128), IN("mm_b", "w", 128, 256), false, false), st);
    g = dfg_graph_new(p, "head");
    st = stage(p, g, "head", dfg_matmul(g, IN("head", "x", 8, 768), IN("head", "w", 768, 50257), false, false), st);
    g = dfg_graph_new(p, "att");
    st = stage(p, g, "att", dfg_attention(g, IN("att", "qkv", 2, 16, 192), 4), st);
    g = dfg_graph_new(p, "gelu");
    st = stage(p, g, "gelu", dfg_gelu(g, IN("gelu", "x", 64, 1024)), st);
    g = dfg_graph_new(p, "scale");
    st = stage(p, g, "scale", dfg_scale(g, IN("scale", "x", 1000), 3.0f), st);
    g = dfg_graph_new(p, "adam");
    dfg_tensor *t[4][2], *step = dfg_state(p, "adam.step", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_constant(1.0f));
    const char *what[4] = {"p", "g", "m", "v"};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) {
            char name[32];
            snprintf(name, sizeof(name), "%s%d", what[i], j);
            t[i][j] = dfg_state(p, named("adam", name), DFG_F32, DFG_SHAPE(j ? 100000 : 1000), DFG_ROLE_NONE,
                                dfg_init_constant(0.5f));
        }
    dfg_status sa = dfg_adamw(g, t[0], t[1], t[2], t[3], 2, step, (dfg_adamw_config){1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f});
    return stage(p, g, "adam", dfg_scale(g, IN("adam", "x", 1), 1.0f), st ? st : sa);
}
C
run "$DFG" compile shapes.c -o shapes.dfg --no-fuse
expect_rc 0 "compile the seven-stage plan for the cpu"

# the rates file: 4 threads, 1 us a kernel; GEMMs 1e9 M^0.5 N^0.25 K^0.125 FLOP/s on the run's
# threads, a tenth of it on one; copies 40/10 GB/s (in cache, not) on the threads, 20/5 on one;
# transcendental 3 (threads) / 1 (one) GFLOP/s, the rest 8 / 2; AdamW 6 / 3 GB/s
python3 - <<'PY'
law = lambda m, n, k: 1e9 * m ** 0.5 * n ** 0.25 * k ** 0.125
M, NK = [1, 8, 64, 512], [64, 256, 1024]
gemm = [law(m, n, k) * s for s in (1, 0.1) for m in M for n in NK for k in NK]
rates = gemm + [40e9, 10e9, 20e9, 5e9] + [3e9, 1e9, 8e9, 2e9] + [6e9, 3e9]
open("rates.txt", "w").write("\t".join(["4", "1e-06"] + [repr(x) for x in rates] + ["made-up CPU"]) + "\n")
PY
export DFG_CPU_RATES=$PWD/rates.txt
run "$DFG" inspect shapes.dfg --device cpu --json
expect_rc 0 "inspect --device cpu with DFG_CPU_RATES"
cp out.txt shapes.json
check "the JSON carries the rates it used (4 threads)" test "$(jget shapes.json 'd["prediction"]["cpu_rates"]["threads"]')" = 4

check "each stage equals max(FLOPs / its shape's or class's rate, bytes / its size's bandwidth) + 1 us, by hand" python3 - <<'PY'
import json, math
law = lambda m, n, k: 1e9 * m ** 0.5 * n ** 0.25 * k ** 0.125
clamp = lambda x, lo, hi: min(max(x, lo), hi)
gemm = lambda m, n, k, s=1.0: s * law(clamp(m, 1, 512), clamp(n, 64, 1024), clamp(k, 64, 1024))
def bw(b):  # the run's threads from 2 x 4 x 32768 bytes; log(bytes) between 256 KiB and 128 MiB
    hi, lo = (40e9, 10e9) if b >= 2 * 4 * 32768 else (20e9, 5e9)
    f = clamp((math.log(b) - math.log(256 * 1024)) / (math.log(128 * 2 ** 20) - math.log(256 * 1024)), 0, 1)
    return math.exp((1 - f) * math.log(hi) + f * math.log(lo))
f4 = 4.0
want = {  # stage: (FLOPs, bytes, compute rate)
    "mm": (2 * 64 * 256 * 128, f4 * (64 * 128 + 128 * 256 + 64 * 256), gemm(64, 256, 128)),
    "mm_b": (2 * 80 * 256 * 128, f4 * (80 * 128 + 128 * 256 + 80 * 256), gemm(80, 256, 128)),
    "head": (2 * 8 * 50257 * 768, f4 * (8 * 768 + 768 * 50257 + 8 * 50257), gemm(8, 50257, 768)),
    "att": (None, None, 4 * gemm(16, 16, 16, 0.1)),  # 8 head jobs on 4 threads, each at one thread's rate
    "gelu": (8 * 65536, f4 * 2 * 65536, 3e9),
    "scale": (1000, f4 * 2 * 1000, 2e9),
    "adam": (12 * 101000, None, 8e9),  # bytes: the step and the arrays; the memory time by hand below
}
adam_bytes = 4 + 4 * 28 * 101000 // 4  # the step (i32), then four arrays read and three written, f32
adam_memory_s = adam_bytes * 1000 / 101000 / 3e9 + adam_bytes * 100000 / 101000 / 6e9
d = json.load(open("shapes.json"))["prediction"]
bad = []
for name, (fl, by, rate) in want.items():
    s = [x for x in d["stages"] if x["name"] == name][0]
    kernels = 2 if name == "adam" else 1  # adam: the update and the stage's 1-element output
    if s["kernels"] != kernels: bad.append(f"{name}: {s['kernels']} kernels, want {kernels}")
    if name == "adam":
        fl += 1  # the output's scale
        ms = (max(12 * 101000 / rate, adam_memory_s) + max(1 / 2e9, 2 * f4 / bw(2 * f4)) + 2e-6) * 1e3
    fl = s["flops"] if fl is None else fl
    by = s["bytes"] if by is None else by
    if s["flops"] != fl or s["bytes"] != by: bad.append(f"{name}: flops {s['flops']} bytes {s['bytes']}, by hand {fl} {by}")
    if name != "adam":
        ms = (max(fl / rate, by / bw(by)) + 1e-6) * 1e3
    if abs(s["predicted_ms"] - ms) > 1e-9 * ms: bad.append(f"{name}: {s['predicted_ms']} ms, by hand {ms}")
print("; ".join(bad) or "all seven by hand")
raise SystemExit(1 if bad else 0)
PY

run env DFG_CPU_RATES=$PWD/missing.txt "$DFG" inspect shapes.dfg --device cpu
expect_rc 2 "a DFG_CPU_RATES file that is not there"
expect_one_line "a DFG_CPU_RATES file that is not there"
printf '4\t1e-06\t5\tmade-up\n' >short.txt
run env DFG_CPU_RATES=$PWD/short.txt "$DFG" inspect shapes.dfg --device cpu
expect_rc 2 "a DFG_CPU_RATES file short of rates"
run env -u DFG_CPU_RATES DFG_CPU_ROOFLINE=1e11,2e10,1e-6 "$DFG" inspect shapes.dfg --device cpu --json
check "DFG_CPU_ROOFLINE: the peaks, no rates in the JSON" test "$(jget out.txt 'd["prediction"]["cpu_rates"]')" = None

testlib_end
