#!/usr/bin/env bash
# A plan for one rank under `mpirun -np 2`: tp-run must exit non-zero, without
# hanging, after BOTH ranks printed the one-line grid mismatch error.
#
#   world-size-mismatch.sh BUILD_DIR MPIEXEC WORK_DIR
set -euo pipefail
build=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
inputs=$here/../tp-run/Inputs
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_base_warn_component_unused=0

rm -rf "$work" && mkdir -p "$work"
"$bin/tpc-tokenize" "$inputs/text.txt" -o "$work/text.tokens" >/dev/null
"$bin/tpc-import" "$inputs/gpt2-bytes.json" --batch 2 --seq 16 -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/model.tpplan"

status=0
timeout 60 "$mpiexec" -np 2 --oversubscribe "$bin/tp-run" "$work/model.tpplan" \
  --data "$work/text.tokens" >"$work/output.txt" 2>&1 || status=$?
cat "$work/output.txt"
if [ "$status" -eq 0 ]; then
  echo "world-size-mismatch: tp-run exited 0 on a 1-rank plan under 2 ranks" >&2
  exit 1
fi
if [ "$status" -eq 124 ]; then
  echo "world-size-mismatch: tp-run hung (killed after 60 s)" >&2
  exit 1
fi
pattern='rank [01]: .*has 1 ranks, but 2 are running'
lines=$(grep -c "$pattern" "$work/output.txt" || true)
if [ "$lines" -ne 2 ]; then
  echo "world-size-mismatch: expected 2 lines matching '$pattern', got $lines" >&2
  exit 1
fi
for rank in 0 1; do
  if ! grep -q "^tp-run: error: rank $rank: .*has 1 ranks, but 2 are running\$" \
    "$work/output.txt"; then
    echo "world-size-mismatch: rank $rank did not print the error" >&2
    exit 1
  fi
done
echo "world-size-mismatch: exit status $status, both ranks reported the mismatch"

# tp-run inspect shows a plan on any number of ranks, once (rank 0).
timeout 60 "$mpiexec" -np 2 --oversubscribe "$bin/tp-run" inspect \
  "$work/model.tpplan" >"$work/inspect.json"
[ "$(grep -c '"content_checksum"' "$work/inspect.json")" -eq 1 ] ||
  { cat "$work/inspect.json"; echo "world-size-mismatch: inspect did not print the plan once" >&2; exit 1; }
echo "world-size-mismatch: inspect printed the 1-rank plan under 2 ranks"
