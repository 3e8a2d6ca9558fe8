#!/usr/bin/env bash
# The compiler's fusions against the unfused program, for a small GPT-2 or
# LLaMA (GQA) model (tp-fuse-elementwise: the SwiGLU gate and residual add +
# norm, with their fused gradients):
#  1. one rank: the fused plan has the fused ops, trains bit-identically to
#     the unfused one over 5 AdamW steps (the fused CPU kernels compute the
#     same float operations in f32), exports the same bits, and plans no
#     more activation memory (less with SwiGLU: its silu output is not kept);
#  2. 1D on 2 ranks (with sequence parallelism), 2D 2x2 and 3D 2x2x2: every
#     rank sends the same bytes per step as unfused (the static report and
#     tp-run's count agree), and the losses agree within 1e-5 (an equal-cost
#     layout may add partial sums in another order);
#  3. bf16 (precision=bf16): fused and unfused agree within bf16's noise
#     (fused kernels round fewer intermediates).
# PyTorch checks the fused and unfused gradients in training-numerics.sh.
#
#   fusion.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
ref="$python $here/reference.py"
check="$python $here/tensor_parallel_check.py"
source "$here/small-model.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -x "$python" ]; then
  echo "fusion: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
small_model "$work" "$model" 23 4 16 4000
"$bin/tpc-import" "$work/config.json" --batch 4 --seq 16 -o "$work/model.mlir"
unfused="fuse-elementwise=false"
compile() { # NAME PIPELINE-OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$2" 2> "$work/$1.remarks"
}
train() { # RANKS NAME [tp-run flags...]
  local ranks=$1 name=$2
  shift 2
  timeout 120 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" \
    "$work/$name.tpplan" --data "$work/tokens.tokens" \
    --weights "$work/model.safetensors" --steps 5 --lr 3e-3 --warmup 2 \
    --decay-steps 5 --metrics "$work/$name.json" "$@" > "$work/$name.log"
}

echo "== $model, one rank"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline > "$work/fused.mlir" 2> /dev/null
"$python" - "$work/fused.mlir" "$model" <<'PY'
import re, sys
text, model = open(sys.argv[1]).read(), sys.argv[2]
step = text[text.index("func.func @train_step"):]
count = lambda op: len(re.findall(rf"= {op} ", step))
want = {"tp.add_layer_norm" if model == "gpt2" else "tp.add_rms_norm": 4}
if model == "llama":
    want.update({"tp.swiglu": 2, "tp.swiglu_grad": 2, "tp.silu": 0})
got = {op: count(op) for op in want}
print(f"fused ops in @train_step: {got}")
if got != want:
    sys.exit(f"expected {want}")
PY
compile one ""
compile one-unfused "$unfused"
train 1 one --export "$work/one"
train 1 one-unfused --export "$work/one-unfused"
$check losses "$work/one-unfused.json" "$work/one.json" --rel 0
$check weights "$work/one-unfused/model.safetensors" "$work/one/model.safetensors" --exact
"$python" - "$work/one.json" "$work/one-unfused.json" "$model" <<'PY'
import json, sys
fused, unfused = (json.load(open(p))["memory"]["planned_peak_bytes"] for p in sys.argv[1:3])
print(f"planned peak bytes: fused {fused}, unfused {unfused}")
if fused > unfused or (sys.argv[3] == "llama" and not fused < unfused):
    sys.exit("fusion should not plan more memory (and less with SwiGLU)")
PY

for scheme in "1d-sp:mode=1d grid=2 seq-parallel=true:2" "2d:mode=2d grid=2x2:4" \
              "3d:mode=3d grid=2x2x2:8"; do
  IFS=: read -r name options ranks <<< "$scheme"
  echo "== $model, $options"
  compile "$name" "$options"
  compile "$name-unfused" "$options $unfused"
  train "$ranks" "$name"
  train "$ranks" "$name-unfused"
  $check losses "$work/$name-unfused.json" "$work/$name.json" --rel 1e-5
  $check same-volume "$work/$name.json" "$work/$name.remarks"
  "$python" - "$work/$name.remarks" "$work/$name-unfused.remarks" <<'PY'
import re, sys
def total(path):
    for line in open(path):
        if "@train_step communication" in line:
            return int(re.search(r"total (\d+) bytes", line).group(1))
fused, unfused = (total(p) for p in sys.argv[1:])
print(f"train_step bytes per rank: fused {fused}, unfused {unfused}")
if fused != unfused:
    sys.exit("fusion changed the communication")
PY
done

echo "== $model, bf16"
compile bf16 "precision=bf16"
compile bf16-unfused "precision=bf16 $unfused"
train 1 bf16
train 1 bf16-unfused
$check losses "$work/bf16-unfused.json" "$work/bf16.json" --rel 1e-2
echo "fusion: PASS"
