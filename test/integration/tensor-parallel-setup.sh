# Shared set-up of tensor-parallel-training.sh and tensor-parallel-schemes.sh,
# sourced after they set build, python, work, model, batch, seq, steps and lr:
# checks the Python, makes WORK_DIR, tokenizes the bundled text, imports the
# model (config: test/integration/Inputs/tp-MODEL.json) for batch x seq, and
# defines train RANKS PLAN OUT [tp-run flags...] (data: the token file, the
# bundled text unless set).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
check="$python $here/tensor_parallel_check.py"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -x "$python" ]; then
  echo "$(basename "$0" .sh): no Python at $python; run tools/setup-venv.sh" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
config=$here/Inputs/tp-$model.json
# AdamW moves GPT-2's key biases (zero gradient) by at most about lr a step.
keybias="--key-bias-bound $(awk -v lr=$lr -v s=$steps 'BEGIN { print 2 * lr * s }')"
"$bin/tpc-tokenize" "$here/../tp-run/Inputs/text.txt" -o "$work/text.tokens" > /dev/null
"$bin/tpc-import" "$config" --batch $batch --seq $seq -o "$work/model.mlir"
train() { # RANKS PLAN OUT [tp-run flags...]
  local ranks=$1 plan=$2 out=$3
  shift 3
  timeout 120 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" "$plan" \
    --data "${data:-$work/text.tokens}" --lr $lr --warmup 0 --decay-steps $steps \
    --metrics "$out.json" "$@" > "$out.log"
}
