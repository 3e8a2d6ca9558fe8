// The device interface the executor runs programs through: a small HAL in
// the manner of IREE's (device, buffers, dispatches, an in-order queue).
// ProgramRunner owns the plan-level work (binding tensors to storage, the
// order of steps, timing); a backend owns memory on its device and one
// kernel per plan op kind (OpTable.h). The CPU backend runs each dispatch
// as it is enqueued; a GPU backend enqueues onto a stream and
// synchronize() waits for it.
#pragma once

#include "tpc/runtime/Plan.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::runtime {

class GridComm;
class CollectiveChannel;

/// Device memory allocated by a backend; freed when destroyed.
class Buffer {
public:
  virtual ~Buffer() = default;
  /// The first byte, aligned to 64 bytes.
  virtual std::byte *data() = 0;
  virtual uint64_t size() const = 0;
};

/// One tensor of a dispatch: device memory plus its local shape and element
/// type (a float tensor is f32 or, under mixed precision, bf16).
struct TensorBinding {
  std::byte *data = nullptr;
  std::span<const int64_t> shape;
  int64_t elements = 0;
  plan::DType dtype = plan::DType::F32;

  uint64_t bytes() const {
    return uint64_t(elements) * uint64_t(dtypeSize(dtype));
  }
  float *f32() const { return reinterpret_cast<float *>(data); }
  /// A bf16 tensor's elements: the high 16 bits of the f32 values.
  uint16_t *bf16() const { return reinterpret_cast<uint16_t *>(data); }
  const int32_t *i32() const { return reinterpret_cast<const int32_t *>(data); }
  /// The value of an i64 scalar (the step counter).
  int64_t i64Scalar() const { return *reinterpret_cast<const int64_t *>(data); }
  /// Elements per row of a [rows, ...] tensor (0 without rows).
  int64_t rowElements() const {
    return shape.empty() || shape[0] == 0 ? 0 : elements / shape[0];
  }
};

/// Everything one kernel launch reads: the step (kind and attributes), its
/// bound operands and results, and the communicator of the collectives and
/// vocabulary-parallel ops (null when the run has none).
struct Dispatch {
  const plan::Step &step;
  std::span<const TensorBinding> operands;
  std::span<const TensorBinding> results;
  GridComm *comm;
  /// The step's activations are stored in bf16 and this dispatch's bindings
  /// are f32 copies of them (a backend running an f32 kernel on widened
  /// operands): products round their operands, and the probabilities of an
  /// attention, to bf16, as kernels on bf16 tensors do.
  bool bf16Products = false;
  /// What a step that exchanges data moves it over (the runner's choice:
  /// the backend's own channel for its native steps, else MPI on the host);
  /// null without a grid.
  CollectiveChannel *channel = nullptr;

  /// The step's integer attributes; absent is empty.
  std::span<const int64_t> ints() const { return stepInts(step); }
};

/// A kernel runs one dispatch; it throws std::runtime_error with a one-line
/// message on what the loader cannot check (a token id outside the
/// vocabulary).
using Kernel = void (*)(const Dispatch &);

/// Steps recorded once and submitted any number of times (a CUDA graph):
/// the same kernels on the same buffers, with the values those hold at each
/// submission.
class CommandBuffer {
public:
  virtual ~CommandBuffer() = default;
  /// Queues the recorded steps; Backend::synchronize waits for them.
  virtual void submit() = 0;
};

/// What a backend's device is, for describing the machine to the step
/// simulator (Calibration.h).
struct DeviceDescription {
  /// "AMD EPYC (2 cores)", "NVIDIA H100 80GB HBM3".
  std::string name;
  uint64_t memoryBytes = 0;
  /// Devices of this kind on one machine: 1 for the host CPU, which every
  /// rank on the machine shares; the GPUs a machine has.
  int perMachine = 1;
  /// Ranks of one thread that can compute at once at full speed when they
  /// share the device: the host CPU's cores; 0 for a GPU (one rank's
  /// kernels at a time).
  int cores = 0;
};

/// The host CPU: its model, cores, memory.
DeviceDescription hostDescription();

class Backend {
public:
  virtual ~Backend() = default;

