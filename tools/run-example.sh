#!/usr/bin/env bash
# The main job on the bundled default: builds tpc (installing dependencies
# first if needed), imports the bundled GPT-2 config (byte-level vocabulary),
# compiles it to a plan and runs a forward pass with the loss on bundled text.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
config=${1:-$root/examples/gpt2-bytes/config.json}
text=${2:-$root/README.md}
work=$build/example
mkdir -p "$work"

"$root/tools/build.sh" >/dev/null
bin=$build/bin
set -x
"$bin/tpc-import" "$config" --batch 4 --seq 128 -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline -o "$work/model.tpplan"
"$bin/tpc-tokenize" "$text" -o "$work/text.tokens"
"$bin/tp-run" "$work/model.tpplan" --data "$work/text.tokens" \
  --metrics "$work/metrics.json"
