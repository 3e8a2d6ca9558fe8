#include "tpc/runtime/Files.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

namespace tpc::runtime {

void writeFileAtomically(const std::string &path, std::string_view data) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(data.data(), std::streamsize(data.size())) ||
        !out.flush()) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": cannot write");
    }
  }
  if (int fd = ::open(tmp.c_str(), O_RDONLY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path +
                             ": cannot rename into place: " + error.message());
  }
}

double shortestDouble(float value) {
  if (!std::isfinite(value))
    return value;
  char text[32];
  auto [end, error] = std::to_chars(text, text + sizeof(text) - 1, value);
  if (error != std::errc())
    return value;
  *end = '\0';
  return std::strtod(text, nullptr);
}

} // namespace tpc::runtime
