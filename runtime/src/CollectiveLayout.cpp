#include "CollectiveLayout.h"

#include <stdexcept>

namespace tpc::runtime {

GridComm &commOf(const Dispatch &d) {
  if (!d.comm)
    throw std::runtime_error("a collective step needs a communicator");
  return *d.comm;
}

CollectiveChannel &channelOf(const Dispatch &d) {
  if (!d.channel)
    throw std::runtime_error("a collective step needs a channel");
  return *d.channel;
}

std::vector<int> groupAxes(const Dispatch &d) {
  return {d.ints().begin(), d.ints().end()};
}

std::array<int64_t, 3> around(std::span<const int64_t> shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i)
    outer *= shape[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < shape.size(); ++i)
    inner *= shape[i];
  return {outer, shape[size_t(dim)], inner};
}

std::vector<int64_t> groupBlockOffsets(const Dispatch &d,
                                       std::span<const int64_t> shape,
                                       int64_t block, int64_t ringStep) {
  const CommGroup &g = commOf(d).group(groupAxes(d));
  const int64_t n = g.size, step = ringStep % n;
  std::vector<int64_t> offsets(shape.size(), 0);
  offsets[size_t(d.step.dim())] = ((g.rank - step + n) % n) * block;
  return offsets;
}

VocabBlock vocabBlock(const Dispatch &d, int64_t size) {
  VocabBlock block;
  if (d.ints().empty())
    return block;
  if (!d.comm)
    throw std::runtime_error("a vocabulary-parallel step needs a communicator");
  int64_t index = 0;
  for (int64_t axis : d.ints()) {
    index = index * d.comm->shape()[axis] + d.comm->coords()[axis];
    block.blocks *= d.comm->shape()[axis];
  }
  block.first = index * size;
  return block;
}

AllToAllLayout allToAllLayout(std::span<const int64_t> shape, int64_t n,
                              int64_t src, int64_t dst) {
  AllToAllLayout layout;
  std::vector<int64_t> &split = layout.chunked;
  split.assign(shape.begin(), shape.end());
  split[size_t(dst)] /= n; // the target dim as [n, chunk]
  split.insert(split.begin() + dst, n);
  layout.toFront.resize(split.size());
  layout.toFront[0] = dst;
  for (int64_t i = 0, k = 1; i < int64_t(split.size()); ++i)
    if (i != dst)
      layout.toFront[size_t(k++)] = i;
  // Received: [n (source rank), rest...] with rest = split without the
  // chunk axis; the rank axis moves next to the source dimension (the chunk
  // axis sat at dst, so src indexes rest directly).
  layout.received = {n};
  for (size_t i = 1; i < split.size(); ++i)
    layout.received.push_back(split[size_t(layout.toFront[i])]);
  for (int64_t i = 0; i + 1 < int64_t(layout.received.size()); ++i) {
    if (i == src)
      layout.fromFront.push_back(0);
    layout.fromFront.push_back(i + 1);
  }
  return layout;
}

} // namespace tpc::runtime
