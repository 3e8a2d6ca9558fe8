#!/usr/bin/env bash
# Held-out evaluation during training (tp-run --eval-every), for a small
# GPT-2 or LLaMA model:
#  1. one rank, the last 30 % of the tokens held out (--eval-fraction): the
#     training losses and the held-out loss after steps 3, 6 and 7 against
#     PyTorch (training_reference.py: the same split, AdamW in float64, the
#     mean loss of the first 3 held-out windows); the progress line shows
#     the validation loss and perplexity, the metrics and the plot carry
#     the evaluation curve;
#  2. the same tokens as two files (--data, --eval-data): bit-identical
#     metrics; on staged-cpu (device-style memory, two programs sharing
#     the parameters): bit-identical;
#  3. 1D over 2 ranks, 2D 2x2 and dp 2 x 1D 2: the held-out losses equal the
#     one-rank run's within the scheme tests' tolerance; staged-cpu's device
#     peak equals the planned peak, the held-out arena included;
#  4. 1D over 2 ranks with rebalance blocks moved (--rank-speeds): likewise.
# With DEVICE (cuda): one rank and 1D over 2 ranks sharing the GPU, training
# and held-out losses within rel 1e-4 of the CPU's; exits 77 (skipped) where
# tp-run cannot use the device.
#
#   evaluation.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 model=$4 device=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
source "$here/device-probe.sh"
ref="$python $here/reference.py"
source "$here/small-model.sh"
train_ref="$python $here/training_reference.py"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1)

rm -rf "$work" && mkdir -p "$work"
batch=4 seq=16
small_model "$work" "$model" 31 $batch $seq 800
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/one.tpplan"

# Non-default schedule; 3 held-out batches of 64 tokens (192 asked, 240 held).
schedule=(--steps 7 --lr 3e-3 --min-lr 1e-4 --warmup 2 --decay-steps 7 --clip 0.5)
held=(--eval-every 3 --eval-tokens 150)
run() { # NAME RANKS PLAN [FLAGS...]
  local name=$1 ranks=$2 plan=$3
  shift 3
  "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$plan" --data "$work/tokens.tokens" \
    --weights "$work/model.safetensors" "${schedule[@]}" "${held[@]}" \
    --metrics "$work/$name.json" "$@" > "$work/$name.log"
}

same_losses() { # ONE OTHER NAME TOLERANCE: training and held-out losses
  "$python" - "$@" <<'PY'
import json, sys
one, other = (json.load(open(path)) for path in sys.argv[1:3])
worst = 0.0
for key in ("loss_curve", "eval_curve"):
    a, b = one[key], other[key]
    assert [r["step"] for r in a] == [r["step"] for r in b], (key, a, b)
    for x, y in zip(a, b):
        worst = max(worst, abs(x["loss"] - y["loss"]) / abs(x["loss"]))
assert worst <= float(sys.argv[4]), f"{sys.argv[3]}: losses differ from one rank's by rel {worst:.2e}"
print(f"{sys.argv[3]}: training and held-out losses equal one rank's (worst rel {worst:.1e})")
PY
}

if [ -n "$device" ]; then
  echo "== on $device against the CPU"
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="mode=1d grid=2" -o "$work/1d2.tpplan" 2> /dev/null
  run one 1 "$work/one.tpplan" --eval-fraction 0.3 --device cpu
  run device 1 "$work/one.tpplan" --eval-fraction 0.3 --device "$device"
  run device-1d2 2 "$work/1d2.tpplan" --eval-fraction 0.3 --device "$device"
  same_losses "$work/one.json" "$work/device.json" "$device" 1e-4
  same_losses "$work/one.json" "$work/device-1d2.json" "$device 1D over 2 ranks" 1e-4
  exit 0
fi

echo "== one rank against PyTorch"
run one 1 "$work/one.tpplan" --eval-fraction 0.3 --plot "$work/one.svg"
$train_ref train --model "$work" --batch $batch --seq $seq --steps 7 --lr 3e-3 \
  --min-lr 1e-4 --warmup 2 --decay-steps 7 --clip 0.5 --weight-decay 0.01 \
  --eval-every 3 --eval-fraction 0.3 --eval-batches 3 --actual "$work/one.json"
