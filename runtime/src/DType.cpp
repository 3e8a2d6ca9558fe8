#include "tpc/runtime/DType.h"

#include <array>
#include <bit>
#include <stdexcept>

namespace tpc::runtime {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
// Indexed by the enum's value.
constexpr std::array<DTypeInfo, 5> kDTypes = {{{DType::F32, "F32", 4},
                                               {DType::F16, "F16", 2},
                                               {DType::BF16, "BF16", 2},
                                               {DType::I32, "I32", 4},
                                               {DType::I64, "I64", 8}}};

const DTypeInfo &info(DType dtype) {
  auto index = static_cast<size_t>(dtype);
  if (index >= kDTypes.size())
    throw std::invalid_argument("invalid DType");
  return kDTypes[index];
}
} // namespace

size_t dtypeSize(DType dtype) { return info(dtype).size; }

std::string_view dtypeName(DType dtype) { return info(dtype).name; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &d : kDTypes)
    if (d.name == name)
      return d.dtype;
  return std::nullopt;
}

std::optional<DType> dtypeFromValue(unsigned value) {
  if (value >= kDTypes.size())
    return std::nullopt;
  return kDTypes[value].dtype;
}

uint16_t f32ToF16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) // NaN: quiet, keep the top payload bits
    return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x1FF);
  if (abs >= 0x477FF000) // >= 65520 rounds (ties to even) past 65504
    return sign | 0x7C00;
  if (abs >= 0x38800000) { // normal in f16 (>= 2^-14)
    uint32_t rebiased = abs - (112u << 23);
    uint32_t h = rebiased >> 13, rest = rebiased & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
      ++h; // may carry into the exponent, which is still right
    return sign | static_cast<uint16_t>(h);
  }
  if (abs <= 0x33000000) // <= 2^-25: rounds to zero (2^-25 is a tie to 0)
    return sign;
  // Subnormal in f16: the result counts units of 2^-24.
  uint32_t exponent = abs >> 23; // 102..112
  uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
  uint32_t shift = 126 - exponent; // 14..24
  uint32_t h = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1)))
    ++h; // 0x400 is the smallest normal: still right
  return sign | static_cast<uint16_t>(h);
}

float f16ToF32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0x1F) {
    out = sign | 0x7F800000 | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else { // subnormal: normalise
    uint32_t e = 113;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mantissa & 0x3FF) << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t f32ToBF16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFF) > 0x7F800000) // NaN: quiet, keep sign and payload top
    return static_cast<uint16_t>((x >> 16) | 0x0040);
  x += 0x7FFF + ((x >> 16) & 1); // round to nearest, ties to even
  return static_cast<uint16_t>(x >> 16);
}

float bf16ToF32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

void widenBf16(const uint16_t *in, float *out, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = bf16ToF32(in[i]);
}

void narrowToBf16(const float *in, uint16_t *out, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = f32ToBF16(in[i]);
}

} // namespace tpc::runtime
