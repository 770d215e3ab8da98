#!/usr/bin/env bash
# cli_test.sh - the dfg tool end to end, as a user drives it.
#   usage: cli_test.sh /path/to/dfg /path/to/source-tree
# Each check prints "ok - ..." or "FAIL - ..." (with the command's output); the script exits 1
# when any check failed. Training runs use --threads 1: deterministic and fast on a busy machine.
set -u
DFG=$1
SRC=$2
. "$(dirname "$0")/testlib.sh"
testlib_begin cli-test

# run CMD...: runs the command, keeping stdout, stderr and the exit code in out.txt, err.txt, $rc
# loss_at STEP: the loss printed on "step STEP" in out.txt
loss_at() { awk -v s="$1" '$1 == "step" && $2 == s { for (i = 3; i < NF; i++) if ($i == "loss") print $(i + 1) }' out.txt; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0) }'; }

# ---------------------------------------------------------------- help and version
run "$DFG" --version
expect_rc 0 "--version"
expect_in out.txt "dfg 0.1.0" "--version prints the version"
run "$DFG" --help
expect_rc 0 "--help"
expect_in out.txt "compile" "--help lists compile"
expect_in out.txt "run" "--help lists run"
expect_in out.txt "inspect" "--help lists inspect"
expect_in out.txt "dot" "--help lists dot"
for c in compile fit run info inspect dot; do
  run "$DFG" $c --help
  expect_rc 0 "$c --help"
  expect_in out.txt "usage: dfg $c" "$c --help shows its usage"
done
run "$DFG"
expect_rc 2 "no command"
run "$DFG" frobnicate
expect_rc 2 "unknown command"
expect_in err.txt "valid: compile, fit, run, info" "unknown command names the valid ones"
run "$DFG" compile
expect_rc 2 "compile without a pipeline"
expect_in err.txt "missing the pipeline file" "compile names the missing argument"
run "$DFG" run
expect_rc 2 "run without a plan"
expect_in err.txt "missing the plan file" "run names the missing argument"
# dfg info without a plan: the backend registry, each backend ready or saying why not
run "$DFG" info
expect_rc 0 "info without a plan"
expect_in out.txt "backends  cpu       ready" "info: the cpu backend is ready"
for b in cuda cuda-emu; do
  if grep -Eq "^ +$b +(ready: |not here: )" out.txt; then ok "info lists $b"; else fail "info lists $b as ready or not here"; fi
done
DFG_MODULE_DIR=/nonexistent run "$DFG" info
expect_in out.txt "cuda      not here: this dfg has no libdfg-cuda.so (not in /nonexistent" "info names a missing module"

# ---------------------------------------------------------------- compile and train the GPT-2 example
run "$DFG" compile "$SRC/examples/gpt2_train.c" -o gpt2.dfg
expect_rc 0 "compile examples/gpt2_train.c"
expect_in out.txt "wrote gpt2.dfg" "compile reports the plan"
expect_in out.txt "n_layer=2" "compile lists the settings with their defaults"
expect_in out.txt "plan for cpu: arena" "compile prints the memory plan"
[ -s gpt2.dfg ] && ok "gpt2.dfg exists" || fail "gpt2.dfg was not written"

run "$DFG" run gpt2.dfg --steps 100 --threads 1 --every 1
expect_rc 0 "run 100 steps"
n=$(grep -c '^step ' out.txt)
[ "$n" -eq 100 ] && ok "one line per step" || fail "expected 100 step lines, got $n"
expect_in out.txt "grad_norm" "step lines carry grad_norm"
expect_in out.txt " acc " "step lines carry the token accuracy"
first=$(loss_at 1)
last=$(loss_at 100)
# a fresh model guesses among 63 tokens: loss ~ ln(63) = 4.14; the task is learned by step 100
if lt 3.9 "$first" && lt "$first" 4.4; then ok "step 1 loss $first is near ln(63)"; else fail "step 1 loss '$first' is not near ln(63)"; fi
if lt "$last" 2.0; then ok "loss fell from $first to $last in 100 steps"; else fail "loss did not fall below 2.0 in 100 steps (step 100: '$last')"; fi

run "$DFG" info gpt2.dfg
expect_rc 0 "info"
expect_in out.txt "host function gpt2_make_batch" "info lists the host stage"
expect_in out.txt "graph 'train'" "info lists the graph stage"
expect_in out.txt "optimizer" "info lists optimizer bytes"
expect_in out.txt "learning_rate=0.003" "info lists the settings"
expect_in out.txt "memory    arena" "info prints the memory plan"

