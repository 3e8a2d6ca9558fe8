// Element types of plans and safetensors files: one table of sizes and
// spellings. The plan schema's flatbuffers DType has the same members and
// values (checked in Plan.cpp, which converts untrusted values with a range
// check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tpc::runtime {

enum class DType : uint8_t { F32, F16, BF16, I32, I64 };

/// Bytes per element.
size_t dtypeSize(DType dtype);
/// The safetensors (and plan) spelling: "F32", "F16", "BF16", "I32", "I64".
std::string_view dtypeName(DType dtype);
/// The inverse of dtypeName; nullopt for any other string.
std::optional<DType> parseDType(std::string_view name);
/// The DType with this numeric value, or nullopt outside the enum.
std::optional<DType> dtypeFromValue(unsigned value);

/// IEEE binary16 / bfloat16 <-> binary32. The widening conversions are exact
/// (subnormals, infinities and NaN payloads included); the narrowing ones
/// round to nearest, ties to even, overflow to infinity and keep NaNs NaN
/// (quiet, same sign, top payload bits). Mixed precision stores bf16
/// activations with exactly these roundings on every backend.
uint16_t f32ToF16(float value);
float f16ToF32(uint16_t bits);
uint16_t f32ToBF16(float value);
float bf16ToF32(uint16_t bits);
/// Whole arrays of bf16 elements to f32 and back.
void widenBf16(const uint16_t *in, float *out, int64_t count);
void narrowToBf16(const float *in, uint16_t *out, int64_t count);

} // namespace tpc::runtime
