#!/usr/bin/env bash
# Fails if any of tpc's C++ sources differs from .clang-format (LLVM style),
# as formatted by Debian 12's clang-format 14.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mapfile -t files < <(find dialects compiler runtime frontends tools test bench \
  -name '*.cpp' -o -name '*.h' -o -name '*.cu' | sort)
clang-format --dry-run --Werror "${files[@]}"
echo "check-format: ${#files[@]} files follow .clang-format"
