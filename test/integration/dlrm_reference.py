#!/usr/bin/env python3
"""PyTorch reference of tpc's DLRM (model_type "dlrm", docs/dlrm.md).

  dlrm_reference.py make-model --config CONFIG.json --out DIR [--seed S]
      writes DIR/config.json and DIR/model.safetensors: the weights of a
      PyTorch DLRM under tpc's parameter names (float32; rows N(0, 0.3^2),
      nn.Linear's own uniform weights, biases U(-0.1, 0.1) so that an
      ignored one shows).
  dlrm_reference.py train --model DIR --data DATA.npz --batch B --steps N
      --actual LOSSES.json --lr --min-lr --warmup --decay-steps --clip
      [--weight-decay --beta1 --beta2 --eps] [--lazy-embedding] [--rtol R]
      N steps in float64 of the model built from nn.EmbeddingBag(mode="sum")
      per table, nn.Linear/ReLU MLPs, TorchRec's dot interaction and
      BCEWithLogits, on consecutive batches of the data (wrapping), with
      torch.optim.AdamW (decay on rank >= 2), global-norm clipping and tpc's
      warmup + cosine schedule; against the loss curve in LOSSES.json
      ({"losses": [...]}, from "first_step", default 1, on: a resumed run's).
      --lazy-embedding: the tables take the row-sparse AdamW of tp-pipeline
      embedding-cache (only the rows a batch uses move).

Independent of tpc: the tables are separate EmbeddingBags (tpc concatenates
them), the interaction is TorchRec's bmm + triu_indices (tpc's is slices
and pads), the loss is BCEWithLogits (tpc's a two-class cross-entropy).
Exit 1 when a tolerance is exceeded, 2 on usage or I/O errors.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training_reference import (  # noqa: E402  (the optimizer of tpc's steps)
    add_training_arguments, lazy_adamw_rows, make_adamw, optimizer_step)


class UsageError(Exception):
    pass


def _config(path):
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: {error}")
    if config.get("model_type") != "dlrm":
        raise UsageError(f"{path}: not a DLRM config")
    return config


class Dlrm:
    """The DLRM as TorchRec builds it."""

    def __init__(self, config, dtype):
        import torch

        self.tables = [int(r) for r in config["num_embeddings_per_feature"]]
        self.dim = int(config["embedding_dim"])
        self.bags = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(rows, self.dim, mode="sum") for rows in self.tables)

        def mlp(widths, inputs):
            layers = []
            for out in widths:
                layers.append(torch.nn.Linear(inputs, out))
                inputs = out
            return torch.nn.ModuleList(layers)

        self.dense = mlp(config["dense_arch_layer_sizes"], int(config["dense_in_features"]))
        features = len(self.tables) + 1
        self.over = mlp(config["over_arch_layer_sizes"], self.dim + features * (features - 1) // 2)
        self.triu = torch.triu_indices(features, features, offset=1)
        for module in (self.bags, self.dense, self.over):
            module.to(dtype)

    def named_parameters(self):
        """The MLPs' parameters under tpc's names (the tables are separate
        EmbeddingBags here, one concatenated parameter in tpc)."""
        for i, layer in enumerate(self.dense):
            yield f"dense_arch.{i}.weight", layer.weight
            yield f"dense_arch.{i}.bias", layer.bias
        for i, layer in enumerate(self.over):
            yield f"over_arch.{i}.weight", layer.weight
            yield f"over_arch.{i}.bias", layer.bias

    def parameters(self):
        return [bag.weight for bag in self.bags] + [p for _, p in self.named_parameters()]

    def concatenated_table(self):
        import torch

        return torch.cat([bag.weight for bag in self.bags], dim=0)

    def load(self, tensors):
        import torch

        with torch.no_grad():
            table = tensors["sparse_arch.embedding.weight"]
            start = 0
            for bag, rows in zip(self.bags, self.tables):
                bag.weight.copy_(table[start:start + rows])
                start += rows
            for name, param in self.named_parameters():
                param.copy_(tensors[name])

    def logits(self, dense, ids):
        """dense [B, F] float, ids [B, T, L] (each table's own ids)."""
        import torch

        x = dense
        for layer in self.dense:
            x = torch.relu(layer(x))
        pooled = [bag(ids[:, t, :]) for t, bag in enumerate(self.bags)]
        z = torch.stack([x] + pooled, dim=1)  # [B, F, D]
        gram = torch.bmm(z, z.transpose(1, 2))
        pairs = gram[:, self.triu[0], self.triu[1]]
        y = torch.cat([x, pairs], dim=1)
        for i, layer in enumerate(self.over):
            y = layer(y)
            if i + 1 < len(self.over):
                y = torch.relu(y)
        return y.squeeze(1)


def make_model(args):
    import torch
    from safetensors.torch import save_file

    config = _config(args.config)
    torch.manual_seed(args.seed)
    model = Dlrm(config, torch.float32)
    with torch.no_grad():
        for bag in model.bags:
            # Rows large enough to give the interaction's dot products some
            # spread.
            bag.weight.normal_(0.0, 0.3)
        for _, param in model.named_parameters():
            if param.dim() == 1:
                param.uniform_(-0.1, 0.1)
    tensors = {"sparse_arch.embedding.weight": model.concatenated_table().detach().contiguous()}
    tensors.update({name: p.detach().contiguous() for name, p in model.named_parameters()})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(args.out, "model.safetensors"))
    print(f"make-model: DLRM with {len(model.tables)} tables ({sum(model.tables)} rows) -> {args.out}")
    return 0


