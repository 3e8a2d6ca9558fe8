"""Trains the bundled byte-level GPT-2 from Python: tpc imports and compiles it
in-process, and a Python data loader feeds the steps. Every rank runs this
script:

    mpirun -np 2 python3 examples/train_from_python.py [--steps 200] [TEXT...]

(as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and
--oversubscribe on a 2-core machine). With the package built but not
installed, put build/python on PYTHONPATH (mpirun -x PYTHONPATH). The text
defaults to Debian's fortunes (tools/install-deps.sh installs them). The loss
curve is drawn to loss.png when matplotlib is installed.
"""

import argparse
import glob
import pathlib

import numpy as np

import tpc

HERE = pathlib.Path(__file__).resolve().parent


def byte_batches(paths, batch, seq, seed):
    """A data loader: random windows of the texts' bytes, forever. Every rank
    draws the same windows (the same seed), as each must see the same
    batch."""
    data = np.frombuffer(b"".join(pathlib.Path(p).read_bytes() for p in paths),
                         dtype=np.uint8).astype(np.int32)
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(data) - seq - 1, size=batch)
        window = np.stack([data[s:s + seq + 1] for s in starts])
        yield window[:, :-1], window[:, 1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", nargs="*", help="Text files to train on")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="", help="cpu or cuda")
    parser.add_argument("--plot", default="loss.png")
    args = parser.parse_args()
    texts = args.text or sorted(glob.glob("/usr/share/games/fortunes/*"))
    texts = [t for t in texts if pathlib.Path(t).is_file()
             and not t.endswith((".dat", ".u8"))]
    if not texts:
        parser.error("no text to train on (install fortunes or name files)")

    module = tpc.import_hf(HERE / "gpt2-bytes", batch=args.batch, seq=args.seq,
                           kv_cache=max(args.seq, 128))
    plan = tpc.compile(module, mode="1d" if tpc.world_size() > 1 else "none",
                       grid=[tpc.world_size()] if tpc.world_size() > 1 else None)
    session = tpc.Session(plan, device=args.device)
    if tpc.rank() == 0:
        for line in plan.report:
            print(line)
        print(f"{tpc.world_size()} rank(s) on {session.device}; "
              f"{session.param_bytes} parameter bytes per rank")
    session.configure_training(steps=args.steps, lr=args.lr, warmup=20)

    losses = []
    loader = byte_batches(texts, args.batch, args.seq, seed=1)
    for step, (tokens, targets) in zip(range(1, args.steps + 1), loader):
        losses.append(session.train_step(tokens, targets))
        if tpc.rank() == 0 and (step % 20 == 0 or step == args.steps):
            print(f"step {step}/{args.steps} | loss {losses[-1]:.4f} | "
                  f"lr {session.learning_rate:.2e}", flush=True)

    sample = session.generate([list(b"The ")], max_new_tokens=80,
                              temperature=0.8, top_k=40, seed=1)[0]
    if tpc.rank() == 0:
        print("sample:", bytes(list(b"The ") + sample)
              .decode("utf-8", "replace"))
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot")
            return
        plt.plot(range(1, len(losses) + 1), losses)
        plt.xlabel("step")
        plt.ylabel("training loss")
        plt.savefig(args.plot)
        print(f"loss curve: {args.plot}")


if __name__ == "__main__":
    main()
