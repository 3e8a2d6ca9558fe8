#include "tpc/runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

using namespace tpc::runtime;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytesOf(std::string_view s) {
  auto p = reinterpret_cast<const std::byte *>(s.data());
  return {p, p + s.size()};
}

std::vector<std::byte> readFileBytes(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)),
                std::istreambuf_iterator<char>());
  return bytesOf(s);
}

void writeFileBytes(const fs::path &path, std::span<const std::byte> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(data.data()),
            static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

/// A file's JSON header text (as stored, padding included) and data section.
struct Parts {
  std::string header;
  std::vector<std::byte> data;
};

Parts split(const std::vector<std::byte> &file) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  Parts p;
  p.header.assign(reinterpret_cast<const char *>(file.data()) + 8, n);
  p.data.assign(file.begin() + 8 + static_cast<ptrdiff_t>(n), file.end());
  return p;
}

std::vector<std::byte> join(const std::string &header,
                            std::span<const std::byte> data) {
  uint64_t n = header.size();
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &n, 8);
  auto h = bytesOf(header);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// `s` with the first `from` replaced by `to`; `from` must occur.
std::string replaced(std::string s, std::string_view from,
                     std::string_view to) {
  size_t at = s.find(from);
  if (at == std::string::npos)
    throw std::logic_error("test bug: '" + std::string(from) +
                           "' not in header " + s);
  return s.replace(at, from.size(), to);
}

template <typename T> std::span<const std::byte> raw(const std::vector<T> &v) {
  return std::as_bytes(std::span<const T>(v));
}

/// A valid file: "a" F32 [2,2] at [0,16], "b" F16 [3] at [16,22], metadata.
std::vector<std::byte> baseFile() {
  SafetensorsWriter w;
  std::vector<float> a = {1, 2, 3, 4};
  std::vector<float> b = {0.5f, -1.0f, 2.0f};
  w.addF32("b", {3}, b, DType::F16);
  w.addF32("a", {2, 2}, a);
  w.setMetadata("format", "pt");
  return w.serialize();
}

const char *kBaseHeader =
    R"({"__metadata__":{"format":"pt"},)"
    R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"F16","shape":[3],"data_offsets":[16,22]}})";

class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() /
        ("tpc-safetensors-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string &name) const {
    return (dir_ / name).string();
  }

  /// Writes `bytes` to a file called `name` and returns its path.
  std::string file(const std::string &name, std::span<const std::byte> bytes) {
    std::string p = path(name);
    writeFileBytes(p, bytes);
    return p;
  }

  /// The base file with its header text transformed by `edit`.
  std::string withHeader(const std::string &name,
                         const std::function<std::string(std::string)> &edit) {
    Parts parts = split(baseFile());
    return file(name, join(edit(parts.header), parts.data));
  }

  /// The base file with the first `from` in its header replaced by `to` must
  /// fail to open with a message mentioning `needle`.
  void expectHeaderEditRejected(const std::string &name, std::string_view from,
                                std::string_view to,
                                const std::string &needle) {
    expectOpenError(withHeader(name,
                               [&](std::string h) {
                                 return replaced(std::move(h), from, to);
                               }),
                    needle);
  }

  /// open(path) must throw a one-line std::runtime_error that starts with
  /// the path and mentions `needle`.
  static void expectOpenError(const std::string &p, const std::string &needle) {
    EXPECT_THROW(SafetensorsFile::open(p), std::runtime_error);
    try {
      SafetensorsFile::open(p);
    } catch (const std::runtime_error &e) {
      std::string m = e.what();
      EXPECT_EQ(m.rfind(p + ": ", 0), 0u) << m;
      EXPECT_NE(m.find(needle), std::string::npos)
          << "message: " << m << "\nexpected to mention: " << needle;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }

  fs::path dir_;
};

// --- Conversions -----------------------------------------------------------

