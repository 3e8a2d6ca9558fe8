#include "tpc/runtime/Init.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

namespace {
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

void mulhilo(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

/// Maps 32 random bits to (0, 1]: never 0, so log() below is finite.
float toUnitInterval(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f);
}
} // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMultiplier0, c[0], hi0, lo0);
    mulhilo(kMultiplier1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t parameterKey(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    hash ^= ch;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

float normalAt(uint64_t key, uint64_t index) {
  PhiloxCounter bits = philox4x32_10(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
      {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  // Box-Muller on the first two words.
  float radius = std::sqrt(-2.0f * std::log(toUnitInterval(bits[0])));
  float angle = 2.0f * std::numbers::pi_v<float> * toUnitInterval(bits[1]);
  return radius * std::cos(angle);
}

void fillNormal(std::span<float> out, std::span<const int64_t> globalShape,
                Block block, uint64_t key, float stddev) {
  size_t rank = globalShape.size();
  if (block.offset.size() != rank || block.shape.size() != rank)
    throw std::invalid_argument(
        "fillNormal: block rank differs from tensor rank " +
        std::to_string(rank));
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (block.offset[d] < 0 || block.shape[d] < 0 ||
        block.offset[d] + block.shape[d] > globalShape[d])
      throw std::invalid_argument("fillNormal: block exceeds dimension " +
                                  std::to_string(d) + " of size " +
                                  std::to_string(globalShape[d]));
    count *= block.shape[d];
  }
  if (static_cast<int64_t>(out.size()) != count)
    throw std::invalid_argument(
        "fillNormal: output holds " + std::to_string(out.size()) +
        " elements, block has " + std::to_string(count));
  // Walk the block in row-major order, tracking the global linear index.
  std::vector<int64_t> local(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t global = 0;
    for (size_t d = 0; d < rank; ++d)
      global = global * globalShape[d] + block.offset[d] + local[d];
    out[i] = stddev * normalAt(key, global);
    for (size_t d = rank; d-- > 0;) {
      if (++local[d] < block.shape[d])
        break;
      local[d] = 0;
    }
  }
}

} // namespace tpc::runtime
