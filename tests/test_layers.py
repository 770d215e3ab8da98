#!/usr/bin/env python3
"""test_layers.py - the include graph of the source tree against the layers of
docs/ARCHITECTURE.md: every #include "..." of every C, CUDA and header file is resolved the way
the compiler resolves it (the including file's directory, then the include path the build gives)
and must point to the file's own layer or a layer below it. The link checks of the build
(dfg_layer_check_<layer>, linked with --no-undefined) catch calls; this catches includes,
including those of headers that are only included (static inline code, macros, types).

A pipeline or an application sees only the public headers (dfg*.h): examples/ and the public
headers themselves may include nothing else of dfg.

Usage: test_layers.py SOURCE_DIR      exit 0: clean; 1: each wrong-way include printed, one a line
"""
import os
import re
import sys

# layer -> the layers it may include (itself included)
ALLOWED = {
    "graph": {"graph"},
    "ops": {"graph", "ops"},
    "ops/cpu": {"graph", "ops", "ops/cpu"},
    # the kernels compile against the CUDA headers, which the SIMT emulator stands in for (a library
    # of nothing of dfg, the emulated device's: runtime/cuda/emu/simt)
    "ops/cuda": {"graph", "ops", "ops/cuda", "runtime/cuda/emu/simt"},
    "runtime/cuda/emu/simt": {"runtime/cuda/emu/simt"},
    "ops/nn": {"graph", "ops", "ops/nn"},
    "passes": {"graph", "ops", "ops/nn", "passes"},
    # the file formats: plan files, safetensors, Hugging Face directories, line-numbered errors
    "runtime/formats": {"graph", "ops", "ops/nn", "passes", "runtime/formats"},
    # the executor and its backends; the emulated device (runtime/cuda/emu/device_emu.c) drives the
    # emulator's stream capture. No file format: those are runtime/formats' and runtime/weights'
    "runtime": {"graph", "ops", "ops/cpu", "ops/cuda", "runtime/cuda/emu/simt", "ops/nn", "passes", "runtime"},
    # weights and checkpoints in and out of a runtime (Hugging Face, PEFT, bitsandbytes), through
    # the runtime's public calls: its public header, never runtime_internal.h (see below)
    "runtime/weights": {"graph", "ops", "ops/nn", "passes", "runtime/formats", "runtime/public", "runtime/weights"},
    # services of host stages: prompt datasets, reward programs and plugins
    "runtime/host": {"graph", "ops", "ops/nn", "passes", "runtime/formats", "runtime", "runtime/weights", "runtime/host"},
    "tools/dot": {"graph", "ops", "ops/nn", "passes", "runtime/formats", "runtime", "tools/dot"},
    "tools": {"graph", "ops", "ops/cpu", "ops/cuda", "runtime/cuda/emu/simt", "ops/nn", "passes", "runtime/formats", "runtime",
              "runtime/weights", "runtime/host", "tools", "tools/dot", "examples/tasks", "examples/grpo"},
    # the example tasks and rewards; the GRPO pipeline's room, on the tasks
    "examples/tasks": {"public", "examples/tasks"},
    "examples/grpo": {"public", "examples/tasks", "examples/grpo"},
    "examples": {"public", "examples/tasks", "examples/grpo"},
}
# the directories on the include path of the engine's targets (CMakeLists.txt DFG_PUBLIC_DIRS)
INCLUDE_PATH = ["graph", "ops", "ops/nn", "passes", "runtime/formats", "runtime", "runtime/weights", "runtime/host",
                "examples/tasks", "examples/grpo",
                "ops/cuda", "runtime/cuda/emu"]
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a file (a path relative to the source root), or None when it is in none."""
    d = os.path.dirname(rel)
    best = None
    for layer in ALLOWED:
        if d == layer or d.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    if d in ("runtime/cpu", "runtime/cuda", "runtime/cuda/emu"):
        return "runtime"
    return best


def is_public(rel):
    return (os.path.basename(rel).startswith("dfg") or rel == "runtime/formats/planfile.h") and rel.endswith(".h") and \
        layer_of(rel) in ("graph", "ops", "ops/nn", "passes", "runtime/formats", "runtime", "runtime/weights", "runtime/host")


def resolve(root, rel, name):
    """The file an #include "name" in rel means, relative to root, or None (a system header)."""
    for base in [os.path.dirname(rel)] + INCLUDE_PATH:
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def include_cycles(root, files):
    """The circles of headers that include each other (each once, as a list), found with
    Tarjan's strongly connected components over the resolved includes of every header."""
    graph = {}
    for rel in files:
        if not rel.endswith((".h", ".cuh")):
            continue
        with open(os.path.join(root, rel), errors="replace") as f:
            targets = [resolve(root, rel, m.group(1)) for m in map(INCLUDE_RE.match, f) if m]
        graph[rel] = [t for t in targets if t and t.endswith((".h", ".cuh"))]
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = []
    for top in ("graph", "ops", "passes", "runtime", "tools", "examples"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(SOURCE_EXT) or n.endswith(".def"):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    bad = []
    checked = 0
    for rel in sorted(files):
        src_layer = layer_of(rel)
        if src_layer is None or "/bench/" in rel:
            continue
        public = is_public(rel)
        with open(os.path.join(root, rel), errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                if target is None:
                    continue
                checked += 1
                t_layer = layer_of(target)
                if target.endswith(".def") and t_layer == src_layer:
                    continue
                allowed = ALLOWED[src_layer]
                if public or "public" in allowed:
                    ok = is_public(target) or t_layer in allowed - {"public"} or (public and t_layer == src_layer
                                                                                  and target.endswith(".h") and
                                                                                  is_public(target))
                    if public and not is_public(target):
                        ok = False
                elif "runtime/public" in allowed and t_layer == "runtime":
                    ok = is_public(target)  # a room above the runtime built on its public calls alone
                else:
                    ok = t_layer in allowed
                if not ok:
                    kind = "a public header" if public else "layer '%s'" % src_layer
                    bad.append("%s:%d: %s includes %s (layer '%s'), which it may not (docs/ARCHITECTURE.md)" %
                               (rel, lineno, kind, target, t_layer))
    cycles = include_cycles(root, files)
    for c in cycles:
        bad.append("include circle: %s" % " -> ".join(c + [c[0]]))
    for b in bad:
        print(b)
    print("test_layers: %d includes in %d files checked, %d going the wrong way or in a circle" %
          (checked, len(files), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
