#!/usr/bin/python3
"""Golden test: left-padded prompts, dfg against Hugging Face transformers' own model classes.

For Llama, Qwen2, GPT-2 and Qwen3 (hf_golden.py's models: transformers' classes with random weights,
written with save_pretrained; Qwen3 as hf_golden.py's stand-in) this script
  1. draws P prompts of random lengths (one as long as the prompt columns, one a single token),
     left-pads them to Lp columns with random pad ids, and gives each G random completions of Tc
     tokens;
  2. computes the completions' per-token log-probs at temperature 0.7 with the transformers model
     in float32, as TRL scores left-padded prompts: input_ids the padded rows, attention_mask 1 on
     the real tokens, position_ids = cumsum(attention_mask) - 1 clamped at 0; and checks that
     reference against each row run alone, unpadded, in float64 (1e-5). (Not float64 padded:
     transformers 4.40 fills masked scores with float64's min, which its softmax's float32 upcast
     turns into -inf, so a pad query that sees no key gets NaN, and 0 * NaN reaches the real rows.
     In float32 the fill stays finite, as in real use);
  3. runs tests/golden/padded_logp (dfg, the model read from the same directory) on the same rows
     with start = each row's first real column, which computes them three ways: dfg_grpo_token_logp
     with start, dfg_grpo_completion_logp with the prompts' start, and a prefill with kv.start then
     one decode step per completion token;
  4. requires each to match transformers within 1e-4 (max |dfg - hf| / max |hf|);
  5. runs padded_logp again with every nonzero start lowered by one (one pad counted as a real
     token, at the wrong positions) and requires that to NOT match: the comparison can fail.

Exit codes: 0 all agree, 1 a mismatch or an error, 77 torch, numpy or transformers cannot be
imported (ctest: skipped) -- unless DFG_REQUIRE_HF=1 (CI), which makes that a failure. The seed is
fresh each run and printed; DFG_TEST_SEED replays one.
"""
import argparse
import os
import subprocess
import sys
import time

from golden_common import run_seed, summary

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_golden as H  # noqa: E402 - its import_libraries sets up torch and transformers

TOL = 1e-4
TOL_SELF = 1e-5  # transformers float32 padded vs float64 each row alone (hf_golden's TOL_SELF)
TEMPERATURE = 0.7
ARCHS = ("llama", "qwen2", "gpt2", "qwen3")
P, G, LP, TC = 3, 2, 6, 4  # prompts, completions per prompt, prompt columns, completion tokens (T <= GPT-2's 13)


def padded_batch(rng, vocab):
    """tokens (N, T), start (N): left-padded prompts of random lengths, random pad ids and completions."""
    np = H.np
    lens = [LP, 1] + [int(rng.integers(1, LP + 1)) for _ in range(P - 2)]
    rng.shuffle(lens)
    N, T = P * G, LP + TC
    tokens = np.zeros((N, T), dtype=np.int32)
    start = np.zeros(N, dtype=np.int32)
    for p in range(P):
        prompt = np.concatenate([rng.integers(0, vocab, size=LP - lens[p]), rng.integers(0, vocab, size=lens[p])])
        for g in range(G):
            r = p * G + g
            tokens[r, :LP] = prompt
            tokens[r, LP:] = rng.integers(0, vocab, size=TC)
            start[r] = LP - lens[p]
    return tokens, start, lens


def hf_logits(model, input_ids, attention_mask=None, position_ids=None):
    """The transformers model's logits in its own dtype (the default dtype follows it: hf_golden's
    logits_fn has why)."""
    torch = H.torch
    saved = torch.get_default_dtype()
    torch.set_default_dtype(next(model.parameters()).dtype)
    try:
        with torch.no_grad():
            return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False).logits
    finally:
        torch.set_default_dtype(saved)


def completion_logp(logits, tokens, cols):
    """log softmax(logits / T) at tokens[:, cols], logits (N, len(cols), V) already at the predicting columns."""
    torch = H.torch
    lp = torch.log_softmax(logits.double() / TEMPERATURE, dim=-1)
    return lp.gather(-1, tokens[:, cols, None].long())[..., 0]


def hf_padded(model, tokens, start):
    """TRL's scoring of left-padded rows: attention_mask on the real tokens, position_ids =
    cumsum(mask) - 1 clamped at 0; the log-probs of the completion tokens (N, Tc)."""
    torch = H.torch
    tok = torch.tensor(tokens, dtype=torch.long)
    T = tok.shape[1]
    mask = (torch.arange(T)[None, :] >= torch.tensor(start, dtype=torch.long)[:, None]).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = hf_logits(model, tok, attention_mask=mask, position_ids=pos)
    return completion_logp(logits[:, LP - 1:T - 1], tok, slice(LP, T))


def hf_alone(model, tokens, start):
    """Each row alone, unpadded: its real prompt tokens then its completion, at columns 0 .."""
    torch = H.torch
    rows = []
    for r in range(tokens.shape[0]):
        tok = torch.tensor(tokens[r:r + 1, start[r]:], dtype=torch.long)
        L = LP - int(start[r])
        rows.append(completion_logp(hf_logits(model, tok)[:, L - 1:L - 1 + TC], tok, slice(L, L + TC)))
    return torch.cat(rows, 0)


