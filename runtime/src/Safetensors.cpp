#include "tpc/runtime/Safetensors.h"

#include "JsonErrorText.h"

#include "tpc/runtime/Files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tpc::runtime {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; only little-endian hosts "
              "are supported");

namespace {

/// The reference implementation's limit on the JSON header.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

/// A validation failure; SafetensorsFile::open prefixes the path.
struct Invalid {
  std::string message;
};

[[noreturn]] void invalid(std::string message) {
  throw Invalid{std::move(message)};
}

/// `s` with control characters escaped (so messages stay on one line) and cut
/// to about `limit` bytes.
std::string printable(std::string_view s, size_t limit = 120) {
  bool cut = s.size() > limit;
  if (cut) {
    size_t n = limit;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
      --n; // do not split a UTF-8 sequence
    s = s.substr(0, n);
  }
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (cut)
    out += "...";
  return out;
}

std::string quote(std::string_view s) { return "'" + printable(s) + "'"; }

std::string tensorWhere(std::string_view name) {
  return "tensor " + quote(name);
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      out += ",";
    if (i == 16 && shape.size() > 17) {
      out += "...";
      break;
    }
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string offsetsString(const TensorInfo &t) {
  return "[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]";
}

/// The offset of the first byte that is not part of valid UTF-8 (no overlong
/// forms, no surrogates, nothing above U+10FFFF), or npos.
size_t invalidUtf8At(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len)
      return i;
    for (size_t k = 1; k < len; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80)
        return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

using Json = nlohmann::ordered_json;

/// The kind of a JSON value, for type errors ("found an array").
std::string kindOf(const Json &value) {
  switch (value.type()) {
  case Json::value_t::object:
    return "an object";
  case Json::value_t::array:
    return "an array";
  case Json::value_t::string:
    return "a string";
  case Json::value_t::boolean:
    return "a boolean";
  case Json::value_t::null:
    return "null";
  default:
    return "a number";
  }
}

/// Parses the header with nlohmann-json, which checks the RFC 8259 grammar
/// and UTF-8; the parser callback adds what the reference implementation
/// also enforces: no key twice in one object, nesting at most 128 deep.
Json parseHeaderJson(std::string_view text) {
  constexpr size_t kMaxDepth = 128;
  // Per open object: its member name in the parent ("" at the top) and the
  // keys seen so far.
  std::vector<std::pair<std::string, std::set<std::string>>> objects;
  std::string lastKey;
  size_t depth = 0;
  auto callback = [&](int, Json::parse_event_t event, Json &parsed) {
    switch (event) {
    case Json::parse_event_t::object_start:
    case Json::parse_event_t::array_start:
      if (++depth > kMaxDepth)
        invalid("invalid JSON in header: nesting deeper than " +
                std::to_string(kMaxDepth));
      if (event == Json::parse_event_t::object_start)
        objects.emplace_back(objects.empty() ? "" : lastKey,
                             std::set<std::string>());
      break;
    case Json::parse_event_t::object_end:
      objects.pop_back();
      --depth;
      break;
    case Json::parse_event_t::array_end:
      --depth;
      break;
    case Json::parse_event_t::key: {
      lastKey = parsed.get_ref<const std::string &>();
      if (objects.back().second.insert(lastKey).second)
        break;
      const std::string &owner = objects.back().first;
      if (objects.size() == 1)
        invalid("header has duplicate key " + quote(lastKey));
      if (objects.size() == 2 && owner == "__metadata__")
        invalid("\"__metadata__\" has duplicate key " + quote(lastKey));
      if (objects.size() == 2)
        invalid(tensorWhere(owner) + ": duplicate key \"" + printable(lastKey) +
                "\"");
      invalid("an object in the header has duplicate key " + quote(lastKey));
    }
    case Json::parse_event_t::value:
      break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception &error) {
    // parse_error, or out_of_range for a number beyond double's range.
    invalid("invalid JSON in header: " + printable(jsonErrorText(error), 300));
  }
}

/// A non-negative JSON integer no larger than `max`; `what` names it.
uint64_t toUInt(const Json &value, uint64_t max, const std::string &what) {
  // Integers beyond 2^64 - 1 arrive as floating-point numbers.
  if (value.is_number_float() && value.get<double>() >= double(max))
    invalid(what + " is too large: " + printable(value.dump(), 40));
  if (!value.is_number_unsigned())
    invalid(what + " must be a non-negative integer, found " +
            (value.is_number() ? printable(value.dump(), 40) : kindOf(value)));
  uint64_t v = value.get<uint64_t>();
  if (v > max)
    invalid(what + " is too large: " + std::to_string(v));
  return v;
}

TensorInfo tensorFromJson(std::string name, const Json &entry) {
  const std::string where = tensorWhere(name);
  if (!entry.is_object())
    invalid(where + ": entry must be a JSON object, found " + kindOf(entry));
  TensorInfo t;
  t.name = std::move(name);
  auto dtype = entry.find("dtype");
  if (dtype == entry.end())
    invalid(where + ": missing \"dtype\"");
  if (!dtype->is_string())
    invalid(where + ": \"dtype\" must be a string, found " + kindOf(*dtype));
  std::optional<DType> parsed =
      parseDType(dtype->get_ref<const std::string &>());
  if (!parsed)
    invalid(where + ": unsupported dtype \"" +
            printable(dtype->get_ref<const std::string &>()) +
            "\" (supported: F32, F16, BF16, I32, I64)");
  t.dtype = *parsed;

  auto shape = entry.find("shape");
  if (shape == entry.end())
    invalid(where + ": missing \"shape\"");
  if (!shape->is_array())
    invalid(where +
            ": \"shape\" must be an array of non-negative integers, found " +
            kindOf(*shape));
  for (size_t i = 0; i < shape->size(); ++i)
    t.shape.push_back(static_cast<int64_t>(toUInt(
        (*shape)[i], kMaxInt64, where + ": shape[" + std::to_string(i) + "]")));

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end())
    invalid(where + ": missing \"data_offsets\"");
  const std::string needTwo =
      ": \"data_offsets\" must be an array of two non-negative integers "
      "[begin, end]";
  if (!offsets->is_array())
    invalid(where + needTwo + ", found " + kindOf(*offsets));
  if (offsets->size() != 2)
    invalid(where + needTwo + ", found " +
            (offsets->empty()       ? std::string("an empty array")
             : offsets->size() == 1 ? std::string("one entry")
                                    : std::string("more than two entries")));
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  t.begin = toUInt((*offsets)[0], max, where + ": data_offsets[0]");
  t.end = toUInt((*offsets)[1], max, where + ": data_offsets[1]");
  // Other keys are ignored, as by the reference implementation.
  return t;
}

/// The header's tensor entries (in file order) and "__metadata__".
void parseHeader(std::string_view text, std::vector<TensorInfo> &tensors,
                 std::map<std::string, std::string> &metadata) {
  if (text.find_first_not_of(" \t\n\r") == std::string_view::npos)
    invalid("header is empty; expected a JSON object");
  Json header = parseHeaderJson(text);
  if (!header.is_object())
    invalid("header is not a JSON object (found " + kindOf(header) + ")");
  for (auto &[key, value] : header.items()) {
    if (key != "__metadata__") {
      tensors.push_back(tensorFromJson(key, value));
      continue;
    }
    if (!value.is_object())
      invalid("\"__metadata__\" must be an object of string values, found " +
              kindOf(value));
    for (auto &[name, entry] : value.items()) {
      if (!entry.is_string())
        invalid("\"__metadata__\" value for key " + quote(name) +
                " must be a string, found " + kindOf(entry));
      metadata.emplace(name, entry.get<std::string>());
    }
  }
}

/// Checks sizes and offsets and sorts `tensors` by offset; they must tile the
/// `dataSize`-byte data section exactly, as the reference requires.
void validateLayout(std::vector<TensorInfo> &tensors, uint64_t dataSize) {
  for (const TensorInfo &t : tensors) {
    std::string where = tensorWhere(t.name);
    uint64_t count = 1;
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count) ||
          count > kMaxInt64)
        invalid(where + ": element count of shape " + shapeString(t.shape) +
                " overflows");
    uint64_t nbytes;
    if (__builtin_mul_overflow(count, dtypeSize(t.dtype), &nbytes))
      invalid(where + ": byte size of shape " + shapeString(t.shape) +
              " overflows");
    if (t.begin > t.end)
      invalid(where + ": data_offsets " + offsetsString(t) +
              " have begin > end");
    if (t.end - t.begin != nbytes)
      invalid(where + ": data_offsets " + offsetsString(t) + " span " +
              std::to_string(t.end - t.begin) + " bytes but shape " +
              shapeString(t.shape) + " of " + std::string(dtypeName(t.dtype)) +
              " needs " + std::to_string(nbytes) + " (size mismatch)");
    if (t.end > dataSize)
      invalid(where + ": data_offsets " + offsetsString(t) +
              " extend beyond the end of the data section (" +
              std::to_string(dataSize) + " bytes; is the file truncated?)");
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo &a, const TensorInfo &b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  uint64_t cursor = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo &t = tensors[i];
    if (t.begin < cursor)
      invalid(tensorWhere(t.name) + " (data_offsets " + offsetsString(t) +
              ") overlaps " + tensorWhere(tensors[i - 1].name) +
              " (data_offsets " + offsetsString(tensors[i - 1]) + ")");
    if (t.begin > cursor)
      invalid("data section bytes [" + std::to_string(cursor) + "," +
              std::to_string(t.begin) + ") before " + tensorWhere(t.name) +
              " are not covered by any tensor (hole)");
    cursor = t.end;
  }
  if (cursor != dataSize)
    invalid("data section is " + std::to_string(dataSize) +
            " bytes but its tensors end at byte " + std::to_string(cursor) +
            " (trailing bytes not covered by any tensor)");
}

/// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

std::string errnoText(int err) { return std::strerror(err); }

/// A tensor's elements, read element by element (the bytes may be unaligned).
template <typename T>
std::vector<T> loadElements(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

int dtypeRank(DType dtype) {
  // The reference's Dtype enum order (increasing alignment); the serializer
  // sorts by it descending.
  switch (dtype) {
  case DType::F16:
    return 0;
  case DType::BF16:
    return 1;
  case DType::I32:
    return 2;
  case DType::F32:
    return 3;
  case DType::I64:
    return 4;
  }
  return 0;
}

/// Appends `s` as a JSON string, escaped as serde_json does.
void appendJsonString(std::string &out, std::string_view s) {
  out += '"';
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", u);
        out += buf;
      } else {
        out += c;
      }
    }
  }
  out += '"';
}

} // namespace

uint64_t TensorInfo::numElements() const {
  uint64_t count = 1;
  for (int64_t d : shape)
    count *= static_cast<uint64_t>(d);
  return count;
}

SafetensorsFile SafetensorsFile::open(const std::string &path) {
  const std::string where = printable(path, path.size());
  auto fail = [&](const std::string &what) -> std::runtime_error {
    return std::runtime_error(where + ": " + what);
  };

  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0)
    throw fail("cannot open: " + errnoText(errno));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0)
    throw fail("cannot stat: " + errnoText(errno));
  if (!S_ISREG(st.st_mode))
    throw fail("not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    throw fail("file is " + std::to_string(size) +
               " bytes, too short for the 8-byte header length");

  void *base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (base == MAP_FAILED)
    throw fail("cannot map: " + errnoText(errno));
  SafetensorsFile file;
  file.mapping_ = std::shared_ptr<const void>(
      base, [size](const void *p) { ::munmap(const_cast<void *>(p), size); });
  file.path_ = path;
  auto bytes = static_cast<const std::byte *>(base);

  uint64_t headerSize;
  std::memcpy(&headerSize, bytes, 8);
  if (headerSize > kMaxHeaderSize)
    throw fail("header length " + std::to_string(headerSize) +
               " exceeds the limit of " + std::to_string(kMaxHeaderSize) +
               " bytes");
  if (headerSize > size - 8)
    throw fail("header length " + std::to_string(headerSize) +
               " extends beyond the end of the file (" + std::to_string(size) +
               " bytes; is the file truncated?)");
  std::string_view header(reinterpret_cast<const char *>(bytes + 8),
                          headerSize);
  uint64_t dataSize = size - 8 - headerSize;
  try {
    if (size_t at = invalidUtf8At(header); at != header.npos)
      invalid("header is not valid UTF-8 (at byte " + std::to_string(at) + ")");
    parseHeader(header, file.tensors_, file.metadata_);
    validateLayout(file.tensors_, dataSize);
  } catch (const Invalid &e) {
    throw fail(e.message);
  }
  file.data_ = std::span<const std::byte>(bytes + 8 + headerSize, dataSize);
  for (size_t i = 0; i < file.tensors_.size(); ++i)
    file.index_.emplace(file.tensors_[i].name, i);
  return file;
}

