#!/usr/bin/env bash
# The step simulator against tp-run on this machine (issues 13 and 32): the
# GPT-2-small shape (vocabulary padded to 50304) at batch BATCH x seq 256 on
# 1, 2 and 4 MPI ranks under every scheme that fits, each compiled with
# cluster=CLUSTER so tp-pipeline prints the predicted step, then run for
# STEPS steps. Without CLUSTER, tpc-calibrate measures this machine first
# (2 ranks, into the work directory: the file describes the machine that
# runs the benchmark, whichever it is). Prints per run the predicted and the measured median step (steps
# after the first) and the prediction's error; the last line is the median
# and worst absolute error. One rank runs 2 threads (the whole machine),
# several ranks 1 thread each (4 ranks oversubscribe the 2 cores).
#
#   bench/simulator-calibration.sh [BATCH] [STEPS] [CLUSTER]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
batch=${1:-4}
steps=${2:-4}
work=$build/bench/simulator-calibration
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "${3:-}" ]; then
  cluster=$(realpath "$3")
else
  cluster=$work/this-machine.json
  mpirun -np 2 --bind-to none "$build/bin/tpc-calibrate" -o "$cluster" > /dev/null
fi
source "$root/bench/gpt2-small-setup.sh"
config=$work/config.json
padded_gpt2_small_config "$config"
"$build/bin/tpc-import" "$config" --batch "$batch" --seq 256 -o "$work/model.mlir"
"$build/bin/tpc-tokenize" /usr/share/games/fortunes/fortunes -o "$work/text.tokens" > /dev/null

runs=(
  "1 none"
  "2 mode=1d grid=2"
  "2 mode=1d grid=2 seq-parallel=true"
  "2 mode=1d grid=1 dp=2"
  "4 mode=1d grid=4"
  "4 mode=1d grid=4 seq-parallel=true"
  "4 mode=2d grid=2x2"
  "4 mode=1d grid=2 dp=2"
  "4 mode=1d grid=1 dp=4"
)
rm -f "$work/errors"
printf "%-40s %5s %12s %12s %8s\n" run ranks "predicted s" "measured s" error
for run in "${runs[@]}"; do
  read -r ranks options <<< "$run"
  name=$(echo "$ranks-$options" | tr ' =' '_-')
  [ "$options" = none ] && options=""
  "$build/bin/tpc-opt" "$work/model.mlir" -o "$work/$name.tpplan" \
    --tp-pipeline="$options cluster=$cluster" 2> "$work/$name.remarks"
  predicted=$(sed -n 's/.*@train_step on [^:]*: \([0-9.]*\) ms per run.*/\1/p' "$work/$name.remarks")
  threads=1 bind=core
  [ "$ranks" = 1 ] && threads=2 bind=none
  [ "$ranks" -gt "$(nproc)" ] && bind=none
  # OPENBLAS_CORETYPE travels only when set (mpirun warns of an unset one).
  env=(-x OPENBLAS_NUM_THREADS=$threads)
  [ -n "${OPENBLAS_CORETYPE:-}" ] && env+=(-x OPENBLAS_CORETYPE)
  mpirun -np "$ranks" --oversubscribe --bind-to $bind --map-by core "${env[@]}" \
    "$build/bin/tp-run" "$work/$name.tpplan" --data "$work/text.tokens" \
    --steps "$steps" --threads $threads --metrics "$work/$name.json" > "$work/$name.log"
  read -r measured _ < <(python3 "$root/bench/step_summary.py" "$work/$name.json")
  error=$(python3 -c "print(f'{($predicted / 1e3 - $measured) / $measured:+.1%}')")
  echo "${error%\%}" >> "$work/errors"
  printf "%-40s %5d %12.3f %12.3f %8s\n" "${options:-one rank}" "$ranks" \
    "$(python3 -c "print($predicted / 1e3)")" "$measured" "$error"
done
python3 - "$work/errors" <<'PY'
import statistics, sys
errors = [abs(float(x)) for x in open(sys.argv[1])]
print(f"|error|: median {statistics.median(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)} runs")
PY
