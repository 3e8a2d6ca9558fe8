# Shared set-up of the tensor-parallel, data-parallel, rebalancing and device tests,
# sourced after they set build, python, work, model, batch, seq, steps and lr:
# checks the Python, makes WORK_DIR, tokenizes the bundled text, imports the
# model (config: test/integration/Inputs/tp-MODEL.json) for batch x seq, and
# defines train RANKS PLAN OUT [tp-run flags...] (data: the token file, the
# bundled text unless set), import_layer_models, train_plan and
# equals_one_rank.
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
# Imports the model and the model with one more layer, whose static reports
# differ by one layer's traffic, as $work/layer.mlir and $work/deeper.mlir for
# layer_batch x layer_seq tokens: more than the training runs, since with few
# tokens a weight gradient can be cheaper from gathered activations than
# reduce-scattered, and the engine takes that lower figure.
layer_batch=8 layer_seq=16
import_layer_models() {
  "$python" -c 'import json, sys; c = json.load(open(sys.argv[1]))
c["n_layer" if c["model_type"] == "gpt2" else "num_hidden_layers"] += 1
json.dump(c, open(sys.argv[2], "w"))' "$config" "$work/deeper.json"
  "$bin/tpc-import" "$config" --batch $layer_batch --seq $layer_seq -o "$work/layer.mlir"
  "$bin/tpc-import" "$work/deeper.json" --batch $layer_batch --seq $layer_seq \
    -o "$work/deeper.mlir"
}
# Writes the test model's config with LAYERS layers to OUT.
config_with_layers() { # LAYERS OUT
  "$python" -c 'import json, sys; c = json.load(open(sys.argv[1]))
c["n_layer" if c["model_type"] == "gpt2" else "num_hidden_layers"] = int(sys.argv[2])
json.dump(c, open(sys.argv[3], "w"))' "$config" "$1" "$2"
}
train() { # RANKS PLAN OUT [tp-run flags...]
  local ranks=$1 plan=$2 out=$3
  shift 3
  timeout 120 mpirun -np "$ranks" --oversubscribe "$bin/tp-run" "$plan" \
    --data "${data:-$work/text.tokens}" --lr $lr --warmup 0 --decay-steps $steps \
    --metrics "$out.json" ${train_flags:-} "$@" > "$out.log"
}
# Compiles MLIR into $work/NAME.tpplan for training with tp-pipeline OPTIONS.
train_plan() { # MLIR NAME OPTIONS
  "$bin/tpc-opt" "$1" -o "$work/$2.tpplan" --tp-pipeline="train $3" 2> /dev/null
}
# Compiles and trains NAME on RANKS and checks it against BASE, a one-rank
# run of the same steps: losses within 1e-5 and exported weights within
# 1e-4 (gradients summed over micro-batches or stages add up in another
# order than the whole batch's).
equals_one_rank() { # BASE NAME RANKS MLIR OPTIONS
  local base=$1 name=$2 ranks=$3
  train_plan "$4" "$name" "$5"
  train "$ranks" "$work/$name.tpplan" "$work/$name" --steps $steps \
    --export "$work/$name"
  $check losses "$work/$base.json" "$work/$name.json" --rel 1e-5
  $check weights "$work/$base/model.safetensors" \
    "$work/$name/model.safetensors" --rel 1e-4 $keybias
  echo "$name: equal to one rank"
}
