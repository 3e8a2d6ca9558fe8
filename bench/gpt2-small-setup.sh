# Sourced by the GPT-2-small benchmarks (with root, build, batch and work
# set): picks OpenBLAS's kernels, builds tpc, imports the model at batch
# $batch and sequence 256 into $work/model.mlir, prints the machine, and
# defines padded_gpt2_small_config.

mkdir -p "$work"
# OpenBLAS 0.3.21 does not recognise recent AMD cores and falls back to its
# AVX2 kernels; on AVX-512 machines its SkylakeX kernels are twice as fast.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi

"$root/tools/build.sh" >/dev/null
"$build/bin/tpc-import" "$root/bench/gpt2-small/config.json" --batch "$batch" \
  --seq 256 -o "$work/model.mlir"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"

# padded_gpt2_small_config OUT: the config with the vocabulary padded to
# 50304 (a multiple of 128, as Megatron-LM's --make-vocab-size-divisible-by
# and nanoGPT do): 50257 rows do not split evenly over 2 ranks.
padded_gpt2_small_config() {
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["vocab_size"] = 50304; json.dump(c, open(sys.argv[2], "w"))' \
    "$root/bench/gpt2-small/config.json" "$1"
}