# ---------------------------------------------------------------- inspect
# human byte counts exactly as the CLI prints them (cli_bytes_str), to compare with `run`
human() { python3 -c '
import sys
b = float(sys.argv[1]); u = 0; units = ["B", "KiB", "MiB", "GiB", "TiB"]
while b >= 1024 and u < 4: b /= 1024; u += 1
print("%.0f B" % b if u == 0 else "%.*f %s" % (2 if b < 10 else 1, b, units[u]))' "$1"; }
# jget FILE EXPR: a value of the JSON object in FILE (python expression over d)

run "$DFG" inspect gpt2.dfg
expect_rc 0 "inspect"
for k in "arena " "lower bound" "naive" "persistent" "peak          step" "live at peak" "activations" "logits" \
         "largest temp" "flops" "removed by dce" "placed in place" "placement" "stages"; do
  expect_in out.txt "$k" "inspect shows '$k'"
done
expect_in out.txt "(function gpt2_make_batch)" "inspect lists the host stage and its function"
run "$DFG" inspect gpt2.dfg --json
expect_rc 0 "inspect --json"
cp out.txt inspect.json
if python3 -c 'import json, sys; json.load(open(sys.argv[1]))' inspect.json 2>/dev/null; then ok "inspect --json is one JSON object"
else fail "inspect --json does not parse as JSON"; fi
missing=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["arena_bytes", "lower_bound_bytes", "naive_bytes", "peak_breakdown", "largest_temp", "flops", "target",
        "align", "persistent_bytes", "peak_step", "n_nodes", "stages"]
print(" ".join(k for k in keys if k not in d))' inspect.json)
[ -z "$missing" ] && ok "inspect --json has every documented key" || fail "inspect --json lacks: $missing"
# gpt2_train's accuracy metric reads the logits, so only logprob fuses: they exist, not at the peak
[ "$(jget inspect.json 'd["categories"]["logits"]["peak_bytes"] == 0 and d["categories"]["logits"]["max_bytes"] > 0 and "at most" in d["categories"]["logits"]["why"] and "never stored" not in d["categories"]["logits"]["why"]')" = True ] \
  && ok "inspect: logits that exist off the peak are not called never stored" || fail "gpt2 logits why: $(jget inspect.json 'd["categories"]["logits"]')"
checks=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); bad = []
if not d["arena_bytes"] >= d["lower_bound_bytes"] > 0: bad.append("arena < lower bound")
if not d["naive_bytes"] >= d["arena_bytes"]: bad.append("naive < arena")
if sum(d["peak_breakdown"].values()) != d["lower_bound_bytes"]: bad.append("breakdown does not sum to the lower bound")
if set(d["peak_breakdown"]) != {"params", "base_model", "grads", "optimizer", "ref_model", "kv_cache", "activations", "logits", "workspace", "other"}: bad.append("categories")
t = d["largest_temp"]; n = 1
for x in t["shape"]: n *= x
if t["dtype"] != "f32" or n * 4 != t["bytes"]: bad.append("largest_temp bytes vs shape")
if [s["name"] for s in d["stages"]] != ["data", "train"] or d["stages"][1]["nodes"] != d["n_nodes"]: bad.append("stages")
if d["target"] != "cpu" or d["align"] != 64 or d["flops"] <= 0: bad.append("target, align or flops")
print("; ".join(bad))' inspect.json)
[ -z "$checks" ] && ok "inspect --json values are consistent" || fail "inspect --json: $checks"
checks=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); bad = []
cats = d["categories"]
if set(cats) != set(d["peak_breakdown"]): bad.append("categories and peak_breakdown name different categories")
for name, c in cats.items():
    if c["peak_bytes"] != d["peak_breakdown"][name]: bad.append(name + ": peak_bytes differs from peak_breakdown")
    if c["max_bytes"] < c["peak_bytes"]: bad.append(name + ": max_bytes below peak_bytes")
    if (c["peak_tensors"] > 0) != (c["largest_at_peak"] is not None) or (c["peak_tensors"] > 0) != (c["peak_bytes"] > 0): bad.append(name + ": tensors, bytes and largest disagree")
    if c["largest_at_peak"] and c["largest_at_peak"]["bytes"] > c["peak_bytes"]: bad.append(name + ": largest above the total")
    if not c["why"] or "\n" in c["why"]: bad.append(name + ": why")
    if c["max_bytes"] and c["max_stage"] not in [s["name"] for s in d["stages"]]: bad.append(name + ": max_stage")
if cats["params"]["max_bytes"] != cats["params"]["peak_bytes"]: bad.append("params are not live all step")
if "the trained weights" not in cats["params"]["why"]: bad.append("params why: " + cats["params"]["why"])
if max(s["peak_live_bytes"] for s in d["stages"]) != d["lower_bound_bytes"]: bad.append("stage peaks do not reach the lower bound")
if not all(s["bytes_moved"] > 0 for s in d["stages"] if s["kind"] == "graph"): bad.append("bytes_moved")
print("; ".join(bad))' inspect.json)
[ -z "$checks" ] && ok "inspect --json categories and stage bytes are consistent" || fail "inspect --json categories: $checks"
arena=$(human "$(jget inspect.json 'd["arena_bytes"]')")
run "$DFG" run gpt2.dfg --steps 1 --threads 1
expect_in out.txt "arena $arena," "run allocates the arena inspect reports ($arena)"
run "$DFG" inspect gpt2.dfg --bogus
expect_rc 2 "inspect with an unknown option"
run "$DFG" inspect nope.dfg
expect_rc 2 "inspect a missing plan"
expect_one_line "inspect of a missing plan"

