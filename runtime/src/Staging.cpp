#include "Staging.h"

#include "tpc/runtime/OpTable.h"

#include <array>
#include <stdexcept>
#include <string>

namespace tpc::runtime {

void StagedSteps::run(const Dispatch &d) {
  const OpInfo &info = *findOpInfo(d.step.kind());
  // One host copy per device address: a result that updates its operand in
  // place, or views it, shares the operand's copy.
  std::map<const std::byte *, HostArray> copies;
  auto hostCopy = [&](const TensorBinding &t, uint64_t bytes,
                      bool download) -> std::byte * {
    if (bytes == 0) // an empty block may sit at another tensor's address
      return nullptr;
    HostArray &copy = copies[t.data];
    if (!copy) {
      if (auto it = inFlight.find(t.data); it != inFlight.end()) {
        copy = it->second;
      } else {
        copy = std::make_shared<std::vector<uint64_t>>((bytes + 7) / 8);
        if (download)
          device.download(copy->data(), t.data, bytes);
      }
    }
    if (copy->size() * sizeof(uint64_t) < bytes)
      throw std::logic_error(std::string(opKindName(d.step.kind())) +
                             ": two tensors of different sizes at one address");
    return reinterpret_cast<std::byte *>(copy->data());
  };
  std::array<TensorBinding, kMaxStepOperands> operands;
  std::array<TensorBinding, kMaxStepResults> results;
  std::array<uint64_t, kMaxStepResults> resultBytes{};
  for (size_t i = 0; i < d.operands.size(); ++i) {
    const TensorBinding &t = d.operands[i];
    operands[i] = {hostCopy(t, t.bytes(), /*download=*/true), t.shape,
                   t.elements, t.dtype};
  }
  for (size_t i = 0; i < d.results.size(); ++i) {
    const TensorBinding &t = d.results[i];
    resultBytes[i] = t.bytes();
    results[i] = {hostCopy(t, resultBytes[i], /*download=*/false), t.shape,
                  t.elements, t.dtype};
  }
  Backend &cpu = cpuBackend();
  cpu.enqueue({d.step,
               {operands.data(), d.operands.size()},
               {results.data(), d.results.size()},
               d.comm,
               d.bf16Products,
               d.channel});
  cpu.synchronize();
  if (info.async == AsyncRole::Starts) {
    // MPI sends from the operand's copy and receives into the result's
    // until the wait (a pipeline send has no result, a receive no operand).
    auto keep = [&](const TensorBinding &t) {
      if (auto it = copies.find(t.data); it != copies.end())
        inFlight[t.data] = it->second;
    };
    if (!d.operands.empty())
      keep(d.operands[0]);
    if (!d.results.empty())
      keep(d.results[0]);
    return;
  }
  for (size_t i = 0; i < d.results.size(); ++i)
    if (resultBytes[i] != 0)
      device.upload(d.results[i].data, results[i].data, resultBytes[i]);
  if (info.async == AsyncRole::Waits)
    for (const TensorBinding &t : d.operands)
      inFlight.erase(t.data);
}

} // namespace tpc::runtime
