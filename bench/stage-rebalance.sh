#!/usr/bin/env bash
# Stage rebalancing against an emulated straggler (issue 32, item 6): a
# GPT-2 of 8 layers (hidden 256, byte vocabulary, seq 128, 4 micro-batches
# of 2 sequences) as pp 2 (1F1B) on 2 MPI ranks, compiled with
# stage-moves=2 (the cuts 4,4 / 5,3 / 6,2 / 3,5 / 2,6). Stage 1's rank is
# slowed FACTOR times from step 4 (--slow, sleeping after its kernels).
# Per run, REPEATS times: the median step over the last half of STEPS
#   balanced   no straggler (the floor);
#   static     the straggler, no rebalancing (the balanced cut throughout);
#   migrate    the straggler, --rebalance migrate (layers move to stage 0);
# and the cut migrate settled on, the bound (the static step times the best
# available cut's slowest stage over the balanced cut's, each stage's
# compute per predicted second measured in the window before the first
# move) and the share of the gap from static to the bound that migrate
# closed.
#
#   bench/stage-rebalance.sh [FACTOR] [STEPS] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
factor=${1:-3} steps=${2:-40} repeats=${3:-3}
work=$build/bench/stage-rebalance
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$root/tools/build.sh" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, OpenBLAS GEMMs, one thread a rank"
echo '{"model_type": "gpt2", "vocab_size": 256, "n_embd": 256, "n_layer": 8, "n_head": 4, "n_positions": 128}' \
  >"$work/config.json"
"$build/bin/tpc-tokenize" /usr/share/games/fortunes/fortunes -o "$work/text.tokens" >/dev/null
"$build/bin/tpc-import" "$work/config.json" --batch 8 --seq 128 -o "$work/model.mlir"
"$build/bin/tpc-opt" "$work/model.mlir" -o "$work/model.tpplan" 2>/dev/null \
  --tp-pipeline="mode=1d grid=1 pp=2 microbatches=4 stage-moves=2"
"$build/bin/tp-run" "$work/model.tpplan" --print-plan >"$work/model.plan.json"

run() { # NAME [tp-run flags...]
  local name=$1
  shift
  mpirun -np 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 \
    "$build/bin/tp-run" train "$work/model.tpplan" --data "$work/text.tokens" \
    --steps "$steps" --threads 1 --metrics "$work/$name.json" "$@" >"$work/$name.log"
}
for r in $(seq "$repeats"); do
  run balanced-$r
  run static-$r --slow 1:$factor:4
  run migrate-$r --slow 1:$factor:4 --rebalance migrate
done
python3 - "$work" "$steps" "$repeats" "$factor" <<'PY'
import json, statistics, sys
work, steps, repeats, factor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
plan = json.load(open(f"{work}/model.plan.json"))["pipeline"]
seconds, cuts = plan["layer_seconds"], plan["cuts"]
def stage_seconds(cut):
    out, i = [], 0
    for n in cut:
        out.append(sum(seconds[i:i + n])); i += n
    return out
def tail_median(name):
    m = json.load(open(f"{work}/{name}.json"))
    walls = [r["seconds"] for r in m["loss_curve"]]
    return statistics.median(walls[len(walls) // 2:]), m
rows = []
for r in range(1, repeats + 1):
    balanced, _ = tail_median(f"balanced-{r}")
    static, _ = tail_median(f"static-{r}")
    migrate, m = tail_median(f"migrate-{r}")
    decisions = m["rebalance"]["decisions"]
    settled = decisions[-1]["stage_layers"] if decisions else cuts[0]
    # Each stage's compute per predicted second, from the last window before
    # the first move (the straggler there, the balanced cut): the step
    # follows the slowest stage's compute, so the bound is the static step
    # times the best cut's slowest stage over the balanced cut's.
    first = decisions[0]["step"] if decisions else steps
    window = [w for w in m["rebalance"]["windows"] if w["step"] <= first][-1]
    slowness = [c / t for c, t in zip(window["fixed_seconds"], stage_seconds(cuts[0]))]
    step = lambda cut: max(t * s for t, s in zip(stage_seconds(cut), slowness))
    best = min(cuts, key=step)
    bound = static * step(best) / step(cuts[0])
    closed = (static - migrate) / (static - bound) if static > bound else float("nan")
    rows.append((balanced, static, migrate, bound, closed, settled, best))
print(f"factor {factor:g}, {steps} steps, medians of the last {steps - steps // 2}")
print(f"{'run':>4} {'balanced ms':>12} {'static ms':>10} {'migrate ms':>11} {'bound ms':>9} {'closed':>7}  settled  best")
for i, (b, s, mg, bd, c, st, be) in enumerate(rows, 1):
    print(f"{i:>4} {b*1e3:12.1f} {s*1e3:10.1f} {mg*1e3:11.1f} {bd*1e3:9.1f} {c:7.2f}  {st}  {be}")
med = lambda k: statistics.median(row[k] for row in rows)
print(f"median: static/balanced {med(1)/med(0):.2f}x, migrate/balanced {med(2)/med(0):.2f}x, "
      f"static/migrate {med(1)/med(2):.2f}x, gap closed {med(4):.2f}")
PY
