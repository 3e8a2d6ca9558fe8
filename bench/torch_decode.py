"""HuggingFace generate()'s greedy decoding of a random-weight model, timed
the way bench/gpu-decode.sh times tp-run --generate: batch 1, a PROMPT-token
prompt, NEW tokens with the KV cache. The prefill is a one-token generate;
the decode rate is (NEW - 1) tokens over the difference between a NEW-token
and a one-token generate (medians of RUNS each, after a warm-up).

  torch_decode.py --config CONFIG --prompt N --new N --precision f32|bf16
      [--device cuda|cpu] [--runs 3]

Prints one JSON line: prefill_ms, decode_tokens_per_second.
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    p.add_argument("--device", default="cuda")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    with open(args.config) as f:
        fields = json.load(f)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = AutoModelForCausalLM.from_config(config).to(device).eval()
    if args.precision == "bf16":
        model = model.to(torch.bfloat16)
    prompt = torch.tensor([[(7 * i + 11) % config.vocab_size
                            for i in range(args.prompt)]], device=device)

    def generate(new):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, use_cache=True,
                           pad_token_id=0, attention_mask=torch.ones_like(prompt))
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    generate(2)  # warm-up
    one = statistics.median(generate(1) for _ in range(args.runs))
    many = statistics.median(generate(args.new) for _ in range(args.runs))
    print(json.dumps({
        "prefill_ms": one * 1e3,
        "decode_tokens_per_second": (args.new - 1) / max(many - one, 1e-9),
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
