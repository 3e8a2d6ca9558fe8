#!/usr/bin/env bash
# Fused attention (tp-fuse-attention, the default) against the unfused
# matmul/softmax/matmul form: the one-rank training step of the GPT-2-small
# shape at sequence 256 and 1024: the step's median, the planned arena and
# the time in the product and attention kernels, both plans measured
# alternately in the same run.
#
#   bench/attention.sh [RUNS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
runs=${1:-3}
rounds=${2:-2}
work=$build/bench/attention
mkdir -p "$work"
"$root/tools/build.sh" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
for shape in "4 256" "1 1024"; do
  read -r batch seq <<<"$shape"
  "$build/bin/tpc-import" "$root/bench/gpt2-small/config.json" --batch "$batch" \
    --seq "$seq" -o "$work/model-$seq.mlir"
  for fuse in true false; do
    "$build/bin/tpc-opt" "$work/model-$seq.mlir" \
      --tp-pipeline="fuse-attention=$fuse" -o "$work/$seq-$fuse.tpplan"
  done
  echo "== batch $batch x seq $seq, train_step, $runs runs x $rounds rounds"
  for round in $(seq "$rounds"); do
    for fuse in true false; do
      out=$("$build/bin/tpc-bench-program" "$work/$seq-$fuse.tpplan" \
        --program train_step --runs "$runs")
      step=$(grep -o 'train_step median [0-9.]* ms' <<<"$out" | awk '{print $3}')
      arena=$(grep -o 'arena [0-9.]* MB' <<<"$out" | awk '{print $2}')
      # Matmul includes the scores and context products when unfused.
      kernels=$(grep -o ' \(Matmul\|Attention\|AttentionGrad\|Softmax\|SoftmaxGrad\)=[0-9.]*' <<<"$out" |
        awk -F= '{printf "%s%s %.0f", sep, $1, $2; sep=","}')
      echo "round $round fuse-attention=$fuse: step $step ms, arena $arena MB;" \
        "ms per kind:$kernels"
    done
  done
done
