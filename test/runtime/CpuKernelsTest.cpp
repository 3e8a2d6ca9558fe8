// Tests the CPU kernels against straightforward double-precision reference
// implementations written here (naive loops over multi-indices), on random
// inputs with odd sizes. Sizes are chosen so that both the single-chunk and
// the threaded paths of each kernel run.
#include "tpc/runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <numbers>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace tpc::runtime::cpu;

namespace {

using Dims = std::vector<int64_t>;

int64_t numel(const Dims &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// `run` must throw a std::runtime_error whose message is `message`.
void expectRuntimeError(const std::function<void()> &run,
                        const std::string &message) {
  try {
    run();
    ADD_FAILURE() << "no exception; expected: " << message;
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

std::vector<float> randomVector(int64_t n, std::mt19937 &rng, float lo = -1.0f,
                                float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = dist(rng);
  return v;
}

std::string dimsString(const Dims &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

/// |got - ref| <= tol * max|ref| everywhere.
::testing::AssertionResult closeToMax(const std::vector<float> &got,
                                      const std::vector<double> &ref,
                                      double tol = 1e-5) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << ref.size();
  double scale = 0.0;
  for (double r : ref)
    scale = std::max(scale, std::abs(r));
  if (scale == 0.0)
    scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(double(got[i]) - ref[i]);
    if (!(err <= tol * scale))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", expected " << ref[i]
             << " (error " << err << ", allowed " << tol * scale << ")";
  }
  return ::testing::AssertionSuccess();
}

/// |got - ref| <= rel * |ref| + abs everywhere.
::testing::AssertionResult closeElementwise(const std::vector<float> &got,
                                            const std::vector<double> &ref,
                                            double rel, double abs) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << ref.size();
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(double(got[i]) - ref[i]);
    if (!(err <= rel * std::abs(ref[i]) + abs))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", expected " << ref[i]
             << " (error " << err << ")";
  }
  return ::testing::AssertionSuccess();
}

/// Row-major multi-index of flat index `flat` in `shape`.
Dims unravel(int64_t flat, const Dims &shape) {
  Dims index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

/// Flat offset in an operand of `shape` (right-aligned against `index`,
/// size-1 dims broadcast) of the output element at `index`.
int64_t broadcastOffset(const Dims &index, const Dims &shape) {
  size_t lead = index.size() - shape.size();
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  return offset;
}

//===----------------------------------------------------------------------===//
// Threading
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

TEST(CpuKernels, Embedding) {
  std::mt19937 rng(1);
  const int64_t vocab = 11, hidden = 6;
  std::vector<float> table = randomVector(vocab * hidden, rng);
  std::vector<int32_t> ids = {3, 0, 10, 3, 7, 1, 9};
  std::vector<float> out(ids.size() * hidden, -1.0f);
  embedding(table.data(), vocab, hidden, ids.data(), int64_t(ids.size()),
            out.data());
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t h = 0; h < hidden; ++h)
      EXPECT_EQ(out[t * hidden + size_t(h)], table[size_t(ids[t] * hidden + h)])
          << "token " << t << " col " << h;

  // Many tokens, wide rows (threaded path).
  const int64_t bigVocab = 1000, bigHidden = 384, tokens = 300;
  std::vector<float> bigTable = randomVector(bigVocab * bigHidden, rng);
  std::vector<int32_t> bigIds(tokens);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(bigVocab - 1));
  for (int32_t &id : bigIds)
    id = pick(rng);
  std::vector<float> bigOut(size_t(tokens * bigHidden));
  embedding(bigTable.data(), bigVocab, bigHidden, bigIds.data(), tokens,
            bigOut.data());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < bigHidden; ++h)
      ASSERT_EQ(bigOut[size_t(t * bigHidden + h)],
                bigTable[size_t(bigIds[size_t(t)] * bigHidden + h)]);
}

// Vocabulary-parallel lookups: the blocks' results sum to the whole lookup,
// each id found in exactly one block.
TEST(CpuKernels, EmbeddingBlocksSumToTheWholeLookup) {
  std::mt19937 rng(2);
  const int64_t vocab = 12, hidden = 5, blocks = 3, rows = vocab / blocks;
  std::vector<float> table = randomVector(vocab * hidden, rng);
  std::vector<int32_t> ids = {0, 3, 4, 11, 8, 7, 4};
  const size_t count = ids.size() * size_t(hidden);
  std::vector<float> whole(count), sum(count, 0.0f), part(count, -1.0f);
  embedding(table.data(), vocab, hidden, ids.data(), int64_t(ids.size()),
            whole.data());
  for (int64_t b = 0; b < blocks; ++b) {
    embeddingBlock(table.data() + b * rows * hidden, b * rows, rows, vocab,
                   hidden, ids.data(), int64_t(ids.size()), part.data());
    for (size_t t = 0; t < ids.size(); ++t) {
      bool held = ids[t] / rows == b;
      for (int64_t h = 0; h < hidden; ++h) {
        float value = part[t * size_t(hidden) + size_t(h)];
        EXPECT_EQ(value, held ? whole[t * size_t(hidden) + size_t(h)] : 0.0f)
            << "block " << b << " token " << t;
        sum[t * size_t(hidden) + size_t(h)] += value;
      }
    }
  }
  EXPECT_EQ(sum, whole);
  // Ids are checked against the whole vocabulary, not the block.
  std::vector<int32_t> tooLarge = {12};
  EXPECT_THROW(embeddingBlock(table.data(), 0, rows, vocab, hidden,
                              tooLarge.data(), 1, part.data()),
               std::runtime_error);
}

TEST(CpuKernels, EmbeddingRejectsBadIds) {
  std::vector<float> table(4 * 3, 1.0f);
  std::vector<float> out(2 * 3);
  std::vector<int32_t> tooLarge = {1, 4};
  expectRuntimeError(
      [&] { embedding(table.data(), 4, 3, tooLarge.data(), 2, out.data()); },
      "embedding: id 4 of token 1 is outside [0, 4)");
  std::vector<int32_t> negative = {-1, 0};
  EXPECT_THROW(embedding(table.data(), 4, 3, negative.data(), 2, out.data()),
               std::runtime_error);
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// Naive batched matmul in double with NumPy batch broadcasting.
std::vector<double> refMatmul(const std::vector<float> &lhs, const Dims &ls,
                              bool tl, const std::vector<float> &rhs,
                              const Dims &rs, bool tr, const Dims &os) {
  size_t lr = ls.size(), orank = os.size();
  int64_t m = os[orank - 2], n = os[orank - 1];
  int64_t k = tl ? ls[lr - 2] : ls[lr - 1];
  Dims lb(ls.begin(), ls.end() - 2), rb(rs.begin(), rs.end() - 2),
      ob(os.begin(), os.end() - 2);
  int64_t batch = numel(ob);
  std::vector<double> out(size_t(batch * m * n), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    Dims index = unravel(b, ob);
    int64_t lo = broadcastOffset(index, lb) * m * k;
    int64_t ro = broadcastOffset(index, rb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double a = lhs[size_t(lo + (tl ? p * m + i : i * k + p))];
          double c = rhs[size_t(ro + (tr ? j * k + p : p * n + j))];
          acc += a * c;
        }
        out[size_t((b * m + i) * n + j)] = acc;
      }
  }
  return out;
}

