#!/usr/bin/env bash
# Training steps on one GPU: tp-run against PyTorch eager and torch.compile
# on the same model and batch, in the same run. Each RUN is MODEL:BATCH:SEQ
# (MODEL a folder of bench/ with a config.json, or a config.json path); each
# system runs it at each precision: f32 (no TF32), tf32 and bf16 (tpc's
# precision=bf16 storage, PyTorch's autocast). Per run: the median step
# after the warm-up, tokens/s, MFU (model FLOPs per token 6N + 12·L·s·h over
# the device's dense peak of the precision), peak device memory, and for
# tp-run the planned peak and the time per op kind (its second step, run op
# by op with each op synchronised: --profile-steps 2; the first pays one-time
# setup such as cuDNN's graphs). Results: OUT/train.jsonl (one JSON line
# per run, with a reason where one failed or was skipped) and OUT/train.md
# (the tables, bench/gpu_summary.py).
#
#   bench/gpu-train.sh BUILD_DIR|BUNDLE [STEPS] [OUT]
#
# RUNS (default "gpt2-small:8:1024 gpt2-small:16:1024 llama-1b:4:2048"),
# TPC_PRECISIONS (default "f32 bf16"), MODES ("eager compile"), PRECISIONS
# (PyTorch's, "f32 bf16"), ATTENTION (PyTorch's attention, "sdpa"), DEVICE
# and TORCH_DEVICE (default cuda: staged-cpu and cpu try the script on a
# CPU), PEAK_TFLOPS (f32,tf32,bf16 dense peaks; default by GPU name, H100 and
# H200 SXM: 67,495,989), DEADLINE (epoch seconds after which no run starts;
# later ones are recorded as skipped), RUN_TIMEOUT (seconds per run,
# default 300) and SKIP (PyTorch runs to leave out, MODE:PRECISION ...).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "$1" && pwd)
steps=${2:-10} out=${3:-/tmp/gpu-train}
runs=${RUNS:-gpt2-small:8:1024 gpt2-small:16:1024 llama-1b:4:2048}
modes=${MODES:-eager compile} precisions=${PRECISIONS:-f32 bf16}
tpc_precisions=${TPC_PRECISIONS:-f32 bf16} attention=${ATTENTION:-sdpa}
device=${DEVICE:-cuda} torch_device=${TORCH_DEVICE:-cuda}
deadline=${DEADLINE:-0} run_timeout=${RUN_TIMEOUT:-300} skip=" ${SKIP:-} "
warmup=3
[ -f "$build/env.sh" ] && source "$build/env.sh"
bin=$build/bin
python=${PYTHON:-python3}
mkdir -p "$out"
jsonl=$out/train.jsonl
: > "$jsonl"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu=${gpu:-$device}
echo "device: $gpu"

# Appends one JSON record: the run's identity plus FIELDS (JSON object text).
record() { # MODEL BATCH SEQ SYSTEM MODE PRECISION FIELDS
  "$python" - "$@" >> "$jsonl" <<'PY'
import json, sys
model, batch, seq, system, mode, precision, fields = sys.argv[1:8]
record = {"model": model, "batch": int(batch), "seq": int(seq),
          "system": system, "mode": mode, "precision": precision}
record.update(json.loads(fields))
print(json.dumps(record))
PY
}
# Whether another run may start (the deadline not passed).
in_time() { [ "$deadline" -eq 0 ] || [ "$(date +%s)" -lt "$deadline" ]; }

# Byte-level tokens of our own docs, repeated: enough for any batch here.
for _ in 1 2 3 4 5 6 7 8; do cat "$root/README.md" "$root"/docs/*.md; done \
  > "$out/text.txt"
"$bin/tpc-tokenize" "$out/text.txt" -o "$out/text.tokens" > /dev/null

for run in $runs; do
  IFS=: read -r model batch seq <<< "$run"
  config=$root/bench/$model/config.json name=$model
  [ -f "$config" ] || { config=$model name=$(basename "$model" .json); }
  name=$name-b$batch-s$seq
  echo "== $name"
  "$bin/tpc-import" "$config" --batch "$batch" --seq "$seq" -o "$out/$name.mlir"
  for precision in $tpc_precisions; do
    if ! in_time; then
      record "$model" "$batch" "$seq" tpc tp-run "$precision" '{"skipped": "deadline"}'
      continue
    fi
    options="train"
    [ "$precision" != f32 ] && options="train precision=$precision"
    plan=$out/$name-$precision.tpplan metrics=$out/$name-tpc-$precision.json
    if "$bin/tpc-opt" "$out/$name.mlir" --tp-pipeline="$options" -o "$plan" \
         2> "$out/$name-tpc-$precision.remarks" &&
       timeout "$run_timeout" "$bin/tp-run" "$plan" --data "$out/text.tokens" \
         --device "$device" --steps $((warmup + steps)) --profile-steps 2 \
         --metrics "$metrics" > "$out/$name-tpc-$precision.log" 2>&1; then
      params=$("$bin/tp-run" "$plan" --print-plan | "$python" -c \
        'import json, math, sys; print(sum(math.prod(p["shape"]) for p in json.load(sys.stdin)["params"]))')
      record "$model" "$batch" "$seq" tpc tp-run "$precision" \
        "{\"metrics\": \"$(basename "$metrics")\", \"config\": \"$config\", \"warmup\": $warmup, \"params\": $params}"
    else
      record "$model" "$batch" "$seq" tpc tp-run "$precision" \
        "{\"failed\": \"$(tail -1 "$out/$name-tpc-$precision.log" 2>/dev/null | tr -d '"\\' | cut -c1-200)\"}"
    fi
  done
  for mode in $modes; do
    for precision in $precisions; do
      [[ $skip == *" $mode:$precision "* ]] && continue
      if ! in_time; then
        record "$model" "$batch" "$seq" torch "$mode" "$precision" '{"skipped": "deadline"}'
        continue
      fi
      log=$out/$name-torch-$mode-$precision.log
      if result=$(timeout "$run_timeout" "$python" "$root/bench/torch_train_step.py" \
            --config "$config" --batch "$batch" --seq "$seq" --steps "$steps" \
            --warmup $warmup --mode "$mode" --precision "$precision" \
            --device "$torch_device" --attention "$attention" 2> "$log"); then
        record "$model" "$batch" "$seq" torch "$mode" "$precision" "$result"
      else
        record "$model" "$batch" "$seq" torch "$mode" "$precision" \
          "{\"failed\": \"$(tail -1 "$log" | tr -d '"\\' | cut -c1-200)\"}"
      fi
    done
  done
done
"$python" "$root/bench/gpu_summary.py" train "$jsonl" --dir "$out" \
  --device "$gpu" ${PEAK_TFLOPS:+--peak-tflops "$PEAK_TFLOPS"} \
  | tee "$out/train.md"
