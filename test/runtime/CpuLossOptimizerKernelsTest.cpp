// Tests of the loss and optimizer kernels (cross-entropy and its gradient,
// the gradient norm, AdamW, the schedule, clipping) against
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

/// `tokens` targets drawn uniformly from [0, vocab).
std::vector<int32_t> randomTargets(int64_t tokens, int64_t vocab,
                                   std::mt19937 &rng) {
  std::vector<int32_t> targets(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (int32_t &t : targets)
    t = pick(rng);
  return targets;
}

double refCrossEntropy(const std::vector<float> &logits, int64_t tokens,
                       int64_t vocab, const std::vector<int32_t> &targets) {
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    const float *row = logits.data() + t * vocab;
    double m = row[0];
    for (int64_t i = 0; i < vocab; ++i)
      m = std::max(m, double(row[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i)
      sum += std::exp(row[i] - m);
    total += std::log(sum) + m - row[targets[size_t(t)]];
  }
  return total / double(tokens);
}

/// Cases of the cross-entropy tests: tokens, vocab and the logits' spread
/// (one class; hundreds apart; GPT-2's vocabulary).
const std::tuple<int64_t, int64_t, float> kCrossEntropyCases[] = {
    {7, 13, 5.0f},
    {1, 1, 1.0f},
    {5, 17, 300.0f},
    {33, 5000, 8.0f},
    {4, 50257, 10.0f}};

TEST(CpuKernels, CrossEntropy) {
  std::mt19937 rng(22);
  for (auto [tokens, vocab, spread] : kCrossEntropyCases) {
    SCOPED_TRACE(std::to_string(tokens) + "x" + std::to_string(vocab));
    std::vector<float> logits =
        randomVector(tokens * vocab, rng, -spread, spread);
    std::vector<int32_t> targets = randomTargets(tokens, vocab, rng);
    float got = crossEntropy(logits.data(), tokens, vocab, targets.data());
    double ref = refCrossEntropy(logits, tokens, vocab, targets);
    EXPECT_NEAR(got, ref, 1e-5 * std::max(1.0, std::abs(ref)));
  }
}

/// Columns [b * columns, (b + 1) * columns) of the rows of a
/// [tokens, vocab] matrix.
std::vector<float> columnBlock(const std::vector<float> &logits, int64_t tokens,
                               int64_t vocab, int64_t b, int64_t columns) {
  std::vector<float> block(size_t(tokens * columns));
  for (int64_t t = 0; t < tokens; ++t)
    std::copy_n(logits.begin() + t * vocab + b * columns, columns,
                block.begin() + t * columns);
  return block;
}

/// Cases of the vocabulary-parallel tests: tokens, vocab, blocks and the
/// logits' spread (hundreds apart exercises the log-sum-exp rescaling).
const std::tuple<int64_t, int64_t, int64_t, float> kVocabBlockCases[] = {
    {7, 12, 3, 5.0f}, {5, 16, 4, 300.0f}, {9, 1000, 2, 8.0f}, {3, 8, 8, 1.0f}};

/// Every block's crossEntropyBlockStats, [blocks, tokens, 3], as the
/// vocabulary-parallel steps all-gather them.
std::vector<float> allBlockStats(const std::vector<float> &logits,
                                 const std::vector<int32_t> &targets,
                                 int64_t tokens, int64_t vocab,
                                 int64_t blocks) {
  const int64_t columns = vocab / blocks;
  std::vector<float> stats(size_t(3 * tokens * blocks));
  for (int64_t b = 0; b < blocks; ++b)
    crossEntropyBlockStats(
        columnBlock(logits, tokens, vocab, b, columns).data(), tokens, columns,
        b * columns, vocab, targets.data(), stats.data() + 3 * tokens * b);
  return stats;
}

TEST(CpuKernels, CrossEntropyRejectsBadTargets) {
  std::vector<float> logits(3 * 13, 0.5f);
  std::vector<int32_t> targets = {0, 12, 13};
  expectRuntimeError(
      [&] { crossEntropy(logits.data(), 3, 13, targets.data()); },
      "crossEntropy: target 13 of token 2 is outside [0, 13)");
  targets = {-1, 0, 0};
  expectRuntimeError(
      [&] { crossEntropy(logits.data(), 3, 13, targets.data()); },
      "crossEntropy: target -1 of token 0 is outside [0, 13)");
}

// Vocabulary-parallel: each block's statistics of its columns, combined,
// give the double-precision reference loss (blocks whose ranges differ by
// hundreds exercise the log-sum-exp rescaling), and each block's gradient
// columns, normalised with every block's statistics, are the whole
// gradient's.
TEST(CpuKernels, CrossEntropyFromBlockStatsMatchesTheWholeRow) {
  std::mt19937 rng(23);
  for (auto [tokens, vocab, blocks, spread] : kVocabBlockCases) {
    SCOPED_TRACE(std::to_string(tokens) + "x" + std::to_string(vocab) + "/" +
                 std::to_string(blocks));
    std::vector<float> logits =
        randomVector(tokens * vocab, rng, -spread, spread);
    std::vector<int32_t> targets = randomTargets(tokens, vocab, rng);
    std::vector<float> stats =
        allBlockStats(logits, targets, tokens, vocab, blocks);
    float got = crossEntropyFromBlockStats(stats.data(), blocks, tokens);
    double ref = refCrossEntropy(logits, tokens, vocab, targets);
    EXPECT_NEAR(got, ref, 1e-5 * std::max(1.0, std::abs(ref)));
    const float lossGrad = 0.75f;
    const int64_t columns = vocab / blocks;
    std::vector<double> refGrad =
        refCrossEntropyGrad(logits, tokens, vocab, targets, lossGrad);
    std::vector<float> whole(size_t(tokens * vocab));
    for (int64_t b = 0; b < blocks; ++b) {
      std::vector<float> block = columnBlock(logits, tokens, vocab, b, columns),
                         grad(block.size(), 99.0f);
      crossEntropyGradFromBlockStats(block.data(), targets.data(), lossGrad,
                                     tokens, columns, b * columns, stats.data(),
                                     blocks, grad.data());
      for (int64_t t = 0; t < tokens; ++t)
        std::copy_n(grad.begin() + t * columns, columns,
                    whole.begin() + t * vocab + b * columns);
    }
    EXPECT_TRUE(closeElementwise(whole, refGrad, 1e-5, 1e-12));
  }
  std::vector<float> logits(2 * 4), stats(2 * 3);
  std::vector<int32_t> outside = {0, 8};
  EXPECT_THROW(crossEntropyBlockStats(logits.data(), 2, 4, 4, 8, outside.data(),
                                      stats.data()),
               std::runtime_error);
}

// A fused head's chunks: each chunk's statistics (as blocks of one rank's
// columns), merged into one block, give the reference loss, alone and as
// one of several ranks' blocks.
TEST(CpuKernels, MergedChunkStatsMatchTheWholeRow) {
  std::mt19937 rng(29);
  for (auto [tokens, vocab, chunks, spread] : kVocabBlockCases) {
    SCOPED_TRACE(std::to_string(tokens) + "x" + std::to_string(vocab) + "/" +
                 std::to_string(chunks));
    std::vector<float> logits =
        randomVector(tokens * vocab, rng, -spread, spread);
    std::vector<int32_t> targets = randomTargets(tokens, vocab, rng);
    std::vector<float> chunkStats =
        allBlockStats(logits, targets, tokens, vocab, chunks);
    std::vector<float> merged(size_t(3 * tokens));
    mergeCrossEntropyStats(chunkStats.data(), chunks, tokens, merged.data());
    double ref = refCrossEntropy(logits, tokens, vocab, targets);
    EXPECT_NEAR(crossEntropyFromBlockStats(merged.data(), 1, tokens), ref,
                1e-5 * std::max(1.0, std::abs(ref)));
    // Two ranks, each merging its half of the chunks.
    if (chunks % 2 != 0)
      continue;
    std::vector<float> halves(size_t(6 * tokens));
    for (int64_t half = 0; half < 2; ++half)
      mergeCrossEntropyStats(chunkStats.data() + 3 * tokens * chunks / 2 * half,
                             chunks / 2, tokens,
                             halves.data() + 3 * tokens * half);
    EXPECT_NEAR(crossEntropyFromBlockStats(halves.data(), 2, tokens), ref,
                1e-5 * std::max(1.0, std::abs(ref)));
  }
}

TEST(CpuKernels, CrossEntropyGrad) {
  std::mt19937 rng(40);
  for (auto [tokens, vocab, spread] : kCrossEntropyCases) {
    SCOPED_TRACE(std::to_string(tokens) + "x" + std::to_string(vocab));
    std::vector<float> logits =
        randomVector(tokens * vocab, rng, -spread, spread);
    std::vector<int32_t> targets = randomTargets(tokens, vocab, rng);
    // A confident, correct prediction: p(target) near 1.
    if (vocab > 1) {
      targets[0] = 1;
      logits[1] = 2.0f * spread + 12.0f;
    }
    const float lossGrad = 0.75f;
    std::vector<float> grad(logits.size(), 99.0f);
    crossEntropyGrad(logits.data(), targets.data(), lossGrad, tokens, vocab,
                     grad.data());
    std::vector<double> ref =
        refCrossEntropyGrad(logits, tokens, vocab, targets, lossGrad);
    EXPECT_TRUE(closeElementwise(grad, ref, 1e-5, 1e-12));
    // Each row sums to zero.
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < vocab; ++i)
        sum += grad[size_t(t * vocab + i)];
      EXPECT_NEAR(sum, 0.0, 1e-6) << "token " << t;
    }
  }
}

