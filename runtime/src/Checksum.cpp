#include "tpc/runtime/Checksum.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tpc::runtime {

uint64_t contentChecksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

uint64_t fileChecksum(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw std::runtime_error(path + ": cannot read it to check its checksum");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(
      XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK)
    throw std::runtime_error("cannot start a checksum");
  std::vector<char> chunk(size_t(1) << 20);
  while (file) {
    file.read(chunk.data(), std::streamsize(chunk.size()));
    if (file.gcount() > 0)
      XXH3_64bits_update(state.get(), chunk.data(), size_t(file.gcount()));
  }
  if (file.bad())
    throw std::runtime_error(path + ": read error while checking its checksum");
  return XXH3_64bits_digest(state.get());
}

std::string checksumHex(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(checksum));
  return text;
}

} // namespace tpc::runtime
