#!/usr/bin/env bash
# Fetches NVIDIA's cudnn-frontend (header-only C++, the graph API the CUDA
# backend builds cuDNN's fused attention with) from its pinned PyPI wheel,
# whose include/ folder holds the headers, into .deps/ (ignored by git).
# Idempotent and silent when the pinned version is there. The build uses it
# with the CUDA toolkit's cudnn.h and libcudnn; the GPU machine's libcudnn
# is PyTorch's nvidia-cudnn-cu13 (tools/gpu-bundle.sh's env.sh).
#
#   tools/fetch-cudnn-frontend.sh      # prints the include folder
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=1.32.0
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest=$root/.deps/cudnn-frontend-$version
if [ -f "$dest/include/cudnn_frontend.h" ]; then
  echo "$dest/include"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'nvidia-cudnn-frontend==%s --hash=sha256:%s\n' "$version" "$sha256" \
  > "$work/requirements.txt"
# The wheel for Debian 12's CPython 3.11 on x86-64, whatever runs pip.
if ! /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 --require-hashes \
    -r "$work/requirements.txt" -d "$work" >&2; then
  echo "fetch-cudnn-frontend: could not download nvidia-cudnn-frontend $version from PyPI" >&2
  exit 1
fi
/usr/bin/python3 - "$work"/nvidia_cudnn_frontend-*.whl "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    members = [n for n in wheel.namelist() if n.startswith("include/")]
    if not any(n == "include/cudnn_frontend.h" for n in members):
        sys.exit("fetch-cudnn-frontend: the wheel has no include/cudnn_frontend.h")
    wheel.extractall(sys.argv[2], members)
PY
mkdir -p "$root/.deps"
rm -rf "$dest.tmp.$$"
mv "$work/unpacked" "$dest.tmp.$$"
mv "$dest.tmp.$$" "$dest"
echo "$dest/include"
