"""The runtime's libraries use only the layers below them (runtime/CMakeLists.txt).

    runtime-layers.py LIBRARY_DIR

For every pair of libraries, fails if one references a symbol that another
it may not use defines (read with nm), and if the plan or text layers
reference MPI, BLAS or CUDA. A call across the layers added by mistake
shows here, not as a link error in some later program.
"""
import subprocess
import sys

# Each library and the libraries it may use, directly or not.
ALLOWED = {
    "support": set(),
    "plan": {"support"},
    "comm": {"support"},
    "text": {"support"},
    "hal": {"support", "plan", "comm", "cuda_kernels"},
    "exec": {"support", "plan", "comm", "hal", "cuda_kernels"},
    "infer": {"support", "plan", "comm", "hal", "exec", "text",
              "cuda_kernels"},
    "train": {"support", "plan", "comm", "hal", "exec", "text", "infer",
              "cuda_kernels"},
    "session": {"support", "plan", "comm", "hal", "exec", "text", "infer",
                "train", "cuda_kernels"},
}
# Foreign symbols the lower layers must not need.
FORBIDDEN = {"plan": ("MPI_", "ompi_", "cblas_", "cuda", "nccl"),
             "text": ("MPI_", "ompi_", "cblas_", "cuda", "nccl"),
             "comm": ("cblas_", "cuda")}


def symbols(path, *flags):
    out = subprocess.run(["nm", "-P", *flags, path], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].endswith(":"):
            names.add(parts[0])
    return names


def main():
    directory = sys.argv[1]
    libraries = dict(ALLOWED)
    defined, undefined = {}, {}
    for name in list(libraries) + ["cuda_kernels"]:
        path = f"{directory}/libtpc_{name}.a"
        try:
            defined[name] = symbols(path, "--defined-only")
            undefined[name] = symbols(path, "-u")
        except (subprocess.CalledProcessError, FileNotFoundError):
            if name == "cuda_kernels":  # built only with nvcc
                continue
            sys.exit(f"runtime-layers: cannot read {path}")
    failures = []
    for name, allowed in ALLOWED.items():
        for other, provides in defined.items():
            if other == name or other in allowed:
                continue
            # Symbols both define (inline functions, templates) are no use.
            used = (undefined[name] & provides) - defined[name]
            if used:
                sample = ", ".join(sorted(used)[:3])
                failures.append(f"tpc_{name} uses tpc_{other}: {sample}")
        for prefix in FORBIDDEN.get(name, ()):
            bad = sorted(s for s in undefined[name] if s.startswith(prefix))
            if bad:
                failures.append(f"tpc_{name} needs {prefix}*: {bad[0]}")
    for failure in failures:
        print("runtime-layers:", failure)
    if failures:
        sys.exit(1)
    print(f"runtime-layers: {len(ALLOWED)} libraries keep to their layers")


main()
