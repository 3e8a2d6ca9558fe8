"""One line of bench/rebalance.sh's table from a tp-run --metrics file.

  rebalance_summary.py --header
  rebalance_summary.py METRICS --baseline METRICS --slowdown S --ranks N
                       --onset STEP --name NAME
  rebalance_summary.py --best-static METRICS... --versus METRICS...
                       --onset STEP

Step time: the median over the steps from ONSET + 30 on, relative to the
balanced run's median over the same steps; the bound is N / (N - 1 + 1/S),
and N / (N - 1 + 1/S') for the slowdown S' the off run measured.
Loss: the mean of the last 20 steps, and its gap to the balanced run's.
Decision: the first re-plan from the onset on, its step and action, the
steps and seconds from the onset to it, the bytes all migrations moved, and
how many re-plans came before the onset (timing noise).
--best-static: the fastest of runs with fixed splits (--rank-speeds), and
each --versus run's step relative to it.
"""

import argparse
import json
import statistics


def steady_median(metrics, first):
    return statistics.median(r["seconds"] for r in metrics["loss_curve"]
                             if r["step"] >= first)


def final_loss(metrics):
    return statistics.mean(r["loss"] for r in metrics["loss_curve"][-20:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("metrics", nargs="?")
    p.add_argument("--header", action="store_true")
    p.add_argument("--baseline")
    p.add_argument("--slowdown", type=float)
    p.add_argument("--ranks", type=int)
    p.add_argument("--off")
    p.add_argument("--onset", type=int)
    p.add_argument("--name")
    p.add_argument("--best-static", nargs="+")
    p.add_argument("--versus", nargs="+", default=[])
    a = p.parse_args()
    if a.best_static:
        first = a.onset + 30
        steps = {path: steady_median(json.load(open(path)), first)
                 for path in a.best_static}
        best = min(steps, key=steps.get)
        speeds = json.load(open(best))["rebalance"]["rank_speeds"]
        print(f"best fixed split: --rank-speeds "
              f"{','.join(f'{v:g}' for v in speeds)}, "
              f"{steps[best] * 1e3:.1f} ms/step; " + "; ".join(
                  f"{path.split('/')[-1].removesuffix('.json')} "
                  f"{steady_median(json.load(open(path)), first) / steps[best]:.2f}x"
                  for path in a.versus) + " of it")
        return
    if a.header:
        print(f"{'run':<24} {'step/bal':>8} {'bound':>6} {'/bound':>7} "
              f"{'S_off':>6} {'bound':>6} {'/bound':>7} "
              f"{'loss':>7} {'gap':>8}  first decision")
        return
    m, base = json.load(open(a.metrics)), json.load(open(a.baseline))
    first = a.onset + 30
    ratio = steady_median(m, first) / steady_median(base, first)
    bound = a.ranks / (a.ranks - 1 + 1 / a.slowdown)
    measured = (steady_median(json.load(open(a.off)), first) /
                steady_median(base, first))
    bound_measured = a.ranks / (a.ranks - 1 + 1 / measured)
    loss, base_loss = final_loss(m), final_loss(base)
    decisions = m.get("rebalance", {}).get("decisions", [])
    text = "none"
    # A split by --rank-speeds (after step 0) was asked for, not noise.
    given = [e for e in decisions
             if e["reason"].startswith("rank speeds given")]
    decisions = [e for e in decisions if e not in given]
    # Decisions before the onset answered timing noise: the time to decide
    # counts from the onset to the first decision after it.
    early = [e for e in decisions if e["step"] < a.onset]
    late = [e for e in decisions if e["step"] >= a.onset]
    if decisions:
        moved = sum(e["bytes_moved"] for e in decisions)
        text = f"{len(decisions)} re-plans, {moved / 1e6:.2f} MB moved"
        if late:
            d = late[0]
            seconds = sum(r["seconds"] for r in m["loss_curve"]
                          if a.onset <= r["step"] <= d["step"])
            text = (f"{d['action']} after step {d['step']} "
                    f"({d['step'] - a.onset + 1} steps, {seconds:.2f} s "
                    f"after the onset); {text}")
        if early:
            text += (f"; {len(early)} before the onset (noise; the first "
                     f"a {early[0]['action']} after step {early[0]['step']})")
    if given:
        speeds = ",".join(f"{v:g}" for v in m["rebalance"]["rank_speeds"])
        text = (f"split by --rank-speeds {speeds} before step 1, "
                f"{given[0]['bytes_moved'] / 1e6:.2f} MB moved; "
                + ("no other re-plan" if not decisions else text))
    print(f"{a.name:<24} {ratio:8.2f} {bound:6.2f} {ratio / bound:7.2f} "
          f"{measured:6.2f} {bound_measured:6.2f} "
          f"{ratio / bound_measured:7.2f} "
          f"{loss:7.4f} {loss - base_loss:+8.4f}  {text}")


if __name__ == "__main__":
    main()
