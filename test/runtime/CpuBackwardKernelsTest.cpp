// Tests of the backward kernels (gradients of embedding, activations, norms and
// softmax) against
// straightforward double-precision references (naive loops over
// multi-indices) on random inputs with odd sizes, chosen so that both the
// single-chunk and the threaded paths of each kernel run.
#include "CpuKernelsTestSupport.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <numbers>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace tpc::runtime::cpu;
using namespace tpc::runtime::cpu::test;

namespace {

double dotWithDouble(const std::vector<float> &a, const std::vector<float> &b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    sum += double(a[i]) * double(b[i]);
  return sum;
}

TEST(CpuKernels, EmbeddingGrad) {
  std::mt19937 rng(30);
  // Repeated ids (3 three times, 0 twice), unused rows, the last id.
  {
    const int64_t vocab = 11, hidden = 6;
    std::vector<int32_t> ids = {3, 0, 10, 3, 7, 0, 3};
    int64_t tokens = int64_t(ids.size());
    std::vector<float> grad = randomVector(tokens * hidden, rng);
    std::vector<float> table(static_cast<size_t>(vocab * hidden), 99.0f);
    embeddingGrad(grad.data(), ids.data(), tokens, vocab, hidden, table.data());
    std::vector<double> ref(table.size(), 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hidden; ++h)
        ref[size_t(ids[size_t(t)] * hidden + h)] +=
            grad[size_t(t * hidden + h)];
    EXPECT_TRUE(closeElementwise(table, ref, 1e-7, 0.0));
    // Unused rows are exactly zero; a single use is an exact copy.
    for (int64_t h = 0; h < hidden; ++h) {
      EXPECT_EQ(table[size_t(1 * hidden + h)], 0.0f);
      EXPECT_EQ(table[size_t(7 * hidden + h)], grad[size_t(4 * hidden + h)]);
    }
  }
  // Threaded: many tokens over few ids (many repeats) in a larger vocab.
  for (auto [vocab, hidden, tokens, used] :
       {std::tuple<int64_t, int64_t, int64_t, int32_t>{1000, 384, 300, 50},
        {5003, 65, 1029, 5003},
        {3, 1, 1000, 3}}) {
    SCOPED_TRACE(std::to_string(vocab) + "x" + std::to_string(hidden));
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    std::uniform_int_distribution<int32_t> pick(0, used - 1);
    for (int32_t &id : ids)
      id = pick(rng) * int32_t(vocab / used);
    std::vector<float> grad = randomVector(tokens * hidden, rng);
    std::vector<float> table(static_cast<size_t>(vocab * hidden), 99.0f);
    embeddingGrad(grad.data(), ids.data(), tokens, vocab, hidden, table.data());
    std::vector<double> ref(table.size(), 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hidden; ++h)
        ref[size_t(ids[size_t(t)] * hidden + h)] +=
            grad[size_t(t * hidden + h)];
    EXPECT_TRUE(closeElementwise(table, ref, 1e-6, 1e-7));
  }
  // No tokens: all zeros.
  std::vector<float> table(4 * 3, 5.0f);
  embeddingGrad(nullptr, nullptr, 0, 4, 3, table.data());
  EXPECT_EQ(table, std::vector<float>(4 * 3, 0.0f));
}

// Vocabulary-parallel: each block scatters only the ids it holds; the blocks
// stacked are the whole gradient, bit for bit (the same sums in token order).
TEST(CpuKernels, EmbeddingGradBlocksStackToTheWholeGradient) {
  std::mt19937 rng(31);
  const int64_t vocab = 12, hidden = 5, blocks = 3, rows = vocab / blocks;
  std::vector<int32_t> ids = {0, 3, 4, 11, 8, 7, 4, 3, 3, 9};
  const int64_t tokens = int64_t(ids.size());
  std::vector<float> grad = randomVector(tokens * hidden, rng);
  std::vector<float> whole(size_t(vocab * hidden)), stacked;
  embeddingGrad(grad.data(), ids.data(), tokens, vocab, hidden, whole.data());
  for (int64_t b = 0; b < blocks; ++b) {
    std::vector<float> part(size_t(rows * hidden), 99.0f);
    embeddingGradBlock(grad.data(), ids.data(), tokens, b * rows, rows, vocab,
                       hidden, part.data());
    stacked.insert(stacked.end(), part.begin(), part.end());
  }
  EXPECT_EQ(stacked, whole);
  // Ids are checked against the whole vocabulary, not the block.
  std::vector<int32_t> tooLarge = {12};
  std::vector<float> part(size_t(rows * hidden));
  EXPECT_THROW(embeddingGradBlock(grad.data(), tooLarge.data(), 1, 0, rows,
                                  vocab, hidden, part.data()),
               std::runtime_error);
}

TEST(CpuKernels, EmbeddingGradRejectsBadIds) {
  std::vector<float> grad(2 * 3, 1.0f);
  std::vector<float> table(4 * 3);
  std::vector<int32_t> tooLarge = {1, 4};
  expectRuntimeError(
      [&] {
        embeddingGrad(grad.data(), tooLarge.data(), 2, 4, 3, table.data());
      },
      "embeddingGrad: id 4 of token 1 is outside [0, 4)");
  std::vector<int32_t> negative = {0, -1};
  expectRuntimeError(
      [&] {
        embeddingGrad(grad.data(), negative.data(), 2, 4, 3, table.data());
      },
      "embeddingGrad: id -1 of token 1 is outside [0, 4)");
}

TEST(CpuKernels, GeluGrad) {
  std::mt19937 rng(31);
  const double c = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> x = activationInputs(rng, n);
    std::vector<float> dy = randomVector(n, rng, -2.0f, 2.0f);
    std::vector<float> dx(static_cast<size_t>(n), 99.0f);
    geluGrad(dy.data(), x.data(), dx.data(), n);
    std::vector<double> ref(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      double v = x[i];
      double th = std::tanh(c * (v + 0.044715 * v * v * v));
      double d = 0.5 * (1.0 + th) +
                 0.5 * v * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * v * v);
      ref[i] = dy[i] * d;
    }
    EXPECT_TRUE(closeElementwise(dx, ref, 1e-5, 1e-7));
  }
}

