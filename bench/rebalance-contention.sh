#!/usr/bin/env bash
# A real straggler that comes and goes: 2 ranks bound to cores train the
# bundled GPT-2 config with --rebalance auto while a CPU-bound process pinned
# to rank 1's core runs from step START to step STOP (started and killed
# when rank 0 prints those steps). Prints the decisions and the median step
# time before, during and after the contention. Uses the plans that
# bench/rebalance.sh built (run that first).
#
#   bench/rebalance-contention.sh [STEPS] [START] [STOP] [POLICY]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-300}
start=${2:-60}
stop=${3:-180}
policy=${4:-auto}
work=$build/bench/rebalance
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f "$work/rb2.tpplan" ]; then
  echo "rebalance-contention: run bench/rebalance.sh first" >&2
  exit 1
fi
name=contention-$policy
mpirun -np 2 --bind-to core --map-by core \
  -x OPENBLAS_NUM_THREADS=1 ${OPENBLAS_CORETYPE:+-x OPENBLAS_CORETYPE} \
  "$bin/tp-run" "$work/rb2.tpplan" --data "$work/fortunes.tokens" \
  --threads 1 --steps "$steps" --lr 1e-3 --warmup 20 --rebalance "$policy" \
  --metrics "$work/$name.json" > "$work/$name.log" &
job=$!
wait_for() { # STEP
  until grep -q "^step $1/" "$work/$name.log" 2> /dev/null; do
    sleep 0.05
    kill -0 $job 2> /dev/null || return 0
  done
}
wait_for "$start"
taskset -c 1 sh -c 'while :; do :; done' &
hog=$!
wait_for "$stop"
kill $hog
wait $job
python3 - "$work/$name.json" "$start" "$stop" <<'PY'
import json, statistics, sys
m = json.load(open(sys.argv[1]))
start, stop = int(sys.argv[2]), int(sys.argv[3])
def median(a, b):
    return statistics.median(r["seconds"] for r in m["loss_curve"]
                             if a <= r["step"] < b) * 1e3
print(f"median step: before {median(1, start):.1f} ms, contended "
      f"{median(start + 30, stop):.1f} ms, after {median(stop + 30, 10**9):.1f} ms")
for d in m["rebalance"]["decisions"]:
    print(f"step {d['step']}: {d['action']} ({d['reason']}); "
          f"{d['bytes_moved'] / 1e6:.2f} MB in {d['move_seconds'] * 1e3:.1f} ms")
PY
