#!/usr/bin/env bash
# plan_determinism.sh - plan files are a function of the pipeline and its settings alone: the GRPO
# and GPT-2 pipelines written twice, and by engines compiled with -ftrivial-auto-var-init=pattern
# and =zero (every uninitialised stack byte 0xFE.. in one, 0 in the other), give byte-identical
# files; so do two `dfg compile` runs of the same pipeline (embedded host code included). The file
# gets dfg's one file mode (runtime/formats/fileio.h: 0644 less the umask).
# Usage: plan_determinism.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0
same() { # A B what
  if cmp -s "$1" "$2"; then echo "  same bytes: $3"; else echo "plan_determinism: $3: the files differ"; cmp "$1" "$2" | head -3; fail=1; fi
}
for variant in "grpo:$build/tests/grpo_pipeline.so:cpu:beta=0.04 num_iterations=2" \
               "grpo-cuda:$build/tests/grpo_pipeline.so:cuda:gradient_accumulation_steps=2" \
               "gpt2:$build/tests/gpt2_train_pipeline.so:cpu:"; do
  IFS=: read -r name so target sets <<<"$variant"
  # shellcheck disable=SC2086
  "$build/tests/plan_writer" "$so" "$work/$name.1.dfg" "$target" $sets
  # shellcheck disable=SC2086
  "$build/tests/plan_writer" "$so" "$work/$name.2.dfg" "$target" $sets
  # shellcheck disable=SC2086
  "$build/tests/plan_writer_pattern" "$so" "$work/$name.pattern.dfg" "$target" $sets
  # shellcheck disable=SC2086
  "$build/tests/plan_writer_zero" "$so" "$work/$name.zero.dfg" "$target" $sets
  same "$work/$name.1.dfg" "$work/$name.2.dfg" "$name ($(stat -c %s "$work/$name.1.dfg") bytes), written twice"
  same "$work/$name.1.dfg" "$work/$name.pattern.dfg" "$name, by an engine built with -ftrivial-auto-var-init=pattern"
  same "$work/$name.pattern.dfg" "$work/$name.zero.dfg" "$name, pattern vs zero"
done
(cd "$work" && "$build/dfg" compile "$src/examples/grpo/grpo.c" -o a.dfg >/dev/null && sleep 1 &&
 "$build/dfg" compile "$src/examples/grpo/grpo.c" -o b.dfg >/dev/null)
same "$work/a.dfg" "$work/b.dfg" "dfg compile examples/grpo/grpo.c twice, a second apart (with its host code)"
# the plan is written by fileio.c's one writer: dfg's one file mode, 0644 less the umask (as a
# shell's redirection gives), and nothing left beside it
(cd "$work" && umask 027 && "$build/dfg" compile "$src/examples/grpo/grpo.c" -o m.dfg >/dev/null)
mode=$(stat -c %a "$work/m.dfg")
left=$(find "$work" -name '.m.dfg.*' -o -name 'm.dfg.*' | grep -v 'm\.dfg\.json$' || true)
if [ "$mode" = 640 ] && [ -z "$left" ]; then echo "  the plan written under umask 027 has mode 640, no temp file beside it"
else echo "plan_determinism: the plan written under umask 027 has mode $mode (want 640); left beside it: '$left'"; fail=1; fi
exit $fail
