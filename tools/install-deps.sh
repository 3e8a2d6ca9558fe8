#!/usr/bin/env bash
# Installs every Debian package that building and testing tpc need. Idempotent: packages already present
# are skipped, and `apt-get update` runs at most once, only when something is missing.
set -euo pipefail

packages=(
  # Compiler side: LLVM/MLIR 22 (static libs, tblgen, lit, FileCheck), fast compiler and linker.
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools clang-22 lld-22 libzstd-dev
  # ASan, UBSan and libFuzzer runtimes for the sanitizer build (test/fuzz).
  libclang-rt-22-dev
  # The host compiler nvcc accepts, for the CUDA backend when the toolkit is present.
  g++-12
  # Build system and unit tests.
  cmake ninja-build libgtest-dev googletest clang-format
  # Runtime: MPI, plan files, BLAS.
  libopenmpi-dev openmpi-bin flatbuffers-compiler libflatbuffers-dev libopenblas-dev
  # JSON reading and writing, XXH3 checksums, command lines.
  nlohmann-json3-dev libxxhash-dev libcli11-dev
  # SentencePiece .model files (tpc-tokenize --sentencepiece); spm_train
  # makes the one its test reads.
  libsentencepiece-dev sentencepiece
  # English text the main example trains on.
  fortunes
  # Numerical references for tests; pip fetches pinned wheels (the
  # references' venv, cudnn-frontend's headers).
  python3-torch python3-numpy python3-venv python3-pip
  # The Python package: pybind11 bindings, Python's headers, its tests.
  pybind11-dev python3-dev python3-pytest python3-setuptools
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
