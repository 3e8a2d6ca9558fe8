#!/usr/bin/env bash
# The simulator's published anchor (issue 32): the GPT models of 1.7 B to
# 1 T parameters NVIDIA trained on Selene (Narayanan et al. 2021, arXiv
# 2104.04473, Table 1; the same table as the image in NVIDIA/Megatron-LM's
# README since commit 50a4b5f), each at its published tensor (1D), pipeline
# and data-parallel sizes, global batch, sequence 2048 and vocabulary 51200,
# with the micro-batch sizes and interleaving of the paper's own scripts
# (examples/sc21/run_table_1.sh: full activation recomputation, FP16 mixed
# precision, which costs what bf16 does here). Each row is ranked by
# mode=auto with pp, micro-batches, schedule and chunks fixed
# (compile-choice=false: nothing is compiled whole, nothing runs) on
# clusters/selene.json; the row's own candidate (mode=1d grid=TP dp=DP)
# gives the predicted step, turned into teraFLOP/s per GPU with the paper's
# count, 96 B s l h^2 (1 + s/6h + V/16lh) (recomputation included), next to
# the published figure. mode=auto's own pick at the same pp is shown too.
#
#   bench/selene-anchor.sh [CLUSTER]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cluster=$(realpath "${1:-$root/clusters/selene.json}")
work=$build/bench/selene-anchor
mkdir -p "$work"
"$root/tools/build.sh" >/dev/null

# name heads hidden layers tp pp gpus batch published-TFLOP/s micro-batch-size chunks
rows=(
  "1.7B 24 2304 24 1 1 32 512 137 16 1"
  "3.6B 32 3072 30 2 1 64 512 138 16 1"
  "7.5B 32 4096 36 4 1 128 512 142 16 1"
  "18B 48 6144 40 8 1 256 1024 135 8 1"
  "39B 64 8192 48 8 2 512 1536 138 4 1"
  "76B 80 10240 60 8 4 1024 1792 140 2 3"
  "145B 96 12288 80 8 8 1536 2304 148 2 2"
  "310B 128 16384 96 8 16 1920 2160 155 1 2"
  "530B 128 20480 105 8 35 2520 2520 163 1 3"
  "1T 160 25600 128 8 64 3072 3072 163 1 1"
)
printf "%-6s %4s %4s %5s %6s %5s %4s %10s %10s %7s %8s %6s  %s\n" model tp pp dp gpus M V \
  published predicted error "GB/rank" idle "mode=auto's pick at this pp"
for row in "${rows[@]}"; do
  read -r name heads hidden layers tp pp gpus batch published mbs chunks <<<"$row"
  dp=$((gpus / (tp * pp)))
  microbatches=$((batch / (dp * mbs)))
  printf '{"model_type": "gpt2", "vocab_size": 51200, "n_positions": 2048, "n_embd": %d, "n_layer": %d, "n_head": %d, "tie_word_embeddings": true}\n' \
    "$hidden" "$layers" "$heads" >"$work/$name.json"
  # tpc-import refuses a tensor past 2^40 elements, and the global batch's
  # attention scores of the three largest rows are: those are predicted at
  # two smaller micro-batch counts (multiples of pp, at least pp), on the
  # straight line through them to the published count; a pipelined step is
  # linear in the micro-batches from pp on (each adds one slot's time per
  # stage), in the estimate exactly.
  counts=$microbatches
  limit=$(((1 << 40) / (heads * 2048 * 2048 * dp * mbs)))
  if [ "$microbatches" -gt "$limit" ]; then
    high=$((limit / pp * pp))
    counts="$high $((high / 2 / pp * pp))"
  fi
  remarks=()
  for m in $counts; do
    tag=$name-m$m
    "$build/bin/tpc-import" "$work/$name.json" --batch $((dp * m * mbs)) --seq 2048 \
      -o "$work/$tag.mlir"
    if [ "$pp" -gt 1 ]; then
      pipeline="pp=$pp microbatches=$m"
      [ "$chunks" -gt 1 ] && pipeline="$pipeline schedule=interleaved pp-chunks=$chunks"
    else
      pipeline="pp=1" # Megatron's 18B accumulates 4 micro-batches; one step here
    fi
    # The published runs fit 80 GB; the budget is lifted so that the row's
    # own candidate is ranked whatever the estimate of its bytes.
    "$build/bin/tpc-opt" "$work/$tag.mlir" -o /dev/null --tp-pipeline="mode=auto \
grid=$gpus $pipeline remat=layer precision=bf16 memory-budget=1000000000000000 \
explain=true compile-choice=false cluster=$cluster" 2>"$work/$tag.remarks"
    remarks+=("$m:$work/$tag.remarks")
  done
  python3 - "$name" "$tp" "$pp" "$dp" "$gpus" "$batch" "$layers" "$hidden" \
    "$published" "$microbatches" "$chunks" "${remarks[@]}" <<'PY'
import re, sys
name, tp, pp, dp, gpus, batch, layers, hidden, published, m, v = sys.argv[1:12]
tp, pp, dp, gpus, batch, layers, hidden, m, v = map(int, (tp, pp, dp, gpus, batch, layers, hidden, m, v))
published = float(published)

def read(count, path):
    """The row's own candidate at `count` micro-batches: seconds, bytes,
    idle text; and mode=auto's pick and its seconds."""
    text = open(path).read()
    own = f"mode=1d grid={tp}" + (f" dp={dp}" if dp > 1 else "") + \
          (f" pp={pp} microbatches={count}" if pp > 1 else "") + " remat=layer:"
    line = next((l for l in text.splitlines()
                 if re.search(r"mode=auto: \d+\. " + re.escape(own), l)), None)
    if line is None:
        sys.exit(f"{name}: no ranked candidate '{own}' in {path}")
    idle = re.search(r"([0-9.]+) % idle", line)
    pick = re.search(r"would choose (.*?) for \d+ ranks of [^:]*: ([0-9.]+) ms", text)
    return (float(re.search(r": ([0-9.]+) ms per step", line).group(1)) / 1e3,
            float(re.search(r"([0-9]+) (?:bytes )?per rank", line).group(1)),
            idle.group(1) + " %" if idle else "-",
            (pick.group(1), float(pick.group(2)) / 1e3) if pick else None)

runs = [(int(c), read(int(c), p)) for c, p in (a.split(":", 1) for a in sys.argv[12:])]
if len(runs) == 1:
    seconds, held, idle, pick = runs[0][1]
    note = ""
else:
    (m1, r1), (m2, r2) = runs
    line = lambda a, b: a + (b - a) * (m - m1) / (m2 - m1)
    seconds, held, idle = line(r1[0], r2[0]), r1[1], r1[2]
    pick = (r1[3][0] + f" (at {m1} micro-batches)", line(r1[3][1], r2[3][1])) if r1[3] and r2[3] else None
    note = f"  [from {m1} and {m2} micro-batches]"
s, vocab = 2048, 51200
flops = 96 * batch * s * layers * hidden**2 * (1 + s / (6 * hidden) + vocab / (16 * layers * hidden))
tflops = lambda t: flops / t / gpus / 1e12
predicted = tflops(seconds)
pick_text = f"{pick[0]}, {tflops(pick[1]):.0f} TFLOP/s" if pick else "-"
print(f"{name:<6} {tp:4d} {pp:4d} {dp:5d} {gpus:6d} {m:5d} {v:4d} {published:10.0f} "
      f"{predicted:10.1f} {predicted / published - 1:+7.1%} {held / 1e9:8.1f} "
      f"{idle:>6}  {pick_text}{note}")
PY
done
