#!/usr/bin/env bash
# Gradient accumulation inside the compiled step (tp-pipeline microbatches=M,
# docs/pipeline.md): the step's batch cut into M micro-batches whose
# gradients add up before one optimizer step trains as the whole batch does,
# on one rank and with data parallelism (dp 2, also with ZeRO-1), 1D and 2D.
# Against the plain one-rank plan: losses within 1e-5 and exported weights
# within 1e-4 (the micro-batches' gradients are summed in another order than
# the whole batch's products sum them). The plan records the schedule and
# its step program runs the micro-batches in order (F0 B0 F1 B1 ...).
#
#   microbatches.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
batch=4 seq=8 steps=6 lr=3e-3
source "$(dirname "${BASH_SOURCE[0]}")/tensor-parallel-setup.sh"

train_plan "$work/model.mlir" one "mode=1d grid=1"
train 1 "$work/one.tpplan" "$work/one" --steps $steps --export "$work/one"
# NAME RANKS OPTIONS: M micro-batches against the one-rank plan.
accumulated() { equals_one_rank one "$1" "$2" "$work/model.mlir" "$3"; }
accumulated m4 1 "mode=1d grid=1 microbatches=4"
accumulated dp2-m2 2 "mode=1d grid=1 dp=2 microbatches=2"
accumulated zero-m2 2 "mode=1d grid=1 dp=2 shard-optimizer=true microbatches=2"
accumulated 1d-m2 2 "mode=1d grid=2 microbatches=2"
accumulated 2d-m2 4 "mode=2d grid=2x2 microbatches=2"
# The plan says how its step was cut, and runs the micro-batches in order.
"$bin/tp-run" "$work/m4.tpplan" --print-plan | "$python" -c '
import json, sys
plan = json.load(sys.stdin)
pipeline = plan.get("pipeline")
want = {"axis": 0, "stages": 1, "microbatches": 4, "chunks": 1,
        "schedule": "1f1b"}
got = {k: pipeline.get(k) for k in want} if pipeline else None
if got != want:
    sys.exit(f"pipeline record {pipeline}, expected {want}")
stages = [p.get("stage") for p in plan["programs"] if p["name"] == "train_step"]
if stages != [0]:
    sys.exit(f"train_step programs for stages {stages}")
print("m4: the plan records 4 micro-batches on one stage")'
