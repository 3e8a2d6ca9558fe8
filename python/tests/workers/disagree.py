"""Every rank trains one step, rank 1 on other tokens: all ranks must raise
(ValueError, naming the tokens), none may hang. Prints each rank's error."""

import sys

import numpy as np

import tpc

session = tpc.Session(sys.argv[1], device="cpu")
session.configure_training(steps=2)
batch, seq = session.tokens_shape
tokens = np.full((batch, seq), 3 + tpc.rank(), dtype=np.int32)
try:
    session.train_step(tokens, tokens)
except ValueError as error:
    print(f"rank {tpc.rank()}: ValueError: {error}", flush=True)
    sys.exit(3)
print(f"rank {tpc.rank()}: no error", flush=True)
