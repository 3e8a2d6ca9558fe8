#!/usr/bin/env bash
# Rebalancing on mixed hardware (docs/rebalancing.md): step time relative to
# the balanced run for --rebalance off / resize / migrate / auto, next to the
# ideal bound N / (N - 1 + 1/s) for one rank s times slower, and the loss
# after STEPS steps of each on English text (resize's accuracy cost as a
# loss gap), and the time from the straggler's onset to the first decision.
# The bundled GPT-2 config (byte-level, d 256, 4 layers, 4 heads), batch 8,
# seq 128, compiled with rebalance=true and headroom 1 (a rank may hold every
# block, so the bound is reachable).
#   2 ranks, one per core: rank 1 emulated 2x and 4x slower (--slow) from
#     step ONSET on, and really slowed: a CPU-bound process pinned to rank 1's
#     core from about step ONSET on (half the core);
#   4 ranks on 2 cores (oversubscribed): rank 3 emulated 2x slower, on 1D
#     over 4 ranks (four), on dp 2 x 1D 2 (dp; ZeRO-1 with dpzero) and on 2D
#     2x2 (2d). In the last three the blocks move along one axis of 2 ranks,
#     each position at its slowest rank's pace, so the bound is that of 2
#     ranks.
# Under contention also fixed splits of the blocks by stated speeds
# (--rank-speeds 1,S for S in 0.6 0.5 0.4 0.25, policy off): the best of
# them is what any static assignment achieves there, the reference the
# migrate and auto rows are compared with at the end.
# Step times are medians over the steps after ONSET + 30 (so after every
# decision) of one run per policy. The emulation sleeps, and a sleep
# overshoots, so the slowdown the off run measures (s') exceeds S; the table
# gives the bound for both.
#
# CASES (default all) picks some of: emulated2, emulated4, contended, four,
# dp, dpzero, 2d;
# CONFIG (environment) another config.json in place of the bundled one.
#
#   bench/rebalance.sh [STEPS] [ONSET] [CASES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-300}
onset=${2:-40}
cases=${3:-emulated2,emulated4,contended,four,dp,dpzero,2d}
for case in ${cases//,/ }; do
  case $case in
    emulated2 | emulated4 | contended | four | dp | dpzero | 2d) ;;
    *)
      echo "bench/rebalance.sh: unknown case '$case' (emulated2, emulated4, contended, four, dp, dpzero, 2d)" >&2
      exit 2
      ;;
  esac
done
want() { [[ ",$cases," == *",$1,"* ]]; }
work=$build/bench/rebalance
mkdir -p "$work"
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fortunes=/usr/share/games/fortunes
(cd "$fortunes" && sed '/^%$/d' computers science literature wisdom humorists \
  work education riddles fortunes linux magic) > "$work/fortunes.txt"
"$bin/tpc-tokenize" "$work/fortunes.txt" -o "$work/fortunes.tokens" > /dev/null
"$bin/tpc-import" "${CONFIG:-$root/examples/gpt2-bytes/config.json}" --batch 8 --seq 128 \
  -o "$work/model.mlir"
# Plans by name: rb2, rb4 (1D), dp (dp 2 x 1D 2), dpzero (with ZeRO-1), 2d.
for plan in "rb2:mode=1d grid=2" "rb4:mode=1d grid=4" "dp:mode=1d grid=2 dp=2" \
            "dpzero:mode=1d grid=2 dp=2 shard-optimizer=true" "2d:mode=2d grid=2x2"; do
  IFS=: read -r name options <<< "$plan"
  if [[ $name == rb* ]] || want "$name"; then
    "$bin/tpc-opt" "$work/model.mlir" -o "$work/$name.tpplan" \
      --tp-pipeline="$options rebalance=true rebalance-granularity=64 rebalance-headroom=1" \
      2> "$work/$name.remarks"
  fi
