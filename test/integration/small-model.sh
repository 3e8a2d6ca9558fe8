# Sourced by the integration tests that check a small GPT-2 or LLaMA (GQA)
# against PyTorch: `small_model` writes config.json, model.safetensors and
# tokens.tokens with reference.py make-model (run by $ref). Non-default norm
# epsilons and rope_theta, so that a field the importer ignored shows.
small_model() { # WORK gpt2|llama SEED BATCH SEQ TOKENS (LLaMA takes SEED + 1)
  local work=$1 model=$2 seed=$3 batch=$4 seq=$5 tokens=$6
  case "$model" in
    gpt2)
      $ref make-model --model-type gpt2 --out "$work" --seed "$seed" \
        --batch "$batch" --seq "$seq" --layers 2 --hidden 64 --heads 4 \
        --vocab 96 --tokens "$tokens" --norm-eps 2e-3 ;;
    llama)
      $ref make-model --model-type llama --out "$work" --seed $((seed + 1)) \
        --batch "$batch" --seq "$seq" --layers 2 --hidden 64 --heads 4 \
        --kv-heads 2 --intermediate 160 --vocab 96 --no-tie --tokens "$tokens" \
        --rope-theta 500000 --norm-eps 1e-4 ;;
    *) echo "unknown model '$model'" >&2; return 2 ;;
  esac
}
