#!/usr/bin/env python3
"""test_settings_table.py - the settings table (graph/settings.def) is the one place a setting is
described and parsed:
  1. docs/cli.md's settings section is exactly `dfg info --settings --markdown`;
  2. no code outside graph/ parses a setting's text: `dfg_program_setting(` (the raw text) is called
     only where the allowlist below says why, and no typed key (bool, int, float) is read as text
     with dfg_program_str or dfg_setting_str;
  3. examples/grpo/grpo.c records the table's default for every key it reads and does not set (GPT-2,
     Llama and LoRA settings alike), so the table's documentation is what a plan gets;
  4. model_type's values are the architecture table's model_types (ops/nn/arch.def), in its order:
     graph/ may not include ops/ (tests/test_layers.py), so settings.def repeats them, and this
     keeps the two lists from drifting apart.
usage: test_settings_table.py SOURCE_DIR DFG"""
import os
import re
import subprocess
import sys
import tempfile

SRC, DFG = sys.argv[1], sys.argv[2]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL - " + msg)


def table():
    """{key: (type, default or None)} from settings.def."""
    rows = {}
    text = open(os.path.join(SRC, "graph/settings.def")).read()
    for m in re.finditer(r'^DFG_SETTING\((\w+),\s*(\w+),\s*(NULL|"[^"]*")', text, re.M):
        rows[m.group(1)] = (m.group(2), None if m.group(3) == "NULL" else m.group(3)[1:-1])
    return rows


def check_doc():
    out = subprocess.run([DFG, "info", "--settings", "--markdown"], capture_output=True, text=True, check=True).stdout
    doc = open(os.path.join(SRC, "docs/cli.md")).read()
    begin, end = "<!-- settings: begin -->\n", "<!-- settings: end -->"
    if begin not in doc or end not in doc:
        return fail("docs/cli.md has no settings section between %r and %r" % (begin, end))
    section = doc[doc.index(begin) + len(begin):doc.index(end)]
    if section.strip() != out.strip():
        return fail("docs/cli.md's settings section differs from `dfg info --settings --markdown`: "
                    "paste that output between the markers")
    print("ok - docs/cli.md's settings section is the table")


# Where the raw text of a setting may be read, and why (none of them parses it).
RAW_TEXT_ALLOWED = {
    "runtime/formats/planfile_build.c": "rebuilding a plan: a key given twice is refused",
}


def check_readers(rows):
    typed = {k for k, (t, _) in rows.items() if t in ("BOOL", "INT", "FLOAT")}
    ok = True
    for top in ("graph", "ops", "passes", "runtime", "tools", "examples"):
        for dirpath, _, files in os.walk(os.path.join(SRC, top)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, SRC)
                if rel.startswith("graph/settings") or rel == "graph/dfg_graph.h":
                    continue
                for n, line in enumerate(open(path, errors="replace"), 1):
                    if "dfg_program_setting(" in line and rel not in RAW_TEXT_ALLOWED:
                        ok = False
                        fail("%s:%d reads a setting's raw text (use a typed read: dfg_program_bool/int/float/str): %s"
                             % (rel, n, line.strip()))
                    for m in re.finditer(r'dfg_(?:program|setting)_str\([^,]+,\s*"(\w+)"', line):
                        if m.group(1) in typed:
                            ok = False
                            fail("%s:%d reads the %s setting '%s' as text" % (rel, n, rows[m.group(1)][0].lower(), m.group(1)))
                    if "dfg_program_setting(" in line and re.search(r"\b(strto\w+|ato[if]|sscanf)\(", line):
                        ok = False
                        fail("%s:%d parses a setting's text: %s" % (rel, n, line.strip()))
    if ok:
        print("ok - no setting's text is parsed outside graph/settings*.c")


def recorded_settings(extra):
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([DFG, "compile", os.path.join(SRC, "examples/grpo/grpo.c"), "-o", os.path.join(d, "p.dfg")] + extra,
                           capture_output=True, text=True)
    if r.returncode:
        fail("compile %s: %s" % (" ".join(extra), r.stderr.strip()))
        return {}
    line = next((l for l in r.stdout.splitlines() if l.startswith("settings: ")), "")
    return dict(kv.split("=", 1) for kv in line[len("settings: "):].split())


def check_defaults(rows):
    cases = [[], ["--set", "model_type=llama"], ["--set", "model_type=qwen3", "--set", "lora_r=8"]]
    checked = 0
    for extra in cases:
        given = {extra[i + 1].split("=")[0] for i in range(0, len(extra), 2)}
        for key, value in recorded_settings(extra).items():
            if key not in rows:
                fail("examples/grpo/grpo.c reads '%s', which the settings table lacks" % key)
            elif key not in given and rows[key][1] is not None and value != rows[key][1]:
                fail("examples/grpo/grpo.c (%s) records %s=%s, the table's default is '%s'" % (" ".join(extra) or "defaults", key,
                                                                                           value, rows[key][1]))
            else:
                checked += 1
    if checked > 100:
        print("ok - examples/grpo/grpo.c records the table's defaults (%d readings)" % checked)
    else:
        fail("only %d settings were compared" % checked)


def check_arch_names(rows):
    """settings.def's model_type values (each value's first spelling) = arch.def's model_types."""
    text = open(os.path.join(SRC, "graph/settings.def")).read()
    m = re.search(r'^DFG_SETTING\(model_type,\s*ENUM,\s*"([^"]*)",[^"]*"([^"]*)"', text, re.M)
    arch = open(os.path.join(SRC, "ops/nn/arch.def")).read()
    types = re.findall(r'^DFG_ARCH\(\w+,\s*"([^"]+)"', arch, re.M)
    if not m or not types:
        return fail("no model_type row in graph/settings.def or no DFG_ARCH row in ops/nn/arch.def")
    values = [v.split(",")[0] for v in m.group(2).split("|")]
    if values != types:
        return fail("graph/settings.def's model_type values %s are not ops/nn/arch.def's model_types %s: "
                    "make the row's values '%s'" % ("|".join(values), "|".join(types), "|".join(types)))
    if m.group(1) not in types:
        return fail("model_type's default '%s' is no architecture of ops/nn/arch.def" % m.group(1))
    print("ok - model_type's values are ops/nn/arch.def's architectures (%s)" % "|".join(types))


rows = table()
if len(rows) < 60:
    fail("read only %d rows of graph/settings.def" % len(rows))
check_doc()
check_readers(rows)
check_defaults(rows)
check_arch_names(rows)
print("test_settings_table: %s" % ("%d check(s) failed" % len(failures) if failures else "all checks passed"))
sys.exit(1 if failures else 0)
