#!/usr/bin/env bash
# The frequency-aware embedding cache (tp-pipeline embedding-cache=RATIO) on
# a small LLaMA (GQA, untied head, vocabulary 96) with real weights:
#  1. the table resident (ratio 1) trains 20 AdamW steps as PyTorch does
#     with the table's row-sparse update (training_reference.py train
#     --lazy-embedding), non-default AdamW settings;
#  2. cached at ratios that evict every few steps, on one rank, on 1D 2
#     (vocabulary-parallel: each rank caches its block), on dp 2 x 1D 2 and
#     on staged-cpu (device memory the host cannot address), every run
#     equals the same grid's resident run bit for bit: the loss of every
#     step and every exported weight; each cache missed, wrote rows back and
#     says so in the metrics;
#  3. a cached run on 1D 2 stopped at step 10 keeps the table's ranking (the
#     data's, counted here) in its checkpoint and resumes on dp 2 with
#     another ratio, ending at the uninterrupted resident run's weights;
#  4. a cache too small for one batch's rows and a token outside the
#     vocabulary fail before step 1 with one line naming them.
#
# With DEVICE (cuda), every run is on that device (staged-cpu's run too:
# it then checks the device against itself); the test is skipped (exit 77)
# when it cannot run there.
#
#   embedding-cache.sh BUILD_DIR PYTHON WORK_DIR [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 device=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export HERE=$here
bin=$build/bin
ref="$python $here/reference.py"
check="$python $here/tensor_parallel_check.py"
source "$here/small-model.sh"
source "$here/device-probe.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -x "$python" ]; then
  echo "embedding-cache: no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
batch=2 seq=16 steps=20 table=model.embed_tokens.weight
small_model "$work" llama 33 $batch $seq 400
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq -o "$work/model.mlir"
# Non-default AdamW settings and schedule: an ignored one shows against
# PyTorch's.
adamw="beta2=0.99 weight-decay=0.05"
flags=(--lr 2e-3 --min-lr 2e-4 --warmup 5 --decay-steps $steps --clip 1.0)

compile() { # NAME OPTIONS
  "$bin/tpc-opt" "$work/model.mlir" -o "$work/$1.tpplan" \
    --tp-pipeline="$adamw $2" 2> /dev/null
}
run() { # NAME RANKS [tp-run flags...] (STEPS: the steps, default all)
  local name=$1 ranks=$2 weights=(--weights "$work/model.safetensors")
  shift 2
  [[ " $* " != *" --resume "* ]] || weights=()
  timeout 120 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" \
    "$work/$name.tpplan" --steps ${STEPS:-$steps} "${flags[@]}" "${weights[@]}" \
    --data "$work/tokens.tokens" \
    --metrics "$work/$name.json" --export "$work/$name" "$@" \
    ${device:+--device "$device"} > "$work/$name.log"
}
# The same losses and the same bytes of every weight.
bit_equal() { # BASE NAME
  cmp "$work/$1/model.safetensors" "$work/$2/model.safetensors"
  "$python" - "$work/$1.json" "$work/$2.json" <<'PY'
import json, sys
a, b = ([r["loss"] for r in json.load(open(p))["loss_curve"]] for p in sys.argv[1:])
if a != b:
    sys.exit(f"losses differ: {a} vs {b}")
PY
  echo "$2: equal to $1 bit for bit"
}
# The cache of every rank missed and wrote rows back (it evicted).
evicted() { # NAME
  "$python" - "$work/$1.json" <<'PY'
import json, sys
caches = json.load(open(sys.argv[1]))["embedding_caches"]
for c in caches:
    # The lookahead gathered most fetched rows while the step before ran.
    if not (c["misses"] > 0 and c["rows_written_back"] > 0 and c["hit_rate"] < 1
            and c["slots"] < c["block_rows"] and c["bytes_fetched"] > 0
            and c["rows_prefetched"] > 0):
        sys.exit(f"{sys.argv[1]}: the cache did not evict: {c}")
c = caches[0]
print(f"  cache: {c['slots']} of {c['block_rows']} rows, hit rate {c['hit_rate']:.3f}, "
      f"{c['rows_written_back']} rows written back, {c['rows_prefetched']} of "
      f"{c['rows_fetched']} fetched rows gathered ahead")
PY
}

