"""Every rank: continues prompts with a plan; rank 0 writes the new tokens.

    generate.py PLAN OUT_JSON
"""

import json
import sys

import tpc

plan, out_path = sys.argv[1:3]
session = tpc.Session(plan, device="cpu")
sampled = session.generate([[5, 6, 7]], max_new_tokens=12, temperature=0.9,
                           top_k=30, seed=11, ignore_eos=True)
greedy = session.generate([[40, 41, 42, 43]], max_new_tokens=6,
                          ignore_eos=True)
if tpc.rank() == 0:
    with open(out_path, "w") as f:
        json.dump({"sampled": sampled, "greedy": greedy}, f)
