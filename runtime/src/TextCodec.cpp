#include "tpc/runtime/TextCodec.h"

#include <charconv>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace tpc::runtime {

TextCodec TextCodec::open(const std::string &tokenizerJson,
                          const std::string &sentencePiece) {
  if (!tokenizerJson.empty() && !sentencePiece.empty())
    throw std::invalid_argument("a tokenizer.json and a SentencePiece model "
                                "both give the tokenizer; give one");
  TextCodec codec;
  if (!tokenizerJson.empty())
    codec.bpe.emplace(BpeTokenizer::loadTokenizerJson(tokenizerJson));
  if (!sentencePiece.empty())
    codec.spm.emplace(SentencePieceTokenizer::load(sentencePiece));
  return codec;
}

std::vector<int32_t> TextCodec::encode(const std::string &text) const {
  return bpe ? bpe->encode(text) : spm ? spm->encode(text) : encodeBytes(text);
}

std::string TextCodec::decode(std::span<const int32_t> ids) const {
  if (bpe)
    return bpe->decode(ids);
  if (spm)
    return spm->decode(ids);
  std::string text;
  for (int32_t id : ids)
    text += id < 256 ? char(id) : '?';
  return text;
}

std::vector<int32_t> parseTokenIds(const std::string &text) {
  std::vector<int32_t> ids;
  std::stringstream list(text);
  for (std::string id; std::getline(list, id, ',');) {
    int64_t value = -1;
    auto [end, error] =
        std::from_chars(id.data(), id.data() + id.size(), value);
    if (error != std::errc() || end != id.data() + id.size() || value < 0 ||
        value > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument("'" + id + "' is not a token id");
    ids.push_back(int32_t(value));
  }
  return ids;
}

} // namespace tpc::runtime