TEST(SafetensorsConversion, F16KnownValues) {
  EXPECT_EQ(f32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(f32ToF16(-2.5f), 0xC100);
  EXPECT_EQ(f32ToF16(65504.0f), 0x7BFF);              // largest finite
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(f32ToF16(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(f32ToF16(0.0f), 0x0000);
  EXPECT_EQ(f32ToF16(-0.0f), 0x8000);
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32ToF16(inf), 0x7C00);
  EXPECT_EQ(f32ToF16(-inf), 0xFC00);
  // Rounding: ties to even, overflow to infinity, underflow to zero.
  EXPECT_EQ(f32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);     // tie, even
  EXPECT_EQ(f32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02); // tie, even
  EXPECT_EQ(f32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7C00); // the tie above 65504 goes to inf
  EXPECT_EQ(f32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -25)), 0x0000); // tie between 0 and 1
  EXPECT_EQ(f32ToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32ToF16(3 * std::ldexp(1.0f, -25)), 0x0002); // tie, even
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32ToF16(-std::ldexp(1.0f, -30)), 0x8000);
  // NaN stays NaN (quiet), also a signalling NaN whose payload is only in
  // the low bits.
  uint16_t nan = f32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  uint16_t snan = f32ToF16(std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(snan & 0x7C00, 0x7C00);
  EXPECT_NE(snan & 0x03FF, 0);

  EXPECT_EQ(f16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(f16ToF32(0xC100), -2.5f);
  EXPECT_EQ(f16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToF32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16ToF32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToF32(0x7C00), inf);
  EXPECT_EQ(f16ToF32(0xFC00), -inf);
  EXPECT_TRUE(std::signbit(f16ToF32(0x8000)));
  EXPECT_TRUE(std::isnan(f16ToF32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16ToF32(0x7C01)));
}

TEST(SafetensorsConversion, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16ToF32(static_cast<uint16_t>(h));
    bool isNan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    ASSERT_EQ(std::isnan(f), isNan) << std::hex << h;
    if (!isNan) {
      ASSERT_EQ(f32ToF16(f), h) << std::hex << h;
    }
  }
}

#ifdef __FLT16_MANT_DIG__
// The compiler's own float -> _Float16 conversion (round to nearest even) is
// an independent reference; sample the whole f32 range.
TEST(SafetensorsConversion, F16MatchesCompilerConversion) {
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 1021) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f))
      continue;
    auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(f32ToF16(f), expected) << std::hex << bits;
  }
}
#endif

TEST(SafetensorsConversion, BF16KnownValues) {
  EXPECT_EQ(f32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(f32ToBF16(-2.5f), 0xC020);
  EXPECT_EQ(f32ToBF16(1.00390625f), 0x3F80); // 1 + 2^-8: tie, to even (down)
  EXPECT_EQ(f32ToBF16(1.01171875f), 0x3F82); // 1 + 3*2^-8: tie, to even (up)
  EXPECT_EQ(f32ToBF16(std::nextafter(1.00390625f, 2.0f)), 0x3F81);
  EXPECT_EQ(f32ToBF16(std::nextafter(1.00390625f, 0.0f)), 0x3F80);
  EXPECT_EQ(f32ToBF16(std::numeric_limits<float>::max()), 0x7F80); // -> inf
  EXPECT_EQ(f32ToBF16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32ToBF16(std::ldexp(1.0f, -133)), 0x0001); // subnormal, exact
  EXPECT_EQ(f32ToBF16(-0.0f), 0x8000);
  // A NaN with payload only in the low 16 bits must not become infinity.
  uint16_t nan = f32ToBF16(std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
  EXPECT_EQ(f32ToBF16(std::bit_cast<float>(0xFFC00000u)), 0xFFC0);

  EXPECT_EQ(bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(bf16ToF32(0xC020), -2.5f);
  EXPECT_EQ(bf16ToF32(0x0001), std::ldexp(1.0f, -133));
  EXPECT_TRUE(std::isnan(bf16ToF32(0x7FC0)));
}

TEST(SafetensorsConversion, BF16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = bf16ToF32(static_cast<uint16_t>(b));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32ToBF16(f), b) << std::hex << b;
    }
  }
}

// The array forms mixed precision stores activations with: the same
// rounding, element by element.
TEST(SafetensorsConversion, BF16ArraysConvertElementwise) {
  const std::vector<float> values = {1.00390625f,
                                     1.01171875f,
                                     -2.5f,
                                     3.0e38f,
                                     std::nextafter(1.00390625f, 2.0f),
                                     -0.0f,
                                     std::ldexp(1.0f, -133)};
  std::vector<uint16_t> narrow(values.size());
  narrowToBf16(values.data(), narrow.data(), int64_t(values.size()));
  std::vector<float> wide(values.size());
  widenBf16(narrow.data(), wide.data(), int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(narrow[i], f32ToBF16(values[i])) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(wide[i]), uint32_t(narrow[i]) << 16);
  }
}