const TensorInfo *SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo &SafetensorsFile::get(std::string_view name) const {
  if (const TensorInfo *t = find(name))
    return *t;
  throw std::runtime_error(printable(path_, path_.size()) +
                           ": no tensor named " + quote(name));
}

std::span<const std::byte>
SafetensorsFile::bytes(const TensorInfo &info) const {
  if (info.begin > info.end || info.end > data_.size())
    throw std::invalid_argument(printable(path_, path_.size()) + ": " +
                                tensorWhere(info.name) +
                                " is not a tensor of this file");
  return data_.subspan(info.begin, info.end - info.begin);
}

std::vector<float> SafetensorsFile::readAsF32(std::string_view name) const {
  const TensorInfo &t = get(name);
  std::span<const std::byte> raw = bytes(t);
  switch (t.dtype) {
  case DType::F32:
    return loadElements<float>(raw);
  case DType::F16:
  case DType::BF16: {
    std::vector<uint16_t> halves = loadElements<uint16_t>(raw);
    std::vector<float> out(halves.size());
    bool isF16 = t.dtype == DType::F16;
    for (size_t i = 0; i < halves.size(); ++i)
      out[i] = isF16 ? f16ToF32(halves[i]) : bf16ToF32(halves[i]);
    return out;
  }
  default:
    throw std::runtime_error(printable(path_, path_.size()) + ": " +
                             tensorWhere(t.name) + " has dtype " +
                             std::string(dtypeName(t.dtype)) +
                             "; readAsF32 needs F32, F16 or BF16");
  }
}

