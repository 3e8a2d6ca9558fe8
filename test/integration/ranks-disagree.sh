#!/usr/bin/env bash
# Ranks given different plans, data or options must fail fast with one line
# each, never deadlock in a collective: tp-run compares every option the
# parser knows (its value, or for paths whether it is given) before anything
# a rank may do alone, then checksums of the files. mpirun's MPMD form
# ("-np 1 A : -np 1 B") gives each rank its own command line.
#
#   ranks-disagree.sh BUILD_DIR MPIEXEC WORK_DIR
set -euo pipefail
build=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
inputs=$here/../tp-run/Inputs
bin=$build/bin
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_base_warn_component_unused=0

rm -rf "$work" && mkdir -p "$work"
"$bin/tpc-tokenize" "$inputs/text.txt" -o "$work/a.tokens" >/dev/null
"$bin/tpc-tokenize" "$inputs/text.txt" "$inputs/text.txt" -o "$work/b.tokens" >/dev/null
for seq in 8 16; do
  "$bin/tpc-import" "$inputs/gpt2-bytes.json" --batch 2 --seq $seq -o "$work/s$seq.mlir"
  "$bin/tpc-opt" "$work/s$seq.mlir" --tp-pipeline="mode=1d grid=2" \
    -o "$work/s$seq.tpplan" 2>/dev/null
done

# expect NAME WHAT RANK0-ARGS -- RANK1-ARGS (WHAT: the message after
# "the ranks were given different ")
expect() {
  local name=$1 what=$2
  shift 2
  local first=() second=()
  while [ "$1" != "--" ]; do first+=("$1"); shift; done
  shift
  second=("$@")
  local status=0
  timeout 60 "$mpiexec" --oversubscribe -np 1 "$bin/tp-run" "${first[@]}" : \
    -np 1 "$bin/tp-run" "${second[@]}" > "$work/$name.txt" 2>&1 || status=$?
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
    cat "$work/$name.txt"
    echo "ranks-disagree: $name: exit status $status (0: ran anyway, 124: hung)" >&2
    exit 1
  fi
  for rank in 0 1; do
    if ! grep -qxF "tp-run: error: rank $rank: the ranks were given different $what" \
        "$work/$name.txt"; then
      cat "$work/$name.txt"
      echo "ranks-disagree: $name: rank $rank did not report different $what" >&2
      exit 1
    fi
  done
  echo "ranks-disagree: $name: exit status $status, both ranks named the $what"
}

files="; every rank must run the same command on the same files"
option() { # the message for option $1 ($2: " (given on some ranks only)")
  echo "options: $1${2:-}; every rank must run the same command"
}
expect data "token data$files" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 -- \
  "$work/s8.tpplan" --data "$work/b.tokens" --steps 2
expect plans "plan files$files" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 -- \
  "$work/s16.tpplan" --data "$work/a.tokens" --steps 2
expect steps "$(option --steps)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 3
expect lr "$(option --lr)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --lr 1e-3 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --lr 2e-3
expect slow "$(option --slow)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --slow 1:2 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --slow 1:3
expect speeds "$(option --rank-speeds)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --rank-speeds 1,0.5 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --rank-speeds 1,0.6
expect gain "$(option --rebalance-min-gain)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --rebalance-min-gain 0.1 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --rebalance-min-gain 0.2

expect eval "$(option --eval-every)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --eval-every 1 --eval-data "$work/a.tokens" --eval-tokens 16 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --eval-every 2 --eval-data "$work/a.tokens" --eval-tokens 16
expect heldout "held-out token data$files" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --eval-every 1 --eval-data "$work/a.tokens" --eval-tokens 16 -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --eval-every 1 --eval-data "$work/b.tokens" --eval-tokens 16
expect seed "$(option --seed)" \
  "$work/s8.tpplan" --generate 2 --prompt ab --temperature 1 --seed 1 -- \
  "$work/s8.tpplan" --generate 2 --prompt ab --temperature 1 --seed 2

# One rank on the CPU, the other on a device the host cannot address: they
# would reach different collectives (a GPU's connect) and must not start.
expect device "$(option --device)" \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --device cpu -- \
  "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 --device staged-cpu

# Options only rank 0 acts on (outputs, printing the plan) are agreed too:
# given on one rank alone, the other would wait in a collective for ever.
for output in "--export $work/hf" "--metrics $work/m.json" \
  "--checkpoint-dir $work/ckpt" "--plot $work/loss.svg"; do
  flag=${output%% *}
  expect "output${flag}" "$(option "$flag" " (given on some ranks only)")" \
    "$work/s8.tpplan" --data "$work/a.tokens" --steps 2 $output -- \
    "$work/s8.tpplan" --data "$work/a.tokens" --steps 2
done
for output in "--dump $work/d.safetensors" "--dump-grads $work/g.safetensors"; do
  flag=${output%% *}
  expect "output${flag}" "$(option "$flag" " (given on some ranks only)")" \
    "$work/s8.tpplan" --data "$work/a.tokens" $output -- \
    "$work/s8.tpplan" --data "$work/a.tokens"
done
expect print-plan "$(option "the subcommand")" \
  "$work/s8.tpplan" --print-plan -- \
  "$work/s8.tpplan" --data "$work/a.tokens"
# Paths may differ where contents are compared: the same tokens under
# another name train.
cp "$work/a.tokens" "$work/a-copy.tokens"
timeout 60 "$mpiexec" --oversubscribe -np 1 "$bin/tp-run" "$work/s8.tpplan" \
  --data "$work/a.tokens" --steps 2 --threads 1 : -np 1 "$bin/tp-run" \
  "$work/s8.tpplan" --data "$work/a-copy.tokens" --steps 2 | grep -q "step 2/2"

# The same command on both ranks still trains.
timeout 60 "$mpiexec" --oversubscribe -np 2 "$bin/tp-run" "$work/s8.tpplan" \
  --data "$work/a.tokens" --steps 2 | grep -q "step 2/2"
echo "ranks-disagree: PASS"
