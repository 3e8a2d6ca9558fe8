"""Compile-only scale table (bench/scale-table.sh): a GPT-3-style model on
64 and 8 ranks under each scheme. Per case: bytes and collective calls per rank
per step (tp-report-communication), planned memory per rank (parameters,
AdamW moments, the step's activation arena from tp-plan-memory), and the
compiler's wall time and peak resident memory for emitting the plan.

  scale_table.py BUILD_DIR WORK_DIR [--batch B] [--runs N]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

CASES = [  # ranks, mode, grid, seq-parallel
    (64, "1d", "64", True),
    (64, "2d", "8x8", False),
    (64, "2.5d", "4x4x4", False),
    (64, "3d", "4x4x4", False),
    (8, "1d", "8", True),
    (8, "2.5d", "2x2x2", False),
    (8, "3d", "2x2x2", False),
]


def timed(command):
    """Runs `command`; its wall time and peak resident set (bytes)."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.perf_counter()\n"
             "r = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE,"
             " text=True)\n"
             "t = time.perf_counter() - t\n"
             "sys.stderr.write(r.stderr)\n"
             "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "print(t, rss * 1024, r.returncode)\n")
    r = subprocess.run([sys.executable, "-c", probe] + command,
                       capture_output=True, text=True)
    seconds, rss, rc = r.stdout.split()
    if int(rc) != 0:
        sys.exit(f"scale-table: {' '.join(command)} failed:\n{r.stderr}")
    return float(seconds), int(rss), r.stderr


def train_step_memory(mlir_path):
    """Per-rank bytes of parameters, moments and the activation arena of
    @train_step in a partitioned, memory-planned module."""
    text = open(mlir_path).read()
    start = text.index("func.func @train_step(")
    header = text[start:text.index("{\n", text.index(") -> (", start))]
    params = moments = 0
    for shape, attrs in re.findall(
            r"%arg\d+: tensor<([0-9x]*)x?f32(?:, #tp\.dist<[^>]*>)?> \{([^}]*)\}",
            header):
        if "tp.param" not in attrs:
            continue
        count = 1
        for d in filter(None, shape.split("x")):
            count *= int(d)
        if "tp.state" in attrs:
            moments += 4 * count
        else:
            params += 4 * count
    body = text[start:]
    arena = int(re.search(r"tp\.arena_bytes = (\d+)", body)[1])
    return params, moments, arena


def communication(remarks):
    m = re.search(r"@train_step communication per rank:(.*) total ([0-9.e+]+)"
                  r" bytes", remarks)
    calls = sum(int(c) for c in re.findall(r"\((\d+) calls\)", m[1]))
    return float(m[2]), calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("work")
    parser.add_argument("--batch", type=int, default=16,
                        help="sequences per step (3D 4x4x4 needs 16 | B)")
    parser.add_argument("--runs", type=int, default=3,
                        help="compilations per case (median time)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    config = {"model_type": "gpt2", "vocab_size": 51200, "n_embd": 4096,
              "n_layer": 24, "n_head": 64, "n_positions": 2048}
    config_path = os.path.join(args.work, "config.json")
    json.dump(config, open(config_path, "w"))
    model = os.path.join(args.work, "model.mlir")
    subprocess.run([os.path.join(args.build, "bin", "tpc-import"), config_path,
                    "--batch", str(args.batch), "--seq", "2048", "-o", model],
                   check=True, stdout=subprocess.DEVNULL)
    opt = os.path.join(args.build, "bin", "tpc-opt")
    gib = 1 << 30
    print(f"GPT-3-style: h 4096, 64 heads, 24 layers, seq 2048, vocab 51200, "
          f"batch {args.batch} ({args.batch * 2048} tokens per step)")
    print("| ranks | scheme | grid | GiB sent per rank per step | collective "
          "calls | parameters GiB | AdamW moments GiB | activations GiB | "
          "planned peak GiB | compile s | compiler peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for ranks, mode, grid, sp in CASES:
        options = f"mode={mode} grid={grid}" + (" seq-parallel=true" if sp
                                                 else "")
        plan = os.path.join(args.work, f"{mode}-{grid}.tpplan")
        runs = [timed([opt, model, f"--tp-pipeline={options}", "-o", plan])
                for _ in range(args.runs)]
        seconds = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        sent, calls = communication(runs[0][2])
        planned = os.path.join(args.work, f"{mode}-{grid}.mlir")
        subprocess.run([opt, model, f"--tp-pipeline={options}", "-o", planned],
                       check=True, stderr=subprocess.DEVNULL)
        params, moments, arena = train_step_memory(planned)
        peak = params + moments + arena
        print(f"| {ranks} | {mode}{' + SP' if sp else ''} | {grid} | "
              f"{sent / gib:.2f} | {calls} | {params / gib:.3f} | "
              f"{moments / gib:.3f} | {arena / gib:.2f} | {peak / gib:.2f} | "
              f"{seconds:.2f} | {rss / (1 << 20):.0f} |", flush=True)


if __name__ == "__main__":
    main()
