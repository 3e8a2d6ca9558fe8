#!/usr/bin/env bash
# The step simulator on the 64-GPU settings of the 2D/2.5D/3D papers
# (docs/schemes.md, "The papers' ratios"): a GPT-2-style model of hidden
# size H (H/64 heads of 64, LAYERS layers, vocabulary 50304) at batch B x
# seq S, compiled for 1D over 64 ranks, 2D 8x8, 2.5D 4x4x4 and 3D 4x4x4 on
# CLUSTER (default clusters/tacc-longhorn.json), each predicted by
# tp-pipeline's cluster= remark. Prints each scheme's predicted step and
# bytes per rank, then the ratios the papers quote: 3D against 1D (2.32x)
# and 2D (1.57x) [arXiv 2105.14450], 2.5D [4,4,4] against 2D [8,8,1]
# (1.45x) [arXiv 2105.14500v1]. Compiles only: nothing runs.
#
#   bench/paper-ratios.sh [CLUSTER] [LAYERS] "H B S" ...
#   (default settings: "4096 64 512" "8192 64 512" "8192 16 2048")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cluster=$(realpath "${1:-$root/clusters/tacc-longhorn.json}")
layers=${2:-4}
shift $(($# < 2 ? $# : 2))
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=("4096 64 512" "8192 64 512" "8192 16 2048")
work=$build/bench/paper-ratios
mkdir -p "$work"

predict() { # MLIR NAME OPTIONS: prints "ms bytes"
  "$build/bin/tpc-opt" "$1" -o /dev/null --tp-pipeline="$3 cluster=$cluster" \
    2> "$work/$2.remarks" || { echo "failed failed"; return; }
  sed -n 's/.*@train_step on [^:]*: \([0-9.]*\) ms per run.*; \([0-9]*\) bytes per rank.*/\1 \2/p' \
    "$work/$2.remarks"
}
for setting in "${settings[@]}"; do
  read -r hidden batch seq <<< "$setting"
  name=h$hidden-b$batch-s$seq
  python3 - "$hidden" "$layers" "$seq" "$work/$name.json" <<'PY'
import json, sys
hidden, layers, seq, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
json.dump({"model_type": "gpt2", "vocab_size": 50304, "n_embd": hidden,
           "n_layer": layers, "n_head": hidden // 64, "n_positions": seq,
           "activation_function": "gelu_new", "tie_word_embeddings": True},
          open(out, "w"))
PY
  "$build/bin/tpc-import" "$work/$name.json" --batch "$batch" --seq "$seq" -o "$work/$name.mlir"
  echo "== hidden $hidden ($((hidden / 64)) heads), $layers layers, batch $batch x seq $seq on $(basename "$cluster" .json)"
  declare -A ms=()
  for scheme in "1d:mode=1d grid=64" "2d:mode=2d grid=8x8" \
                "2.5d:mode=2.5d grid=4x4x4" "3d:mode=3d grid=4x4x4"; do
    key=${scheme%%:*}
    read -r time bytes < <(predict "$work/$name.mlir" "$name-$key" "${scheme#*:}")
    ms[$key]=$time
    printf "  %-5s %-24s %12s ms per step %16s bytes per rank\n" "$key" "${scheme#*:}" "$time" "$bytes"
  done
  python3 - "${ms[1d]}" "${ms[2d]}" "${ms[2.5d]}" "${ms[3d]}" <<'PY'
import sys
def ratio(a, b):
    try:
        return float(a) / float(b)
    except ValueError:
        return None
one, two, twohalf, three = sys.argv[1:]
for label, value, published in (("3D vs 1D", ratio(one, three), 2.32),
                                ("3D vs 2D", ratio(two, three), 1.57),
                                ("2.5D [4,4,4] vs 2D [8,8,1]", ratio(two, twohalf), 1.45)):
    if value is None:
        print(f"  {label}: not predicted (a scheme did not compile)")
    else:
        print(f"  {label}: predicted {value:.2f}x, published {published:.2f}x "
              f"({(value - published) / published:+.0%})")
PY
done
