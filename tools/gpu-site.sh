#!/usr/bin/env bash
# Packs the Python packages our references pin (tools/setup-venv.sh) for a
# device machine whose own are newer (transformers 5 changed the LLaMA
# rotary and config internals reference.py patches for float64): the
# transformers, tokenizers and huggingface_hub wheels for CPython 3.12, with
# transformers cut to the models the tests use (GPT-2, LLaMA, the auto
# classes, T5's tokenizer that others import) plus every model's
# configuration, which AutoConfig imports. The result is small enough to
# travel beside the bundle of tools/gpu-bundle.sh within the device tool's
# 64 MiB. There:
#
#   mkdir -p /tmp/site && tar -xJf .gpu-site.tar.xz -C /tmp/site
#   export PYTHONPATH=/tmp/site
#
#   tools/gpu-site.sh [OUT]       (default: .gpu-site.tar.xz, ignored by git)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/.gpu-site.tar.xz}
versions=$("$root/.venv/bin/python" - <<'PY'
from importlib.metadata import version
print(" ".join(f"{p}=={version(p)}" for p in ("transformers", "tokenizers", "huggingface_hub")))
PY
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/wheels" $versions
mkdir "$work/site"
for wheel in "$work"/wheels/*.whl; do
  (cd "$work/site" && python3 -m zipfile -e "$wheel" .)
done
for model in "$work"/site/transformers/models/*/; do
  case $(basename "$model") in
    gpt2 | llama | auto | t5) ;;
    *) find "$model" -type f ! -name __init__.py ! -name 'configuration_*.py' -delete ;;
  esac
done
find "$work/site" -depth -type d -empty -delete
XZ_OPT=-9e tar -cJf "$out.tmp.$$" -C "$work/site" .
mv "$out.tmp.$$" "$out"
echo "gpu-site: $out ($(du -h "$out" | cut -f1)): $versions"
