#!/usr/bin/env python3
"""quick.py - the parsing and report half of tools/gpu-check-quick.sh (standard library only, so
the same file runs under the GPU machine's python3 and this machine's).

  quick.py median-ms JSONL              median 'ms' of a dfg --metrics file, step 1 left out
                                        (it captures the CUDA graphs)
  quick.py stage-ms JSONL STAGE        median over steps 2.. of one stage's stage_ms
  quick.py device-bytes LOG             the bytes of dfg run's 'device memory:' line
  quick.py lora MANIFEST OUT.json       step 1's table: MANIFEST lines are
                                        'shape impl variant LOG [JSONL]' (impl dfg: the run's
                                        log and --metrics file; torch: grpo_torch_lora.py's
                                        stdout); prints a markdown table, then one summary line
  quick.py decode JSONL BW_GBS L C H HKV D I V N LP
                                        decode tokens/s of a --metrics file (steps 2..) against
                                        the floor of reading the bf16 weights and each row's KV
                                        cache once per decode run at BW_GBS (read + write copy
                                        bandwidth); one line, and JSON on the last line
  quick.py logp-diff DUMP               max |sampling_logps - logp| over the completion mask of
                                        a dfg run --dump, and how many tokens differ
  quick.py kv-bytes INSPECT.json        the plan's KV cache (categories.kv_cache.max_bytes)
  quick.py roofline INSPECT.json JSONL  per stage: inspect --device's predicted ms against the
                                        measured stage_ms (steps 2..); exit 4 when the JSON has
                                        no predicted times
  quick.py tools-loop JSONL LOG INSPECT.json SFT OUT.json
                                        step 6: the GRPO steps (those after SFT warm-up steps)
                                        of the calculator's --metrics: median ms, and
                                        tools/call_frequency and reward over the last 20; the
                                        'device memory:' line of LOG against the plan's arena;
                                        one line, the data into OUT.json; exit 3 when no GRPO
                                        step logged tools/call_frequency
  quick.py reward-server                a reward program (docs/rewards.md) declaring 'reward':
                                        rewards 0, 0.5, 1 by row (varied, so advantages are not 0)
  quick.py copy-bandwidth               the host's copy bandwidth in GB/s (read + write), for
                                        the rehearsal's floor
  quick.py report ROWS.tsv DETAILS.md META.json DATA_DIR OUT.md OUT.json
                                        the results files: META's header, ROWS (step, verdict,
                                        text, seconds taken, seconds estimated), DETAILS, and
                                        each DATA_DIR/*.json as the step's data
"""
import glob
import json
import math
import os
import statistics
import struct
import sys
import time


def fail(msg):
    print(msg)
    sys.exit(3)


def metrics(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        fail(f"{path}: no steps")
    return rows[1:] if len(rows) > 1 else rows


def median_ms(path):
    return statistics.median(s["ms"] for s in metrics(path))


def device_bytes(log):
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("device memory:"):
                return int(line.split()[2])
    return None


def gib(b):
    if b is None:
        return "n/a"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.2f} MiB"


def torch_summary(path):
    """The summary (or skip) line of grpo_torch_lora.py's output, or {'error': last line}."""
    last = ""
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and ('"summary"' in line or '"skip"' in line):
                return json.loads(line)
            if line:
                last = line
    return {"error": last or "no output"}


