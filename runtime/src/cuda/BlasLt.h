// The CUDA backend's products through cuBLASLt: bf16 or f32 operands as
// they are stored (no conversion kernels), f32 accumulation, and the
// epilogues tpc's fused ops name (bias, GELU with its preactivation kept,
// the GELU gradient with the bias gradient). One algorithm per product
// shape and operand alignment (DeviceLibraries.h's GemmKey), chosen by
// cuBLASLt's heuristic the first time and kept, so that a recorded step
// (a CUDA graph) only finds plans. A product cuBLASLt has no algorithm for
// is reported once and left to the caller's cuBLAS path.
#pragma once

#include "tpc/runtime/DeviceLibraries.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tpc::runtime::cuda {

/// The device pointers of one product (DeviceLibraries.h's RowMajorProduct
/// says which of bias and aux it reads or writes).
struct LtOperands {
  const void *lhs = nullptr, *rhs = nullptr;
  void *out = nullptr;
  /// The bias (read), or the bias gradient (written).
  void *bias = nullptr;
  /// The preactivation: written by BiasGeluAux, read by GeluGrad*.
  void *aux = nullptr;
  float alpha = 1.0f;
};

class BlasLt {
public:
  /// `workspace` (device memory of `workspaceBytes`) is shared with cuBLAS:
  /// both run in the backend's stream order.
  BlasLt(void *workspace, uint64_t workspaceBytes);
  ~BlasLt();
  BlasLt(const BlasLt &) = delete;
  BlasLt &operator=(const BlasLt &) = delete;

  /// Enqueues `product` on `stream` and returns true, or returns false with
  /// nothing enqueued when cuBLASLt cannot run it (device::whyNotBlasLt, or
  /// no algorithm): the reason is written to `note` the first time a key
  /// falls back (empty otherwise). Errors in a run throw.
  bool run(const device::RowMajorProduct &product, const LtOperands &operands,
           cudaStream_t stream, std::string &note);

  /// "cuBLASLt 130100".
  std::string description() const;
  size_t plans() const;
  uint64_t builds() const;

private:
  struct Plan;
  struct State;
  std::unique_ptr<State> state;
};

} // namespace tpc::runtime::cuda