// Nearest-even against a reference computed in double precision.
TEST(SafetensorsConversion, BF16RoundsToNearestEven) {
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 257) {
    auto x = static_cast<uint32_t>(bits);
    float f = std::bit_cast<float>(x);
    if (!std::isfinite(f))
      continue;
    uint32_t lo = x & 0xFFFF0000u, hi = lo + 0x10000u;
    double dlo = std::bit_cast<float>(lo);
    // `hi` may be the infinity pattern; its "value" for rounding is 2^128.
    double dhi = (hi & 0x7FFFFFFFu) == 0x7F800000u
                     ? std::copysign(std::ldexp(1.0, 128), f)
                     : static_cast<double>(std::bit_cast<float>(hi));
    double dl = std::fabs(f - dlo), dh = std::fabs(dhi - f);
    uint32_t expected =
        (dl < dh || (dl == dh && ((lo >> 16) & 1) == 0)) ? lo : hi;
    ASSERT_EQ(f32ToBF16(f), expected >> 16) << std::hex << x;
  }
}

TEST(SafetensorsConversion, DTypeNames) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64})
    EXPECT_EQ(parseDType(dtypeName(d)), d);
  EXPECT_EQ(dtypeSize(DType::F32), 4u);
  EXPECT_EQ(dtypeSize(DType::F16), 2u);
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::I32), 4u);
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_EQ(parseDType("F64"), std::nullopt);
  EXPECT_EQ(parseDType("f32"), std::nullopt);
}

// --- Writer format ---------------------------------------------------------

// Byte-exact against the reference implementation's own serializer tests.
TEST(SafetensorsWriterFormat, MatchesReferenceBytes) {
  std::vector<float> values = {0, 1, 2, 3, 4, 5};
  {
    SafetensorsWriter w;
    w.addF32("attn.0", {1, 2, 3}, values);
    std::string header =
        R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(header.size(), 64u); // no padding needed
    EXPECT_EQ(w.serialize(), join(header, raw(values)));
  }
  {
    SafetensorsWriter w;
    w.addF32("attn0", {1, 1, 2, 3}, values);
    std::string header =
        R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})"
        "       ";
    ASSERT_EQ(header.size(), 72u);
    EXPECT_EQ(w.serialize(), join(header, raw(values)));
  }
  {
    SafetensorsWriter w;
    EXPECT_EQ(w.serialize(), join("{}      ", {}));
    w.setMetadata("framework", "pt");
    EXPECT_EQ(w.serialize(), join(R"({"__metadata__":{"framework":"pt"}})"
                                  "     ",
                                  {}));
  }
}

TEST(SafetensorsWriterFormat, OrdersByAlignmentThenName) {
  SafetensorsWriter w;
  std::vector<float> f = {1, 2, 3};
  std::vector<int64_t> l = {7};
  std::vector<int32_t> i = {5};
  w.addF32("z", {3}, f, DType::F16);
  w.addF32("b", {3}, f);
  w.addF32("a", {3}, f);
  w.addF32("y", {3}, f, DType::BF16);
  w.addI32("i", {1}, i);
  w.addI64("c", {1}, l);
  Parts p = split(w.serialize());
  EXPECT_EQ(p.header.size() % 8, 0u);
  EXPECT_EQ(p.header.rfind(
                R"({"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                R"("a":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},)"
                R"("b":{"dtype":"F32","shape":[3],"data_offsets":[20,32]},)"
                R"("i":{"dtype":"I32","shape":[1],"data_offsets":[32,36]},)"
                R"("y":{"dtype":"BF16","shape":[3],"data_offsets":[36,42]},)"
                R"("z":{"dtype":"F16","shape":[3],"data_offsets":[42,48]}})",
                0),
            0u)
      << p.header;
}

TEST(SafetensorsWriterFormat, RejectsBadTensors) {
  SafetensorsWriter w;
  std::vector<float> four = {1, 2, 3, 4};
  w.addF32("a", {4}, four);
  EXPECT_THROW(w.addF32("a", {4}, four), std::invalid_argument);
  EXPECT_THROW(w.addF32("b", {3}, four), std::invalid_argument);
  EXPECT_THROW(w.addF32("c", {-1, -4}, four), std::invalid_argument);
  EXPECT_THROW(w.addF32("__metadata__", {4}, four), std::invalid_argument);
  EXPECT_THROW(w.addF32("d", {4}, four, DType::I32), std::invalid_argument);
  EXPECT_THROW(w.addF32("\xff", {4}, four), std::invalid_argument);
  EXPECT_THROW(w.setMetadata("k", "\xc0\x80"), std::invalid_argument);
  std::vector<std::byte> three(3);
  EXPECT_THROW(w.add("e", DType::F16, {2}, three), std::invalid_argument);
}

