#include "tpc/runtime/Sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

int32_t nextToken(std::span<const float> logits, const SamplingOptions &options,
                  std::mt19937_64 &random) {
  if (logits.empty())
    throw std::invalid_argument("sampling: no logits");
  if (!(options.temperature >= 0) || options.topK < 0 ||
      !(options.topP > 0 && options.topP <= 1))
    throw std::invalid_argument(
        "sampling: needs temperature >= 0, top-k >= 0 and 0 < top-p <= 1");
  for (float logit : logits)
    if (!std::isfinite(logit))
      throw std::invalid_argument("sampling: a logit is not finite");
  if (options.temperature == 0) // the first maximum, as torch.argmax
    return int32_t(std::max_element(logits.begin(), logits.end()) -
                   logits.begin());

  // Most likely first; equal logits keep id order, so a seed gives one
  // sequence whatever the sort's internals.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  size_t kept = order.size();
  if (options.topK > 0)
    kept = std::min(kept, size_t(options.topK));
  // Softmax of logits / temperature over the kept tokens, in double.
  const double top = double(logits[order[0]]) / options.temperature;
  std::vector<double> probs(kept);
  double sum = 0;
  for (size_t i = 0; i < kept; ++i)
    sum += probs[i] =
        std::exp(double(logits[order[i]]) / options.temperature - top);
  for (double &p : probs)
    p /= sum;
  if (options.topP < 1) {
    // The smallest prefix whose probability reaches p.
    double cumulative = 0;
    size_t nucleus = 0;
    while (nucleus < kept && cumulative < options.topP)
      cumulative += probs[nucleus++];
    kept = std::max<size_t>(nucleus, 1);
  }
  double mass = 0;
  for (size_t i = 0; i < kept; ++i)
    mass += probs[i];
  // One uniform draw over the kept mass.
  const double u = std::uniform_real_distribution<double>(0, mass)(random);
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += probs[i];
    if (u < cumulative)
      return order[i];
  }
  return order[kept - 1];
}

double logProbability(std::span<const float> logits, int32_t id) {
  double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
  for (float x : logits)
    max = std::max(max, double(x));
  for (float x : logits)
    sum += std::exp(double(x) - max);
  return double(logits[size_t(id)]) - max - std::log(sum);
}

} // namespace tpc::runtime
