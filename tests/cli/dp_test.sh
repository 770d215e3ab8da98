#!/usr/bin/env bash
# dp_test.sh - data-parallel GRPO (ctest "data_parallel", label "c"): `mpirun -n 2 dfg run` on a
# plan compiled with --set world_size=2 against one process on the same whole batch.
#   - the updated weights equal one process's to float rounding (1e-5 relative per tensor), and
#     every step's metrics agree (rewards and completions exactly: the ranks sample the batch's
#     tokens), for TRL's default loss and for grpo + KL + batch-scaled rewards + micro-batches +
#     rollout sub-batches + two passes, and for a dataset of left-padded prompts;
#   - rank 0 alone writes the checkpoint; a resumed run (same world) continues bit for bit;
#   - a killed rank and a hung rank stop the run (the hung one named in one line), the last good
#     checkpoint is whole, and resuming from it ends where an unfaulted run ends;
#   - a plan and a run of different sizes are refused; dfg inspect shows per-rank memory and the
#     bytes communicated per step;
#   - a cuda plan under --emulate-gpu: the CUDA backend's orchestration with the emulated
#     device's communicator (MPI in the stream's order) trains the step of one emulated process.
# Needs mpirun (Debian's openmpi-bin, installed by tools/deps.sh); exits 77 (skipped) without it.
# Usage: dp_test.sh DFG SRC
DFG=$1
SRC=$2
. "$SRC/tests/cli/testlib.sh"
testlib_begin dp
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
  exit 77
fi
# CI runs as root in a container: allow it, allow two ranks on fewer cores, and no cross-memory
# attach (ptrace is often forbidden there)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# under AddressSanitizer: OpenMPI's own allocations that it never frees are not dfg's leaks
export OMPI_MCA_mca_component_disable_dlclose=1
export LSAN_OPTIONS="suppressions=$SRC/tests/cli/lsan_openmpi.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
MPI=(mpirun -n 2 --oversubscribe --bind-to none)
G="$SRC/examples/grpo/grpo.c"
ST="python3 $SRC/tests/cli/st_tool.py"
TOY="python3 $SRC/tests/cli/toy_reward.py"
SMALL=(--set prompts_per_step=4 --set num_generations=4)
# AdamW with eps 0.1 and no clipping moves a weight in proportion to its gradient, so the weights
# show a gradient that is off by a factor (AdamW's 1e-8 and a norm clip would make the step
# nearly scale-free), and a weight whose gradient is rounding noise around 0 (the attention key
# biases: softmax ignores a shift shared by all keys) moves by a noise-sized step, not by +-lr
LIN=(--set adam_epsilon=0.1 --set max_grad_norm=1000)

# close A B WHAT: every tensor within 1e-5 of its largest value (st_tool.py close)
close() {
  if $ST close "$1" "$2" 1e-5 >cmp.txt 2>&1; then ok "$3: weights within 1e-5 ($(tail -1 cmp.txt))"
  else fail "$3: weights differ: $(tail -3 cmp.txt)"; fi
}

# ---------------------------------------------------------------- TRL's default loss (dapo)
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" -o one.dfg
expect_rc 0 "compile the small GRPO program for one process"
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" --set world_size=2 -o two.dfg
expect_rc 0 "compile it for 2 ranks (world_size=2: 2 prompts per rank)"
run "$DFG" run one.dfg --steps 3 --threads 1 --metrics one.jsonl --save one.safetensors
expect_rc 0 "one process: 3 steps"
run "${MPI[@]}" "$DFG" run two.dfg --steps 3 --threads 1 --metrics two.jsonl --save two.safetensors
expect_rc 0 "mpirun -n 2: 3 steps"
expect_in out.txt "data parallel: 2 ranks" "rank 0 says the run is data parallel"
[ "$(grep -c '^step ' out.txt)" = 3 ] && ok "one metrics line per step (rank 0's, the others quiet)" \
  || fail "expected 3 step lines, got $(grep -c '^step ' out.txt)"
close one.safetensors two.safetensors "2 ranks against one process on the whole batch (dapo)"
same_step one.jsonl two.jsonl "2 ranks (dapo)" other

# AdamW's default eps (1e-8): the weights of one process and of 2 ranks together (2-norm). The
# few weights whose gradient is rounding noise (the key biases above) differ by a few 1e-6.
run "$DFG" compile "$G" "${SMALL[@]}" -o one_eps.dfg
run "$DFG" compile "$G" "${SMALL[@]}" --set world_size=2 -o two_eps.dfg
run "$DFG" run one_eps.dfg --steps 3 --threads 1 --save one_eps.safetensors
run "${MPI[@]}" "$DFG" run two_eps.dfg --steps 3 --threads 1 --save two_eps.safetensors
expect_rc 0 "mpirun -n 2 with AdamW's default eps"
if $ST norm-close one_eps.safetensors two_eps.safetensors 1e-5 >cmp.txt 2>&1; then
  ok "default eps: all the weights together within 1e-5 ($(tail -1 cmp.txt))"
