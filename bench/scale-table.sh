#!/usr/bin/env bash
# Compile-only scale table of docs/schemes.md: a GPT-3-style model (h 4096,
# 64 heads, 24 layers, seq 2048) on 64 ranks as 1D 64, 2D 8x8, 2.5D 4x4x4 and
# 3D 4x4x4, and on 8 ranks as 1D 8, 2.5D 2x2x2 and 3D 2x2x2: bytes and calls
# per rank per step, planned memory per rank, compile time and memory.
#
#   bench/scale-table.sh [BATCH] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
exec /usr/bin/python3 "$root/bench/scale_table.py" "$build" \
  "$build/bench/scale-table" --batch "${1:-16}" --runs "${2:-3}"
