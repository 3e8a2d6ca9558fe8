#include "tpc/runtime/DType.h"

#include <array>
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

} // namespace tpc::runtime
