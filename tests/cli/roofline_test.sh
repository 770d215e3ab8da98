#!/usr/bin/env bash
# roofline_test.sh - dfg inspect --device (predicted step time, tools/cli_device*.c) on a plan whose
# roofline is computed here by hand: an f32 matmul once a step, a scale three times, a bf16 matmul
# once, a KV-cache-like append of 8 columns into a 256 x 1024 state (its kernel copies the slice
# alone: counted at the slice's bytes, not the whole state's). Each stage is max(FLOPs / peak, bytes / bandwidth) + the device's time a kernel run, at its
# runs; bf16 GEMMs at the bf16 tensor-core peak. The GPUs' figures are the datasheets' (h100, l40s
# here); the CPU's are fixed by DFG_CPU_ROOFLINE, so nothing depends on this machine or wall time.
# Also: --runs takes a dfg run --metrics file's counts, an unknown device is refused in one line
# naming the devices, and the JSON has the fields tools/gpu-check.sh reads.
#   usage: roofline_test.sh /path/to/dfg /path/to/source-tree
set -u
DFG=$1
. "$(dirname "$0")/testlib.sh"
testlib_begin roofline-test
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }

cat >roof.c <<'C'
#include "dfg.h"

dfg_status dfg_pipeline(dfg_program *p) {
    dfg_graph *g = dfg_graph_new(p, "mm");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(64, 128));
    dfg_tensor *w = dfg_input(g, "w", DFG_F32, DFG_SHAPE(128, 256));
    dfg_output(g, dfg_matmul(g, x, w, false, false), "y");
    dfg_status st = dfg_stage_graph(p, g, 1);
    dfg_graph *h = dfg_graph_new(p, "scale");
    dfg_tensor *z = dfg_input(h, "z", DFG_F32, DFG_SHAPE(1024, 1024));
    dfg_output(h, dfg_scale(h, z, 2.0f), "z2");
    st = st ? st : dfg_stage_graph(p, h, 3);
    dfg_graph *k = dfg_graph_new(p, "mm16");
    dfg_tensor *a = dfg_input(k, "a", DFG_BF16, DFG_SHAPE(1024, 1024));
    dfg_tensor *b = dfg_input(k, "b", DFG_BF16, DFG_SHAPE(1024, 1024));
    dfg_output(k, dfg_matmul(k, a, b, false, false), "ab");
    st = st ? st : dfg_stage_graph(p, k, 1);
    dfg_graph *c = dfg_graph_new(p, "append");
    dfg_tensor *cache = dfg_state(p, "cache", DFG_F32, DFG_SHAPE(256, 1024), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_slice_assign(c, cache, dfg_input(c, "src", DFG_F32, DFG_SHAPE(256, 8)), 1, 5);
    return st ? st : dfg_stage_graph(p, c, 1);
}
C
run "$DFG" compile roof.c --target cuda -o roof.dfg
expect_rc 0 "compile the four-stage plan for cuda (planning needs no GPU)"

# expect DEVICE BF16 F32 BW KERNEL_S [RUNS_MM RUNS_SCALE RUNS_MM16 RUNS_APPEND]: the prediction in roof.json
# against the hand computation (relative error under 1e-9)
expect() {
  python3 - "$@" <<'PY'
import json, sys
dev, bf16, f32, bw, ks = sys.argv[1], *map(float, sys.argv[2:6])
runs = list(map(float, sys.argv[6:10])) if len(sys.argv) > 6 else [1, 3, 1, 1]
# stage: (flops, bytes, peak): ops.def's matmul is 2 M N K FLOPs, reading A and B and writing C;
# scale (affine) one FLOP an element, reading and writing it; the append reads and writes its slice
stages = {"mm": (2 * 64 * 128 * 256, 4 * (64 * 128 + 128 * 256 + 64 * 256), f32),
          "scale": (1024 * 1024, 2 * 4 * 1024 * 1024, f32),
          "mm16": (2 * 1024 ** 3, 2 * 3 * 1024 * 1024, bf16),
          "append": (0, 2 * 4 * 256 * 8, f32)}
d = json.load(open("roof.json"))["prediction"]
bad = []
def near(a, b): return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)
step = 0
for (name, (fl, by, peak)), r in zip(stages.items(), runs):
    want = (max(fl / peak, by / bw) + ks) * r * 1e3
    bound = "compute" if fl / peak > by / bw else "memory"
    got = [s for s in d["stages"] if s["name"] == name][0]
    step += want
    if not near(got["predicted_ms"], want) or not near(d["stage_ms"][name], want): bad.append(f"{name}: {got['predicted_ms']} ms, by hand {want}")
    if got["flops"] != fl or got["bytes"] != by: bad.append(f"{name}: flops {got['flops']} bytes {got['bytes']}, by hand {fl} {by}")
    if got["bound"] != bound: bad.append(f"{name}: bound {got['bound']}, by hand {bound}")
