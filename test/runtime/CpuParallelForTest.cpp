// Tests of the kernel thread pool: parallelFor, thread counts, and results that
// do not depend on them against
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

/// Restores the default thread count when a test changed it.
struct ThreadCountGuard {
  ~ThreadCountGuard() { setNumThreads(0); }
};

TEST(CpuThreads, ParallelForCoversEveryIndexOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    setNumThreads(threads);
    for (int64_t count : {0, 1, 7, 100, 1000, 12345}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
        std::mutex mutex;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallelFor(count, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            hits[size_t(i)].fetch_add(1);
          std::lock_guard<std::mutex> lock(mutex);
          chunks.emplace_back(begin, end);
        });
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(hits[size_t(i)].load(), 1)
              << "index " << i << " of " << count << ", grain " << grain
              << ", threads " << threads;
        if (count == 0)
          continue;
        // Contiguous chunks of at least `grain` items (or a single chunk),
        // never more than the thread count.
        std::sort(chunks.begin(), chunks.end());
        EXPECT_LE(chunks.size(), size_t(threads));
        int64_t expectedBegin = 0;
        for (auto [begin, end] : chunks) {
          EXPECT_EQ(begin, expectedBegin);
          EXPECT_LT(begin, end);
          if (chunks.size() > 1) {
            EXPECT_GE(end - begin, grain);
          }
          expectedBegin = end;
        }
        EXPECT_EQ(expectedBegin, count);
      }
    }
  }
}

TEST(CpuThreads, ParallelForNestsAndPropagatesExceptions) {
  ThreadCountGuard guard;
  setNumThreads(3);
  std::vector<std::atomic<int>> hits(100 * 50);
  parallelFor(100, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      parallelFor(50, 1, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j)
          hits[size_t(i * 50 + j)].fetch_add(1);
      });
  });
  for (auto &h : hits)
    ASSERT_EQ(h.load(), 1);

  EXPECT_THROW(parallelFor(1000, 1,
                           [&](int64_t begin, int64_t end) {
                             if (begin <= 500 && 500 < end)
                               throw std::runtime_error("chunk failed");
                           }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  parallelFor(1000, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(CpuThreads, SetNumThreads) {
  ThreadCountGuard guard;
  setNumThreads(3);
  EXPECT_EQ(numThreads(), 3);
  setNumThreads(1);
  EXPECT_EQ(numThreads(), 1);
  setNumThreads(0);
  EXPECT_GE(numThreads(), 1);
}

// Our kernels compute every output element from the same inputs in the same
// order whatever the split, so results are bit-identical across thread
// counts.
TEST(CpuThreads, ResultsDoNotDependOnThreadCount) {
  ThreadCountGuard guard;
  std::mt19937 rng(23);
  const int64_t rows = 4 * 128, cols = 128;
  std::vector<float> scores = randomVector(rows * cols, rng, -5.0f, 5.0f);
  std::vector<float> gamma = randomVector(cols, rng);
  std::vector<float> beta = randomVector(cols, rng);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (size_t t = 0; t < targets.size(); ++t)
    targets[t] = int32_t(t * 7 % cols);
  Dims shape = {8, 64, 128};

  auto run = [&](int threads) {
    setNumThreads(threads);
    EXPECT_EQ(numThreads(), threads);
    std::vector<std::vector<float>> results;
    for (bool causal : {false, true}) {
      std::vector<float> y(scores.size());
      softmax(scores.data(), y.data(), rows, cols, causal);
      results.push_back(std::move(y));
    }
    std::vector<float> y(scores.size());
    layerNorm(scores.data(), gamma.data(), beta.data(), y.data(), rows, cols,
              1e-5f);
    results.push_back(y);
    gelu(scores.data(), y.data(), int64_t(y.size()));
    results.push_back(y);
    for (Dims dims : {Dims{0}, Dims{1}, Dims{0, 2}, Dims{0, 1, 2}}) {
      std::vector<float> r(scores.size());
      reduce(scores.data(), shape, dims, false, r.data());
      results.push_back(r);
    }
    results.push_back(
        {crossEntropy(scores.data(), rows, cols, targets.data())});
    return results;
  };
  std::vector<std::vector<float>> one = run(1);
  std::vector<std::vector<float>> two = run(2);
  std::vector<std::vector<float>> three = run(3);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i], two[i]) << "result " << i;
    EXPECT_EQ(one[i], three[i]) << "result " << i;
  }
  // And they are right.
  EXPECT_TRUE(closeElementwise(one[0], refSoftmax(scores, rows, cols, false),
                               1e-5, 1e-7));
  EXPECT_TRUE(closeElementwise(one[1], refSoftmax(scores, rows, cols, true),
                               1e-5, 1e-7));
}