else fail "default eps: the weights differ: $(tail -3 cmp.txt)"; fi

# The entropy mask (top_entropy_quantile): the quantile of every rank's tokens together (TRL
# gathers them), so 2 ranks train the tokens one process on the whole batch trains
ENT=(--set top_entropy_quantile=0.5)
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${ENT[@]}" -o one_ent.dfg
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${ENT[@]}" --set world_size=2 -o two_ent.dfg
run "$DFG" run one_ent.dfg --steps 3 --threads 1 --metrics one_ent.jsonl --save one_ent.safetensors
run "${MPI[@]}" "$DFG" run two_ent.dfg --steps 3 --threads 1 --metrics two_ent.jsonl --save two_ent.safetensors
expect_rc 0 "mpirun -n 2 with top_entropy_quantile 0.5"
close one_ent.safetensors two_ent.safetensors "2 ranks, the entropy mask's quantile over both ranks' tokens"
same_step one_ent.jsonl two_ent.jsonl "2 ranks (top_entropy_quantile 0.5)" other

# ---------------------------------------------------------------- grpo loss, KL, batch scaling, micro-batches
MORE=(--set loss_type=grpo --set beta=0.04 --set scale_rewards=batch --set num_iterations=2)
run "$DFG" compile "$G" --set prompts_per_step=4 --set num_generations=4 "${LIN[@]}" "${MORE[@]}" \
  --set gradient_accumulation_steps=4 --set rollout_sub_batches=2 -o one_more.dfg
expect_rc 0 "compile grpo + KL + batch-scaled rewards + 2 passes, 4 micro-batches, 2 rollout sub-batches"
run "$DFG" compile "$G" --set prompts_per_step=4 --set num_generations=4 "${LIN[@]}" "${MORE[@]}" \
  --set gradient_accumulation_steps=2 --set rollout_sub_batches=2 --set world_size=2 --set ddp_bucket_cap_mb=0.05 \
  -o two_more.dfg
expect_rc 0 "... for 2 ranks (2 micro-batches and 2 rollout sub-batches each, 50 KiB gradient buckets)"
run "$DFG" inspect two_more.dfg --json
NB=$(python3 -c "import json; d=json.loads(open('out.txt').read()); print(sum(s['gradient_buckets'] for s in d['data_parallel']['stages'] if s['name']=='train.0'))")
[ "$NB" -ge 5 ] && ok "the gradients travel in $NB buckets in train.0's last micro-batch" || fail "$NB gradient buckets in train.0"

run "$DFG" run one_more.dfg --steps 2 --threads 1 --metrics one_more.jsonl --save one_more.safetensors
run "${MPI[@]}" "$DFG" run two_more.dfg --steps 2 --threads 1 --metrics two_more.jsonl --save two_more.safetensors
expect_rc 0 "mpirun -n 2: grpo loss with the reference model and the old policy"
close one_more.safetensors two_more.safetensors "2 ranks, grpo + KL + batch scaling + micro-batches + small buckets"
same_step one_more.jsonl two_more.jsonl "2 ranks (grpo, beta 0.04, scale_rewards=batch)" other
expect_in two_more.jsonl '"kl"' "the KL metric is logged (per token of the whole batch)"

# ---------------------------------------------------------------- a dataset: each rank reads its rows
for d in 2 3; do python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits $d --rows 9 --seed $d \
  -o r$d.jsonl 2>/dev/null; done
cat r2.jsonl r3.jsonl >mixed.jsonl # 18 rows: 4 prompts a step wrap around an epoch by step 5
cc -shared -fPIC -O2 -I "$SRC/runtime/host" -I "$SRC/graph" "$SRC/examples/rewards/digits_plugin.c" -o digits_plugin.so
DS=(--set dataset=mixed.jsonl --set reward_funcs=exact,partial,format --set reward_weights=0.6,0.3,0.1
    --set max_completion_length=6)
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${DS[@]}" -o one_ds.dfg
expect_rc 0 "compile GRPO on a dataset of left-padded prompts"
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${DS[@]}" --set world_size=2 -o two_ds.dfg
run "$DFG" run one_ds.dfg --steps 5 --threads 1 --reward-lib ./digits_plugin.so --metrics one_ds.jsonl --save one_ds.safetensors
run "${MPI[@]}" "$DFG" run two_ds.dfg --steps 5 --threads 1 --reward-lib ./digits_plugin.so --metrics two_ds.jsonl \
  --save two_ds.safetensors
