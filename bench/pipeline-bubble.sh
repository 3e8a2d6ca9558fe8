#!/usr/bin/env bash
# The pipeline's bubble on this machine (issue 32): a GPT-2 of 8 layers
# (hidden 256, byte vocabulary, so the head costs next to nothing and the
# stages are alike) at seq 128, micro-batches of 2 sequences, on 2 and 4
# MPI ranks as pp 2 and pp 4 under GPipe, 1F1B and interleaved 1F1B
# (2 chunks a stage). Each run is compiled with cluster=CLUSTER (without
# it, tpc-calibrate measures this machine first), which predicts the step
# and each stage's idle share by replaying the stages' programs together,
# then trained for STEPS steps with --rank-times. Per run: the formula
# (P-1)/(V*M+P-1), the predicted and the measured idle share (1 - compute
# / step, per rank, median over the steps after the first, mean over the
# ranks), the predicted and measured step and the step's error.
#
#   bench/pipeline-bubble.sh [STEPS] [CLUSTER]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-4}
work=$build/bench/pipeline-bubble
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$root/tools/build.sh" >/dev/null
if [ -n "${2:-}" ]; then
  cluster=$(realpath "$2")
else
  cluster=$work/this-machine.json
  mpirun -np 2 --bind-to none "$build/bin/tpc-calibrate" -o "$cluster" >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}; cluster $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["source"][:60])' "$cluster")..."
echo '{"model_type": "gpt2", "vocab_size": 256, "n_embd": 256, "n_layer": 8, "n_head": 4, "n_positions": 128}' \
  >"$work/config.json"
"$build/bin/tpc-tokenize" /usr/share/games/fortunes/fortunes -o "$work/text.tokens" >/dev/null

runs=(
  "2 gpipe 1 2" "2 gpipe 1 8" "2 1f1b 1 2" "2 1f1b 1 4" "2 1f1b 1 8"
  "2 interleaved 2 4" "2 interleaved 2 8"
  "4 gpipe 1 4" "4 1f1b 1 4" "4 1f1b 1 8" "4 interleaved 2 4"
  "4 interleaved 2 8"
)
printf "%-22s %6s %9s %9s %9s %11s %11s %7s\n" run ranks formula predicted \
  measured "predicted s" "measured s" error
for run in "${runs[@]}"; do
  read -r pp schedule chunks microbatches <<<"$run"
  name=pp$pp-$schedule-v$chunks-m$microbatches
  "$build/bin/tpc-import" "$work/config.json" --batch $((2 * microbatches)) \
    --seq 128 -o "$work/$name.mlir"
  "$build/bin/tpc-opt" "$work/$name.mlir" -o "$work/$name.tpplan" \
    --tp-pipeline="mode=1d grid=1 pp=$pp microbatches=$microbatches schedule=$schedule pp-chunks=$chunks cluster=$cluster" \
    2>"$work/$name.remarks"
  mpirun -np "$pp" --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 \
    "$build/bin/tp-run" train "$work/$name.tpplan" --data "$work/text.tokens" \
    --steps "$steps" --threads 1 --rank-times --metrics "$work/$name.json" \
    >"$work/$name.log"
  python3 - "$work/$name.remarks" "$work/$name.json" "$pp" "$chunks" \
    "$microbatches" "$schedule" <<'PY'
import json, re, statistics, sys
remarks, metrics, p, v, m, schedule = sys.argv[1:]
p, v, m = int(p), int(v), int(m)
text = open(remarks).read()
head = re.search(r"@train_step on [^:]*: ([0-9.]+) ms per run \(pipeline", text)
idle = [float(x) for x in re.findall(r"idle ([0-9.]+) %", text)]
report = json.load(open(metrics))
steps = [r["seconds"] for r in report["loss_curve"]][1:]
ranks = report["rank_compute_seconds"]
measured_idle = statistics.mean(
    statistics.median(1 - c / s for c, s in zip(r[1:], steps)) for r in ranks)
step = statistics.median(steps)
predicted = float(head.group(1)) / 1e3
print(f"{schedule + ' V' + str(v) + ' M' + str(m):<22} {p:6d} "
      f"{(p - 1) / (v * m + p - 1):9.3f} {statistics.mean(idle) / 100:9.3f} "
      f"{measured_idle:9.3f} {predicted:11.3f} {step:11.3f} "
      f"{(predicted - step) / step:+7.1%}")
PY
done