struct MatmulCase {
  Dims lhs;
  bool tl;
  Dims rhs;
  bool tr;
  Dims out;
};

void checkMatmul(const MatmulCase &c, std::mt19937 &rng) {
  SCOPED_TRACE("lhs " + dimsString(c.lhs) + (c.tl ? "^T" : "") + " rhs " +
               dimsString(c.rhs) + (c.tr ? "^T" : "") + " out " +
               dimsString(c.out));
  std::vector<float> lhs = randomVector(numel(c.lhs), rng);
  std::vector<float> rhs = randomVector(numel(c.rhs), rng);
  std::vector<float> out(size_t(numel(c.out)), 123.0f);
  matmul(lhs.data(), c.lhs, c.tl, rhs.data(), c.rhs, c.tr, out.data(), c.out);
  EXPECT_TRUE(closeToMax(
      out, refMatmul(lhs, c.lhs, c.tl, rhs, c.rhs, c.tr, c.out), 1e-5));
}

TEST(CpuKernels, MatmulTransposeCombinations) {
  std::mt19937 rng(2);
  // M = 7, K = 13, N = 5.
  checkMatmul({{7, 13}, false, {13, 5}, false, {7, 5}}, rng);
  checkMatmul({{13, 7}, true, {13, 5}, false, {7, 5}}, rng);
  checkMatmul({{7, 13}, false, {5, 13}, true, {7, 5}}, rng);
  checkMatmul({{13, 7}, true, {5, 13}, true, {7, 5}}, rng);
  checkMatmul({{1, 1}, false, {1, 1}, false, {1, 1}}, rng);
  checkMatmul({{1, 9}, false, {9, 1}, false, {1, 1}}, rng);
}

TEST(CpuKernels, MatmulLhsOnlyBatch) {
  std::mt19937 rng(3);
  // Folded into one [2*3*7, 13] x [13, 5] GEMM.
  checkMatmul({{2, 3, 7, 13}, false, {13, 5}, false, {2, 3, 7, 5}}, rng);
  checkMatmul({{2, 3, 7, 13}, false, {5, 13}, true, {2, 3, 7, 5}}, rng);
  checkMatmul({{2, 1, 7, 13}, false, {13, 5}, false, {2, 1, 7, 5}}, rng);
  // Not foldable: transposed lhs.
  checkMatmul({{2, 3, 13, 7}, true, {13, 5}, false, {2, 3, 7, 5}}, rng);
  checkMatmul({{4, 13, 7}, true, {5, 13}, true, {4, 7, 5}}, rng);
  // rhs batch dims all 1: still shared.
  checkMatmul({{3, 7, 13}, false, {1, 13, 5}, false, {3, 7, 5}}, rng);
  // The transformer case, big enough to thread inside OpenBLAS.
  checkMatmul({{2, 33, 64}, false, {64, 96}, false, {2, 33, 96}}, rng);
}

TEST(CpuKernels, MatmulRhsOnlyBatch) {
  std::mt19937 rng(4);
  checkMatmul({{7, 13}, false, {4, 13, 5}, false, {4, 7, 5}}, rng);
  checkMatmul({{13, 7}, true, {2, 3, 5, 13}, true, {2, 3, 7, 5}}, rng);
  checkMatmul({{7, 13}, false, {3, 5, 13}, true, {3, 7, 5}}, rng);
}

TEST(CpuKernels, MatmulBothBatched) {
  std::mt19937 rng(5);
  for (bool tl : {false, true})
    for (bool tr : {false, true}) {
      Dims lhs = tl ? Dims{3, 13, 7} : Dims{3, 7, 13};
      Dims rhs = tr ? Dims{3, 5, 13} : Dims{3, 13, 5};
      checkMatmul({lhs, tl, rhs, tr, {3, 7, 5}}, rng);
    }
  checkMatmul({{2, 3, 6, 8}, false, {2, 3, 9, 8}, true, {2, 3, 6, 9}}, rng);
}

TEST(CpuKernels, MatmulBroadcastBatchDims) {
  std::mt19937 rng(6);
  checkMatmul({{2, 3, 4, 5}, false, {2, 1, 5, 6}, false, {2, 3, 4, 6}}, rng);
  checkMatmul({{1, 3, 4, 5}, false, {2, 1, 5, 6}, false, {2, 3, 4, 6}}, rng);
  checkMatmul({{2, 1, 4, 5}, false, {2, 3, 5, 6}, false, {2, 3, 4, 6}}, rng);
  checkMatmul({{2, 1, 5, 4}, true, {1, 3, 6, 5}, true, {2, 3, 4, 6}}, rng);
  checkMatmul({{2, 3, 1, 4, 5}, false, {2, 1, 4, 5, 6}, false, {2, 3, 4, 4, 6}},
              rng);
}

TEST(CpuKernels, MatmulAccumulate) {
  std::mt19937 rng(7);
  for (auto [lhsShape, rhsShape, outShape] :
       {std::tuple<Dims, Dims, Dims>{{7, 13}, {13, 5}, {7, 5}},
        {{2, 3, 7, 13}, {13, 5}, {2, 3, 7, 5}},
        {{2, 3, 4, 5}, {2, 1, 5, 6}, {2, 3, 4, 6}}}) {
    std::vector<float> lhs = randomVector(numel(lhsShape), rng);
    std::vector<float> rhs = randomVector(numel(rhsShape), rng);
    std::vector<float> out = randomVector(numel(outShape), rng);
    std::vector<double> ref =
        refMatmul(lhs, lhsShape, false, rhs, rhsShape, false, outShape);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] += out[i];
    matmul(lhs.data(), lhsShape, false, rhs.data(), rhsShape, false, out.data(),
           outShape, /*accumulate=*/true);
    EXPECT_TRUE(closeToMax(out, ref)) << dimsString(lhsShape);
  }
}

