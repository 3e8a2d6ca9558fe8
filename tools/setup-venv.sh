#!/usr/bin/env bash
# Creates the Python virtual environment that the integration tests use for numerical references
# (HuggingFace transformers on top of Debian's PyTorch). Idempotent and silent when nothing is to do.
#
#   tools/setup-venv.sh            # creates/updates $TPC_VENV (default: <repo>/.venv)
#
# The venv is created from Debian's /usr/bin/python3 with --system-site-packages, so it sees the
# python3-torch (1.13) and python3-numpy packages that tools/install-deps.sh installs. Everything else
# is pip-installed from PyPI as binary wheels, pinned, including the transitive dependencies that
# Debian does not already provide (python3-torch pulls in python3-requests, python3-yaml and
# python3-typing-extensions, which huggingface_hub reuses). transformers is held at 4.46.3, verified to
# import and run GPT-2/LLaMA forwards on Debian's torch 1.13 (later releases move to torch >= 2).
# Only wheels are accepted (--only-binary), so no Rust/C toolchain is needed; PyPI is the only network use.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TPC_VENV:-$repo_root/.venv}"
base_python=/usr/bin/python3

# Exact pins. Bump together; setup re-runs pip only when an installed version differs from these.
pins=(
  transformers==4.46.3
  safetensors==0.4.5
  tokenizers==0.20.3
  huggingface-hub==0.26.2
  filelock==3.16.1
  fsspec==2024.10.0
  packaging==24.2
  regex==2024.11.6
  tqdm==4.67.1
  sentencepiece==0.2.0
)

# Fast path: the venv exists, sees system packages, and every pin is installed at its version.
pins_ok() {
  [ -x "$venv/bin/python" ] || return 1
  grep -qs '^include-system-site-packages = true' "$venv/pyvenv.cfg" || return 1
  "$venv/bin/python" - "${pins[@]}" <<'EOF' 2>/dev/null
import sys
from importlib import metadata
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if metadata.version(name) != want:
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
EOF
}

if pins_ok; then
  exit 0
fi

if [ ! -x "$base_python" ]; then
  echo "setup-venv: $base_python not found; run tools/install-deps.sh" >&2
  exit 1
fi
if ! "$base_python" -c 'import torch, numpy, venv, ensurepip' 2>/dev/null; then
  echo "setup-venv: $base_python cannot import torch/numpy/venv; run tools/install-deps.sh" \
       "(needs python3-torch python3-numpy python3-venv)" >&2
  exit 1
fi

# (Re)running venv over an existing directory keeps installed packages and rewrites pyvenv.cfg, which
# also repairs a venv that was created without --system-site-packages.
if [ ! -x "$venv/bin/python" ] || ! grep -qs '^include-system-site-packages = true' "$venv/pyvenv.cfg"; then
  echo "setup-venv: creating $venv" >&2
  "$base_python" -m venv --system-site-packages "$venv"
fi

echo "setup-venv: installing ${pins[*]}" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
  "$venv/bin/python" -m pip install --quiet --only-binary=:all: "${pins[@]}"

if ! pins_ok; then
  echo "setup-venv: pinned packages still not installed at the pinned versions in $venv" >&2
  exit 1
fi
# Smoke test: transformers must import on Debian's torch.
"$venv/bin/python" -c 'import torch, safetensors.torch; from transformers import GPT2LMHeadModel, LlamaForCausalLM' \
  || { echo "setup-venv: transformers does not import in $venv" >&2; exit 1; }
echo "setup-venv: ready: $venv" >&2
