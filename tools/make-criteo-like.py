#!/usr/bin/env python3
"""A synthetic, seeded click-through data set shaped like Criteo's, for a DLRM.

  make-criteo-like.py --config dlrm.json --samples N --out data.npz
      [--seed S] [--zipf ALPHA] [--label-noise SIGMA]

Reads the DLRM's config.json (tpc-import's model_type "dlrm":
dense_in_features, num_embeddings_per_feature, bag_size) and writes an .npz:

  dense   float32 [N, dense_in_features]  log(1 + x), x log-normal (Criteo's
                                          integer counts after DLRM's log
                                          transform)
  ids     int32   [N, tables, bag_size]   each table's own row ids, Zipf(ALPHA)
                                          over its rows (rank r drawn with
                                          probability ~ 1 / r^ALPHA), the ranks
                                          shuffled onto rows per table
  labels  int32   [N]                     clicks (0/1) of a fixed random
                                          logistic model of the features, so
                                          that training has signal
  num_embeddings_per_feature  int64 [tables]

Zipf ids over 10^5..10^7 rows make a few rows hot and most cold, as real
categorical features are: the regime a frequency-aware embedding cache is
for. The same arguments give the same bytes. The file is written to a
temporary name and renamed.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np


def zipf_ids(rng, rows, count, alpha):
    """`count` ids over [0, rows): Zipf(alpha) ranks (truncated to rows) put
    on a random permutation of the rows, so hot rows are spread over the
    table (and over the ranks that split it)."""
    ranks = np.arange(1, rows + 1, dtype=np.float64)
    cdf = np.cumsum(ranks ** -alpha)
    cdf /= cdf[-1]
    drawn = np.searchsorted(cdf, rng.random(count), side="right")
    drawn = np.minimum(drawn, rows - 1)
    permutation = rng.permutation(rows)
    return permutation[drawn].astype(np.int32)


def generate(config, samples, seed, alpha, noise):
    rng = np.random.default_rng(seed)
    dense_features = int(config["dense_in_features"])
    tables = [int(r) for r in config["num_embeddings_per_feature"]]
    bag = int(config.get("bag_size", 1))
    counts = rng.lognormal(mean=1.0, sigma=1.5, size=(samples, dense_features))
    dense = np.log1p(counts).astype(np.float32)
    ids = np.empty((samples, len(tables), bag), dtype=np.int32)
    for t, rows in enumerate(tables):
        ids[:, t, :] = zipf_ids(rng, rows, samples * bag, alpha).reshape(samples, bag)
    # A logistic model: dense weights plus a pseudo-random score per row of
    # every table (rows hashed to scores, so 10^7-row tables need no table).
    w = rng.normal(0.0, 0.5, dense_features)
    logit = (dense - dense.mean(axis=0)) @ w
    for t in range(len(tables)):
        salt = np.uint64(rng.integers(1, 2**62))
        for b in range(bag):
            h = (ids[:, t, b].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + salt) & np.uint64(0xFFFFFFFF)
            logit += (h.astype(np.float64) / 2**32 - 0.5) * (2.0 / np.sqrt(len(tables) * bag))
    logit += rng.normal(0.0, noise, samples) - 1.0  # about a quarter click
    labels = (rng.random(samples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int32)
    return dense, ids, labels, np.array(tables, dtype=np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the DLRM's config.json")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--out", required=True, help="the .npz to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zipf", type=float, default=1.05, help="the ids' Zipf exponent (> 0)")
    parser.add_argument("--label-noise", type=float, default=0.5)
    args = parser.parse_args(argv)
    try:
        with open(args.config) as f:
            config = json.load(f)
        if not isinstance(config, dict) or config.get("model_type") != "dlrm":
            raise ValueError(f"{args.config}: not a DLRM config.json (model_type \"dlrm\")")
        for key in ("dense_in_features", "num_embeddings_per_feature"):
            if key not in config:
                raise ValueError(f"{args.config}: missing field '{key}'")
        if args.samples < 1:
            raise ValueError(f"--samples must be >= 1, got {args.samples}")
        if not args.zipf > 0:
            raise ValueError(f"--zipf must be > 0, got {args.zipf}")
        dense, ids, labels, tables = generate(config, args.samples, args.seed, args.zipf, args.label_noise)
    except (OSError, ValueError, TypeError, KeyError) as error:
        print(f"make-criteo-like: error: {error}", file=sys.stderr)
        return 2
    directory = os.path.dirname(os.path.abspath(args.out))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".criteo-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, dense=dense, ids=ids, labels=labels, num_embeddings_per_feature=tables)
        os.replace(temporary, args.out)
    except BaseException:
        os.unlink(temporary)
        raise
    print(f"make-criteo-like: {args.samples} samples, {len(tables)} tables "
          f"({int(tables.sum())} rows), click rate {labels.mean():.3f} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
