#include "tpc/runtime/Init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

using namespace tpc::runtime;

// Known-answer vectors from Random123's tests/kat_vectors ("philox4x32 10"
// lines: counter[4] key[2] -> result[4]).
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                          {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(ParameterKey, IsFnv1a) {
  // FNV-1a 64 of "" and "a" (published test values).
  EXPECT_EQ(parameterKey(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(parameterKey("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(parameterKey("transformer.h.0.attn.c_attn.weight"),
            parameterKey("transformer.h.1.attn.c_attn.weight"));
}

TEST(NormalInit, HasStandardMoments) {
  const int64_t n = 200000;
  double sum = 0, sumSq = 0, sumFourth = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = normalAt(parameterKey("w"), i);
    sum += x;
    sumSq += x * x;
    sumFourth += x * x * x * x;
  }
  double mean = sum / n, var = sumSq / n - mean * mean;
  // Standard errors at n = 2e5: mean 0.0022, variance 0.0032, kurtosis 0.011.
  EXPECT_NEAR(mean, 0.0, 0.012);
  EXPECT_NEAR(var, 1.0, 0.016);
  EXPECT_NEAR(sumFourth / n, 3.0, 0.06);
}

// The property the whole equivalence strategy rests on: any block of a
// parameter equals the same slice of the parameter initialised whole.
TEST(NormalInit, ShardsAgreeWithTheWholeTensor) {
  const std::vector<int64_t> shape = {6, 10};
  const uint64_t key = parameterKey("model.layers.0.mlp.up_proj.weight");
  std::vector<float> whole(60);
  const std::vector<int64_t> zero = {0, 0};
  fillNormal(whole, shape, {zero, shape}, key, 0.02f);

  // A 2x2 grid with an uneven column split (4 + 6).
  for (int64_t row0 : {0, 3}) {
    for (auto [col0, cols] : {std::pair<int64_t, int64_t>{0, 4}, {4, 6}}) {
      const std::vector<int64_t> offset = {row0, col0}, blockShape = {3, cols};
      std::vector<float> block(3 * cols);
      fillNormal(block, shape, {offset, blockShape}, key, 0.02f);
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(block[r * cols + c], whole[(row0 + r) * 10 + col0 + c])
              << "row " << row0 + r << " col " << col0 + c;
    }
  }
}

TEST(NormalInit, RejectsBlocksOutsideTheTensor) {
  const std::vector<int64_t> shape = {4, 4}, offset = {2, 0},
                             blockShape = {3, 4};
  std::vector<float> out(12);
  EXPECT_THROW(fillNormal(out, shape, {offset, blockShape}, 1, 1.0f),
               std::invalid_argument);
  const std::vector<int64_t> okOffset = {0, 0};
  std::vector<float> tooSmall(5);
  EXPECT_THROW(fillNormal(tooSmall, shape, {okOffset, blockShape}, 1, 1.0f),
               std::invalid_argument);
}
