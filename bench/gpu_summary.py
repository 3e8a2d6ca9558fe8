"""Tables (Markdown) and a JSON summary of bench/gpu-train.sh's and
bench/gpu-decode.sh's records.

  gpu_summary.py train OUT/train.jsonl --dir OUT --device NAME
      [--peak-tflops F32,TF32,BF16]
  gpu_summary.py decode OUT/decode.jsonl --dir OUT

train: per model and batch, each run's median step, tokens/s, MFU (model
FLOPs per token, 6N + 12·L·s·h with N the parameters that multiply, times
tokens/s, over the device's dense peak of the precision) and peak memory;
the ratios the GPU-speed targets name; and for each tp-run the time per op
kind over its op-by-op steps. Writes OUT/train-summary.json too.
decode: prefill ms and decode tokens/s of tp-run --generate against
HuggingFace generate(). Writes OUT/decode-summary.json too.
"""

import argparse
import json
import os
import statistics
import sys

# Dense peaks in TFLOP/s (f32 without TF32, TF32, bf16), by GPU name.
PEAKS = [
    ("H100 PCIe", (51.0, 378.0, 756.0)),
    ("H100", (67.0, 495.0, 989.0)),  # SXM
    ("H200", (67.0, 495.0, 989.0)),
    ("A100", (19.5, 156.0, 312.0)),
]


def peaks_for(device, override):
    if override:
        values = [float(x) for x in override.split(",")]
        return dict(zip(["f32", "tf32", "bf16"], values)), "given"
    for name, values in PEAKS:
        if name in device:
            return dict(zip(["f32", "tf32", "bf16"], values)), name
    return dict(zip(["f32", "tf32", "bf16"], PEAKS[1][1])), "H100 SXM (assumed)"


def tpc_flops_per_token(params, config_path, seq):
    """6N + 12 L s h from the plan's parameter count and the config."""
    config = json.load(open(config_path))
    n = params
    hidden = config.get("hidden_size", config.get("n_embd"))
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    vocab = config["vocab_size"]
    tied = config.get("tie_word_embeddings",
                      config["model_type"] == "gpt2")
    lookups = 0 if tied else vocab * hidden
    if config["model_type"] == "gpt2":
        lookups += config["n_positions"] * hidden
    return 6 * (n - lookups) + 12 * layers * seq * hidden


def load_tpc(record, directory):
    metrics = json.load(open(os.path.join(directory, record["metrics"])))
    warmup = record.get("warmup", 3)
    curve = metrics["loss_curve"]
    seconds = statistics.median(r["seconds"] for r in curve[warmup:] or curve)
    tokens = metrics["tokens_per_step"]
    # The per-op profile: the steps run op by op after the first, whose
    # times include one-time setup (library plans, allocations); the first
    # alone where it is the only one.
    op_steps = metrics.get("op_steps", 1)
    first = metrics.get("first_step_ops", {})
    if op_steps >= 2 and first:
        ops = {kind: (s["seconds"] - first.get(kind, {}).get("seconds", 0.0))
               / (op_steps - 1) for kind, s in metrics["ops"].items()}
        profiled = f"{op_steps - 1} warm op-by-op step" + \
            ("s" if op_steps > 2 else "")
    else:
        ops = {kind: s["seconds"] / max(op_steps, 1)
               for kind, s in metrics["ops"].items()}
        profiled = "the first step, one-time setup included"
    memory = metrics["memory"]
    return {
        "step_ms": seconds * 1e3,
        "tokens_per_second": tokens / seconds,
        # The device's peak; on a CPU the process's resident peak.
        "peak_bytes": memory.get("device_peak_bytes") or
                      memory.get("max_rss_bytes", 0),
        "planned_peak_bytes": memory.get("planned_peak_bytes", 0),
        "model_flops_per_token": tpc_flops_per_token(
            record["params"], record["config"], record["seq"]),
        "kernels": metrics["device"].get("kernels", ""),
        "op_seconds_per_step": ops,
        "op_profile": profiled,
        "loss_first": curve[0]["loss"], "loss_last": curve[-1]["loss"],
    }


def fmt_gb(n):
    return f"{n / 1e9:.2f}" if n else "-"