# the options a plan was compiled with travel in the file
run "$DFG" compile "$SRC/examples/gpt2_train.c" --no-reuse -o naive.dfg
expect_rc 0 "compile --no-reuse"
run "$DFG" inspect naive.dfg --json
cp out.txt naive.json
[ "$(jget naive.json 'd["arena_bytes"] == d["naive_bytes"] == '"$(jget inspect.json 'd["naive_bytes"]')")" = True ] \
  && ok "a --no-reuse plan allocates the naive bytes" || fail "a --no-reuse plan: $(cat naive.json | head -c 300)"
run "$DFG" run naive.dfg --steps 1 --threads 1
expect_in out.txt "arena $(human "$(jget naive.json 'd["arena_bytes"]')")," "run uses the --no-reuse plan"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --align 3
expect_rc 2 "--align 3"
expect_in err.txt "power of two" "--align names the rule"

# plans of every older format version are refused with what to do
cur=$(sed -n 's/^#define DFG_PLAN_VERSION \([0-9]*\)u.*/\1/p' "$SRC/runtime/formats/planfile.h")
for v in $(seq 1 $((cur - 1))); do
  cp gpt2.dfg old.dfg
  printf "\\x$(printf %02x $v)" | dd of=old.dfg bs=1 seek=8 conv=notrunc status=none
  run "$DFG" inspect old.dfg
  expect_rc 2 "a version-$v plan"
  expect_in err.txt "format version $v is older than this dfg's ($cur)" "a version-$v plan is named as old"
  expect_in err.txt "re-run dfg compile" "a version-$v plan says to recompile"
  expect_one_line "version-$v plan"
done

# ---------------------------------------------------------------- dot
run "$DFG" dot gpt2.dfg -o mem.dot
expect_rc 0 "dot"
expect_in out.txt "wrote mem.dot" "dot reports the file"
expect_in mem.dot "digraph" "mem.dot is a Graphviz digraph"
expect_in mem.dot "cluster_persistent" "mem.dot clusters the persistent tensors"
expect_in mem.dot "PEAK" "mem.dot marks the peak"
expect_in mem.dot "wte.weight" "mem.dot names the parameters"
run "$DFG" dot gpt2.dfg --timeline -o timeline.dot
expect_rc 0 "dot --timeline"
expect_in timeline.dot "dfg_step_pt" "the timeline carries its scale"
expect_in timeline.dot "pos=" "the timeline pins positions"
run "$DFG" dot gpt2.dfg --svg -o view.dot
expect_rc 0 "dot --svg"
expect_in out.txt "wrote view.svg" "dot --svg reports the SVG"
[ -s view.dot ] && ok "dot --svg keeps the .dot" || fail "view.dot missing"
expect_in view.svg "<svg" "view.svg is an SVG"
run "$DFG" dot gpt2.dfg --timeline --svg -o tl.dot
expect_rc 0 "dot --timeline --svg"
expect_in tl.svg "<svg" "tl.svg is an SVG"
expect_in tl.svg "lower bound" "the timeline SVG shows the lower bound"
run "$DFG" dot gpt2.dfg --svg -o pic.svg
expect_rc 0 "dot --svg -o X.svg"
expect_in pic.svg "<svg" "-o X.svg --svg: X.svg is the SVG"
expect_in pic.dot "digraph" "... and X.dot the Graphviz source"
run "$DFG" dot gpt2.dfg -o /nonexistent-dir/mem.dot
expect_rc 1 "dot to a bad path"
expect_in err.txt "/nonexistent-dir/mem.dot: cannot write" "the bad path is named"
expect_one_line "dot to a bad path"
run "$DFG" dot gpt2.dfg -o - --svg
expect_rc 2 "dot --svg to stdout"
run "$DFG" dot nope.dfg
expect_rc 2 "dot of a missing plan"
run "$DFG" dot
expect_rc 2 "dot without a plan"
run "$DFG" dot gpt2.dfg -o -
expect_rc 0 "dot to stdout"
expect_in out.txt "digraph" "dot -o - writes the graph to stdout"

# ---------------------------------------------------------------- settings
run "$DFG" compile "$SRC/examples/gpt2_train.c" --set n_layer=1 -o l1.dfg
expect_rc 0 "--set n_layer=1"
expect_in out.txt "n_layer=1" "--set value is recorded"
run "$DFG" run l1.dfg --steps 2 --threads 1
expect_rc 0 "run the 1-layer plan"
# the 1-layer model has 12 fewer parameter tensors than the 2-layer one
p2=$("$DFG" info gpt2.dfg | awk '$1 == "param" { print $2 }')
p1=$("$DFG" info l1.dfg | awk '$1 == "param" { print $2 }')
[ "$p1" = 16 ] && [ "$p2" = 28 ] && ok "n_layer=1 gives 16 parameter tensors (2 layers: 28)" \
  || fail "parameter tensors: 1 layer '$p1', 2 layers '$p2'"

