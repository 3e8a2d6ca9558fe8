#!/usr/bin/env bash
# Issue 34, item 4: four small GPT-2 jobs (hidden 128, 2 layers, seq 32;
# 800-2000 samples; batch 8 asked on 1 or 2 ranks, 4-16 on up to 4 allowed)
# on a pool of 4 ranks of this machine (oversubscribed), two queued first
# and two once the first segment runs, under FIFO, LAS and ONES; each
# policy's job completion times and its timeline SVG (LAS's queues at 15
# and 45 rank-seconds, to fit jobs this short). Predictions come from
# test/tp-sched/Inputs/compute-bound.json (CLUSTER overrides; with a file
# tpc-calibrate wrote here ONES keeps every job on one rank). Not a test;
# results go to docs/performance.md.
#
#   bench/sched-real.sh [BUILD_DIR] [REPEATS] [OUT_DIR] [CLUSTER]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build} repeats=${2:-3} out=${3:-/tmp/tpc-sched-real}
cluster=${4:-$root/test/tp-sched/Inputs/compute-bound.json}
bin=$build/bin python=$root/.venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_base_warn_component_unused=0 OPENBLAS_NUM_THREADS=1
rm -rf "$out" && mkdir -p "$out"
for i in 0 1 2 3; do
  $python "$root/test/integration/reference.py" make-model --model-type gpt2 --out "$out/m$i" \
    --seed $((30 + i)) --batch 2 --seq 32 --layers 2 --hidden 128 --heads 4 --vocab 96 \
    --tokens 4000 --norm-eps 2e-3 > /dev/null
  cat > "$out/job$i.json" <<JSON
{"name": "j$i", "config": "m$i/config.json", "data": "m$i/tokens.tokens",
 "weights": "m$i/model.safetensors", "seq": 32, "batch_sizes": [4, 8, 16],
 "batch": 8, "ranks": $((i % 2 + 1)), "max_ranks": 4,
 "target_samples": $((800 + 400 * i)), "lr": 2e-3, "warmup": 3,
 "pipeline": "beta2=0.99 weight-decay=0.05"}
JSON
done
for r in $(seq "$repeats"); do
  for policy in fifo las ones; do
    state=$out/$policy-$r
    "$bin/tp-sched" submit "$state" "$out/job0.json" "$out/job1.json" > /dev/null
    "$bin/tp-sched" run "$state" --policy $policy --ranks 4 --cluster "$cluster" \
      --las-thresholds 15,45 \
      --segment-steps 25 --interval 5 --mpirun-arg=--oversubscribe \
      --mpirun-arg=--bind-to --mpirun-arg=none > "$state.log" 2>&1 &
    pid=$!
    until grep -q started "$state.log" 2>/dev/null; do sleep 0.1; done
    "$bin/tp-sched" submit "$state" "$out/job2.json" "$out/job3.json" > /dev/null
    wait $pid
  done
done
"$python" - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
print(f"{'policy':6} {'avg JCT s':>10} {'max JCT s':>10} {'makespan s':>11} {'resizes':>8}  (medians of {repeats})")
for policy in ("fifo", "las", "ones"):
    avg, worst, span, resizes = [], [], [], []
    for r in range(1, repeats + 1):
        state = json.load(open(f"{out}/{policy}-{r}/state.json"))
        jct = [j["finish"] - j["arrival"] for j in state["jobs"]]
        avg.append(sum(jct) / len(jct))
        worst.append(max(jct))
        span.append(max(j["finish"] for j in state["jobs"]))
        n = 0
        for j in state["jobs"]:
            done = [s["config"] for s in j["segments"] if s["status"] == "done"]
            n += sum(a != b for a, b in zip(done, done[1:]))
        resizes.append(n)
    print(f"{policy:6} {statistics.median(avg):10.1f} {statistics.median(worst):10.1f} "
          f"{statistics.median(span):11.1f} {statistics.median(resizes):8.0f}")
PY
echo "timelines: $out/*-1/timeline.svg"