// --- Round trips -----------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsAllDTypes) {
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 1e-30f, -inf, 7.0f};
  std::vector<float> f16 = {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24)};
  std::vector<float> bf16 = {1.0f, -2.5f, 3.0e38f, 1.0078125f};
  std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), -1, 0,
                              std::numeric_limits<int32_t>::max()};
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), 42};
  std::vector<float> scalar = {3.5f};
  std::vector<float> none;

  SafetensorsWriter w;
  w.addF32("weights.f32", {2, 3}, f32);
  w.addF32("weights.f16", {4}, f16, DType::F16);
  w.addF32("weights.bf16", {2, 2}, bf16, DType::BF16);
  w.addI32("tokens", {4}, i32);
  w.addI64("targets", {3, 1}, i64);
  w.addF32("scalar", {}, scalar);
  w.addF32("empty", {0, 4}, none);
  w.addF32("empty.f16", {3, 0}, none, DType::F16);
  std::string p = path("all.safetensors");
  w.write(p);
  EXPECT_EQ(readFileBytes(p), w.serialize());

  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.tensors().size(), 8u);
  EXPECT_TRUE(f.metadata().empty());
  for (const TensorInfo &t : f.tensors())
    EXPECT_EQ(t.begin % dtypeSize(t.dtype), 0u) << t.name; // aligned layout

  const TensorInfo *t = f.find("weights.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->numElements(), 6u);
  EXPECT_EQ(t->end - t->begin, 24u);
  EXPECT_EQ(f.readAsF32("weights.f32"), f32);
  std::span<const std::byte> b = f.bytes(*t);
  ASSERT_EQ(b.size(), 24u);
  EXPECT_EQ(std::memcmp(b.data(), f32.data(), 24), 0);

  EXPECT_EQ(f.get("weights.f16").dtype, DType::F16);
  EXPECT_EQ(f.readAsF32("weights.f16"), f16); // all exactly representable
  EXPECT_EQ(f.get("weights.bf16").dtype, DType::BF16);
  std::vector<float> bf16Read = f.readAsF32("weights.bf16");
  ASSERT_EQ(bf16Read.size(), 4u);
  EXPECT_EQ(bf16Read[0], 1.0f);
  EXPECT_EQ(bf16Read[1], -2.5f);
  EXPECT_EQ(bf16Read[2], bf16ToF32(f32ToBF16(3.0e38f)));
  EXPECT_EQ(bf16Read[3], 1.0078125f);

  EXPECT_EQ(f.get("tokens").dtype, DType::I32);
  EXPECT_EQ(f.readAsI64("tokens"),
            std::vector<int64_t>(i32.begin(), i32.end()));
  EXPECT_EQ(f.get("targets").shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(f.readAsI64("targets"), i64);

  const TensorInfo &s = f.get("scalar");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numElements(), 1u);
  EXPECT_EQ(f.readAsF32("scalar"), scalar);

  const TensorInfo &e = f.get("empty");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(e.numElements(), 0u);
  EXPECT_EQ(e.begin, e.end);
  EXPECT_TRUE(f.readAsF32("empty").empty());
  EXPECT_TRUE(f.readAsF32("empty.f16").empty());
  EXPECT_EQ(f.get("empty.f16").shape, (std::vector<int64_t>{3, 0}));
}

TEST_F(SafetensorsTest, ReadsSpecialF16AndBF16Bits) {
  std::vector<uint16_t> halves = {0x0001, 0x03FF, 0x7C00,
                                  0xFC00, 0x7E00, 0x8000};
  std::vector<uint16_t> brains = {0x0001, 0x7F80, 0xFFC0, 0x3F81};
  SafetensorsWriter w;
  w.add("h", DType::F16, {6}, raw(halves));
  w.add("b", DType::BF16, {4}, raw(brains));
  std::string p = path("special.safetensors");
  w.write(p);
  SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<float> h = f.readAsF32("h");
  ASSERT_EQ(h.size(), 6u);
  EXPECT_EQ(h[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[1], std::ldexp(1023.0f, -24));
  EXPECT_EQ(h[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[3], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[4]));
  EXPECT_TRUE(h[5] == 0.0f && std::signbit(h[5]));
  std::vector<float> b = f.readAsF32("b");
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], std::ldexp(1.0f, -133));
  EXPECT_EQ(b[1], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(b[2]) && std::signbit(b[2]));
  EXPECT_EQ(b[3], 1.0078125f);
}

