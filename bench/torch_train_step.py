"""PyTorch's training step of a HuggingFace GPT-2 config, timed the way
bench/gpu-train.sh times tp-run's: forward, backward, global-norm clipping
and AdamW on one batch per step, the median of the steps after the warm-up.

  torch_train_step.py --config CONFIG --batch B --seq S --steps N
      --mode eager|compile --precision f32|tf32|bf16 [--device cuda|cpu]

Prints one JSON line: tokens per second, the median step in ms, the peak
device memory torch allocated (bytes; 0 on the CPU) and the parameter count.
bf16 is autocast (bf16 matmuls, f32 master weights and optimizer state).
"""

import argparse
import json
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


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
    args = p.parse_args()

    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(0)
    config = GPT2Config.from_json_file(args.config)
    config.attn_implementation = "eager"
    model = GPT2LMHeadModel(config).to(device)
    params = sum(t.numel() for t in model.parameters())
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
                      "params": params, "mode": args.mode,
                      "precision": args.precision}))


if __name__ == "__main__":
    main()