TEST(CpuKernels, MatmulAlpha) {
  std::mt19937 rng(8);
  // Folded (shared weight) and per-batch paths both apply alpha.
  for (auto [lhsShape, rhsShape, outShape] :
       {std::tuple<Dims, Dims, Dims>{{2, 3, 7, 13}, {13, 5}, {2, 3, 7, 5}},
        {{2, 3, 4, 5}, {2, 1, 5, 6}, {2, 3, 4, 6}}}) {
    std::vector<float> lhs = randomVector(numel(lhsShape), rng);
    std::vector<float> rhs = randomVector(numel(rhsShape), rng);
    std::vector<float> out(numel(outShape));
    std::vector<double> ref =
        refMatmul(lhs, lhsShape, false, rhs, rhsShape, false, outShape);
    for (double &x : ref)
      x *= -0.375;
    matmul(lhs.data(), lhsShape, false, rhs.data(), rhsShape, false, out.data(),
           outShape, /*accumulate=*/false, /*alpha=*/-0.375f);
    EXPECT_TRUE(closeToMax(out, ref)) << dimsString(lhsShape);
  }
}

TEST(CpuKernels, MatmulEmptyK) {
  std::vector<float> lhs, rhs;
  std::vector<float> out(6, 5.0f);
  Dims ls = {2, 0}, rs = {0, 3}, os = {2, 3};
  matmul(lhs.data(), ls, false, rhs.data(), rs, false, out.data(), os, true);
  EXPECT_EQ(out, std::vector<float>(6, 5.0f));
  matmul(lhs.data(), ls, false, rhs.data(), rs, false, out.data(), os);
  EXPECT_EQ(out, std::vector<float>(6, 0.0f));
}

//===----------------------------------------------------------------------===//
// binary
//===----------------------------------------------------------------------===//

double refApply(BinaryKind kind, double a, double b) {
  switch (kind) {
  case BinaryKind::Add:
    return a + b;
  case BinaryKind::Sub:
    return a - b;
  case BinaryKind::Mul:
    return a * b;
  case BinaryKind::Div:
    return a / b;
  }
  return 0.0;
}

TEST(CpuKernels, BinaryAllKindsWithBroadcasting) {
  std::mt19937 rng(8);
  struct Case {
    Dims lhs, rhs, out;
  };
  std::vector<Case> cases = {
      {{7, 13}, {7, 13}, {7, 13}},
      {{7, 13}, {13}, {7, 13}},
      {{13}, {7, 13}, {7, 13}},
      {{7, 13}, {}, {7, 13}},
      {{}, {7, 13}, {7, 13}},
      {{}, {}, {}},
      {{7, 1}, {1, 13}, {7, 13}},
      {{1, 13}, {7, 1}, {7, 13}},
      {{7, 13}, {7, 1}, {7, 13}},
      {{3, 1, 5}, {4, 1}, {3, 4, 5}},
      {{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},
      {{2, 1, 4, 1}, {1, 3, 1, 5}, {2, 3, 4, 5}},
      {{2, 3, 1, 5, 1}, {3, 4, 1, 6}, {2, 3, 4, 5, 6}},
      {{1}, {5}, {5}},
      // Large enough to split over threads.
      {{301, 257}, {301, 257}, {301, 257}},
      {{301, 257}, {257}, {301, 257}},
      {{301, 257}, {301, 1}, {301, 257}},
      {{100000}, {}, {100000}},
      {{}, {100000}, {100000}},
      {{2, 300, 129}, {2, 1, 129}, {2, 300, 129}},
  };
  for (BinaryKind kind :
       {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div}) {
    for (const Case &c : cases) {
      SCOPED_TRACE("kind " + std::to_string(int(kind)) + " lhs " +
                   dimsString(c.lhs) + " rhs " + dimsString(c.rhs));
      std::vector<float> lhs = randomVector(numel(c.lhs), rng);
      // Away from 0 so that Div is well conditioned.
      std::vector<float> rhs = randomVector(numel(c.rhs), rng, 0.5f, 1.5f);
      for (size_t i = 0; i < rhs.size(); i += 2)
        rhs[i] = -rhs[i];
      std::vector<float> out(size_t(numel(c.out)), 99.0f);
      binary(kind, lhs.data(), c.lhs, rhs.data(), c.rhs, out.data(), c.out);
      std::vector<double> ref(out.size());
      for (int64_t i = 0; i < numel(c.out); ++i) {
        Dims index = unravel(i, c.out);
        ref[size_t(i)] =
            refApply(kind, lhs[size_t(broadcastOffset(index, c.lhs))],
                     rhs[size_t(broadcastOffset(index, c.rhs))]);
      }
      EXPECT_TRUE(closeElementwise(out, ref, 1e-6, 1e-7));
    }
  }
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST(CpuKernels, Scale) {
  std::mt19937 rng(9);
  for (int64_t n : {1, 13, 100003}) {
    std::vector<float> in = randomVector(n, rng, -10.0f, 10.0f);
    std::vector<float> out(static_cast<size_t>(n));
    scale(in.data(), -0.37f, out.data(), n);
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      ref[size_t(i)] = double(in[size_t(i)]) * double(-0.37f);
    EXPECT_TRUE(closeElementwise(out, ref, 1e-7, 0.0));
  }
}

std::vector<float> activationInputs(std::mt19937 &rng, int64_t n) {
  std::vector<float> in = randomVector(n, rng, -8.0f, 8.0f);
  // Edge values: 0, tiny, saturated, and beyond exp's range.
  std::vector<float> edges = {0.0f,    1e-6f,  -1e-6f, 1e-3f,  -1e-3f,
                              20.0f,   -20.0f, 50.0f,  -50.0f, 100.0f,
                              -100.0f, 1e4f,   -1e4f,  3.0f,   -3.0f};
  std::copy(edges.begin(), edges.end(), in.begin());
  return in;
}

TEST(CpuKernels, GeluTanhForm) {
  std::mt19937 rng(10);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> in = activationInputs(rng, n);
    std::vector<float> out(static_cast<size_t>(n));
    gelu(in.data(), out.data(), n);
    std::vector<double> ref(static_cast<size_t>(n));
    const double c = std::sqrt(2.0 / std::numbers::pi);
    for (int64_t i = 0; i < n; ++i) {
      double x = in[size_t(i)];
      ref[size_t(i)] =
          0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    EXPECT_TRUE(closeElementwise(out, ref, 1e-5, 1e-7));
    EXPECT_TRUE(closeToMax(out, ref));
  }
}

TEST(CpuKernels, Silu) {
  std::mt19937 rng(11);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> in = activationInputs(rng, n);
    std::vector<float> out(static_cast<size_t>(n));
    silu(in.data(), out.data(), n);
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double x = in[size_t(i)];
      ref[size_t(i)] = x / (1.0 + std::exp(-x));
    }
    EXPECT_TRUE(closeElementwise(out, ref, 1e-5, 1e-7));
  }
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

/// Double-precision layer norm of x [rows, cols] (two-pass variance).
std::vector<double> refLayerNorm(const std::vector<float> &x,
                                 const std::vector<float> &gamma,
                                 const std::vector<float> &beta, int64_t rows,
                                 int64_t cols, double eps) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      mean += row[i];
    mean /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    var /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      ref[size_t(r * cols + i)] =
          (row[i] - mean) / std::sqrt(var + eps) * gamma[size_t(i)] +
          beta[size_t(i)];
  }
  return ref;
}

