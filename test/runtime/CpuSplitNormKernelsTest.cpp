// The feature-split normalisations (layerNormSplit, rmsNormSplit and their
// gradients) against the whole-row references: each block of features runs
// on its own thread, as each rank of a feature group would, and the
// RowGather exchanges the blocks' per-row statistics through shared memory
// in block order.

#include "CpuKernelsTestSupport.h"

#include <barrier>
#include <thread>

namespace tpc::runtime::cpu::test {
namespace {

/// Runs `body(block, gather)` on `blocks` threads, whose gathers meet.
void runBlocks(int64_t blocks,
               const std::function<void(int64_t, const RowGather &)> &body) {
  std::vector<std::vector<float>> slots(static_cast<size_t>(blocks));
  std::barrier<> sync(static_cast<std::ptrdiff_t>(blocks));
  std::vector<std::thread> threads;
  for (int64_t b = 0; b < blocks; ++b)
    threads.emplace_back([&, b] {
      RowGather gather = [&, b](const std::vector<float> &local, int64_t) {
        slots[size_t(b)] = local;
        sync.arrive_and_wait();
        std::vector<float> all;
        for (const auto &slot : slots)
          all.insert(all.end(), slot.begin(), slot.end());
        sync.arrive_and_wait(); // nobody refills a slot before all read
        return all;
      };
      body(b, gather);
    });
  for (std::thread &t : threads)
    t.join();
}

/// Columns [b * cols, (b + 1) * cols) of each row of x [rows, blocks * cols].
template <typename T>
std::vector<T> columns(const std::vector<T> &x, int64_t rows, int64_t blocks,
                       int64_t cols, int64_t b) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), x.begin() + (r * blocks + b) * cols,
               x.begin() + (r * blocks + b + 1) * cols);
  return out;
}

/// Each block's result equals its columns of the whole-row reference
/// `ref` [rows, blocks * cols] within `tolerance`.
void expectBlocks(const std::vector<std::vector<float>> &got,
                  const std::vector<double> &ref, int64_t rows, int64_t cols,
                  double tolerance, const char *what) {
  int64_t blocks = int64_t(got.size());
  for (int64_t b = 0; b < blocks; ++b)
    EXPECT_TRUE(closeToMax(got[size_t(b)], columns(ref, rows, blocks, cols, b),
                           tolerance))
        << what << " block " << b;
}

struct SplitCase {
  int64_t rows, blocks, cols; // cols per block
};
const SplitCase kCases[] = {{7, 2, 13}, {1, 3, 1}, {33, 4, 64}, {0, 2, 5}};

class SplitNorm : public ::testing::Test {
protected:
  // One kernel thread per block: the blocks are the parallelism here.
  void SetUp() override {
    saved = numThreads();
    setNumThreads(1);
  }
  void TearDown() override { setNumThreads(saved); }
  int saved = 0;
};

TEST_F(SplitNorm, LayerNormMatchesWholeRows) {
  std::mt19937 rng(71);
  for (auto [rows, blocks, cols] : kCases) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(blocks) + "x" +
                 std::to_string(cols));
    int64_t full = blocks * cols;
    // An offset mean and blocks of different means: the combination must
    // not be E[x^2] - E[x]^2 nor ignore the spread of the block means.
    std::vector<float> x = randomVector(rows * full, rng, 2.0f, 4.0f);
    for (int64_t i = 0; i < rows * full; ++i)
      x[size_t(i)] += float((i % full) / cols);
    std::vector<float> gamma = randomVector(full, rng, 0.5f, 1.5f);
    std::vector<float> beta = randomVector(full, rng);
    std::vector<double> ref = refLayerNorm(x, gamma, beta, rows, full, 1e-5);
    std::vector<std::vector<float>> y(static_cast<size_t>(blocks));
    runBlocks(blocks, [&](int64_t b, const RowGather &gather) {
      std::vector<float> xb = columns(x, rows, blocks, cols, b);
      y[size_t(b)].assign(xb.size(), 99.0f);
      layerNormSplit(xb.data(), gamma.data() + b * cols, beta.data() + b * cols,
                     y[size_t(b)].data(), rows, cols, 1e-5f, gather);
    });
    expectBlocks(y, ref, rows, cols, 2e-5, "output");
  }
}

