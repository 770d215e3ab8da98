#!/usr/bin/python3
"""agents_torch.py - multi-turn GRPO with a tool, the way TRL's GRPOTrainer runs it on the
transformers backend (grpo_trainer.py's _generate, _tool_call_loop, _compute_loss), in eager
PyTorch on the CPU: the reference of tools/bench/agents.py against dfg.

    /usr/bin/python3 tools/bench/agents_torch.py WORK --weights mixed [--steps 6] [--warmup 1]
        [--threads 2] [--prompts_per_step 8] [--num_generations 8] [--max_completion_length 256]
        [--max_tool_calling_iterations 4] [--learning_rate 1e-6] [--seed 1]

WORK is tools/bench/agents_setup.py's: the Qwen2 directory model/, the policy WORK/NAME.safetensors,
prompts.jsonl. The model is transformers' Qwen2ForCausalLM (transformers 4.40.2 from --hf-site),
float32, eager attention. One step:
  episodes  the environment (tools/bench/agents_env.py's Lookup, through tools/env_server.py's
            Server in this process: the same parsing of calls, the same tool messages and suffix
            ids, TRL's _get_tool_suffix_ids, as dfg's environment program) resets every row; then
            model.generate(do_sample, temperature 1, top_k 0, max_new_tokens =
            max_completion_length, eos and pad ids) on the left-padded prompts; each row's turn is
            cut after its EOS and parsed; while some rows called and fewer than
            max_tool_calling_iterations rounds ran, the rows that called get their tool's answer
            and are generated again from their whole context (prompt + completion + suffix,
            left-padded: TRL's "no re-tokenization", its prefill of the whole row each turn),
            their excess past max_completion_length cut, tool_mask 0 on the suffix; a suffix
            that would not fit ends the row's episode (TRL's overlong rollback).
  reward    the environment's get_reward (one reward function, as TRL appends it).
  train     advantages (group mean and std, + 1e-4), the policy's log-probs of every completion
            token in one forward over the left-padded prompts and right-padded completions (the
            batch's longest completion wide), ratio exp(logp - logp.detach()) (num_iterations 1;
            no importance-sampling correction: transformers gives no sampler log-probs), the
            clipped surrogate (epsilon 0.2), loss_type dapo over loss_mask = completion_mask *
            tool_mask (beta 0, TRL's default: no reference model), backward,
            clip_grad_norm_(1.0), AdamW (learning_rate, betas (0.9, 0.999), eps 1e-8, no decay).

Output: a JSON line per timed step {"step", "ms", "gen_ms", "train_ms", "rounds", "calls",
"tokens" (completion tokens, tool tokens included), "gen_tokens" (the policy's), "reward"},
then {"summary": ..., "peak_rss_bytes": getrusage's ru_maxrss * 1024}.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="agents_torch", description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--weights", default="mixed", help="WORK/NAME.safetensors (call0, mixed, call4)")
    ap.add_argument("--steps", type=int, default=6, help="steps in all, the first --warmup not reported")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts_per_step", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--max_completion_length", type=int, default=256)
    ap.add_argument("--max_tool_calling_iterations", type=int, default=4)
    ap.add_argument("--learning_rate", type=float, default=1e-6)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hf-site", default=os.path.join(ROOT, ".deps", "hf-4.40.2"))
    return ap.parse_args(argv)


A = parse_args()
for k, v in (("OMP_NUM_THREADS", str(A.threads)), ("OPENBLAS_NUM_THREADS", str(A.threads)),
             ("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(k, v)
sys.path.insert(0, A.hf_site)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from env_server import Server, load_hosted  # noqa: E402
from prepare_prompts import Chat, load_tokenizer  # noqa: E402


def read_weights(path):
    """A float32 safetensors file as {name: tensor}."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + s:8 + n + e]), dtype=torch.float32).view(v["shape"])
    return out


