#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time on a fresh seed corpus and fails
# on any finding (libFuzzer exits non-zero and leaves a crash-* file).
#   run-fuzzer.sh FUZZER KIND BUILD_DIR WORK_DIR SECONDS
set -euo pipefail
fuzzer=$1 kind=$2 build=$3 work=$4 seconds=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rm -rf "$work"
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
"$here/make-seeds.sh" "$kind" "$build" "$work/seeds"
[ -n "$(ls -A "$work/seeds")" ] || { echo "no seeds for $kind" >&2; exit 1; }

# New inputs go to corpus/, the seeds stay as they are; one process, bounded
# input size and memory so a slow input is a finding, not a hang.
status=0
"$fuzzer" "$work/corpus" "$work/seeds" -max_total_time="$seconds" \
  -max_len=65536 -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" > "$work/fuzz.log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
findings=$(ls -A "$work/artifacts" | wc -l)
echo "fuzz-$kind: ${runs:-0} executions in ${seconds} s, $findings findings," \
  "corpus $(ls "$work/corpus" | wc -l) inputs" | tee "$work/summary.txt"
if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ] || [ -z "$runs" ]; then
  tail -n 60 "$work/fuzz.log" >&2
  exit 1
fi
