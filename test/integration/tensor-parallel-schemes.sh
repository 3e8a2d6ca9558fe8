#!/usr/bin/env bash
# 2D (tp-pipeline mode=2d), 2.5D (mode=2.5d) and 3D (mode=3d) tensor-parallel
# training against the one-rank run, for a small GPT-2 or LLaMA (GQA) model,
# on the grids 2D 2x2 (4 ranks), 2.5D 2x2x1 (4) and 2x2x2 (8, oversubscribed)
# and 3D 2x2x2 (8):
#  1. the loss of each of 5 AdamW steps and every parameter afterwards (the
#     export, gathered into one model.safetensors) match the one-rank plan's
#     within the tolerances of the 1D test;
#  2. the bytes each rank sends per step (tp-run --metrics) equal tpc-opt's
#     static report, per collective kind; and the static report's traffic
#     per transformer layer (one more layer minus the model, compiled for
#     batch 8, seq 16) equals the formula of docs/schemes.md;
#  3. a run stopped at step 3 on one scheme resumes on another (2D -> 3D,
#     3D -> 2.5D 2x2x2 and 2.5D -> 1D) and ends at the one-rank run's weights.
# The batch (4) is split over the rows and depth (2.5D) or over axis 0 and one
# of axes 1 and 2 (3D), so 2x2x2 needs 4 | batch.
#
#   tensor-parallel-schemes.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=5 lr=3e-4
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"
import_layer_models
compile() { # NAME PIPELINE-OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$2" 2> "$work/$1.remarks"
}

compile one ""
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"

for scheme in "2d 2x2 4" "2.5d 2x2x1 4" "2.5d 2x2x2 8" "3d 2x2x2 8"; do
  read -r mode grid ranks <<< "$scheme"
  name=$mode-$grid
  echo "== $model, mode=$mode grid=$grid ($ranks ranks)"
  compile "$name" "mode=$mode grid=$grid"
  train "$ranks" "$work/$name.tpplan" "$work/$name" --steps $steps \
    --export "$work/$name"
  $check losses "$work/one.json" "$work/$name.json"
  $check weights "$work/one/model.safetensors" "$work/$name/model.safetensors" $keybias
  $check same-volume "$work/$name.json" "$work/$name.remarks"
  for depth in layer deeper; do
    "$bin/tpc-opt" "$work/$depth.mlir" -o /dev/null \
      --tp-pipeline="mode=$mode grid=$grid" 2> "$work/$name-$depth.remarks"
  done
  $check layer-volume "$config" "$work/$name-layer.remarks" \
    "$work/$name-deeper.remarks" --mode $mode --grid $grid \
    --batch $layer_batch --seq $layer_seq
done

echo "== resume on another scheme"
train 4 "$work/2d-2x2.tpplan" "$work/stopped" --steps 3 --checkpoint-dir "$work/stopped.ckpt"
train 8 "$work/3d-2x2x2.tpplan" "$work/resumed" --steps $steps \
  --resume "$work/stopped.ckpt" --export "$work/resumed"
$check weights "$work/one/model.safetensors" "$work/resumed/model.safetensors" $keybias
train 8 "$work/3d-2x2x2.tpplan" "$work/stopped3d" --steps 3 --checkpoint-dir "$work/stopped3d.ckpt"
train 8 "$work/2.5d-2x2x2.tpplan" "$work/resumed25" --steps $steps \
  --resume "$work/stopped3d.ckpt" --export "$work/resumed25"
$check weights "$work/one/model.safetensors" "$work/resumed25/model.safetensors" $keybias
compile 1d-2 "mode=1d grid=2"
train 4 "$work/2.5d-2x2x1.tpplan" "$work/stopped25" --steps 3 --checkpoint-dir "$work/stopped25.ckpt"
train 2 "$work/1d-2.tpplan" "$work/resumed1d" --steps $steps \
  --resume "$work/stopped25.ckpt" --export "$work/resumed1d"
$check weights "$work/one/model.safetensors" "$work/resumed1d/model.safetensors" $keybias