TEST(CpuKernels, CrossEntropyGradMatchesForwardFiniteDifferences) {
  std::mt19937 rng(41);
  const int64_t tokens = 3, vocab = 7;
  std::vector<float> logits = randomVector(tokens * vocab, rng, -3.0f, 3.0f);
  std::vector<int32_t> targets = {2, 6, 0};
  const float lossGrad = 1.5f;
  std::vector<float> grad(logits.size());
  crossEntropyGrad(logits.data(), targets.data(), lossGrad, tokens, vocab,
                   grad.data());
  std::vector<double> numeric(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    numeric[i] = centralDifference(logits, i, 1e-2, [&] {
      return double(lossGrad) *
             crossEntropy(logits.data(), tokens, vocab, targets.data());
    });
  EXPECT_TRUE(closeToMax(grad, numeric, 2e-3));
}

TEST(CpuKernels, CrossEntropyGradRejectsBadTargets) {
  std::vector<float> logits(3 * 13, 0.5f), grad(3 * 13);
  std::vector<int32_t> targets = {0, 13, 12};
  expectRuntimeError(
      [&] {
        crossEntropyGrad(logits.data(), targets.data(), 1.0f, 3, 13,
                         grad.data());
      },
      "crossEntropyGrad: target 13 of token 1 is outside [0, 13)");
  targets = {0, 0, -2};
  EXPECT_THROW(
      crossEntropyGrad(logits.data(), targets.data(), 1.0f, 3, 13, grad.data()),
      std::runtime_error);
}

TEST(CpuKernels, NormSquared) {
  std::mt19937 rng(43);
  EXPECT_EQ(normSquared(nullptr, 0), 0.0f);
  for (int64_t n : {1, 13, 65536, 300007, 3000017}) {
    std::vector<float> x = randomVector(n, rng, -3.0f, 3.0f);
    double ref = 0.0;
    for (float v : x)
      ref += double(v) * v;
    EXPECT_NEAR(normSquared(x.data(), n), ref, 1e-7 * ref) << n;
  }
}

/// torch.optim.AdamW's update in double.
struct RefAdamW {
  std::vector<double> param, expAvg, expAvgSq;
  void step(const std::vector<float> &grad, double lr, int64_t t,
            double gradScale, double beta1, double beta2, double eps,
            double wd) {
    for (size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * gradScale;
      param[i] *= 1.0 - lr * wd;
      expAvg[i] = beta1 * expAvg[i] + (1.0 - beta1) * g;
      expAvgSq[i] = beta2 * expAvgSq[i] + (1.0 - beta2) * g * g;
      double mHat = expAvg[i] / (1.0 - std::pow(beta1, double(t)));
      double vHat = expAvgSq[i] / (1.0 - std::pow(beta2, double(t)));
      param[i] -= lr * mHat / (std::sqrt(vHat) + eps);
    }
  }
};

TEST(CpuKernels, AdamW) {
  std::mt19937 rng(44);
  const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int64_t n : {int64_t(7), int64_t(100003)}) {
    SCOPED_TRACE(n);
    std::vector<float> param = randomVector(n, rng, -1.0f, 1.0f);
    const std::vector<float> initial = param;
    RefAdamW ref{std::vector<double>(param.begin(), param.end()),
                 std::vector<double>(size_t(n), 0.0),
                 std::vector<double>(size_t(n), 0.0)};
    // Out of place (ping-pong buffers) and in place side by side.
    std::vector<float> m(static_cast<size_t>(n), 0.0f),
        v(static_cast<size_t>(n), 0.0f);
    std::vector<float> p2(static_cast<size_t>(n)), m2(static_cast<size_t>(n)),
        v2(static_cast<size_t>(n));
    std::vector<float> pIn = param, mIn = m, vIn = v;
    for (int64_t t = 1; t <= 6; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      std::vector<float> grad = randomVector(n, rng, -2.0f, 2.0f);
      float lr = 1e-2f / float(t); // varies per step
      float gradScale = t % 2 ? 0.5f : 1.0f;
      adamw(param.data(), grad.data(), m.data(), v.data(), lr, t, gradScale,
            beta1, beta2, eps, wd, p2.data(), m2.data(), v2.data(), n);
      std::swap(param, p2);
      std::swap(m, m2);
      std::swap(v, v2);
      adamw(pIn.data(), grad.data(), mIn.data(), vIn.data(), lr, t, gradScale,
            beta1, beta2, eps, wd, pIn.data(), mIn.data(), vIn.data(), n);
      ref.step(grad, lr, t, gradScale, beta1, beta2, eps, wd);
      EXPECT_TRUE(closeElementwise(param, ref.param, 1e-6, 1e-7)) << "param";
      EXPECT_TRUE(closeElementwise(m, ref.expAvg, 1e-5, 1e-7)) << "expAvg";
      EXPECT_TRUE(closeElementwise(v, ref.expAvgSq, 1e-5, 1e-9)) << "expAvgSq";
      EXPECT_EQ(pIn, param) << "in place";
      EXPECT_EQ(mIn, m) << "in place";
      EXPECT_EQ(vIn, v) << "in place";
    }
    // The steps moved the parameters far beyond the tolerance.
    EXPECT_GT(std::abs(double(pIn[0]) - double(initial[0])), 1e-3);
  }
  std::vector<float> x(3);
  EXPECT_THROW(adamw(x.data(), x.data(), x.data(), x.data(), 1e-3f, 0, 1.0f,
                     beta1, beta2, eps, wd, x.data(), x.data(), x.data(), 3),
               std::runtime_error);
}

