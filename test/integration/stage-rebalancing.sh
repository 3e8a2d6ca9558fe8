#!/usr/bin/env bash
# Stage rebalancing (docs/rebalancing.md, "Pipeline stages"): a 4-layer
# model compiled for pp 2 with stage-moves=1 carries the balanced cut (2,2)
# and the cuts (1,3) and (3,1). Exact against one rank throughout: losses
# within 1e-5 and exported weights within 1e-4 (the micro-batches' sums and
# the stages' parts of the gradient norm add up in another order), and
# against the balanced pp 2 run within 1e-6 on the losses:
#  1. no straggler: the balanced cut all along;
#  2. stage 1's rank 8x slow from step 4 (--slow, migrate): a layer moves to
#     stage 0 (cut 3,1) with its parameters and AdamW moments, held-out
#     evaluation runs on the new cut's stages, and the export gathers the
#     weights from the stages that hold them now;
#  3. stage 1 slow for steps 4-12, then stage 0 from step 13: the layer goes
#     to stage 0 and then two layers the other way (cut 1,3);
#  4. pp 2 x 1D 2 (4 ranks), rank 3 (stage 1) slow: each rank's shards of
#     the moved layer go to the rank with its tensor coordinate on stage 0
#     (against the same grid without a straggler: losses 1e-6, weights
#     1e-5; against one rank the tensor split alone drifts to ~1e-5 in 24
#     steps, so 5e-5);
#  5. interleaved 1F1B (8 layers, 2 chunks a stage): a layer leaves one of
#     stage 1's virtual stages;
#  6. --rank-speeds 1,0.25: the cut is chosen before the first step;
#  7. --rebalance resize is refused (layers cannot be left out), and so is
#     stage-moves without pp.
#
#   stage-rebalancing.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=24 lr=3e-3
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"
"$bin/tpc-tokenize" "${BASH_SOURCE[0]}" -o "$work/heldout.tokens" > /dev/null
train_flags="--eval-every 6 --eval-data $work/heldout.tokens --eval-tokens 64"

config_with_layers 4 "$work/four.json"
"$bin/tpc-import" "$work/four.json" --batch $batch --seq $seq -o "$work/four.mlir"
train_plan "$work/four.mlir" one "mode=1d grid=1"
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"
train_plan "$work/four.mlir" moves "mode=1d grid=1 pp=2 microbatches=2 stage-moves=1"

# The cuts the plan carries, and which programs serve them.
"$bin/tp-run" "$work/moves.tpplan" --print-plan > "$work/moves.plan.json"
"$python" - "$work/moves.plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
cuts = plan["pipeline"]["cuts"]
assert cuts == [[2, 2], [1, 3], [3, 1]], cuts
assert len(plan["pipeline"]["layer_seconds"]) == 4
steps = {(p["stage"], tuple(p.get("cuts", [0])))
         for p in plan["programs"] if p["name"] == "train_step"}
assert steps == {(s, (c,)) for s in (0, 1) for c in (0, 1, 2)}, steps
print("plan: cuts", cuts)
PY

equals() { # NAME: losses and weights against one rank, losses against balanced
  $check losses "$work/one.json" "$work/$1.json" --rel 1e-5
  $check weights "$work/one/model.safetensors" "$work/$1/model.safetensors" \
    --rel 1e-4 $keybias
  [ "$1" = balanced ] || $check losses "$work/balanced.json" "$work/$1.json" --rel 1e-6
  echo "$1: equal to one rank"
}
stage_cuts() { # METRICS: the stage cut of every decision, in order
  "$python" -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(" ".join(str(d["stage_cut"]) + ":" + ",".join(map(str, d["stage_layers"]))
               for d in m["rebalance"]["decisions"]))' "$1"
}

echo "== $model: pp 2 with stage cuts, no straggler"
train 2 "$work/moves.tpplan" "$work/balanced" --steps $steps --export "$work/balanced"
equals balanced

echo "== $model: stage 1 slow from step 4: a layer moves to stage 0"
train 2 "$work/moves.tpplan" "$work/slow1" --steps $steps --export "$work/slow1" \
  --slow 1:8:4 --rebalance migrate --rebalance-threshold 0.25
grep -E "^rebalance:" "$work/slow1.log"
cuts=$(stage_cuts "$work/slow1.json")
[ "$cuts" = "2:3,1" ] || { echo "slow1: decisions '$cuts', expected 2:3,1"; exit 1; }
equals slow1

echo "== $model: stage 1 slow, then stage 0: the layers move one way, then the other"
train 2 "$work/moves.tpplan" "$work/both" --steps $steps --export "$work/both" \
  --slow 1:8:4:12 --slow 0:8:13 --rebalance auto --rebalance-threshold 0.25
