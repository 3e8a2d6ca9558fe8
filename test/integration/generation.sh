#!/usr/bin/env bash
# Text generation (tp-run --generate) for a small GPT-2 or LLaMA model:
#  1. greedy with the KV-cache programs (tpc-import --kv-cache): 10 tokens
#     after a 30-token prompt (two @prefill chunks of 24 and 6, then @decode)
#     equal HuggingFace's model decoding greedily (float64, the whole prefix
#     each step) on the same weights, token for token, on one rank, 1D over 2
#     ranks (with and without sequence parallelism), 2D 2x2, 2 data-parallel
#     replicas of 1D and 3D 2x2x2;
#  2. the KV-cache decode equals recomputing the whole prefix with @forward
#     (--no-kv-cache): 12 tokens after a 5-token prompt, both equal to
#     HuggingFace; without --ignore-eos a sample ends at the model's
#     eos_token_id, where HuggingFace's generate() ends;
#  3. parameters from a checkpoint (on another grid), an HF export or the
#     initialisation; the KV caches behind device-style memory (staged-cpu)
#     give the CPU's tokens and log-probabilities bit for bit;
#  4. sampling (temperature, top-k, top-p): a seed gives one sequence on any
#     grid, another seed another one, every id in the vocabulary; --samples
#     draws several at once, sample i as seed + i alone;
#  5. --prompts: prompts of different lengths at once, each sample equal to
#     its prompt alone, bit for bit (1 and 2 ranks, cached and not);
#  6. the progress of a run past the plan's sequence without a KV cache (its
#     last seq tokens, as nanoGPT crops), a prompt the caches cannot hold,
#     and the one-line errors.
# With DEVICE (cuda), 1 and 2 run on it (2 ranks sharing one GPU), log-
# probabilities within 1e-3 of HuggingFace's; it exits 77 (skipped) where
# tp-run cannot use the device.
#
#   generation.sh BUILD_DIR PYTHON WORK_DIR gpt2|llama [DEVICE]
set -euo pipefail
build=$1 python=$2 work=$3 model=$4 device=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$build/bin
source "$here/device-probe.sh"
on_device=()
tolerance=2e-4
if [ -n "$device" ]; then
  on_device=(--device "$device")
  tolerance=1e-3 # other summation orders than the CPU's
fi
ref="$python $here/reference.py"
source "$here/small-model.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1)

rm -rf "$work" && mkdir -p "$work"
batch=4 seq=24
small_model "$work" "$model" 41 $batch $seq 200
cache=40
"$bin/tpc-import" "$work/config.json" --batch $batch --seq $seq --kv-cache $cache \
  -o "$work/model.mlir"
first_tokens() { # COUNT: the data's first COUNT ids, comma-separated
  "$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import reference
print(",".join(str(t) for t in reference.read_tokens(sys.argv[2])[:int(sys.argv[3])]))' \
    "$here" "$work/tokens.tokens" "$1"
}
prompt=$(first_tokens 5) long_prompt=$(first_tokens 30)

# Runs draw every token asked for (--ignore-eos) unless EOS=stop: the
# sequence checks below want their full length.
generate() { # NAME RANKS PLAN FLAGS...: writes NAME.json (prompt: $prompt)
  local name=$1 ranks=$2 plan=$3 eos=(--ignore-eos)
  shift 3
  [ "${EOS:-}" != stop ] || eos=()
  "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$plan" --weights "$work/model.safetensors" \
    --prompt-ids "${PROMPT:-$prompt}" --metrics "$work/$name.json" "${on_device[@]}" \
    "${eos[@]}" "$@" > "$work/$name.log" 2>&1
}
ids() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["generated_ids"])' "$1"; }

hf_greedy() { # PROMPT COUNT [stop]: HF's greedy continuation, as JSON ids and
  # logprobs; with stop, ending at the config's eos_token_id as generate() does
  "$python" - "$work" "$1" "$2" "${3:-}" <<'PY'
import json, sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float64,
                                             attn_implementation="eager").eval()
# Greedy decoding as generate(do_sample=False) does it, by hand: generate()
# itself imports torch.distributed pieces that fail on Debian's torch 1.13
# under Python 3.11.
ids = [int(t) for t in sys.argv[2].split(",")]
prompt = len(ids)
logprobs = []
with torch.no_grad():
    for _ in range(int(sys.argv[3])):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
        ids.append(int(torch.argmax(logits[0, -1])))
        logprobs.append(float(torch.log_softmax(logits[0, -1], -1)[ids[-1]]))
        if sys.argv[4] == "stop" and ids[-1] == model.config.eos_token_id:
            break