TEST(CpuKernels, SiluGrad) {
  std::mt19937 rng(32);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> x = activationInputs(rng, n);
    std::vector<float> dy = randomVector(n, rng, -2.0f, 2.0f);
    std::vector<float> dx(static_cast<size_t>(n), 99.0f);
    siluGrad(dy.data(), x.data(), dx.data(), n);
    std::vector<double> ref(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      double v = x[i];
      double s = 1.0 / (1.0 + std::exp(-v));
      ref[i] = dy[i] * (s * (1.0 + v * (1.0 - s)));
    }
    EXPECT_TRUE(closeElementwise(dx, ref, 1e-5, 1e-7));
  }
}

TEST(CpuKernels, ReluGrad) {
  std::mt19937 rng(34);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> x = activationInputs(rng, n);
    x[0] = 0.0f; // the subgradient at 0 is 0, as PyTorch's
    x[1] = 1e-30f;
    std::vector<float> dy = randomVector(n, rng, -2.0f, 2.0f);
    std::vector<float> dx(static_cast<size_t>(n), 99.0f);
    reluGrad(dy.data(), x.data(), dx.data(), n);
    for (size_t i = 0; i < size_t(n); ++i)
      ASSERT_EQ(dx[i], x[i] > 0.0f ? dy[i] : 0.0f) << "at " << i;
    EXPECT_EQ(dx[0], 0.0f);
    EXPECT_EQ(dx[1], dy[1]);
  }
}

