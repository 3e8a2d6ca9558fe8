#!/usr/bin/env bash
# Training numerics against PyTorch, for a small GPT-2 or LLaMA (GQA) model:
#  1. every parameter's gradient (tp-run --dump-grads) against autograd, with
#     and without layer recomputation, and with attention and the
#     elementwise chains (SwiGLU, residual add + norm) and the products'
#     epilogues (bias, GELU, the cross-entropy head) unfused;
#  2. 20 AdamW steps (warmup + cosine decay, global-norm clipping, weight
#     decay on matrices) against torch.optim.AdamW's loss trajectory;
#  3. the export loads with HuggingFace's from_pretrained, bit-exact, and
#     gives the runtime's logits;
#  4. a run stopped at step 10 and resumed from its checkpoint reproduces the
#     uninterrupted run bit for bit (losses and final weights).
#
# With DEVICE (cuda), every run is on that device; the test is skipped (exit
# 77) when it cannot run there.
#
#   training-numerics.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 model=$4 device=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
source "$here/device-probe.sh"
tp_run() { "$bin/tp-run" "$@" ${device:+--device "$device"}; }
ref="$python $here/reference.py"
source "$here/small-model.sh"
train_ref="$python $here/training_reference.py"

if [ ! -x "$python" ]; then
  echo "training-numerics: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
batch=2 seq=16
# Non-default norm epsilons and rope_theta, as in forward-numerics.sh.
small_model "$work" "$model" 21 $batch $seq 200
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq -o "$work/model.mlir"

echo "== gradients"
# Fused attention (the default; one tp.attention_grad per layer in each of
# @gradients and @train_step), with layer recomputation, and the unfused
# matmul/softmax form.
fused=$("$bin/tpc-opt" "$work/model.mlir" --tp-pipeline | grep -c "tp.attention_grad" || true)
if [ "$fused" -ne 4 ]; then
  echo "training-numerics: expected 4 fused attention gradients, got $fused" >&2
  exit 1
fi
for variant in none layer unfused; do
  case $variant in
    unfused) options="fuse-attention=false fuse-elementwise=false fuse-products=false" ;;
    *) options="remat=$variant" ;;
  esac
  # AdamW's settings are compiled in: non-default ones, so that one the
  # plan ignored would show against the reference's.
  [ $variant != none ] || options="$options beta2=0.99 weight-decay=0.05"
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="$options" -o "$work/$variant.tpplan"
  tp_run "$work/$variant.tpplan" --data "$work/tokens.tokens" \
    --weights "$work/model.safetensors" --dump-grads "$work/grads-$variant.safetensors"
  $train_ref gradients --model "$work" --batch $batch --seq $seq \
    --actual "$work/grads-$variant.safetensors"
done

echo "== 20 AdamW steps"
flags=(--steps 20 --lr 2e-3 --min-lr 2e-4 --warmup 5 --decay-steps 20 --clip 1.0)
tp_run "$work/none.tpplan" --data "$work/tokens.tokens" \
  --weights "$work/model.safetensors" "${flags[@]}" --metrics "$work/train.json" \
  --checkpoint-dir "$work/ckpt-full" --export "$work/export" > "$work/train.log"
$train_ref train --model "$work" --batch $batch --seq $seq --steps 20 --lr 2e-3 \
  --min-lr 2e-4 --warmup 5 --decay-steps 20 --clip 1.0 --weight-decay 0.05 \
  --beta2 0.99 \
  --actual "$work/train.json"

echo "== export"
tp_run "$work/none.tpplan" --data "$work/tokens.tokens" \
  --weights "$work/export/model.safetensors" --program forward \
  --dump "$work/export-logits.safetensors"
$train_ref export --export "$work/export" --tokens "$work/tokens.tokens" \
  --batch $batch --seq $seq --actual "$work/export-logits.safetensors"

