"""Peak resident memory of two commands, compared.

    rss-ratio.py LIMIT CMD_A... --- CMD_B...

Runs each command (which must succeed) and fails unless B's peak RSS is at
most LIMIT times A's: a memory test as a ratio on one machine, so that it
holds on any machine and under sanitizers.
"""
import resource
import subprocess
import sys


def peak_rss_kb(command):
    # ru_maxrss of RUSAGE_CHILDREN is the largest of the children waited for
    # so far, so each command runs in a child of its own.
    child = subprocess.run(
        [sys.executable, "-c",
         "import resource, subprocess, sys\n"
         "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n",
         *command],
        check=True, capture_output=True, text=True)
    return int(child.stdout.strip())


def main():
    limit = float(sys.argv[1])
    rest = sys.argv[2:]
    split = rest.index("---")
    a, b = peak_rss_kb(rest[:split]), peak_rss_kb(rest[split + 1:])
    ratio = b / a
    print(f"peak RSS {a} KB then {b} KB: {ratio:.2f}x (limit {limit}x)")
    if ratio > limit:
        sys.exit(1)


main()
