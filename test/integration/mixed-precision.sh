#!/usr/bin/env bash
# Mixed precision (tp-pipeline precision=bf16: activations and their
# gradients stored in bf16, f32 master weights, gradients accumulated and
# AdamW in f32), for a small GPT-2 or LLaMA (GQA) model:
#  1. 200 steps against PyTorch autocast (bf16 products on f32 masters):
#     tpc's loss curve strays from autocast's no more than autocast's strays
#     from f32 (twice the mean, four times the worst step; it is measured in
#     the same run, so the bound is bf16's own noise on this model and data),
#     and under absolute bounds (mean 2e-3, worst 2e-2 relative);
#  2. the plan: activations bf16, parameters and optimizer state f32, and
#     less planned activation memory than the f32 plan;
#  3. 1D (with sequence parallelism), 2D, 3D and dp x 1D with ZeRO-1 train
#     within 1e-2 of the one-rank bf16 run (partial sums are rounded to bf16
#     on each rank before they are summed: not bit-identical), and every
#     rank's bytes per step equal the static report's, half the f32 plan's
#     on 1D (bf16 activations on the wire);
#  4. a run stopped and resumed from its checkpoint ends bit-identical;
#  5. generation with bf16 KV caches (half the f32 caches' bytes) draws the
#     f32 plan's greedy tokens here, its log-probabilities within 5e-2.
# With DEVICE (cuda) every run is on that device, whose metrics must name
# cuBLASLt's products and cuDNN's fused attention; skipped (77) without it.
#
#   mixed-precision.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 model=$4 device=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
source "$here/device-probe.sh"
ref="$python $here/reference.py"
check="$python $here/tensor_parallel_check.py"
source "$here/small-model.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -x "$python" ]; then
  echo "mixed-precision: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
batch=4 seq=32
small_model "$work" "$model" 21 $batch $seq 20000
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq -o "$work/model.mlir"
compile() { # NAME PIPELINE-OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$2" 2> "$work/$1.remarks"
}
train() { # RANKS PLAN OUT [tp-run flags...] (the model's weights unless
           # the flags resume)
  local ranks=$1 plan=$2 out=$3 weights=(--weights "$work/model.safetensors")
  shift 3
  [[ " $* " == *" --resume "* ]] && weights=()
  timeout 240 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" "$plan" \
    --data "$work/tokens.tokens" "${weights[@]}" \
    --metrics "$out.json" ${device:+--device "$device"} "$@" > "$out.log"
}

echo "== $model, 200 steps against PyTorch autocast"
compile one "precision=bf16"
compile one-f32 ""
flags=(--steps 200 --lr 3e-3 --min-lr 3e-4 --warmup 10 --decay-steps 200 --clip 1.0)
train 1 "$work/one.tpplan" "$work/one" "${flags[@]}"
"$python" "$here/training_reference.py" train-bf16 --model "$work" --batch $batch \
  --seq $seq "${flags[@]}" --weight-decay 0.01 --actual "$work/one.json" \
  --noise-factor 2 --mean-rtol 2e-3 --rtol 2e-2

if [ "$device" = cuda ]; then
  # The GPU's fast paths are the ones in use (the log names any shape that
  # fell back).
  "$python" - "$work/one.json" <<'PY'
import json, sys
kernels = json.load(open(sys.argv[1]))["device"]["kernels"]
print(f"kernels: {kernels}")
if "cuBLASLt" not in kernels or "fused flash attention" not in kernels:
    sys.exit("expected cuBLASLt products and cuDNN's fused attention")
PY
fi

echo "== the plan"
"$bin/tp-run" "$work/one.tpplan" --print-plan > "$work/one.plan.json"
"$bin/tp-run" "$work/one-f32.tpplan" --print-plan > "$work/one-f32.plan.json"
"$python" - "$work/one.plan.json" "$work/one-f32.plan.json" <<'PY'
import collections, json, sys
plan, f32 = (json.load(open(p)) for p in sys.argv[1:])
if plan["version"] != "1.15":
    sys.exit(f"plan version {plan['version']}")
if any(p["dtype"] != "F32" for p in plan["params"]):
    sys.exit("a parameter is not an f32 master")
step = next(p for p in plan["programs"] if p["name"] == "train_step")
kinds = collections.Counter((t["storage"], t["dtype"]) for t in step["tensors"])
print(f"train_step tensors by storage and dtype: {dict(kinds)}")
if kinds[("Arena", "BF16")] == 0 or kinds[("ExpAvg", "F32")] == 0:
    sys.exit("expected bf16 activations and f32 moments")
if any(t["dtype"] == "BF16" and t["storage"] != "Arena" for t in step["tensors"]):
    sys.exit("a bf16 tensor outside the arena")
ops = collections.Counter(s["op"] for s in step["steps"])
if ops["Convert"] == 0:
    sys.exit("no Convert steps (the weights' bf16 copies)")