def rel_err(a, b):
    np = H.np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    d = np.abs(a - b)
    return float("inf") if np.isnan(d).any() else float(d.max() / max(np.abs(b).max(), 1e-30))


def run_driver(driver, model_dir, batch, out, brk):
    cmd = [driver, model_dir, batch, out] + (["--break-start"] if brk else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout}{r.stderr}")
    return {k: v.numpy() for k, v in H.st_torch.load_file(out).items()}


def dfg_logps(got, tokens):
    """The three forms' log-probs (N, Tc) from the driver's outputs (cached: logits, softmaxed here)."""
    torch = H.torch
    tok = torch.tensor(tokens, dtype=torch.long)
    cached = completion_logp(torch.tensor(got["cached_logits"]), tok, slice(LP, LP + TC)).numpy()
    return {"token_logp": got["token_logp"], "completion_logp": got["completion_logp"], "prefill+decode": cached}


def run_arch(arch, driver, workdir, seed):
    np, torch = H.np, H.torch
    d = os.path.join(workdir, arch)
    model_dir = os.path.join(d, "model")
    os.makedirs(model_dir, exist_ok=True)
    for f in os.listdir(model_dir):
        os.remove(os.path.join(model_dir, f))
    rng = np.random.default_rng([seed, sum(map(ord, arch)), 7])
    torch.manual_seed(seed)
    built = H.build_model(arch)
    H.randomise(arch, built, rng)
    H.save_model(arch, built, model_dir)
    model32 = H.load_model(arch, model_dir)
    model64 = H.load_model(arch, model_dir).double()
    vocab = built.config.vocab_size
    tokens, start, lens = padded_batch(rng, vocab)
    want = hf_padded(model32, tokens, start)
    alone = hf_alone(model64, tokens, start)
    e_self = rel_err(want.numpy(), alone.numpy())
    ok = e_self <= TOL_SELF
    print(f"[{arch}] {H.ARCHS[arch]['arch']}: prompts of {lens} tokens left-padded to {LP}, {G} completions of {TC} "
          f"each; transformers float32 padded (attention_mask, position_ids) vs float64 each row alone: {e_self:.1e}"
          f"{'' if ok else '  FAIL'}")
    batch = os.path.join(d, "batch.safetensors")
    H.st_torch.save_file({"tokens": torch.tensor(tokens), "start": torch.tensor(start)}, batch,
                         metadata={"prompt_length": str(LP), "group": str(G), "temperature": repr(TEMPERATURE)})
    t0 = time.time()
    try:
        got = dfg_logps(run_driver(driver, model_dir, batch, os.path.join(d, "dfg.safetensors"), False), tokens)
        broken = dfg_logps(run_driver(driver, model_dir, batch, os.path.join(d, "dfg_broken.safetensors"), True), tokens)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"[{arch}] FAIL: {e}")
        return False, f"{arch}: dfg failed"
    errs = {k: rel_err(v, want.numpy()) for k, v in got.items()}
    errs_broken = {k: rel_err(v, want.numpy()) for k, v in broken.items()}
    for k, e in errs.items():
        good = e <= TOL
        ok &= good
        caught = errs_broken[k] > TOL
        ok &= caught
        print(f"  dfg {k:<16} vs transformers: {e:.2e}{'' if good else '  FAIL'}; with a start broken by one: "
              f"{errs_broken[k]:.2e} ({'caught' if caught else 'NOT caught  FAIL'})")
    print(f"[{arch}] dfg {time.time() - t0:.2f}s; {'PASS' if ok else 'FAIL'}")
    return ok, f"{arch}: " + ", ".join(f"{k} {e:.2e}" for k, e in errs.items()) + f"; self-check {e_self:.1e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True, help="path of tests/golden/padded_logp")
    ap.add_argument("--workdir", required=True, help="directory for the model directories and batches")
    ap.add_argument("--hf-site", default=os.path.join(HERE, "..", "..", ".deps", "hf-" + H.HF_VERSION),
                    help="directory transformers was installed into (pip --target); DFG_HF_SITE wins over it")
    ap.add_argument("--arch", action="append", choices=ARCHS, help="run only these architectures (default: all)")
    a = ap.parse_args()
    site = os.path.abspath(os.environ.get("DFG_HF_SITE") or a.hf_site)
    seed = run_seed("hf_padded_golden")
    if seed is None:
        return 1
    H.import_libraries(site)
    H.torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"hf_padded_golden: seed {seed} (replay with DFG_TEST_SEED={seed}); torch {H.torch.__version__}, "
          f"transformers {H.transformers.__version__}; tolerance {TOL:g}")
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    results = [run_arch(arch, a.driver, a.workdir, seed) for arch in (a.arch or ARCHS)]
    return summary("hf_padded_golden", results, "architectures", t0, seed)


if __name__ == "__main__":
    sys.exit(main())
