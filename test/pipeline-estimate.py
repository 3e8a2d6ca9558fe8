#!/usr/bin/env python3
"""Checks mode=auto's stage-level estimate of a pipelined choice against the
op-level replay of the choice compiled whole, both read from the "chose"
remark: "... chose ...: X ms per step, ... estimated Y ms from one
micro-batch's layers ...". Prints both and fails unless the relative error
Y / X - 1 lies in [LOW, HIGH] (both are deterministic predictions, so the
band can be narrow and one-sided).

  pipeline-estimate.py REMARKS LOW HIGH
"""
import re
import sys

text = open(sys.argv[1]).read()
low, high = float(sys.argv[2]), float(sys.argv[3])
match = re.search(r"mode=auto: chose .*?: ([0-9.]+) ms per step,.*"
                  r"estimated ([0-9.]+) ms from one micro-batch", text)
if not match:
    sys.exit("no pipelined choice with its estimate in " + sys.argv[1])
replayed, estimated = float(match.group(1)), float(match.group(2))
error = estimated / replayed - 1
print(f"replayed {replayed} ms, estimated {estimated} ms, error {error:+.4f}")
if not low <= error <= high:
    sys.exit(f"the estimate is off by {error:+.4f}, outside [{low}, {high}]")
