#!/usr/bin/env bash
# Installs the dependencies (if missing), configures the build directory (once)
# and builds everything. BUILD_DIR overrides the default ./build; SANITIZE=1
# configures an ASan+UBSan build with the libFuzzer targets (run-tests.sh
# builds one in $BUILD_DIR/sanitize). TPC_BUILD_TARGETS builds only those
# targets (setup.py: tpc_python).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

"$root/tools/install-deps.sh"

extra=()
# The CUDA backend's cuDNN attention needs cudnn-frontend's headers (a
# pinned PyPI wheel): fetched where the backend is built.
if [ "${SANITIZE:-0}" != 1 ] && command -v nvcc > /dev/null; then
  "$root/tools/fetch-cudnn-frontend.sh" > /dev/null
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  # No CUDA backend here: the sanitizers cover the host code the CPU tests
  # run, and the GPU code is built (and its CPU side tested) by the main
  # build.
  extra=(-DTPC_SANITIZE=ON -DTPC_FUZZ=ON -DTPC_CUDA=OFF)
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" "${extra[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DLLVM_USE_LINKER=lld \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DTPC_WERROR=ON >/dev/null
fi
# shellcheck disable=SC2086 # a list of target names
cmake --build "$build" -j "$(nproc)" --target ${TPC_BUILD_TARGETS:-all}
