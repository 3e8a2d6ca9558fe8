#!/usr/bin/env python3
"""Gradient, optimizer and export references for tpc's training, from PyTorch autograd,
torch.optim.AdamW and HuggingFace's from_pretrained.

Run with the project venv (tools/setup-venv.sh) on a model directory made by
`reference.py make-model` (config.json, model.safetensors, tokens.tokens):

  training_reference.py gradients --model DIR --batch B --seq S --actual GRADS.safetensors
      every parameter's gradient of the mean cross-entropy on batch 0 (autograd, float64),
      against tp-run --dump-grads; per parameter rel = max|actual - ref| / max|ref|.
  training_reference.py train --model DIR --batch B --seq S --steps N --actual METRICS.json
      [--lr --min-lr --warmup --decay-steps --clip --weight-decay --beta1 --beta2 --eps]
      N steps of torch.optim.AdamW (weight decay on parameters of rank >= 2, global-norm clipping,
      linear warmup + cosine decay, tp-run's batch order) in float64, against the loss curve in
      tp-run's --metrics JSON; per step rel = |actual - ref| / |ref|. With --eval-fraction F
      --eval-every N --eval-batches K, the last F of the tokens are held out as tp-run holds them
      out (training uses the rest), and the mean loss over their first K windows after every N-th
      step and the last is checked against the metrics' eval_curve the same way. With
      --lazy-embedding NAME, that table gets the row-sparse AdamW of tp-pipeline embedding-cache:
      only the rows a batch uses move (moments and decay included).
  training_reference.py export --export DIR --tokens FILE --batch B --seq S --actual OUT.safetensors
      loads DIR (tp-run --export) with from_pretrained and checks its logits against the runtime's
      logits of the same weights (tp-run --dump), and that its weights are the exported bits.

Exit 1 when a tolerance is exceeded, 2 on usage or I/O errors.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402  (shares the token reader and the float64 LLaMA patch)
from reference import UsageError  # noqa: E402


def _load_model(path, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    if not os.path.isfile(os.path.join(path, "config.json")):
        raise UsageError(f"{path}: no config.json")
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager")
    return model.to(dtype)


def _batch(tokens, step, batch, seq):
    """tp-run's batch for a 1-based step: consecutive windows, wrapping around."""
    import torch

    per_step = batch * seq
    batches = (len(tokens) - 1) // per_step
    if batches < 1:
        raise UsageError(f"the token stream has {len(tokens)} tokens; one step needs {per_step + 1}")
    start = ((step - 1) % batches) * per_step
    window = torch.tensor(tokens[start : start + per_step + 1], dtype=torch.long)
    return window[:per_step].reshape(batch, seq), window[1:].reshape(batch, seq)


def _batch_at(tokens, position, batch, seq):
    """tp-run's batch that would begin at stream `position` (at 0 when it would run past the
    end), and where the next begins: batches follow one another across changes of batch size."""
    import torch

    per_step = batch * seq
    if per_step + 1 > len(tokens):
        raise UsageError(f"the token stream has {len(tokens)} tokens; one step needs {per_step + 1}")
    start = 0 if position + per_step + 1 > len(tokens) else position
    window = torch.tensor(tokens[start : start + per_step + 1], dtype=torch.long)
    return window[:per_step].reshape(batch, seq), window[1:].reshape(batch, seq), start + per_step


def _segments(text, steps, batch):
    """--segments LAST:BATCH:LR,...: steps up to LAST run at BATCH with the constant peak LR (a
    run that tp-sched resized, or the same by hand); by default one segment of --batch."""
    if not text:
        return [(steps, batch, None)]
    segments = []
    for part in text.split(","):
        fields = part.split(":")
        if len(fields) != 3:
            raise UsageError(f"--segments: '{part}' is not LAST:BATCH:LR")
        segments.append((int(fields[0]), int(fields[1]), float(fields[2])))
    lasts = [s[0] for s in segments]
    if lasts != sorted(set(lasts)) or lasts[-1] != steps:
        raise UsageError(f"--segments: last steps {lasts} must rise and end at --steps {steps}")
    return segments


def _loss(model, inputs, targets):
    import torch.nn.functional as F

    logits = model(input_ids=inputs, use_cache=False).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _model_type(path):
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)["model_type"]


def _rel(actual, ref):
    import numpy as np

    actual = np.asarray(actual, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(actual)):
        return math.inf
    scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-30)
    return float(np.max(np.abs(actual - ref))) / scale if ref.size else 0.0