if not near(d["step_ms"], step): bad.append(f"step {d['step_ms']} ms, by hand {step}")
if d["device"] != dev: bad.append(f"device {d['device']}")
print("; ".join(bad) or f"step {step:.6g} ms")
sys.exit(1 if bad else 0)
PY
}

# ---------------------------------------------------------------- the datasheets' GPUs
run "$DFG" inspect roof.dfg --device h100 --json
expect_rc 0 "inspect --device h100 --json"
cp out.txt roof.json
# H100 SXM: 989.5 TFLOP/s bf16 dense, 67 TFLOP/s f32, 3.35 TB/s; 3 us a kernel run
check "h100: each stage and the step equal max(FLOPs / peak, bytes / bandwidth) + 3 us by hand (the bf16 matmul at the tensor-core peak)" \
  expect h100 989.5e12 67e12 3.35e12 3e-6
run "$DFG" inspect roof.dfg --device l40s --json
cp out.txt roof.json
check "l40s: the same with its 362.05 / 91.6 TFLOP/s and 864 GB/s" expect l40s 362.05e12 91.6e12 864e9 3e-6
run "$DFG" inspect roof.dfg --device h100
expect_in out.txt "step: " "the table ends with the step's prediction"
check "the table names each stage's bound: the bf16 matmul compute, the scale memory" \
  bash -c "grep -E '^ +3 +mm16 .* compute ' out.txt >/dev/null && grep -E '^ +2 +scale .* memory ' out.txt >/dev/null"

# ---------------------------------------------------------------- cpu, with fixed figures
export DFG_CPU_ROOFLINE=1e11,2e10,1e-6
run "$DFG" inspect roof.dfg --device cpu --json
expect_rc 0 "inspect --device cpu with DFG_CPU_ROOFLINE"
cp out.txt roof.json
check "cpu: DFG_CPU_ROOFLINE's figures (its f32 peak for bf16 too)" expect cpu 1e11 1e11 2e10 1e-6
# a run's counts instead of the worst case: two metrics lines, their mean runs
printf '%s\n' '{"step":1,"stage_runs":{"mm":1,"scale":2,"mm16":1,"append":1}}' '{"step":2,"stage_runs":{"mm":1,"scale":1}}' >m.jsonl
run "$DFG" inspect roof.dfg --device cpu --runs m.jsonl --json
expect_rc 0 "inspect --device cpu --runs m.jsonl"
cp out.txt roof.json
check "--runs: each stage at its mean runs per step in the metrics file (1, 1.5, 0.5, 0.5)" expect cpu 1e11 1e11 2e10 1e-6 1 1.5 0.5 0.5
check "--json says where the runs came from" test "$(jget roof.json 'd["prediction"]["runs_from"]')" = metrics
DFG_CPU_ROOFLINE=fast run "$DFG" inspect roof.dfg --device cpu
expect_rc 2 "a malformed DFG_CPU_ROOFLINE"
expect_one_line "a malformed DFG_CPU_ROOFLINE"
unset DFG_CPU_ROOFLINE

# ---------------------------------------------------------------- refusals and the JSON's fields
run "$DFG" inspect roof.dfg --device h900
expect_rc 2 "an unknown device"
expect_in err.txt "unknown device 'h900' (devices: h100|h200|a100|l40s|cpu)" "the refusal names the devices"
expect_one_line "an unknown device"
run "$DFG" inspect roof.dfg --runs m.jsonl
expect_rc 2 "--runs without --device"
expect_one_line "--runs without --device"
printf 'not json\n' >bad.jsonl
run "$DFG" inspect roof.dfg --device h100 --runs bad.jsonl
expect_rc 2 "a --runs file that is not dfg run --metrics'"
expect_one_line "a --runs file that is not dfg run --metrics'"
run "$DFG" inspect roof.dfg --json
check "without --device the JSON's prediction is null" test "$(jget out.txt 'd["prediction"]')" = None
run "$DFG" inspect roof.dfg --device h200 --json
cp out.txt roof.json
check "--json: the prediction's fields (what tools/gpu-check.sh reads)" python3 -c '
import json, sys
d = json.load(open("roof.json"))["prediction"]
top = {"device", "device_label", "peak_bf16_flops", "peak_f32_flops", "bandwidth_bytes_per_s", "kernel_s", "runs_from",
       "metrics", "step_ms", "roofline_step_ms", "stage_ms", "stages"}
each = {"name", "kind", "runs", "counted", "predicted_ms", "run_ms", "roofline_run_ms", "bound", "compute_ms", "memory_ms",
        "flops", "bytes", "kernels"}
missing = (top - set(d)) | set().union(*(each - set(s) for s in d["stages"]))
print(sorted(missing) or "all present"); sys.exit(1 if missing or d["device"] != "h200" or d["bandwidth_bytes_per_s"] != 4.8e12 else 0)'

testlib_end