TEST(CpuKernels, ActivationGradsMatchForwardFiniteDifferences) {
  std::mt19937 rng(33);
  const int64_t n = 41;
  std::vector<float> x = randomVector(n, rng, -4.0f, 4.0f);
  x[0] = 0.0f;
  x[1] = -0.75f; // near gelu's minimum
  x[2] = -1.28f; // near silu's minimum
  std::vector<float> dy = randomVector(n, rng, -2.0f, 2.0f);
  for (bool isGelu : {true, false}) {
    SCOPED_TRACE(isGelu ? "gelu" : "silu");
    std::vector<float> dx(static_cast<size_t>(n));
    (isGelu ? geluGrad : siluGrad)(dy.data(), x.data(), dx.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<double> numeric(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i)
      numeric[i] = centralDifference(x, i, 1e-3, [&] {
        (isGelu ? gelu : silu)(x.data(), y.data(), n);
        return dotWithDouble(dy, y);
      });
    EXPECT_TRUE(closeToMax(dx, numeric, 2e-3));
  }
}

TEST(CpuKernels, LayerNormGrad) {
  std::mt19937 rng(34);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 13},
                            {1, 1},
                            {3, 768},
                            {129, 257},
                            {1000, 64},
                            {0, 5}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    // An offset mean, as in the forward test.
    std::vector<float> x = randomVector(rows * cols, rng, 2.0f, 4.0f);
    std::vector<float> dy = randomVector(rows * cols, rng);
    std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
    std::vector<float> dx(x.size(), 99.0f),
        dgamma(static_cast<size_t>(cols), 99.0f),
        dbeta(static_cast<size_t>(cols), 99.0f);
    const float eps = 1e-5f;
    layerNormGrad(dy.data(), x.data(), gamma.data(), dx.data(), dgamma.data(),
                  dbeta.data(), rows, cols, eps);
    std::vector<double> refDx, refGamma, refBeta;
    refLayerNormGrad(dy, x, gamma, rows, cols, eps, refDx, refGamma, refBeta);
    EXPECT_TRUE(closeToMax(dx, refDx, 1e-5)) << "inputGrad";
    EXPECT_TRUE(closeToMax(dgamma, refGamma, 1e-6)) << "gammaGrad";
    EXPECT_TRUE(closeToMax(dbeta, refBeta, 1e-6)) << "betaGrad";
  }
}

TEST(CpuKernels, LayerNormGradMatchesForwardFiniteDifferences) {
  std::mt19937 rng(35);
  const int64_t rows = 3, cols = 7;
  const float eps = 1e-5f;
  std::vector<float> x = randomVector(rows * cols, rng, -1.0f, 2.0f);
  std::vector<float> dy = randomVector(rows * cols, rng);
  std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
  std::vector<float> beta = randomVector(cols, rng);
  std::vector<float> dx(x.size()), dgamma(static_cast<size_t>(cols)),
      dbeta(static_cast<size_t>(cols));
  layerNormGrad(dy.data(), x.data(), gamma.data(), dx.data(), dgamma.data(),
                dbeta.data(), rows, cols, eps);
  std::vector<float> y(x.size());
  auto objective = [&] {
    layerNorm(x.data(), gamma.data(), beta.data(), y.data(), rows, cols, eps);
    return dotWithDouble(dy, y);
  };
  std::vector<double> numX(x.size()), numGamma(static_cast<size_t>(cols)),
      numBeta(static_cast<size_t>(cols));
  for (size_t i = 0; i < x.size(); ++i)
    numX[i] = centralDifference(x, i, 1e-2, objective);
  for (size_t i = 0; i < size_t(cols); ++i) {
    numGamma[i] = centralDifference(gamma, i, 1e-2, objective);
    numBeta[i] = centralDifference(beta, i, 1e-2, objective);
  }
  EXPECT_TRUE(closeToMax(dx, numX, 2e-3)) << "inputGrad";
  EXPECT_TRUE(closeToMax(dgamma, numGamma, 2e-3)) << "gammaGrad";
  EXPECT_TRUE(closeToMax(dbeta, numBeta, 2e-3)) << "betaGrad";
}

TEST(CpuKernels, RmsNormGrad) {
  std::mt19937 rng(36);
  // (No 1x1: there dx = dy gamma r eps / (x^2 + eps) is a cancellation far
  // below float resolution of its two terms, in any float implementation.)
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 13},
                            {2, 2},
                            {3, 768},
                            {129, 257},
                            {1000, 64}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    std::vector<float> x = randomVector(rows * cols, rng, -3.0f, 3.0f);
    std::vector<float> dy = randomVector(rows * cols, rng);
    std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
    std::vector<float> dx(x.size(), 99.0f),
        dgamma(static_cast<size_t>(cols), 99.0f);
    const float eps = 1e-6f;
    rmsNormGrad(dy.data(), x.data(), gamma.data(), dx.data(), dgamma.data(),
                rows, cols, eps);
    std::vector<double> refDx, refGamma;
    refRmsNormGrad(dy, x, gamma, rows, cols, eps, refDx, refGamma);
    EXPECT_TRUE(closeToMax(dx, refDx, 1e-5)) << "inputGrad";
    EXPECT_TRUE(closeToMax(dgamma, refGamma, 1e-6)) << "gammaGrad";
  }
}