run "$DFG" compile "$SRC/examples/gpt2_train.c" --set bogus=1 -o bad.dfg
expect_rc 2 "--set bogus=1"
expect_in err.txt "'bogus'" "the unknown key is named"
expect_in err.txt "n_layer" "the valid keys are listed"
[ ! -e bad.dfg ] && ok "no plan written for a bad setting" || fail "bad.dfg was written"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --set n_layr=1 -o bad.dfg
expect_rc 2 "--set n_layr=1"
expect_in err.txt "did you mean 'n_layer'?" "a misspelt key gets a suggestion"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --set n_layer=two -o bad.dfg
expect_rc 2 "--set n_layer=two"
expect_in err.txt "setting 'n_layer': 'two' is not an integer" "a malformed number names key and value"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --set n_head=5
expect_rc 2 "--set n_head=5"
expect_in err.txt "n_head (5) must divide n_embd (64)" "the pipeline's own check is reported"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --set n_layer
expect_rc 2 "--set without a value"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --frobnicate
expect_rc 2 "unknown compile option"
expect_in err.txt "valid: --set, --config, --config-fields, --target" "unknown option names the valid ones"
run "$DFG" compile "$SRC/examples/gpt2_train.c" --target tpu
expect_rc 2 "unknown target"
expect_in err.txt "valid: cpu, cuda" "unknown target names the valid ones"
run "$DFG" run gpt2.dfg --steps many
expect_rc 2 "--steps many"
run "$DFG" run gpt2.dfg --bogus
expect_rc 2 "unknown run option"
expect_in err.txt "--weights" "unknown run option names the valid ones"

# ---------------------------------------------------------------- pipelines that do not build
printf '#include "dfg.h"\n\ndfg_status dfg_pipeline(dfg_program *p) {\n    return dfg_oops(p)\n}\n' >broken.c
run "$DFG" compile broken.c -o broken.dfg
expect_rc 2 "a pipeline with a C error"
expect_in err.txt "broken.c:4:" "the compiler's message names file and line"
expect_in err.txt "broken.c does not compile" "dfg says the pipeline does not compile"
printf '#include "dfg.h"\nint nothing_here(void) { return 0; }\n' >noentry.c
run "$DFG" compile noentry.c
expect_rc 2 "a pipeline without dfg_pipeline"
expect_in err.txt "does not define the entry point" "a missing entry point is named"
run "$DFG" compile missing.c
expect_rc 2 "a missing pipeline file"
expect_in err.txt "missing.c" "the missing file is named"

# ---------------------------------------------------------------- plan files that cannot be read
run "$DFG" run nope.dfg
expect_rc 2 "run a missing plan"
expect_in err.txt "nope.dfg: cannot open" "a missing plan is named"
expect_one_line "missing plan"
cp gpt2.dfg damaged.dfg
size=$(stat -c %s damaged.dfg)
printf '\xAA' | dd of=damaged.dfg bs=1 seek=$((size / 2)) conv=notrunc status=none
run "$DFG" run damaged.dfg
expect_rc 2 "run a damaged plan"
expect_in err.txt "damaged.dfg: checksum mismatch in section" "damage is reported as a checksum mismatch"
expect_one_line "damaged plan"
head -c $((size - 100)) gpt2.dfg >short.dfg
run "$DFG" info short.dfg
expect_rc 2 "a truncated plan"
expect_in err.txt "is truncated" "truncation is reported"
expect_one_line "truncated plan"
# every section damaged, and the file cut inside every part of it (tests/cli/plan_surgery.py)
SURGERY="$SRC/tests/cli/plan_surgery.py"
python3 "$SURGERY" sections gpt2.dfg >sections.txt
[ "$(wc -l <sections.txt)" -eq 8 ] && ok "gpt2.dfg has 8 sections (with hostlib, plan and declarations)" || fail "sections: $(cat sections.txt)"
while read -r kind name payload length; do
  python3 "$SURGERY" flip gpt2.dfg flip.dfg "$kind"
  run "$DFG" inspect flip.dfg
  [ "$rc" -eq 2 ] && grep -qF "flip.dfg: checksum mismatch in section '$name'" err.txt && [ "$(wc -l <err.txt)" -eq 1 ] \
    && ok "a damaged '$name' section is refused in one line" || fail "damaged section '$name' (exit $rc)"
  for cut in $((payload - 16)) $((payload - 9)) $((payload + length / 2)) $((payload + length - 1)); do
    python3 "$SURGERY" cut gpt2.dfg cut.dfg "$cut"
    run "$DFG" run cut.dfg --steps 1
    [ "$rc" -eq 2 ] && grep -q "cut.dfg: .*truncated" err.txt && [ "$(wc -l <err.txt)" -eq 1 ] \
      || fail "cut to $cut bytes (in or before section '$name'): exit $rc"
  done
  ok "cut before, inside the header of, and inside section '$name': refused as truncated"
