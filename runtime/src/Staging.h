// Steps a backend does not run itself (Backend::runsNatively), run on the
// CPU kernels through host copies: how a device that cannot reach the other
// ranks' memory takes part in collectives over MPI.
#pragma once

#include "tpc/runtime/Backend.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace tpc::runtime {

class StagedSteps {
public:
  explicit StagedSteps(Backend &device) : device(device) {}

  /// Downloads the step's operands, runs the CPU kernel on host copies and
  /// uploads its results. A ring shift's start leaves its buffers on the
  /// host (MPI is still filling them) until the wait that names them.
  void run(const Dispatch &dispatch);

private:
  using HostArray = std::shared_ptr<std::vector<uint64_t>>;
  Backend &device;
  /// Host copies of the buffers of ring shifts in flight, by device address.
  std::map<const std::byte *, HostArray> inFlight;
};

} // namespace tpc::runtime