TEST(CpuKernels, RmsNormGradMatchesForwardFiniteDifferences) {
  std::mt19937 rng(37);
  const int64_t rows = 3, cols = 7;
  const float eps = 1e-6f;
  std::vector<float> x = randomVector(rows * cols, rng, -2.0f, 2.0f);
  std::vector<float> dy = randomVector(rows * cols, rng);
  std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
  std::vector<float> dx(x.size()), dgamma(static_cast<size_t>(cols));
  rmsNormGrad(dy.data(), x.data(), gamma.data(), dx.data(), dgamma.data(), rows,
              cols, eps);
  std::vector<float> y(x.size());
  auto objective = [&] {
    rmsNorm(x.data(), gamma.data(), y.data(), rows, cols, eps);
    return dotWithDouble(dy, y);
  };
  std::vector<double> numX(x.size()), numGamma(static_cast<size_t>(cols));
  for (size_t i = 0; i < x.size(); ++i)
    numX[i] = centralDifference(x, i, 1e-2, objective);
  for (size_t i = 0; i < size_t(cols); ++i)
    numGamma[i] = centralDifference(gamma, i, 1e-2, objective);
  EXPECT_TRUE(closeToMax(dx, numX, 2e-3)) << "inputGrad";
  EXPECT_TRUE(closeToMax(dgamma, numGamma, 2e-3)) << "gammaGrad";
}

/// Softmax backward through its Jacobian dy_j/dx_i = y_j (delta_ij - y_i).
std::vector<double> refSoftmaxGrad(const std::vector<float> &dy,
                                   const std::vector<float> &y, int64_t rows,
                                   int64_t cols) {
  std::vector<double> dx(y.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        double yi = y[size_t(r * cols + i)], yj = y[size_t(r * cols + j)];
        sum += dy[size_t(r * cols + j)] * yj * ((i == j ? 1.0 : 0.0) - yi);
      }
      dx[size_t(r * cols + i)] = sum;
    }
  return dx;
}

TEST(CpuKernels, SoftmaxGrad) {
  std::mt19937 rng(38);
  for (auto [rows, cols, causal] :
       {std::tuple<int64_t, int64_t, bool>{7, 13, false},
        {5, 1, false},
        {2 * 3 * 5, 5, true},
        {129, 257, false},
        {2 * 64, 64, true}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) +
                 (causal ? " causal" : ""));
    std::vector<float> x = randomVector(rows * cols, rng, -4.0f, 4.0f);
    std::vector<float> y(x.size());
    softmax(x.data(), y.data(), rows, cols, causal);
    std::vector<float> dy = randomVector(rows * cols, rng);
    std::vector<float> dx(x.size(), 99.0f);
    softmaxGrad(dy.data(), y.data(), dx.data(), rows, cols);
    std::vector<double> ref = refSoftmaxGrad(dy, y, rows, cols);
    EXPECT_TRUE(closeElementwise(dx, ref, 1e-5, 1e-7));
    if (causal)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = r % cols + 1; i < cols; ++i)
          ASSERT_EQ(dx[size_t(r * cols + i)], 0.0f);
  }
}

TEST(CpuKernels, SoftmaxGradMatchesForwardFiniteDifferences) {
  std::mt19937 rng(39);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const int64_t rows = 2 * 6, cols = 6;
    std::vector<float> x = randomVector(rows * cols, rng, -2.0f, 2.0f);
    std::vector<float> dy = randomVector(rows * cols, rng);
    std::vector<float> y(x.size()), dx(x.size());
    softmax(x.data(), y.data(), rows, cols, causal);
    softmaxGrad(dy.data(), y.data(), dx.data(), rows, cols);
    std::vector<float> probe(x.size());
    std::vector<double> numeric(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      numeric[i] = centralDifference(x, i, 1e-2, [&] {
        softmax(x.data(), probe.data(), rows, cols, causal);
        return dotWithDouble(dy, probe);
      });
    EXPECT_TRUE(closeToMax(dx, numeric, 2e-3));
  }
}