done <sections.txt
for cut in 0 5 12; do
  python3 "$SURGERY" cut gpt2.dfg cut.dfg "$cut"
  run "$DFG" info cut.dfg
  [ "$rc" -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && ok "cut to $cut bytes: $(cat err.txt)" || fail "cut to $cut bytes"
done
# a recorded plan the loader checks on its own, and one this dfg does not reproduce
python3 "$SURGERY" overlap gpt2.dfg overlap.dfg
run "$DFG" run overlap.dfg --steps 1
expect_rc 2 "a plan whose live buffers overlap"
expect_in err.txt "section 'plan' is invalid" "the overlap is found in the plan section"
expect_in err.txt "are live together" "the overlap is named"
expect_one_line "overlapping plan"
python3 "$SURGERY" arena gpt2.dfg arena.dfg 4096
run "$DFG" run arena.dfg --steps 1
expect_rc 2 "a plan this dfg does not reproduce"
expect_in err.txt "plans the program differently" "a different plan is refused"
expect_in err.txt "re-run dfg compile" "the refusal says what to do"
expect_one_line "different plan"
cp "$SRC/examples/gpt2_train.c" notaplan.dfg
run "$DFG" run notaplan.dfg
expect_rc 2 "a file that is not a plan"
expect_in err.txt "notaplan.dfg: not a dfg plan file (bad magic)" "a foreign file is named as such"
expect_one_line "foreign file"

# ---------------------------------------------------------------- targets
run "$DFG" compile "$SRC/examples/gpt2_train.c" --target cuda -o gpu.dfg
expect_rc 0 "compile for cuda"
expect_in out.txt "target=cuda" "the target is recorded as a setting"
expect_in out.txt "plan for cuda: arena" "a cuda plan is made on a machine without a GPU"
run "$DFG" inspect gpu.dfg --json
expect_rc 0 "inspect a cuda plan"
cp out.txt gpu.json
[ "$(jget gpu.json 'd["target"] == "cuda" and d["align"] == 256 and d["arena_bytes"] >= d["lower_bound_bytes"] > 0')" = True ] \
  && ok "the cuda plan is planned with 256-byte alignment" || fail "cuda plan: $(head -c 300 gpu.json)"
run "$DFG" inspect gpu.dfg
expect_in out.txt "target cuda, alignment 256 B" "inspect names the cuda target"
run "$DFG" dot gpu.dfg --timeline -o gpu.dot
expect_rc 0 "dot of a cuda plan"
# what running it does depends on the build and the machine: each case says so in one line
run "$DFG" run gpu.dfg --steps 1
if grep -qE "has no libdfg-cuda.so|cannot load .*libdfg-cuda.so" err.txt; then
  expect_rc 2 "a build without nvcc, or a machine without the CUDA libraries, refuses a cuda plan"
  expect_one_line "no CUDA backend"
  expect_in err.txt "--emulate-gpu runs it on the CPU" "the refusal names --emulate-gpu"
elif grep -qF "no CUDA device here" err.txt; then
  expect_rc 1 "a CUDA build on a machine without a GPU cannot run a cuda plan"
  expect_one_line "no GPU"
  expect_in err.txt "--emulate-gpu runs the plan on the CPU" "the refusal names --emulate-gpu"
else
  expect_rc 0 "a cuda plan runs on this machine's GPU"
  expect_in out.txt "cuda backend on" "the run names the GPU"
fi

# ---------------------------------------------------------------- what a command maps (runtime/module.h)
# the executable links no CUDA, MPI or Graphviz library; a cpu run opens none of them nor any of
# dfg's modules; --emulate-gpu opens the emulated CUDA backend (no CUDA library), dfg dot the
# Graphviz module. LD_DEBUG=files lists every object the dynamic linker maps, dlopen's included.
maps_of() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -oE "file=[^ ]+" | sed 's/file=//; s/.*\///' | sort -u | tr '\n' ' '; }
GPU_LIBS="libcuda|libcudart|libcublas|libcudnn|libnccl|libmpi|libopen-rte|libcgraph|libgvc"
if ldd "$DFG" | grep -qE "$GPU_LIBS"; then fail "the dfg executable links: $(ldd "$DFG" | grep -E "$GPU_LIBS" | tr '\n' ' ')"
else ok "the dfg executable links no CUDA, MPI or Graphviz library"; fi
maps=$(maps_of "$DFG" run gpt2.dfg --steps 2 --threads 1)
if echo "$maps" | grep -qE "$GPU_LIBS|libdfg-"; then fail "a cpu run maps: $maps"
else ok "a cpu run maps no CUDA, MPI or Graphviz library and no dfg module ($maps)"; fi
maps=$(maps_of "$DFG" dot gpt2.dfg -o maps.dot)
echo "$maps" | grep -q "libdfg-dot.so" && echo "$maps" | grep -q "libcgraph" && ! echo "$maps" | grep -qE "libcudart|libmpi" \
  && ok "dfg dot opens the Graphviz module, and nothing of CUDA or MPI" || fail "dfg dot maps: $maps"
