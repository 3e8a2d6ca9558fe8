#!/usr/bin/env bash
# Writes a seed corpus of valid inputs for one fuzz target, made with the
# project's own tools so the seeds always match the current formats.
#   make-seeds.sh plan|safetensors|tokens|tokenizer BUILD_DIR OUT_DIR
set -euo pipefail
kind=$1 build=$2 out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=$build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tiny GPT-2 and LLaMA: every op kind of training, in a few KB of plan.
cat > "$tmp/gpt2.json" <<'JSON'
{"model_type": "gpt2", "vocab_size": 256, "n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 8}
JSON
cat > "$tmp/llama.json" <<'JSON'
{"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
 "max_position_embeddings": 8, "rope_theta": 500000.0, "rms_norm_eps": 1e-3}
JSON
printf 'The quick brown fox jumps over the lazy dog, 0123456789.\n' > "$tmp/text.txt"

case "$kind" in
plan)
  for model in gpt2 llama; do
    "$bin/tpc-import" "$tmp/$model.json" --batch 1 --seq 4 -o "$tmp/$model.mlir"
    "$bin/tpc-opt" "$tmp/$model.mlir" --tp-pipeline -o "$out/$model-train.tpplan"
    "$bin/tpc-opt" "$tmp/$model.mlir" --tp-pipeline="train=false" \
      -o "$out/$model-forward.tpplan"
    # Mixed precision: bf16 activations, Convert steps (plan 1.10).
    "$bin/tpc-opt" "$tmp/$model.mlir" --tp-pipeline="precision=bf16" \
      -o "$out/$model-bf16.tpplan"
  done
  ;;
safetensors)
  # Weights as tp-run dumps them (f32), and a checkpoint (params + moments).
  "$bin/tpc-import" "$tmp/gpt2.json" --batch 1 --seq 4 -o "$tmp/gpt2.mlir"
  "$bin/tpc-opt" "$tmp/gpt2.mlir" --tp-pipeline -o "$tmp/gpt2.tpplan"
  "$bin/tpc-tokenize" "$tmp/text.txt" -o "$tmp/text.tokens" > /dev/null
  "$bin/tp-run" "$tmp/gpt2.tpplan" --data "$tmp/text.tokens" \
    --dump "$out/dump.safetensors" > /dev/null
  "$bin/tp-run" "$tmp/gpt2.tpplan" --data "$tmp/text.tokens" --steps 1 \
    --checkpoint-dir "$tmp/ckpt" --checkpoint-every 1 > /dev/null
  find "$tmp/ckpt" -name '*.safetensors' | head -n 2 |
    while read -r f; do cp "$f" "$out/ckpt-$(basename "$f")"; done
  ;;
tokens)
  "$bin/tpc-tokenize" "$tmp/text.txt" -o "$out/bytes.tokens" > /dev/null
  "$bin/tpc-tokenize" "$tmp/text.txt" --vocab "$src/test/runtime/Inputs/bpe/vocab.json" \
    --merges "$src/test/runtime/Inputs/bpe/merges.txt" -o "$out/bpe.tokens" > /dev/null
  ;;
tokenizer)
  # vocab.json \0 merges.txt \0 text, as TokenizerFuzzer.cpp splits them.
  bpe=$src/test/runtime/Inputs/bpe
  { cat "$bpe/vocab.json"; printf '\0'; cat "$bpe/merges.txt"; printf '\0'
    cat "$tmp/text.txt"; } > "$out/fixture"
  { cat "$bpe/vocab.json"; printf '\0#version: 0.2\n\0'; printf 'caf\xc3\xa9 \xff'; } \
    > "$out/no-merges"
  ;;
*)
  echo "make-seeds.sh: unknown kind '$kind'" >&2
  exit 1
  ;;
esac