TEST(CpuKernels, InPlaceBackward) {
  std::mt19937 rng(45);
  const int64_t rows = 130, cols = 258; // threaded
  const int64_t n = rows * cols;
  const std::vector<float> x = randomVector(n, rng, -2.0f, 2.0f);
  const std::vector<float> dy = randomVector(n, rng);
  const std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
  std::vector<float> expected(static_cast<size_t>(n)), buffer;
  std::vector<float> g1(static_cast<size_t>(cols)),
      b1(static_cast<size_t>(cols)), g2(static_cast<size_t>(cols)),
      b2(static_cast<size_t>(cols));

  for (bool isGelu : {true, false}) {
    auto kernel = isGelu ? geluGrad : siluGrad;
    kernel(dy.data(), x.data(), expected.data(), n);
    buffer = dy;
    kernel(buffer.data(), x.data(), buffer.data(), n);
    EXPECT_EQ(buffer, expected) << (isGelu ? "gelu" : "silu") << " dy";
    buffer = x;
    kernel(dy.data(), buffer.data(), buffer.data(), n);
    EXPECT_EQ(buffer, expected) << (isGelu ? "gelu" : "silu") << " x";
  }

  layerNormGrad(dy.data(), x.data(), gamma.data(), expected.data(), g1.data(),
                b1.data(), rows, cols, 1e-5f);
  buffer = dy;
  layerNormGrad(buffer.data(), x.data(), gamma.data(), buffer.data(), g2.data(),
                b2.data(), rows, cols, 1e-5f);
  EXPECT_EQ(buffer, expected) << "layerNorm dy";
  EXPECT_EQ(g2, g1);
  EXPECT_EQ(b2, b1);
  buffer = x;
  layerNormGrad(dy.data(), buffer.data(), gamma.data(), buffer.data(),
                g2.data(), b2.data(), rows, cols, 1e-5f);
  EXPECT_EQ(buffer, expected) << "layerNorm x";
  EXPECT_EQ(g2, g1);
  EXPECT_EQ(b2, b1);

  rmsNormGrad(dy.data(), x.data(), gamma.data(), expected.data(), g1.data(),
              rows, cols, 1e-6f);
  buffer = dy;
  rmsNormGrad(buffer.data(), x.data(), gamma.data(), buffer.data(), g2.data(),
              rows, cols, 1e-6f);
  EXPECT_EQ(buffer, expected) << "rmsNorm dy";
  EXPECT_EQ(g2, g1);
  buffer = x;
  rmsNormGrad(dy.data(), buffer.data(), gamma.data(), buffer.data(), g2.data(),
              rows, cols, 1e-6f);
  EXPECT_EQ(buffer, expected) << "rmsNorm x";
  EXPECT_EQ(g2, g1);

  std::vector<float> y(static_cast<size_t>(n));
  softmax(x.data(), y.data(), rows, cols, false);
  softmaxGrad(dy.data(), y.data(), expected.data(), rows, cols);
  buffer = dy;
  softmaxGrad(buffer.data(), y.data(), buffer.data(), rows, cols);
  EXPECT_EQ(buffer, expected) << "softmax dy";
  buffer = y;
  softmaxGrad(dy.data(), buffer.data(), buffer.data(), rows, cols);
  EXPECT_EQ(buffer, expected) << "softmax y";

  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (size_t t = 0; t < targets.size(); ++t)
    targets[t] = int32_t(t * 5 % size_t(cols));
  crossEntropyGrad(x.data(), targets.data(), 2.0f, rows, cols, expected.data());
  buffer = x;
  crossEntropyGrad(buffer.data(), targets.data(), 2.0f, rows, cols,
                   buffer.data());
  EXPECT_EQ(buffer, expected) << "crossEntropy";
  EXPECT_TRUE(closeElementwise(
      expected, refCrossEntropyGrad(x, rows, cols, targets, 2.0), 1e-5, 1e-12));
}

} // namespace