print(json.dumps({"ids": ids[prompt:], "logprobs": logprobs}))
PY
}
# The same tokens, each with the same log-probability (f32 against f64):
# a cache read at a wrong position changes the second even where a small
# random model keeps repeating one token.
expect_greedy() { # NAME WANT_JSON WHAT
  "$python" - "$work/$1.json" "$2" "$3" "$tolerance" <<'PY' || exit 1
import json, sys
got, want = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
if got["generated_ids"] != want["ids"]:
    sys.exit(f"generation: {sys.argv[1]} {got['generated_ids']} != {sys.argv[3]} {want['ids']}")
worst = max(abs(a - b) for a, b in zip(got["generated_logprobs"], want["logprobs"]))
if worst > float(sys.argv[4]):
    sys.exit(f"generation: {sys.argv[1]} log-probabilities differ from {sys.argv[3]}'s by {worst:.2e}")
PY
}

echo "== greedy with KV caches against HuggingFace"
hf_long=$(hf_greedy "$long_prompt" 10)
for scheme in "one:1:" "1d2:2:mode=1d grid=2" "sp2:2:mode=1d grid=2 seq-parallel=true" \
              "2d:4:mode=2d grid=2x2" "dp:4:mode=1d grid=2 dp=2" "3d:8:mode=3d grid=2x2x2"; do
  IFS=: read -r name ranks options <<< "$scheme"
  "$bin/tpc-opt" "$work/model.mlir" --tp-pipeline="$options" -o "$work/$name.tpplan" 2> /dev/null
  PROMPT=$long_prompt generate "greedy-$name" "$ranks" "$work/$name.tpplan" --generate 10
  expect_greedy "greedy-$name" "$hf_long" HuggingFace
  grep -q "KV caches" "$work/greedy-$name.log" ||
    { echo "generation: $name did not use the KV caches" >&2; exit 1; }
  echo "$name: KV-cache greedy equals HuggingFace (ids and log-probabilities)"
done

echo "== the KV-cache decode equals recomputing the prefix"
hf_short=$(hf_greedy "$prompt" 12)
generate cached 1 "$work/one.tpplan" --generate 12
generate recomputed 1 "$work/one.tpplan" --generate 12 --no-kv-cache
expect_greedy cached "$hf_short" HuggingFace
expect_greedy recomputed "$hf_short" HuggingFace
grep -q "the whole context each step" "$work/recomputed.log"
echo "5-token prompt: KV caches, the whole prefix and HuggingFace agree"

echo "== ending at the model's end-of-sequence token"
# The GPT-2 model's eos_token_id (95) is its first greedy token after this
# prompt: generation stops there, as generate() does; the LLaMA model's (2)
# does not come, and all 12 tokens are drawn.
hf_eos=$(hf_greedy "$prompt" 12 stop)
EOS=stop generate eos 1 "$work/one.tpplan" --generate 12
expect_greedy eos "$hf_eos" HuggingFace
"$python" - "$work/eos.json" "$model" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
want = ("eos", 1, [95]) if sys.argv[2] == "gpt2" else ("length", 12, [2])
got = (m["stop"], len(m["generated_ids"]), m["eos_token_ids"])
assert got == want, (got, want)
# It stopped drawing there too.
assert len(m["step_seconds"]) == want[1], m["step_seconds"]
PY
echo "end of sequence: $(ids "$work/eos.json") (stops where HuggingFace's generate() would)"
[ -z "$device" ] || exit 0 # the rest checks the host side

echo "== parameters from a checkpoint, an HF export and the initialisation"
# Two training steps write a checkpoint and an export; generating from the
# checkpoint on 1D over 2 ranks and from the export on one rank gives the
# same tokens; so does the deterministic initialisation on 1 and 2 ranks.
"${mpi[@]}" -np 1 "$bin/tp-run" "$work/one.tpplan" --data "$work/tokens.tokens" \
  --weights "$work/model.safetensors" --steps 2 --lr 1e-2 --checkpoint-dir "$work/ckpt" \
  --checkpoint-every 2 --export "$work/trained" > "$work/train.log" 2>&1
from() { # NAME RANKS PLAN FLAGS...
  local name=$1 ranks=$2 plan=$3
  shift 3
  "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$plan" --prompt-ids "$prompt" --generate 8 \
    --ignore-eos --metrics "$work/$name.json" "$@" > "$work/$name.log" 2>&1
}
from checkpoint 2 "$work/1d2.tpplan" --resume "$work/ckpt"
from export 1 "$work/one.tpplan" --weights "$work/trained/model.safetensors"
from init-one 1 "$work/one.tpplan"
from init-1d2 2 "$work/1d2.tpplan"
"$python" - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
for a, b in (("checkpoint", "export"), ("init-one", "init-1d2")):
    x, y = load(a), load(b)
    assert x["generated_ids"] == y["generated_ids"], (a, b, x["generated_ids"], y["generated_ids"])
    worst = max(abs(p - q) for p, q in zip(x["generated_logprobs"], y["generated_logprobs"]))
    assert worst <= 1e-5, (a, b, worst)
