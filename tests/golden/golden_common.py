"""golden_common.py - what the golden tests (tests/golden/*_golden.py) share: the run's seed, fresh
each run unless DFG_TEST_SEED replays one, the configurations a run's --config names, and the rule
for a library that cannot be imported: a skip (exit 77, ctest: skipped), or a failure when
DFG_REQUIRE_HF=1 (tools/test.sh, CI)."""
import os
import sys
import time


def run_seed(prog):
    """The run's seed: DFG_TEST_SEED when set, else a fresh one; None, after prog's FAIL line, when
    DFG_TEST_SEED is not an integer."""
    env = os.environ.get("DFG_TEST_SEED", "")
    try:
        return int(env) if env else int.from_bytes(os.urandom(4), "little")
    except ValueError:
        print(f"{prog}: FAIL: DFG_TEST_SEED={env!r} is not an integer")
        return None


def chosen_configs(prog, configs, names):
    """The configurations named (all when names is empty); None, after prog's FAIL line, when none is."""
    chosen = [c for c in configs if not names or c["name"] in names]
    if not chosen:
        print(f"{prog}: FAIL: no configuration named {names}")
        return None
    return chosen


def unavailable(prog, why):
    """A library missing: prog's skip, or its failure when DFG_REQUIRE_HF=1."""
    if os.environ.get("DFG_REQUIRE_HF") == "1":
        print(f"{prog}: FAIL: {why} (DFG_REQUIRE_HF=1: run tools/deps.sh --test)")
        sys.exit(1)
    print(f"{prog}: SKIP: {why}")
    sys.exit(77)


def summary(prog, results, what, t0, seed, ok=True):
    """Prints the worst relative errors of each (passed, line) result and how many of them agree;
    returns the exit code (0 when ok and every one passed)."""
    ok = ok and all(r[0] for r in results)
    print(f"{prog}: worst relative errors per {what.rstrip('s')}:")
    for r in results:
        if r[1]:
            print("  " + r[1])
    print(f"{prog}: {sum(r[0] for r in results)}/{len(results)} {what} agree in {time.time() - t0:.1f}s (seed {seed})")
    return 0 if ok else 1
