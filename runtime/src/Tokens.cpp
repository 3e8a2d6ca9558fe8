#include "tpc/runtime/Tokens.h"

#include "tpc/runtime/Files.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <unistd.h>

namespace tpc::runtime {

namespace {
constexpr char kMagic[8] = {'T', 'P', 'C', 'T', 'O', 'K', 'v', '1'};

uint64_t readLE64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
} // namespace

void checkTokenIds(std::span<const int32_t> tokens, int64_t vocab,
                   const std::string &what) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw std::runtime_error(what + ": token " + std::to_string(i) +
                               " has id " + std::to_string(tokens[i]) +
                               ", outside the vocabulary of " +
                               std::to_string(vocab));
}

void checkTokenBatch(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                     int64_t vocab, const std::string &what,
                     const std::string &taker) {
  if (int64_t(ids.size()) != batch * seq)
    throw std::invalid_argument(
        what + ": " + std::to_string(ids.size()) + " token ids; " + taker +
        " takes [" + std::to_string(batch) + ", " + std::to_string(seq) + "]");
  if (vocab > 0)
    checkTokenIds(ids, vocab, what);
}

std::vector<int32_t> readTokenFile(const std::string &path) {
  // Tokens are 4 bytes each and ids are int32: 2^31 of them at most.
  const uint64_t size =
      checkRegularFile(path, 16 + (uint64_t(4) << 31), "token file");
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw std::runtime_error(path + ": cannot open the token file");
  unsigned char header[16];
  if (size < 16 || !file.read(reinterpret_cast<char *>(header), 16))
    throw std::runtime_error(path + ": too short for a token file header (" +
                             std::to_string(size) + " bytes)");
  if (std::memcmp(header, kMagic, 8) != 0)
    throw std::runtime_error(path + ": not a token file (magic is not "
                                    "TPCTOKv1)");
  const uint64_t count = readLE64(header + 8);
  if (count > (size - 16) / 4 || size != 16 + 4 * count)
    throw std::runtime_error(path + ": header says " + std::to_string(count) +
                             " tokens, but the file has " +
                             std::to_string(size) + " bytes (expected " +
                             std::to_string(16 + 4 * count) + ")");
  std::vector<unsigned char> raw(4 * count);
  if (count && !file.read(reinterpret_cast<char *>(raw.data()), raw.size()))
    throw std::runtime_error(path + ": cannot read the tokens");
  std::vector<int32_t> tokens(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t id = uint32_t(raw[4 * i]) | uint32_t(raw[4 * i + 1]) << 8 |
                  uint32_t(raw[4 * i + 2]) << 16 |
                  uint32_t(raw[4 * i + 3]) << 24;
    if (id > uint32_t(std::numeric_limits<int32_t>::max()))
      throw std::runtime_error(path + ": token " + std::to_string(i) +
                               " has id " + std::to_string(id) +
                               ", above 2^31-1");
    tokens[i] = int32_t(id);
  }
  return tokens;
}

void writeTokenFile(const std::string &path, std::span<const int32_t> tokens) {
  std::vector<unsigned char> bytes(16 + 4 * tokens.size());
  std::memcpy(bytes.data(), kMagic, 8);
  uint64_t count = tokens.size();
  for (int i = 0; i < 8; ++i)
    bytes[8 + i] = (count >> (8 * i)) & 0xff;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0)
      throw std::invalid_argument("writeTokenFile: negative token id " +
                                  std::to_string(tokens[t]));
    uint32_t id = uint32_t(tokens[t]);
    for (int i = 0; i < 4; ++i)
      bytes[16 + 4 * t + i] = (id >> (8 * i)) & 0xff;
  }
  writeFileAtomically(
      path, std::string_view(reinterpret_cast<const char *>(bytes.data()),
                             bytes.size()));
}

Batch cutBatch(std::span<const int32_t> stream, int64_t offset, int64_t batch,
               int64_t seq) {
  if (offset < 0 || batch <= 0 || seq <= 0)
    throw std::runtime_error("invalid batch window");
  const uint64_t need = uint64_t(offset) + uint64_t(batch * seq) + 1;
  if (stream.size() < need)
    throw std::runtime_error(
        "the token stream has " + std::to_string(stream.size()) +
        " tokens; a batch of " + std::to_string(batch) + "x" +
        std::to_string(seq) + " at offset " + std::to_string(offset) +
        " needs " + std::to_string(need));
  Batch result;
  result.tokens.assign(stream.begin() + offset,
                       stream.begin() + offset + batch * seq);
  result.targets.assign(stream.begin() + offset + 1,
                        stream.begin() + offset + batch * seq + 1);
  return result;
}

} // namespace tpc::runtime
