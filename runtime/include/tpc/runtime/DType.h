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

} // namespace tpc::runtime
