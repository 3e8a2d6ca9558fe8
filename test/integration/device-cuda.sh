#!/usr/bin/env bash
# The CUDA backend against the CPU backend, for a small GPT-2 or LLaMA model
# (training against PyTorch on the GPU: training-numerics.sh ... cuda):
#  1. one rank: 6 AdamW steps on cuda match the CPU's losses and exported
#     weights within f32 tolerances (different summation orders), and a
#     checkpoint resumed on cuda ends where the uninterrupted cuda run does,
#     bit for bit (the kernels are reproducible);
#  2. the NCCL path on one rank (a 1D plan over a grid of 1: every
#     collective through NCCL; a 3D plan over 1x1x1: the feature-split
#     norms and the vocabulary-parallel loss on the device with their
#     statistics gathered over NCCL) matches the one-rank run; 2 and 4 ranks on
#     the one GPU, their collectives staged through the host over MPI (1D
#     with sequence parallelism and ring matmuls, 2D 2x2), match the
#     one-rank cuda run within the 1D test's tolerances;
#  3. pp 2 (1F1B, 4 micro-batches) matches the one-rank cuda run: with a GPU
#     per rank its transfers go over NCCL, matched in order per direction
#     between the stages, else (two ranks on one GPU) staged over MPI; the
#     progress log must name the path;
#  4. the metrics name the device and the collective path; the device's peak
#     memory is the planned peak plus cuBLAS's workspace (32 MiB) and at
#     most 1 MiB of kernel scratch; steps after the first replay a CUDA
#     graph.
# Skipped (exit 77) where tp-run cannot use a GPU.
#
#   device-cuda.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=6 lr=1e-3
bin=$build/bin
device=cuda
source "$(dirname "${BASH_SOURCE[0]}")/device-probe.sh"
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"

compile() { # NAME PIPELINE-OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="train $2" 2> /dev/null
}
same_as_cuda() { # NAME: its losses and export against the one-rank cuda run
  $check losses "$work/cuda.json" "$work/$1.json" --rel 1e-4
  $check weights "$work/cuda/model.safetensors" "$work/$1/model.safetensors" \
    --rel 1e-4 $keybias
}
device_is() { # METRICS NAME COLLECTIVES-PREFIX
  "$python" - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["device"]
if d["name"] != sys.argv[2] or not d["collectives"].startswith(sys.argv[3]):
    sys.exit(f"device: {d}")
PY
}

echo "== $model, one rank: cuda against cpu"
compile one ""
train 1 "$work/one.tpplan" "$work/cpu" --device cpu --steps $steps --export "$work/cpu"
train 1 "$work/one.tpplan" "$work/cuda" --device cuda --steps $steps \
  --export "$work/cuda"
device_is "$work/cuda.json" cuda ""
# Device memory: the planned peak plus cuBLAS's 32 MiB workspace and the
# kernels' small scratch; steps 2 on replayed from the recorded graph.
"$python" - "$work/cuda.json" $steps <<'PY'
import json, sys
metrics = json.load(open(sys.argv[1]))
m = metrics["memory"]
peak, planned = m["device_peak_bytes"], m["planned_peak_bytes"]
if not planned + (32 << 20) <= peak <= planned + (33 << 20):
    sys.exit(f"device peak {peak} bytes, planned {planned}")
if metrics["device"]["replayed_steps"] != int(sys.argv[2]) - 1:
    sys.exit(f"replayed: {metrics['device']}")
PY
$check losses "$work/cpu.json" "$work/cuda.json" --rel 1e-4
$check weights "$work/cpu/model.safetensors" "$work/cuda/model.safetensors" \
  --rel 1e-4 $keybias
train 1 "$work/one.tpplan" "$work/stopped" --device cuda --steps 3 \
  --checkpoint-dir "$work/ckpt"
train 1 "$work/one.tpplan" "$work/resumed" --device cuda --steps $steps \
  --resume "$work/ckpt" --export "$work/resumed"
cmp "$work/cuda/model.safetensors" "$work/resumed/model.safetensors"

echo "== $model, the NCCL path on one rank (1D over a grid of 1)"
compile nccl1 "mode=1d grid=1 seq-parallel"
train 1 "$work/nccl1.tpplan" "$work/nccl1" --device cuda --steps $steps \
  --export "$work/nccl1"
device_is "$work/nccl1.json" cuda "NCCL"
same_as_cuda nccl1

echo "== $model, 3D over a grid of 1x1x1: split norms, vocabulary-parallel loss on NCCL"
compile nccl3d "mode=3d grid=1x1x1"
train 1 "$work/nccl3d.tpplan" "$work/nccl3d" --device cuda --steps $steps \
  --export "$work/nccl3d"
device_is "$work/nccl3d.json" cuda "NCCL"
same_as_cuda nccl3d

echo "== $model, 2 and 4 ranks on one GPU (collectives staged over MPI)"
compile 1d "mode=1d grid=2 seq-parallel collective-matmul"
train 2 "$work/1d.tpplan" "$work/1d" --device cuda --steps $steps --export "$work/1d"
device_is "$work/1d.json" cuda "MPI staged through the host"
same_as_cuda 1d
compile 2d "mode=2d grid=2x2"
train 4 "$work/2d.tpplan" "$work/2d" --device cuda --steps $steps --export "$work/2d"
same_as_cuda 2d

echo "== $model, pp 2 (1F1B) on the GPU"
compile pp2 "mode=1d grid=1 pp=2 microbatches=4"
train 2 "$work/pp2.tpplan" "$work/pp2" --device cuda --steps $steps \
  --export "$work/pp2"
same_as_cuda pp2
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -ge 2 ]; then
  path="NCCL, matched in order per pair of stages"
else
  path="MPI staged through the host"
fi
grep -qx "pipeline transfers: $path" "$work/pp2.log" || {
  grep "pipeline transfers" "$work/pp2.log"
  echo "pp2: expected the transfers to go over: $path ($gpus GPUs)" >&2
  exit 1
}
echo "pp2: transfers over $path"
