#!/usr/bin/env bash
# The DLRM (tpc-import model_type "dlrm", docs/dlrm.md) trained with the tpc
# package on a synthetic Criteo-like data set (tools/make-criteo-like.py:
# Zipf ids over four tables, multi-hot bags of 3), non-default AdamW
# settings and schedule, 20 steps:
#  1. one rank, the tables resident, equals PyTorch's DLRM of
#     nn.EmbeddingBag(mode="sum") per table, TorchRec's interaction and
#     BCEWithLogits (dlrm_reference.py) with torch.optim.AdamW; row-split
#     over 1D 2, batch-split over dp 2 x 1D 2, in 2 micro-batches and in 2
#     pipeline stages (the MLP layers and the interaction are its layers)
#     too;
#  2. the tables cached (embedding-cache=1) equal PyTorch's row-sparse AdamW;
#     cached at ratios that evict, on one rank, on 1D 2 (each rank caches
#     its block of rows) and on staged-cpu, every run equals the same grid's
#     ratio-1 run bit for bit (losses and exported weights), its cache missed,
#     wrote rows back and gathered rows ahead;
#  3. a cached run on 1D 2 stopped at step 10 resumes from its checkpoint on
#     dp 2 at another ratio, and steps 11..20 equal PyTorch's;
#  4. labels outside {0, 1}, missing or misshapen dense features fail the
#     step with one line naming them, and no step runs.
#
# With DEVICE (cuda), every run is on that device; the test is skipped
# (exit 77) when it cannot run there.
#
#   dlrm.sh BUILD_DIR PYTHON WORK_DIR [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 device=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$build/bin
source "$here/device-probe.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$build/python

if [ ! -x "$python" ]; then
  echo "dlrm: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
if [ ! -d "$build/python/tpc" ]; then
  echo "dlrm: no tpc package in $build/python (the tpc_python target)" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
batch=8 steps=20
cat > "$work/dlrm.json" <<'EOF'
{
  "model_type": "dlrm",
  "dense_in_features": 6,
  "embedding_dim": 8,
  "num_embeddings_per_feature": [50, 120, 30, 80],
  "bag_size": 3,
  "dense_arch_layer_sizes": [16, 8],
  "over_arch_layer_sizes": [12, 6, 1]
}
EOF
"$python" "$here/dlrm_reference.py" make-model --config "$work/dlrm.json" \
  --out "$work/model" --seed 7
"$python" "$repo/tools/make-criteo-like.py" --config "$work/dlrm.json" \
  --samples 400 --seed 11 --zipf 1.2 --out "$work/data.npz"
"$bin/tpc-import" "$work/model/config.json" --batch $batch -o "$work/model.mlir"
# Non-default AdamW settings and schedule: an ignored one shows against
# PyTorch's.
adamw="beta2=0.99 weight-decay=0.05"
flags=(--lr 1e-2 --min-lr 1e-3 --warmup 5 --decay-steps $steps --clip 1.0)

compile() { # NAME OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$adamw $2" 2> /dev/null
}
run() { # NAME RANKS [dlrm_train.py flags...]
  local name=$1 ranks=$2
  shift 2
  timeout 120 mpirun -np "$ranks" --oversubscribe -x PYTHONPATH \
    "$python" "$here/dlrm_train.py" --plan "$work/$name.tpplan" \
    --model "$work/model" --data "$work/data.npz" --steps $steps "${flags[@]}" \
    --out "$work/$name.json" --export "$work/$name" \
    --device "${device:-cpu}" "$@" > "$work/$name.log"
}
reference() { # NAME [dlrm_reference.py flags...]
  local name=$1
  shift
  "$python" "$here/dlrm_reference.py" train --model "$work/model" \
    --data "$work/data.npz" --batch $batch --steps $steps --lr 1e-2 \
    --min-lr 1e-3 --warmup 5 --decay-steps $steps --clip 1.0 \
    --weight-decay 0.05 --beta2 0.99 --rtol 1e-5 --actual "$work/$name.json" \
    "$@" > "$work/$name.reference.log" || { cat "$work/$name.reference.log"; exit 1; }
  echo "$name: $(tail -2 "$work/$name.reference.log" | head -1)"
}
# The same losses and the same bytes of every weight.
bit_equal() { # BASE NAME
  cmp "$work/$1/model.safetensors" "$work/$2/model.safetensors"
  "$python" - "$work/$1.json" "$work/$2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:])
if a != b:
    sys.exit(f"losses differ: {a} vs {b}")
PY
  echo "$2: equal to $1 bit for bit"
}
# Rank 0's cache missed, wrote rows back and gathered rows ahead.
evicted() { # NAME
  "$python" - "$work/$1.json" <<'PY'
import json, sys
caches = json.load(open(sys.argv[1]))["embedding_caches"]
for c in caches:
    if not (c["misses"] > 0 and c["rows_written_back"] > 0 and c["hit_rate"] < 1
            and c["slots"] < c["block_rows"] and c["rows_prefetched"] > 0):
        sys.exit(f"{sys.argv[1]}: the cache did not evict: {c}")
c = caches[0]
print(f"  cache: {c['slots']} of {c['block_rows']} rows, hit rate {c['hit_rate']:.3f}, "
      f"{c['rows_written_back']} rows written back, {c['rows_prefetched']} of "
      f"{c['rows_fetched']} fetched rows gathered ahead")
PY
}

