#!/usr/bin/env python3
"""Trains a DLRM plan with the tpc package on every MPI rank (under mpirun).

  dlrm_train.py --plan P.tpplan [--model DIR] --data DATA.npz --steps N
      --out LOSSES.json [--device cpu|staged-cpu|cuda] [--lr --min-lr --warmup
      --decay-steps --clip] [--export DIR] [--save DIR] [--resume DIR]
      [--no-ranking] [--stop-after K]

The data (tools/make-criteo-like.py) holds each table's own ids; a step's
tokens are the sample's ids into the concatenated table, feature by
feature (table t's offset by the rows before it), its targets the labels
[B, 1] and its dense features [B, 1, F]. Batches are consecutive samples,
wrapping around (dlrm_reference.py's order); each step passes the next
one's ids, so cached tables gather them while it runs. Before step 1 the
cached tables (if any) are ranked by the ids of every step's batch, unless
--no-ranking. Rank 0 writes {"first_step", "losses", "seconds",
"embedding_caches" (its own)} to LOSSES.json.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import tpc


def step_batches(data, batch, steps, first=1):
    """(tokens, targets, dense) of steps first..steps."""
    tables = data["num_embeddings_per_feature"]
    offsets = np.concatenate([[0], np.cumsum(tables)[:-1]]).astype(np.int64)
    samples = len(data["labels"])
    batches = samples // batch
    if batches < 1:
        raise SystemExit(f"the data holds {samples} samples; one step needs {batch}")
    for step in range(first, steps + 1):
        start = ((step - 1) % batches) * batch
        ids = data["ids"][start:start + batch].astype(np.int64) + offsets[None, :, None]
        yield (ids.reshape(batch, -1).astype(np.int32),
               data["labels"][start:start + batch].reshape(batch, 1),
               data["dense"][start:start + batch].reshape(batch, 1, -1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--model", default="",
                        help="a directory with model.safetensors (default: the plan's init)")
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--decay-steps", type=int, default=None)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--export", default="")
    parser.add_argument("--save", default="")
    parser.add_argument("--resume", default="")
    parser.add_argument("--no-ranking", action="store_true")
    parser.add_argument("--stop-after", type=int, default=0,
                        help="stop after this step (the schedule stays --steps')")
    args = parser.parse_args()

    data = dict(np.load(args.data))
    weights = None
    if args.model and not args.resume:
        weights = os.path.join(args.model, "model.safetensors")
    session = tpc.Session(args.plan, device=args.device, weights=weights)
    session.configure_training(args.steps, lr=args.lr, min_lr=args.min_lr, warmup=args.warmup,
                               decay_steps=args.decay_steps, clip=args.clip)
    first = 1
    if args.resume:
        first = session.resume(args.resume) + 1
    batch = session.tokens_shape[0]
    last = args.stop_after or args.steps
    batches = list(step_batches(data, batch, last, first))
    if not args.no_ranking:
        session.rank_cached_rows(np.concatenate([tokens.reshape(-1) for tokens, _, _ in batches]))
    losses, seconds = [], []
    for i, (tokens, targets, dense) in enumerate(batches):
        start = time.perf_counter()
        ahead = batches[i + 1][0] if i + 1 < len(batches) else None
        losses.append(session.train_step(tokens, targets, dense, next_tokens=ahead))
        seconds.append(time.perf_counter() - start)
    if args.save:
        session.save_checkpoint(args.save)
    if args.export:
        session.export_hf(args.export)
    caches = session.embedding_caches
    if tpc.rank() == 0:
        temporary = args.out + ".tmp"
        with open(temporary, "w") as f:
            json.dump({"first_step": first, "losses": losses, "seconds": seconds,
                       "embedding_caches": caches}, f)
        os.replace(temporary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
