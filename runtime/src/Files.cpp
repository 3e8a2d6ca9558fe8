#include "tpc/runtime/Files.h"

#include <cstdio>
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

} // namespace tpc::runtime
