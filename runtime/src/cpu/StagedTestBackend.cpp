// A test device for the host/device discipline (Backend.h): CPU memory the
// host may not address directly.

#include "tpc/runtime/Backend.h"

#include "tpc/runtime/OpTable.h"

#include <algorithm>
#include <array>
#include <cstring>

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
  // As a GPU without a path to the other ranks: what exchanges data goes
  // through the host.
  bool runsNatively(const plan::Step &step) const override {
    return !stepExchanges(step);
  }
  void enqueue(const Dispatch &d) override {
    std::array<TensorBinding, kMaxStepOperands> operands;
    std::array<TensorBinding, kMaxStepResults> results;
    auto translate = [](const TensorBinding &t) {
      return TensorBinding{t.data ? toHost(t.data) : nullptr, t.shape,
                           t.elements};
    };
    for (size_t i = 0; i < d.operands.size(); ++i)
      operands[i] = translate(d.operands[i]);
    for (size_t i = 0; i < d.results.size(); ++i)
      results[i] = translate(d.results[i]);
    cpuBackend().enqueue({d.step,
                          {operands.data(), d.operands.size()},
                          {results.data(), d.results.size()},
                          d.comm});
  }
  void synchronize() override { cpuBackend().synchronize(); }

private:
  uint64_t live = 0, peak = 0;
};

} // namespace

Backend &stagedTestBackend() {
  static StagedTestBackend backend;
  return backend;
}

} // namespace tpc::runtime
