#!/usr/bin/env bash
# One-rank training step (forward, backward, clipping, AdamW) of the
# GPT-2-small shape (12 layers, d 768, vocab 50257, seq 256) against the
# OpenBLAS SGEMM floor of the same matmul shapes measured in the same
# process, and the planned peak memory with and without layer recomputation.
#
#   bench/train-gpt2-small.sh [BATCH] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
batch=${1:-4}
runs=${2:-3}
work=$build/bench/gpt2-small-train
mkdir -p "$work"
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi

"$root/tools/build.sh" >/dev/null
"$build/bin/tpc-import" "$root/bench/gpt2-small/config.json" --batch "$batch" \
  --seq 256 -o "$work/model.mlir"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
for remat in none layer; do
  "$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="remat=$remat" \
    -o "$work/model-$remat.tpplan"
  echo "== remat=$remat"
  "$build/bin/tpc-bench-program" "$work/model-$remat.tpplan" \
    --program train_step --runs "$runs"
done
