// Tokenizers: byte-level (one token per byte) and BPE (GPT-2's vocab.json +
// merges.txt, or a HuggingFace tokenizer.json of GPT-2's, LLaMA-3's or
// SentencePiece's kind).
//
// BpeTokenizer reads the vocab.json + merges.txt pair that OpenAI's GPT-2
// release and HuggingFace's GPT2Tokenizer use, and encodes exactly as GPT-2
// does:
//   1. split the text with GPT-2's pre-tokenisation pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//        ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (matched by hand over UTF-8 code points; \p{L}, \p{N} and \s as the
//      Python `regex` module defines them, Unicode 16.0);
//   2. spell each piece's UTF-8 bytes in GPT-2's byte-to-unicode alphabet;
//   3. merge adjacent symbols greedily, lowest merge rank first, all
//      occurrences of a pair in one pass, until no pair has a rank.
// Bytes that are not valid UTF-8 (GPT-2 only ever sees valid text) count as
// one punctuation-like code point each, so every input encodes and
// decode(encode(text)) == text for any bytes. Special tokens such as
// "<|endoftext|>" get no special treatment in the text: they are encoded as
// the plain characters they are spelled with.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::runtime {

/// Byte-level tokens: one token per byte, ids 0..255 (a vocabulary of 256).
std::vector<int32_t> encodeBytes(std::string_view text);

class BpeTokenizer {
public:
  /// Reads GPT-2's vocab.json (an object of token string -> id, tokens
  /// spelled in the byte-to-unicode alphabet) and merges.txt (an optional
  /// "#version: ..." first line, then "a b" per line in priority order).
  /// Throws std::runtime_error("<path>: <problem>") for a file that cannot be
  /// read, malformed JSON, a negative or duplicate id, a vocabulary that lacks
  /// one of the 256 byte tokens, or a merge whose parts or result are not in
  /// the vocabulary.
  static BpeTokenizer load(const std::string &vocabJson,
                           const std::string &mergesTxt);
  /// Reads a HuggingFace tokenizer.json of BPE: byte-level, with GPT-2's
  /// pre-tokenizer (ByteLevel with its pattern) or LLaMA-3's (its Split
  /// pattern, then ByteLevel; ignore_merges takes a piece that is a token
  /// whole), or SentencePiece's (LLaMA-2, Mistral: byte_fallback, the
  /// normalizer putting U+2581 for spaces and in front of each piece, no
  /// pre-tokenizer; the whole piece is merged, lowest rank and leftmost
  /// first, as HuggingFace's heap does). Merges are "a b" or ["a", "b"].
  /// Added tokens split the text before anything else (the leftmost
  /// occurrence, the longest there) and encode to their ids; a
  /// TemplateProcessing post-processor's special tokens (BOS) go around the
  /// whole text. Anything else the file turns on is an error naming the
  /// field, as are the load() errors above. decode() keeps the space a
  /// SentencePiece text starts with.
  static BpeTokenizer loadTokenizerJson(const std::string &path);

  BpeTokenizer(BpeTokenizer &&) noexcept;
  BpeTokenizer &operator=(BpeTokenizer &&) noexcept;
  ~BpeTokenizer();

  /// Token ids of `text` (any bytes; see above). Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  /// The bytes the tokens spell. Throws std::out_of_range for an id that is
  /// not in the vocabulary.
  std::string decode(std::span<const int32_t> tokens) const;
  /// One more than the largest id in vocab.json.
  int64_t vocabSize() const;

private:
  struct Impl;
  friend struct BpeBuilder; // builds an Impl from either file format
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace tpc::runtime
