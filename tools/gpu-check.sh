#!/usr/bin/env bash
# The GPU checks, run on a device machine from the bundle tools/gpu-bundle.sh
# made (docs/gpu.md): the kernel parity tests, then device-cuda.sh,
# training-numerics.sh, generation.sh, evaluation.sh and mixed-precision.sh
# (bf16 storage against PyTorch autocast) on cuda for GPT-2
# and LLaMA, and embedding-cache.sh for LLaMA (they need transformers:
# tools/gpu-site.sh; mpirun for the cache's grids), with the bundle as
# their build directory. Logs go to OUT; the last lines are a table, one row
# per check. Exit status: the number of checks that failed.
#
#   tar -xJf .gpu-bundle.tar.xz -C /tmp
#   tools/gpu-check.sh /tmp/.gpu-bundle [OUT]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=$(cd "$1" && pwd)
out=${2:-/tmp/gpu-check}
mkdir -p "$out"
source "$bundle/env.sh"
python=$(command -v python3)
nvidia-smi -L 2>/dev/null || echo "gpu-check: no nvidia-smi"

results=()
failed=0
check() { # NAME COMMAND...
  local name=$1 start=$SECONDS rc
  shift
  "$@" > "$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) local skipped
       skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$out/$name.log" | grep -oE '[0-9]+')
       results+=("$name: passed ($((SECONDS - start)) s${skipped:+, $skipped skipped})") ;;
    77) results+=("$name: $(tail -1 "$out/$name.log")") ;;
    *) results+=("$name: FAILED (rc $rc; $out/$name.log)")
       failed=$((failed + 1))
       tail -15 "$out/$name.log" ;;
  esac
}

check kernels tpc-runtime-tests --gtest_filter='*KernelParity*:*CachedTableOn*'
for model in gpt2 llama; do
  check device-cuda-$model "$root/test/integration/device-cuda.sh" \
    "$bundle" "$python" "$out/device-cuda-$model" $model
  check training-cuda-$model "$root/test/integration/training-numerics.sh" \
    "$bundle" "$python" "$out/training-cuda-$model" $model cuda
  check generation-cuda-$model "$root/test/integration/generation.sh" \
    "$bundle" "$python" "$out/generation-cuda-$model" $model cuda
  check evaluation-cuda-$model "$root/test/integration/evaluation.sh" \
    "$bundle" "$python" "$out/evaluation-cuda-$model" $model cuda
  check mixed-precision-cuda-$model "$root/test/integration/mixed-precision.sh" \
    "$bundle" "$python" "$out/mixed-precision-cuda-$model" $model cuda
done
check embedding-cache-cuda-llama "$root/test/integration/embedding-cache.sh" \
  "$bundle" "$python" "$out/embedding-cache-cuda-llama" cuda
printf '%s\n' "${results[@]}"
exit $failed