/// Double-precision RMS norm of x [rows, cols].
std::vector<double> refRmsNorm(const std::vector<float> &x,
                               const std::vector<float> &gamma, int64_t rows,
                               int64_t cols, double eps) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x.data() + r * cols;
    double ms = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      ms += double(row[i]) * row[i];
    ms /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      ref[size_t(r * cols + i)] =
          row[i] / std::sqrt(ms + eps) * gamma[size_t(i)];
  }
  return ref;
}

TEST(CpuKernels, LayerNorm) {
  std::mt19937 rng(12);
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{7, 13}, {1, 1}, {3, 768}, {129, 257}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    // An offset mean checks the variance is not computed as E[x^2]-E[x]^2.
    std::vector<float> x = randomVector(rows * cols, rng, 2.0f, 4.0f);
    std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
    std::vector<float> beta = randomVector(cols, rng);
    std::vector<float> y(x.size());
    const float eps = 1e-5f;
    layerNorm(x.data(), gamma.data(), beta.data(), y.data(), rows, cols, eps);
    std::vector<double> ref =
        refLayerNorm(x, gamma, beta, rows, cols, double(eps));
    EXPECT_TRUE(closeToMax(y, ref));
  }
}

TEST(CpuKernels, RmsNorm) {
  std::mt19937 rng(13);
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{7, 13}, {1, 1}, {3, 768}, {129, 257}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    std::vector<float> x = randomVector(rows * cols, rng, -3.0f, 3.0f);
    std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
    std::vector<float> y(x.size());
    const float eps = 1e-6f;
    rmsNorm(x.data(), gamma.data(), y.data(), rows, cols, eps);
    std::vector<double> ref = refRmsNorm(x, gamma, rows, cols, double(eps));
    EXPECT_TRUE(closeToMax(y, ref));
  }
}

//===----------------------------------------------------------------------===//
// softmax
//===----------------------------------------------------------------------===//

std::vector<double> refSoftmax(const std::vector<float> &x, int64_t rows,
                               int64_t cols, bool causal) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t visible = causal ? r % cols + 1 : cols;
    const float *row = x.data() + r * cols;
    double m = row[0];
    for (int64_t i = 0; i < visible; ++i)
      m = std::max(m, double(row[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < visible; ++i)
      sum += std::exp(row[i] - m);
    for (int64_t i = 0; i < visible; ++i)
      y[size_t(r * cols + i)] = std::exp(row[i] - m) / sum;
  }
  return y;
}

void checkSoftmax(int64_t rows, int64_t cols, bool causal, float spread,
                  std::mt19937 &rng) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) +
               (causal ? " causal" : "") + " spread " + std::to_string(spread));
  std::vector<float> x = randomVector(rows * cols, rng, -spread, spread);
  std::vector<float> y(x.size(), 7.0f);
  softmax(x.data(), y.data(), rows, cols, causal);
  std::vector<double> ref = refSoftmax(x, rows, cols, causal);
  EXPECT_TRUE(closeElementwise(y, ref, 1e-5, 1e-7));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      float v = y[size_t(r * cols + i)];
      sum += v;
      if (causal && i > r % cols) {
        ASSERT_EQ(v, 0.0f) << "row " << r << " col " << i;
      }
    }
    ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

TEST(CpuKernels, Softmax) {
  std::mt19937 rng(14);
  checkSoftmax(7, 13, false, 3.0f, rng);
  checkSoftmax(2 * 3 * 5, 5, false, 3.0f, rng);
  checkSoftmax(5, 1, false, 3.0f, rng);
  // Large logits: max subtraction must keep exp in range.
  checkSoftmax(9, 31, false, 200.0f, rng);
  checkSoftmax(37, 1000, false, 10.0f, rng);
  checkSoftmax(3, 50257, false, 10.0f, rng);
}

TEST(CpuKernels, SoftmaxCausal) {
  std::mt19937 rng(15);
  // [2, 3, 5, 5] scores viewed as 30 rows of 5.
  checkSoftmax(2 * 3 * 5, 5, true, 3.0f, rng);
  checkSoftmax(1, 1, true, 3.0f, rng);
  checkSoftmax(4 * 64, 64, true, 50.0f, rng);
  checkSoftmax(3 * 257, 257, true, 5.0f, rng);
}

TEST(CpuKernels, SoftmaxHandlesNegativeInfinity) {
  std::vector<float> x = {0.0f, -INFINITY, 1.0f, -INFINITY};
  std::vector<float> y(4);
  softmax(x.data(), y.data(), 1, 4, false);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_NEAR(y[0], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(y[2], std::exp(1.0) / (1.0 + std::exp(1.0)), 1e-7);
}

//===----------------------------------------------------------------------===//
// rotary
//===----------------------------------------------------------------------===//

std::vector<double> refRotary(const std::vector<float> &x, int64_t outer,
                              int64_t seq, int64_t dim, double theta,
                              bool inverse, int64_t offset) {
  std::vector<double> y(x.size());
  int64_t half = dim / 2;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < seq; ++s) {
      const float *row = x.data() + (o * seq + s) * dim;
      double *out = y.data() + (o * seq + s) * dim;
      for (int64_t i = 0; i < half; ++i) {
        double angle = double(offset + s) *
                       std::pow(theta, -2.0 * double(i) / double(dim));
        if (inverse)
          angle = -angle;
        double c = std::cos(angle), sn = std::sin(angle);
        out[i] = row[i] * c - row[i + half] * sn;
        out[i + half] = row[i + half] * c + row[i] * sn;
      }
    }
  return y;
}

