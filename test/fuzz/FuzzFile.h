// The runtime's readers take paths (they map or stream files), so the fuzz
// targets hand them each input as a real file: one per process, rewritten in
// place for every input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace tpc::fuzz {

/// A scratch file named after `stem` and the process id, removed at exit.
class ScratchFile {
public:
  explicit ScratchFile(const std::string &stem)
      : path_((std::filesystem::temp_directory_path() /
               (stem + "." + std::to_string(getpid())))
                  .string()) {}
  ~ScratchFile() { std::remove(path_.c_str()); }

  /// Replaces the file's contents with `size` bytes at `data`.
  const std::string &write(const void *data, size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char *>(data), std::streamsize(size));
    if (!out.flush())
      throw std::logic_error(path_ + ": cannot write the fuzz input");
    return path_;
  }

private:
  std::string path_;
};

} // namespace tpc::fuzz
