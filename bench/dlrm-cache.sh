#!/usr/bin/env bash
# The frequency-aware embedding cache on a DLRM (issue 33, item 3): a
# Criteo-like model of 26 sparse features over tables of 10^5 to 10^7 rows
# (25.6 M rows of 16 floats, 1.6 GB; with AdamW's moments 4.9 GB) and 13
# dense features, trained on the synthetic set of tools/make-criteo-like.py
# (Zipf ids, exponent 1.05) through the tpc package on the staged-cpu device
# (the CPU behind device-style memory, so every host<->device byte is a
# counted copy): hit rate, bytes moved per step and step time at cache
# ratios 0.5 %, 1.5 %, 5 % and 100 %, and the step-time ratio against the
# resident table, uncached (dense AdamW over every row) and cached whole
# (100 %) (the seed's claim: 1.5 % on the device keeps a decent speed). Not
# a test; results go to docs/performance.md.
#
#   bench/dlrm-cache.sh [BUILD_DIR] [STEPS] [REPEATS] [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build} steps=${2:-12} repeats=${3:-3} out=${4:-/tmp/tpc-dlrm-cache}
bin=$build/bin python=$root/.venv/bin/python
export PYTHONPATH=$build/python OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
batch=2048
mkdir -p "$out"
cat > "$out/config.json" <<'JSON'
{"model_type": "dlrm", "dense_in_features": 13, "embedding_dim": 16,
 "num_embeddings_per_feature": [100000, 100000, 100000, 100000, 100000, 100000,
   100000, 100000, 100000, 100000, 200000, 200000, 200000, 200000, 200000,
   300000, 300000, 500000, 500000, 1000000, 1000000, 2000000, 2000000,
   3000000, 5000000, 8000000],
 "bag_size": 1, "dense_arch_layer_sizes": [128, 64, 16],
 "over_arch_layer_sizes": [256, 128, 1]}
JSON
# Every step a batch of its own (the data never wraps around).
data=$out/data-$((batch * steps)).npz
if [ ! -s "$data" ]; then
  "$python" "$root/tools/make-criteo-like.py" --config "$out/config.json" \
    --samples $((batch * steps)) --seed 1 --zipf 1.05 --out "$data"
fi
"$bin/tpc-import" "$out/config.json" --batch $batch -o "$out/model.mlir"
lscpu | grep -m1 "Model name" || true
for ratio in 0.005 0.015 0.05 1; do
  "$bin/tpc-opt" "$out/model.mlir" --tp-pipeline="embedding-cache=$ratio" \
    -o "$out/r$ratio.tpplan" 2> /dev/null
done
"$bin/tpc-opt" "$out/model.mlir" --tp-pipeline="" -o "$out/rresident.tpplan" 2> /dev/null
for repeat in $(seq "$repeats"); do
  for ratio in 0.005 0.015 0.05 1 resident; do # interleaved: the same noise for each
    "$python" "$root/test/integration/dlrm_train.py" --plan "$out/r$ratio.tpplan" \
      --data "$data" --steps "$steps" --device staged-cpu \
      --out "$out/r$ratio-$repeat.json"
  done
done
"$python" - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
rows = []
resident = [json.load(open(f"{out}/rresident-{r}.json")) for r in range(1, repeats + 1)]
resident_step = statistics.median(s for m in resident for s in m["seconds"][1:])
resident_each = [statistics.median(m["seconds"][1:]) for m in resident]
for ratio in ["0.005", "0.015", "0.05", "1"]:
    runs = [json.load(open(f"{out}/r{ratio}-{r}.json")) for r in range(1, repeats + 1)]
    # Steps after the first (which allocates and warms the cache).
    step = statistics.median(s for m in runs for s in m["seconds"][1:])
    c = runs[0]["embedding_caches"][0]
    n = len(runs[0]["seconds"])
    moved = (c["bytes_fetched"] + c["bytes_written_back"]) / n
    rows.append((ratio, c["slots"], c["hit_rate"], c["rows_fetched"] / n, moved,
                 c["seconds"] / n * 1e3, step * 1e3,
                 c["rows_prefetched"] / max(c["rows_fetched"], 1),
                 c["lookahead_seconds"] / n * 1e3,
                 [statistics.median(m["seconds"][1:]) for m in runs]))
base = rows[-1]
print("| cache ratio | slots | hit rate | rows fetched/step | fetched ahead | MB moved/step"
      " | cache ms/step (waited) | lookahead ms/step (overlapped) | step ms (median)"
      " | step vs cached 100 % | step vs uncached | per repetition vs uncached |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    each = " / ".join(f"{a / b:.3f}" for a, b in zip(r[9], resident_each))
    print(f"| {float(r[0]) * 100:g} % | {r[1]} | {r[2]:.3f} | {r[3]:.0f} | {r[7]:.2f} | {r[4] / 1e6:.2f}"
          f" | {r[5]:.1f} | {r[8]:.1f} | {r[6]:.0f} | {r[6] / base[6]:.3f}"
          f" | {r[6] / (resident_step * 1e3):.3f} | {each} |")
print(f"| uncached (dense AdamW) | - | - | - | - | - | - | - | {resident_step * 1e3:.0f}"
      f" | {resident_step * 1e3 / base[6]:.3f} | 1.000 | - |")
print("uncached step ms per repetition: "
      + " / ".join(f"{s * 1e3:.0f}" for s in resident_each))
PY
