#!/usr/bin/env bash
# Forward tokens/s of a GPT-2-small-shaped model (12 layers, d 768, 12 heads,
# vocab 50257, seq 256) on one rank, against the OpenBLAS SGEMM floor of the
# same matmul shapes measured in the same process.
#
#   bench/forward-gpt2-small.sh [BATCH] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
batch=${1:-4}
runs=${2:-5}
work=$build/bench/gpt2-small
mkdir -p "$work"

# OpenBLAS 0.3.21 does not recognise recent AMD cores and falls back to its
# AVX2 kernels; on AVX-512 machines its SkylakeX kernels are twice as fast.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi

"$root/tools/build.sh" >/dev/null
"$build/bin/tpc-import" "$root/bench/gpt2-small/config.json" --batch "$batch" \
  --seq 256 -o "$work/model.mlir"
"$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="train=false" -o "$work/model.tpplan"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
"$build/bin/tpc-bench-program" "$work/model.tpplan" --program forward --runs "$runs"