"$python" - "$work/one.json" "$work/one.log" "$work/one.svg" <<'PY'
import json, math, re, sys
metrics = json.load(open(sys.argv[1]))
evaluation = metrics["evaluation"]
assert evaluation["every"] == 3 and evaluation["batches"] == 3, evaluation
assert evaluation["tokens"] == 192, evaluation
assert evaluation["source"].startswith("last 240 tokens of "), evaluation
curve = metrics["eval_curve"]
assert [e["step"] for e in curve] == [3, 6, 7], curve
for e in curve:
    assert abs(e["perplexity"] - math.exp(e["loss"])) <= 1e-9 * e["perplexity"], e
    assert e["tokens"] == 192, e
shown = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
         for m in re.finditer(r"step (\d+)/7 \|.*\| val loss ([0-9.]+) \| val ppl ([0-9.]+)",
                              open(sys.argv[2]).read())}
assert sorted(shown) == [3, 6, 7], shown
for e in curve:
    loss, ppl = shown[e["step"]]
    assert abs(loss - e["loss"]) <= 5e-5 and abs(ppl - e["perplexity"]) <= 5e-3 * ppl, (e, shown)
svg = open(sys.argv[3]).read()
points = re.search(r'<polyline class="validation"[^>]* points="([^"]*)"', svg)
assert points and len(points.group(1).split()) == 3, "no 3-point validation curve in the plot"
assert svg.count('class="validation-point"') == 3 and "validation loss" in svg
print("evaluation: progress line, metrics and plot carry the 3 held-out losses")
PY

echo "== held-out file, staged-cpu"
"$python" - "$work/tokens.tokens" "$work/head.tokens" "$work/tail.tokens" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
count = struct.unpack("<Q", data[8:16])[0]
held = int(0.3 * count + 0.5)
def write(path, ids):
    open(path, "wb").write(data[:8] + struct.pack("<Q", len(ids)) + b"".join(ids))
ids = [data[16 + 4 * i: 20 + 4 * i] for i in range(count)]
write(sys.argv[2], ids[: count - held])
write(sys.argv[3], ids[count - held:])
PY
"$bin/tp-run" "$work/one.tpplan" --data "$work/head.tokens" \
  --weights "$work/model.safetensors" "${schedule[@]}" "${held[@]}" \
  --eval-data "$work/tail.tokens" --metrics "$work/files.json" > /dev/null
run staged 1 "$work/one.tpplan" --eval-fraction 0.3 --device staged-cpu
curves() { # METRICS: every training and held-out loss, exactly (repr)
  "$python" -c 'import json, sys
m = json.load(open(sys.argv[1]))
for r in m["loss_curve"]: print("train", r["step"], repr(r["loss"]))
for r in m["eval_curve"]: print("held-out", r["step"], repr(r["loss"]))' "$1"
}
diff <(curves "$work/one.json") <(curves "$work/files.json")
diff <(curves "$work/one.json") <(curves "$work/staged.json")
echo "held-out file and staged-cpu: bit-identical losses"
# The device holds what the planner counted: the step's arena and the
# held-out @loss's, the parameters with their moments, both inputs.
"$python" - "$work/staged.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
if not m["eval_arena_bytes"] > 0 or m["device_peak_bytes"] != m["planned_peak_bytes"]:
    sys.exit(f"staged-cpu memory: {m}")
print(f"staged-cpu: device peak = planned peak {m['planned_peak_bytes']} bytes "
      f"(held-out arena {m['eval_arena_bytes']})")
PY

echo "== grids"
for scheme in "1d2:2:mode=1d grid=2" "2d:4:mode=2d grid=2x2" \
              "dp2x1d2:4:mode=1d grid=2 dp=2"; do
  IFS=: read -r name ranks options <<< "$scheme"
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="$options" -o "$work/$name.tpplan" 2> /dev/null
  run "$name" "$ranks" "$work/$name.tpplan" --eval-fraction 0.3
  same_losses "$work/one.json" "$work/$name.json" "$name" 1e-5
done

echo "== with moved blocks"
# Rank speeds given: the blocks move before the first step, and @loss runs
# on the moved blocks as @train_step does: losses as on one rank.
"$bin/tpc-opt" "$work/model.mlir" -o "$work/rb.tpplan" 2> /dev/null \
  --tp-pipeline="mode=1d grid=2 rebalance=true rebalance-headroom=1"
run moved 2 "$work/rb.tpplan" --eval-fraction 0.3 --rank-speeds 1,0.3
grep -q "^rebalance: migrate after step 0" "$work/moved.log"
same_losses "$work/one.json" "$work/moved.json" "1D 2 ranks, blocks moved" 1e-5
