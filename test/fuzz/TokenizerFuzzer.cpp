// libFuzzer target: tokenizer files (GPT-2's vocab.json and merges.txt) are
// untrusted input, and so is the text they encode. An input is
// "vocab.json \0 merges.txt \0 text": the loader either rejects the pair with
// one line or returns a tokenizer that encodes the text losslessly
// (decode(encode(text)) == text, every id inside the vocabulary).

#include "FuzzFile.h"
#include "tpc/runtime/Tokenizer.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

using namespace tpc::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static tpc::fuzz::ScratchFile vocabFile("tpc-fuzz.vocab.json");
  static tpc::fuzz::ScratchFile mergesFile("tpc-fuzz.merges.txt");
  std::string_view input(reinterpret_cast<const char *>(data), size);
  size_t first = input.find('\0');
  if (first == std::string_view::npos)
    return 0;
  size_t second = input.find('\0', first + 1);
  if (second == std::string_view::npos)
    return 0;
  std::string_view vocab = input.substr(0, first);
  std::string_view merges = input.substr(first + 1, second - first - 1);
  std::string_view text = input.substr(second + 1);

  std::optional<BpeTokenizer> tokenizer;
  try {
    tokenizer.emplace(
        BpeTokenizer::load(vocabFile.write(vocab.data(), vocab.size()),
                           mergesFile.write(merges.data(), merges.size())));
  } catch (const std::runtime_error &) {
    return 0;
  }
  std::vector<int32_t> ids = tokenizer->encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer->vocabSize())
      std::abort();
  if (tokenizer->decode(ids) != text)
    std::abort();
  return 0;
}