arena = {p["name"]: p["arena_bytes"] for p in plan["programs"]}
arena32 = {p["name"]: p["arena_bytes"] for p in f32["programs"]}
print(f"arena bytes bf16 {arena} f32 {arena32}")
if not arena["train_step"] < 0.75 * arena32["train_step"]:
    sys.exit("bf16 activations should take well under the f32 arena")
PY

echo "== $model, schemes against one rank (20 steps)"
short=(--steps 20 --lr 3e-3 --warmup 5 --decay-steps 20)
train 1 "$work/one.tpplan" "$work/one20" "${short[@]}"
for scheme in "1d-sp:mode=1d grid=2 seq-parallel=true:2" \
              "2d:mode=2d grid=2x2:4" "3d:mode=3d grid=2x2x2:8" \
              "dp-zero:mode=1d grid=2 dp=2 shard-optimizer=true:4"; do
  IFS=: read -r name options ranks <<< "$scheme"
  compile "$name" "precision=bf16 $options"
  train "$ranks" "$work/$name.tpplan" "$work/$name" "${short[@]}"
  $check losses "$work/one20.json" "$work/$name.json" --rel 1e-2
  $check same-volume "$work/$name.json" "$work/$name.remarks"
done
compile 1d "precision=bf16 mode=1d grid=2"
compile 1d-f32 "mode=1d grid=2"
train 2 "$work/1d.tpplan" "$work/1d" --steps 2
"$python" - "$work/1d.remarks" "$work/1d-f32.remarks" <<'PY'
import re, sys
def total(path):
    for line in open(path):
        if "@train_step communication" in line:
            return int(re.search(r"total (\d+) bytes", line).group(1))
bf16, f32 = total(sys.argv[1]), total(sys.argv[2])
print(f"1D train_step bytes per rank: bf16 {bf16}, f32 {f32}")
# The activations' all-reduces move bf16; the loss statistics and the
# gradient norm stay f32.
if not 0.45 * f32 < bf16 < 0.55 * f32:
    sys.exit("bf16 should move about half the f32 bytes")
PY

echo "== $model, resume"
train 1 "$work/one.tpplan" "$work/stopped" --steps 10 --lr 3e-3 --warmup 5 \
  --decay-steps 20 --checkpoint-dir "$work/ckpt" --checkpoint-every 5
train 1 "$work/one.tpplan" "$work/resumed" "${short[@]}" --resume "$work/ckpt" \
  --export "$work/resumed"
train 1 "$work/one.tpplan" "$work/whole" "${short[@]}" --export "$work/whole"
$check weights "$work/whole/model.safetensors" "$work/resumed/model.safetensors" --exact
"$python" - "$work/whole.json" "$work/resumed.json" <<'PY'
import json, sys
whole, resumed = ({r["step"]: r["loss"] for r in json.load(open(p))["loss_curve"]}
                  for p in sys.argv[1:])
if any(whole[s] != resumed[s] for s in resumed):
    sys.exit("the resumed losses differ")
print(f"resume: steps {min(resumed)}-{max(resumed)} bit-identical")
PY

echo "== $model, generation with bf16 KV caches"
"$bin/tpc-import" "$work/config.json" --batch 1 --seq 16 --kv-cache 48 -o "$work/gen.mlir"
for precision in bf16 f32; do
  "$bin/tpc-opt" "$work/gen.mlir" --tp-pipeline="precision=$precision" \
    -o "$work/gen-$precision.tpplan" 2> /dev/null
  "$bin/tp-run" "$work/gen-$precision.tpplan" --weights "$work/model.safetensors" \
    --generate 8 --prompt 3,14,15,9,2,6 --ignore-eos ${device:+--device "$device"} \
    --metrics "$work/gen-$precision.json" > /dev/null
done
"$python" - "$work/gen-bf16.json" "$work/gen-f32.json" <<'PY'
import json, sys
bf16, f32 = (json.load(open(p)) for p in sys.argv[1:])
print(f"greedy ids bf16 {bf16['generated_ids']} f32 {f32['generated_ids']}; "
      f"KV cache bytes {bf16['kv_cache_bytes_per_rank']} / {f32['kv_cache_bytes_per_rank']}")
if 2 * bf16["kv_cache_bytes_per_rank"] != f32["kv_cache_bytes_per_rank"]:
    sys.exit("bf16 KV caches should take half the f32 bytes")
if bf16["generated_ids"] != f32["generated_ids"]:
    sys.exit("bf16 greedy tokens differ from f32's on this model")
worst = max(abs(a - b) for a, b in zip(bf16["generated_logprobs"], f32["generated_logprobs"]))
print(f"log-probabilities: worst difference {worst:.2e}")
if not worst < 5e-2:
    sys.exit("bf16 log-probabilities too far from f32's")
PY
echo "mixed-precision: PASS"
