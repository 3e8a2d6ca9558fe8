// Deterministic, sharding-independent parameter initialisation.
//
// Every element of a parameter is drawn from a counter-based generator
// (Philox4x32-10) keyed by the parameter and indexed by the element's global
// position, so any plan of a model -- one rank or a sharded grid -- starts from
// the same global weights. That is what makes sharded-vs-serial equivalence
// tests possible.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace tpc::runtime {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox4x32 with 10 rounds (Salmon et al., SC'11), bit-exact with Random123.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

/// A 64-bit key for a parameter name (FNV-1a), stable across runs and hosts.
uint64_t parameterKey(std::string_view name);

/// The standard normal sample for element `index` of the parameter `key`.
float normalAt(uint64_t key, uint64_t index);

/// One block of a tensor: `offset` and `shape` per dimension, in elements.
struct Block {
  std::span<const int64_t> offset;
  std::span<const int64_t> shape;
};

/// Fills `out` (row-major, `block.shape`) with `stddev * normalAt(key, i)`
/// where i is each element's row-major index in the global tensor of
/// `globalShape`. Throws std::invalid_argument if the block does not fit.
void fillNormal(std::span<float> out, std::span<const int64_t> globalShape,
                Block block, uint64_t key, float stddev);

} // namespace tpc::runtime
