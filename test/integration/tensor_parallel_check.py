"""Checks for tensor-parallel training runs (tensor-parallel-training.sh).

  losses A.json B.json       every step's loss of B equals A's within --rel
  weights A.safetensors B... B's parameters equal A's: |b - a| / |a| (2-norms)
                             within --rel over the whole model and within
                             --tensor-rel for every tensor (AdamW normalises
                             the rounding noise of small, cancelling
                             gradients, e.g. of zero-initialised biases), or
                             bit for bit (--exact)
  volume CONFIG METRICS STATIC --ranks T --batch B --seq S [--seq-parallel]
                             the bytes each rank sent per step (tp-run's
                             metrics) and tpc-opt's static report for
                             @train_step both equal the documented formula
                             (docs/communication.md), per collective kind
                             (ring shifts, all-gathers and reduce-scatters
                             as one when collective matmuls ran)
  layer-volume CONFIG STATIC STATIC+1 --mode M --grid G --batch B --seq S
               [--dp N]      the static report's difference between the
                             model and the model with one more layer equals
                             the per-layer formula of docs/schemes.md (1D,
                             2D, 2.5D, 3D; with N data-parallel replicas)
  same-volume METRICS STATIC the runtime's bytes per step equal the static
                             report's, per collective kind
  decisions METRICS --slow-rank R --first A [--back | --ends-moved]
            [--empties]      the run's re-plans (tp-run --metrics): the first
                             is action A and takes work off rank R (fewer
                             blocks computed; with --empties none of some
                             point); with --back a later one gives
                             some back, with --ends-moved the last leaves
                             rank R holding fewer blocks than its even share;
                             every migration reports the bytes it moved;
                             every rank's compute time of every step was
                             recorded
"""

import argparse
import itertools
import json
import re
import sys



def losses(args):
    """The training losses, and the held-out ones when A has them."""
    first, second = json.load(open(args.a)), json.load(open(args.b))
    for curve in ("loss_curve", "eval_curve"):
        if curve == "eval_curve" and curve not in first:
            continue
        a = [r["loss"] for r in first[curve]]
        b = [r["loss"] for r in second.get(curve, [])]
        if len(a) != len(b):
            sys.exit(f"{curve}: {len(b)} losses against {len(a)}")
        worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        print(f"{curve}: {len(a)} losses, worst rel {worst:.2e}")
        if worst > args.rel:
            sys.exit(f"{curve} differs: {a} vs {b}")


def weights(args):
    import numpy as np
    from safetensors.numpy import load_file

    a, b = load_file(args.a), load_file(args.b)
    if sorted(a) != sorted(b):
        sys.exit(f"weights: tensor names differ: {sorted(a)} vs {sorted(b)}")
    worst, where, total_diff, total_norm = 0.0, "", 0.0, 0.0
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.shape != y.shape:
            sys.exit(f"weights: '{name}' has shape {y.shape}, "
                     f"expected {x.shape}")
        if args.exact:
            if not np.array_equal(a[name].view(np.uint32),
                                  b[name].view(np.uint32)):
                sys.exit(f"weights: '{name}' differs in its bits")
            continue
        if args.key_bias_bound is not None and name.endswith(
                ".attn.c_attn.bias"):
            # GPT-2's key bias adds the same q.b_k to every score of a query,
            # which softmax ignores: its gradient is zero up to rounding, and
            # AdamW, which normalises gradients, moves it by rounding noise in
            # any implementation. It must stay that: within the bound of
            # zero. The query and value biases are compared as usual.
            # Two runs' key biases differ by at most the noise's steps.
            h = x.shape[0] // 3
            moved = float(np.max(np.abs(y[h:2 * h] - x[h:2 * h])))
            if moved > args.key_bias_bound:
                sys.exit(f"weights: the key biases of '{name}' differ by "
                         f"{moved:.2e}, more than noise")
            x, y = np.delete(x, np.s_[h:2 * h]), np.delete(y, np.s_[h:2 * h])
        # Relative error of the tensor (2-norms) and of the whole model.
        diff = float(np.sum((y - x) ** 2))
        total_diff += diff
        total_norm += float(np.sum(x ** 2))
        rel = diff ** 0.5 / (float(np.linalg.norm(x)) or 1.0)
        if rel > worst:
            worst, where = rel, name
    if args.exact:
        print(f"weights: {len(a)} tensors, bit-identical")
        return
    model = (total_diff / total_norm) ** 0.5
    print(f"weights: {len(a)} tensors, model rel {model:.2e}, worst tensor "
          f"rel {worst:.2e} ({where})")
    if model > args.rel or worst > args.tensor_rel:
        sys.exit(f"weights differ beyond {args.rel} (model) or "
                 f"{args.tensor_rel} (a tensor)")


