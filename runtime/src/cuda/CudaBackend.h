// The CUDA backend (built when CMake finds the CUDA toolkit): device memory,
// one stream, cuBLAS GEMMs and our kernels (Kernels.h). Steps that use the
// grid run over NCCL when every rank has a GPU of its own, else staged
// through the host over MPI (Backend::runsNatively).
#pragma once

#include "tpc/runtime/Backend.h"

#include <string>

namespace tpc::runtime {

/// Why no GPU can be used (no device, no driver, a driver older than the
/// runtime), or empty when one can.
std::string cudaUnavailable();
/// The backend on GPU `ordinal` modulo the visible GPUs (ranks on one machine
/// pass their local rank). Created on first use; one per process.
Backend &cudaBackend(int ordinal);

} // namespace tpc::runtime