def gradients(args):
    import torch

    torch.set_num_threads(1)
    tokens = reference.read_tokens(os.path.join(args.model, "tokens.tokens"))
    model = _load_model(args.model, torch.float64)
    inputs, targets = _batch(tokens, 1, args.batch, args.seq)
    with reference._exact_float64(_model_type(args.model)):
        loss = _loss(model, inputs, targets)
        loss.backward()
    actual = reference._load(args.actual, "actual")
    failures, worst = [], 0.0
    names = [n for n, _ in model.named_parameters()]
    missing = [n for n in names if n not in actual]
    if missing or "loss" not in actual:
        raise UsageError(f"{args.actual}: missing {', '.join((missing + ['loss'] if 'loss' not in actual else missing)[:5])}")
    for name, param in model.named_parameters():
        ref = param.grad.detach().numpy()
        if actual[name].shape != ref.shape:
            raise UsageError(f"{args.actual}: '{name}' has shape {list(actual[name].shape)}, torch {list(ref.shape)}")
        rel = _rel(actual[name], ref)
        worst = max(worst, rel)
        if rel > args.rtol:
            failures.append(f"{name} rel={rel:.3e}")
    loss_rel = _rel(actual["loss"], loss.detach().numpy())
    print(f"gradients: {len(names)} parameters, worst rel={worst:.3e}, loss rel={loss_rel:.3e} "
          f"(rtol {args.rtol:.0e})")
    if loss_rel > args.rtol:
        failures.append(f"loss rel={loss_rel:.3e}")
    if failures:
        print("gradients: FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    print("gradients: PASS")
    return 0


def _learning_rate(step, peak, min_lr, warmup, decay):
    """tp.lr_schedule, the same formula as cpu::learningRate."""
    if warmup > 0 and step <= warmup:
        return peak * step / warmup
    if decay <= warmup:
        return peak
    if step >= decay:
        return min_lr
    progress = (step - warmup) / (decay - warmup)
    return min_lr + (peak - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_adamw(params, args):
    """torch.optim.AdamW as tp-pipeline compiles it: weight decay on
    parameters of rank >= 2 only."""
    import torch

    params = list(params)
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def optimizer_step(optimizer, params, step, args):
    """Global-norm clipping over `params`, tp.lr_schedule's rate for the
    1-based `step`, then the AdamW step; returns the rate."""
    import torch

    if args.clip > 0:
        torch.nn.utils.clip_grad_norm_(params, args.clip)
    lr = _learning_rate(step, args.lr, args.min_lr, args.warmup, args.decay_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return lr


def lazy_adamw_rows(table, exp_avg, exp_avg_sq, rows, step, lr, args):
    """Lazy AdamW (TorchRec's row-wise Adam, Keras' LazyAdam) with decoupled
    decay, tp.adamw_rows' update: only `rows` of the table and its moments
    move, with the global step's bias corrections."""
    import torch

    with torch.no_grad():
        g = table.grad[rows]
        exp_avg[rows] = args.beta1 * exp_avg[rows] + (1 - args.beta1) * g
        exp_avg_sq[rows] = args.beta2 * exp_avg_sq[rows] + (1 - args.beta2) * g * g
        bc1, bc2 = 1 - args.beta1 ** step, 1 - args.beta2 ** step
        denom = exp_avg_sq[rows].sqrt() / math.sqrt(bc2) + args.eps
        table[rows] = table[rows] * (1 - lr * args.weight_decay) - (lr / bc1) * exp_avg[rows] / denom


def train(args):
    import torch

    torch.set_num_threads(1)
    with open(args.actual) as f:
        metrics = json.load(f)
    curve = {int(r["step"]): float(r["loss"]) for r in metrics.get("loss_curve", [])}
    if sorted(curve) != list(range(1, args.steps + 1)):
        raise UsageError(f"{args.actual}: loss_curve does not hold steps 1..{args.steps}")

    tokens = reference.read_tokens(os.path.join(args.model, "tokens.tokens"))
    held_out, eval_steps, evals = None, [], {}
    if args.eval_every:
        # tp-run's split: the last llround(F * N) tokens (half away from zero).
        held = int(math.floor(args.eval_fraction * len(tokens) + 0.5))
        tokens, held_out = tokens[: len(tokens) - held], tokens[len(tokens) - held :]
        eval_steps = [s for s in range(1, args.steps + 1) if s % args.eval_every == 0 or s == args.steps]
        evals = {int(r["step"]): float(r["loss"]) for r in metrics.get("eval_curve", [])}
        if sorted(evals) != eval_steps:
            raise UsageError(f"{args.actual}: eval_curve holds steps {sorted(evals)}, expected {eval_steps}")
    model = _load_model(args.model, torch.float64)
    # A cached embedding table (tp-pipeline embedding-cache) is updated
    # row-sparsely, below; every other parameter by torch.optim.AdamW.
    lazy = dict(model.named_parameters())[args.lazy_embedding] if args.lazy_embedding else None
    if args.lazy_embedding and lazy is None:
        raise UsageError(f"--lazy-embedding: the model has no parameter {args.lazy_embedding}")
    optimizer = make_adamw((p for p in model.parameters() if p is not lazy), args)
    if lazy is not None:
        lazy_m, lazy_v = torch.zeros_like(lazy), torch.zeros_like(lazy)
    failures, worst = [], 0.0
    segments, position = _segments(args.segments, args.steps, args.batch), 0
    with reference._exact_float64(_model_type(args.model)):
        for step in range(1, args.steps + 1):
            _, batch, peak = next(s for s in segments if step <= s[0])
            if peak is not None:
                args.lr = args.min_lr = peak
            inputs, targets, position = _batch_at(tokens, position, batch, args.seq)
            optimizer.zero_grad()
            loss = _loss(model, inputs, targets)
            loss.backward()
            lr = optimizer_step(optimizer, model.parameters(), step, args)
            if lazy is not None:
                # The rows the batch uses.
                lazy_adamw_rows(lazy, lazy_m, lazy_v, torch.unique(inputs), step, lr, args)
                lazy.grad = None
            ref = loss.item()
            rel = abs(curve[step] - ref) / max(abs(ref), 1e-30)
            worst = max(worst, rel)
            print(f"step {step:3d}: torch {ref:.8f} tpc {curve[step]:.8f} rel {rel:.2e}")
            if not rel <= args.rtol:
                failures.append(f"step {step} rel={rel:.3e}")
            if step in eval_steps:
                with torch.no_grad():
                    held_loss = sum(
                        _loss(model, *_batch(held_out, b + 1, args.batch, args.seq)).item()
                        for b in range(args.eval_batches)) / args.eval_batches
                rel = abs(evals[step] - held_loss) / max(abs(held_loss), 1e-30)
                worst = max(worst, rel)
                print(f"  held-out after step {step:3d}: torch {held_loss:.8f} tpc {evals[step]:.8f} "
                      f"rel {rel:.2e}")
                if not rel <= args.rtol:
                    failures.append(f"held-out loss after step {step} rel={rel:.3e}")
    print(f"train: {args.steps} steps, {len(eval_steps)} held-out evaluations, worst rel={worst:.3e} "
          f"(rtol {args.rtol:.0e})")
    if failures:
        print("train: FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    print("train: PASS")
    return 0


def train_bf16(args):
    """tpc's mixed-precision loss curve against PyTorch autocast's (bf16 products on f32 masters,
    AdamW in f32), with the f32 curve of the same run as the scale of bf16's noise."""
    import torch

    torch.set_num_threads(1)
    with open(args.actual) as f:
        metrics = json.load(f)
    curve = {int(r["step"]): float(r["loss"]) for r in metrics.get("loss_curve", [])}
    if sorted(curve) != list(range(1, args.steps + 1)):
        raise UsageError(f"{args.actual}: loss_curve does not hold steps 1..{args.steps}")
    tokens = reference.read_tokens(os.path.join(args.model, "tokens.tokens"))

    def run(autocast):
        model = _load_model(args.model, torch.float32)
        optimizer = make_adamw(model.parameters(), args)
        losses = []
        for step in range(1, args.steps + 1):
            inputs, targets = _batch(tokens, step, args.batch, args.seq)
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=inputs, use_cache=False).logits
            # The loss from the (bf16) logits in f32, as tpc's kernel computes it.
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            optimizer_step(optimizer, model.parameters(), step, args)
            losses.append(loss.item())
        return losses

    autocast, full = run(True), run(False)
    actual = [curve[s] for s in range(1, args.steps + 1)]
    rel = [abs(a - r) / abs(r) for a, r in zip(actual, autocast)]
    noise = [abs(a - f) / abs(f) for a, f in zip(autocast, full)]
    for step in range(1, args.steps + 1):
        if step <= 5 or step % 20 == 0:
            print(f"step {step:3d}: autocast {autocast[step - 1]:.6f} tpc {actual[step - 1]:.6f} "
                  f"rel {rel[step - 1]:.2e} (autocast vs f32 {noise[step - 1]:.2e})")
    mean_rel, mean_noise = sum(rel) / len(rel), sum(noise) / len(noise)
    print(f"train-bf16: {args.steps} steps, worst rel {max(rel):.3e}, mean rel {mean_rel:.3e}; "
          f"autocast against f32: worst {max(noise):.3e}, mean {mean_noise:.3e}")
    # Within bf16's noise: tpc strays from autocast no more than autocast strays from f32, up to
    # the factors (two bf16 schemes round at different points: autocast keeps the residual stream
    # and norm outputs in f32, tpc stores every activation in bf16 as Megatron-LM does), and
    # below the absolute bounds.
    failures = []
    if mean_rel > args.noise_factor * mean_noise or mean_rel > args.mean_rtol:
        failures.append(f"mean rel {mean_rel:.3e} > min({args.noise_factor} x {mean_noise:.3e}, "
                        f"{args.mean_rtol:.1e})")
    if max(rel) > 2 * args.noise_factor * max(noise) or max(rel) > args.rtol:
        failures.append(f"worst rel {max(rel):.3e} > min({2 * args.noise_factor} x {max(noise):.3e}, "
                        f"{args.rtol:.1e})")
    if failures:
        print("train-bf16: FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    print("train-bf16: PASS")
    return 0


def export(args):
    import numpy as np
    import torch
    from safetensors.numpy import load_file

    torch.set_num_threads(1)
    model = _load_model(args.export, torch.float32).eval()
    exported = load_file(os.path.join(args.export, "model.safetensors"))
    state = model.state_dict()
    for name, value in exported.items():
        if name not in state:
            raise UsageError(f"{args.export}: tensor '{name}' is not a parameter of the loaded model")
        if not np.array_equal(state[name].numpy(), value):
            print(f"export: FAIL: loaded '{name}' differs from the exported bits", file=sys.stderr)
            return 1
    tokens = reference.read_tokens(args.tokens)
    inputs, _ = _batch(tokens, 1, args.batch, args.seq)
    with torch.no_grad():
        logits = model(input_ids=inputs, use_cache=False).logits.numpy()
    actual = reference._load(args.actual, "actual")
    if "logits" not in actual or actual["logits"].shape != logits.shape:
        raise UsageError(f"{args.actual}: needs 'logits' of shape {list(logits.shape)}")
    rel = _rel(actual["logits"], logits)
    print(f"export: {len(exported)} tensors load bit-exact; logits rel={rel:.3e} (rtol {args.rtol:.0e})")
    if rel > args.rtol:
        print("export: FAIL: logits differ", file=sys.stderr)
        return 1
    print("export: PASS")
    return 0


def add_training_arguments(parser):
    """The steps, schedule and AdamW settings of a training reference, as
    tp-run train and tp-pipeline name them."""
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--min-lr", type=float, required=True)
    parser.add_argument("--warmup", type=float, required=True)
    parser.add_argument("--decay-steps", type=float, required=True)
    parser.add_argument("--clip", type=float, required=True)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--beta2", type=float, default=0.999)
    parser.add_argument("--eps", type=float, default=1e-8)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gradients")
    t = sub.add_parser("train")
    b = sub.add_parser("train-bf16")
    e = sub.add_parser("export")
    for p in (g, t, b):
        p.add_argument("--model", required=True)
    for p in (g, t, e, b):
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--seq", type=int, required=True)
        p.add_argument("--actual", required=True)
        p.add_argument("--rtol", type=float, default=1e-4)
    for p in (t, b):
        add_training_arguments(p)
    b.add_argument("--mean-rtol", type=float, required=True)
    b.add_argument("--noise-factor", type=float, default=2.0)
    t.add_argument("--lazy-embedding", default="",
                   help="the HF name of a table updated row-sparsely (tp-pipeline embedding-cache)")
    t.add_argument("--eval-every", type=int, default=0)
    t.add_argument("--segments", default="",
                   help="LAST:BATCH:LR,...: the batch size and constant learning rate up to each LAST step")
    t.add_argument("--eval-fraction", type=float, default=0.0)
    t.add_argument("--eval-batches", type=int, default=0)
    e.add_argument("--export", required=True)
    e.add_argument("--tokens", required=True)
    args = parser.parse_args(argv)
    try:
        return {"gradients": gradients, "train": train, "train-bf16": train_bf16,
                "export": export}[args.command](args)
    except UsageError as error:
        print(f"training_reference: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
