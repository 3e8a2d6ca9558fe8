#!/usr/bin/env bash
# The main job on the bundled default: builds tpc (installing dependencies
# first if needed) and compiles the bundled GPT-2 block with tpc-opt,
# verifying it and reporting every op's sharding rule.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
example=${1:-$root/examples/gpt2_block.mlir}

"$root/tools/build.sh" >/dev/null
echo "== $example: verified and round-tripped =="
"$build/bin/tpc-opt" "$example" --verify-roundtrip -o /dev/null
echo "== sharding rules (factors; reduction: split leaves a partial sum; stats: split needs an all-reduced statistic) =="
"$build/bin/tpc-opt" "$example" --tp-print-sharding-rules \
  --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 |
  awk '/remark: sharding rule:/ { loc = $1; sub(/.*sharding rule: /, ""); rule = $0;
         getline; match($0, /tp\.[a-z_]+/); printf "%-34s %-20s %s\n", loc, substr($0, RSTART, RLENGTH), rule }' |
  sed "s|^$root/||"
