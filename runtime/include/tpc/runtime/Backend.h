// The device interface the executor runs programs through: a small HAL in
// the manner of IREE's (device, buffers, dispatches, an in-order queue).
// ProgramRunner owns the plan-level work (binding tensors to storage, the
// order of steps, timing); a backend owns memory on its device and one
// kernel per plan op kind (OpTable.h). The CPU backend runs each dispatch
// as it is enqueued; a GPU backend enqueues onto a stream and
// synchronize() waits for it.
#pragma once

#include "tpc/runtime/Plan.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace tpc::runtime {

class GridComm;

/// Device memory allocated by a backend; freed when destroyed.
class Buffer {
public:
  virtual ~Buffer() = default;
  /// The first byte, aligned to 64 bytes.
  virtual std::byte *data() = 0;
  virtual uint64_t size() const = 0;
};

/// One tensor of a dispatch: device memory plus its local shape.
struct TensorBinding {
  std::byte *data = nullptr;
  std::span<const int64_t> shape;
  int64_t elements = 0;

  float *f32() const { return reinterpret_cast<float *>(data); }
  const int32_t *i32() const { return reinterpret_cast<const int32_t *>(data); }
  /// The value of an i64 scalar (the step counter).
  int64_t i64Scalar() const { return *reinterpret_cast<const int64_t *>(data); }
};

/// Everything one kernel launch reads: the step (kind and attributes), its
/// bound operands and results, and the communicator of the collectives and
/// vocabulary-parallel ops (null when the run has none).
struct Dispatch {
  const plan::Step &step;
  std::span<const TensorBinding> operands;
  std::span<const TensorBinding> results;
  GridComm *comm;

  /// The step's integer attributes; absent is empty.
  std::span<const int64_t> ints() const { return stepInts(step); }
};

/// A kernel runs one dispatch; it throws std::runtime_error with a one-line
/// message on what the loader cannot check (a token id outside the
/// vocabulary).
using Kernel = void (*)(const Dispatch &);

class Backend {
public:
  virtual ~Backend() = default;

  /// A short name for messages and reports ("cpu").
  virtual std::string_view name() const = 0;
  /// `bytes` bytes of device memory (at least one byte is allocated).
  virtual std::unique_ptr<Buffer> allocate(uint64_t bytes) = 0;
  /// Queues one step; steps run in the order they are queued.
  virtual void enqueue(const Dispatch &dispatch) = 0;
  /// Waits until everything queued has run; rethrows a kernel's error.
  virtual void synchronize() = 0;
};

/// The CPU backend: OpenBLAS GEMMs and our vectorised kernels on the kernel
/// thread pool (cpu/Kernels.h). One instance serves the whole process.
Backend &cpuBackend();

} // namespace tpc::runtime
