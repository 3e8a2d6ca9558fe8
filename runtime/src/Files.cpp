#include "tpc/runtime/Files.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace tpc::runtime {

void writeFileAtomically(const std::string &path,
                         std::span<const std::span<const std::byte>> pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const std::string &what, int error) {
    return std::runtime_error(path + ": " + what + ": " + std::strerror(error));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw fail("cannot create " + tmp, errno);
  try {
    for (std::span<const std::byte> piece : pieces) {
      const std::byte *p = piece.data();
      size_t size = piece.size();
      while (size > 0) {
        ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0)
          throw fail("cannot write " + tmp, errno);
        p += n;
        size -= size_t(n);
      }
    }
    if (::fsync(fd) != 0)
      throw fail("cannot fsync " + tmp, errno);
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0)
      throw fail("cannot close " + tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw fail("cannot rename " + tmp + " into place", errno);
  } catch (...) {
    if (fd >= 0)
      ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename durable; failing here leaves a complete file anyway.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  int dirFd = ::open(dir.empty() ? "." : dir.c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

void writeFileAtomically(const std::string &path, std::string_view data) {
  const std::span<const std::byte> piece = std::as_bytes(std::span(data));
  writeFileAtomically(path, std::span(&piece, 1));
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

std::string formatBytes(uint64_t bytes) {
  constexpr const char *kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return std::to_string(bytes) + " bytes";
  double value = double(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), value < 10 ? "%.1f %s" : "%.0f %s", value,
                kUnits[unit]);
  return text;
}

namespace {
/// An open descriptor of a checked regular file, closed on every path.
struct RegularFile {
  int fd = -1;
  uint64_t size = 0;
  ~RegularFile() {
    if (fd >= 0)
      ::close(fd);
  }
};

void openRegularFile(RegularFile &file, const std::string &path,
                     uint64_t maxBytes, std::string_view what) {
  auto fail = [&](const std::string &why) {
    return std::runtime_error(path + ": " + why);
  };
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd < 0)
    throw fail("cannot open the " + std::string(what) + ": " +
               std::strerror(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0)
    throw fail("cannot stat the " + std::string(what) + ": " +
               std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw fail("is not a regular file (a " + std::string(what) +
               " is read from one)");
  file.size = uint64_t(st.st_size);
  if (file.size > maxBytes)
    throw fail("is " + formatBytes(file.size) + ", more than the " +
               formatBytes(maxBytes) + " a " + std::string(what) + " may have");
}
} // namespace

uint64_t checkRegularFile(const std::string &path, uint64_t maxBytes,
                          std::string_view what) {
  RegularFile file;
  openRegularFile(file, path, maxBytes, what);
  return file.size;
}

std::string readRegularFile(const std::string &path, uint64_t maxBytes,
                            std::string_view what) {
  RegularFile file;
  openRegularFile(file, path, maxBytes, what);
  std::string data(file.size, '\0');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(file.fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw std::runtime_error(path + ": cannot read the " + std::string(what) +
                               ": " + std::strerror(errno));
    if (n == 0)
      break; // It shrank while we read: keep what there is.
    done += size_t(n);
  }
  data.resize(done);
  return data;
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