def batch_of(data, step, batch):
    """The 1-based step's batch: consecutive samples, wrapping around."""
    batches = len(data["labels"]) // batch
    if batches < 1:
        raise UsageError(f"the data holds {len(data['labels'])} samples; one step needs {batch}")
    start = ((step - 1) % batches) * batch
    return {key: data[key][start:start + batch] for key in ("dense", "ids", "labels")}


def train(args):
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    config = _config(os.path.join(args.model, "config.json"))
    try:
        with open(args.actual) as f:
            run = json.load(f)
        first = int(run.get("first_step", 1))
        actual = {first + i: float(x) for i, x in enumerate(run["losses"])}
        data = dict(np.load(args.data))
    except (OSError, ValueError, KeyError) as error:
        raise UsageError(f"{error}")
    if sorted(actual) != list(range(first, args.steps + 1)):
        raise UsageError(f"{args.actual}: losses of steps {min(actual, default=0)}.."
                         f"{max(actual, default=0)}, expected {first}..{args.steps}")
    model = Dlrm(config, torch.float64)
    model.load({k: v.to(torch.float64)
                for k, v in load_file(os.path.join(args.model, "model.safetensors")).items()})
    tables = [bag.weight for bag in model.bags]
    dense_params = [p for _, p in model.named_parameters()]
    if not args.lazy_embedding:
        dense_params = tables + dense_params
    optimizer = make_adamw(dense_params, args)
    moments = [(torch.zeros_like(t), torch.zeros_like(t)) for t in tables]
    failures, worst = [], 0.0
    for step in range(1, args.steps + 1):
        b = batch_of(data, step, args.batch)
        dense = torch.tensor(b["dense"], dtype=torch.float64)
        ids = torch.tensor(b["ids"], dtype=torch.long)
        labels = torch.tensor(b["labels"], dtype=torch.float64)
        optimizer.zero_grad()
        for t in tables:
            t.grad = None
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model.logits(dense, ids), labels)
        loss.backward()
        lr = optimizer_step(optimizer, model.parameters(), step, args)
        if args.lazy_embedding:
            # Each table's rows its bags use.
            for t, (table, (m, v)) in enumerate(zip(tables, moments)):
                lazy_adamw_rows(table, m, v, torch.unique(ids[:, t, :]), step, lr, args)
        if step not in actual:  # before a resumed run's first step
            continue
        ref = loss.item()
        rel = abs(actual[step] - ref) / max(abs(ref), 1e-30)
        worst = max(worst, rel)
        print(f"step {step:3d}: torch {ref:.8f} tpc {actual[step]:.8f} rel {rel:.2e}")
        if not rel <= args.rtol:
            failures.append(f"step {step} rel={rel:.3e}")
    print(f"train: steps {first}..{args.steps}, worst rel={worst:.3e} (rtol {args.rtol:.0e})")
    if failures:
        print("train: FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    print("train: PASS")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("--config", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("--model", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--actual", required=True)
    add_training_arguments(t)
    t.add_argument("--lazy-embedding", action="store_true")
    t.add_argument("--rtol", type=float, default=1e-4)
    args = parser.parse_args(argv)
    try:
        return make_model(args) if args.command == "make-model" else train(args)
    except UsageError as error:
        print(f"dlrm_reference: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
