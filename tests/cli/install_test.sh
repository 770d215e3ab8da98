#!/usr/bin/env bash
# install_test.sh - an installed dfg needs no source tree (ctest "install", label "c"): `cmake
# --install` into a prefix, the prefix moved elsewhere, and from there dfg compiles the installed
# GRPO example against <prefix>/include/dfg and <prefix>/lib/dfg, runs it, and finds its modules.
#   usage: install_test.sh /path/to/build-dir
set -u
BUILD=$1
. "$(dirname "$0")/testlib.sh"
testlib_begin install-test

run cmake --install "$BUILD" --prefix "$WORK/p"
expect_rc 0 "cmake --install"
mv "$WORK/p" "$WORK/moved" # nothing may point back at where it was installed, or at the build
D="$WORK/moved/bin/dfg"
for f in include/dfg/dfg.h include/dfg/dfg_grpo_config.h lib/dfg/libdfg_grpo.a lib/dfg/libdfg_tasks.a \
         share/dfg/examples/grpo/grpo.c; do
  if [ -f "$WORK/moved/$f" ]; then ok "installed $f"; else fail "installed $f"; fi
done
run "$D" compile --help
expect_in out.txt "headers come from $WORK/moved/bin/../include/dfg" "the installed dfg compiles against its own headers"
run "$D" compile "$WORK/moved/share/dfg/examples/grpo/grpo.c" --set prompts_per_step=2 --set num_generations=2 -o g.dfg
expect_rc 0 "the installed dfg compiles the installed GRPO example"
run "$D" run g.dfg --steps 2 --threads 1
expect_rc 0 "... and runs it"
expect_in out.txt "2 steps in" "two steps ran"
run "$D" info
if grep -q "libdfg-cuda-emu.so" "$BUILD/CMakeCache.txt" 2>/dev/null || [ -f "$BUILD/libdfg-cuda-emu.so" ]; then
  expect_in out.txt "cuda-emu  ready" "the installed dfg finds its emulator module in lib/dfg"
fi
testlib_end
