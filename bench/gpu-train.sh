#!/usr/bin/env bash
# GPT-2-small and GPT-2-medium training steps on one GPU: tp-run (--device
# cuda, f32) against PyTorch eager and torch.compile at f32, TF32 and bf16 on
# the same machine. Per run: the median step after 5 warm-up steps, tokens/s,
# MFU (6 x parameters x tokens/s over the precision's dense peak, H100 SXM
# figures unless PEAK_TFLOPS=f32,tf32,bf16 says otherwise) and peak device
# memory (tp-run's against its plan's planned peak). Runs where a GPU is,
# from a build directory or the bundle of tools/gpu-bundle.sh:
#
#   bench/gpu-train.sh BUILD_DIR|BUNDLE [STEPS] [BATCH] [SEQ] [OUT]
#
# MODELS (default "gpt2-small gpt2-medium": bench/NAME/config.json),
# TPC_PRECISIONS (tp-run's matmul precisions; default "f32 bf16"), MODES and
# PRECISIONS (PyTorch's runs; default "eager compile" and "f32 tf32 bf16") and DEVICE/TORCH_DEVICE (default cuda) let the script be
# tried on a CPU or fit a short lease.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "$1" && pwd)
steps=${2:-20} batch=${3:-8} seq=${4:-1024} out=${5:-/tmp/gpu-train}
models=${MODELS:-gpt2-small gpt2-medium}
modes=${MODES:-eager compile} precisions=${PRECISIONS:-f32 tf32 bf16}
tpc_precisions=${TPC_PRECISIONS:-f32 bf16}
device=${DEVICE:-cuda} torch_device=${TORCH_DEVICE:-cuda}
warmup=5
[ -f "$build/env.sh" ] && source "$build/env.sh"
bin=$build/bin
python=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true

# Byte-level tokens of our own docs: enough text for any batch here.
cat "$root/README.md" "$root"/docs/*.md > "$out/text.txt"
"$bin/tpc-tokenize" "$out/text.txt" -o "$out/text.tokens" > /dev/null
for model in $models; do
  config=$root/bench/$model/config.json
  [ -f "$config" ] || config=$model # a path to a config.json
  name=$(basename "$(dirname "$config")")
  echo "== $name, batch $batch, seq $seq"
  "$bin/tpc-import" "$config" --batch "$batch" --seq "$seq" -o "$out/$name.mlir"
  for precision in $tpc_precisions; do
    "$bin/tpc-opt" "$out/$name.mlir" --tp-pipeline="train precision=$precision" \
      -o "$out/$name-$precision.tpplan"
    "$bin/tp-run" "$out/$name-$precision.tpplan" --data "$out/text.tokens" \
      --device "$device" --steps $((warmup + steps)) \
      --metrics "$out/$name-tpc-$precision.json" > "$out/$name-tpc-$precision.log"
  done
  rm -f "$out/$name-torch.jsonl"
  for mode in $modes; do
    for precision in $precisions; do
      "$python" "$root/bench/torch_train_step.py" --config "$config" \
        --batch "$batch" --seq "$seq" --steps "$steps" --warmup $warmup \
        --mode $mode --precision $precision --device "$torch_device" \
        >> "$out/$name-torch.jsonl" 2> "$out/$name-torch-$mode-$precision.log" ||
        echo "{\"mode\": \"$mode\", \"precision\": \"$precision\", \"failed\": true}" \
          >> "$out/$name-torch.jsonl"
    done
  done
  "$python" - "$out/$name-torch.jsonl" $warmup "${PEAK_TFLOPS:-67,495,989}" \
    "$out/$name"-tpc-*.json <<'PY'
import json, statistics, sys
torch_runs = [json.loads(line) for line in open(sys.argv[1])]
warmup = int(sys.argv[2])
peaks = dict(zip(["f32", "tf32", "bf16"], (float(x) * 1e12 for x in sys.argv[3].split(","))))
params = next((r["params"] for r in torch_runs if "params" in r), None)
def mfu(rate, precision):
    return f"{6 * params * rate / peaks[precision]:.1%}" if params else "?"
print(f"{'run':28} {'step ms':>9} {'tokens/s':>10} {'MFU':>6} {'peak GB':>8}")
tpc_rate = {}
for path in sys.argv[4:]:
    tpc = json.load(open(path))
    precision = path.rsplit("-", 1)[1].removesuffix(".json")
    seconds = statistics.median(r["seconds"] for r in tpc["loss_curve"][warmup:])
    tokens = tpc_rate[precision] = tpc["tokens_per_step"] / seconds
    mem = tpc["memory"]
    label = f"tpc {precision} ({tpc['device']['name']})"
    print(f"{label:28} {seconds * 1e3:9.1f} {tokens:10.0f} "
          f"{mfu(tokens, precision):>6} {mem['device_peak_bytes'] / 1e9:8.2f}"
          f"  (planned {mem['planned_peak_bytes'] / 1e9:.2f})")
torch_rate = {}
for r in torch_runs:
    label = f"torch {r['mode']} {r['precision']}"
    if r.get("failed"):
        print(f"{label:28} failed")
        continue
    torch_rate[(r["mode"], r["precision"])] = r["tokens_per_second"]
    print(f"{label:28} {r['step_ms']:9.1f} {r['tokens_per_second']:10.0f} "
          f"{mfu(r['tokens_per_second'], r['precision']):>6} {r['peak_bytes'] / 1e9:8.2f}")
for precision, rate in tpc_rate.items():
    for mode in ("eager", "compile"):
        if (mode, precision) in torch_rate:
            print(f"tpc {precision} / torch {mode} {precision}: "
                  f"{rate / torch_rate[(mode, precision)]:.2f}x tokens/s")
PY
done