done
grep "remark: rebalance point @" "$work/rb2.remarks" | sed 's/.*remark: //'

run() { # NAME RANKS [tp-run flags...]; PLAN (environment): rb$RANKS unless set
  local name=$1 ranks=$2 plan=${PLAN:-rb$2}
  shift 2
  local bind=core
  [ "$ranks" -gt 2 ] && bind=none
  mpirun -np "$ranks" --oversubscribe --bind-to $bind --map-by core \
    -x OPENBLAS_NUM_THREADS=1 ${OPENBLAS_CORETYPE:+-x OPENBLAS_CORETYPE} \
    "$bin/tp-run" "$work/$plan.tpplan" --data "$work/fortunes.tokens" \
    --threads 1 --steps "$steps" --lr 1e-3 --warmup 20 \
    --metrics "$work/$name.json" "$@" > "$work/$name.log"
}
# A CPU-bound process on rank 1's core (core 1: ranks are bound in order)
# from about step ONSET on: started when rank 0 prints that step.
contended() { # NAME [tp-run flags...]
  local name=$1
  shift
  run "$name" 2 "$@" &
  local job=$!
  until grep -q "^step $onset/" "$work/$name.log" 2> /dev/null; do
    sleep 0.05
    kill -0 $job 2> /dev/null || break
  done
  taskset -c 1 sh -c 'while :; do :; done' &
  local hog=$!
  wait $job
  kill $hog
}

summary() { # NAME BASELINE SLOWDOWN RANKS OFF
  python3 "$root/bench/rebalance_summary.py" "$work/$1.json" \
    --baseline "$work/$2.json" --slowdown "$3" --ranks "$4" \
    --off "$work/$5.json" --onset "$onset" --name "$1"
}

# Under real contention, fixed splits of the blocks (--rank-speeds 1,S,
# policy off): the best of them is what any static assignment achieves.
statics="0.6 0.5 0.4 0.25"
run balanced2 2
if want four; then run balanced4 4; fi
for policy in off resize migrate auto; do
  for s in 2 4; do
    if want emulated$s; then run emulated$s-$policy 2 --slow 1:$s:$onset --rebalance $policy; fi
  done
  if want contended; then contended contended-$policy --rebalance $policy; fi
  if want four; then run four-emulated2-$policy 4 --slow 3:2:$onset --rebalance $policy; fi
  for plan in dp dpzero 2d; do
    if want $plan; then
      PLAN=$plan run $plan-emulated2-$policy 4 --slow 3:2:$onset --rebalance $policy
    fi
  done
done
for plan in dp dpzero 2d; do
  if want $plan; then PLAN=$plan run $plan-balanced 4; fi
done
if want contended; then
  for speed in $statics; do contended contended-static-$speed --rank-speeds 1,$speed; done
fi
python3 "$root/bench/rebalance_summary.py" --header
for policy in off resize migrate auto; do
  if want emulated2; then summary emulated2-$policy balanced2 2 2 emulated2-off; fi
done
for policy in off resize migrate auto; do
  if want emulated4; then summary emulated4-$policy balanced2 4 2 emulated4-off; fi
done
for policy in off resize migrate auto; do
  if want contended; then summary contended-$policy balanced2 2 2 contended-off; fi
done
if want contended; then
  for speed in $statics; do
    summary contended-static-$speed balanced2 2 2 contended-off
  done
  python3 "$root/bench/rebalance_summary.py" --onset "$onset" \
    --best-static "$work"/contended-static-*.json \
    --versus "$work/contended-migrate.json" "$work/contended-auto.json"
fi
for policy in off resize migrate auto; do
  if want four; then summary four-emulated2-$policy balanced4 2 4 four-emulated2-off; fi
done
for plan in dp dpzero 2d; do
  for policy in off resize migrate auto; do
    if want $plan; then
      summary $plan-emulated2-$policy $plan-balanced 2 2 $plan-emulated2-off
    fi
  done
done
