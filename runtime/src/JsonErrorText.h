// nlohmann-json's exception messages without their
// "[json.exception.parse_error.N] " tag, so that the one-line errors of the
// readers built on it read like the rest of tpc's.
#pragma once

#include <exception>
#include <string>

namespace tpc::runtime {

inline std::string jsonErrorText(const std::exception &error) {
  std::string what = error.what();
  if (size_t cut = what.find("] "); cut != std::string::npos)
    what = what.substr(cut + 2);
  return what;
}

} // namespace tpc::runtime
