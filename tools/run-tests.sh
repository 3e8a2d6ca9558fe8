#!/usr/bin/env bash
# Builds everything (installing dependencies first if needed) and runs every
# test: lit + FileCheck for the compiler, GoogleTest for the runtime, and
# integration tests against PyTorch/HuggingFace references (in .venv).
# The same tests run first on a sanitizer build ($BUILD_DIR/sanitize: UBSan
# everywhere, ASan on the runtime and its programs), together with the
# libFuzzer targets (test/fuzz), each run for a fixed time on a seed corpus.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

"$root/tools/build.sh"
SANITIZE=1 BUILD_DIR="$build/sanitize" "$root/tools/build.sh"
"$root/tools/setup-venv.sh"

ctest --test-dir "$build/sanitize" --output-on-failure -j "$(nproc)"
cat "$build"/sanitize/test/fuzz/*/summary.txt
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
