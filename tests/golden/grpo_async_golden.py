#!/usr/bin/python3
"""Golden test of one-step-off rollouts (async_rollouts=1, examples/grpo/grpo_async.c): a step trains
on the batch rolled out one step before, with the sampler's log-probs as the old ones (TRL's
AsyncGRPOTrainer.compute_loss: ratio exp(logp - old_log_probs), clipped; dapo's normalisation by the
batch's tokens), checked in float64.

  1. compiles the pipeline with async_rollouts=1 (a small GPT-2, reverse 3 digits, loss dapo, beta 0);
  2. runs one step with a checkpoint: the checkpoint holds the weights after it (W1) and the batch
     rolled out during it by W0 for the next step (the rollout tensors tokens, completion_mask,
     sampling_logps, rewards; the async.* buffers hold the batch the step trained);
  3. resumes for one step with --dump: that step trains the checkpointed batch with W1, and the
     dump's completion_mask and sampling_logps are that batch's, bit for bit (a dump replays
     what trained);
  4. computes the step in float64 from W1 and the checkpointed batch (gpt2_golden.py's GPT-2) and
     compares loss, grad_norm and the policy's log-probs: max|dfg - float64| / scale <= 1e-4.
It also asserts the test is not vacuous: the batch's sampler log-probs differ from W1's (the
update moved the policy), so old = sampling and old = the current log-probs give other losses.
A seed whose first step moves nothing (every group's rewards equal: no advantage, no update) leaves
no stale batch, and one whose second batch has no advantage has no loss to compare; the test then
says so and tries a seed derived from it, four seeds at most.
Exit codes: 0 agree, 1 a mismatch or an error, 77 torch/numpy not importable (ctest: skipped).
The seed is fresh each run and printed; DFG_TEST_SEED replays one."""
import argparse
import os
import subprocess
import sys

import golden_common
from golden_common import run_seed
from gpt2_golden import np, torch, st_read, gpt2_logits, rel_err

TOL = 1e-4
S = dict(task="reverse", digits=3, prompts_per_step=3, num_generations=4, n_layer=2, n_head=2, n_embd=32,
         vocab_size=15, learning_rate=3e-3, temperature=0.7, epsilon=0.2, loss_type="dapo", beta=0.0,
         async_rollouts=1)


def dfg(args, what):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"grpo_async_golden: {what} failed ({r.returncode}): {' '.join(args)}\n{r.stdout}{r.stderr}")


def reference(w, tok, mask, samp, rewards, s, Lp, G):
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    cfg = dict(n_layer=s["n_layer"], n_head=s["n_head"])
    t = torch.tensor(tok, dtype=torch.long)
    logits = gpt2_logits(p, t, cfg)[:, :-1] / s["temperature"]
    lp = torch.log_softmax(logits, dim=-1).gather(-1, t[:, 1:].unsqueeze(-1)).squeeze(-1)  # (N, T-1)
    logp = lp[:, Lp - 1:]                                                                   # columns Lp .. T-1
    m = torch.tensor(mask[:, Lp:], dtype=torch.float64)
    old = torch.tensor(samp[:, Lp:], dtype=torch.float64)
    r = torch.tensor(rewards, dtype=torch.float64).view(-1, G)
    A = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    ratio = torch.exp((logp - old) * m)
    clipped = torch.clamp(ratio, 1 - s["epsilon"], 1 + s["epsilon"])
    per_token = -torch.minimum(ratio * A, clipped * A)
    loss = (per_token * m).sum() / m.sum().clamp(min=1)
    loss.backward()
    gnorm = torch.sqrt(sum((q.grad ** 2).sum() for q in p.values()))
    scale = ((per_token.abs() * m).sum() / m.sum().clamp(min=1)).item()
    return loss.item(), gnorm.item(), (logp.detach() * m).numpy(), scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dfg", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    seed = run_seed("grpo_async_golden")
    os.makedirs(a.workdir, exist_ok=True)
    plan, ck, dump = (os.path.join(a.workdir, n) for n in ("async.dfg", "ck", "dump.safetensors"))
    sets = [x for k, v in S.items() for x in ("--set", f"{k}={v}")]
    dfg([a.dfg, "compile", a.source, "-o", plan] + sets, "compile")
    for k in range(4):  # a step that moved nothing (every group's rewards equal) leaves no stale batch
        s = seed if k == 0 else (seed + 7919 * k) % 2**31
        fails, stale = attempt(a, plan, ck, dump, s)
        if stale or k == 3:
            break
        print(f"  seed {s}: the first step did not move the policy or the second batch teaches nothing; seed "
              f"{(seed + 7919 * (k + 1)) % 2**31} next")
    if not stale:
        fails.append("no stale batch with an advantage in 4 seeds: the test would not tell old = sampling from old = logp")
    if fails:
        print(f"grpo_async_golden: FAIL (seed {s}): " + "; ".join(fails))
        return 1
    print(f"grpo_async_golden: PASS (seed {s})")
    return 0


def attempt(a, plan, ck, dump, seed):
    """Two steps at seed, the second resumed and dumped; returns (failed checks, the batch was stale)."""
    subprocess.run(["rm", "-rf", ck])
    dfg([a.dfg, "run", plan, "--steps", "1", "--threads", "1", "--quiet", "--seed", str(seed), "--checkpoint-dir", ck],
        "the first step")
    c = st_read(os.path.join(ck, "checkpoint.safetensors"))[0]
    dfg([a.dfg, "run", plan, "--steps", "1", "--threads", "1", "--quiet", "--resume", ck, "--dump", dump],
        "the second step")
    d = st_read(dump)[0]
    Lp, G = S["digits"] + 1, S["num_generations"]
    w = {k: v for k, v in c.items() if k.startswith(("wte.", "wpe.", "h.", "ln_f."))}
    tok, mask, samp, rew = (c[n] for n in ("tokens", "completion_mask", "sampling_logps", "rewards"))
    loss, gnorm, logp, scale = reference(w, tok, mask, samp, rew, S, Lp, G)
    if scale == 0:  # every group of the trained batch scored alike: no advantage, a loss of 0 to compare
        print("  the trained batch's groups each scored alike: nothing to compare")
        return [], False
    fails = [f"the dump's {n} is not the trained batch's" for n, v in (("completion_mask", mask), ("sampling_logps", samp))
             if not np.array_equal(d[n], v)]
    got_logp = d["logp"][:, Lp:] * mask[:, Lp:]
    stale = float(np.abs((logp - samp[:, Lp:] * mask[:, Lp:])).max())
    checks = [("logp", rel_err(got_logp, logp)), ("loss", abs(float(d["loss"].reshape(-1)[0]) - loss) / max(abs(loss), scale)),
              ("grad_norm", abs(float(d["grad_norm"].reshape(-1)[0]) - gnorm) / max(gnorm, 1e-30))]
    for name, err in checks:
        print(f"  {name:10s} rel err {err:.2e}")
        if not err <= TOL:
            fails.append(f"{name}: {err:.2e} > {TOL}")
    print(f"  the batch's sampler log-probs vs W1's: max |diff| {stale:.3e} (must be > 1e-3: a stale batch)")
    return fails, stale > 1e-3


if __name__ == "__main__":
    sys.exit(main())
