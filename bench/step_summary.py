"""Summarises a tp-run metrics file (--metrics) for the benchmarks:
prints the median step time (steps after the first, the warm-up), the
seconds per step spent in communication steps (tp-run's op statistics: a
blocking collective's whole call, a ring shift's start and wait calls, i.e.
the part not overlapped) and the bytes sent per step by kind, as JSON.

    python3 bench/step_summary.py METRICS
"""
import json
import statistics
import sys

# A local split moves nothing (a slice of data the rank holds): not counted.
COMMUNICATION = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll",
                 "RingShiftStart", "RingShiftWait")

m = json.load(open(sys.argv[1]))
steps = [r["seconds"] for r in m["loss_curve"]][1:]
n = len(m["loss_curve"])
seconds = sum(v["seconds"] for k, v in m["ops"].items()
              if k in COMMUNICATION) / n
sent = {k: v["bytes_per_step"] for k, v in m["communication"].items()
        if v["bytes"]}
print(f"{statistics.median(steps):.4f} {seconds:.4f} "
      f"{json.dumps(sent, sort_keys=True).replace(' ', '')}")