def lora(manifest, out):
    runs = {}
    for line in open(manifest):
        p = line.split()
        if p:
            runs.setdefault((p[0], p[1], p[2]), []).append(p[3:])
    table, data, summary = [], [], []
    print("| shape | variant | dfg ms (runs) | torch + peft ms (runs) | torch / dfg | dfg device memory | "
          "torch max_memory_allocated (device used) | dfg / torch memory |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in dict.fromkeys(k[0] for k in runs):
        for variant in dict.fromkeys(k[2] for k in runs if k[0] == shape):
            d_runs, t_runs = runs.get((shape, "dfg", variant), []), runs.get((shape, "torch", variant), [])
            d_ms = [median_ms(r[1]) for r in d_runs]
            d_mem = max((device_bytes(r[0]) or 0 for r in d_runs), default=0) or None
            t = [torch_summary(r[0]) for r in t_runs]
            t_ok = [s for s in t if "summary" in s]
            t_ms = [s["median_ms"] for s in t_ok]
            t_mem = max((s.get("max_memory_allocated", 0) for s in t_ok), default=0) or None
            t_used = max((s.get("device_used_bytes", 0) for s in t_ok), default=0) or None
            rec = {"shape": shape, "variant": variant, "dfg_ms": d_ms, "torch_ms": t_ms, "dfg_device_bytes": d_mem,
                   "torch_max_memory_allocated": t_mem, "torch_device_used_bytes": t_used,
                   "torch_skip": [s.get("skip") or s.get("error") for s in t if "summary" not in s]}
            dm = statistics.median(d_ms) if d_ms else None
            tm = statistics.median(t_ms) if t_ms else None
            rec["speedup_torch_over_dfg"] = tm / dm if dm and tm else None
            rec["memory_dfg_over_torch"] = d_mem / t_mem if d_mem and t_mem else None
            if t_runs and not t_ok:
                t_cell = "SKIP: " + "; ".join(x for x in rec["torch_skip"] if x)
            else:
                t_cell = f"{tm:.1f} ({', '.join('%.1f' % x for x in t_ms)})" if tm else "not run"
            d_cell = f"{dm:.1f} ({', '.join('%.1f' % x for x in d_ms)})" if dm else "not run"
            ratio = f"x{rec['speedup_torch_over_dfg']:.2f}" if rec["speedup_torch_over_dfg"] else "-"
            mratio = f"{rec['memory_dfg_over_torch']:.2f}" if rec["memory_dfg_over_torch"] else "-"
            print(f"| {shape} | {variant} | {d_cell} | {t_cell} | {ratio} | {gib(d_mem)} | "
                  f"{gib(t_mem)} ({gib(t_used)}) | {mratio} |")
            data.append(rec)
            bits = [f"dfg {dm:.0f} ms" if dm else "dfg not run"]
            if tm:
                bits.append(f"torch {tm:.0f} ms (x{rec['speedup_torch_over_dfg']:.2f})" if dm else f"torch {tm:.0f} ms")
            elif t_runs:
                bits.append("torch SKIP")
            if mratio != "-":
                bits.append(f"memory dfg/torch {mratio}")
            summary.append(f"{shape} {variant}: " + ", ".join(bits))
    with open(out, "w") as f:
        json.dump({"runs": data}, f, indent=1)
    print("SUMMARY: " + "; ".join(summary))


def decode(path, bw, L, C, H, Hkv, D, I, V, N, Lp):
    steps = metrics(path)
    bw = float(bw) * 1e9
    L, C, H, Hkv, D, I, V, N, Lp = (int(x) for x in (L, C, H, Hkv, D, I, V, N, Lp))
    # bf16 weights: tied embedding, q/k/v/o, gate/up/down, the two norms, q/k/v biases; final norm
    weights = 2 * (V * C + L * (C * H * D + 2 * C * Hkv * D + H * D * C + 3 * C * I + 2 * C + H * D + 2 * Hkv * D) + C)
    runs = sum(s["stage_runs"].get("decode", 0) for s in steps)
    ms = sum(s["stage_ms"].get("decode", 0.0) for s in steps)
    if not runs or ms <= 0:
        fail(f"{path}: no decode stage ran")
    per = runs // len(steps)
    kv = sum(N * L * 2 * Hkv * D * 2 * (Lp + i + 1) for i in range(per)) * len(steps)  # bf16 keys and values read
    floor_ms = (weights * runs + kv) / bw * 1e3
    step_ms = sum(s["ms"] for s in steps) / len(steps)
    print(f"{runs} decode runs of {N} rows in {ms:.0f} ms: {N * runs / (ms * 1e-3):.0f} tokens/s, {ms / runs:.3f} ms a run; "
          f"floor {floor_ms / runs:.3f} ms a run (bf16 weights {gib(weights)} + KV caches, at {bw * 1e-9:.1f} GB/s "
          f"copy bandwidth): {100 * floor_ms / ms:.0f}% of it ({ms / floor_ms:.2f}x the floor); step {step_ms:.0f} ms")
    print(json.dumps({"decode_runs": runs, "decode_ms": ms, "tokens_per_s": N * runs / (ms * 1e-3),
                      "ms_per_run": ms / runs, "floor_ms_per_run": floor_ms / runs, "over_floor": ms / floor_ms,
                      "bandwidth_gbs": bw * 1e-9, "weights_bytes": weights, "step_ms": step_ms}))


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        raw = body[a:b]
        if t["dtype"] == "F32":
            out[name] = struct.unpack("<%df" % (len(raw) // 4), raw)
        elif t["dtype"] == "BF16":
            out[name] = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        elif t["dtype"] == "I32":
            out[name] = struct.unpack("<%di" % (len(raw) // 4), raw)
    return out


def logp_diff(path):
    t = st_read(path)
    for name in ("sampling_logps", "logp", "completion_mask"):
        if name not in t:
            fail(f"{path} has no '{name}' (dfg run --dump of a plan that samples with the correction on)")
    s, l, m = t["sampling_logps"], t["logp"], t["completion_mask"]
    if not (len(s) == len(l) == len(m)):
        fail(f"{path}: sampling_logps, logp and completion_mask differ in size ({len(s)}, {len(l)}, {len(m)})")
    diffs = [abs(a - b) for a, b, k in zip(s, l, m) if k]
    bad = [d for d in diffs if not math.isfinite(d)]
    if bad:
        fail(f"{path}: {len(bad)} log-probs are not finite")
    print(json.dumps({"max_abs_diff": max(diffs, default=0.0), "tokens": len(diffs),
                      "tokens_differing": sum(1 for d in diffs if d != 0)}))


def kv_bytes(path):
    print(json.load(open(path))["categories"]["kv_cache"]["max_bytes"])


def predicted_ms(stage):
    """The per-stage predicted time of inspect --device's JSON: a key naming a prediction in ms."""
    for k, v in stage.items():
        if isinstance(v, (int, float)) and ("predicted" in k or "roofline" in k) and k.endswith("ms"):
            return float(v), k
    for k, v in stage.items():  # or a nested {"predicted": {"ms": ...}} / {"roofline": {...}}
        if isinstance(v, dict) and ("predicted" in k or "roofline" in k):
            for kk, vv in v.items():
                if isinstance(vv, (int, float)) and kk.endswith("ms"):
                    return float(vv), f"{k}.{kk}"
    return None, None


def bound_of(stage):
    for k, v in stage.items():
        if "bound" in k and isinstance(v, str):
            return v
        if isinstance(v, dict):
            for kk, vv in v.items():
                if "bound" in kk and isinstance(vv, str):
                    return vv
    return ""


def roofline(inspect_path, jsonl):
    """inspect --device's prediction {step_ms, stages [{name, predicted_ms, bound}]} (or, older,
    a predicted time in each of the top-level stages) against the measured stage_ms."""
    ins = json.load(open(inspect_path))
    steps = metrics(jsonl)
    measured = {}
    for s in steps:
        for name, ms in s.get("stage_ms", {}).items():
            measured.setdefault(name, []).append(ms)
    pred = ins.get("prediction") or {}
    rows, key = [], None
    for st in pred.get("stages") or ins.get("stages", []):
        p, k = predicted_ms(st)
        if p is None:
            continue
        key = key or k
        m = statistics.median(measured[st["name"]]) if st["name"] in measured else None
        rows.append({"stage": st["name"], "predicted_ms": p, "measured_ms": m, "bound": bound_of(st),
                     "measured_over_predicted": m / p if m is not None and p > 0 else None})
    if not rows:
        print(f"{inspect_path}: no stage has a predicted time (looked for prediction.stages[].predicted_ms, or a key "
              f"with 'predicted' or 'roofline' ending in 'ms' in each of stages[])")
        sys.exit(4)
    print(f"| stage | predicted ms ({key}) | measured ms (median, steps 2..) | measured / predicted | bound |")
    print("|---|---|---|---|---|")
    for r in rows:
        m = "not run" if r["measured_ms"] is None else f"{r['measured_ms']:.4g}"
        q = "-" if r["measured_over_predicted"] is None else f"{r['measured_over_predicted']:.3g}"
        print(f"| {r['stage']} | {r['predicted_ms']:.4g} | {m} | {q} | {r['bound']} |")
    both = [r for r in rows if r["measured_over_predicted"] is not None]
    within = sum(1 for r in both if 0.5 <= r["measured_over_predicted"] <= 2.0)
    out = {"stages": rows, "within_2x": within, "compared": len(both),
           "predicted_ms": sum(r["predicted_ms"] for r in both), "measured_ms": sum(r["measured_ms"] for r in both),
           "device": pred.get("device"), "device_label": pred.get("device_label"), "runs_from": pred.get("runs_from"),
           "predicted_step_ms": pred.get("step_ms"), "measured_step_ms": statistics.median(s["ms"] for s in steps)}
    print(json.dumps(out))


def tools_loop(jsonl, log, inspect_path, sft, out):
    with open(jsonl) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    grpo = [r for r in rows if r.get("step", 0) > int(sft)]
    if not grpo or any(r.get("tools/call_frequency") is None for r in grpo):
        fail(f"{jsonl}: {len(grpo)} GRPO steps after {sft} warm-up steps, not all with tools/call_frequency")
    last = grpo[-20:]
    timed = grpo[1:] if len(grpo) > 1 else grpo  # the first GRPO step captures its graphs
    arena = json.load(open(inspect_path)).get("arena_bytes")
    dev = device_bytes(log)
    d = {"grpo_steps": len(grpo), "median_ms": statistics.median(r["ms"] for r in timed),
         "call_frequency_last": statistics.mean(r["tools/call_frequency"] for r in last),
         "reward_last": statistics.mean(r["reward"] for r in last), "last_n": len(last),
         "arena_bytes": arena, "device_bytes": dev}
    with open(out, "w") as f:
        json.dump(d, f)
    print(f"{d['grpo_steps']} GRPO steps after {sft} warm-up steps: {d['median_ms']:.1f} ms a step (median); "
          f"over the last {d['last_n']}: tools/call_frequency {d['call_frequency_last']:.3f}, reward "
          f"{d['reward_last']:.3f}; device memory {gib(dev)} against the plan's arena {gib(arena)}")


def reward_server():
    print(json.dumps({"reward_funcs": ["reward"]}), flush=True)
    for line in sys.stdin:
        if line.strip():
            n = len(json.loads(line)["rows"])
            print(json.dumps({"rewards": [[0.5 * (i % 3)] for i in range(n)]}), flush=True)


def copy_bandwidth():
    a, b = bytearray(256 << 20), bytearray(256 << 20)
    b[:] = a  # the pages touched before timing
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        b[:] = a
        best = min(best, time.perf_counter() - t0)
    print(f"{2 * len(a) / best * 1e-9:.1f}")


def report(rows_tsv, details, meta_path, data_dir, out_md, out_json):
    meta = json.load(open(meta_path))
    rows = [line.rstrip("\n").split("\t") for line in open(rows_tsv) if line.strip()]
    data = {}
    for p in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        try:
            data[os.path.basename(p)[:-5]] = json.load(open(p))
        except ValueError as e:
            data[os.path.basename(p)[:-5]] = {"unreadable": str(e)}
    n_fail = sum(1 for r in rows if r[1] == "FAIL")
    n_skip = sum(1 for r in rows if r[1] == "SKIP")
    overall = "FAIL" if n_fail else "PASS"
    with open(out_md, "w") as f:
        f.write(f"# gpu-check --quick{' (rehearsal)' if meta.get('rehearsal') else ''}, {meta['date']}, {meta['host']}\n\n")
        for line in meta.get("header", []):
            f.write(line + "\n")
        f.write(f"\n**{overall}**: {n_fail} failed, {n_skip} skipped; {meta.get('wall_s', 0):.0f} s in all "
                f"(tools/gpu-check-quick.sh's header says what each step measures).\n\n")
        f.write("| step | result | what it saw | took s | estimated s |\n|---|---|---|---|---|\n")
        for r in rows:
            text = r[2].replace("|", "\\|")
            f.write(f"| {r[0]} | **{r[1]}** | {text} | {r[3] if len(r) > 3 else ''} | {r[4] if len(r) > 4 else ''} |\n")
        f.write("\n")
        f.write(open(details).read())
    rec = dict(meta, overall=overall, failed=n_fail, skipped=n_skip,
               steps=[{"step": r[0], "result": r[1], "text": r[2], "took_s": float(r[3]) if len(r) > 3 and r[3] else None,
                       "estimated_s": float(r[4]) if len(r) > 4 and r[4] else None} for r in rows], data=data)
    with open(out_json, "w") as f:
        json.dump(rec, f, indent=1)
    print(overall)


def main(argv):
    cmds = {"median-ms": lambda a: print(f"{median_ms(a[0]):.3f}"),
            "stage-ms": lambda a: print(f"{statistics.median(s['stage_ms'].get(a[1], 0.0) for s in metrics(a[0])):.3f}"),
            "device-bytes": lambda a: print(device_bytes(a[0]) or ""),
            "lora": lambda a: lora(*a), "decode": lambda a: decode(*a), "logp-diff": lambda a: logp_diff(*a),
            "kv-bytes": lambda a: kv_bytes(*a), "roofline": lambda a: roofline(*a), "tools-loop": lambda a: tools_loop(*a),
            "reward-server": lambda a: reward_server(), "copy-bandwidth": lambda a: copy_bandwidth(),
            "report": lambda a: report(*a)}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__)
        return 2
    cmds[argv[1]](argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