echo "== resident table against PyTorch's row-sparse AdamW"
compile one-r1 "embedding-cache=1"
run one-r1 1
"$python" "$here/training_reference.py" train --model "$work" --batch $batch \
  --seq $seq --steps $steps --lr 2e-3 --min-lr 2e-4 --warmup 5 \
  --decay-steps $steps --clip 1.0 --weight-decay 0.05 --beta2 0.99 \
  --lazy-embedding $table --actual "$work/one-r1.json"

echo "== cached equals resident"
compile one-r5 "embedding-cache=0.5"
run one-r5 1
bit_equal one-r1 one-r5
evicted one-r5
compile tp2-r1 "mode=1d grid=2 embedding-cache=1"
compile tp2-r6 "mode=1d grid=2 embedding-cache=0.6"
run tp2-r1 2
run tp2-r6 2
bit_equal tp2-r1 tp2-r6
evicted tp2-r6
cp "$work/tp2-r6.tpplan" "$work/tp2-staged.tpplan"
device=${device:-staged-cpu} run tp2-staged 2
bit_equal tp2-r1 tp2-staged
evicted tp2-staged
compile dp2tp2-r1 "mode=1d grid=2 dp=2 embedding-cache=1"
compile dp2tp2-r6 "mode=1d grid=2 dp=2 embedding-cache=0.6"
run dp2tp2-r1 4
run dp2tp2-r6 4
bit_equal dp2tp2-r1 dp2tp2-r6
evicted dp2tp2-r6
# Across grids the sums run in other orders: within the schemes' tolerance.
$check losses "$work/one-r1.json" "$work/dp2tp2-r6.json"
$check weights "$work/one-r1/model.safetensors" "$work/dp2tp2-r6/model.safetensors"

echo "== resume on another grid"
cp "$work/tp2-r6.tpplan" "$work/tp2-half.tpplan"
STEPS=10 run tp2-half 2 --checkpoint-dir "$work/ckpt"
# The checkpoint keeps the ranking: the rows by descending count over the
# training windows, ties by id.
"$python" - "$work/ckpt" "$work/tokens.tokens" $((batch * seq)) $table <<'PY'
import collections, os, sys
sys.path.insert(0, os.environ.get("HERE", "."))
from safetensors.numpy import load_file
import reference
ckpt, tokens, window, table = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
step = open(os.path.join(ckpt, "latest")).read().strip()
kept = load_file(os.path.join(ckpt, step, "state.safetensors"))["embedding_cache.order." + table]
ids = reference.read_tokens(tokens)
used = ids[: (len(ids) - 1) // window * window]
counts = collections.Counter(int(i) for i in used)
expected = sorted(range(96), key=lambda r: (-counts[r], r))
if list(kept) != expected:
    sys.exit(f"the checkpoint's ranking {list(kept)[:8]}... is not the data's {expected[:8]}...")
print(f"  checkpoint ranking: the data's, most frequent rows {expected[:4]}")
PY
compile dp2-r8 "mode=1d grid=1 dp=2 embedding-cache=0.8"
run dp2-r8 2 --resume "$work/ckpt"
grep -q "resumed from step 10" "$work/dp2-r8.log"
$check weights "$work/one-r1/model.safetensors" "$work/dp2-r8/model.safetensors"

echo "== refused before step 1"
compile one-tiny "embedding-cache=0.05"
if run one-tiny 1 2> "$work/tiny.err"; then
  echo "embedding-cache: a cache of 5 rows trained" >&2
  exit 1
fi
grep -q "embedding cache of '$table': an embedding cache of 5 rows is too small: a batch of the training data uses [0-9]* distinct rows" "$work/tiny.err"
grep -q "step 1/" "$work/one-tiny.log" && { echo "embedding-cache: step 1 ran" >&2; exit 1; }
"$python" - "$work/tokens.tokens" "$work/bad.tokens" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[-4:] = (96).to_bytes(4, "little")  # the last token: one past the vocabulary
open(sys.argv[2], "wb").write(bytes(data))
PY
if "$bin/tp-run" "$work/one-r5.tpplan" --steps $steps "${flags[@]}" \
    --weights "$work/model.safetensors" --data "$work/bad.tokens" \
    ${device:+--device "$device"} \
    > "$work/bad.log" 2> "$work/bad.err"; then
  echo "embedding-cache: a token outside the vocabulary trained" >&2
  exit 1
fi
cat "$work/bad.err"
grep -q "96" "$work/bad.err"
echo "embedding-cache: PASS"
