"""PyTorch's training step of a HuggingFace GPT-2 or LLaMA config, timed the
way bench/gpu-train.sh times tp-run's: forward, backward, global-norm
clipping and AdamW on one batch per step, the median of the steps after the
warm-up.

  torch_train_step.py --config CONFIG --batch B --seq S --steps N
      --mode eager|compile --precision f32|tf32|bf16 [--device cuda|cpu]
      [--attention sdpa|eager]

Prints one JSON line: tokens per second, the median step in ms, the peak
device memory torch allocated (bytes; 0 on the CPU), the parameter count and
the model FLOPs per token (model_flops_per_token). bf16 is autocast (bf16
matmuls, f32 master weights and optimizer state). Attention is
HuggingFace's default, PyTorch's scaled_dot_product_attention (flash
attention on a GPU in bf16), unless --attention eager.
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def model_flops_per_token(model, config, seq):
    """6 N + 12 L s h: N the parameters that multiply (the input embedding
    and GPT-2's positions are lookups, unless tied to the head), and the
    attention scores and context products of L layers over s positions."""
    lookups = 0
    embeddings = model.get_input_embeddings().weight
    if model.get_output_embeddings().weight is not embeddings:
        lookups += embeddings.numel()
    if getattr(model, "transformer", None) is not None and hasattr(
            model.transformer, "wpe"):
        lookups += model.transformer.wpe.weight.numel()
    n = sum(t.numel() for t in model.parameters()) - lookups
    layers = config.num_hidden_layers
    hidden = config.hidden_size
    return 6 * n + 12 * layers * seq * hidden


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="f32")
    p.add_argument("--device", default="cuda")
    p.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa")
    args = p.parse_args()

    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(0)
    with open(args.config) as f:
        fields = json.load(f)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation=args.attention).to(device)
    params = sum(t.numel() for t in model.parameters())
    flops = model_flops_per_token(model, config, args.seq)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

    def step(tokens):
        with torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    if args.mode == "compile":
        step = torch.compile(step)
    generator = torch.Generator().manual_seed(1)
    times = []
    for i in range(args.warmup + args.steps):
        tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq),
                               generator=generator).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step(tokens)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    print(json.dumps({"tokens_per_second": args.batch * args.seq / median,
                      "step_ms": median * 1e3, "peak_bytes": peak,
                      "params": params, "model_flops_per_token": flops,
                      "mode": args.mode, "precision": args.precision,
                      "attention": args.attention,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
