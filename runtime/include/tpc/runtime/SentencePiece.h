// SentencePiece .model files (LLaMA-2's tokenizer.model and the like),
// through Debian's libsentencepiece: the library that wrote them encodes
// with them, so ids are SentencePiece's own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::runtime {

class SentencePieceTokenizer {
public:
  /// Reads a SentencePiece model (protobuf). Throws std::runtime_error
  /// ("<path>: <SentencePiece's reason>") for a file it cannot load.
  static SentencePieceTokenizer load(const std::string &path);

  SentencePieceTokenizer(SentencePieceTokenizer &&) noexcept;
  SentencePieceTokenizer &operator=(SentencePieceTokenizer &&) noexcept;
  ~SentencePieceTokenizer();

  /// The ids of `text` (SentencePiece's normalisation and pieces), with the
  /// model's BOS in front when it has one, as LLaMA's tokenizers add it.
  /// Special-token spellings in the text are plain text.
  std::vector<int32_t> encode(std::string_view text) const;
  /// The text the ids spell (control tokens such as BOS spell nothing).
  std::string decode(std::span<const int32_t> ids) const;
  int64_t vocabSize() const;
  /// The BOS id, or -1 when the model has none.
  int32_t bosId() const;

private:
  struct Impl;
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace tpc::runtime
