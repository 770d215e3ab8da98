#!/usr/bin/env bash
# test_exports.sh - libdfg.so exports the public API and nothing else: every exported symbol
# starts with dfg_, and the exported set equals the functions declared with DFG_API in the public
# headers (dfg_pipeline aside: pipelines define it); a new public header dfg_<x>.h is checked
# without being listed here. The engine is compiled with hidden visibility
# (CMakeLists.txt), so a missing DFG_API (a public function whose definition does not see its
# declaration) and a leaked internal both fail here, by name.
# Usage: test_exports.sh LIBDFG_SO SOURCE_DIR
set -euo pipefail
lib="$1"
src="$2"
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBVW]$/ {print $3}' | sort -u)
# the public headers: every dfg*.h of the layers' directories (docs/ARCHITECTURE.md), and planfile.h
declared=$(cd "$src" && grep -ho '^DFG_API[^;]*' graph/dfg*.h ops/dfg*.h ops/nn/dfg*.h passes/dfg*.h runtime/dfg*.h \
           runtime/formats/dfg*.h runtime/formats/planfile.h runtime/weights/dfg*.h runtime/host/dfg*.h | grep -o 'dfg_[a-z0-9_]*(' | head -100000 | tr -d '(' |
           grep -v '^dfg_pipeline$' | sort -u)
fail=0
foreign=$(grep -v '^dfg_' <<<"$exported" || true)
if [ -n "$foreign" ]; then
  echo "test_exports: libdfg.so exports symbols without the dfg_ prefix:"; echo "$foreign" | sed 's/^/  /'; fail=1
fi
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
if [ -n "$extra" ]; then
  echo "test_exports: libdfg.so exports internals (no DFG_API declaration):"; echo "$extra" | sed 's/^/  /'; fail=1
fi
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "test_exports: public functions libdfg.so does not export (their definition does not see the DFG_API declaration):"
  echo "$missing" | sed 's/^/  /'; fail=1
fi
echo "test_exports: $(wc -l <<<"$exported") symbols exported, $(wc -l <<<"$declared") declared DFG_API"
exit $fail