TEST(CpuKernels, Rotary) {
  std::mt19937 rng(16);
  struct Case {
    int64_t outer, seq, dim;
    double theta;
    int64_t offset;
  };
  for (Case c : {Case{3, 5, 8, 10000.0, 0}, Case{2, 7, 2, 10000.0, 3},
                 Case{4, 33, 64, 10000.0, 0}, Case{2, 300, 128, 1e6, 1700},
                 Case{12, 64, 64, 500000.0, 4000}}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(std::to_string(c.outer) + "x" + std::to_string(c.seq) + "x" +
                   std::to_string(c.dim) + " offset " +
                   std::to_string(c.offset) + (inverse ? " inverse" : ""));
      std::vector<float> x = randomVector(c.outer * c.seq * c.dim, rng);
      std::vector<float> y(x.size());
      rotary(x.data(), y.data(), c.outer, c.seq, c.dim, c.theta, inverse,
             c.offset);
      EXPECT_TRUE(closeToMax(
          y, refRotary(x, c.outer, c.seq, c.dim, c.theta, inverse, c.offset)));
    }
  }
}

TEST(CpuKernels, RotaryInverseRoundTrip) {
  std::mt19937 rng(17);
  const int64_t outer = 5, seq = 37, dim = 16;
  std::vector<float> x = randomVector(outer * seq * dim, rng);
  std::vector<float> y(x.size()), back(x.size());
  rotary(x.data(), y.data(), outer, seq, dim, 10000.0, false, 11);
  rotary(y.data(), back.data(), outer, seq, dim, 10000.0, true, 11);
  std::vector<double> ref(x.begin(), x.end());
  EXPECT_TRUE(closeToMax(back, ref));
  // And it actually rotated something.
  EXPECT_FALSE(closeToMax(y, ref));
}

TEST(CpuKernels, RotaryPositionOffsetMatchesLaterPositions) {
  std::mt19937 rng(18);
  const int64_t outer = 2, seq = 20, dim = 8, offset = 12;
  // Full sequence [outer, offset + seq, dim]; rotating its tail with
  // positionOffset must give the tail of rotating the whole.
  std::vector<float> full = randomVector(outer * (offset + seq) * dim, rng);
  std::vector<float> fullOut(full.size());
  rotary(full.data(), fullOut.data(), outer, offset + seq, dim, 10000.0, false);
  std::vector<float> tail, expected;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = offset; s < offset + seq; ++s)
      for (int64_t i = 0; i < dim; ++i) {
        size_t at = size_t((o * (offset + seq) + s) * dim + i);
        tail.push_back(full[at]);
        expected.push_back(fullOut[at]);
      }
  std::vector<float> tailOut(tail.size());
  rotary(tail.data(), tailOut.data(), outer, seq, dim, 10000.0, false, offset);
  EXPECT_TRUE(closeToMax(
      tailOut, std::vector<double>(expected.begin(), expected.end()), 1e-6));
  EXPECT_TRUE(closeToMax(
      tailOut, refRotary(tail, outer, seq, dim, 10000.0, false, offset)));
}

TEST(CpuKernels, RotaryRejectsOddDim) {
  std::vector<float> x(3), y(3);
  EXPECT_THROW(rotary(x.data(), y.data(), 1, 1, 3, 10000.0, false),
               std::runtime_error);
}

//===----------------------------------------------------------------------===//
// transpose / slice / reduce
//===----------------------------------------------------------------------===//

void checkTranspose(const Dims &inShape, const Dims &perm, std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " perm " + dimsString(perm));
  std::vector<float> in = randomVector(numel(inShape), rng);
  Dims outShape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    outShape[i] = inShape[size_t(perm[i])];
  std::vector<float> out(in.size(), 99.0f);
  transpose(in.data(), inShape, perm, out.data());
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims outIndex = unravel(o, outShape);
    Dims inIndex(inShape.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inIndex[size_t(perm[i])] = outIndex[i];
    int64_t src = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      src = src * inShape[d] + inIndex[d];
    ASSERT_EQ(out[size_t(o)], in[size_t(src)]) << "output element " << o;
  }
}

TEST(CpuKernels, Transpose) {
  std::mt19937 rng(19);
  checkTranspose({7, 13}, {1, 0}, rng);
  checkTranspose({7, 13}, {0, 1}, rng);
  checkTranspose({2, 3, 4, 5}, {0, 2, 1, 3}, rng);
  checkTranspose({2, 3, 4, 5}, {0, 1, 3, 2}, rng);
  checkTranspose({2, 3, 4, 5}, {3, 1, 0, 2}, rng);
  checkTranspose({2, 3, 4, 5}, {3, 2, 1, 0}, rng);
  checkTranspose({2, 3, 1, 4, 5}, {4, 0, 3, 2, 1}, rng);
  checkTranspose({2, 3, 1, 4, 5}, {1, 0, 2, 3, 4}, rng);
  checkTranspose({3, 1, 5, 2, 4}, {2, 4, 0, 1, 3}, rng);
  checkTranspose({2, 1, 3, 2, 3, 2}, {5, 2, 0, 4, 1, 3}, rng);
  checkTranspose({1, 7, 1}, {2, 1, 0}, rng);
  checkTranspose({5}, {0}, rng);
  checkTranspose({}, {}, rng);
  // Threaded: row copies and tiled.
  checkTranspose({4, 96, 12, 40}, {0, 2, 1, 3}, rng);
  checkTranspose({64, 96, 40}, {2, 0, 1}, rng);
  checkTranspose({3, 200, 70}, {0, 2, 1}, rng);
  checkTranspose({333, 257}, {1, 0}, rng);
}

void checkSlice(const Dims &inShape, const Dims &offsets, const Dims &outShape,
                std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " offsets " + dimsString(offsets) +
               " out " + dimsString(outShape));
  std::vector<float> in = randomVector(numel(inShape), rng);
  std::vector<float> out(size_t(numel(outShape)), 99.0f);
  slice(in.data(), inShape, offsets, out.data(), outShape);
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims index = unravel(o, outShape);
    int64_t src = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      src = src * inShape[d] + index[d] + offsets[d];
    ASSERT_EQ(out[size_t(o)], in[size_t(src)]) << "output element " << o;
  }
}