// AdamW on listed rows: each listed row exactly as adamw updates it alone,
// the others untouched; padding (-1) skipped.
TEST(CpuKernels, AdamWRowsUpdatesTheListedRowsAsAdamW) {
  std::mt19937 rng(45);
  const int64_t rows = 9, dim = 37;
  const double beta1 = 0.8, beta2 = 0.97, eps = 1e-7, wd = 0.05;
  std::vector<float> param = randomVector(rows * dim, rng, -1.0f, 1.0f);
  std::vector<float> m = randomVector(rows * dim, rng, -0.1f, 0.1f);
  std::vector<float> v = randomVector(rows * dim, rng, 0.0f, 0.1f);
  const std::vector<float> grad = randomVector(rows * dim, rng, -2.0f, 2.0f);
  std::vector<float> p2 = param, m2 = m, v2 = v;
  const std::vector<int32_t> listed = {7, 2, 4, -1, -1};
  adamwRows(param.data(), grad.data(), m.data(), v.data(), listed.data(),
            int64_t(listed.size()), dim, 3e-3f, 4, 0.5f, beta1, beta2, eps, wd);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t at = size_t(r * dim);
    if (r == 7 || r == 2 || r == 4)
      adamw(p2.data() + at, grad.data() + at, m2.data() + at, v2.data() + at,
            3e-3f, 4, 0.5f, beta1, beta2, eps, wd, p2.data() + at,
            m2.data() + at, v2.data() + at, dim);
  }
  EXPECT_EQ(param, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  // Rows 0, 1, 3, 5, 6 and 8 kept their values; the listed ones moved.
  EXPECT_NE(param[size_t(7 * dim)], p2[size_t(7 * dim)] + 1.0f);
  std::vector<float> untouched = randomVector(rows * dim, rng, -1.0f, 1.0f);
  std::vector<float> copy = untouched;
  const std::vector<int32_t> none = {-1, -1};
  adamwRows(copy.data(), grad.data(), m.data(), v.data(), none.data(), 2, dim,
            3e-3f, 4, 0.5f, beta1, beta2, eps, wd);
  EXPECT_EQ(copy, untouched);
}

