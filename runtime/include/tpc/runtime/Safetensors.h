// Reading and writing safetensors files
// (https://github.com/huggingface/safetensors).
//
// A file is: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
// (an object mapping tensor names to {"dtype", "shape", "data_offsets"}, plus
// an optional "__metadata__" object of string -> string), then the data
// section. data_offsets are [begin, end) byte offsets into the data section,
// tensors are row-major and little-endian.
//
// SafetensorsFile::open validates the whole header up front, as strictly as
// the reference (Rust) implementation used by the `safetensors` Python
// package: the tensors, sorted by offset, must tile the data section exactly
// -- no overlap, no hole, no trailing byte -- and each tensor's byte size must
// equal its element count times its dtype size. Unknown keys in a tensor
// entry are ignored, as by the reference. Beyond the reference it rejects
// duplicate JSON keys (the reference keeps the last one, both for tensor
// names and "__metadata__" keys) and a null "__metadata__" (the reference
// treats it as absent). Only the dtypes below are supported; a file with any
// other dtype (F64, U8, F8_*, ...) is rejected. The header is parsed by
// nlohmann-json (RFC 8259 grammar, UTF-8, surrogate pairs), with a parser
// callback for duplicate keys and a nesting limit of 128.
//
// Every failure of open() is a std::runtime_error with a one-line message
// that starts with the file's path.
#pragma once

#include "tpc/runtime/DType.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::runtime {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  /// Byte offsets [begin, end) within the data section.
  uint64_t begin = 0, end = 0;

  /// Product of the shape (1 for a scalar).
  uint64_t numElements() const;
};

class SafetensorsFile {
public:
  /// Maps the file read-only and validates everything; throws
  /// std::runtime_error ("<path>: <what is wrong>") on any problem. The file
  /// must not be modified in place while open (SafetensorsWriter replaces
  /// files atomically, which is safe).
  static SafetensorsFile open(const std::string &path);

  const std::string &path() const { return path_; }
  /// All tensors, in data-offset order.
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  /// nullptr if there is no tensor of that name.
  const TensorInfo *find(std::string_view name) const;
  /// Like find, but throws std::runtime_error if there is none.
  const TensorInfo &get(std::string_view name) const;
  /// The "__metadata__" entries (empty if the file has none).
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }

  /// The raw little-endian bytes of a tensor of this file (not necessarily
  /// aligned to the element size).
  std::span<const std::byte> bytes(const TensorInfo &info) const;

  /// The tensor's elements as f32: F32 is copied, F16/BF16 are widened
  /// exactly. Throws std::runtime_error for a missing or integer tensor.
  std::vector<float> readAsF32(std::string_view name) const;
  /// The tensor's elements as i64: I64 is copied, I32 is widened. Throws
  /// std::runtime_error for a missing or floating-point tensor.
  std::vector<int64_t> readAsI64(std::string_view name) const;

private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<const void> mapping_; // keeps the file mapped
  std::span<const std::byte> data_;     // the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
public:
  /// Adds a tensor, copying `data`. Throws std::invalid_argument for a
  /// duplicate, reserved ("__metadata__") or non-UTF-8 name, a negative
  /// dimension, or a data size other than numElements * dtypeSize.
  void add(std::string name, DType dtype, std::vector<int64_t> shape,
           std::span<const std::byte> data);
  /// Adds f32 values stored as `storeAs` (F32, F16 or BF16, rounded to
  /// nearest even).
  void addF32(std::string name, std::vector<int64_t> shape,
              std::span<const float> data, DType storeAs = DType::F32);
  void addI32(std::string name, std::vector<int64_t> shape,
              std::span<const int32_t> data);
  void addI64(std::string name, std::vector<int64_t> shape,
              std::span<const int64_t> data);
  /// Sets (or replaces) a "__metadata__" entry; both must be valid UTF-8.
  void setMetadata(std::string key, std::string value);

  /// The complete file contents. Tensors are laid out as the reference
  /// implementation does (by descending dtype alignment, then by name), the
  /// JSON header is compact and padded with spaces to a multiple of 8 bytes,
  /// so the output is byte-identical to the reference serializer's (up to
  /// the order of several metadata entries, which the reference takes from a
  /// hash map; here they are sorted by key).
  std::vector<std::byte> serialize() const;
  /// Writes the file atomically: to "<path>.tmp.<pid>" in the same
  /// directory, fsync, rename over `path`. On failure the temporary file is
  /// removed and std::runtime_error ("<path>: ...") is thrown.
  void write(const std::string &path) const;

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  /// The entries in file order.
  std::vector<const Entry *> ordered() const;
  /// Padded JSON header for `order`.
  std::string header(const std::vector<const Entry *> &order) const;

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

} // namespace tpc::runtime