def left_padded(seqs, pad):
    """(ids (B, L), attention_mask (B, L)) of id lists, padded on the left as TRL pads prompts."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s)
        mask[i, L - len(s):] = 1
    return ids, mask


class Episodes:
    """TRL's generation with tools for one step's rows."""

    def __init__(self, model, server, eos, pad, a):
        self.model, self.server, self.eos, self.pad, self.a = model, server, eos, pad, a

    @torch.no_grad()
    def generate(self, seqs):
        """One generate() over the rows' whole contexts: each row's new ids, cut after its EOS."""
        ids, mask = left_padded(seqs, self.pad)
        out = self.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                  top_p=1.0, max_new_tokens=self.a.max_completion_length, eos_token_id=self.eos,
                                  pad_token_id=self.pad)[:, ids.size(1):].tolist()
        return [o[:o.index(self.eos) + 1] if self.eos in o else o for o in out]

    def ask(self, step, rows, turns, last):
        """The environment's answers to rows' turns (each a dict: done, suffix_ids, calls)."""
        req = [{"row": r, "ids": t, "room": self.a.max_completion_length - len(self.comp[r]), "last": last}
               for r, t in zip(rows, turns)]
        return self.server.turns(step, req)["turns"]

    def run(self, step, prompts):
        T = self.a.max_completion_length
        self.comp = self.generate(prompts)
        tool_mask = [[1] * len(c) for c in self.comp]
        rows = list(range(len(prompts)))
        answers = self.ask(step, rows, self.comp, self.a.max_tool_calling_iterations == 0)
        calls, rounds = sum(x["calls"] for x in answers), 0
        while rounds < self.a.max_tool_calling_iterations:
            todo = [(r, x["suffix_ids"]) for r, x in zip(rows, answers) if not x["done"]]
            if not todo:
                break
            rows = [r for r, _ in todo]
            pct = [prompts[r] + self.comp[r] + s for r, s in todo]
            post = self.generate(pct)
            rounds += 1
            for (r, s), p in zip(todo, post):
                p = p[:T - len(self.comp[r]) - len(s)]  # TRL cuts the excess past max_completion_length
                tool_mask[r] += [0] * len(s) + [1] * len(p)
                self.comp[r] = self.comp[r] + s + p
                post[rows.index(r)] = p
            answers = self.ask(step, rows, post, rounds >= self.a.max_tool_calling_iterations)
            calls += sum(x["calls"] for x in answers)
        return self.comp, tool_mask, calls, rounds


def logps(model, prompts, comps, pad):
    """The policy's log-prob of every completion token: (N, W) and the (N, W) completion mask."""
    W = max(len(c) for c in comps)
    pids, pmask = left_padded(prompts, pad)
    cids = torch.full((len(comps), W), pad, dtype=torch.long)
    cmask = torch.zeros(len(comps), W)
    for i, c in enumerate(comps):
        cids[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = 1
    ids = torch.cat([pids, cids], 1)
    att = torch.cat([pmask, cmask.long()], 1)
    h = model.base_model(input_ids=ids, attention_mask=att, use_cache=False).last_hidden_state[:, pids.size(1) - 1:-1]
    logits = model.get_output_embeddings()(h)
    return torch.gather(F.log_softmax(logits, dim=-1), 2, cids.unsqueeze(-1)).squeeze(-1), cmask


def train(model, opt, prompts, comps, tool_mask, rewards, a):
    G = a.num_generations
    r = torch.tensor(rewards, dtype=torch.float32).view(-1, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    logp, cmask = logps(model, prompts, comps, model.config.pad_token_id or 0)
    tm = torch.zeros_like(cmask)
    for i, m in enumerate(tool_mask):
        tm[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    loss_mask = cmask * tm
    ratio = torch.exp(logp - logp.detach())
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - a.epsilon, 1 + a.epsilon) * adv)
    loss = (per_token * loss_mask).sum() / loss_mask.sum().clamp(min=1.0)  # dapo
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def main(a):
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    mdir = os.path.join(a.work, "model")
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(mdir),
                                                          attn_implementation="eager", torch_dtype=torch.float32)
    model.load_state_dict(read_weights(os.path.join(a.work, a.weights + ".safetensors")))
    model.float().eval()  # no dropout in Qwen2; eval() as TRL's generation does
    tok, tok_path = load_tokenizer(mdir)
    chat = Chat(tok_path, "auto")
    chat.load("tools need the chat template")
    server = Server(tok, tok_path, load_hosted(os.path.join(HERE, "agents_env.py"), "Lookup"), chat, "qwen")
    eos, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    ep = Episodes(model, server, eos, pad, a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    data = [json.loads(line) for line in open(os.path.join(a.work, "prompts.jsonl"))]
    P, G = a.prompts_per_step, a.num_generations
    times = []
    for step in range(a.steps):
        rows = [data[(step * P + p) % len(data)] for p in range(P) for _ in range(G)]
        t0 = time.perf_counter()
        server.reset(step, [{"index": 0, "prompt_ids": r["prompt_ids"], "fields": {k: v for k, v in r.items()
                                                                                  if k != "prompt_ids"}} for r in rows])
        prompts = [r["prompt_ids"] for r in rows]
        comps, tool_mask, calls, rounds = ep.run(step, prompts)
        rewards = server.finish(step, len(rows))["rewards"]
        t1 = time.perf_counter()
        model.train()
        train(model, opt, prompts, comps, tool_mask, rewards, a)
        model.eval()
        t2 = time.perf_counter()
        if step >= a.warmup:
            times.append((t2 - t0) * 1e3)
            print(json.dumps({"step": step, "ms": round((t2 - t0) * 1e3, 1), "gen_ms": round((t1 - t0) * 1e3, 1),
                              "train_ms": round((t2 - t1) * 1e3, 1), "rounds": rounds, "calls": calls,
                              "tokens": sum(len(c) for c in comps), "gen_tokens": sum(sum(m) for m in tool_mask),
                              "reward": sum(rewards) / len(rewards)}), flush=True)
    print(json.dumps({"summary": {"median_ms": statistics.median(times) if times else None, "steps": len(times),
                                  "torch": torch.__version__, "transformers": transformers.__version__},
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(A))