if [ -e "$(dirname "$DFG")/libdfg-cuda-emu.so" ]; then
  maps=$(maps_of "$DFG" run gpu.dfg --steps 1 --emulate-gpu)
  echo "$maps" | grep -q "libdfg-cuda-emu.so" && ! echo "$maps" | grep -qE "libcudart|libcublas|libcudnn|libnccl" \
    && ok "--emulate-gpu opens the emulated backend's module and no CUDA library" || fail "--emulate-gpu maps: $maps"
fi
# a module that is not there: one line naming it and where it was looked for
DFG_MODULE_DIR=$PWD/nomodules run "$DFG" dot gpt2.dfg -o nomod.dot
expect_rc 1 "dfg dot without its module"
expect_one_line "a missing module"
expect_in err.txt "this dfg has no libdfg-dot.so (not in $PWD/nomodules (\$DFG_MODULE_DIR))" "... names the module and where it looked"
DFG_MODULE_DIR=$PWD/nomodules run "$DFG" run gpu.dfg --steps 1 --emulate-gpu
expect_rc 1 "--emulate-gpu without the emulator's module"
expect_in err.txt "no GPU emulator: this dfg has no libdfg-cuda-emu.so" "... names the module"
DFG_MODULE_DIR=$PWD/nomodules run "$DFG" run gpt2.dfg --steps 1 --threads 1
expect_rc 0 "a cpu run needs no module"

# ---------------------------------------------------------------- memory budget and fusion: GPT-2 124M for cuda
# Planned only (it compiles in about a second; running it needs a GPU). The budget is the
# persistent bytes plus half the activations live at the unbudgeted plan's peak.
G124="$SRC/examples/gpt2_124m.c"
run "$DFG" compile "$G124" --target cuda -o g124.dfg
expect_rc 0 "compile gpt2_124m for cuda"
expect_in out.txt "fused: " "compile reports the fused ops"
run "$DFG" inspect g124.dfg --json
cp out.txt g124.json
budget=$(jget g124.json 'd["persistent_bytes"] + d["peak_breakdown"]["activations"] // 2')
[ "$(jget g124.json 'd["categories"]["logits"]["peak_bytes"] == 0 and "never stored" in d["categories"]["logits"]["why"]')" = True ] \
  && ok "124M: inspect says why no logits are live (fused linear_logprob)" || fail "124M logits why: $(jget g124.json 'd["categories"]["logits"]')"
run "$DFG" compile "$G124" --target cuda --memory-budget "$budget" -o g124b.dfg
expect_rc 0 "compile gpt2_124m under --memory-budget $budget (persistent + half the activations)"
expect_in out.txt "memory budget" "compile reports the budget"
expect_in out.txt "recomputed: " "compile reports the recomputed nodes"
run "$DFG" inspect g124b.dfg --json
cp out.txt g124b.json
checks=$(python3 -c '
import json, sys
d0 = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2])); budget = int(sys.argv[3]); bad = []
logits = 8 * 174 * 50257 * 2  # (N, T, V) bf16: what linear_logprob never materialises
for k in ["fused", "remat", "memory_budget", "no_fuse"]:
    if k not in d: bad.append("no key " + k)
if bad: print("; ".join(bad)); sys.exit()
if d0["memory_budget"] is not None or d0["remat"]["recomputed_nodes"] != 0 or d0["remat"]["extra_flops"] != 0: bad.append("unbudgeted plan recomputes")
if d["memory_budget"] != budget: bad.append("memory_budget %s, compiled with %d" % (d["memory_budget"], budget))
if not d["arena_bytes"] <= budget < d0["arena_bytes"]: bad.append("arena %d vs budget %d (unbudgeted %d)" % (d["arena_bytes"], budget, d0["arena_bytes"]))
r = d["remat"]
if not (r["recomputed_nodes"] > 0 and 0 < r["extra_flops"] <= 0.05 * d["flops"]): bad.append("remat %s of flops %g" % (r, d["flops"]))
if d["flops"] != d0["flops"]: bad.append("flops %g changed from %g: it must exclude recompute" % (d["flops"], d0["flops"]))
if abs(sum(s["flops"] for s in d["stages"]) - d["flops"]) > 1e-9 * d["flops"]: bad.append("stage flops do not sum to flops")
for x in (d0, d):
    t = x["largest_temp"]
    if t["bytes"] > 0.6 * logits or (174 in t["shape"] and 50257 in t["shape"]): bad.append("largest temp %s" % t)
    if x["peak_breakdown"]["logits"] != 0: bad.append("logits at the peak: %d" % x["peak_breakdown"]["logits"])