std::vector<int64_t> SafetensorsFile::readAsI64(std::string_view name) const {
  const TensorInfo &t = get(name);
  std::span<const std::byte> raw = bytes(t);
  switch (t.dtype) {
  case DType::I64:
    return loadElements<int64_t>(raw);
  case DType::I32: {
    std::vector<int32_t> narrow = loadElements<int32_t>(raw);
    return std::vector<int64_t>(narrow.begin(), narrow.end());
  }
  default:
    throw std::runtime_error(printable(path_, path_.size()) + ": " +
                             tensorWhere(t.name) + " has dtype " +
                             std::string(dtypeName(t.dtype)) +
                             "; readAsI64 needs I32 or I64");
  }
}

void SafetensorsWriter::add(std::string name, DType dtype,
                            std::vector<int64_t> shape,
                            std::span<const std::byte> data) {
  std::string where = "SafetensorsWriter: " + tensorWhere(name);
  if (name == "__metadata__")
    throw std::invalid_argument(where + ": the name is reserved");
  if (invalidUtf8At(name) != std::string_view::npos)
    throw std::invalid_argument(where + ": the name is not valid UTF-8");
  for (const Entry &e : entries_)
    if (e.name == name)
      throw std::invalid_argument(where + ": duplicate name");
  uint64_t count = 1, nbytes;
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument(where + ": negative dimension in shape " +
                                  shapeString(shape));
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count) ||
        count > kMaxInt64)
      throw std::invalid_argument(where + ": element count of shape " +
                                  shapeString(shape) + " overflows");
  }
  if (__builtin_mul_overflow(count, dtypeSize(dtype), &nbytes) ||
      nbytes != data.size())
    throw std::invalid_argument(
        where + ": data has " + std::to_string(data.size()) +
        " bytes but shape " + shapeString(shape) + " of " +
        std::string(dtypeName(dtype)) + " needs " +
        std::to_string(count * dtypeSize(dtype)));
  entries_.push_back(Entry{std::move(name), dtype, std::move(shape),
                           std::vector<std::byte>(data.begin(), data.end())});
}