expect_rc 0 "mpirun -n 2 on the dataset, 5 steps (into the second epoch)"
close one_ds.safetensors two_ds.safetensors "2 ranks on a dataset"
same_step one_ds.jsonl two_ds.jsonl "2 ranks on a dataset (each its share of every batch)" other

# prompt buckets: each rank's prefill runs at its own prompts' width, the passes at the widest
# rank's (their gradients meet in collectives); 1-digit prompts (2 tokens) then 3-digit ones (4)
python3 "$SRC/examples/tasks/digits/make_dataset.py" --task reverse --digits 1 --rows 8 --seed 1 -o r1.jsonl 2>/dev/null
cat r1.jsonl r3.jsonl >pb.jsonl
PB=(--set dataset=pb.jsonl --set shuffle_dataset=false --set prompt_buckets=2 --set reward_funcs=exact,partial,format
    --set max_completion_length=6)
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${PB[@]}" -o one_pb.dfg
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${PB[@]}" --set world_size=2 -o two_pb.dfg
run "$DFG" run one_pb.dfg --steps 3 --threads 1 --reward-lib ./digits_plugin.so --save one_pb.safetensors
run "${MPI[@]}" "$DFG" run two_pb.dfg --steps 3 --threads 1 --reward-lib ./digits_plugin.so --metrics two_pb.jsonl \
  --save two_pb.safetensors
expect_rc 0 "mpirun -n 2 with prompt buckets, 3 steps"
close one_pb.safetensors two_pb.safetensors "2 ranks with prompt buckets"
python3 - two_pb.jsonl >check.txt 2>&1 <<'PY'
import json, sys
runs = [sorted(k for k in json.loads(l)["stage_runs"] if k.startswith(("prefill", "train"))) for l in open(sys.argv[1])]
print(runs)
assert runs[0] == ["prefill[p2]", "train.0[p2]"] and "train.0" in runs[-1], runs
PY
[ $? = 0 ] && ok "2 ranks: short prompts ran at 2 columns, then the full width ($(cat check.txt))" || fail "prompt buckets under mpirun: $(cat check.txt)"

# ---------------------------------------------------------------- checkpoints: rank 0 writes, resume continues
run "${MPI[@]}" "$DFG" run two.dfg --steps 4 --threads 1 --save straight.safetensors
run "${MPI[@]}" "$DFG" run two.dfg --steps 2 --threads 1 --checkpoint-dir ck
expect_rc 0 "mpirun -n 2 with a checkpoint after 2 steps"
[ "$(ls ck | grep -c safetensors)" = 1 ] && ok "one checkpoint file (rank 0's)" || fail "checkpoint files: $(ls ck)"
run "${MPI[@]}" "$DFG" run two.dfg --steps 2 --threads 1 --resume ck --save resumed.safetensors
expect_rc 0 "mpirun -n 2 --resume: 2 more steps"
if $ST same straight.safetensors resumed.safetensors >cmp.txt 2>&1; then ok "2 + 2 resumed steps = 4 straight steps, bit for bit"
else fail "resume differs from the straight run: $(tail -3 cmp.txt)"; fi

# SIGUSR1 at mpirun (forwarded to every rank): every rank stops after the same step, rank 0 saves
rm -rf cki
"${MPI[@]}" "$DFG" run two.dfg --steps 1000000 --threads 1 --checkpoint-dir cki >usr1.txt 2>usr1_err.txt &
pid=$!
for _ in $(seq 600); do grep -q '^step *3 ' usr1.txt 2>/dev/null && break; sleep 0.1; done
kill -USR1 $pid
wait $pid
rc=$?
n=$(sed -n 's/.*interrupted after step \([0-9]*\): checkpoint saved.*/\1/p' usr1_err.txt)
if [ "$rc" = 138 ] && [ -n "$n" ] && [ "$(grep -c 'interrupted after step' usr1_err.txt)" = 1 ]; then
  ok "SIGUSR1 stops both ranks after step $n with one checkpoint and one message (exit 138)"
  run "${MPI[@]}" "$DFG" run two.dfg --steps 2 --threads 1 --resume cki --save usr1_resumed.safetensors
  run "${MPI[@]}" "$DFG" run two.dfg --steps $((n + 2)) --threads 1 --save usr1_straight.safetensors
  if $ST same usr1_straight.safetensors usr1_resumed.safetensors >cmp.txt 2>&1; then
    ok "resuming after SIGUSR1 = the straight run of $((n + 2)) steps, bit for bit"
  else fail "resume after SIGUSR1 differs: $(tail -3 cmp.txt)"; fi