if set(d["fused"]) != {"logprob", "linear_logprob", "bias_gelu"} or d["fused"]["linear_logprob"] < 1 or d["fused"]["bias_gelu"] < 12: bad.append("fused %s" % d["fused"])
if d["no_fuse"] is not False: bad.append("no_fuse")
print("; ".join(bad))' g124.json g124b.json "$budget")
[ -z "$checks" ] && ok "the budgeted plan fits, recomputes <= 5% extra flops, no logits at the peak" || fail "budgeted 124M plan: $checks"
# batch-invariant kernels exist for both backends (ops/cpu/invariant.c, ops/cuda/invariant.cu)
run "$DFG" compile "$SRC/examples/grpo/grpo.c" --target cuda --set batch_invariant=true -o bi_cuda.dfg
expect_rc 0 "batch_invariant=true with --target cuda compiles"
run "$DFG" compile "$SRC/examples/grpo/grpo.c" --set batch_invariant=true -o bi.dfg
run "$DFG" info bi.dfg
expect_in out.txt "numerics  batch-invariant" "dfg info says a plan is batch-invariant"
run "$DFG" inspect bi.dfg
expect_in out.txt "batch-invariant kernels" "dfg inspect says so too"
run "$DFG" inspect bi.dfg --json
[ "$(jget out.txt 'd["batch_invariant"]')" = True ] && ok "inspect --json: batch_invariant true" || fail "inspect --json batch_invariant"

# a budget that only cheap copies need, on GRPO at 4 layers x 256 wide (128 positions): 4% under
# the unbudgeted arena. Redoing concats, GELU outputs (read in the backward only through a
# reshape) and norms is enough; a remat that saw none of them recomputed matmuls (+2.3% flops).
# The plan trains the batch in one pass at full width: with its default length chunks the
# training peak is small and the peak is prefill's KV cache, which nothing recomputes
SMALL="--set n_layer=4 --set n_embd=256 --set n_head=4 --set vocab_size=512 --set n_positions=128 --set digits=62
       --set length_chunks=1 --set length_buckets=1"
run "$DFG" compile "$SRC/examples/grpo/grpo.c" $SMALL -o small.dfg
run "$DFG" inspect small.dfg --json
budget2=$(jget out.txt 'd["arena_bytes"] * 24 // 25')
run "$DFG" compile "$SRC/examples/grpo/grpo.c" $SMALL --memory-budget "$budget2" -o small_b.dfg
expect_rc 0 "compile GRPO small 4% under its unbudgeted arena"
run "$DFG" inspect small_b.dfg --json
[ "$(jget out.txt 'd["arena_bytes"] <= '"$budget2"' and d["remat"]["recomputed_nodes"] > 0 and d["remat"]["extra_flops"] <= 0.005 * d["flops"]')" = True ] \
  && ok "remat finds the cheap copies first: $(jget out.txt '"%d recomputed, +%.2f%% flops" % (d["remat"]["recomputed_nodes"], 100 * d["remat"]["extra_flops"] / d["flops"])')" \
  || fail "cheap remat: $(jget out.txt 'd["remat"]') of $(jget out.txt 'd["flops"]') flops"
echo "  (124M: $(jget g124b.json '"arena %.1f MiB under %.1f MiB (unbudgeted %.1f MiB), %d recomputed, extra flops %.2f%%" % (d["arena_bytes"] / 2**20, d["memory_budget"] / 2**20, '"$(jget g124.json 'd["arena_bytes"]')"' / 2**20, d["remat"]["recomputed_nodes"], 100 * d["remat"]["extra_flops"] / d["flops"])'))"
run "$DFG" inspect g124b.dfg
expect_in out.txt "budget        " "inspect shows the budget"
expect_in out.txt "under it" "inspect shows the arena's margin under the budget"
expect_in out.txt "fused         $(jget g124b.json 'd["fused"]["linear_logprob"]') linear_logprob" "inspect lists the fused ops by kind"
expect_in out.txt "recomputed    $(jget g124b.json 'd["remat"]["recomputed_nodes"]') nodes, +" "inspect shows the recomputed nodes and extra flops"
run "$DFG" inspect g124.dfg
expect_in out.txt "recomputed    no budget" "an unbudgeted plan says it has no budget"
run "$DFG" info g124b.dfg
expect_in out.txt "memory budget $(human "$budget")" "info shows the recorded budget"
run "$DFG" dot g124b.dfg -o g124b.dot
expect_rc 0 "dot of the budgeted plan"
expect_in g124b.dot "[recomputed]" "dot tags recomputed copies"
expect_in g124b.dot "[fused]" "dot tags fused ops"
expect_in g124b.dot "peripheries=2" "fused ops have a double border"
expect_in g124b.dot "filled,dashed" "recomputed copies have a dashed border"
run "$DFG" dot g124b.dfg --timeline -o g124bt.dot
expect_in g124bt.dot "dfg_recomputed" "the timeline marks buffers of recomputed copies"