TEST(CpuKernels, Slice) {
  std::mt19937 rng(20);
  checkSlice({7, 13}, {2, 3}, {4, 5}, rng);
  checkSlice({7, 13}, {0, 0}, {7, 13}, rng);
  checkSlice({7, 13}, {6, 12}, {1, 1}, rng);
  checkSlice({7, 13}, {2, 0}, {3, 13}, rng);
  checkSlice({2, 3, 4, 5}, {1, 0, 1, 0}, {1, 3, 2, 5}, rng);
  checkSlice({2, 3, 4, 5}, {0, 1, 0, 2}, {2, 2, 4, 3}, rng);
  checkSlice({3, 2, 4, 1, 5}, {1, 1, 0, 0, 1}, {2, 1, 4, 1, 3}, rng);
  checkSlice({2, 3, 2, 3, 2, 3}, {1, 1, 0, 1, 1, 0}, {1, 2, 2, 2, 1, 2}, rng);
  checkSlice({}, {}, {}, rng);
  // Threaded: many rows, and one long row.
  checkSlice({3, 2048, 96}, {0, 0, 32}, {3, 2048, 32}, rng);
  checkSlice({400000}, {1234}, {300000}, rng);
}

void checkReduce(const Dims &inShape, const Dims &dims, bool mean,
                 std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " dims " + dimsString(dims) +
               (mean ? " mean" : " sum"));
  std::vector<float> in = randomVector(numel(inShape), rng, -1.0f, 2.0f);
  Dims outShape;
  std::vector<bool> reduced(inShape.size(), false);
  for (int64_t d : dims)
    reduced[size_t(d)] = true;
  int64_t count = 1;
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (reduced[d])
      count *= inShape[d];
    else
      outShape.push_back(inShape[d]);
  }
  std::vector<double> ref(size_t(numel(outShape)), 0.0);
  for (int64_t i = 0; i < numel(inShape); ++i) {
    Dims index = unravel(i, inShape);
    int64_t o = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      if (!reduced[d])
        o = o * inShape[d] + index[d];
    ref[size_t(o)] += in[size_t(i)];
  }
  if (mean)
    for (double &r : ref)
      r /= double(count);
  std::vector<float> out(ref.size(), 99.0f);
  reduce(in.data(), inShape, dims, mean, out.data());
  EXPECT_TRUE(closeToMax(out, ref));
}

TEST(CpuKernels, Reduce) {
  std::mt19937 rng(21);
  std::vector<std::pair<Dims, Dims>> cases = {
      {{7, 13}, {1}},
      {{7, 13}, {0}},
      {{7, 13}, {0, 1}},
      {{7, 13}, {}},
      {{2, 3, 4, 5}, {1}},
      {{2, 3, 4, 5}, {0, 2}},
      {{2, 3, 4, 5}, {3}},
      {{2, 3, 4, 5}, {1, 2}},
      {{2, 3, 4, 5}, {0, 3}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}},
      {{2, 3, 4, 5}, {1, 3}},
      {{3, 1, 4, 1, 5}, {1, 2}},
      {{3, 1, 4, 1, 5}, {0, 4}},
      {{3, 1, 4, 1, 5}, {1, 3}},
      {{2, 3, 2, 3, 2, 3}, {0, 2, 5}},
      {{1}, {0}},
      // Threaded.
      {{301, 257}, {0}},
      {{301, 257}, {1}},
      {{64, 33, 129}, {0, 2}},
      {{4, 65, 1000}, {1}},
      {{300000}, {0}},
      {{3, 200000}, {1}},
  };
  for (const auto &[shape, dims] : cases)
    for (bool mean : {false, true})
      checkReduce(shape, dims, mean, rng);
}

//===----------------------------------------------------------------------===//
// crossEntropy
//===----------------------------------------------------------------------===//

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

namespace {
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
} // namespace

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

//===----------------------------------------------------------------------===//
// In place (out == in), as the elementwise and row-wise kernels allow
//===----------------------------------------------------------------------===//

TEST(CpuKernels, InPlace) {
  std::mt19937 rng(25);
  const int64_t rows = 130, cols = 258; // threaded
  const int64_t n = rows * cols;
  const std::vector<float> x = randomVector(n, rng, -2.0f, 2.0f);
  std::vector<float> gamma = randomVector(cols, rng, 0.5f, 1.5f);
  std::vector<float> beta = randomVector(cols, rng);
  std::vector<float> buffer;

  buffer = x;
  scale(buffer.data(), 3.0f, buffer.data(), n);
  {
    std::vector<double> ref(x.begin(), x.end());
    for (double &r : ref)
      r *= 3.0;
    EXPECT_TRUE(closeElementwise(buffer, ref, 1e-7, 0.0)) << "scale";
  }

  buffer = x;
  gelu(buffer.data(), buffer.data(), n);
  {
    std::vector<double> ref(x.size());
    const double c = std::sqrt(2.0 / std::numbers::pi);
    for (size_t i = 0; i < x.size(); ++i) {
      double v = x[i];
      ref[i] = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    }
    EXPECT_TRUE(closeElementwise(buffer, ref, 1e-5, 1e-7)) << "gelu";
  }

  buffer = x;
  silu(buffer.data(), buffer.data(), n);
  {
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ref[i] = x[i] / (1.0 + std::exp(-double(x[i])));
    EXPECT_TRUE(closeElementwise(buffer, ref, 1e-5, 1e-7)) << "silu";
  }

  Dims shape = {rows, cols}, bias = {cols};
  buffer = x;
  binary(BinaryKind::Sub, buffer.data(), shape, gamma.data(), bias,
         buffer.data(), shape);
  {
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ref[i] = double(x[i]) - gamma[i % size_t(cols)];
    EXPECT_TRUE(closeElementwise(buffer, ref, 1e-6, 1e-7)) << "binary lhs";
  }
  buffer = x;
  binary(BinaryKind::Div, gamma.data(), bias, buffer.data(), shape,
         buffer.data(), shape);
  {
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ref[i] = gamma[i % size_t(cols)] / double(x[i]);
    EXPECT_TRUE(closeElementwise(buffer, ref, 1e-6, 0.0)) << "binary rhs";
  }

  buffer = x;
  softmax(buffer.data(), buffer.data(), rows, cols, false);
  EXPECT_TRUE(
      closeElementwise(buffer, refSoftmax(x, rows, cols, false), 1e-5, 1e-7))
      << "softmax";

  buffer = x;
  layerNorm(buffer.data(), gamma.data(), beta.data(), buffer.data(), rows, cols,
            1e-5f);
  {
    std::vector<double> ref = refLayerNorm(x, gamma, beta, rows, cols, 1e-5);
    EXPECT_TRUE(closeToMax(buffer, ref)) << "layerNorm";
  }

  buffer = x;
  rmsNorm(buffer.data(), gamma.data(), buffer.data(), rows, cols, 1e-6f);
  {
    std::vector<double> ref = refRmsNorm(x, gamma, rows, cols, 1e-6);
    EXPECT_TRUE(closeToMax(buffer, ref)) << "rmsNorm";
  }

  // [2, 65, 258] viewed as outer 2, seq 65, dim 258.
  buffer = x;
  rotary(buffer.data(), buffer.data(), 2, rows / 2, cols, 10000.0, false, 5);
  EXPECT_TRUE(
      closeToMax(buffer, refRotary(x, 2, rows / 2, cols, 10000.0, false, 5)))
      << "rotary";
}

