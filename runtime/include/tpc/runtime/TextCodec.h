// Text <-> token ids for prompts and generated text, whichever tokenizer a
// run names: a HuggingFace tokenizer.json, a SentencePiece model or,
// without either, bytes.
#pragma once

#include "tpc/runtime/SentencePiece.h"
#include "tpc/runtime/Tokenizer.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class TextCodec {
public:
  /// At most one of the paths may be given (std::invalid_argument else);
  /// neither: bytes, ids 0..255 (others decode as '?').
  static TextCodec open(const std::string &tokenizerJson,
                        const std::string &sentencePiece);

  std::vector<int32_t> encode(const std::string &text) const;
  std::string decode(std::span<const int32_t> ids) const;

private:
  std::optional<BpeTokenizer> bpe;
  std::optional<SentencePieceTokenizer> spm;
};

/// Comma-separated token ids ("1,2,3"). Throws std::invalid_argument
/// naming the first that is not an id in [0, INT32_MAX].
std::vector<int32_t> parseTokenIds(const std::string &text);

} // namespace tpc::runtime
