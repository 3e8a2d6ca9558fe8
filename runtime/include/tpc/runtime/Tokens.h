// Token files (docs/formats.md): "TPCTOKv1", uint64 count, count uint32 ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

/// Reads a token file; throws std::runtime_error ("<path>: ...") if the
/// magic, the count or the file size is wrong, or an id exceeds INT32_MAX.
std::vector<int32_t> readTokenFile(const std::string &path);

/// Throws std::runtime_error ("<what>: token I has id X, outside the
/// vocabulary of V") for the first id that is not in [0, vocab).
void checkTokenIds(std::span<const int32_t> tokens, int64_t vocab,
                   const std::string &what);

/// A program's [batch, seq] token ids: std::invalid_argument ("<what>: N
/// token ids; <taker> takes [batch, seq]") for another count, then
/// checkTokenIds when `vocab` > 0.
void checkTokenBatch(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                     int64_t vocab, const std::string &what,
                     const std::string &taker);

/// Writes a token file atomically (temp file + rename).
void writeTokenFile(const std::string &path, std::span<const int32_t> tokens);

/// One training batch cut from a token stream: rows b read tokens
/// [offset + b*seq, offset + b*seq + seq), targets the same shifted by one.
struct Batch {
  std::vector<int32_t> tokens, targets;
};
/// Throws std::runtime_error if the stream holds fewer than
/// offset + batch*seq + 1 tokens.
Batch cutBatch(std::span<const int32_t> stream, int64_t offset, int64_t batch,
               int64_t seq);

} // namespace tpc::runtime