assert load("export")["generated_logprobs"] != load("cached")["generated_logprobs"][:8], "training changed nothing"
PY
echo "checkpoint (2 ranks) = export (1 rank); initialisation: 1 rank = 2 ranks"

echo "== KV caches in device-style memory"
# staged-cpu: the caches and inputs behind memory the host cannot address
# (the CUDA backend's discipline), bit for bit the CPU's.
PROMPT=$long_prompt generate staged 2 "$work/1d2.tpplan" --generate 10 --device staged-cpu
"$python" - "$work/staged.json" "$work/greedy-1d2.json" <<'PY'
import json, sys
staged, cpu = (json.load(open(f)) for f in sys.argv[1:3])
for key in ("generated_ids", "generated_logprobs"):
    assert staged[key] == cpu[key], (key, staged[key], cpu[key])
# The device holds what the metrics count: both programs' arenas and
# inputs, the parameters and the KV caches.
m = staged["memory"]
assert m["kv_cache_bytes"] == staged["kv_cache_bytes_per_rank"] > 0, m
assert m["device_peak_bytes"] == m["planned_peak_bytes"], m
PY
echo "staged-cpu: the same tokens and log-probabilities, bit for bit; device peak = planned peak"

echo "== sampling"
sample=(--generate 16 --temperature 0.9 --top-k 40 --top-p 0.95)
generate sample-a 1 "$work/one.tpplan" "${sample[@]}" --seed 5
generate sample-b 2 "$work/1d2.tpplan" "${sample[@]}" --seed 5
generate sample-c 1 "$work/one.tpplan" "${sample[@]}" --seed 6
[ "$(ids "$work/sample-a.json")" = "$(ids "$work/sample-b.json")" ] ||
  { echo "generation: one seed gave two sequences" >&2; exit 1; }
[ "$(ids "$work/sample-a.json")" != "$(ids "$work/sample-c.json")" ] ||
  { echo "generation: two seeds gave one sequence" >&2; exit 1; }
"$python" - "$work/sample-a.json" "$model" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert len(m["generated_ids"]) == 16 and all(0 <= t < 96 for t in m["generated_ids"]), m
assert m["sampling"] == {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 5}, m["sampling"]
# 2 layers x key and value x [batch 4, 4 (GPT-2) or 2 (LLaMA) key/value
# heads, 40 positions, 16 features] f32
assert m["program"] == "prefill+decode", m["program"]
heads = 4 if sys.argv[2] == "gpt2" else 2
assert m["kv_cache_bytes_per_rank"] == 2 * 2 * 4 * heads * 40 * 16 * 4, m["kv_cache_bytes_per_rank"]
PY
echo "sampling: one seed, one sequence on 1 and 2 ranks; another seed, another"
# Several samples at once, one per row of the batch: sample i is what seed
# + i alone draws, on one rank and on two.
generate samples 1 "$work/one.tpplan" "${sample[@]}" --seed 5 --samples 3
generate samples-1d2 2 "$work/1d2.tpplan" "${sample[@]}" --seed 5 --samples 3
"$python" - "$work" <<'PY'
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
for name in ("samples", "samples-1d2"):
    m = load(name)
    got = [s["generated_ids"] for s in m["samples"]]
    assert [s["seed"] for s in m["samples"]] == [5, 6, 7], m["samples"]
    assert got[0] == load("sample-a")["generated_ids"] == m["generated_ids"], (name, got[0])
    assert got[1] == load("sample-c")["generated_ids"], (name, got[1])
    assert len({tuple(g) for g in got}) == 3, (name, got)
PY
[ "$(grep -c -- '^---------------$' "$work/samples.log")" = 2 ] ||
  { echo "generation: 3 samples are not printed apart" >&2; exit 1; }
echo "samples: sample i equals seed + i alone, on 1 and 2 ranks"

