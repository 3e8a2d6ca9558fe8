// The KV caches @prefill and @decode share.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Plan.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tpc::runtime {

/// The KV caches of a plan's generation programs (Plan.caches): this rank's
/// blocks in one backend's memory, zeros at first. Every runner given them
/// (ProgramRunner::setCaches) reads and writes them in place, so @prefill
/// and @decode continue one another.
class KvCaches {
public:
  KvCaches(const LoadedPlan &plan, Backend &backend);
  /// Cache `index` of the plan.
  std::byte *data(size_t index);
  size_t size() const { return buffers.size(); }
  uint64_t bytes() const;
  /// Back to zeros (a new prompt; not needed for correctness, since a
  /// step reads only positions written for its own sequence).
  void clear();

private:
  Backend &backend;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<uint64_t> sizes;
};

} // namespace tpc::runtime
