#!/usr/bin/env bash
# Pipeline parallelism (tp-pipeline pp=P, docs/pipeline.md): the layer stack
# cut into stages, each rank running its stage's program with transfers to
# its neighbours, trains equal to one rank: GPipe and 1F1B over 2 stages,
# with 1D 2 and with dp 2 inside the stages, and on a 4-layer model 4
# stages (1F1B) and the interleaved schedule (2 chunks per stage). Losses
# within 1e-5 and the exported weights (gathered from their stages) within
# 1e-4 of the plain one-rank run: the micro-batches' gradients add up in
# another order than the whole batch's. Checkpoints hold whole parameters: a
# pp 2 run stopped at step 3 resumes on pp 2 bit-identically to the run that
# did not stop, and on one rank and on 1D x pp 2 within the same tolerances.
# Every run evaluates held-out text on its stages as it trains (the
# held-out losses within 1e-5), and `tp-run eval` of a pp 2 plan
# equals one rank's.
#
#   pipeline.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=6 lr=3e-3
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"
# Every run also evaluates held-out text (this script's bytes) every 3 steps
# (@loss on the stages), checked as the training losses are.
"$bin/tpc-tokenize" "${BASH_SOURCE[0]}" -o "$work/heldout.tokens" > /dev/null
train_flags="--eval-every 3 --eval-data $work/heldout.tokens --eval-tokens 64"

train_plan "$work/model.mlir" one "mode=1d grid=1"
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"
equals_one_rank one pp2-gpipe 2 "$work/model.mlir" \
  "mode=1d grid=1 pp=2 microbatches=2 schedule=gpipe"
equals_one_rank one pp2-1f1b 2 "$work/model.mlir" "mode=1d grid=1 pp=2 microbatches=4"
equals_one_rank one pp2-1d2 4 "$work/model.mlir" "mode=1d grid=2 pp=2 microbatches=2"
equals_one_rank one pp2-dp2 4 "$work/model.mlir" \
  "mode=1d grid=1 dp=2 pp=2 microbatches=2"

echo "== tp-run eval on pp 2 stages equals one rank (trained weights)"
for plan in one pp2-1f1b; do
  ranks=1 && [ $plan = one ] || ranks=2
  timeout 60 mpirun -np $ranks --oversubscribe "$bin/tp-run" eval \
    "$work/$plan.tpplan" --data "$work/text.tokens" --offset 5 \
    --weights "$work/one/model.safetensors" --metrics "$work/eval-$plan.json" \
    > "$work/eval-$plan.log"
done
"$python" - "$work/eval-one.json" "$work/eval-pp2-1f1b.json" <<'PY'
import json, sys
one, staged = (json.load(open(p))["loss"] for p in sys.argv[1:])
assert abs(one - staged) <= 1e-6 * abs(one), (one, staged)
print(f"eval: {staged} on 2 stages, {one} on one rank")
PY

echo "== every rank's compute seconds (--rank-times), numerics unchanged"
train 2 "$work/pp2-1f1b.tpplan" "$work/timed" --steps $steps --rank-times
$check losses "$work/pp2-1f1b.json" "$work/timed.json" --rel 0
"$python" - "$work/timed.json" $steps <<'PY'
import json, sys
m, steps = json.load(open(sys.argv[1])), int(sys.argv[2])
ranks = m["rank_compute_seconds"]
walls = [r["seconds"] for r in m["loss_curve"]]
assert len(ranks) == 2 and all(len(r) == steps for r in ranks), ranks
# A rank computes for part of each step and waits for the other stage in
# the rest (the first step's wall includes setup).
for rank in ranks:
    for compute, wall in zip(rank, walls):
        assert 0 < compute < wall, (compute, wall)
print("rank times: each rank computes for part of every step")
PY

echo "== a pp 2 checkpoint resumed on pp 2, on one rank and on 1D x pp 2"
train 2 "$work/pp2-1f1b.tpplan" "$work/stopped" --steps 3 \
  --checkpoint-dir "$work/stopped.ckpt"
train 2 "$work/pp2-1f1b.tpplan" "$work/resumed" --steps $steps \
  --resume "$work/stopped.ckpt" --export "$work/resumed"
cmp "$work/pp2-1f1b/model.safetensors" "$work/resumed/model.safetensors"
echo "resumed on pp 2: weights identical to the run that did not stop"
for target in one:1 pp2-1d2:4; do
  train "${target#*:}" "$work/${target%:*}.tpplan" "$work/resumed-${target%:*}" \
    --steps $steps --resume "$work/stopped.ckpt" \
    --export "$work/resumed-${target%:*}"
  $check weights "$work/one/model.safetensors" \
    "$work/resumed-${target%:*}/model.safetensors" --rel 1e-4 $keybias
  echo "resumed on ${target%:*}: equal to one rank"
done

# Four layers: four stages, and two chunks on each of two stages.
config_with_layers 4 "$work/four.json"
"$bin/tpc-import" "$work/four.json" --batch $batch --seq $seq -o "$work/four.mlir"
train_plan "$work/four.mlir" four "mode=1d grid=1"
train 1 "$work/four.tpplan" "$work/four" --steps $steps --export "$work/four"
equals_one_rank four pp4-1f1b 4 "$work/four.mlir" "mode=1d grid=1 pp=4 microbatches=4"
equals_one_rank four pp2-interleaved 2 "$work/four.mlir" \
  "mode=1d grid=1 pp=2 microbatches=2 schedule=interleaved pp-chunks=2"
