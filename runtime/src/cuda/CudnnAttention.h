// cuDNN's fused scaled dot-product attention (flash attention forward and
// backward on the tensor cores) for the CUDA backend's bf16 tp.attention
// and tp.attention_grad, built through cudnn-frontend's graph API: one
// graph per shape (DeviceLibraries.h's SdpaKey), built the first time and
// kept, so that a recorded step (a CUDA graph) only finds graphs. A shape
// cuDNN cannot build is reported once and left to tpc's own kernels.
// Compiled only with cuDNN (TPC_HAVE_CUDNN).
#pragma once

#include "tpc/runtime/DeviceLibraries.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tpc::runtime::cuda {

/// Device memory of at least the given bytes, valid until the next call
/// (the backend's grow-only scratch).
using Workspace = std::function<void *(uint64_t bytes)>;

/// tp.attention's tensors (bf16 query, key, value and result; f32
/// logsumexp, cuDNN's softmax statistics).
struct SdpaForward {
  const void *query = nullptr, *key = nullptr, *value = nullptr;
  void *result = nullptr;
  float *logsumexp = nullptr;
};
/// tp.attention_grad's.
struct SdpaBackward {
  const void *resultGrad = nullptr, *query = nullptr, *key = nullptr,
             *value = nullptr, *result = nullptr;
  const float *logsumexp = nullptr;
  void *queryGrad = nullptr, *keyGrad = nullptr, *valueGrad = nullptr;
};

class CudnnAttention {
public:
  /// cuDNN as this process sees it on GPU `device`: its version, the GPU's
  /// compute capability and TPC_CUDNN=0.
  static device::AttentionLibrary probe(int device);
  /// Defines `key`'s graph for a GPU of `computeCapability` and has
  /// cudnn-frontend validate it, on the host (no GPU needed): empty when
  /// valid, else why not.
  static std::string validate(const device::SdpaKey &key,
                              int computeCapability);

  /// On the GPU of `computeCapability` (probe's) that runs `stream`.
  CudnnAttention(cudaStream_t stream, int computeCapability);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Enqueue the step on the stream and return true, or return false with
  /// nothing enqueued when cuDNN has no plan for `key` (`note` says why the
  /// first time). Errors in a run throw.
  bool forward(const device::SdpaKey &key, const SdpaForward &tensors,
               const Workspace &workspace, std::string &note);
  bool backward(const device::SdpaKey &key, const SdpaBackward &tensors,
                const Workspace &workspace, std::string &note);

  size_t graphs() const;

private:
  struct State;
  std::unique_ptr<State> state;
};

} // namespace tpc::runtime::cuda
