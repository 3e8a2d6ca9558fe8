// Choosing the next token from a row of logits, as HuggingFace's generate()
// does: greedy (argmax, the lowest id on ties), or sampling from the
// softmax of logits / temperature after top-k and top-p (nucleus) filtering.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace tpc::runtime {

struct SamplingOptions {
  /// 0: greedy; otherwise logits are divided by it before the softmax.
  double temperature = 0;
  /// Keep only the k most likely tokens (0: all).
  int64_t topK = 0;
  /// Keep the smallest set of most likely tokens whose probability reaches
  /// p (1: all); the most likely token is always kept.
  double topP = 1;
};

/// The next token. `random` is only drawn from when sampling. Throws
/// std::invalid_argument for empty or non-finite logits, a negative
/// temperature or top-k, or top-p outside (0, 1].
int32_t nextToken(std::span<const float> logits, const SamplingOptions &options,
                  std::mt19937_64 &random);

/// log softmax(logits)[id], in double: the log-probability of token `id`
/// under the model (before temperature or filtering).
double logProbability(std::span<const float> logits, int32_t id);

} // namespace tpc::runtime