// The listed rows' squares, in list order: the same bits wherever the rows
// lie (a cache's slots) as long as the list names them in one order.
TEST(CpuKernels, NormSquaredRowsDependsOnTheListOrderOnly) {
  std::mt19937 rng(46);
  const int64_t rows = 40, dim = 33;
  const std::vector<float> table = randomVector(rows * dim, rng, -3.0f, 3.0f);
  const std::vector<int32_t> listed = {3, 17, 5, 39, 0, -1, -1};
  double expected = 0;
  for (int32_t row : listed)
    if (row >= 0) {
      double sum = 0;
      for (int64_t d = 0; d < dim; ++d)
        sum += double(table[size_t(row * dim + d)]) *
               double(table[size_t(row * dim + d)]);
      expected += sum;
    }
  EXPECT_EQ(normSquaredRows(table.data(), listed.data(), 7, dim),
            float(expected));
  // The same rows moved to other slots (reversed), listed in the same order.
  std::vector<float> moved(table.size());
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(table.begin() + r * dim, dim,
                moved.begin() + (rows - 1 - r) * dim);
  std::vector<int32_t> relisted;
  for (int32_t row : listed)
    relisted.push_back(row < 0 ? -1 : int32_t(rows - 1 - row));
  EXPECT_EQ(normSquaredRows(moved.data(), relisted.data(), 7, dim),
            normSquaredRows(table.data(), listed.data(), 7, dim));
}