echo "== resume"
# The same schedule (decay over 20 steps), stopped after 10.
tp_run "$work/none.tpplan" --data "$work/tokens.tokens" \
  --weights "$work/model.safetensors" --steps 10 --lr 2e-3 --min-lr 2e-4 \
  --warmup 5 --decay-steps 20 --clip 1.0 \
  --checkpoint-dir "$work/ckpt" --checkpoint-every 5 > /dev/null
tp_run "$work/none.tpplan" --data "$work/tokens.tokens" "${flags[@]}" \
  --resume "$work/ckpt" --checkpoint-dir "$work/ckpt" \
  --metrics "$work/resumed.json" --export "$work/export-resumed" \
  > "$work/resumed.log"
grep -q "resumed from step 10" "$work/resumed.log"
# Steps 11-20 of a metrics file, read with a JSON parser; repr() prints each
# loss exactly, so equal lines mean bit-identical losses.
losses() {
  "$python" -c 'import json, sys
for r in json.load(open(sys.argv[1]))["loss_curve"]:
    if r["step"] > 10: print(r["step"], repr(r["loss"]))' "$1"
}
diff <(losses "$work/train.json") <(losses "$work/resumed.json")
[ "$(losses "$work/resumed.json" | wc -l)" -eq 10 ]
cmp "$work/export/model.safetensors" "$work/export-resumed/model.safetensors"
cmp "$work/ckpt-full/step-00000020/state.safetensors" \
    "$work/ckpt/step-00000020/state.safetensors"
echo "resume: steps 11-20 and the final weights and moments are bit-identical"

echo "== resume at another batch size"
# tp-sched's resize: 7 steps at batch 2, then steps 8-12 resumed on a plan of
# batch 4 with the learning rate scaled, against PyTorch running the same
# segments over the same data (batches follow one another through the
# stream, wrapping at its end, across the change).
"$bin/tpc-import" "$work/config.json" --batch 4 --seq $seq -o "$work/model-b4.mlir"
"$bin/tpc-opt" "$work/model-b4.mlir" --tp-pipeline="beta2=0.99 weight-decay=0.05" \
  -o "$work/b4.tpplan"
segment=(--warmup 3 --decay-steps 20 --clip 1.0 --checkpoint-dir "$work/ckpt-batch")
tp_run "$work/none.tpplan" --data "$work/tokens.tokens" --weights "$work/model.safetensors" \
  --steps 7 --lr 2e-3 --min-lr 2e-3 "${segment[@]}" --metrics "$work/batch2.json" > /dev/null
tp_run "$work/b4.tpplan" --data "$work/tokens.tokens" --resume "$work/ckpt-batch" \
  --steps 12 --lr 4e-3 --min-lr 4e-3 "${segment[@]}" --metrics "$work/batch4.json" > /dev/null
"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
first, second = (json.load(open(f"{work}/batch{b}.json")) for b in (2, 4))
manifest = json.load(open(f"{work}/ckpt-batch/step-00000012/manifest.json"))
# 7 steps of 2 x 16 tokens, then 5 of 4 x 16; the 200-token stream wrapped at step 7.
expected = 7 * 32 + 5 * 64
for where, seen in (("metrics", second["tokens_seen"]), ("manifest", manifest["tokens_seen"])):
    if seen != expected:
        sys.exit(f"resume at another batch: {where} tokens_seen {seen}, expected {expected}")
position = 0
for per_step in [32] * 7 + [64] * 5:
    position = (0 if position + per_step + 1 > 200 else position) + per_step
if manifest["data_offset"] != position or manifest["version"] != 3:
    sys.exit(f"resume at another batch: manifest {manifest}")
json.dump({"loss_curve": first["loss_curve"] + second["loss_curve"]},
          open(f"{work}/segments.json", "w"))
PY
$train_ref train --model "$work" --batch $batch --seq $seq --steps 12 --lr 2e-3 \
  --min-lr 2e-3 --warmup 3 --decay-steps 20 --clip 1.0 --weight-decay 0.05 --beta2 0.99 \
  --segments 7:2:2e-3,12:4:4e-3 --actual "$work/segments.json"