//===----------------------------------------------------------------------===//
// Thread-count invariance
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Backward kernels
//===----------------------------------------------------------------------===//

/// d/dx of sum(resultGrad * f(x)) at element i by central differences of a
/// forward kernel: f is evaluated on x with x[i] moved by about +-h (the step
/// actually taken after rounding to float is what we divide by), and the
/// objective is formed in double.
template <typename Objective>
double centralDifference(std::vector<float> &x, size_t i, double h,
                         const Objective &objective) {
  float original = x[i];
  x[i] = static_cast<float>(double(original) + h);
  float up = x[i];
  double plus = objective();
  x[i] = static_cast<float>(double(original) - h);
  float down = x[i];
  double minus = objective();
  x[i] = original;
  return (plus - minus) / (double(up) - double(down));
}

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

/// layerNorm's gradients from the analytic formula, in double.
void refLayerNormGrad(const std::vector<float> &dy, const std::vector<float> &x,
                      const std::vector<float> &gamma, int64_t rows,
                      int64_t cols, double eps, std::vector<double> &dx,
                      std::vector<double> &dgamma, std::vector<double> &dbeta) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<size_t>(cols), 0.0);
  dbeta.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * cols;
    const float *gr = dy.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      mean += xr[i];
    mean /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    std::vector<double> xhat(static_cast<size_t>(cols)),
        dxhat(static_cast<size_t>(cols));
    double meanDxhat = 0.0, meanDxhatXhat = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      xhat[size_t(i)] = (xr[i] - mean) * rstd;
      dxhat[size_t(i)] = double(gr[i]) * gamma[size_t(i)];
      meanDxhat += dxhat[size_t(i)] / double(cols);
      meanDxhatXhat += dxhat[size_t(i)] * xhat[size_t(i)] / double(cols);
      dgamma[size_t(i)] += double(gr[i]) * xhat[size_t(i)];
      dbeta[size_t(i)] += gr[i];
    }
    for (int64_t i = 0; i < cols; ++i)
      dx[size_t(r * cols + i)] = rstd * (dxhat[size_t(i)] - meanDxhat -
                                         xhat[size_t(i)] * meanDxhatXhat);
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

/// rmsNorm's gradients through its Jacobian, in double:
/// dy_j/dx_i = gamma_j r (delta_ij - x_i x_j r^2 / n).
void refRmsNormGrad(const std::vector<float> &dy, const std::vector<float> &x,
                    const std::vector<float> &gamma, int64_t rows, int64_t cols,
                    double eps, std::vector<double> &dx,
                    std::vector<double> &dgamma) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * cols;
    const float *gr = dy.data() + r * cols;
    double ms = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      ms += double(xr[i]) * xr[i];
    ms /= double(cols);
    double rr = 1.0 / std::sqrt(ms + eps);
    for (int64_t i = 0; i < cols; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        double jac = gamma[size_t(j)] * rr *
                     ((i == j ? 1.0 : 0.0) -
                      double(xr[i]) * xr[j] * rr * rr / double(cols));
        sum += gr[j] * jac;
      }
      dx[size_t(r * cols + i)] = sum;
      dgamma[size_t(i)] += double(gr[i]) * xr[i] * rr;
    }
  }
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

/// Rows whose variance (layer norm) or mean square (RMS norm) is a multiple
/// f of eps, f from 0 to 100: there eps weighs as much as the data, so an
/// eps added in the wrong place (outside the square root, or to the
/// standard deviation) is far outside the tolerance. eps is not a default.
struct NearEpsRows {
  static constexpr float kEps = 1e-3f;
  static constexpr int64_t kCols = 257;
  std::vector<float> x, gamma, beta, dy;
  int64_t rows = 0;

  /// `offset` is every row's mean (0 for RMS norm, whose scale is the mean
  /// square itself).
  NearEpsRows(std::mt19937 &rng, float offset) {
    const std::vector<double> multiples = {0, 0.01, 0.1, 0.5, 1, 2, 10, 100};
    rows = int64_t(multiples.size());
    for (double f : multiples) {
      std::vector<float> z = randomVector(kCols, rng);
      double mean = 0.0, square = 0.0;
      for (float v : z)
        mean += v / double(kCols);
      for (float v : z)
        square += (v - mean) * (v - mean) / double(kCols);
      // Zero mean and exactly the target variance (up to float rounding).
      const double scale = std::sqrt(f * kEps / square);
      for (float v : z)
        x.push_back(float(offset + (v - mean) * scale));
    }
    gamma = randomVector(kCols, rng, 0.5f, 1.5f);
    beta = randomVector(kCols, rng);
    dy = randomVector(rows * kCols, rng);
  }
};

TEST(CpuKernels, LayerNormWithVarianceNearEps) {
  std::mt19937 rng(38);
  NearEpsRows in(rng, 3.0f);
  const int64_t rows = in.rows, cols = in.kCols;
  std::vector<float> y(in.x.size());
  layerNorm(in.x.data(), in.gamma.data(), in.beta.data(), y.data(), rows, cols,
            in.kEps);
  EXPECT_TRUE(closeToMax(
      y, refLayerNorm(in.x, in.gamma, in.beta, rows, cols, in.kEps), 1e-4));

  std::vector<float> dx(in.x.size()), dgamma(static_cast<size_t>(cols)),
      dbeta(static_cast<size_t>(cols));
  layerNormGrad(in.dy.data(), in.x.data(), in.gamma.data(), dx.data(),
                dgamma.data(), dbeta.data(), rows, cols, in.kEps);
  std::vector<double> refDx, refGamma, refBeta;
  refLayerNormGrad(in.dy, in.x, in.gamma, rows, cols, in.kEps, refDx, refGamma,
                   refBeta);
  EXPECT_TRUE(closeToMax(dx, refDx, 1e-4)) << "inputGrad";
  EXPECT_TRUE(closeToMax(dgamma, refGamma, 1e-4)) << "gammaGrad";
}