def expected_volume(config, ranks, batch, seq, seq_parallel):
    """Bytes per rank per step, by collective kind (docs/communication.md)."""
    n, tokens, f = ranks, batch * seq, 4
    ring = (n - 1) / n
    gpt2 = config["model_type"] == "gpt2"
    h = config["n_embd"] if gpt2 else config["hidden_size"]
    layers = config["n_layer"] if gpt2 else config["num_hidden_layers"]
    tied = config.get("tie_word_embeddings", gpt2)
    # The global gradient norm: the split parameters' squared norms are
    # summed locally and all-reduced once (one float).
    scalars = 2 * ring * f
    # The activations' all-reduces (or all-gather + reduce-scatter pairs):
    # 4 per layer (2 forward, 2 backward), the embedding's forward
    # (and its backward gather with sequence parallelism) and the head's
    # backward (and its forward gather).
    activation = (4 * layers + 2) * ring * tokens * h * f
    # Vocabulary-parallel cross-entropy and its gradient: one all-gather of
    # 3 floats per token each.
    loss = 2 * (n - 1) * 3 * tokens * f
    volume = {"all_gather": loss}
    if not seq_parallel:
        volume["all_reduce"] = 2 * activation + scalars
    else:
        volume["all_gather"] += activation
        volume["reduce_scatter"] = activation
        # Replicated parameters whose gradients are summed over sequence
        # shards: norm weights (and biases), GPT-2's row-parallel biases.
        vectors = 6 * layers + 2 if gpt2 else 2 * layers + 1
        volume["all_reduce"] = scalars + 2 * ring * h * f * vectors
        # Learned positions (GPT-2): a window of the table (seq below the
        # context) is replicated and its [seq, h] gradient gathered; the whole
        # table is split along the positions like the sequence instead, each
        # rank adding and updating its own rows.
        if gpt2 and seq < config["n_positions"]:
            volume["all_gather"] += ring * seq * h * f
    return volume


def volume(args):
    config = json.load(open(args.config))
    want = expected_volume(config, args.ranks, args.batch, args.seq,
                           args.seq_parallel)
    runtime = runtime_volume(args.metrics)
    static = static_volume(args.static)
    want = {k: v for k, v in want.items() if v > 0}
    print(f"volume per rank per step: formula {want}, runtime {runtime}, "
          f"static {static}")
    for name, got in (("runtime", runtime), ("static", static)):
        expected = want
        if "ring_shift" in got:
            got, expected = ring_merged(got), ring_merged(want)
        if sorted(got) != sorted(expected) or any(
                abs(got[k] - expected[k]) > 1e-6 * expected[k]
                for k in expected):
            sys.exit(f"volume: the {name} bytes differ from the formula")


def ring_merged(volume):
    """The ring shifts of collective matmuls move what the all-gathers and
    reduce-scatters they replace would: compare those three as one."""
    merged = {k: v for k, v in volume.items()
              if k not in ("all_gather", "reduce_scatter", "ring_shift")}
    merged["all_gather+reduce_scatter"] = sum(
        volume.get(k, 0) for k in ("all_gather", "reduce_scatter",
                                   "ring_shift"))
    return merged


def runtime_volume(path):
    """tp-run's metrics: bytes per step per collective kind."""
    metrics = json.load(open(path))
    return {k: v["bytes_per_step"]
            for k, v in metrics["communication"].items() if v["bytes"] > 0}


def static_volume(path):
    """tpc-opt's report for @train_step: bytes per collective kind."""
    static = {}
    for line in open(path):
        m = re.search(r"@train_step communication per rank:(.*) total", line)
        if m:
            for kind, size in re.findall(r"([a-z_]+) ([0-9.e+]+) bytes", m[1]):
                if float(size) > 0:
                    static[kind] = float(size)
    return static