void SafetensorsWriter::addF32(std::string name, std::vector<int64_t> shape,
                               std::span<const float> data, DType storeAs) {
  if (storeAs == DType::F32)
    return add(std::move(name), storeAs, std::move(shape), std::as_bytes(data));
  if (storeAs != DType::F16 && storeAs != DType::BF16)
    throw std::invalid_argument("SafetensorsWriter: " + tensorWhere(name) +
                                ": addF32 stores F32, F16 or BF16, not " +
                                std::string(dtypeName(storeAs)));
  std::vector<uint16_t> halves(data.size());
  for (size_t i = 0; i < data.size(); ++i)
    halves[i] = storeAs == DType::F16 ? f32ToF16(data[i]) : f32ToBF16(data[i]);
  add(std::move(name), storeAs, std::move(shape),
      std::as_bytes(std::span<const uint16_t>(halves)));
}

void SafetensorsWriter::addI32(std::string name, std::vector<int64_t> shape,
                               std::span<const int32_t> data) {
  add(std::move(name), DType::I32, std::move(shape), std::as_bytes(data));
}

void SafetensorsWriter::addI64(std::string name, std::vector<int64_t> shape,
                               std::span<const int64_t> data) {
  add(std::move(name), DType::I64, std::move(shape), std::as_bytes(data));
}

void SafetensorsWriter::setMetadata(std::string key, std::string value) {
  if (invalidUtf8At(key) != std::string_view::npos ||
      invalidUtf8At(value) != std::string_view::npos)
    throw std::invalid_argument("SafetensorsWriter: metadata key " +
                                quote(key) + " or its value is not UTF-8");
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Entry *>
SafetensorsWriter::ordered() const {
  std::vector<const Entry *> order;
  for (const Entry &e : entries_)
    order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry *a, const Entry *b) {
    int ra = dtypeRank(a->dtype), rb = dtypeRank(b->dtype);
    if (ra != rb)
      return ra > rb;
    return a->name < b->name;
  });
  return order;
}

std::string
SafetensorsWriter::header(const std::vector<const Entry *> &order) const {
  std::string h = "{";
  bool first = true;
  if (!metadata_.empty()) {
    h += "\"__metadata__\":{";
    for (const auto &[key, value] : metadata_) {
      if (!first)
        h += ',';
      first = false;
      appendJsonString(h, key);
      h += ':';
      appendJsonString(h, value);
    }
    h += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const Entry *e : order) {
    if (!first)
      h += ',';
    first = false;
    appendJsonString(h, e->name);
    h += ":{\"dtype\":\"";
    h += dtypeName(e->dtype);
    h += "\",\"shape\":[";
    for (size_t i = 0; i < e->shape.size(); ++i) {
      if (i > 0)
        h += ',';
      h += std::to_string(e->shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += e->data.size();
    h += std::to_string(offset) + "]}";
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::vector<std::byte> SafetensorsWriter::serialize() const {
  std::vector<const Entry *> order = ordered();
  std::string h = header(order);
  uint64_t n = h.size();
  std::vector<std::byte> out;
  auto append = [&](const void *p, size_t size) {
    auto b = static_cast<const std::byte *>(p);
    out.insert(out.end(), b, b + size);
  };
  append(&n, 8);
  append(h.data(), h.size());
  for (const Entry *e : order)
    append(e->data.data(), e->data.size());
  return out;
}

void SafetensorsWriter::write(const std::string &path) const {
  std::vector<const Entry *> order = ordered();
  const std::string h = header(order);
  const uint64_t n = h.size(); // little-endian on every supported host
  std::vector<std::span<const std::byte>> pieces = {
      std::as_bytes(std::span(&n, 1)), std::as_bytes(std::span(h))};
  for (const Entry *e : order)
    pieces.push_back(e->data);
  writeFileAtomically(path, pieces);
}

} // namespace tpc::runtime
