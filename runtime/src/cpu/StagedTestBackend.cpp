// A test device for the host/device discipline (Backend.h): CPU memory the
// host may not address directly.

#include "tpc/runtime/Backend.h"

#include "tpc/runtime/CollectiveChannel.h"
#include "tpc/runtime/OpTable.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tpc::runtime {

namespace {

// Added to every address handed out: the result is non-canonical on x86-64,
// so any dereference by the host faults at once.
constexpr uintptr_t kDeviceOffset = uintptr_t(1) << 62;

std::byte *toDevice(std::byte *host) {
  return reinterpret_cast<std::byte *>(reinterpret_cast<uintptr_t>(host) +
                                       kDeviceOffset);
}
std::byte *toHost(const std::byte *device) {
  return reinterpret_cast<std::byte *>(reinterpret_cast<uintptr_t>(device) -
                                       kDeviceOffset);
}

class FaultingBuffer final : public Buffer {
public:
  FaultingBuffer(uint64_t bytes, uint64_t &live, uint64_t &peak)
      : memory(cpuBackend().allocate(bytes)), live(live) {
    live += bytes;
    peak = std::max(peak, live);
  }
  ~FaultingBuffer() override { live -= memory->size(); }
  std::byte *data() override { return toDevice(memory->data()); }
  uint64_t size() const override { return memory->size(); }

private:
  std::unique_ptr<Buffer> memory;
  uint64_t &live;
};

/// The device's own path between stages, matched as NCCL matches its
/// point-to-point calls: every transfer between two ranks carries one MPI
/// tag, so the k-th send meets the k-th receive whatever the plan's tags
/// (MPI keeps messages of one tag in order). The runner gives it a plan's
/// transfers only when the loader proved their order, as it does NCCL;
/// collectives still run staged.
class InOrderTransfers final : public CollectiveChannel {
public:
  explicit InOrderTransfers(GridComm &grid) : mpi(grid) {}

  std::string_view transport() const override { return "MPI, one tag"; }
  bool waitsOnHost() const override { return true; }
  bool matchesTransfersByTag() const override { return false; }
  void allReduceSum(const std::vector<int> &, WireType, void *,
                    size_t) override {
    stagedOnly();
  }
  void allGather(const std::vector<int> &, WireType, const void *, void *,
                 size_t) override {
    stagedOnly();
  }
  void reduceScatterSum(const std::vector<int> &, WireType, const void *,
                        void *, size_t) override {
    stagedOnly();
  }
  void allToAll(const std::vector<int> &, WireType, const void *, void *,
                size_t) override {
    stagedOnly();
  }
  void startShift(const std::vector<int> &, WireType, const void *, void *,
                  size_t) override {
    stagedOnly();
  }
  void finishShift(const void *) override { stagedOnly(); }
  void startSend(int axis, int64_t peer, int, WireType type, const void *in,
                 size_t count) override {
    mpi.startSend(axis, peer, kTag, type, in, count);
  }
  void startReceive(int axis, int64_t peer, int, WireType type, void *out,
                    size_t count) override {
    mpi.startReceive(axis, peer, kTag, type, out, count);
  }
  void finishTransfer(const void *buffer) override {
    mpi.finishTransfer(buffer);
  }

private:
  static constexpr int kTag = 0;
  [[noreturn]] static void stagedOnly() {
    throw std::logic_error("staged-cpu: collectives run staged");
  }
  /// MPI on the host, given one tag for every transfer.
  MpiChannel mpi;
};

class StagedTestBackend final : public Backend {
public:
  std::string_view name() const override { return "staged-cpu"; }
  bool hostVisible() const override { return false; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    return std::make_unique<FaultingBuffer>(bytes, live, peak);
  }
  uint64_t peakDeviceBytes() const override { return peak; }
  void upload(std::byte *device, const void *host, uint64_t bytes) override {
    std::memcpy(toHost(device), host, bytes);
  }
  void download(void *host, const std::byte *device, uint64_t bytes) override {
    std::memcpy(host, toHost(device), bytes);
  }
  // As a GPU whose collectives go through the host: what exchanges data
  // does, except the transfers between stages once connected.
  bool runsNatively(const plan::Step &step) const override {
    return !stepExchanges(step) ||
           (transfers && isPipelineTransfer(step.kind()));
  }
  void connect(GridComm &grid) override {
    transfers = std::make_unique<InOrderTransfers>(grid);
  }
  CollectiveChannel *channel() override { return transfers.get(); }
  void enqueue(const Dispatch &d) override {
    RecordedStep step{&d.step, {}, {}, d.comm, d.bf16Products, d.channel};
    auto translate = [](const TensorBinding &t) {
      return TensorBinding{t.data ? toHost(t.data) : nullptr, t.shape,
                           t.elements, t.dtype};
    };
    for (const TensorBinding &t : d.operands)
      step.operands.push_back(translate(t));
    for (const TensorBinding &t : d.results)
      step.results.push_back(translate(t));
    if (recording)
      recording->steps.push_back(std::move(step));
    else
      step.run();
  }
  void synchronize() override { cpuBackend().synchronize(); }
  // As a CUDA graph: the steps' kernels and buffers, run again on submit.
  std::unique_ptr<CommandBuffer>
  record(const std::function<void()> &enqueueSteps) override {
    auto steps = std::make_unique<RecordedSteps>();
    recording = steps.get();
    try {
      enqueueSteps();
    } catch (...) {
      recording = nullptr;
      throw;
    }
    recording = nullptr;
    return steps;
  }

private:
  struct RecordedStep {
    const plan::Step *step;
    std::vector<TensorBinding> operands, results;
    GridComm *comm;
    bool bf16Products;
    CollectiveChannel *channel;
    void run() const {
      cpuBackend().enqueue(
          {*step, operands, results, comm, bf16Products, channel});
    }
  };
  struct RecordedSteps final : CommandBuffer {
    std::vector<RecordedStep> steps;
    void submit() override {
      for (const RecordedStep &step : steps)
        step.run();
    }
  };
  RecordedSteps *recording = nullptr;
  uint64_t live = 0, peak = 0;
  std::unique_ptr<InOrderTransfers> transfers;
};

} // namespace

Backend &stagedTestBackend() {
  static StagedTestBackend backend;
  return backend;
}

} // namespace tpc::runtime