def train(args):
    records = [json.loads(line) for line in open(args.jsonl) if line.strip()]
    peaks, peak_name = peaks_for(args.device, args.peak_tflops)
    out = []
    for r in records:
        row = dict(r)
        if r["system"] == "tpc" and "metrics" in r:
            try:
                row.update(load_tpc(r, args.dir))
            except (OSError, KeyError, ValueError) as error:
                row["failed"] = f"unreadable metrics: {error}"
        if "tokens_per_second" in row and row.get("model_flops_per_token"):
            row["mfu"] = (row["model_flops_per_token"] * row["tokens_per_second"]
                          / (peaks[row["precision"]] * 1e12))
        out.append(row)
    print(f"# Training steps on {args.device}\n")
    print(f"MFU against the dense peaks of {peak_name}: "
          f"f32 {peaks['f32']:g}, tf32 {peaks['tf32']:g}, bf16 {peaks['bf16']:g} "
          "TFLOP/s; model FLOPs per token 6N + 12·L·s·h.\n")
    groups = {}
    for row in out:
        groups.setdefault((row["model"], row["batch"], row["seq"]), []).append(row)
    targets = []
    for (model, batch, seq), rows in groups.items():
        print(f"## {model}, batch {batch} x {seq}\n")
        print("| run | step ms | tokens/s | MFU | peak GB | planned GB |")
        print("|---|---:|---:|---:|---:|---:|")
        rate = {}
        peak = {}
        for row in rows:
            label = (f"tpc {row['precision']}" if row["system"] == "tpc"
                     else f"torch {row['mode']} {row['precision']}")
            if "tokens_per_second" not in row:
                print(f"| {label} | {row.get('failed') or 'skipped: ' + row.get('skipped', '?')} | | | | |")
                continue
            key = (row["system"], row["mode"], row["precision"])
            rate[key] = row["tokens_per_second"]
            peak[key] = row.get("peak_bytes", 0)
            print(f"| {label} | {row['step_ms']:.1f} | {row['tokens_per_second']:.0f} | "
                  f"{row.get('mfu', 0):.1%} | {fmt_gb(row.get('peak_bytes', 0))} | "
                  f"{fmt_gb(row.get('planned_peak_bytes', 0))} |")
        print()

        def ratio(name, a, b, want):
            if a in rate and b in rate:
                value = rate[a] / rate[b]
                targets.append({"model": model, "batch": batch, "seq": seq,
                                "target": name, "ratio": value, "want": want,
                                "met": value >= want})
                print(f"- {name}: {value:.2f}x (target {want:g}x: "
                      f"{'met' if value >= want else 'missed'})")
        ratio("tpc bf16 / torch.compile bf16", ("tpc", "tp-run", "bf16"),
              ("torch", "compile", "bf16"), 1.0)
        ratio("tpc bf16 / torch eager bf16", ("tpc", "tp-run", "bf16"),
              ("torch", "eager", "bf16"), 1.5 if model.startswith("gpt2") else 1.0)
        ratio("tpc f32 / torch eager f32", ("tpc", "tp-run", "f32"),
              ("torch", "eager", "f32"), 1.0)
        for precision in ("f32", "bf16"):
            mine, theirs = ("tpc", "tp-run", precision), ("torch", "eager", precision)
            if peak.get(mine) and peak.get(theirs):
                met = peak[mine] <= peak[theirs]
                targets.append({"model": model, "batch": batch, "seq": seq,
                                "target": f"peak memory {precision} <= torch eager",
                                "ratio": peak[mine] / peak[theirs], "want": 1.0,
                                "met": met})
                print(f"- peak memory {precision}: tpc {fmt_gb(peak[mine])} GB, "
                      f"torch eager {fmt_gb(peak[theirs])} GB "
                      f"({'met' if met else 'missed'})")
        for row in rows:
            if (row["system"] == "tpc" and row["precision"] == "bf16"
                    and model.startswith("llama") and "mfu" in row):
                met = row["mfu"] >= 0.45
                targets.append({"model": model, "batch": batch, "seq": seq,
                                "target": "tpc bf16 MFU >= 45%",
                                "ratio": row["mfu"], "want": 0.45, "met": met})
                print(f"- tpc bf16 MFU {row['mfu']:.1%} (target 45%: "
                      f"{'met' if met else 'missed'})")
        print()
        for row in rows:
            ops = row.get("op_seconds_per_step")
            if not ops:
                continue
            total = sum(ops.values()) or 1.0
            print(f"tpc {row['precision']}, time per op kind "
                  f"({row.get('op_profile', 'op-by-op steps')}, each op "
                  f"synchronised; {total * 1e3:.1f} ms in all):\n")
            print("| op | ms per step | share |")
            print("|---|---:|---:|")
            for kind, seconds in sorted(ops.items(), key=lambda kv: -kv[1])[:12]:
                print(f"| {kind} | {seconds * 1e3:.2f} | {seconds / total:.1%} |")
            print()
            if row.get("kernels"):
                print(f"kernels: {row['kernels']}\n")
    summary = {"device": args.device, "peaks_tflops": peaks,
               "peaks_of": peak_name, "runs": out, "targets": targets}
    path = os.path.join(args.dir, "train-summary.json")
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(path + ".tmp", path)


def decode(args):
    records = [json.loads(line) for line in open(args.jsonl) if line.strip()]
    print("# Decoding (batch 1, greedy, KV caches)\n")
    print("| run | prompt | new | prefill ms | decode tokens/s |")
    print("|---|---:|---:|---:|---:|")
    rates = {}
    for r in records:
        label = f"{r['system']} {r['precision']}"
        if "decode_tokens_per_second" not in r:
            print(f"| {label} | {r.get('prompt', '')} | {r.get('new', '')} | "
                  f"{r.get('failed') or 'skipped: ' + r.get('skipped', '?')} | |")
            continue
        rates[(r["system"], r["precision"])] = r["decode_tokens_per_second"]
        print(f"| {label} | {r['prompt']} | {r['new']} | {r['prefill_ms']:.1f} | "
              f"{r['decode_tokens_per_second']:.0f} |")
    print()
    for precision in ("f32", "bf16"):
        if ("tpc", precision) in rates and ("hf", precision) in rates:
            print(f"- tpc / HF generate, {precision}: "
                  f"{rates[('tpc', precision)] / rates[('hf', precision)]:.2f}x")
    path = os.path.join(args.dir, "decode-summary.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"runs": records}, f, indent=1)
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "decode"])
    p.add_argument("jsonl")
    p.add_argument("--dir", required=True)
    p.add_argument("--device", default="?")
    p.add_argument("--peak-tflops")
    args = p.parse_args()
    (train if args.what == "train" else decode)(args)


if __name__ == "__main__":
    sys.exit(main())