  /// A short name for messages and reports ("cpu").
  virtual std::string_view name() const = 0;
  /// Whether the host may read and write this backend's buffers through
  /// Buffer::data() (CPU memory). When not, the executor moves parameters,
  /// inputs and results with upload() and download() only.
  virtual bool hostVisible() const = 0;
  /// `bytes` bytes of device memory (at least one byte is allocated).
  virtual std::unique_ptr<Buffer> allocate(uint64_t bytes) = 0;
  /// Copies `bytes` bytes from the host to `device` after everything
  /// queued; `host` may be reused once this returns.
  virtual void upload(std::byte *device, const void *host, uint64_t bytes) = 0;
  /// Waits for everything queued, then copies `bytes` bytes at `device` to
  /// the host.
  virtual void download(void *host, const std::byte *device,
                        uint64_t bytes) = 0;
  /// Copies `rows.size()` rows of `rowBytes` bytes, packed in order at
  /// `host`, into rows `rows[i]` of the row-major array at `device` (an
  /// embedding cache's misses); one transfer where the device can (the
  /// default copies row by row). `host` may be reused once this returns.
  virtual void uploadRows(std::byte *device, uint64_t rowBytes,
                          std::span<const int64_t> rows, const void *host);
  /// The reverse: rows `rows[i]` of `device` packed in order into `host`
  /// (a cache's victims), after everything queued.
  virtual void downloadRows(void *host, const std::byte *device,
                            uint64_t rowBytes, std::span<const int64_t> rows);
  /// Whether this backend runs `step` itself. The executor runs any other
  /// step staged: its operands downloaded, the CPU kernel on host copies,
  /// its results uploaded (how several ranks share one GPU over MPI).
  virtual bool runsNatively(const plan::Step &step) const = 0;
  /// Queues one step it runs natively; steps run in the order they are
  /// queued.
  virtual void enqueue(const Dispatch &dispatch) = 0;
  /// Waits until everything queued has run; rethrows a kernel's error.
  virtual void synchronize() = 0;
  /// Records the steps `enqueueSteps` enqueues (all run natively) into a
  /// command buffer instead of running them; null when this backend cannot
  /// (the CPU runs each step as it is queued). Nothing may be allocated,
  /// uploaded or downloaded while recording.
  virtual std::unique_ptr<CommandBuffer>
  record(const std::function<void()> &enqueueSteps) {
    (void)enqueueSteps;
    return nullptr;
  }
  /// The most device memory this backend's buffers held at once, when the
  /// device is not the host (the CPU's is in the process's RSS).
  virtual uint64_t peakDeviceBytes() const { return 0; }
  /// The device this backend computes on (the host CPU by default).
  virtual DeviceDescription describeDevice() const { return hostDescription(); }
  /// Called on every rank once the grid's communicator exists (collective
  /// over the world): a backend may set up its own path between devices
  /// (NCCL when every rank has a GPU of its own). Without one, steps that
  /// exchange data run staged through the host over MPI.
  virtual void connect(GridComm &grid) { (void)grid; }
  /// The channel the steps that exchange data and run natively here move
  /// it over, when the backend has a transport of its own (NCCL, after
  /// connect); null: MPI on the host, as every staged step.
  virtual CollectiveChannel *channel() { return nullptr; }
  /// How steps that use the grid reach other ranks, for the progress line
  /// ("host memory", "MPI staged through the host", "NCCL").
  virtual std::string collectivePath() const;
  /// Which libraries and kernels compute the steps, chosen at start-up, for
  /// the progress log and metrics ("products: OpenBLAS (Haswell), ...").
  virtual std::string kernelLibraries() const;
};

/// Every device name, also one this build lacks (deviceBackend then says
/// why): "cpu", "cuda" and "staged-cpu" (stagedTestBackend).
inline constexpr std::array<std::string_view, 3> kDeviceNames = {"cpu", "cuda",
                                                                 "staged-cpu"};
/// The devices this build runs on: kDeviceNames without "cuda" when built
/// without the CUDA toolkit.
std::vector<std::string> deviceNames();
/// The backend of `--device NAME`, on GPU `ordinal` of the machine for
/// cuda. Throws std::invalid_argument with a one-line reason: an unknown
/// name, a build without CUDA, no usable GPU.
Backend &deviceBackend(std::string_view name, int ordinal = 0);
/// "cuda" when this build has it and a GPU is visible, else "cpu".
std::string defaultDevice();

/// The CPU backend: OpenBLAS GEMMs and our vectorised kernels on the kernel
/// thread pool (cpu/Kernels.h). One instance serves the whole process.
Backend &cpuBackend();

/// The op kinds the loader accepts that the CPU backend has no kernel for,
/// and (in a build with the CUDA backend) those the CUDA backend must run
/// natively and lacks: empty, checked by the unit tests without a device.
/// Each backend's kernels come from one list (KernelRegistry, OpTable.h).
std::vector<plan::OpKind> cpuKernelsMissing();
std::vector<plan::OpKind> cudaKernelsMissing();

/// The CPU kernels behind memory the host cannot address: a buffer's data()
/// is an address that faults when dereferenced, and upload/download
/// translate it. Steps that exchange data with other ranks run staged,
/// every other step on the CPU kernels. Checks, without a GPU, the discipline
/// the CUDA backend relies on (nothing reads device memory but the backend).
/// One instance.
Backend &stagedTestBackend();

} // namespace tpc::runtime
