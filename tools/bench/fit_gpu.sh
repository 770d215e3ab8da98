#!/usr/bin/env bash
# fit_gpu.sh - dfg fit's plans, run: GRPO at GPT-2 124M, 32 prompts x 8 generations of the 64-digit
# task (beta 0.04), compiled as given and fitted to 6, 4 and 3 GiB and to the least (--min) for
# cuda, each run for a few steps from one seed. Prints, per plan, the settings fit chose, the
# planned arena, the device memory the run measured (cudaMemGetInfo: arena + workspace + the
# driver's rounding), the estimated step-time ratio fit printed and the measured one (median
# step of the steps after the first two, against the plan as given), and whether step 1 trained
# on the same rollout (reward, completion lengths) with the same loss.
#
#   tools/bench/fit_gpu.sh DFG OUT_DIR [--steps N] [--emulate-gpu] [--small]
#
# --emulate-gpu runs the plans on the emulated GPU (for checking this script without one: slow,
# use --small, the default small GRPO program fitted to fractions of its arena). Measures; asserts
# nothing.
set -u
DFG=$1
OUT=$2
shift 2
STEPS=8 EMU=() SMALL=0
while [ $# -gt 0 ]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --emulate-gpu) EMU=(--emulate-gpu); shift ;;
    --small) SMALL=1; shift ;;
    *) echo "fit_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
G=$ROOT/examples/grpo/grpo.c
mkdir -p "$OUT"
if [ "$SMALL" = 1 ]; then
  S=(--set beta=0.04)
  BUDGETS=(36MiB 35MiB) # the GPU workspace (32 MiB of it the GEMM library's) counts
else
  S=(--set n_layer=12 --set n_head=12 --set n_embd=768 --set vocab_size=50257 --set n_positions=1024 --set digits=64
     --set prompts_per_step=32 --set num_generations=8 --set beta=0.04)
  BUDGETS=(6GiB 4GiB 3GiB)
fi
PLANS=(given)
"$DFG" compile "$G" --target cuda "${S[@]}" -o "$OUT/given.dfg" >"$OUT/given.fit.txt" 2>&1 || { cat "$OUT/given.fit.txt"; exit 1; }
for b in "${BUDGETS[@]}"; do
  /usr/bin/time -f "fit wall %e s" "$DFG" fit "$G" --target cuda "${S[@]}" --memory-budget "$b" -o "$OUT/fit_$b.dfg" \
    >"$OUT/fit_$b.fit.txt" 2>&1 && PLANS+=("fit_$b") || { echo "fit to $b failed:"; tail -5 "$OUT/fit_$b.fit.txt"; }
done
/usr/bin/time -f "fit wall %e s" "$DFG" fit "$G" --target cuda "${S[@]}" --min -o "$OUT/min.dfg" >"$OUT/min.fit.txt" 2>&1 \
  && PLANS+=(min) || { echo "fit --min failed:"; tail -5 "$OUT/min.fit.txt"; }
for p in "${PLANS[@]}"; do
  "$DFG" run "$OUT/$p.dfg" --steps "$STEPS" --metrics "$OUT/$p.jsonl" "${EMU[@]}" >"$OUT/$p.run.txt" 2>&1 \
    || { echo "run $p failed:"; tail -5 "$OUT/$p.run.txt"; }
done
python3 - "$OUT" "${PLANS[@]}" <<'PY' | tee "$OUT/summary.md"
import json, os, re, statistics, sys
out, plans = sys.argv[1], sys.argv[2:]
def read(p, ext):
    path = os.path.join(out, p + ext)
    return open(path).read() if os.path.exists(path) else ""
rows, base = [], {}
for p in plans:
    fit, run = read(p, ".fit.txt"), read(p, ".run.txt")
    chose = re.search(r"^chose #\d+: (.*)$", fit, re.M)
    star = re.search(r"^\*.*? x([0-9.]+) ", fit, re.M)
    dev = re.search(r"device memory: (\d+) bytes allocated .*? = the planned arena (\d+) \+ kernel and GEMM workspace (\d+)", run)
    steps = [json.loads(l) for l in read(p, ".jsonl").splitlines() if l.strip()]
    ms = statistics.median([s["ms"] for s in steps[2:]]) if len(steps) > 2 else float("nan")
    wall = re.search(r"fit wall ([0-9.]+) s", fit)
    r = dict(plan=p, settings=chose[1] if chose else "as given", est=float(star[1]) if star else 1.0, ms=ms,
             device=int(dev[1]) if dev else 0, arena=int(dev[2]) if dev else 0, ws=int(dev[3]) if dev else 0,
             s1=steps[0] if steps else {}, fit_s=wall[1] if wall else "-")
    rows.append(r)
    if p == "given": base = r
def budget_of(p):
    m = re.match(r"fit_([0-9.]+)(GiB|MiB|KiB)$", p)
    return float(m[1]) * {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}[m[2]] if m else None
print("| plan | settings fit chose | arena (planned) | device memory measured | within the budget | est. step (fit) | step ms (median) | measured ratio | step 1 same as given | fit wall s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    same = "-"
    if base.get("s1") and r["s1"]:
        keys = [k for k in r["s1"] if k.startswith("reward") or k.startswith("completions/")]
        exact = all(r["s1"][k] == base["s1"][k] for k in keys)
        dl = abs(r["s1"]["loss"] - base["s1"]["loss"]) / max(abs(base["s1"]["loss"]), 1e-6)
        same = "rollout %s, loss %.1e rel." % ("identical" if exact else "DIFFERENT", dl)
    over = r["device"] - r["arena"] - r["ws"]
    b = budget_of(r["plan"])
    within = "-" if b is None else ("yes (%.1f MiB under)" % ((b - r["device"]) / 2**20) if r["device"] <= b else "NO (%.1f MiB over)" % ((r["device"] - b) / 2**20))
    print("| %s | %s | %.3f GiB | %d B = arena + workspace %.1f MiB + %.2f MiB | %s | x%.2f | %.1f | x%.2f | %s | %s |" % (
        r["plan"], r["settings"], r["arena"] / 2**30, r["device"], r["ws"] / 2**20, over / 2**20, within, r["est"], r["ms"],
        r["ms"] / base["ms"] if base.get("ms") else float("nan"), same, r["fit_s"]))
PY
