#!/usr/bin/env bash
# Forward-pass numerics against HuggingFace/PyTorch: builds a small random
# model with transformers (config.json + model.safetensors + tokens), runs
#   tpc-import | tpc-opt --tp-pipeline | tp-run
# and checks logits and loss against torch within 1e-4 relative.
#
#   forward-numerics.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin

if [ ! -x "$python" ]; then
  echo "forward-numerics: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
# Non-default norm epsilons and rope_theta: an importer that ignored one of
# them would still pass with the defaults.
case "$model" in
  gpt2)
    "$python" "$here/reference.py" make-model --model-type gpt2 --out "$work" \
      --seed 11 --batch 2 --seq 24 --layers 3 --hidden 96 --heads 4 --vocab 128 \
      --norm-eps 1e-3 ;;
  llama)
    # Grouped-query attention (6 query heads over 2 key/value heads), untied.
    "$python" "$here/reference.py" make-model --model-type llama --out "$work" \
      --seed 12 --batch 2 --seq 24 --layers 3 --hidden 96 --heads 6 --kv-heads 2 \
      --intermediate 256 --vocab 128 --no-tie --rope-theta 500000 --norm-eps 1e-3 ;;
  *) echo "forward-numerics: unknown model '$model'" >&2; exit 2 ;;
esac
"$bin/tpc-import" "$work/config.json" --batch 2 --seq 24 -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/model.tpplan"
"$bin/tp-run" "$work/model.tpplan" --data "$work/tokens.tokens" \
  --weights "$work/model.safetensors" --dump "$work/out.safetensors" \
  --metrics "$work/metrics.json"
"$python" "$here/reference.py" compare --reference "$work/reference.safetensors" \
  --actual "$work/out.safetensors" --rtol 1e-4
