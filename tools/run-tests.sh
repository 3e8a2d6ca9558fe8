#!/usr/bin/env bash
# Builds everything (installing dependencies first if needed) and runs every
# test: lit + FileCheck for the compiler, GoogleTest for the runtime, and
# integration tests against PyTorch/HuggingFace references (in .venv).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

"$root/tools/build.sh"
"$root/tools/setup-venv.sh"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
