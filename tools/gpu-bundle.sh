#!/usr/bin/env bash
# Packs what tp-run needs on a machine that has an NVIDIA driver, the CUDA
# toolkit or PyTorch (for cuBLAS) and python3, but none of our Debian
# packages (the device machines of docs/gpu.md): tp-run, the runtime tests,
# the compiler's tools (so the integration tests run there unchanged, with
# DIR as their build directory), the shared libraries they load besides
# glibc, libstdc++ and CUDA's (LLVM's among them), and OpenMPI's launcher
# with its components, relocated. On that machine `source DIR/env.sh` sets
# PATH, LD_LIBRARY_PATH (with cuBLAS from the CUDA toolkit or PyTorch's
# nvidia-cublas) and OpenMPI's prefix; tools/gpu-check.sh runs the checks.
#
#   tools/gpu-bundle.sh [DIR]      (default: .gpu-bundle, ignored by git)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${1:-$root/.gpu-bundle}
arch=x86_64-linux-gnu
ompi=/usr/lib/$arch/openmpi
pmix=/usr/lib/$arch/pmix2

grep -q '^TPC_HAVE_CUDA\|CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" 2>/dev/null ||
  { echo "gpu-bundle: $build has no CUDA backend (run tools/build.sh where nvcc is found)" >&2; exit 1; }
# Only a bundle this script made is replaced: never a folder or file of the
# user's that happens to have the name.
marker=.tpc-gpu-bundle
if [ -e "$out" ] && [ ! -e "$out/$marker" ]; then
  echo "gpu-bundle: $out exists and is not a bundle; name another DIR" >&2
  exit 1
fi
if [ -e "$out.tar.xz" ] && [ ! -e "$out/$marker" ]; then
  echo "gpu-bundle: $out.tar.xz exists and is not this bundle's; name another DIR" >&2
  exit 1
fi
ninja -C "$build" tp-run tpc-runtime-tests tpc-tokenize tpc-import tpc-opt > /dev/null
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/lib/$arch/openmpi/lib" "$out/share" \
  "$out/etc" "$out/pmix2/lib"
touch "$out/$marker"
cp "$build"/bin/{tp-run,tpc-tokenize,tpc-import,tpc-opt} \
  "$build/test/tpc-runtime-tests" "$out/bin/"
# Symbols only weigh: the bundle must fit the device tool's carry limit.
strip --strip-unneeded "$out"/bin/{tp-run,tpc-tokenize,tpc-import,tpc-opt,tpc-runtime-tests}
cp /usr/bin/orterun "$out/bin/mpirun"
cp /usr/bin/orted "$out/bin/"
cp -r "$ompi/lib/openmpi3" "$out/lib/$arch/openmpi/lib/"
cp -r /usr/share/openmpi "$out/share/"
cp -r /etc/openmpi "$out/etc/"
cp -r "$pmix/lib/pmix" "$out/pmix2/lib/"
[ -d "$pmix/share" ] && cp -r "$pmix/share" "$out/pmix2/"

# Libraries the target machine has (or must supply itself): glibc's, the C++
# runtime (theirs is at least as new) and CUDA's (the driver's and cuBLAS).
keep_theirs='^(ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libcudart|libnccl|libcudnn|libnvrtc|libnvidia)\.'
copy_deps() { # FILE...: copies each library FILE loads that they lack
  ldd "$@" 2>/dev/null | awk '/=> \// { print $3 }' | sort -u |
    while read -r lib; do
      name=$(basename "$lib")
      [[ $name =~ $keep_theirs ]] && continue
      [ -e "$out/lib/$name" ] || cp -L "$lib" "$out/lib/$name"
    done
}
copy_deps "$out"/bin/*
# Components of transports one machine does not use (InfiniBand, UCX,
# libfabric, shared-memory OpenSHMEM) would only add weight; those whose
# libraries are missing here would fail to load there. Drop both, then copy
# the rest's libraries.
rm -f "$out/lib/$arch/openmpi/lib/openmpi3"/mca_{btl_openib,btl_uct,btl_ofi,pml_ucx,osc_ucx,mtl_ofi,mtl_psm,mtl_psm2,atomic_ucx,spml_ucx,sshmem_ucx}*.so
rm -f "$out/lib/$arch/openmpi/lib/openmpi3"/mca_{spml,sshmem,scoll,atomic,memheap}_*.so
for component in "$out/lib/$arch/openmpi/lib/openmpi3"/*.so "$out/pmix2/lib/pmix"/*.so; do
  if ldd "$component" | grep -q "not found"; then
    rm "$component"
  else
    copy_deps "$component"
  fi
done

cat > "$out/env.sh" <<'SH'
# Sourced on the GPU machine: tp-run, mpirun and their libraries from this
# folder; cuBLAS(Lt), NCCL, cuDNN (loaded at run time) and the CUDA runtime
# cudnn-frontend loads from the CUDA toolkit or PyTorch's nvidia-* wheels.
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cublas=$(python3 - <<'PY' 2>/dev/null || true
import glob, os
import nvidia
dirs = []
for root in nvidia.__path__:
    for name in ("libcublas.so.13", "libnccl.so.2", "libcudnn.so.9",
                 "libcudart.so.13", "libnvrtc.so.13"):
        for path in glob.glob(os.path.join(root, "**", name), recursive=True):
            if os.path.dirname(path) not in dirs:
                dirs.append(os.path.dirname(path))
print(":".join(dirs))
PY
)
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [ -e "$dir/libcublas.so.13" ] && cublas="$dir${cublas:+:$cublas}"
done
export PATH="$bundle/bin:$PATH"
export LD_LIBRARY_PATH="$bundle/lib${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$bundle" OPAL_SYSCONFDIR="$bundle/etc/openmpi"
export PMIX_INSTALL_PREFIX="$bundle/pmix2"
export PMIX_MCA_mca_base_component_path="$bundle/pmix2/lib/pmix"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SH
# One compressed file to carry (the device tool's carry limit is 64 MiB for
# it, the site wheels and the tree: xz's strongest setting keeps about 6 MiB
# spare): unpack it there with tar -xJf.
XZ_OPT="-T0 -9e" tar -cJf "$out.tar.xz.tmp.$$" -C "$(dirname "$out")" "$(basename "$out")"
mv "$out.tar.xz.tmp.$$" "$out.tar.xz"
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)), $out.tar.xz ($(du -h "$out.tar.xz" | cut -f1))"