TEST(CpuKernels, LearningRate) {
  const float peak = 6e-4f, minLr = 6e-5f;
  auto cosine = [&](double step, double warmup, double decay) {
    double p = (step - warmup) / (decay - warmup);
    return double(minLr) + (double(peak) - minLr) * 0.5 *
                               (1.0 + std::cos(std::numbers::pi * p));
  };
  auto expectLr = [](float got, double want) {
    EXPECT_NEAR(got, want, 1e-7 * std::abs(want)) << "want " << want;
  };
  // Warmup 10 steps, cosine to step 100.
  expectLr(learningRate(1, peak, minLr, 10.0f, 100.0f), double(peak) / 10.0);
  expectLr(learningRate(5, peak, minLr, 10.0f, 100.0f), double(peak) / 2.0);
  expectLr(learningRate(10, peak, minLr, 10.0f, 100.0f), peak);
  expectLr(learningRate(11, peak, minLr, 10.0f, 100.0f),
           cosine(11.0, 10.0, 100.0));
  expectLr(learningRate(55, peak, minLr, 10.0f, 100.0f),
           (double(peak) + double(minLr)) / 2.0);
  expectLr(learningRate(70, peak, minLr, 10.0f, 100.0f),
           cosine(70.0, 10.0, 100.0));
  expectLr(learningRate(99, peak, minLr, 10.0f, 100.0f),
           cosine(99.0, 10.0, 100.0));
  expectLr(learningRate(100, peak, minLr, 10.0f, 100.0f), minLr);
  expectLr(learningRate(5000, peak, minLr, 10.0f, 100.0f), minLr);
  // No warmup: the cosine starts at step 0.
  expectLr(learningRate(1, peak, minLr, 0.0f, 100.0f), cosine(1.0, 0.0, 100.0));
  expectLr(learningRate(50, peak, minLr, 0.0f, 100.0f),
           (double(peak) + double(minLr)) / 2.0);
  // No decay (decaySteps <= warmup): constant peak after warmup.
  expectLr(learningRate(3, peak, minLr, 10.0f, 10.0f),
           double(peak) * 3.0 / 10.0);
  expectLr(learningRate(20, peak, minLr, 10.0f, 10.0f), peak);
  expectLr(learningRate(20, peak, minLr, 10.0f, 0.0f), peak);
  expectLr(learningRate(7, peak, minLr, 0.0f, 0.0f), peak);
}

TEST(CpuKernels, ClipScale) {
  // Norm 2 against max 1: scale 1 / (2 + 1e-6).
  EXPECT_NEAR(clipScale(4.0f, 1.0f), 1.0 / (2.0 + 1e-6), 1e-7);
  EXPECT_NEAR(clipScale(100.0f, 0.5f), 0.5 / (10.0 + 1e-6), 1e-8);
  // Below the threshold: no clipping.
  EXPECT_EQ(clipScale(0.25f, 1.0f), 1.0f);
  EXPECT_EQ(clipScale(0.0f, 1.0f), 1.0f);
  // At the threshold the 1e-6 still applies (as torch).
  EXPECT_NEAR(clipScale(1.0f, 1.0f), 1.0 / (1.0 + 1e-6), 1e-7);
  EXPECT_LT(clipScale(1.0f, 1.0f), 1.0f);
  // Clipping off.
  EXPECT_EQ(clipScale(1e6f, 0.0f), 1.0f);
  EXPECT_EQ(clipScale(1e6f, -1.0f), 1.0f);
  // A non-finite norm poisons the step rather than hiding it.
  EXPECT_TRUE(std::isnan(clipScale(NAN, 1.0f)));
}

} // namespace
