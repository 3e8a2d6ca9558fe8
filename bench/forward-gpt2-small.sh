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
source "$root/bench/gpt2-small-setup.sh"

"$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="train=false" -o "$work/model.tpplan"
"$build/bin/tpc-bench-program" "$work/model.tpplan" --program forward --runs "$runs"
