#!/usr/bin/env python3
"""invariant_check.py METRICS DUMP [REF_METRICS] - a batch-invariant GRPO run (lengths_test.sh,
invariant_cuda_test.sh): every scored token's sampling log-prob in DUMP equals the training
forward's in every bit, each step of METRICS logs difference 0 and ratios 1, and no old stage ran
(the sampler's log-probs are the old ones). REF_METRICS, the same plan without batch_invariant,
must have run its old stage every step. Prints what it saw; exit 1 (an assertion) otherwise."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_tool  # noqa: E402

m = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[3])] if len(sys.argv) > 3 else None
t, _ = st_tool.read(sys.argv[2])
bits = lambda k: struct.unpack("<%dI" % (len(t[k][2]) // 4), t[k][2])  # noqa: E731
lp, sp, mask = bits("logp"), bits("sampling_logps"), st_tool.values(t["completion_mask"])
on = [i for i, w in enumerate(mask) if w]
same = sum(lp[i] == sp[i] for i in on)
diff = [(l["sampling/sampling_logp_difference/max"], l["sampling/importance_sampling_ratio/min"],
         l["sampling/importance_sampling_ratio/max"]) for l in m]
old = [[k for k in l["stage_runs"] if k.startswith("old")] for l in m]
print(f"last step: {same} of {len(on)} scored tokens equal in every bit; (max diff, ratio min, max) per step {diff}; "
      f"old stages run {old}" + (f"; without batch_invariant: {[l['sampling/sampling_logp_difference/max'] for l in ref]}"
                                 if ref else ""))
assert same == len(on) > 0
assert all(d == (0, 1, 1) for d in diff), diff
assert not any(old), "an old stage ran although the sampler's log-probs were the old ones"
assert ref is None or all(any(k.startswith("old") for k in l["stage_runs"]) for l in ref), "the reference plan ran no old stage"