// OpenBLAS (0.3.21 here) blocks the K loop differently with more threads, so
// its sums are only equal up to rounding across thread counts: check that
// both are right rather than bit-identical.
TEST(CpuThreads, MatmulAgreesAcrossThreadCounts) {
  ThreadCountGuard guard;
  std::mt19937 rng(24);
  std::vector<MatmulCase> cases = {
      {{2, 96, 160}, false, {160, 200}, false, {2, 96, 200}},
      {{2, 3, 64, 40}, false, {2, 1, 72, 40}, true, {2, 3, 64, 72}},
      {{200, 130}, true, {200, 150}, false, {130, 150}},
  };
  for (const MatmulCase &c : cases) {
    SCOPED_TRACE("lhs " + dimsString(c.lhs) + " rhs " + dimsString(c.rhs));
    std::vector<float> lhs = randomVector(numel(c.lhs), rng);
    std::vector<float> rhs = randomVector(numel(c.rhs), rng);
    std::vector<double> ref =
        refMatmul(lhs, c.lhs, c.tl, rhs, c.rhs, c.tr, c.out);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2}) {
      setNumThreads(threads);
      std::vector<float> out(static_cast<size_t>(numel(c.out)));
      matmul(lhs.data(), c.lhs, c.tl, rhs.data(), c.rhs, c.tr, out.data(),
             c.out);
      EXPECT_TRUE(closeToMax(out, ref)) << threads << " threads";
      outs.push_back(std::move(out));
    }
    EXPECT_TRUE(closeToMax(
        outs[0], std::vector<double>(outs[1].begin(), outs[1].end())));
  }
}

// The reductions across rows combine fixed blocks in a fixed order, so
// repeated runs, and runs on different thread counts, are bit-identical.
TEST(CpuThreads, BackwardResultsAreDeterministic) {
  ThreadCountGuard guard;
  std::mt19937 rng(46);
  const int64_t rows = 2000, cols = 64; // several norm-gradient blocks
  const int64_t vocab = 3001, tokens = 4000;
  const int64_t params = 300007; // several normSquared blocks
  std::vector<float> x = randomVector(rows * cols, rng, -2.0f, 2.0f);
  std::vector<float> dy = randomVector(rows * cols, rng);
  std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
  // Huge values that cancel between the first and the last row: betaGrad
  // then keeps the rounding of the small ones, which depends on the order
  // in which the partial sums are combined.
  std::vector<float> dyHuge = dy;
  for (int64_t c = 0; c < cols; ++c) {
    dyHuge[size_t(c)] = 0x1p40f;
    dyHuge[size_t((rows - 1) * cols + c)] = -0x1p40f;
  }
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (int32_t &id : ids)
    id = pick(rng) % 97; // many repeats
  std::vector<float> tokenGrad = randomVector(tokens * cols, rng);
  std::vector<float> param = randomVector(params, rng);
  std::vector<float> grad = randomVector(params, rng);
  std::vector<float> m = randomVector(params, rng, -0.1f, 0.1f);
  std::vector<float> v = randomVector(params, rng, 0.0f, 0.01f);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (size_t t = 0; t < targets.size(); ++t)
    targets[t] = int32_t(t * 7 % size_t(cols));

  auto run = [&](int threads) {
    setNumThreads(threads);
    std::vector<std::vector<float>> results;
    std::vector<float> dx(x.size()), dg(static_cast<size_t>(cols)),
        db(static_cast<size_t>(cols));
    layerNormGrad(dyHuge.data(), x.data(), gamma.data(), dx.data(), dg.data(),
                  db.data(), rows, cols, 1e-5f);
    results.insert(results.end(), {dx, dg, db});
    rmsNormGrad(dy.data(), x.data(), gamma.data(), dx.data(), dg.data(), rows,
                cols, 1e-6f);
    results.insert(results.end(), {dx, dg});
    std::vector<float> table(static_cast<size_t>(vocab * cols));
    embeddingGrad(tokenGrad.data(), ids.data(), tokens, vocab, cols,
                  table.data());
    results.push_back(table);
    results.push_back({normSquared(grad.data(), params),
                       normSquared(x.data(), int64_t(x.size()))});
    std::vector<float> p = param, mm = m, vv = v;
    for (int64_t t = 1; t <= 3; ++t)
      adamw(p.data(), grad.data(), mm.data(), vv.data(), 1e-3f, t, 0.7f, 0.9,
            0.95, 1e-8, 0.1, p.data(), mm.data(), vv.data(), params);
    results.insert(results.end(), {p, mm, vv});
    crossEntropyGrad(x.data(), targets.data(), 1.0f, rows, cols, dx.data());
    results.push_back(dx);
    softmaxGrad(dy.data(), x.data(), dx.data(), rows, cols);
    results.push_back(dx);
    geluGrad(dy.data(), x.data(), dx.data(), int64_t(dx.size()));
    results.push_back(dx);
    return results;
  };
  std::vector<std::vector<float>> first = run(2);
  std::vector<std::vector<float>> again = run(2);
  std::vector<std::vector<float>> one = run(1);
  std::vector<std::vector<float>> three = run(3);
  ASSERT_EQ(first.size(), again.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i], again[i]) << "result " << i << ", same threads";
    EXPECT_EQ(first[i], one[i]) << "result " << i << ", 1 vs 2 threads";
    EXPECT_EQ(first[i], three[i]) << "result " << i << ", 3 vs 2 threads";
  }
}

} // namespace