else
  cp usr1.txt out.txt; cp usr1_err.txt err.txt
  fail "SIGUSR1: exit $rc, step '$n', $(grep -c 'interrupted after step' usr1_err.txt) messages"
fi

# SIGUSR1 at rank 1 alone: rank 0 learns it from the ranks' agreement after the step, and both stop
# after that step (a rank that acted on its own flag would leave its peer in the next collectives)
rank_pid() { # mpirun's pid, rank: the pid of that rank's dfg
  local p
  for p in $(pgrep -f "dfg run two.dfg"); do
    [ "$p" = "$1" ] && continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
rm -rf ck1
"${MPI[@]}" "$DFG" run two.dfg --steps 1000000 --threads 1 --checkpoint-dir ck1 >usr1.txt 2>usr1_err.txt &
pid=$!
for _ in $(seq 600); do grep -q '^step *3 ' usr1.txt 2>/dev/null && break; sleep 0.1; done
r1=$(rank_pid $pid 1)
[ -n "$r1" ] && kill -USR1 "$r1"
wait $pid
rc=$?
n=$(sed -n 's/.*interrupted after step \([0-9]*\): checkpoint saved.*/\1/p' usr1_err.txt)
if [ -n "$r1" ] && [ "$rc" = 138 ] && [ -n "$n" ] && [ "$(ls ck1 | grep -c safetensors)" = 1 ]; then
  ok "SIGUSR1 at rank 1 alone stops both ranks after step $n; rank 0 saves the checkpoint (exit 138)"
else
  cp usr1.txt out.txt; cp usr1_err.txt err.txt
  fail "SIGUSR1 at rank 1 (pid '${r1}'): exit $rc, step '$n', checkpoints: $(ls ck1 2>/dev/null)"
fi

# ---------------------------------------------------------------- faults
EXT=(--set reward=external --set reward_funcs=digits,short)
run "$DFG" compile "$G" "${SMALL[@]}" "${LIN[@]}" "${EXT[@]}" --set world_size=2 -o ext.dfg
expect_rc 0 "compile for 2 ranks with a reward program"
run "${MPI[@]}" "$DFG" run ext.dfg --steps 4 --threads 1 --reward-cmd "$TOY" --save ext_straight.safetensors
expect_rc 0 "2 ranks with the reward program, 4 steps, no fault"

# fault MODE TIMEOUT WHAT: 4 steps with a checkpoint after each, the reward program of rank 1
# faulting at step 3 (toy_reward.py MODE); the run must stop (not time out at 120 s)
fault() {
  rm -rf ck
  local t0; t0=$(date +%s)
  run timeout 120 "${MPI[@]}" "$DFG" run ext.dfg --steps 4 --threads 1 --checkpoint-dir ck --save-every 1 \
    --collective-timeout "$2" --reward-cmd "$TOY $1 3"
  local took=$(( $(date +%s) - t0 ))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "a rank $3 at step 3 stops the run (exit $rc, in $took s)"
  else fail "a rank $3 at step 3: exit $rc after $took s"; fi
  cp err.txt "fault_$1.txt"
}
# resumed_after WHAT: 2 more steps from the checkpoint end where the unfaulted run ends
resumed_after() {
  run "${MPI[@]}" "$DFG" run ext.dfg --steps 2 --threads 1 --resume ck --reward-cmd "$TOY" --save "after_$1.safetensors"
  expect_rc 0 "resume after the $1 rank"
  expect_in out.txt "resumed from ck/checkpoint.safetensors: step 2" "the last checkpoint is step 2's, whole"
  if $ST same ext_straight.safetensors "after_$1.safetensors" >cmp.txt 2>&1; then
    ok "resuming after the $1 rank ends where the unfaulted run ends, bit for bit"
  else fail "after the $1 rank: $(tail -3 cmp.txt)"; fi
}

# a rank killed at step 3 (its reward program sends SIGKILL to it): the launcher names it
fault kill-dfg 20 killed
grep -q "rank 1" fault_kill-dfg.txt && ok "the launcher names the dead rank ($(grep -m1 -o 'process rank 1[^.]*' fault_kill-dfg.txt))" \
  || fail "no line names rank 1"
resumed_after killed

# a rank that hangs at step 3 (SIGSTOP): the others time out and name it, in one line
fault stop-dfg 3 hung
cp fault_stop-dfg.txt err.txt
n=$(grep -c '^dfg run:' err.txt)
[ "$n" = 1 ] && ok "one line from dfg: $(grep '^dfg run:' err.txt | cut -c1-160)..." || fail "$n dfg lines on stderr"
expect_in err.txt "rank 1 did not reach" "the line names the hung rank"
expect_in err.txt "gathering 'rewards'" "the line says what the collective carried"
expect_in err.txt "the state after step 2 (the last good one) is saved" "the line says what was kept"
resumed_after hung
sleep 1
[ -z "$(pgrep -f "dfg.* run ext.dfg" || true)" ] && ok "no rank is left running" || fail "ranks left: $(pgrep -af 'run ext.dfg')"

# ---------------------------------------------------------------- sizes that do not match
run "$DFG" run two.dfg --steps 1 --threads 1
expect_rc 1 "a 2-rank plan without mpirun"
expect_in err.txt "compiled for 2 ranks" "the message says what the plan needs"
run "${MPI[@]}" "$DFG" run one.dfg --steps 1 --threads 1
[ "$rc" -ne 0 ] && ok "a one-process plan under mpirun -n 2 is refused (exit $rc)" || fail "a one-process plan ran on 2 ranks"
expect_in err.txt "has no collectives" "the message says why"
run "$DFG" compile "$G" "${SMALL[@]}" --set world_size=3 -o bad.dfg
expect_rc 2 "world_size 3 does not divide 4 prompts"
expect_in err.txt "world_size 3 must divide prompts_per_step 4" "the message names both settings"
run "$DFG" compile "$G" "${SMALL[@]}" --set world_size=2 --set ddp_bucket_cap_mb=0 -o bad.dfg
expect_rc 2 "a bucket size of 0 MiB is refused"
expect_in err.txt "setting 'ddp_bucket_cap_mb': '0' is out of range" "the message names the setting"

# over the persistent tensors (1.56 MiB: under them fit answers at once, searching nothing) and
# under the least, so the candidates and the hints (prompts_per_step a multiple of 2) are tried
run "$DFG" fit "$G" --set world_size=2 --memory-budget 1.6MiB -o nofit.dfg
expect_rc 3 "dfg fit for 2 ranks under a budget nothing meets: nothing fits"
expect_in err.txt "with the math unchanged this pipeline needs at least" "... after searching the candidates"

# ---------------------------------------------------------------- dfg inspect
run "$DFG" inspect two.dfg
expect_in out.txt "ranks         2" "inspect shows the plan's ranks"
expect_in out.txt "every figure here is one rank's" "inspect says its memory is per rank"
run "$DFG" inspect two.dfg --json
cp out.txt two.json
GRADS=$(python3 -c "import json,sys; d=json.load(open('two.json')); print(int(sum(s['gradient_bucket_bytes'] for s in d['data_parallel']['stages'] if s['name']=='train.0')))")
PARAMS=$(jget two.json 'd["categories"]["params"]["peak_bytes"]')
[ "$(jget two.json 'd["data_parallel"]["world_size"]')" = 2 ] && ok "inspect --json: world_size 2" || fail "inspect --json world_size"
if [ "$GRADS" -ge "$PARAMS" ]; then ok "the backward's gradient buckets hold every gradient ($GRADS bytes >= params $PARAMS)"
else fail "the gradient buckets hold $GRADS bytes, params are $PARAMS"; fi

# ---------------------------------------------------------------- cuda on the emulated device
TINY=(--set prompts_per_step=2 --set num_generations=2 --set n_layer=1 --set n_embd=32 --set n_head=2 "${LIN[@]}"
      --target cuda --set torch_dtype=float32)
run "$DFG" compile "$G" "${TINY[@]}" -o gpu_one.dfg
expect_rc 0 "compile a tiny GRPO program for cuda (f32)"
run "$DFG" compile "$G" "${TINY[@]}" --set world_size=2 -o gpu_two.dfg
run "$DFG" run gpu_one.dfg --steps 2 --emulate-gpu --save gpu_one.safetensors
if [ "$rc" -eq 0 ]; then
  run "${MPI[@]}" "$DFG" run gpu_two.dfg --steps 2 --emulate-gpu --save gpu_two.safetensors
  expect_rc 0 "mpirun -n 2 --emulate-gpu: collectives in the captured stages, replayed"
  close gpu_one.safetensors gpu_two.safetensors "2 emulated GPUs against one"
else
  echo "ok - # SKIP this build has no emulated GPU: $(head -1 err.txt)"
fi

testlib_end
