#!/usr/bin/env bash
# Generation speed, GPT-2-small shape (vocabulary 50304 so that 2 ranks
# split it), random weights: a PROMPT-token prompt continued by NEW greedy
# tokens. tp-run --generate with the plan's @prefill (PROMPT tokens, one
# chunk) and @decode over KV caches of PROMPT + NEW positions (tpc-import
# --kv-cache), batch 1, on 1 rank with 2 threads and on 2 ranks (1D) with 1
# thread each; then @forward over the whole prefix each token (--no-kv-cache,
# a plan of seq PROMPT + NEW) on 1 rank. Against HuggingFace's GPT2LMHeadModel
# in PyTorch on the same machine (2 threads), decoding with its KV cache
# (past_key_values, what generate() does) and without it (the whole prefix
# each token). Prints the prefill time (the first token) and the decode rate
# (median of the later tokens).
#
# With BATCH > 1: BATCH different prompts of PROMPT byte tokens at once
# (tp-run --prompts, a plan of that batch) on 1 and 2 ranks, against
# PyTorch's KV-cache decoding of the same batch; the decode rate counts the
# tokens of every sequence.
#
#   bench/generate.sh [PROMPT] [NEW] [BATCH]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
prompt=${1:-64} new=${2:-32} sequences=${3:-1}
work=$build/bench/generate
python=${PYTHON:-$root/.venv/bin/python}
batch=1
source "$root/bench/gpt2-small-setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "prompt $prompt, $new new tokens, $sequences sequence(s)"

config=$work/config.json
padded_gpt2_small_config "$config"
"$build/bin/tpc-import" "$config" --batch "$sequences" --seq "$prompt" \
  --kv-cache $((prompt + new)) -o "$work/model.mlir"
"$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="train=false" -o "$work/one.tpplan"
"$build/bin/tpc-opt" "$work/model.mlir" --tp-pipeline="train=false mode=1d grid=2" \
  -o "$work/two.tpplan" 2> /dev/null
"$build/bin/tpc-import" "$config" --batch 1 --seq $((prompt + new)) -o "$work/whole.mlir"
"$build/bin/tpc-opt" "$work/whole.mlir" --tp-pipeline="train=false" -o "$work/whole.tpplan"
ids=$(python3 -c "print(','.join(str((7 * i + 11) % 50000) for i in range($prompt)))")
# BATCH > 1: lines of PROMPT printable bytes (byte ids), one per sequence.
python3 -c "
import sys
n, length = int(sys.argv[1]), int(sys.argv[2])
for row in range(n):
    print(''.join(chr(33 + (7 * i + 13 * row) % 94) for i in range(length)))" \
  "$sequences" "$prompt" > "$work/prompts.txt"
prompt_flags=(--prompt-ids "$ids")
[ "$sequences" = 1 ] || prompt_flags=(--prompts "$work/prompts.txt")

summary() { # METRICS LABEL
  python3 - "$1" "$2" "$sequences" <<'PY'
import json, statistics, sys
m = json.load(open(sys.argv[1]))
steps = m["step_seconds"]
rate = int(sys.argv[3]) / statistics.median(steps[1:])
print(f"{sys.argv[2]:34} prefill {steps[0] * 1e3:8.1f} ms   decode {rate:7.2f} tokens/s")
PY
}
mpirun -np 1 --bind-to none -x OPENBLAS_CORETYPE "$build/bin/tp-run" "$work/one.tpplan" \
  --threads 2 --generate "$new" --ignore-eos "${prompt_flags[@]}" --metrics "$work/one.json" > /dev/null 2>&1
summary "$work/one.json" "tpc KV cache, 1 rank x 2 threads"
mpirun -np 2 --bind-to core --map-by core -x OPENBLAS_CORETYPE -x OPENBLAS_NUM_THREADS=1 \
  "$build/bin/tp-run" "$work/two.tpplan" --threads 1 --generate "$new" --ignore-eos \
  "${prompt_flags[@]}" --metrics "$work/two.json" > /dev/null 2>&1
summary "$work/two.json" "tpc KV cache, 1D 2 ranks x 1 thr"
if [ "$sequences" = 1 ]; then
  mpirun -np 1 --bind-to none -x OPENBLAS_CORETYPE "$build/bin/tp-run" "$work/whole.tpplan" \
    --threads 2 --generate "$new" --ignore-eos --prompt-ids "$ids" --no-kv-cache \
    --metrics "$work/whole.json" > /dev/null 2>&1
  summary "$work/whole.json" "tpc whole prefix, 1 rank x 2 thr"
fi

"$python" - "$config" "$ids" "$new" "$work/prompts.txt" "$sequences" <<'PY'
import json, statistics, sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.set_num_threads(2)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config.from_json_file(sys.argv[1])).eval()
sequences = int(sys.argv[5])
if sequences == 1:
    prompt = torch.tensor([[int(t) for t in sys.argv[2].split(",")]])
else:
    prompt = torch.tensor([list(line.encode()) for line in open(sys.argv[4]).read().splitlines()])
new = int(sys.argv[3])
with torch.no_grad():
    for cache in (True, False) if sequences == 1 else (True,):
        ids, past, steps = prompt, None, []
        for _ in range(new):
            start = time.perf_counter()
            out = model(input_ids=ids if past is None or not cache else ids[:, -1:],
                        past_key_values=past if cache else None, use_cache=cache)
            past = out.past_key_values if cache else None
            ids = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            steps.append(time.perf_counter() - start)
        label = "PyTorch, KV cache" if cache else "PyTorch, whole prefix"
        print(f"{label:34} prefill {steps[0] * 1e3:8.1f} ms   decode {sequences / statistics.median(steps[1:]):7.2f} tokens/s")
PY
