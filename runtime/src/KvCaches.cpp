#include "tpc/runtime/KvCaches.h"

#include "tpc/runtime/DType.h"

#include <cstring>

namespace tpc::runtime {

KvCaches::KvCaches(const LoadedPlan &loaded, Backend &backend)
    : backend(backend) {
  if (const auto *table = loaded.plan().caches())
    for (const plan::Cache *cache : *table) {
      uint64_t count = 1;
      for (int64_t d : *cache->shape())
        count *= uint64_t(d);
      sizes.push_back(count * dtypeSize(cache->dtype()));
      buffers.push_back(backend.allocate(sizes.back()));
    }
  clear();
}

std::byte *KvCaches::data(size_t index) { return buffers.at(index)->data(); }

uint64_t KvCaches::bytes() const {
  uint64_t total = 0;
  for (uint64_t size : sizes)
    total += size;
  return total;
}

void KvCaches::clear() {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (backend.hostVisible()) {
      std::memset(buffers[i]->data(), 0, sizes[i]);
    } else {
      std::vector<std::byte> zeros(sizes[i]);
      backend.upload(buffers[i]->data(), zeros.data(), sizes[i]);
    }
  }
}

} // namespace tpc::runtime