TEST_F(SplitNorm, RmsNormMatchesWholeRows) {
  std::mt19937 rng(72);
  for (auto [rows, blocks, cols] : kCases) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(blocks) + "x" +
                 std::to_string(cols));
    int64_t full = blocks * cols;
    std::vector<float> x = randomVector(rows * full, rng);
    std::vector<float> gamma = randomVector(full, rng, 0.5f, 1.5f);
    std::vector<double> ref = refRmsNorm(x, gamma, rows, full, 1e-6);
    std::vector<std::vector<float>> y(static_cast<size_t>(blocks));
    runBlocks(blocks, [&](int64_t b, const RowGather &gather) {
      std::vector<float> xb = columns(x, rows, blocks, cols, b);
      y[size_t(b)].assign(xb.size(), 99.0f);
      rmsNormSplit(xb.data(), gamma.data() + b * cols, y[size_t(b)].data(),
                   rows, cols, 1e-6f, gather);
    });
    expectBlocks(y, ref, rows, cols, 2e-5, "output");
  }
}

TEST_F(SplitNorm, LayerNormGradMatchesWholeRows) {
  std::mt19937 rng(73);
  for (auto [rows, blocks, cols] : kCases) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(blocks) + "x" +
                 std::to_string(cols));
    int64_t full = blocks * cols;
    std::vector<float> x = randomVector(rows * full, rng, 2.0f, 4.0f);
    std::vector<float> dy = randomVector(rows * full, rng);
    std::vector<float> gamma = randomVector(full, rng, 0.5f, 1.5f);
    std::vector<double> refDx, refGamma, refBeta;
    refLayerNormGrad(dy, x, gamma, rows, full, 1e-5, refDx, refGamma, refBeta);
    std::vector<std::vector<float>> dx(static_cast<size_t>(blocks)),
        dgamma(static_cast<size_t>(blocks)), dbeta(static_cast<size_t>(blocks));
    runBlocks(blocks, [&](int64_t b, const RowGather &gather) {
      std::vector<float> xb = columns(x, rows, blocks, cols, b),
                         dyb = columns(dy, rows, blocks, cols, b);
      dx[size_t(b)].assign(xb.size(), 99.0f);
      dgamma[size_t(b)].assign(size_t(cols), 99.0f);
      dbeta[size_t(b)].assign(size_t(cols), 99.0f);
      layerNormGradSplit(dyb.data(), xb.data(), gamma.data() + b * cols,
                         dx[size_t(b)].data(), dgamma[size_t(b)].data(),
                         dbeta[size_t(b)].data(), rows, cols, 1e-5f, gather);
    });
    expectBlocks(dx, refDx, rows, cols, 2e-5, "inputGrad");
    expectBlocks(dgamma, refGamma, 1, cols, 1e-5, "gammaGrad");
    expectBlocks(dbeta, refBeta, 1, cols, 1e-5, "betaGrad");
  }
}

TEST_F(SplitNorm, RmsNormGradMatchesWholeRows) {
  std::mt19937 rng(74);
  for (auto [rows, blocks, cols] : kCases) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(blocks) + "x" +
                 std::to_string(cols));
    int64_t full = blocks * cols;
    std::vector<float> x = randomVector(rows * full, rng);
    std::vector<float> dy = randomVector(rows * full, rng);
    std::vector<float> gamma = randomVector(full, rng, 0.5f, 1.5f);
    std::vector<double> refDx, refGamma;
    refRmsNormGrad(dy, x, gamma, rows, full, 1e-6, refDx, refGamma);
    std::vector<std::vector<float>> dx(static_cast<size_t>(blocks)),
        dgamma(static_cast<size_t>(blocks));
    runBlocks(blocks, [&](int64_t b, const RowGather &gather) {
      std::vector<float> xb = columns(x, rows, blocks, cols, b),
                         dyb = columns(dy, rows, blocks, cols, b);
      dx[size_t(b)].assign(xb.size(), 99.0f);
      dgamma[size_t(b)].assign(size_t(cols), 99.0f);
      rmsNormGradSplit(dyb.data(), xb.data(), gamma.data() + b * cols,
                       dx[size_t(b)].data(), dgamma[size_t(b)].data(), rows,
                       cols, 1e-6f, gather);
    });
    expectBlocks(dx, refDx, rows, cols, 2e-5, "inputGrad");
    expectBlocks(dgamma, refGamma, 1, cols, 1e-5, "gammaGrad");
  }
}

} // namespace
} // namespace tpc::runtime::cpu::test
