#!/usr/bin/env bash
# tpc-calibrate on 2 real MPI ranks (quick sizes): the cluster file it
# writes loads in the step simulator, its fit agrees with the measurements
# it records (each recorded model time is the file's formula; each rate is
# near the measured one), and bad runs fail with one line, leaving an
# existing file alone.
#
#   calibration.sh BUILD_DIR MPIEXEC WORK_DIR
set -euo pipefail
build=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
inputs=$here/../tp-run/Inputs
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_base_warn_component_unused=0
rm -rf "$work" && mkdir -p "$work"
fail() { echo "calibration: $*" >&2; exit 1; }

cluster=$work/cluster.json
timeout 120 "$mpiexec" -np 2 --oversubscribe --bind-to none \
  "$bin/tpc-calibrate" --quick --seconds-per-point 0.02 --name quick-test \
  --device cpu -o "$cluster"

/usr/bin/python3 - "$cluster" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
d = c["device"]
assert c["name"] == "quick-test", c["name"]
assert c["devices"] == 1, "one CPU shared by 2 ranks"
import os
assert d["cores"] == os.cpu_count(), d
record = c["calibration"]
overhead, half = d["op_overhead_seconds"], d["gemm_efficiency"]["half_flops"]
assert set(half) == set(d["peak_flops"]) == {"f32", "tf32", "bf16"}, d
close = lambda a, b, tol: abs(a - b) <= tol * abs(b)
for s in record["products"]:
    flops = 2 * s["m"] * s["n"] * s["k"]
    p = s["precision"]
    model = overhead + (flops + half[p]) / d["peak_flops"][p]
    assert close(s["model_seconds"], model, 2e-3), (s, model)
for s in record["streams"]:
    model = overhead + s["bytes"] / d["memory_bandwidth"]
    assert close(s["model_seconds"], model, 2e-3), (s, model)
(level,) = c["network"]
assert level["level"] == "machine" and "ranks" not in level, level
for s in record["exchanges"]:
    n, size = s["ranks"], s["buffer_bytes"]
    messages, sent = (2 * (n - 1), 2 * (n - 1) / n * size) \
        if s["kind"] == "all_reduce" else (1, size)
    model = messages * level["latency"] + sent / level["bandwidth"]
    assert close(s["model_seconds"], model, 2e-3), (s, model)

def rate(samples, work):
    best = max(samples, key=work)
    return work(best) / best["seconds"]
# The model of the largest product of each precision is near its time.
for p in half:
    largest = max((s for s in record["products"] if s["precision"] == p),
                  key=lambda s: s["m"] * s["n"] * s["k"])
    assert close(largest["model_seconds"], largest["seconds"], 0.5), largest
measured = rate(record["streams"], lambda s: s["bytes"])
assert 0.5 < d["memory_bandwidth"] / measured < 2, (d, measured)
sends = [s for s in record["exchanges"] if s["kind"] == "send"]
measured = rate(sends, lambda s: s["buffer_bytes"])
assert 0.25 < level["bandwidth"] / measured < 4, (level, measured)
assert level["latency"] <= 2 * min(s["seconds"] for s in sends), level
print("calibration: the fit agrees with its measurements")
PY

# The simulator reads it (the record is for people).
"$bin/tpc-import" "$inputs/gpt2-bytes.json" --batch 2 --seq 16 -o "$work/model.mlir"
"$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="mode=1d grid=2 cluster=$cluster" \
  -o "$work/model.tpplan" 2>"$work/remarks.txt"
grep -q "@train_step on quick-test: [0-9.]* ms per run" "$work/remarks.txt" ||
  fail "tpc-opt printed no prediction on the calibrated cluster"

# Failures: one line, non-zero, and an existing file untouched.
echo keep >"$work/existing.json"
expect_error() {
  local pattern=$1; shift
  local status=0
  timeout 60 "$@" >"$work/error.txt" 2>&1 || status=$?
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
    fail "exit $status from: $*"
  grep -q "^tpc-calibrate: error: .*$pattern" "$work/error.txt" ||
    { cat "$work/error.txt"; fail "no '$pattern' error from: $*"; }
  [ "$(cat "$work/existing.json")" = keep ] || fail "$* changed the file"
}
expect_error "at least 2 ranks" "$bin/tpc-calibrate" --quick -o "$work/existing.json"
expect_error "run under mpirun --bind-to none" \
  "$mpiexec" -np 2 --bind-to core "$bin/tpc-calibrate" --quick \
  --device cpu -o "$work/existing.json"
expect_error "no-such-dir" \
  "$mpiexec" -np 2 --bind-to none "$bin/tpc-calibrate" --quick \
  -o "$work/no-such-dir/cluster.json"
expect_error "different options" \
  "$mpiexec" -np 1 --bind-to none "$bin/tpc-calibrate" --quick --name a \
  -o "$work/existing.json" : -np 1 --bind-to none "$bin/tpc-calibrate" \
  --quick --name b -o "$work/existing.json"
echo "calibration: bad runs fail with one line and leave the file alone"
