#!/usr/bin/env bash
# Text generation (tp-run --generate) for a small GPT-2 or LLaMA model:
#  1. greedy: 12 tokens after a 5-token prompt equal HuggingFace's model
#     decoding greedily (float64) on the same weights, token for token, on
#     one rank, 1D over 2 ranks and 2D 2x2;
#  2. sampling (temperature, top-k, top-p): a seed gives one sequence on any
#     grid, another seed another one, every id in the vocabulary;
#  3. the progress of a run past the plan's sequence (its last seq tokens,
#     as nanoGPT crops) and the one-line errors.
#
#   generation.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama
set -euo pipefail
build=$1 python=$2 work=$3 model=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
ref="$python $here/reference.py"
source "$here/small-model.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1)

rm -rf "$work" && mkdir -p "$work"
batch=4 seq=24
small_model "$work" "$model" 41 $batch $seq 200
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq -o "$work/model.mlir"
prompt=$("$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import reference
print(",".join(str(t) for t in reference.read_tokens(sys.argv[2])[:5]))' "$here" "$work/tokens.tokens")

generate() { # NAME RANKS PLAN FLAGS...: writes NAME.json
  local name=$1 ranks=$2 plan=$3
  shift 3
  "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$plan" --weights "$work/model.safetensors" \
    --prompt-ids "$prompt" --metrics "$work/$name.json" "$@" > "$work/$name.log" 2>&1
}
ids() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["generated_ids"])' "$1"; }

echo "== greedy against HuggingFace"
"$python" - "$work" "$prompt" > "$work/hf.txt" <<'PY'
import sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float64,
                                             attn_implementation="eager").eval()
# Greedy decoding as generate(do_sample=False) does it, by hand: generate()
# itself imports torch.distributed pieces that fail on Debian's torch 1.13
# under Python 3.11.
ids = [int(t) for t in sys.argv[2].split(",")]
prompt = len(ids)
with torch.no_grad():
    for _ in range(12):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
        ids.append(int(torch.argmax(logits[0, -1])))
print(ids[prompt:])
PY
for scheme in "one:1:" "1d2:2:mode=1d grid=2" "2d:4:mode=2d grid=2x2"; do
  IFS=: read -r name ranks options <<< "$scheme"
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="$options" -o "$work/$name.tpplan" 2> /dev/null
  generate "greedy-$name" "$ranks" "$work/$name.tpplan" --generate 12
  if [ "$(ids "$work/greedy-$name.json")" != "$(cat "$work/hf.txt")" ]; then
    echo "generation: $name greedy $(ids "$work/greedy-$name.json") != HF $(cat "$work/hf.txt")" >&2
    exit 1
  fi
  echo "$name: greedy equals HuggingFace: $(cat "$work/hf.txt")"
done

echo "== sampling"
sample=(--generate 16 --temperature 0.9 --top-k 40 --top-p 0.95)
generate sample-a 1 "$work/one.tpplan" "${sample[@]}" --seed 5
generate sample-b 2 "$work/1d2.tpplan" "${sample[@]}" --seed 5
generate sample-c 1 "$work/one.tpplan" "${sample[@]}" --seed 6
[ "$(ids "$work/sample-a.json")" = "$(ids "$work/sample-b.json")" ] ||
  { echo "generation: one seed gave two sequences" >&2; exit 1; }
[ "$(ids "$work/sample-a.json")" != "$(ids "$work/sample-c.json")" ] ||
  { echo "generation: two seeds gave one sequence" >&2; exit 1; }
"$python" - "$work/sample-a.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert len(m["generated_ids"]) == 16 and all(0 <= t < 96 for t in m["generated_ids"]), m
assert m["sampling"] == {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 5}, m["sampling"]
PY
echo "sampling: one seed, one sequence on 1 and 2 ranks; another seed, another"

echo "== past the plan's sequence, errors"
generate long 1 "$work/one.tpplan" --generate 40
[ "$("$python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["generated_ids"]))' "$work/long.json")" = 40 ]
check_error() { # EXPECTED FLAGS...
  local expected=$1
  shift
  if "$bin/tp-run" "$work/one.tpplan" "$@" > "$work/err.log" 2>&1; then
    echo "generation: expected an error for $*" >&2; exit 1
  fi
  grep -qF -- "$expected" "$work/err.log" ||
    { echo "generation: '$expected' not in: $(cat "$work/err.log")" >&2; exit 1; }
  [ "$(wc -l < "$work/err.log")" -eq 1 ]
}
check_error "--generate needs one of --prompt TEXT and --prompt-ids IDS" --generate 3
check_error "--prompt-ids: 'x' is not a token id" --generate 3 --prompt-ids 1,x
check_error "the prompt: token 1 has id 500, outside the vocabulary of 96" --generate 3 --prompt-ids 1,500
check_error "--generate runs @forward on its prompt; it does not combine with --steps" --generate 3 --prompt a --steps 2
check_error "--prompt, --prompt-ids, --tokenizer and --sentencepiece need --generate N" --prompt a --data "$work/tokens.tokens"
echo "past the sequence: 40 tokens; errors: one line each"
