#!/usr/bin/env bash
# Issue 34, item 3: the trace-driven simulation of 64 GPUs (TACC Longhorn's
# V100s, clusters/tacc-longhorn.json, ONES's cluster). The step simulator
# predicts GPT-2-small, GPT-2-medium and a 1B LLaMA (seq 1024) on 1-64 ranks
# at global batches 4-512 with mode=auto (configurations that do not fit
# 16 GB are left out); seeded traces of 240 jobs (docs/scheduling.md,
# "Traces") are replayed under FIFO, Tiresias-like LAS and ONES (a job
# moves after 1800 s at the earliest), and ONES with 0 and 600 s. Not a test; results go to
# docs/performance.md ("Scheduling several jobs").
#
#   bench/sched-trace.sh [BUILD_DIR] [SEEDS] [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build} seeds=${2:-"1 2 3"} out=${3:-/tmp/tpc-sched-trace}
bin=$build/bin
mkdir -p "$out"
if [ ! -f "$out/profiles.json" ]; then
  "$bin/tp-sched" profile --mode auto --seq 1024 --cluster "$root/clusters/tacc-longhorn.json" \
    --model gpt2-small="$root/bench/gpt2-small/config.json" \
    --model gpt2-medium="$root/bench/gpt2-medium/config.json" \
    --model llama-1b="$root/bench/llama-1b/config.json" \
    -o "$out/profiles.json" 2> "$out/profile.log"
fi
for seed in $seeds; do
  "$bin/tp-sched" trace --profiles "$out/profiles.json" --seed "$seed" -o "$out/trace-$seed.json"
  echo "== trace seed $seed: 240 jobs, 64 ranks"
  "$bin/tp-sched" simulate --trace "$out/trace-$seed.json" --profiles "$out/profiles.json" \
    -o "$out/simulation-$seed.json" --timelines "$out/timelines-$seed"
  for m in 0 600; do
    "$bin/tp-sched" simulate --trace "$out/trace-$seed.json" --profiles "$out/profiles.json" \
      --policies ones --min-run-seconds $m | tail -1 | sed "s/^ones  /ones-$m/"
  done
done
