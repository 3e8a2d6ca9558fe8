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
source "$root/bench/gpt2-small-setup.sh"
for remat in none layer; do
  "$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="remat=$remat" \
    -o "$work/model-$remat.tpplan"
  echo "== remat=$remat"
  "$build/bin/tpc-bench-program" "$work/model-$remat.tpplan" \
    --program train_step --runs "$runs"
done
