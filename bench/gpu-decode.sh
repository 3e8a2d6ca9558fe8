#!/usr/bin/env bash
# Greedy decoding on one GPU, batch 1, random weights: tp-run --generate
# with the plan's @prefill and @decode over KV caches (tpc-import
# --kv-cache) against HuggingFace generate() with its KV cache
# (bench/torch_decode.py), f32 and bf16, in the same run. tp-run's prefill
# is its first step, its decode rate one over the median later step.
# Results: OUT/decode.jsonl and OUT/decode.md (bench/gpu_summary.py).
#
#   bench/gpu-decode.sh BUILD_DIR|BUNDLE [PROMPT] [NEW] [OUT]
#
# MODEL (default gpt2-small: a folder of bench/ or a config.json path),
# PRECISIONS (default "f32 bf16"), DEVICE and TORCH_DEVICE (default cuda),
# DEADLINE (epoch seconds after which no run starts).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "$1" && pwd)
prompt=${2:-64} new=${3:-128} out=${4:-/tmp/gpu-decode}
model=${MODEL:-gpt2-small} precisions=${PRECISIONS:-f32 bf16}
device=${DEVICE:-cuda} torch_device=${TORCH_DEVICE:-cuda}
deadline=${DEADLINE:-0}
[ -f "$build/env.sh" ] && source "$build/env.sh"
bin=$build/bin
python=${PYTHON:-python3}
mkdir -p "$out"
jsonl=$out/decode.jsonl
: > "$jsonl"
config=$root/bench/$model/config.json
[ -f "$config" ] || config=$model
in_time() { [ "$deadline" -eq 0 ] || [ "$(date +%s)" -lt "$deadline" ]; }
record() { # SYSTEM PRECISION FIELDS
  "$python" -c 'import json, sys; r = {"system": sys.argv[1], "precision": sys.argv[2], "prompt": int(sys.argv[3]), "new": int(sys.argv[4])}; r.update(json.loads(sys.argv[5])); print(json.dumps(r))' \
    "$1" "$2" "$prompt" "$new" "$3" >> "$jsonl"
}

"$bin/tpc-import" "$config" --batch 1 --seq "$prompt" --kv-cache $((prompt + new)) \
  -o "$out/decode.mlir"
ids=$("$python" -c 'import json, sys; v = json.load(open(sys.argv[1]))["vocab_size"]; print(",".join(str((7 * i + 11) % v) for i in range(int(sys.argv[2]))))' "$config" "$prompt")
for precision in $precisions; do
  if ! in_time; then
    record tpc "$precision" '{"skipped": "deadline"}'
    record hf "$precision" '{"skipped": "deadline"}'
    continue
  fi
  options="train=false"
  [ "$precision" != f32 ] && options="train=false precision=$precision"
  if "$bin/tpc-opt" "$out/decode.mlir" --tp-pipeline="$options" \
       -o "$out/decode-$precision.tpplan" 2> /dev/null &&
     timeout 300 "$bin/tp-run" "$out/decode-$precision.tpplan" --device "$device" \
       --generate "$new" --prompt-ids "$ids" --ignore-eos \
       --metrics "$out/decode-tpc-$precision.json" > "$out/decode-tpc-$precision.log" 2>&1; then
    record tpc "$precision" "$("$python" -c '
import json, statistics, sys
steps = json.load(open(sys.argv[1]))["step_seconds"]
print(json.dumps({"prefill_ms": steps[0] * 1e3,
                  "decode_tokens_per_second": 1 / statistics.median(steps[1:])}))' \
      "$out/decode-tpc-$precision.json")"
  else
    record tpc "$precision" "{\"failed\": \"$(tail -1 "$out/decode-tpc-$precision.log" | tr -d '"\\' | cut -c1-200)\"}"
  fi
  if result=$(timeout 300 "$python" "$root/bench/torch_decode.py" --config "$config" \
        --prompt "$prompt" --new "$new" --precision "$precision" \
        --device "$torch_device" 2> "$out/decode-hf-$precision.log"); then
    record hf "$precision" "$result"
  else
    record hf "$precision" "{\"failed\": \"$(tail -1 "$out/decode-hf-$precision.log" | tr -d '"\\' | cut -c1-200)\"}"
  fi
done
"$python" "$root/bench/gpu_summary.py" decode "$jsonl" --dir "$out" | tee "$out/decode.md"