TEST_F(SafetensorsTest, RoundTripsMetadataAndOddNames) {
  SafetensorsWriter w;
  std::vector<float> one = {1};
  w.addF32("h.0/attn.c_attn.weight", {1}, one);
  w.addF32("quote\"back\\slash", {1}, one);
  w.addF32("new\nline\ttab\x01", {1}, one);
  w.addF32("\xc3\xbcnicode \xf0\x9f\x98\x80", {1}, one);
  w.addF32("", {1}, one);
  w.setMetadata("format", "pt");
  w.setMetadata("format", "tpc"); // replaces
  w.setMetadata("empty", "");
  w.setMetadata("json", R"({"a": [1, 2]})");
  w.setMetadata("ctl\x1f\b\f\r", "\xc3\xa9t\xc3\xa9\n");
  std::string p = path("meta.safetensors");
  w.write(p);
  SafetensorsFile f = SafetensorsFile::open(p);
  std::map<std::string, std::string> expected = {
      {"format", "tpc"},
      {"empty", ""},
      {"json", R"({"a": [1, 2]})"},
      {"ctl\x1f\b\f\r", "\xc3\xa9t\xc3\xa9\n"}};
  EXPECT_EQ(f.metadata(), expected);
  for (const char *name :
       {"h.0/attn.c_attn.weight", "quote\"back\\slash", "new\nline\ttab\x01",
        "\xc3\xbcnicode \xf0\x9f\x98\x80", ""})
    EXPECT_EQ(f.readAsF32(name), one) << name;
  // Control characters are written as serde_json writes them.
  EXPECT_NE(split(readFileBytes(p)).header.find(R"("new\nline\ttab\u0001")"),
            std::string::npos);
}