def layer_shapes(config):
    """Per-layer sizes: h, matrix weight elements, the widths the linears
    read and write per token, and the vector parameters (biases, norm
    weights)."""
    if config["model_type"] == "gpt2":
        h = config["n_embd"]
        inner = config.get("n_inner") or 4 * h
        weights = 3 * h * h + h * h + 2 * h * inner
        reads = 3 * h + inner            # QKV, attention output, FC1, FC2
        writes = 3 * h + h + inner + h
        biases, norms = 3 * h + h + inner + h, 4 * h
        # Floats per row the split-feature norms gather (3D): two layer
        # norms, each 2 forward (sum, sum of squares) and 4 backward.
        statistics = 2 * (2 + 4)
    else:
        h = config["hidden_size"]
        inner = config["intermediate_size"]
        kv = config.get("num_key_value_heads",
                        config["num_attention_heads"]) * (
            h // config["num_attention_heads"])
        weights = h * (h + 2 * kv) + h * h + 3 * h * inner
        reads = 3 * h + inner            # QKV, output, gate/up, down
        writes = (h + 2 * kv) + h + 2 * inner + h
        biases, norms = 0, 2 * h
        statistics = 2 * (1 + 2)         # two RMS norms
    return h, weights, reads, writes, biases, norms, statistics


def expected_layer_volume(config, mode, grid, batch, seq, dp=1):
    """Floats per rank per transformer layer of the training step
    (docs/schemes.md, "Traffic per layer"). With dp replicas the scheme
    works on batch / dp; each rank's weight matrices' gradients are then
    also all-reduced over the replicas (over replicas and depth at once in
    2.5D), and the vectors' gradients, already summed over the ranks
    splitting the batch, over those ranks and the replicas at once. ZeRO-1
    replaces an all-reduce by a reduce-scatter and the parameters'
    all-gather: the same floats."""
    h, weights, reads, writes, biases, norms, statistics = layer_shapes(config)
    tokens = batch * seq // dp
    if mode == "1d":
        t = grid[0]
        ring, batch_ranks = (t - 1) / t, 1
        activations = 8 * ring * tokens * h
        # Column-parallel biases are split, the others and the norms whole;
        # their gradients are equal on the ranks of a group.
        held = weights / t
        vectors = reads / t + 2 * h + norms if biases else norms
        matrices = 2 * (dp - 1) / dp * held
        gathered_statistics = 0
    elif mode in ("2d", "2.5d"):
        q, depth = grid[0], (grid[2] if mode == "2.5d" else 1)
        ring, batch_ranks = (q - 1) / q, q * depth
        activations = 8 * ring * (tokens / depth) * h / q
        replicas = depth * dp
        matrices = 2 * ring * weights / q + 2 * (replicas - 1) / replicas * \
            weights / (q * q)
        vectors = biases / q + norms
        gathered_statistics = 0  # norms see whole features
    else:  # 3d
        q = grid[0]
        ring, batch_ranks = (q - 1) / q, q * q
        activations = 2 * ring * tokens * (reads + writes) / (q * q)
        matrices = 2 * ring * weights / (q * q) + 2 * (dp - 1) / dp * \
            weights / (q * q * q)
        vectors = (biases + norms) / q
        # Features split over q ranks: the norms gather row statistics.
        gathered_statistics = (q - 1) * tokens / (q * q) * statistics
    summed = batch_ranks * dp
    vectors *= 2 * (summed - 1) / summed
    return activations + matrices + vectors + gathered_statistics


def layer_volume(args):
    config = json.load(open(args.config))
    grid = [int(x) for x in args.grid.split("x")]
    want = expected_layer_volume(config, args.mode, grid, args.batch,
                                 args.seq, args.dp)
    got = (sum(static_volume(args.static_more).values()) -
           sum(static_volume(args.static).values())) / 4
    print(f"volume per layer per rank: formula {want:.1f} floats, "
          f"static report {got:.1f}")
    if abs(got - want) > 1e-6 * want:
        sys.exit("layer volume: the static report differs from the formula")


def same_volume(args):
    runtime = runtime_volume(args.metrics)
    static = static_volume(args.static)
    print(f"volume per rank per step: runtime {runtime}, static {static}")
    if sorted(runtime) != sorted(static) or any(
            abs(runtime[k] - static[k]) > 1e-6 * static[k] for k in static):
        sys.exit("volume: the runtime's bytes differ from the static report")


def decisions(args):
    metrics = json.load(open(args.metrics))
    rebalance = metrics["rebalance"]
    events = rebalance["decisions"]
    print("decisions: " + "; ".join(
        f"step {e['step']} {e['action']} ({e['reason']})" for e in events))
    steps = [t["step"] for t in rebalance["compute_seconds"]]
    ranks = {len(t["seconds"]) for t in rebalance["compute_seconds"]}
    if steps != list(range(1, len(steps) + 1)) or len(ranks) != 1:
        sys.exit(f"decisions: compute times for steps {steps}, ranks {ranks}")
    if not events:
        sys.exit("decisions: no re-plan")

    def work(event):  # the slow rank's computed blocks, over all points
        return sum(c[args.slow_rank] for c in event["computed"])

    first = events[0]
    even = sum(sum(c) // len(c) for c in first["computed"])
    if first["action"] != args.first or work(first) >= even:
        sys.exit(f"decisions: the first is {first['action']} leaving "
                 f"{work(first)} of an even {even} blocks on rank "
                 f"{args.slow_rank}; expected {args.first} below {even}")
    empty = [p for p, c in enumerate(first["computed"])
             if c[args.slow_rank] == 0]
    if args.empties and not empty:
        sys.exit(f"decisions: the first leaves rank {args.slow_rank} computing "
                 f"{[c[args.slow_rank] for c in first['computed']]} blocks "
                 "per point; expected none of some point")
    if args.back and not any(work(e) > work(first) for e in events[1:]):
        sys.exit("decisions: no later re-plan gives the slow rank work back")
    if args.ends_moved:
        last = events[-1]
        held = sum(h[args.slow_rank] for h in last["held"])
        if held >= even:
            sys.exit(f"decisions: the run ends with {held} of an even {even} "
                     f"blocks on rank {args.slow_rank}; expected fewer")
    for e in events:
        if e["action"] == "migrate" and e["held"] != first["held"] and not (
                e["bytes_moved"] > 0):
            sys.exit(f"decisions: a migration moved no bytes: {e}")


def given_speeds(args):
    """--rank-speeds: one migration before the first step that splits every
    point's blocks so that its slowest rank (blocks / speed) finishes first,
    and no other re-plan."""
    speeds = [float(v) for v in args.speeds.split(",")]
    events = json.load(open(args.metrics))["rebalance"]["decisions"]
    print("decisions: " + "; ".join(
        f"step {e['step']} {e['action']} ({e['reason']})" for e in events))
    if len(events) != 1 or events[0]["step"] != args.after or \
            events[0]["action"] != "migrate":
        sys.exit(f"given-speeds: {len(events)} decisions, expected one "
                 f"migration after step {args.after}")
    event = events[0]
    for p, (held, computed) in enumerate(zip(event["held"], event["computed"])):
        if held != computed or len(held) != len(speeds):
            sys.exit(f"given-speeds: point {p} holds {held}, computes "
                     f"{computed}; expected every block computed, "
                     f"{len(speeds)} ranks")
        total = sum(held)

        def finish(split):
            return max(n / v for n, v in zip(split, speeds))
        # Every split of `total` blocks over the ranks (any rank may hold
        # all: compiled with headroom 1).
        splits = [c for c in itertools.product(range(total + 1),
                                               repeat=len(speeds))
                  if sum(c) == total]
        best = min(finish(c) for c in splits)
        if finish(held) > best * (1 + 1e-9):
            sys.exit(f"given-speeds: point {p} split {held} finishes at "
                     f"{finish(held):.3f} / speed; {best:.3f} is possible")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("losses")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, default=1e-5)
    p.set_defaults(run=losses)
    p = sub.add_parser("weights")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, default=1e-5,
                   help="bound on |b - a| / |a| over all parameters")
    p.add_argument("--tensor-rel", type=float, default=1e-4,
                   help="bound on |b - a| / |a| per tensor")
    p.add_argument("--exact", action="store_true")
    p.add_argument("--key-bias-bound", type=float,
                   help="GPT-2: how far AdamW may move the key biases from 0")
    p.set_defaults(run=weights)
    p = sub.add_parser("volume")
    p.add_argument("config")
    p.add_argument("metrics")
    p.add_argument("static")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--seq-parallel", action="store_true")
    p.set_defaults(run=volume)
    p = sub.add_parser("layer-volume")
    p.add_argument("config")
    p.add_argument("static", help="tpc-opt remarks for the model")
    p.add_argument("static_more", help="... for the model with one more layer")
    p.add_argument("--mode", choices=["1d", "2d", "2.5d", "3d"],
                   required=True)
    p.add_argument("--grid", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--dp", type=int, default=1,
                   help="data-parallel replicas around the scheme")
    p.set_defaults(run=layer_volume)
    p = sub.add_parser("given-speeds")
    p.add_argument("metrics")
    p.add_argument("speeds", help="as given to --rank-speeds")
    p.add_argument("--after", type=int, default=0,
                   help="the step the run resumed from (0: none)")
    p.set_defaults(run=given_speeds)
    p = sub.add_parser("same-volume")
    p.add_argument("metrics")
    p.add_argument("static")
    p.set_defaults(run=same_volume)
    p = sub.add_parser("decisions")
    p.add_argument("metrics")
    p.add_argument("--slow-rank", type=int, required=True)
    p.add_argument("--first", choices=["migrate", "resize"], required=True)
    ends = p.add_mutually_exclusive_group()
    ends.add_argument("--back", action="store_true")
    ends.add_argument("--ends-moved", action="store_true")
    p.add_argument("--empties", action="store_true")
    p.set_defaults(run=decisions)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
