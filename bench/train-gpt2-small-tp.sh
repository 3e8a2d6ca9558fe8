#!/usr/bin/env bash
# Training step of the GPT-2-small shape (12 layers, d 768, vocab 50257,
# seq 256) with 1D tensor parallelism on 2 MPI ranks, one per core, against
# one rank on one core and one rank on both cores: median step time, the
# speedup, the collectives' share of the step (their time in tp-run's op
# statistics) and the bytes each rank sends per step against the formula of
# docs/communication.md. With and without sequence parallelism.
#
#   bench/train-gpt2-small-tp.sh [BATCH] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
batch=${1:-4}
steps=${2:-6}
work=$build/bench/gpt2-small-tp
source "$root/bench/gpt2-small-setup.sh"
# The vocabulary padded to 50304; the one-rank runs use the same padded
# model.
config=$work/config.json
padded_gpt2_small_config "$config"
"$build/bin/tpc-import" "$config" --batch "$batch" --seq 256 -o "$work/model.mlir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
text=/usr/share/games/fortunes/fortunes
"$build/bin/tpc-tokenize" "$text" -o "$work/text.tokens" > /dev/null

"$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/one.tpplan"
for sp in false true; do
  "$build/bin/tpc-opt" "$work/model.mlir" -o "$work/tp2-sp-$sp.tpplan" \
    --tp-pipeline="mode=1d grid=2 seq-parallel=$sp" 2> "$work/tp2-sp-$sp.remarks"
done

# Median step, communication seconds per step and bytes per step by kind.
summary() { python3 "$root/bench/step_summary.py" "$1"; }
run() { # NAME RANKS THREADS PLAN
  local name=$1 ranks=$2 threads=$3 plan=$4
  # One core per single-threaded rank; a two-thread rank gets both.
  local bind=core
  [ "$threads" -gt 1 ] && bind=none
  mpirun -np "$ranks" --oversubscribe --bind-to $bind --map-by core \
    -x OPENBLAS_CORETYPE -x OPENBLAS_NUM_THREADS="$threads" \
    "$build/bin/tp-run" "$plan" --data "$work/text.tokens" --steps "$steps" \
    --threads "$threads" --metrics "$work/$name.json" > "$work/$name.log"
  read -r median comm sent < <(summary "$work/$name.json")
  printf "%-22s %d rank(s) x %d thread(s): median step %7.3f s, collectives %6.3f s/step, %s\n" \
    "$name" "$ranks" "$threads" "$median" "$comm" "$sent"
  eval "median_${name//-/_}=$median comm_${name//-/_}=$comm"
}
echo "batch $batch, seq 256, $steps steps per run (first one not counted)"
run one-1thread 1 1 "$work/one.tpplan"
run one-2threads 1 2 "$work/one.tpplan"
run tp2 2 1 "$work/tp2-sp-false.tpplan"
run tp2-sp 2 1 "$work/tp2-sp-true.tpplan"
for name in tp2 tp2-sp; do
  var=${name//-/_}
  awk -v base="$median_one_1thread" -v two="$median_one_2threads" \
      -v t="$(eval echo \$median_$var)" -v c="$(eval echo \$comm_$var)" -v n="$name" 'BEGIN {
    printf "%s: speedup %.2fx over 1 rank x 1 thread, %.2fx over 1 rank x 2 threads; collectives %.1f%% of the step\n",
      n, base / t, two / t, 100 * c / t }'
done
for sp in false true; do
  python3 "$root/test/integration/tensor_parallel_check.py" volume \
    "$config" "$work/tp2$([ $sp = true ] && echo -sp).json" "$work/tp2-sp-$sp.remarks" \
    --ranks 2 --batch "$batch" --seq 256 $([ $sp = true ] && echo --seq-parallel)
done