# a budget nothing reaches fails with remat's message, and no plan file appears or is replaced
run "$DFG" compile "$G124" --target cuda --memory-budget 1GiB -o toosmall.dfg
expect_rc 2 "a budget of 1GiB (below the persistent bytes)"
expect_in err.txt "does not fit; the smallest plan found needs" "the message states the smallest budget found"
expect_in err.txt "at its peak: optimizer" "the message names what dominates it"
expect_one_line "too small a budget"
[ ! -e toosmall.dfg ] && ok "no plan written for a budget that does not fit" || fail "toosmall.dfg was written"
cp g124b.dfg keep.dfg
run "$DFG" compile "$G124" --target cuda --memory-budget 1GiB -o keep.dfg
cmp -s keep.dfg g124b.dfg && ok "a failed budget leaves an existing plan file alone" || fail "keep.dfg was changed"
run "$DFG" compile "$G124" --target cuda --memory-budget 12XB -o bad.dfg
expect_rc 2 "--memory-budget 12XB"
expect_in err.txt "such as 6GiB, 512MiB" "a bad budget names the accepted forms"
expect_in err.txt "'12XB'" "a bad budget is quoted"
expect_one_line "bad budget"

# --no-fuse: nothing fused, and without linear_logprob the plan needs more bytes
run "$DFG" compile "$G124" --target cuda --no-fuse -o g124nf.dfg
expect_rc 0 "compile gpt2_124m --no-fuse"
run "$DFG" inspect g124nf.dfg --json
cp out.txt g124nf.json
[ "$(jget g124nf.json 'd["no_fuse"] and sum(d["fused"].values()) == 0 and d["arena_bytes"] > '"$(jget g124.json 'd["arena_bytes"]')")" = True ] \
  && ok "--no-fuse: fused counts 0, arena $(human "$(jget g124nf.json 'd["arena_bytes"]')") > $(human "$(jget g124.json 'd["arena_bytes"]')")" \
  || fail "--no-fuse: $(jget g124nf.json '(d["no_fuse"], d["fused"], d["arena_bytes"])')"
run "$DFG" inspect g124nf.dfg
expect_in out.txt "no fusion" "inspect says the plan was compiled without fusion"

# ---------------------------------------------------------------- weights: --save, then --weights
run "$DFG" run gpt2.dfg --steps 3 --threads 1 --save w1.safetensors
expect_rc 0 "run 3 steps and --save"
[ -s w1.safetensors ] && ok "w1.safetensors written" || fail "w1.safetensors missing"
run "$DFG" run gpt2.dfg --steps 0 --weights w1.safetensors --save w2.safetensors
expect_rc 0 "--weights then --save"
expect_in out.txt "loaded 28 tensors from w1.safetensors" "every parameter is loaded"
# the tensor bytes after the JSON header must be identical (the header's metadata records the step)
data_of() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1"; }
cmp -s <(data_of w1.safetensors) <(data_of w2.safetensors) && [ "$(stat -c %s w1.safetensors)" = "$(stat -c %s w2.safetensors)" ] \
  && ok "loaded weights save back byte for byte" || fail "the tensor data of w2 differs from w1"
run "$DFG" run gpt2.dfg --steps 1 --threads 1
fresh=$(loss_at 1)
run "$DFG" run gpt2.dfg --steps 1 --threads 1 --weights w1.safetensors
trained=$(loss_at 1)
if lt "$trained" "$fresh"; then ok "trained weights lower step-1 loss ($fresh -> $trained)"; else fail "with trained weights the loss is $trained, fresh $fresh"; fi
run "$DFG" run l1.dfg --steps 0 --weights w1.safetensors
expect_rc 2 "weights of another model are refused"
expect_one_line "mismatched weights"
run "$DFG" run gpt2.dfg --weights missing.safetensors
expect_rc 2 "missing weights file"

# ---------------------------------------------------------------- run: metrics, checkpoints (more in grpo_cli_test.sh)
run "$DFG" run gpt2.dfg --steps 2 --threads 1 --metrics m.jsonl
expect_rc 0 "--metrics"
if grep -q "tok/s" out.txt; then fail "gpt2_train has no completion mask: no tok/s"; else ok "no tok/s without a completion mask"; fi
python3 -c '
import json
rows = [json.loads(l) for l in open("m.jsonl")]
assert [r["step"] for r in rows] == [1, 2] and all(r["tokens_per_s"] is None and r["loss"] > 0 for r in rows), rows
' && ok "--metrics: a JSON line per step, tokens_per_s null" || fail "--metrics lines of gpt2_train"
run "$DFG" run gpt2.dfg --steps 2 --threads 1 --checkpoint-dir ck/nested
expect_rc 0 "--checkpoint-dir creates the directory"
expect_in out.txt "checkpoint: step 2 saved to ck/nested/checkpoint.safetensors" "the final checkpoint is announced"
run "$DFG" run gpt2.dfg --resume ck/nested/checkpoint.safetensors --steps 0
expect_rc 0 "--resume takes a checkpoint file too"
expect_in out.txt "resumed from ck/nested/checkpoint.safetensors: step 2" "it continues at step 2"
run "$DFG" run gpt2.dfg --resume w1.safetensors
expect_rc 2 "--resume of a parameters-only file"
expect_one_line "not a checkpoint"
run "$DFG" run gpt2.dfg --dump d.safetensors --steps 0
expect_rc 2 "--dump with --steps 0"

echo
if [ "$failures" -eq 0 ]; then echo "cli_test: all checks passed"; exit 0; fi
echo "cli_test: $failures check(s) failed"
exit 1
