#include "tpc/runtime/CollectiveChannel.h"

#include <cstdint>

namespace tpc::runtime {

namespace {
/// Calls `f` with a typed null pointer: float for f32, uint16_t (bits) for
/// bf16, so that each operation picks GridComm's overload.
template <typename F> void byWireType(WireType type, F &&f) {
  if (type == WireType::F32)
    f(static_cast<float *>(nullptr));
  else
    f(static_cast<uint16_t *>(nullptr));
}

template <typename T> std::span<const T> input(const void *data, size_t n) {
  return {static_cast<const T *>(data), n};
}
template <typename T> std::span<T> output(void *data, size_t n) {
  return {static_cast<T *>(data), n};
}
} // namespace

void MpiChannel::allReduceSum(const std::vector<int> &axes, WireType type,
                              void *data, size_t count) {
  byWireType(type, [&](auto *t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grid.allReduceSum(axes, output<T>(data, count));
  });
}

void MpiChannel::allGather(const std::vector<int> &axes, WireType type,
                           const void *in, void *out, size_t count) {
  const size_t n = size_t(grid.group(axes).size);
  byWireType(type, [&](auto *t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grid.allGather(axes, input<T>(in, count), output<T>(out, n * count));
  });
}

void MpiChannel::reduceScatterSum(const std::vector<int> &axes, WireType type,
                                  const void *in, void *out, size_t count) {
  const size_t n = size_t(grid.group(axes).size);
  byWireType(type, [&](auto *t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grid.reduceScatterSum(axes, input<T>(in, n * count), output<T>(out, count));
  });
}

void MpiChannel::allToAll(const std::vector<int> &axes, WireType type,
                          const void *in, void *out, size_t count) {
  byWireType(type, [&](auto *t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grid.allToAll(axes, input<T>(in, count), output<T>(out, count));
  });
}

void MpiChannel::startShift(const std::vector<int> &axes, WireType type,
                            const void *in, void *out, size_t count) {
  byWireType(type, [&](auto *t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grid.startShift(axes, input<T>(in, count), output<T>(out, count));
  });
}

} // namespace tpc::runtime
