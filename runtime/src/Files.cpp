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

namespace {
bool isWritableDirectory(const std::filesystem::path &dir) {
  std::error_code error;
  return std::filesystem::is_directory(dir, error) &&
         ::access(dir.c_str(), W_OK | X_OK) == 0;
}
} // namespace

void checkWritableFile(const std::string &path, const std::string &flag) {
  namespace fs = std::filesystem;
  const std::string what = flag + " " + path + ": ";
  std::error_code error;
  if (fs::is_directory(path, error))
    throw std::runtime_error(what + "is a directory");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty())
    dir = ".";
  if (!fs::is_directory(dir, error))
    throw std::runtime_error(what + "the directory " + dir.string() +
                             " does not exist");
  if (!isWritableDirectory(dir))
    throw std::runtime_error(what + "the directory " + dir.string() +
                             " is not writable");
}

void checkWritableDirectory(const std::string &path, const std::string &flag) {
  namespace fs = std::filesystem;
  const std::string what = flag + " " + path + ": ";
  std::error_code error;
  if (fs::exists(path, error)) {
    if (!fs::is_directory(path, error))
      throw std::runtime_error(what + "exists and is not a directory");
    if (!isWritableDirectory(path))
      throw std::runtime_error(what + "is not writable");
    return;
  }
  // It will be created (create_directories): its nearest existing ancestor
  // must be a directory we may write.
  fs::path ancestor = fs::absolute(path, error).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, error))
    ancestor = ancestor.parent_path();
  if (!isWritableDirectory(ancestor))
    throw std::runtime_error(what + "cannot be created: " + ancestor.string() +
                             " is not a writable directory");
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
