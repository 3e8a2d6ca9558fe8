#!/usr/bin/env bash
# The main job on the bundled default: builds tpc (installing dependencies
# first if needed), imports the bundled GPT-2 config (byte-level vocabulary),
# compiles it to a 1D tensor-parallel training plan and trains it on RANKS
# MPI ranks (default 2, one per core of a 2-core machine) on English text
# from Debian's `fortunes` package, the last 5 % held out (validation loss
# and perplexity every 50 steps), then draws the training and validation
# curves, exports the model in HuggingFace layout and prints the last training
# and validation losses and a short sample from the model. STEPS=N overrides
# the 400 steps.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
config=$root/examples/gpt2-bytes/config.json
steps=${STEPS:-400}
ranks=${RANKS:-2}
work=$build/example
fortunes=/usr/share/games/fortunes
mkdir -p "$work"

"$root/tools/build.sh" >/dev/null
bin=$build/bin

# Plain text: the fortune files without their "%" separator lines.
(cd "$fortunes" && sed '/^%$/d' computers science literature wisdom humorists \
  work education riddles fortunes linux magic) > "$work/fortunes.txt"

set -x
"$bin/tpc-tokenize" "$work/fortunes.txt" -o "$work/fortunes.tokens"
"$bin/tpc-import" "$config" --batch 8 --seq 128 --kv-cache 128 -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="mode=1d grid=$ranks" \
  -o "$work/model.tpplan"
# OpenMPI refuses root unless told; each rank computes on one thread.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
mpirun -np "$ranks" --oversubscribe -x OPENBLAS_NUM_THREADS=1 \
  "$bin/tp-run" "$work/model.tpplan" --data "$work/fortunes.tokens" --threads 1 \
  --steps "$steps" --lr 1e-3 --warmup 40 \
  --eval-every 50 --eval-fraction 0.05 --eval-tokens 8192 \
  --checkpoint-dir "$work/checkpoints" --checkpoint-every 100 \
  --metrics "$work/train.json" --plot "$work/loss.svg" --export "$work/export"
# A sample from the trained model: 120 bytes after "The ", top-k sampling,
# with @prefill and @decode over KV caches (tpc-import --kv-cache).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
mpirun -np "$ranks" --oversubscribe -x OPENBLAS_NUM_THREADS=1 \
  "$bin/tp-run" "$work/model.tpplan" --weights "$work/export/model.safetensors" \
  --threads 1 --generate 120 --prompt "The " --temperature 0.8 --top-k 40 \
  --seed 1 > "$work/sample.txt"
{ set +x; } 2>/dev/null
python3 - "$work/train.json" <<'PY'
import json, math, sys
m = json.load(open(sys.argv[1]))
train = m["loss_curve"][-1]
held = m["eval_curve"][-1]
print(f"step {train['step']}: training loss {train['loss']:.4f}, validation loss {held['loss']:.4f} "
      f"(perplexity {held['perplexity']:.2f}, {held['tokens']} held-out tokens)")
PY
echo "sample:"
sed 's/^/  /' "$work/sample.txt"
echo "loss curve: $work/loss.svg; metrics: $work/train.json;" \
  "checkpoints: $work/checkpoints; HF export: $work/export"
