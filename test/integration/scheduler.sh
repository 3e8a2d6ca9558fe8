#!/usr/bin/env bash
# tp-sched on real MPI ranks: four small GPT-2 jobs on a pool of 4 ranks
# (oversubscribed), two queued at the start and two while they run.
#  1. Under each policy (fifo, las, ones) every job reaches its target; its
#     segments are a chain of steps whose tokens are the final checkpoint's
#     (no step or sample lost or repeated across resizes), each at the
#     learning rate of the linear scaling rule; the timeline SVG draws them;
#     ONES resizes at least one job (the cluster file predicts that sharing
#     pays, test/tp-sched/Inputs/compute-bound.json).
#  2. Every LAS and ONES job's segments done again by hand (LAS with
#     thresholds of 15 and 45 rank-seconds, so that it preempts; tpc-import at the batch,
#     tpc-opt for the ranks, mpirun tp-run resuming) end at the scheduled
#     run's final weights, moments and loss bit for bit; the ONES run's
#     resized job's loss curve matches PyTorch running the same segments
#     (float64; up to 125 steps down to a loss of 0.1, where f32 drifts to
#     5e-4: rtol 2e-3, against 1.5e-1 for a data offset gone wrong).
#  3. Under fifo a fifth job whose data is too short fails: reported with
#     tp-run's error, its ranks go back, the others finish, exit 1.
#  4. tp-sched killed (SIGKILL) just after a resize started the new grid's
#     segment: a restarted tp-sched stops the orphaned segment, marks it
#     interrupted, resumes from the last checkpoint and finishes; the
#     replay by hand still matches.
#  5. Preemption mid-segment: on one rank with segments longer than the
#     jobs, LAS (one threshold of 1 rank-second) gives the rank to the
#     later job once the first has run a second, and back: the running
#     segment is stopped after its current step (tp-run --stop-file), so
#     segments end before their planned last step; the chain, the targets
#     and the replay by hand hold as above.
#
# On the sanitizer build (SANITIZED=ON) only ONES (1 and 2, without the
# PyTorch check) and the restart (4): the other policies use the same code
# (tp-run's --stop-file runs there in tp-run/train.test).
#
#   scheduler.sh BUILD_DIR PYTHON MPIEXEC WORK_DIR [SANITIZED]
set -euo pipefail
build=$1 python=$2 mpiexec=$3 work=$4 sanitized=${5:-OFF}
policies="fifo las ones"
[ "$sanitized" != ON ] || policies=ones
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
ref="$python $here/reference.py"
check="$python $here/scheduler_check.py"
cluster=$here/../tp-sched/Inputs/compute-bound.json
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_base_warn_component_unused=0
export OPENBLAS_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work"

# Four models (seeds 30-33) with weights and 4000 tokens each; targets of
# 800 to 2000 samples (j1: a loss of 1.0, at most 1200 samples), batch 8 asked on 1 or 2 ranks, 4, 8 or 16 allowed
# on up to 4; non-default AdamW settings and warmup.
for i in 0 1 2 3; do
  $ref make-model --model-type gpt2 --out "$work/m$i" --seed $((30 + i)) \
    --batch 2 --seq 32 --layers 2 --hidden 128 --heads 4 --vocab 96 \
    --tokens 4000 --norm-eps 2e-3 > /dev/null
  target="\"target_samples\": $((800 + 400 * i))"
  # j1 stops at the first segment whose last loss is at most 1.0.
  [ $i != 1 ] || target='"target_loss": 1.0, "max_samples": 1200'
  cat > "$work/job$i.json" <<EOF
{"name": "j$i", "config": "m$i/config.json", "data": "m$i/tokens.tokens",
 "weights": "m$i/model.safetensors", "seq": 32, "batch_sizes": [4, 8, 16],
 "batch": 8, "ranks": $((i % 2 + 1)), "max_ranks": 4,
 $target, "lr": 2e-3, "warmup": 3, "clip": 0.5,
 "pipeline": "beta2=0.99 weight-decay=0.05"}
EOF
done
# A token file cut short: its job fails when its first segment starts.
head -c 600 "$work/m0/tokens.tokens" > "$work/short.tokens"
sed -e 's/"j0"/"broken"/' -e 's|m0/tokens.tokens|short.tokens|' \
  "$work/job0.json" > "$work/broken.json"

flags=(--ranks 4 --cluster "$cluster" --segment-steps 25 --interval 5
       --mpirun "$mpiexec" --mpirun-arg=--oversubscribe
       --mpirun-arg=--bind-to --mpirun-arg=none)

# Runs POLICY on STATE with j0, j1 (and EXTRA specs) queued first and j2,
# j3 once the first segment started; waits for tp-sched's exit status.
schedule() { # POLICY STATE EXTRA...
  local policy=$1 state=$2
  shift 2
  "$bin/tp-sched" submit "$state" "$work/job0.json" "$work/job1.json" "$@" > /dev/null
  "$bin/tp-sched" run "$state" --policy "$policy" "${flags[@]}" \
    $([ "$policy" = las ] && echo --las-thresholds=15,45) > "$state.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    grep -q "started" "$state.log" 2>/dev/null && break
    sleep 0.1
  done
  "$bin/tp-sched" submit "$state" "$work/job2.json" "$work/job3.json" > /dev/null
  local status=0
  wait $pid || status=$?
  return $status
}

