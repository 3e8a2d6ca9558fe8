"""Every rank: trains a plan from a Python generator of batches (tp-run's
windows of the token file, in its order), then exports the model; rank 0
writes the losses as JSON.

    train_loop.py PLAN TOKENS STEPS LOSSES_JSON EXPORT_DIR [torch]
"""

import json
import sys

import numpy as np

import tpc

plan, token_path, steps, losses_path, export_dir = sys.argv[1:6]
as_torch = sys.argv[6:] == ["torch"]
steps = int(steps)
stream = tpc.read_tokens(token_path)
session = tpc.Session(plan, device="cpu")
session.configure_training(steps=steps, lr=2e-3, min_lr=1e-4, warmup=2,
                           decay_steps=steps + 2, clip=0.5)
batch, seq = session.tokens_shape


def batches():
    """tp-run's order: consecutive windows of batch*seq tokens, wrapping."""
    per_step = batch * seq
    windows = (len(stream) - 1) // per_step
    for step in range(steps):
        offset = (step % windows) * per_step
        tokens = stream[offset:offset + per_step].reshape(batch, seq)
        targets = stream[offset + 1:offset + per_step + 1].reshape(batch, seq)
        if as_torch:
            import torch
            yield torch.from_numpy(tokens.copy()), torch.from_numpy(targets.copy())
        else:
            yield tokens, targets


losses = [session.train_step(tokens, targets) for tokens, targets in batches()]
session.export_hf(export_dir)
if tpc.rank() == 0:
    with open(losses_path, "w") as f:
        json.dump({"losses": losses, "step": session.step,
                   "lr": session.learning_rate}, f)
