// Where a collective's blocks sit, for every backend: group rank k holds
// block k of the split dimension (the grid axes are listed major to minor,
// as GridComm orders its groups), so gathers, scatters and all-to-alls
// reorder blocks around the contiguous buffers the transport exchanges with
// transposes of reshaped views. The CPU and CUDA backends move the data;
// this says where it goes.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/CollectiveChannel.h"
#include "tpc/runtime/Comm.h"

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tpc::runtime {

/// The step's communicator; throws if the run has none.
GridComm &commOf(const Dispatch &d);
/// The channel a step that exchanges data moves it over.
CollectiveChannel &channelOf(const Dispatch &d);
/// The wire type of elements of type T: float f32, uint16_t bf16 bits.
template <typename T> constexpr WireType wireOf() {
  return sizeof(T) == sizeof(float) ? WireType::F32 : WireType::BF16;
}
/// The grid axes the step's group spans (its ints).
std::vector<int> groupAxes(const Dispatch &d);

/// [outer, size(dim), inner] around dimension `dim` of `shape`.
std::array<int64_t, 3> around(std::span<const int64_t> shape, int64_t dim);
/// Swaps the first two dims of a 4-d view: an all-gather's [n, outer, s,
/// inner] into [outer, n, s, inner], and a reduce-scatter's input back.
inline constexpr std::array<int64_t, 4> kSwap01 = {1, 0, 2, 3};

/// Offsets of this rank's block of `dim` (the step's dim), blocks `block`
/// long: its local split's (ring step 0) or ring step i's, block
/// (r - i) mod n.
std::vector<int64_t> groupBlockOffsets(const Dispatch &d,
                                       std::span<const int64_t> shape,
                                       int64_t block, int64_t ringStep = 0);

/// This rank's block of a vocabulary split over the step's grid axes (the
/// whole vocabulary when it names none): blocks are numbered over the axes
/// major to minor, as parameter blocks are, and hold `size` entries each.
struct VocabBlock {
  int64_t first = 0;  // the block's first vocabulary entry
  int64_t blocks = 1; // how many blocks the vocabulary is split into
};
VocabBlock vocabBlock(const Dispatch &d, int64_t size);

/// An all-to-all over n ranks of a tensor of `shape`, chunk k of dimension
/// `dst` to group rank k, the chunk from rank j to block j of dimension
/// `src`: permute the input viewed as `chunked` by `toFront`, exchange n
/// equal blocks, then permute the received [n, rest...] (`received`) by
/// `fromFront`.
struct AllToAllLayout {
  std::vector<int64_t> chunked, toFront, received, fromFront;
};
AllToAllLayout allToAllLayout(std::span<const int64_t> shape, int64_t n,
                              int64_t src, int64_t dst);

} // namespace tpc::runtime