grep -E "^rebalance:" "$work/both.log"
cuts=$(stage_cuts "$work/both.json")
case "$cuts" in
  "2:3,1 1:1,3" | "2:3,1 0:2,2 1:1,3") ;;
  *) echo "both: decisions '$cuts', expected 2:3,1 then (0:2,2) 1:1,3"; exit 1 ;;
esac
equals both

echo "== $model: pp 2 x 1D 2: each tensor rank's shards move to its peer"
train_plan "$work/four.mlir" moves-1d2 \
  "mode=1d grid=2 pp=2 microbatches=2 stage-moves=1"
train 4 "$work/moves-1d2.tpplan" "$work/tp-balanced" --steps $steps \
  --export "$work/tp-balanced"
train 4 "$work/moves-1d2.tpplan" "$work/tp" --steps $steps --export "$work/tp" \
  --slow 3:8:4 --rebalance migrate --rebalance-threshold 0.25
grep -E "^rebalance:" "$work/tp.log"
cuts=$(stage_cuts "$work/tp.json")
[ "$cuts" = "2:3,1" ] || { echo "tp: decisions '$cuts', expected 2:3,1"; exit 1; }
# Against the same grid without the move: exact up to the regrouped norm;
# against one rank, 24 steps of the tensor split's reordered sums drift to
# about 1e-5 (LLaMA) on their own.
$check losses "$work/tp-balanced.json" "$work/tp.json" --rel 1e-6
$check weights "$work/tp-balanced/model.safetensors" "$work/tp/model.safetensors" \
  --rel 1e-5 $keybias
$check losses "$work/one.json" "$work/tp.json" --rel 5e-5
$check weights "$work/one/model.safetensors" "$work/tp/model.safetensors" \
  --rel 1e-4 $keybias
echo "tp: equal to the unmoved pp 2 x 1D 2 run and to one rank"

echo "== $model: interleaved (2 chunks a stage, 8 layers): a layer leaves a virtual stage of stage 1"
config_with_layers 8 "$work/eight.json"
"$bin/tpc-import" "$work/eight.json" --batch $batch --seq $seq -o "$work/eight.mlir"
train_plan "$work/eight.mlir" eight "mode=1d grid=1"
train 1 "$work/eight.tpplan" "$work/eight" --steps $steps --export "$work/eight"
train_plan "$work/eight.mlir" inter \
  "mode=1d grid=1 pp=2 microbatches=2 schedule=interleaved pp-chunks=2 stage-moves=1"
train 2 "$work/inter.tpplan" "$work/inter" --steps $steps --export "$work/inter" \
  --slow 1:8:4 --rebalance migrate --rebalance-threshold 0.25
grep -E "^rebalance:" "$work/inter.log"
# Virtual stages 0 and 2 run on stage 0, 1 and 3 on stage 1: one of stage
# 1's four layers moves to stage 0.
"$python" - "$work/inter.json" <<'PY'
import json, sys
decisions = json.load(open(sys.argv[1]))["rebalance"]["decisions"]
assert decisions, "no re-plan"
groups = decisions[0]["stage_layers"]
assert len(groups) == 4 and sum(groups) == 8, groups
assert groups[1] + groups[3] == 3, groups
print("interleaved: layers per virtual stage", groups)
PY
$check losses "$work/eight.json" "$work/inter.json" --rel 1e-5
$check weights "$work/eight/model.safetensors" "$work/inter/model.safetensors" \
  --rel 1e-4 $keybias
echo "inter: equal to one rank"

echo "== $model: given rank speeds choose the cut before step 1"
train 2 "$work/moves.tpplan" "$work/speeds" --steps $steps --export "$work/speeds" \
  --rank-speeds 1,0.25
cuts=$(stage_cuts "$work/speeds.json")
[ "$cuts" = "2:3,1" ] || { echo "speeds: decisions '$cuts', expected 2:3,1"; exit 1; }
equals speeds

echo "== bad requests"
refused() { # EXPECTED COMMAND...: fails, naming EXPECTED
  local expected=$1
  shift
  if "$@" > "$work/refused.log" 2>&1; then
    echo "accepted: $*"
    exit 1
  fi
  grep -q -- "$expected" "$work/refused.log" || {
    cat "$work/refused.log"
    echo "expected: $expected"
    exit 1
  }
}
refused "which no stage can leave out" \
  timeout 60 mpirun -np 2 --oversubscribe "$bin/tp-run" "$work/moves.tpplan" \
  --data "$work/text.tokens" --steps 2 --rebalance resize
refused "stage-moves=1 needs a positive count and pp > 1" \
  "$bin/tpc-opt" "$work/four.mlir" -o /dev/null \
  --tp-pipeline="train mode=1d grid=1 microbatches=2 stage-moves=1"
echo "refused: resize, stage-moves without pp"
