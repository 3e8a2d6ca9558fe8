#include "tpc/runtime/SentencePiece.h"

#include "tpc/runtime/Files.h"

#include <sentencepiece_processor.h>

#include <stdexcept>

namespace tpc::runtime {

namespace {
/// LLaMA's is 0.5 MB, the largest published ones a few MB.
constexpr uint64_t kMaxSentencePieceBytes = uint64_t(1) << 30;
} // namespace

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SentencePieceTokenizer::SentencePieceTokenizer(
    SentencePieceTokenizer &&) noexcept = default;
SentencePieceTokenizer &
SentencePieceTokenizer::operator=(SentencePieceTokenizer &&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string &path) {
  auto impl = std::make_unique<Impl>();
  const std::string model =
      readRegularFile(path, kMaxSentencePieceBytes, "SentencePiece model");
  const sentencepiece::util::Status status =
      impl->processor.LoadFromSerializedProto(model);
  if (!status.ok())
    throw std::runtime_error(
        path + ": not a SentencePiece model: " + status.ToString());
  return SentencePieceTokenizer(std::move(impl));
}

std::vector<int32_t>
SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status =
      impl_->processor.Encode(text, &ids);
  if (!status.ok())
    throw std::runtime_error("SentencePiece: " + status.ToString());
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (bosId() >= 0)
    out.push_back(bosId());
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= impl_->processor.GetPieceSize())
      throw std::out_of_range("token id " + std::to_string(id) +
                              " is not in the vocabulary");
  std::string text;
  const sentencepiece::util::Status status =
      impl_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok())
    throw std::runtime_error("SentencePiece: " + status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocabSize() const {
  return impl_->processor.GetPieceSize();
}

int32_t SentencePieceTokenizer::bosId() const {
  return impl_->processor.bos_id();
}

} // namespace tpc::runtime
