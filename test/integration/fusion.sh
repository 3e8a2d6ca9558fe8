#!/usr/bin/env bash
# The compiler's fusions against the unfused program, for a small GPT-2 or
# LLaMA (GQA) model: tp-fuse-elementwise (the SwiGLU gate, residual add +
# norm, with their fused gradients) and tp-fuse-products (a product with its
# bias and GELU, the GELU gradient with the bias gradient, the vocabulary
# head with its cross-entropy, chunked so that the logits are never stored):
#  1. one rank, elementwise fusions: the fused ops are there, and 5 AdamW
#     steps train bit-identically to the unfused program (the fused CPU
#     kernels compute the same float operations in f32), exporting the same
#     bits, in no more planned memory (less with SwiGLU);
#  2. one rank, every fusion (the head in chunks of 32 of the 96 columns):
#     the fused products are there, the losses agree within 1e-6 and the
#     weights within 2e-6 (the head combines its softmax statistics per
#     chunk), so does the loss program alone, and a model with a 16384-token
#     vocabulary (256 tokens a step)
#     plans less than half the unfused activation memory (the head's one
#     chunk of logits is the kernel's scratch, outside the plan);
#  3. 1D on 2 ranks (with sequence parallelism), 1D with the vocabulary-
#     parallel fused head, 2D 2x2 and 3D 2x2x2: every rank sends the same
#     bytes per step fused and unfused (the static report and tp-run's count
#     agree), and the losses agree within 1e-5;
#  4. bf16: the head fuses (its weight gradient f32), and fused and unfused
#     agree within bf16's noise (fused kernels round fewer intermediates).
# training-numerics.sh checks the fused and unfused gradients against
# PyTorch.
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
unfused="fuse-elementwise=false fuse-products=false"
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
# Counts ops in @train_step of `tpc-opt --tp-pipeline="OPTIONS"` against the
# expected counts, given as a Python dict.
expect_ops() { # OPTIONS EXPECTED
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="$1" > "$work/ops.mlir" 2> /dev/null
  "$python" - "$work/ops.mlir" "$2" <<'PY'
import ast, re, sys
text, want = open(sys.argv[1]).read(), ast.literal_eval(sys.argv[2])
step = text[text.index("func.func @train_step"):]
got = {op: len(re.findall(rf"= {op} ", step)) for op in want}
print(f"ops in @train_step: {got}")
if got != want:
    sys.exit(f"expected {want}")
PY
}
peak() { # METRICS
  "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["memory"]["planned_peak_bytes"])' "$1"
}

echo "== $model, one rank, elementwise fusions"
if [ "$model" = gpt2 ]; then
  expect_ops "fuse-products=false" "{'tp.add_layer_norm': 4, 'tp.layer_norm_grad': 5}"
else
  expect_ops "fuse-products=false" \
    "{'tp.add_rms_norm': 4, 'tp.swiglu': 2, 'tp.swiglu_grad': 2, 'tp.silu': 0}"
fi
compile elementwise "fuse-products=false"
compile one-unfused "$unfused"
train 1 elementwise --export "$work/elementwise"
train 1 one-unfused --export "$work/one-unfused"
$check losses "$work/one-unfused.json" "$work/elementwise.json" --rel 0
$check weights "$work/one-unfused/model.safetensors" \
  "$work/elementwise/model.safetensors" --exact
fused=$(peak "$work/elementwise.json") plain=$(peak "$work/one-unfused.json")
echo "planned peak bytes: fused $fused, unfused $plain"
if [ "$fused" -gt "$plain" ] || { [ "$model" = llama ] && [ "$fused" -ge "$plain" ]; }; then
  echo "fusion: the elementwise fusions should not plan more memory" >&2
  exit 1
fi