echo "== resident tables against PyTorch"
compile one ""
run one 1
reference one
compile tp2 "mode=1d grid=2"
run tp2 2
reference tp2
compile dp2tp2 "mode=1d grid=2 dp=2"
run dp2tp2 4
reference dp2tp2
compile mb2 "mode=1d grid=2 microbatches=2"
run mb2 2
reference mb2
compile pp2 "mode=1d grid=1 pp=2 microbatches=2"
run pp2 2
reference pp2

echo "== cached tables: PyTorch's row-sparse AdamW, bit-equal at every ratio"
compile one-r1 "embedding-cache=1"
run one-r1 1
reference one-r1 --lazy-embedding
compile one-r3 "embedding-cache=0.3"
run one-r3 1
bit_equal one-r1 one-r3
evicted one-r3
compile tp2-r1 "mode=1d grid=2 embedding-cache=1"
compile tp2-r4 "mode=1d grid=2 embedding-cache=0.4"
run tp2-r1 2
run tp2-r4 2
bit_equal tp2-r1 tp2-r4
evicted tp2-r4
cp "$work/tp2-r4.tpplan" "$work/tp2-staged.tpplan"
device=${device:-staged-cpu} run tp2-staged 2
bit_equal tp2-r1 tp2-staged
compile dp2tp2-r4 "mode=1d grid=2 dp=2 embedding-cache=0.4"
run dp2tp2-r4 4
reference dp2tp2-r4 --lazy-embedding

echo "== resume on another grid"
run tp2-r4 2 --stop-after 10 --save "$work/ckpt" --out "$work/half.json"
compile dp2-r5 "mode=1d grid=1 dp=2 embedding-cache=0.5"
run dp2-r5 2 --resume "$work/ckpt"
reference dp2-r5 --lazy-embedding

echo "== refused"
"$python" - "$work/one.tpplan" "$work/model/model.safetensors" "${device:-cpu}" <<'PY'
import sys
import numpy as np
import tpc
plan, weights, device = sys.argv[1:]
session = tpc.Session(plan, device=device, weights=weights)
session.configure_training(20)
ids = np.zeros(session.tokens_shape, dtype=np.int32)
labels = np.zeros(session.targets_shape, dtype=np.int32)
dense = np.zeros(session.dense_shape, dtype=np.float32)
def refused(expected, *args, **kwargs):
    try:
        session.train_step(*args, **kwargs)
    except (ValueError, RuntimeError) as error:
        if expected not in str(error):
            sys.exit(f"refused with '{error}', expected '{expected}'")
        print(f"  refused: {error}")
        return
    sys.exit(f"trained where '{expected}' was expected")
bad = labels.copy()
bad[3, 0] = 2
refused("targets: entry 3 is 2, outside the loss's 2 classes", ids, bad, dense)
refused("takes dense features", ids, labels)
refused("dense has shape [8, 6]; the plan takes [8, 1, 6]", ids, labels, dense.reshape(8, 6))
refused("targets has shape [8, 2]", ids, np.zeros((8, 2), dtype=np.int32), dense)
if session.step != 0:
    sys.exit(f"a refused step ran: step {session.step}")
PY
echo "dlrm: PASS"
