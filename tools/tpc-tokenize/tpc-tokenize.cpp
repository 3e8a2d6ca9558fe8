// tpc-tokenize: raw text -> token file (docs/formats.md).
//
//   tpc-tokenize INPUT... -o OUT.tokens          # byte-level: one token/byte
//   tpc-tokenize INPUT... -o OUT.tokens --vocab vocab.json --merges merges.txt
//                                                # GPT-2 byte-level BPE
//   tpc-tokenize --decode IN.tokens -o OUT.txt [tokenizer options]
//                                                # back to text
//
// The inputs are concatenated, byte for byte, in the order given, and the
// result is tokenised as one text. Byte-level tokens need a model with
// vocab_size >= 256; BPE tokens one with at least the vocabulary's size.
// Errors are one line on stderr and exit code 1; the output is written
// atomically.

#include "tpc/runtime/Files.h"
#include "tpc/runtime/SentencePiece.h"
#include "tpc/runtime/Tokenizer.h"
#include "tpc/runtime/Tokens.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {
/// The token file holds 2^31 ids at most; text is a few bytes per token.
constexpr uint64_t kMaxInputBytes = uint64_t(16) << 30;

std::string readInput(const std::string &path) {
  return tpc::runtime::readRegularFile(path, kMaxInputBytes, "text input");
}
} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> inputs;
  std::string output, vocab, merges, tokenizerJson, sentencePieceModel;
  bool decode = false;
  CLI::App app("Tokenises text files into a token file: byte-level (one "
               "token per byte), or GPT-2's byte-level BPE with --vocab and "
               "--merges, a HuggingFace --tokenizer tokenizer.json or a "
               "--sentencepiece model. The inputs are concatenated in the "
               "order given.",
               "tpc-tokenize");
  app.add_option("input", inputs, "Text files")->required();
  app.add_option("-o", output, "Output token file")->required();
  CLI::Option *vocabOption =
      app.add_option("--vocab", vocab, "GPT-2 vocab.json (BPE)");
  CLI::Option *mergesOption =
      app.add_option("--merges", merges, "GPT-2 merges.txt (BPE)");
  vocabOption->needs(mergesOption);
  mergesOption->needs(vocabOption);
  CLI::Option *tokenizerOption = app.add_option(
      "--tokenizer", tokenizerJson,
      "HuggingFace tokenizer.json (BPE as GPT-2's, LLaMA-3's or "
      "SentencePiece's with byte fallback; its added and template tokens)");
  tokenizerOption->excludes(vocabOption)->excludes(mergesOption);
  app.add_option("--sentencepiece", sentencePieceModel,
                 "SentencePiece .model (LLaMA-2's tokenizer.model); its BOS "
                 "goes in front")
      ->excludes(vocabOption)
      ->excludes(mergesOption)
      ->excludes(tokenizerOption);
  app.add_flag("--decode", decode,
               "The input is one token file: write the text its tokens spell "
               "(as the tokenizer given decodes them; bytes without one)");
  try {
    app.parse(argc, argv);
    if (decode && inputs.size() != 1)
      throw CLI::ValidationError("--decode", "takes one token file, got " +
                                                 std::to_string(inputs.size()));
  } catch (const CLI::CallForHelp &) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError &error) {
    std::cerr << "tpc-tokenize: error: " << error.what() << "\n";
    return 1;
  }
  try {
    std::optional<tpc::runtime::BpeTokenizer> bpe;
    std::optional<tpc::runtime::SentencePieceTokenizer> spm;
    if (!vocab.empty())
      bpe.emplace(tpc::runtime::BpeTokenizer::load(vocab, merges));
    if (!tokenizerJson.empty())
      bpe.emplace(tpc::runtime::BpeTokenizer::loadTokenizerJson(tokenizerJson));
    if (!sentencePieceModel.empty())
      spm.emplace(
          tpc::runtime::SentencePieceTokenizer::load(sentencePieceModel));
    if (decode) {
      const std::vector<int32_t> tokens =
          tpc::runtime::readTokenFile(inputs[0]);
      std::string text;
      if (bpe)
        text = bpe->decode(tokens);
      else if (spm)
        text = spm->decode(tokens);
      else
        for (int32_t id : tokens) {
          if (id < 0 || id > 255)
            throw std::runtime_error(
                inputs[0] + ": token " + std::to_string(id) +
                " is no byte (give the tokenizer that wrote the file)");
          text += char(id);
        }
      tpc::runtime::writeFileAtomically(output, text);
      std::cout << "tpc-tokenize: " << tokens.size() << " tokens -> " << output
                << " (" << text.size() << " bytes)\n";
      return 0;
    }
    std::string text;
    for (const std::string &input : inputs)
      text += readInput(input);
    std::vector<int32_t> tokens = bpe   ? bpe->encode(text)
                                  : spm ? spm->encode(text)
                                        : tpc::runtime::encodeBytes(text);
    tpc::runtime::writeTokenFile(output, tokens);

    const std::string kind =
        bpe   ? "BPE, vocab " + std::to_string(bpe->vocabSize())
        : spm ? "SentencePiece, vocab " + std::to_string(spm->vocabSize())
              : std::string("byte-level, vocab 256");
    std::cout << "tpc-tokenize: " << tokens.size() << " tokens -> " << output
              << " (" << text.size() << " input bytes from " << inputs.size()
              << (inputs.size() == 1 ? " file" : " files") << "; " << kind
              << ")\n";
    return 0;
  } catch (const std::exception &error) {
    std::cerr << "tpc-tokenize: error: " << error.what() << "\n";
    return 1;
  }
}