TEST(CpuKernels, RmsNormWithMeanSquareNearEps) {
  std::mt19937 rng(39);
  NearEpsRows in(rng, 0.0f);
  const int64_t rows = in.rows, cols = in.kCols;
  std::vector<float> y(in.x.size());
  rmsNorm(in.x.data(), in.gamma.data(), y.data(), rows, cols, in.kEps);
  EXPECT_TRUE(
      closeToMax(y, refRmsNorm(in.x, in.gamma, rows, cols, in.kEps), 1e-4));

  std::vector<float> dx(in.x.size()), dgamma(static_cast<size_t>(cols));
  rmsNormGrad(in.dy.data(), in.x.data(), in.gamma.data(), dx.data(),
              dgamma.data(), rows, cols, in.kEps);
  std::vector<double> refDx, refGamma;
  refRmsNormGrad(in.dy, in.x, in.gamma, rows, cols, in.kEps, refDx, refGamma);
  EXPECT_TRUE(closeToMax(dx, refDx, 1e-4)) << "inputGrad";
  EXPECT_TRUE(closeToMax(dgamma, refGamma, 1e-4)) << "gammaGrad";
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

/// Gradient of the mean cross-entropy, in double:
/// (softmax - onehot) * lossGrad / tokens.
std::vector<double> refCrossEntropyGrad(const std::vector<float> &logits,
                                        int64_t tokens, int64_t vocab,
                                        const std::vector<int32_t> &targets,
                                        double lossGrad) {
  std::vector<double> grad(logits.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const float *row = logits.data() + t * vocab;
    double m = row[0];
    for (int64_t i = 0; i < vocab; ++i)
      m = std::max(m, double(row[i]));
    double sum = 0.0, others = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      sum += std::exp(row[i] - m);
      if (i != targets[size_t(t)])
        others += std::exp(row[i] - m);
    }
    for (int64_t i = 0; i < vocab; ++i) {
      double g =
          i == targets[size_t(t)] ? -others / sum : std::exp(row[i] - m) / sum;
      grad[size_t(t * vocab + i)] = g * lossGrad / double(tokens);
    }
  }
  return grad;
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

//===----------------------------------------------------------------------===//
// pad / fill / normSquared
//===----------------------------------------------------------------------===//

void checkPad(const Dims &inShape, const Dims &offsets, const Dims &outShape,
              std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " offsets " + dimsString(offsets) +
               " out " + dimsString(outShape));
  std::vector<float> in = randomVector(numel(inShape), rng, 1.0f, 2.0f);
  std::vector<float> out(static_cast<size_t>(numel(outShape)), 99.0f);
  pad(in.data(), inShape, offsets, out.data(), outShape);
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims index = unravel(o, outShape);
    bool inside = true;
    int64_t src = 0;
    for (size_t d = 0; d < outShape.size(); ++d) {
      int64_t i = index[d] - offsets[d];
      inside = inside && i >= 0 && i < inShape[d];
      src = src * inShape[d] + i;
    }
    ASSERT_EQ(out[size_t(o)], inside ? in[size_t(src)] : 0.0f)
        << "output element " << o;
  }
  // pad is the adjoint of slice: slicing the window back gives the input.
  std::vector<float> back(in.size(), 99.0f);
  slice(out.data(), outShape, offsets, back.data(), inShape);
  EXPECT_EQ(back, in);
}

TEST(CpuKernels, Pad) {
  std::mt19937 rng(42);
  checkPad({4, 5}, {2, 3}, {7, 13}, rng);
  checkPad({7, 13}, {0, 0}, {7, 13}, rng);
  checkPad({1, 1}, {6, 12}, {7, 13}, rng);
  checkPad({3, 13}, {2, 0}, {7, 13}, rng);
  checkPad({7, 4}, {0, 0}, {7, 13}, rng);
  checkPad({1, 3, 2, 5}, {1, 0, 1, 0}, {2, 3, 4, 5}, rng);
  checkPad({2, 2, 4, 3}, {0, 1, 0, 2}, {2, 3, 4, 5}, rng);
  // Rank 5, with zero offsets and a partial outer dim.
  checkPad({2, 1, 4, 1, 3}, {1, 1, 0, 0, 1}, {3, 2, 4, 1, 5}, rng);
  checkPad({2, 3, 4, 2, 5}, {0, 0, 0, 0, 0}, {3, 3, 4, 3, 5}, rng);
  checkPad({1, 2, 2, 2, 1, 2}, {1, 1, 0, 1, 1, 0}, {2, 3, 2, 3, 2, 3}, rng);
  checkPad({}, {}, {}, rng);
  checkPad({0, 5}, {1, 0}, {3, 5}, rng);
  checkPad({2, 0}, {0, 0}, {2, 0}, rng);
  // Threaded: many rows (q/k/v gradient into [.., 3 * hidden]), one long row.
  checkPad({3, 2048, 32}, {0, 0, 32}, {3, 2048, 96}, rng);
  checkPad({300000}, {1234}, {400000}, rng);
  checkPad({3, 100000}, {0, 7}, {3, 100009}, rng);
}

TEST(CpuKernels, PadRejectsBadWindows) {
  std::vector<float> in(6), out(20);
  Dims inShape = {2, 3}, outShape = {4, 5};
  Dims offsets = {2, 3};
  expectRuntimeError(
      [&] { pad(in.data(), inShape, offsets, out.data(), outShape); },
      "pad: window 3+3 of dim 1 exceeds its size 5");
  Dims negative = {-1, 0}, shortOffsets = {0};
  EXPECT_THROW(pad(in.data(), inShape, negative, out.data(), outShape),
               std::runtime_error);
  EXPECT_THROW(pad(in.data(), inShape, shortOffsets, out.data(), outShape),
               std::runtime_error);
}

TEST(CpuKernels, Fill) {
  for (int64_t n : {0, 1, 13, 100003}) {
    std::vector<float> out(static_cast<size_t>(n) + 1, 99.0f);
    fill(-2.5f, out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[size_t(i)], -2.5f) << i;
    EXPECT_EQ(out[size_t(n)], 99.0f); // nothing past the end
  }
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

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Backward in place and determinism
//===----------------------------------------------------------------------===//

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