TEST_F(SafetensorsTest, AcceptsAnyValidJsonLayout) {
  // Keys in any order, whitespace, escapes, tensors not in offset order,
  // zero-size tensors sharing an offset, no padding.
  std::string header = " \n{ \"b\" : { \"shape\" : [ 2 ] , \"data_offsets\" : "
                       "[4, 8], \"dtype\" : \"F16\" } ,\r\n"
                       "\"\\u00e9\\ud83d\\ude00\\/\": {\"dtype\": \"I32\", "
                       "\"shape\": [1], \"data_offsets\": [0, 4]},\t"
                       "\"z1\": {\"dtype\": \"F32\", \"shape\": [0], "
                       "\"data_offsets\": [8, 8]},"
                       "\"z0\": {\"dtype\": \"BF16\", \"shape\": [2, 0], "
                       "\"data_offsets\": [8, 8]},"
                       "\"__metadata__\": {\"k\": \"v\\\"\"}} \t\r\n";
  std::vector<std::byte> data(8);
  int32_t v = -7;
  std::memcpy(data.data(), &v, 4);
  uint16_t h[2] = {0x3C00, 0xC100};
  std::memcpy(data.data() + 4, h, 4);
  SafetensorsFile f =
      SafetensorsFile::open(file("layout.safetensors", join(header, data)));
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "\xc3\xa9\xf0\x9f\x98\x80/");
  EXPECT_EQ(f.tensors()[1].name, "b");
  EXPECT_EQ(f.readAsI64("\xc3\xa9\xf0\x9f\x98\x80/"), std::vector<int64_t>{-7});
  EXPECT_EQ(f.readAsF32("b"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_TRUE(f.readAsF32("z0").empty());
  EXPECT_EQ(f.metadata().at("k"), "v\"");
}

TEST_F(SafetensorsTest, EmptyFileRoundTrips) {
  SafetensorsWriter w;
  std::string p = path("nothing.safetensors");
  w.write(p);
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, LookupErrors) {
  std::string p = file("base.safetensors", baseFile());
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_THROW(f.get("missing"), std::runtime_error);
  try {
    f.readAsF32("missing");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("no tensor named 'missing'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(f.readAsI64("a"), std::runtime_error);
  SafetensorsWriter w;
  std::vector<int32_t> i = {1};
  w.addI32("i", {1}, i);
  w.write(path("i.safetensors"));
  EXPECT_THROW(SafetensorsFile::open(path("i.safetensors")).readAsF32("i"),
               std::runtime_error);
}

TEST_F(SafetensorsTest, BaseFileIsAsExpected) {
  // The corruption tests below edit this header text.
  Parts parts = split(baseFile());
  EXPECT_EQ(parts.header.rfind(kBaseHeader, 0), 0u) << parts.header;
  EXPECT_EQ(parts.data.size(), 22u);
  SafetensorsFile f = SafetensorsFile::open(
      withHeader("base.safetensors", [](auto h) { return h; }));
  EXPECT_EQ(f.readAsF32("a"), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(f.readAsF32("b"), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

// --- Corrupted files -------------------------------------------------------

TEST_F(SafetensorsTest, RejectsTinyFiles) {
  expectOpenError(file("three.safetensors", bytesOf("abc")), "too short");
  expectOpenError(file("zero.safetensors", {}), "too short");
  expectOpenError(path("does-not-exist.safetensors"), "cannot open");
  expectOpenError(dir_.string(), "not a regular file");
}

TEST_F(SafetensorsTest, RejectsTruncatedFiles) {
  std::vector<std::byte> good = baseFile();
  std::vector<std::byte> inHeader(good.begin(), good.begin() + 40);
  expectOpenError(file("cut-header.safetensors", inHeader),
                  "extends beyond the end of the file");
  std::vector<std::byte> inData(good.begin(), good.end() - 3);
  expectOpenError(file("cut-data.safetensors", inData),
                  "extend beyond the end of the data section");
}

TEST_F(SafetensorsTest, RejectsBadHeaderLength) {
  std::vector<std::byte> bad = baseFile();
  uint64_t n = bad.size() - 7; // one more than what is left after the length
  std::memcpy(bad.data(), &n, 8);
  expectOpenError(file("len.safetensors", bad),
                  "extends beyond the end of the file");
  n = uint64_t{1} << 40;
  std::memcpy(bad.data(), &n, 8);
  expectOpenError(file("huge.safetensors", bad), "exceeds the limit");
  n = ~uint64_t{0};
  std::memcpy(bad.data(), &n, 8);
  expectOpenError(file("max.safetensors", bad), "exceeds the limit");
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  auto bad = [&](const char *name, std::string_view from, std::string_view to,
                 const std::string &needle) {
    expectHeaderEditRejected(name, from, to, needle);
  };
  bad("missing-comma.st", "[2,2]", "[2 2]",
      "invalid JSON in header: parse error at line 1, column");
  bad("missing-colon.st", R"("a":)", R"("a")", "invalid JSON");
  bad("bad-escape.st", R"("format")", R"("form\at")",
      "invalid string: forbidden character after backslash");
  bad("lone-surrogate.st", R"("format")", R"("\ud800")",
      "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
  bad("bad-number.st", "[2,2]", "[02,2]", "invalid JSON");
  // Found by fuzz-safetensors: nlohmann-json throws out_of_range, not a
  // parse error, for a number beyond double's range.
  bad("huge-number.st", "[2,2]", "[15E488,2]",
      "invalid JSON in header: number overflow parsing '15E488'");
  bad("control-char.st", R"("pt")", "\"p\tt\"", "control character");
  bad("single-quotes.st", R"("pt")", "'pt'", "invalid JSON");
  bad("trailing-comma.st", "[2,2]", "[2,2,]", "invalid JSON");
  bad("trailing-garbage.st", "}}", "}}x", "expected end of input");
  bad("two-objects.st", "}}", "}}{}", "expected end of input");
  bad("cut-short.st", "}}", "}", "unexpected end of input");
  bad("not-utf8.st", R"("pt")", "\"p\xfft\"", "not valid UTF-8");
  bad("overlong-utf8.st", R"("pt")", "\"\xc0\xafpt\"", "not valid UTF-8");
}

TEST_F(SafetensorsTest, RejectsNonObjectHeader) {
  Parts parts = split(baseFile());
  expectOpenError(file("array.st", join("[1, 2]  ", parts.data)),
                  "header is not a JSON object (found an array)");
  expectOpenError(file("string.st", join(R"("abc")", parts.data)),
                  "header is not a JSON object (found a string)");
  expectOpenError(file("blank.st", join("        ", parts.data)),
                  "header is empty");
  expectOpenError(file("nul.st", join(std::string(8, '\0'), parts.data)),
                  "invalid JSON");
}

TEST_F(SafetensorsTest, RejectsBadTensorEntries) {
  auto bad = [&](const char *name, std::string_view from, std::string_view to,
                 const std::string &needle) {
    expectHeaderEditRejected(name, from, to, needle);
  };
  bad("f64.st", R"("F32")", R"("F64")",
      R"(tensor 'a': unsupported dtype "F64")");
  bad("lower.st", R"("F32")", R"("f32")", R"(unsupported dtype "f32")");
  bad("dtype-num.st", R"("F32")", "32",
      R"(tensor 'a': "dtype" must be a string, found a number)");
  bad("no-dtype.st", R"("dtype":"F32",)", "", R"(tensor 'a': missing "dtype")");
  bad("no-shape.st", R"("shape":[2,2],)", "", R"(missing "shape")");
  bad("no-offsets.st", R"(,"data_offsets":[0,16])", "",
      R"(missing "data_offsets")");
  bad("dup-field.st", R"("shape":[2,2],)", R"("shape":[2,2],"shape":[2,2],)",
      R"(duplicate key "shape")");
  bad("entry-array.st",
      R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})", "[0,16]",
      "tensor 'a': entry must be a JSON object, found an array");
  bad("shape-string.st", "[2,2]", R"("2x2")",
      R"("shape" must be an array of non-negative integers, found a string)");
  bad("shape-negative.st", "[2,2]", "[-2,-2]",
      "shape[0] must be a non-negative integer, found -2");
  bad("shape-float.st", "[2,2]", "[2,2.0]",
      "shape[1] must be a non-negative integer, found 2.0");
  bad("shape-exp.st", "[2,2]", "[2e0,2]",
      "must be a non-negative integer, found 2.0");
  bad("shape-null.st", "[2,2]", "[2,null]",
      "shape[1] must be a non-negative integer, found null");
  bad("shape-huge.st", "[2,2]", "[2,99999999999999999999]", "too large");
  bad("shape-overflow.st", "[2,2]", "[4294967296,4294967296,4]",
      "element count of shape [4294967296,4294967296,4] overflows");
  bad("offsets-one.st", "[0,16]", "[16]", "found one entry");
  bad("offsets-three.st", "[0,16]", "[0,16,32]", "more than two entries");
  bad("offsets-object.st", "[0,16]", "{}",
      R"("data_offsets" must be an array of two non-negative integers)");
  bad("offsets-negative.st", "[0,16]", "[-16,0]",
      "data_offsets[0] must be a non-negative integer");
  bad("offsets-reversed.st", "[0,16]", "[16,0]", "have begin > end");
}

TEST_F(SafetensorsTest, IgnoresUnknownTensorKeysLikeTheReference) {
  std::string extra =
      R"("shape":[2,2],"bias":{"x":[1,-2.5e3,true,false,null,"s\u00e9"]},)";
  SafetensorsFile f =
      SafetensorsFile::open(withHeader("extra.st", [&](std::string h) {
        return replaced(h, R"("shape":[2,2],)", extra);
      }));
  EXPECT_EQ(f.readAsF32("a"), (std::vector<float>{1, 2, 3, 4}));
  // ...but the ignored value must still be valid JSON.
  expectOpenError(withHeader("extra-bad.st",
                             [](std::string h) {
                               return replaced(h, R"("shape":[2,2],)",
                                               R"("shape":[2,2],"x":[tru],)");
                             }),
                  "invalid JSON in header: parse error at line 1, column");
  expectOpenError(withHeader("extra-deep.st",
                             [](std::string h) {
                               return replaced(h, R"("shape":[2,2],)",
                                               R"("shape":[2,2],"x":)" +
                                                   std::string(1000, '[') +
                                                   std::string(1000, ']') +
                                                   ",");
                             }),
                  "nesting deeper than 128");
}

TEST_F(SafetensorsTest, RejectsSizeMismatch) {
  expectOpenError(
      withHeader("mismatch.st",
                 [](std::string h) { return replaced(h, "[2,2]", "[2,3]"); }),
      "tensor 'a': data_offsets [0,16] span 16 bytes but shape "
      "[2,3] of F32 needs 24 (size mismatch)");
  expectOpenError(withHeader("mismatch-dtype.st",
                             [](std::string h) {
                               return replaced(h, R"("F16")", R"("F32")");
                             }),
                  "size mismatch");
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  // "b" [16,22] moved to overlap "a".
  expectOpenError(withHeader("overlap.st",
                             [](std::string h) {
                               return replaced(h, "[16,22]", "[14,20]");
                             }),
                  "tensor 'b' (data_offsets [14,20]) overlaps tensor 'a' "
                  "(data_offsets [0,16])");
  // Both at the same place.
  expectOpenError(withHeader("same.st",
                             [](std::string h) {
                               h = replaced(h, R"("F16","shape":[3])",
                                            R"("F32","shape":[4])");
                               return replaced(h, "[16,22]", "[0,16]");
                             }),
                  "overlaps");
  // "b" past the end of the data section.
  expectOpenError(withHeader("beyond.st",
                             [](std::string h) {
                               return replaced(h, "[16,22]", "[20,26]");
                             }),
                  "tensor 'b': data_offsets [20,26] extend beyond the end of "
                  "the data section (22 bytes");
  expectOpenError(
      withHeader("far-beyond.st",
                 [](std::string h) {
                   return replaced(
                       h, "[16,22]",
                       "[18446744073709551610,18446744073709551616]");
                 }),
      "too large");
}

TEST_F(SafetensorsTest, RejectsUncoveredData) {
  Parts parts = split(baseFile());
  // A hole: "b" moved up by two bytes, data section grown to match.
  std::vector<std::byte> grown = parts.data;
  grown.resize(24);
  expectOpenError(
      file("hole.st",
           join(replaced(parts.header, "[16,22]", "[18,24]"), grown)),
      "data section bytes [16,18) before tensor 'b' are not covered by any "
      "tensor (hole)");
  // Trailing bytes nobody owns.
  expectOpenError(file("trailing.st", join(parts.header, grown)),
                  "data section is 24 bytes but its tensors end at byte 22");
  // No tensors but data.
  expectOpenError(file("orphan.st", join("{}      ", grown)),
                  "data section is 24 bytes but its tensors end at byte 0");
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  expectOpenError(withHeader("dup.st",
                             [](std::string h) {
                               return replaced(h, R"("b":)", R"("a":)");
                             }),
                  "header has duplicate key 'a'");
  expectOpenError(withHeader("dup-meta.st",
                             [](std::string h) {
                               return replaced(h, R"({"format":"pt"})",
                                               R"({"x":"1","x":"2"})");
                             }),
                  "\"__metadata__\" has duplicate key 'x'");
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  auto bad = [&](const char *name, std::string_view to,
                 const std::string &needle) {
    expectHeaderEditRejected(name, R"({"format":"pt"})", to, needle);
  };
  bad("meta-num.st", R"({"format":1})",
      R"("__metadata__" value for key 'format' must be a string, found a )"
      "number");
  bad("meta-nested.st", R"({"format":{"a":"b"}})",
      "must be a string, found an object");
  bad("meta-string.st", R"("pt")",
      R"("__metadata__" must be an object of string values, found a string)");
  bad("meta-null.st", "null", "found null");
  bad("meta-array.st", R"(["pt"])", "found an array");
}

TEST_F(SafetensorsTest, ErrorMessagesStayOnOneLine) {
  // A name with a newline (via a JSON escape) in an error message.
  expectOpenError(withHeader("newline.st",
                             [](std::string h) {
                               h = replaced(h, R"("a":)", R"("x\ny":)");
                               return replaced(h, R"("F32")", R"("F64")");
                             }),
                  "tensor 'x\\x0ay': unsupported dtype");
}

// --- Atomic writes ---------------------------------------------------------

TEST_F(SafetensorsTest, FailedWriteLeavesNothingBehind) {
  SafetensorsWriter w;
  std::vector<float> v = {1, 2};
  w.addF32("v", {2}, v);
  std::string p = (dir_ / "missing-dir" / "out.safetensors").string();
  try {
    w.write(p);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "missing-dir"));

  // The rename fails (the target is a directory): the temporary is removed.
  fs::create_directory(dir_ / "target");
  EXPECT_THROW(w.write((dir_ / "target").string()), std::runtime_error);
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(dir_))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_empty(dir_ / "target"));
}

TEST_F(SafetensorsTest, WriteReplacesAtomically) {
  std::string p = path("model.safetensors");
  std::vector<float> first(1 << 18, 1.0f), second(1 << 18, 2.0f);
  SafetensorsWriter w1, w2;
  w1.addF32("w", {1 << 18}, first);
  w2.addF32("w", {1 << 18}, second);
  w1.write(p);
  SafetensorsFile before = SafetensorsFile::open(p);
  w2.write(p);
  // The old file was replaced, not rewritten in place: a reader that opened
  // it earlier still sees complete old contents, a new reader the new ones.
  EXPECT_EQ(before.readAsF32("w"), first);
  EXPECT_EQ(SafetensorsFile::open(p).readAsF32("w"), second);
  EXPECT_EQ(readFileBytes(p), w2.serialize());
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(dir_))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.safetensors"});
}

} // namespace