echo "== prompts of different lengths at once"
# --prompts: one sample per line (bytes below the test vocabulary's 96),
# 30, 2 and 15 tokens: two @prefill chunks of 24, each sample's first token
# from the chunk with its prompt's end, then one @decode per token at each
# row's own position. Each sample equals its prompt alone, bit for bit, on 1
# and 2 ranks, with the KV caches and without.
printf 'THE QUICK BROWN FOX JUMPS OVER\nAB\nHELLO, WORLD 42\n' > "$work/prompts.txt"
for run in "1:one" "2:1d2"; do
  IFS=: read -r ranks plan <<< "$run"
  for cached in kv whole; do
    flags=(--generate 10 --ignore-eos)
    [ $cached = kv ] || flags+=(--no-kv-cache)
    "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$work/$plan.tpplan" --weights "$work/model.safetensors" \
      --prompts "$work/prompts.txt" --metrics "$work/prompts-$plan-$cached.json" \
      "${on_device[@]}" "${flags[@]}" > "$work/prompts-$plan-$cached.log" 2>&1
    mapfile -t lines < "$work/prompts.txt"
    for line in "${!lines[@]}"; do
      "${mpi[@]}" -np "$ranks" "$bin/tp-run" "$work/$plan.tpplan" --weights "$work/model.safetensors" \
        --prompt "${lines[$line]}" --metrics "$work/alone-$plan-$cached-$line.json" \
        "${on_device[@]}" "${flags[@]}" > /dev/null 2>&1
    done
    "$python" - "$work" "$plan-$cached" <<'PY'
import json, sys
work, name = sys.argv[1:]
m = json.load(open(f"{work}/prompts-{name}.json"))
assert [len(s["prompt_ids"]) for s in m["samples"]] == [30, 2, 15], m["samples"]
# The longest prompt, 30 tokens, takes two chunks of 24.
assert m.get("prefill_chunks", 2) == 2, m["prefill_chunks"]
for i, sample in enumerate(m["samples"]):
    alone = json.load(open(f"{work}/alone-{name}-{i}.json"))
    assert sample["prompt_ids"] == alone["prompt_ids"], (name, i)
    assert sample["generated_ids"] == alone["generated_ids"], (name, i, sample["generated_ids"], alone["generated_ids"])
    assert sample["generated_logprobs"] == alone["generated_logprobs"], (name, i)
PY
  done
done
echo "prompts: each of 3 samples equals its prompt alone, bit for bit (1 and 2 ranks, cached and whole prefix)"
# A prompt of exactly one chunk takes one @prefill run.
PROMPT=$(first_tokens $seq) generate one-chunk 1 "$work/one.tpplan" --generate 3
"$python" -c 'import json, sys; m = json.load(open(sys.argv[1]))
assert m["prefill_chunks"] == 1, m["prefill_chunks"]' "$work/one-chunk.json"

echo "== past the plan's sequence, errors"
generate long 1 "$work/one.tpplan" --generate 40 --no-kv-cache
[ "$("$python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["generated_ids"]))' "$work/long.json")" = 40 ]
# Past @forward's positions each step sees the last seq tokens only: the
# progress log says from which token, once.
[ "$(grep -c "a context is longer than @forward's $seq positions" "$work/long.log")" = 1 ] ||
  { cat "$work/long.log"; echo "generation: no note of the cropped context" >&2; exit 1; }
# A 5-token prompt: the context passes seq tokens at token seq - 5 + 2.
grep -q "^note: from token $((seq - 5 + 2)) on," "$work/long.log" ||
  { cat "$work/long.log"; echo "generation: the note names the wrong token" >&2; exit 1; }
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
check_error "tp-run generate needs one of --prompt TEXT, --prompt-ids IDS and --prompts FILE" --generate 3
check_error "--prompt-ids: 'x' is not a token id" --generate 3 --prompt-ids 1,x
check_error "the prompt: token 1 has id 500, outside the vocabulary of 96" --generate 3 --prompt-ids 1,500
check_error "tp-run generate has no --steps (tp-run train takes it; the flat form ran tp-run generate)" --generate 3 --prompt a --steps 2
check_error "tp-run eval has no --prompt (tp-run generate takes it; the flat form ran tp-run eval)" --prompt a --data "$work/tokens.tokens"
printf 'AB\n\nCD\n' > "$work/empty-line.txt"
check_error "--prompts $work/empty-line.txt: line 2 is empty (one prompt per line)" --generate 3 --prompts "$work/empty-line.txt"
printf 'A\nB\nC\nD\nE\n' > "$work/five.txt"
check_error "--prompts $work/five.txt: 5 prompts: the plan generates 4 sequences at once (tpc-import --batch)" --generate 3 --prompts "$work/five.txt"
check_error "--prompts makes one sample of each line; it does not combine with --samples" --generate 3 --prompts "$work/five.txt" --samples 2
check_error "--prompts /dev/zero: is not a regular file (a prompts file is read from one)" --generate 3 --prompts /dev/zero
check_error "--samples 5: the plan generates 4 sequences at once (tpc-import --batch)" --generate 3 --prompt-ids "$prompt" --samples 5
check_error "the prompt (5 tokens) and 37 new tokens need 41 positions, but the plan's KV caches hold 40 (tpc-import --kv-cache)" --generate 37 --prompt-ids "$prompt"
check_error "--program decode: a generation program (it reads positions and KV caches); run it with tp-run generate" --program decode --data "$work/tokens.tokens"
echo "past the sequence: 40 tokens; errors: one line each"