echo "== $model, one rank, every fusion"
if [ "$model" = gpt2 ]; then
  # Every product with a bias (GELU after the first MLP one), the GELU
  # gradients with their bias gradients, the tied head.
  expect_ops "vocab-chunk=32" "{'tp.linear': 12, 'tp.linear_gelu_grad': 2, \
'tp.gelu_grad': 0, 'tp.linear_cross_entropy': 1, \
'tp.linear_cross_entropy_grad': 1, 'tp.cross_entropy': 0}"
else
  expect_ops "vocab-chunk=32" "{'tp.linear_cross_entropy': 1, \
'tp.linear_cross_entropy_grad': 1, 'tp.cross_entropy_grad': 0}"
fi
compile one "vocab-chunk=32"
train 1 one --export "$work/one"
$check losses "$work/one-unfused.json" "$work/one.json" --rel 1e-6
$check weights "$work/one-unfused/model.safetensors" "$work/one/model.safetensors" \
  --rel 2e-6 --tensor-rel 1e-4 --key-bias-bound 3e-2
# The loss program alone (no backward): GPT-2's GELU linears apply GELU in
# place of a preactivation nothing reads.
for name in one one-unfused; do
  timeout 60 "$bin/tp-run" "$work/$name.tpplan" --program loss \
    --data "$work/tokens.tokens" --weights "$work/model.safetensors" \
    --metrics "$work/$name-loss.json" > /dev/null
done
"$python" - "$work/one-unfused-loss.json" "$work/one-loss.json" <<'PY'
import json, sys
unfused, fused = (json.load(open(p))["loss"] for p in sys.argv[1:])
print(f"loss program: fused {fused:.7f}, unfused {unfused:.7f}")
if abs(fused - unfused) > 1e-6 * abs(unfused):
    sys.exit("fusion changed the loss program's loss")
PY
# A 16384-token vocabulary: the [tokens, vocab] logits and their gradient
# dominate the unfused program's activations.
"$python" - "$work/config.json" "$work/big.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["vocab_size"] = 16384
json.dump(config, open(sys.argv[2], "w"))
PY
"$bin/tpc-import" "$work/big.json" --batch 16 --seq 16 -o "$work/big.mlir"
for options in "" "$unfused"; do
  "$bin/tpc-opt" "$work/big.mlir" --tp-pipeline="$options" 2> /dev/null |
    grep -o 'tp.arena_bytes = [0-9]*' | tail -1 | grep -o '[0-9]*'
done > "$work/big-arenas"
read -r big fusedBig < <(tr '\n' ' ' < "$work/big-arenas" | awk '{print $2, $1}')
echo "16384-token vocabulary, train_step arena bytes: fused $fusedBig, unfused $big"
if [ $((2 * fusedBig)) -ge "$big" ]; then
  echo "fusion: the fused head should plan less than half the memory" >&2
  exit 1
fi

for scheme in "1d-sp:mode=1d grid=2 seq-parallel=true:2" "1d:mode=1d grid=2:2" \
              "2d:mode=2d grid=2x2:4" "3d:mode=3d grid=2x2x2:8"; do
  IFS=: read -r name options ranks <<< "$scheme"
  echo "== $model, $options"
  compile "$name" "$options vocab-chunk=32"
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
# The 1D plan's head is vocabulary-parallel and fused.
grep -q "tp.linear_cross_entropy_grad" <("$bin/tpc-opt" "$work/model.mlir" \
  --tp-pipeline="mode=1d grid=2" 2> /dev/null) ||
  { echo "fusion: the 1D head did not fuse" >&2; exit 1; }

echo "== $model, bf16"
# The head fuses on bf16 storage too (its weight gradient f32).
expect_ops "precision=bf16 vocab-chunk=32" "{'tp.linear_cross_entropy': 1, \
'tp.linear_cross_entropy_grad': 1, 'tp.cross_entropy': 0, 'tp.cross_entropy_grad': 0}"
compile bf16 "precision=bf16 vocab-chunk=32"
compile bf16-unfused "precision=bf16 $unfused"
train 1 bf16
train 1 bf16-unfused
$check losses "$work/bf16-unfused.json" "$work/bf16.json" --rel 1e-2
echo "fusion: PASS"
