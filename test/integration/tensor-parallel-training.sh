#!/usr/bin/env bash
# 1D tensor-parallel training (tp-pipeline mode=1d) against the one-rank run,
# for a small GPT-2 or LLaMA (GQA) model, on t = 1, 2 and 4 MPI ranks, with
# and without sequence parallelism:
#  1. the loss of each of 5 AdamW steps and every parameter afterwards (the
#     export, gathered into one model.safetensors) match the one-rank plan's
#     within 1e-5 relative;
#  2. the bytes each rank sends per step (tp-run --metrics) and tpc-opt's
#     static report for @train_step both equal the formula of
#     docs/communication.md, per collective kind;
#  3. a run stopped at step 3 and resumed from its checkpoint reproduces the
#     uninterrupted run bit for bit on the same grid, and within 1e-5 on
#     another grid (checkpoints hold whole parameters).
#
#   tensor-parallel-training.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=2 seq=16 steps=5 lr=3e-4
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"
context=$("$python" -c 'import json, sys; c = json.load(open(sys.argv[1]));
print(c.get("n_positions", c.get("max_position_embeddings")))' "$config")

"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/one.tpplan"
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"

for ranks in 1 2 4; do
  for sp in false true; do
    name=t$ranks-sp-$sp
    echo "== $model, $ranks ranks, seq-parallel=$sp"
    "$bin/tpc-opt" "$work/model.mlir" -o "$work/$name.tpplan" \
      --tp-pipeline="mode=1d grid=$ranks seq-parallel=$sp" 2> "$work/$name.remarks"
    train $ranks "$work/$name.tpplan" "$work/$name" --steps $steps \
      --export "$work/$name" --checkpoint-dir "$work/$name.ckpt"
    $check losses "$work/one.json" "$work/$name.json"
    $check weights "$work/one/model.safetensors" "$work/$name/model.safetensors" $keybias
    $check volume "$config" "$work/$name.json" "$work/$name.remarks" \
      --ranks $ranks --batch $batch --seq $seq $([ $sp = true ] && echo --seq-parallel)
  done
done

# Batch 1 over the whole context (the usual micro-batch of large-model
# training): the weight gradients reuse the forward's gathered activations
# although the [1, seq, h] -> [seq, h] views keep the sequence split, and
# GPT-2's position table is split like the sequence.
echo "== $model, batch 1, seq $context, 2 ranks, seq-parallel=true"
for copy in 1 2 3 4 5 6 7 8; do cat "$here/../tp-run/Inputs/text.txt"; done \
  > "$work/long.txt"
"$bin/tpc-tokenize" "$work/long.txt" -o "$work/long.tokens" > /dev/null
"$bin/tpc-import" "$config" --batch 1 --seq $context -o "$work/b1.mlir"
"$bin/tpc-opt" "$work/b1.mlir" --tp-pipeline -o "$work/b1-one.tpplan"
"$bin/tpc-opt" "$work/b1.mlir" -o "$work/b1-t2.tpplan" \
  --tp-pipeline="mode=1d grid=2 seq-parallel=true" 2> "$work/b1-t2.remarks"
for run in one t2; do
  data=$work/long.tokens train $([ $run = one ] && echo 1 || echo 2) \
    "$work/b1-$run.tpplan" "$work/b1-$run" --steps $steps --export "$work/b1-$run"
done
$check losses "$work/b1-one.json" "$work/b1-t2.json"
$check weights "$work/b1-one/model.safetensors" "$work/b1-t2/model.safetensors" $keybias
$check volume "$config" "$work/b1-t2.json" "$work/b1-t2.remarks" \
  --ranks 2 --batch 1 --seq $context --seq-parallel

echo "== resume"
name=t2-sp-true
train 2 "$work/$name.tpplan" "$work/stopped" --steps 3 --checkpoint-dir "$work/stopped.ckpt"
train 2 "$work/$name.tpplan" "$work/resumed" --steps $steps \
  --resume "$work/stopped.ckpt" --export "$work/resumed"
$check weights "$work/$name/model.safetensors" "$work/resumed/model.safetensors" --exact
train 4 "$work/t4-sp-false.tpplan" "$work/regridded" --steps $steps \
  --resume "$work/stopped.ckpt" --export "$work/regridded"
$check weights "$work/one/model.safetensors" "$work/regridded/model.safetensors" $keybias
