#!/usr/bin/env bash
# Hand-sharded models on several MPI ranks against the same model on one
# rank: tensor parallelism (a Megatron MLP: one all-reduce), sequence
# parallelism (local split, all-to-all round trip, all-gather,
# reduce-scatter) and vocabulary parallelism (each rank looks up its block
# of embedding rows, an all-reduce completes it; a column-parallel head and
# a cross-entropy over each rank's block of logits) on 2 ranks and over both
# axes of a 2x2 grid. The loss must match the one-rank run within 1e-5
# relative, and the bytes the runtime counts per collective must equal
# tp-report-communication's static figure.
#
#   sharded-loss.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_base_warn_component_unused=0
rm -rf "$work" && mkdir -p "$work"
"$bin/tpc-tokenize" "$here/../tp-run/Inputs/text.txt" -o "$work/text.tokens" > /dev/null

loss() { sed -n 's/^program loss: loss \([^,]*\),.*/\1/p'; }
"$bin/tpc-opt" "$here/Inputs/mlp-plain.mlir" --tp-pipeline="train=false" -o "$work/plain.tpplan"
reference=$("$bin/tp-run" "$work/plain.tpplan" --data "$work/text.tokens" --program loss | loss)

for run in tensor-parallel:2 sequence-parallel:2 vocab-parallel:2 vocab-parallel-2d:4; do
  variant=${run%:*} ranks=${run#*:}
  input=$here/Inputs/mlp-$variant.mlir
  "$bin/tpc-opt" "$input" --tp-pipeline="train=false" -o "$work/$variant.tpplan"
  actual=$(timeout 60 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" "$work/$variant.tpplan" \
    --data "$work/text.tokens" --program loss --metrics "$work/$variant.json" | loss)
  awk -v a="$actual" -v r="$reference" -v v="$variant" 'BEGIN {
    rel = (a - r) / r; if (rel < 0) rel = -rel;
    printf "%s: loss %s on several ranks, %s on 1 rank, rel %.2e\n", v, a, r, rel;
    exit !(rel <= 1e-5) }'
  # Static volume per kind, as "kind bytes" lines, against the runtime's.
  static=$("$bin/tpc-opt" "$input" --tp-report-communication \
             --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 |
           grep -o '[a-z_]* [0-9.]* bytes ([0-9]* calls)' |
           sed 's/ bytes (\([0-9]*\) calls)/ \1/' | sort)
  runtime=$(python3 -c 'import json, sys
for kind, s in json.load(open(sys.argv[1]))["communication"].items():
    print(kind, s["bytes"], s["calls"])' "$work/$variant.json" | sort)
  echo "$variant: static [$static] runtime [$runtime]" | tr '\n' ' '; echo
  [ -n "$static" ] && [ "$static" = "$runtime" ]
done
echo "sharded-loss: PASS"