for policy in $policies; do
  echo "== $policy"
  state=$work/$policy
  if [ $policy = fifo ]; then
    status=0
    schedule fifo "$state" "$work/broken.json" || status=$?
    [ $status -eq 1 ] || { echo "scheduler: fifo with a failing job exited $status, expected 1" >&2; exit 1; }
    $check check "$state" "--failed=broken:header says 4000 tokens, but the file has 600 bytes"
  else
    schedule $policy "$state" || { cat "$state.log" >&2; exit 1; }
    $check check "$state" $([ $policy = ones ] && echo --resized)
  fi
  grep -E "decision|resized|done|failed" "$state.log" | head -20
  # FIFO's segments only continue on one configuration; LAS's preempt and
  # resume, ONES's resize.
  [ $policy = fifo ] || $check replay "$state" "$bin" "$mpiexec" "$work/$policy-by-hand"
done

if [ "$sanitized" != ON ]; then
echo "== ONES's resized job against PyTorch"
job=$("$python" - "$work/ones/state.json" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
def resized(j):
    configs = [s["config"] for s in j["segments"] if s["status"] == "done"]
    return any(a != b for a, b in zip(configs, configs[1:]))
print(next(j["spec"]["name"] for j in jobs if resized(j)))
PY
)
segments=$($check segments "$work/ones" "$job" "$work/ones-$job.json")
last=${segments##*,}
last=${last%%:*}
echo "$job: segments (last step:batch:lr) $segments on ranks" \
  $("$python" -c 'import json, sys
print(*[s["config"][0] for j in json.load(open(sys.argv[1]))["jobs"] if j["spec"]["name"] == sys.argv[2]
        for s in j["segments"] if s["status"] == "done"])' "$work/ones/state.json" "$job")
$python "$here/training_reference.py" train --model "$work/m${job#j}" --batch 8 --seq 32 \
  --steps "$last" --lr 2e-3 --min-lr 2e-3 --warmup 3 --decay-steps "$last" --clip 0.5 \
  --weight-decay 0.05 --beta2 0.99 --segments "$segments" --actual "$work/ones-$job.json" \
  --rtol 2e-3 | tail -3
fi

echo "== tp-sched killed just after a resize"
# As above: j0 and j1 share the pool, j2 and j3 arrive, and ONES resizes
# as measurements come in (each run so far; which resize depends on the
# measured speeds, so up to three attempts).
killed() { # STATE: runs ONES until its first resize and kills it there
  local state=$1
  "$bin/tp-sched" submit "$state" "$work/job0.json" "$work/job1.json" > /dev/null
  "$bin/tp-sched" run "$state" --policy ones "${flags[@]}" > "$state.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q "started" "$state.log" 2>/dev/null && break
    sleep 0.1
  done
  "$bin/tp-sched" submit "$state" "$work/job2.json" "$work/job3.json" > /dev/null
  for _ in $(seq 1200); do
    grep -q "resized" "$state.log" 2>/dev/null && break
    kill -0 $pid 2> /dev/null || break
    sleep 0.05
  done
  grep -q "resized" "$state.log"
}
for attempt in 1 2 3; do
  state=$work/killed-$attempt
  killed "$state" && break
  wait $pid || true
  echo "attempt $attempt: ONES made no resize" >&2
  [ $attempt -lt 3 ] || { cat "$state.log" >&2; exit 1; }
done
kill -9 $pid
wait $pid 2> /dev/null || true
grep "resized" "$state.log" | head -1
"$bin/tp-sched" run "$state" --policy ones "${flags[@]}" > "$state-restarted.log" 2>&1
grep -q "left by the last tp-sched" "$state-restarted.log" || {
  cat "$state-restarted.log" >&2; echo "scheduler: the restart found no segment to stop" >&2; exit 1; }
"$python" - "$state/state.json" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
interrupted = [(j["spec"]["name"], s["index"]) for j in jobs for s in j["segments"]
               if s["status"] == "interrupted"]
if not interrupted:
    sys.exit("scheduler: the killed scheduler's segment is not marked interrupted")
print(f"interrupted and resumed: {interrupted}")
PY
$check check "$state"
$check replay "$state" "$bin" "$mpiexec" "$work/killed-by-hand"

if [ "$sanitized" != ON ]; then
echo "== LAS preempting mid-segment"
# j0 with a target of 300 steps on one rank, j2 queued behind it; segments
# of 1000 steps, so only a stop ends one early.
state=$work/preempt
sed -e 's/"target_samples": 800/"target_samples": 2400/' \
  "$work/job0.json" > "$work/long0.json"
"$bin/tp-sched" submit "$state" "$work/long0.json" "$work/job2.json" > /dev/null
"$bin/tp-sched" run "$state" --policy las --las-thresholds=1 --ranks 1 \
  --cluster "$cluster" --segment-steps 1000 --interval 0.5 --mpirun "$mpiexec" \
  --mpirun-arg=--oversubscribe --mpirun-arg=--bind-to --mpirun-arg=none \
  > "$state.log" 2>&1 || { cat "$state.log" >&2; exit 1; }
grep -E "stopping|started|done" "$state.log" | head -8
$check check "$state" --stopped
$check replay "$state" "$bin" "$mpiexec" "$work/preempt-by-hand"
fi
echo "scheduler: PASS"
