// Next-token choice (Sampling.h) against hand-computed probabilities:
// greedy ties, temperature, top-k and top-p (HuggingFace's semantics), and
// seeded draws whose frequencies match the filtered softmax.
#include "tpc/runtime/Sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

using namespace tpc::runtime;

namespace {

/// Frequencies of `draws` tokens drawn with `options` from `logits`.
std::map<int32_t, double> frequencies(const std::vector<float> &logits,
                                      const SamplingOptions &options,
                                      int draws = 60000) {
  std::mt19937_64 random(1234);
  std::map<int32_t, double> counts;
  for (int i = 0; i < draws; ++i)
    counts[nextToken(logits, options, random)] += 1.0 / draws;
  return counts;
}

// Probabilities 1/6, 2/6, 3/6 at temperature 1.
const std::vector<float> kLogits = {0.0f, float(std::log(2.0)),
                                    float(std::log(3.0))};

TEST(SamplingTest, GreedyTakesTheFirstMaximum) {
  std::mt19937_64 random(1);
  EXPECT_EQ(nextToken(kLogits, {}, random), 2);
  EXPECT_EQ(nextToken(std::vector<float>{1, 5, 5, 2}, {}, random), 1);
}

TEST(SamplingTest, LogProbabilityIsTheLogSoftmax) {
  // Probabilities 1/6, 2/6, 3/6; a shift of every logit changes nothing
  // but the f32 rounding of the logits (an ulp at 80 is 7.6e-6).
  for (float shift : {0.0f, 80.0f})
    for (int32_t id = 0; id < 3; ++id) {
      std::vector<float> shifted = kLogits;
      for (float &x : shifted)
        x += shift;
      EXPECT_NEAR(logProbability(shifted, id), std::log((id + 1) / 6.0), 2e-5)
          << "id " << id << ", shift " << shift;
    }
}

TEST(SamplingTest, TemperatureShapesTheSoftmax) {
  auto at1 = frequencies(kLogits, {1.0, 0, 1.0});
  EXPECT_NEAR(at1[0], 1.0 / 6, 0.01);
  EXPECT_NEAR(at1[1], 2.0 / 6, 0.01);
  EXPECT_NEAR(at1[2], 3.0 / 6, 0.01);
  // T = 0.5 squares the probabilities: 1, 4, 9 over 14.
  auto atHalf = frequencies(kLogits, {0.5, 0, 1.0});
  EXPECT_NEAR(atHalf[0], 1.0 / 14, 0.01);
  EXPECT_NEAR(atHalf[2], 9.0 / 14, 0.01);
}

TEST(SamplingTest, TopKAndTopPFilter) {
  // Top-2 renormalises 2/6 and 3/6: 2/5 and 3/5.
  auto topK = frequencies(kLogits, {1.0, 2, 1.0});
  EXPECT_EQ(topK.count(0), 0u);
  EXPECT_NEAR(topK[1], 0.4, 0.01);
  // Top-p 0.5: the most likely token alone reaches it; 0.6 needs two.
  auto half = frequencies(kLogits, {1.0, 0, 0.5}, 2000);
  EXPECT_EQ(half.size(), 1u);
  EXPECT_NEAR(half[2], 1.0, 1e-9);
  auto sixty = frequencies(kLogits, {1.0, 0, 0.6});
  EXPECT_EQ(sixty.count(0), 0u);
  EXPECT_NEAR(sixty[2], 0.6, 0.01);
  // Top-k 1 and a tiny top-p are greedy.
  EXPECT_EQ(frequencies(kLogits, {2.0, 1, 1.0}, 500).size(), 1u);
  EXPECT_EQ(frequencies(kLogits, {2.0, 0, 1e-9}, 500).begin()->first, 2);
}

TEST(SamplingTest, ASeedGivesOneSequence) {
  std::mt19937_64 a(7), b(7);
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = float(std::sin(double(i)));
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(nextToken(logits, {0.8, 20, 0.9}, a),
              nextToken(logits, {0.8, 20, 0.9}, b));
}

TEST(SamplingTest, RejectsBadInput) {
  std::mt19937_64 random(1);
  EXPECT_THROW(nextToken(std::vector<float>{}, {}, random),
               std::invalid_argument);
  EXPECT_THROW(
      nextToken(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN()},
                {}, random),
      std::invalid_argument);
  EXPECT_THROW(nextToken(kLogits, {-1.0, 0, 1.0}, random),
               std::invalid_argument);
  EXPECT_THROW(nextToken(kLogits, {1.0, 0, 0.0}, random),
               std::invalid_argument);
  EXPECT_THROW(nextToken(kLogits, {1.0, -2, 1.0}, random),
               std::invalid_argument);
}

} // namespace
