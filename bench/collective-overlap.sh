#!/usr/bin/env bash
# How much collective time the collective matmuls (tp-collective-matmul)
# hide behind GEMMs: the GPT-2-small shape cut to LAYERS layers (d 768, 12
# heads, vocab 50304, seq 256, batch BATCH) trained for STEPS steps on 2
# ranks as 1D + sequence parallelism and on 4 ranks as 2D 2x2, each compiled
# with collective-matmul=false (blocking all-gathers and reduce-scatters)
# and =true (ring steps). Per run: median step time and seconds per step
# spent in communication steps (tp-run's op statistics: a blocking
# collective's whole call; a ring shift's start and wait calls, i.e. only the
# part not overlapped). Hidden fraction = 1 - (communication with ring
# steps) / (communication without). Runs alternate and repeat REPEATS times;
# medians are reported.
#
#   bench/collective-overlap.sh [BATCH] [STEPS] [LAYERS] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
batch=${1:-4}
steps=${2:-4}
layers=${3:-4}
repeats=${4:-3}
work=$build/bench/collective-overlap
mkdir -p "$work"
# The environment's kernels (Haswell on these machines); SkylakeX's are
# about 1.8x faster on AVX-512 cores: run both to compare.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
"$root/tools/build.sh" >/dev/null
config=$work/config.json
python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=50304, n_layer=int(sys.argv[3]))
json.dump(c, open(sys.argv[2], "w"))' \
  "$root/bench/gpt2-small/config.json" "$config" "$layers"
"$build/bin/tpc-import" "$config" --batch "$batch" --seq 256 -o "$work/model.mlir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$build/bin/tpc-tokenize" /usr/share/games/fortunes/fortunes \
  -o "$work/text.tokens" > /dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE; batch $batch, seq 256, $layers layers, $steps steps per run"

schemes=("sp2:2:mode=1d grid=2 seq-parallel=true" "2d:4:mode=2d grid=2x2")
for scheme in "${schemes[@]}"; do
  IFS=: read -r name ranks options <<< "$scheme"
  for cm in false true; do
    "$build/bin/tpc-opt" "$work/model.mlir" -o "$work/$name-$cm.tpplan" \
      --tp-pipeline="$options collective-matmul=$cm" 2> /dev/null
  done
done

# Median step (after the first) and communication seconds per step.
summary() { python3 "$root/bench/step_summary.py" "$1"; }

for scheme in "${schemes[@]}"; do
  IFS=: read -r name ranks options <<< "$scheme"
  declare -A step comm
  for cm in false true; do step[$cm]=""; comm[$cm]=""; done
  for ((r = 0; r < repeats; ++r)); do
    for cm in false true; do
      mpirun -np "$ranks" --oversubscribe --bind-to none \
        -x OPENBLAS_CORETYPE -x OPENBLAS_NUM_THREADS=1 \
        "$build/bin/tp-run" "$work/$name-$cm.tpplan" --data "$work/text.tokens" \
        --steps "$steps" --threads 1 --metrics "$work/$name-$cm.json" > /dev/null
      read -r s c _ < <(summary "$work/$name-$cm.json")
      step[$cm]+="$s "; comm[$cm]+="$c "
    done
  done
  python3 - "$name" "$options" "${step[false]}" "${comm[false]}" \
    "${step[true]}" "${comm[true]}" <<'PY'
import statistics, sys
name, options = sys.argv[1:3]
med = lambda s: statistics.median(float(x) for x in s.split())
step_off, comm_off, step_on, comm_on = map(med, sys.argv[3:7])
print(f"{name} ({options}): collective-matmul=false step {step_off:.3f} s, "
      f"communication {comm_off:.3f} s/step; =true step {step_on:.3f} s, "
      f"exposed communication {comm_on:.3f} s/step; hidden "
      f"{100 * (1 - comm_on / comm_off):.0f}% of the collective time, "
      f"step {step_off / step_on:.2f}x")
PY
  unset step comm
done
