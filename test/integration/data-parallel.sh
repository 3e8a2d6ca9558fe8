#!/usr/bin/env bash
# Data parallelism (tp-pipeline dp=N) around the tensor-parallel schemes,
# against the one-rank run, for a small GPT-2 or LLaMA (GQA) model:
#   dp 2 x 1D 2 (4 ranks), the same with ZeRO-1 (shard-optimizer=true),
#   dp 2 x 2D 2x2 (8 ranks, oversubscribed) with and without ZeRO-1, and
#   dp 2 alone (2 ranks).
#  1. the loss of each of 5 AdamW steps and every parameter afterwards (the
#     export) match the one-rank plan's within the tolerances of the 1D test;
#  2. the bytes each rank sends per step equal tpc-opt's static report, per
#     collective kind; the static report's traffic per transformer layer
#     equals docs/schemes.md's formula with the replicas' gradient sums, for
#     every mode with and without ZeRO-1 (compiled for batch 8, seq 16);
#  3. a run stopped at step 3 with ZeRO-1 (optimizer state split over the
#     replicas) resumes on 2D without replicas, and one stopped on 3D resumes
#     with ZeRO-1, both ending at the one-rank run's weights.
#
#   data-parallel.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=5 lr=3e-4
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"
compile() { # NAME PIPELINE-OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$2" 2> "$work/$1.remarks"
}

compile one ""
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"

for run in "dp2-1d2:mode=1d grid=2 dp=2:4" \
           "dp2-1d2-zero:mode=1d grid=2 dp=2 shard-optimizer=true:4" \
           "dp2-2d:mode=2d grid=2x2 dp=2:8" \
           "dp2-2d-zero:mode=2d grid=2x2 dp=2 shard-optimizer=true:8" \
           "dp2:mode=1d grid=1 dp=2:2"; do
  IFS=: read -r name options ranks <<< "$run"
  echo "== $model, $options ($ranks ranks)"
  compile "$name" "$options"
  train "$ranks" "$work/$name.tpplan" "$work/$name" --steps $steps \
    --export "$work/$name"
  $check losses "$work/one.json" "$work/$name.json"
  $check weights "$work/one/model.safetensors" "$work/$name/model.safetensors" $keybias
  $check same-volume "$work/$name.json" "$work/$name.remarks"
done

echo "== traffic per layer"
import_layer_models
for scheme in "1d 1" "1d 2" "2d 2x2" "2.5d 2x2x2" "3d 2x2x2"; do
  read -r mode grid <<< "$scheme"
  for zero in false true; do
    options="mode=$mode grid=$grid dp=2 shard-optimizer=$zero"
    for depth in layer deeper; do
      "$bin/tpc-opt" "$work/$depth.mlir" -o /dev/null \
        --tp-pipeline="$options" 2> "$work/layer-$depth.remarks"
    done
    echo "$options:"
    $check layer-volume "$config" "$work/layer-layer.remarks" \
      "$work/layer-deeper.remarks" --mode $mode --grid $grid --dp 2 \
      --batch $layer_batch --seq $layer_seq
  done
done

echo "== resume across replicas"
train 4 "$work/dp2-1d2-zero.tpplan" "$work/stopped" --steps 3 \
  --checkpoint-dir "$work/stopped.ckpt"
compile 2d "mode=2d grid=2x2"
train 4 "$work/2d.tpplan" "$work/resumed" --steps $steps \
  --resume "$work/stopped.ckpt" --export "$work/resumed"
$check weights "$work/one/model.safetensors" "$work/resumed/model.safetensors" $keybias
compile 3d "mode=3d grid=2x2x2"
train 8 "$work/3d.tpplan" "$work/stopped3d" --steps 3 \
  --checkpoint-dir "$work/stopped3d.ckpt"
train 4 "$work/dp2-1d2-zero.tpplan" "$work/resumed-zero" --steps $steps \
  --resume "$work/stopped3d.ckpt" --export "$work/resumed-zero"
$check weights "$work/one/model.safetensors" "$work/resumed-zero/model.safetensors" $keybias
