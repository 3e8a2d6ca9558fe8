#!/usr/bin/env bash
# The one prepared script for a short GPU lease (docs/gpu.md): run once on a
# device machine, within BUDGET seconds (default 420), it runs in order of
# what matters most
#  1. the kernel parity tests (CUDA against the CPU, the cuBLASLt and cuDNN
#     paths among them) and the host-side library tests;
#  2. the benchmark's core: GPT-2-small b8 x 1024 bf16 and f32, tp-run
#     against PyTorch eager (and torch.compile, bf16) (bench/gpu-train.sh);
#  3. decoding against HuggingFace generate() (bench/gpu-decode.sh);
#  4. the bf16 training check against PyTorch autocast on the GPU
#     (mixed-precision.sh cuda, GPT-2), which also checks that cuBLASLt and
#     cuDNN's fused attention are the paths in use;
#  5. the LLaMA-style 0.85B model at b4 x 2048 in bf16, and GPT-2-small
#     b16 x 1024 in bf16 (the rest of the benchmark);
#  6. while time is left, the other GPU checks of tools/gpu-check.sh.
# Nothing starts after the deadline; what did not run is listed as skipped.
# A benchmark run gets RUN_TIMEOUT seconds (default 150). OUT gets every
# log, OUT/session.md (the tables, one line per check) and OUT/session.json;
# with ARCHIVE set, its logs and tables (not the plans and token files) are
# also packed into that one .tar.xz, since the device tool brings back at
# most 8 files. Exit status: the number of checks that failed.
#
#   tar -xJf .gpu-bundle.tar.xz -C /tmp      # tools/gpu-bundle.sh, here
#   mkdir -p /tmp/site && tar -xJf .gpu-site.tar.xz -C /tmp/site
#   PYTHONPATH=/tmp/site ARCHIVE=$OUT/session.tar.xz \
#     tools/gpu-session.sh /tmp/.gpu-bundle /tmp/session [BUDGET]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=$(cd "$1" && pwd)
out=${2:-/tmp/gpu-session}
budget=${3:-420}
export RUN_TIMEOUT=${RUN_TIMEOUT:-150}
start=$(date +%s)
deadline=$((start + budget))
mkdir -p "$out"
source "$bundle/env.sh"
python=$(command -v python3)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  > "$out/device.txt" 2>&1 || echo "no nvidia-smi" > "$out/device.txt"
echo "device: $(cat "$out/device.txt")"

results=()
failed=0
left() { echo $((deadline - $(date +%s))); }
# Runs a check with at most the time left (or LIMIT seconds, if less).
check() { # NAME LIMIT COMMAND...
  local name=$1 limit=$2 rc began=$SECONDS
  shift 2
  if [ "$(left)" -lt 20 ]; then
    results+=("$name: skipped (deadline)")
    return
  fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) results+=("$name: passed ($((SECONDS - began)) s)") ;;
    77) results+=("$name: $(tail -1 "$out/$name.log")") ;;
    124) results+=("$name: TIMED OUT after $limit s ($out/$name.log)")
         failed=$((failed + 1)) ;;
    *) results+=("$name: FAILED (rc $rc; $out/$name.log)")
       failed=$((failed + 1))
       tail -8 "$out/$name.log" ;;
  esac
  echo "${results[-1]}"
}
# A benchmark part: gpu-train.sh or gpu-decode.sh with the deadline.
bench() { # NAME SCRIPT ARGS... (environment set by the caller)
  local name=$1 began=$SECONDS
  shift
  if [ "$(left)" -lt 30 ]; then
    results+=("bench $name: skipped (deadline)")
    return
  fi
  DEADLINE=$((deadline - 15)) "$@" > "$out/bench-$name.log" 2>&1
  results+=("bench $name: ran ($((SECONDS - began)) s; $out/bench-$name.log)")
  echo "${results[-1]}"
}

check parity 120 tpc-runtime-tests \
  --gtest_filter='*KernelParity*:CudnnGraphs*:DeviceLibraries*' \
  --gtest_output="json:$out/parity.json"
RUNS=gpt2-small:8:1024 TPC_PRECISIONS="bf16 f32" PRECISIONS="bf16 f32" \
  SKIP=compile:f32 bench gpt2-b8 "$root/bench/gpu-train.sh" "$bundle" 10 "$out/train-gpt2-b8"
bench decode "$root/bench/gpu-decode.sh" "$bundle" 64 128 "$out/decode"
check mixed-precision-cuda-gpt2 150 "$root/test/integration/mixed-precision.sh" \
  "$bundle" "$python" "$out/mixed-precision-cuda-gpt2" gpt2 cuda
RUNS="llama-1b:4:2048 gpt2-small:16:1024" TPC_PRECISIONS=bf16 PRECISIONS=bf16 \
  bench bf16-large "$root/bench/gpu-train.sh" "$bundle" 10 "$out/train-bf16-large"
check mixed-precision-cuda-llama 150 "$root/test/integration/mixed-precision.sh" \
  "$bundle" "$python" "$out/mixed-precision-cuda-llama" llama cuda
for model in gpt2 llama; do
  check device-cuda-$model 120 "$root/test/integration/device-cuda.sh" \
    "$bundle" "$python" "$out/device-cuda-$model" $model
  check training-cuda-$model 120 "$root/test/integration/training-numerics.sh" \
    "$bundle" "$python" "$out/training-cuda-$model" $model cuda
  check generation-cuda-$model 120 "$root/test/integration/generation.sh" \
    "$bundle" "$python" "$out/generation-cuda-$model" $model cuda
  check evaluation-cuda-$model 120 "$root/test/integration/evaluation.sh" \
    "$bundle" "$python" "$out/evaluation-cuda-$model" $model cuda
done

# The report: the checks, then the benchmark's tables.
{
  echo "# GPU session: $(cat "$out/device.txt")"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s of a $budget s budget"
  echo
  printf -- '- %s\n' "${results[@]}"
  echo
  for table in "$out"/train-gpt2-b8/train.md "$out"/train-bf16-large/train.md \
    "$out"/decode/decode.md; do
    [ -f "$table" ] && { cat "$table"; echo; }
  done
} > "$out/session.md"
"$python" - "$out" "$failed" "${results[@]}" <<'PY'
import glob, json, os, sys
out, failed, results = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
summary = {"device": open(os.path.join(out, "device.txt")).read().strip(),
           "failed": failed, "checks": results, "train": [], "decode": []}
for path in sorted(glob.glob(os.path.join(out, "train-*", "train-summary.json"))):
    summary["train"].append(json.load(open(path)))
path = os.path.join(out, "decode", "decode-summary.json")
if os.path.exists(path):
    summary["decode"] = json.load(open(path))["runs"]
json.dump(summary, open(os.path.join(out, "session.json"), "w"), indent=1)
PY
if [ -n "${ARCHIVE:-}" ]; then
  tar --exclude='*.tokens' --exclude='*.tpplan' --exclude='*.mlir' \
    --exclude='*.safetensors' -cJf "$ARCHIVE" -C "$(dirname "$out")" \
    "$(basename "$out")"
fi
cat "$out/session.md"
exit $failed
