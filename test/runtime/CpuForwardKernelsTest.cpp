// Tests of the forward kernels (embedding, matmul, binary, elementwise, norms,
// softmax, rotary) against
// straightforward double-precision references (naive loops over
// multi-indices) on random inputs with odd sizes, chosen so that both the
// single-chunk and the threaded paths of each kernel run.
#include "CpuKernelsTestSupport.h"

#include <algorithm>
#include <atomic>
#include <bit>
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

TEST(CpuKernels, RoundsToBf16AndTf32ToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: even is 1; 1 +
  // 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  // Just above halfway rounds up. tf32 keeps 10 mantissa bits.
  const std::vector<float> in = {1.0f + 0x1p-8f,
                                 1.0f + 0x3p-8f,
                                 1.0f + 0x1.02p-8f,
                                 -(1.0f + 0x1.02p-8f),
                                 1.0f + 0x1p-11f,
                                 1.0f + 0x3p-11f,
                                 inf,
                                 -0.0f};
  std::vector<float> bf16(in.size()), tf32(in.size()), none(in.size());
  round(Rounding::BF16, in.data(), bf16.data(), int64_t(in.size()));
  round(Rounding::TF32, in.data(), tf32.data(), int64_t(in.size()));
  round(Rounding::None, in.data(), none.data(), int64_t(in.size()));
  EXPECT_EQ(bf16,
            (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f,
                                -(1.0f + 0x1p-7f), 1.0f, 1.0f, inf, -0.0f}));
  EXPECT_EQ(tf32[4], 1.0f);
  EXPECT_EQ(tf32[5], 1.0f + 0x1p-9f);
  EXPECT_EQ(tf32[0], in[0]); // 2^-8 is within tf32's mantissa
  EXPECT_EQ(none, in);
  float nan = std::numeric_limits<float>::quiet_NaN(), rounded = 0;
  round(Rounding::BF16, &nan, &rounded, 1);
  EXPECT_TRUE(std::isnan(rounded));
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

TEST(CpuKernels, Relu) {
  std::mt19937 rng(14);
  for (int64_t n : {int64_t(37), int64_t(200001)}) {
    std::vector<float> in = activationInputs(rng, n);
    in[0] = 0.0f;
    in[1] = -0.0f;
    in[2] = std::numeric_limits<float>::quiet_NaN();
    in[3] = -std::numeric_limits<float>::infinity();
    std::vector<float> out(static_cast<size_t>(n), 99.0f);
    relu(in.data(), out.data(), n);
    for (size_t i = 0; i < size_t(n); ++i) {
      if (std::isnan(in[i])) {
        EXPECT_TRUE(std::isnan(out[i])) << "at " << i;
        continue;
      }
      // torch.relu: 0 (positive zero) for every x <= 0, x itself above.
      const float expected = in[i] > 0.0f ? in[i] : 0.0f;
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]),
                std::bit_cast<uint32_t>(expected))
          << "relu(" << in[i] << ") at " << i;
    }
  }
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

TEST(CpuKernels, RotaryAtPositionsMatchesRotaryAtTheirOffsets) {
  // Rows of [batch, heads, seq, dim] at positions offset_n + s rotate
  // exactly as `rotary` with positionOffset offset_n rotates them.
  std::mt19937 rng(19);
  const int64_t batch = 2, heads = 3, seq = 5, dim = 8;
  const int64_t offsets[batch] = {7, 30};
  std::vector<float> x = randomVector(batch * heads * seq * dim, rng);
  std::vector<int32_t> positions;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t s = 0; s < seq; ++s)
      positions.push_back(int32_t(offsets[n] + s));
  for (bool inverse : {false, true}) {
    std::vector<float> got(x.size()), want(x.size());
    rotaryAt(x.data(), got.data(), batch * heads, seq, dim, 500000.0, inverse,
             positions.data(), batch);
    const int64_t perRow = heads * seq * dim;
    for (int64_t n = 0; n < batch; ++n)
      rotary(x.data() + n * perRow, want.data() + n * perRow, heads, seq, dim,
             500000.0, inverse, offsets[n]);
    EXPECT_EQ(got, want) << (inverse ? "inverse" : "forward");
  }
}

TEST(CpuKernels, CacheWriteWritesRowsAtTheirPositions) {
  // cache [batch 2, heads 2, 6, 3]; two rows per batch row, at positions
  // {4, 1} and {0, 5}: those rows replaced, every other kept.
  const int64_t batch = 2, heads = 2, cacheRows = 6, rows = 2, dim = 3;
  std::vector<float> cache(size_t(batch * heads * cacheRows * dim));
  for (size_t i = 0; i < cache.size(); ++i)
    cache[i] = -float(i);
  std::vector<float> update(size_t(batch * heads * rows * dim));
  for (size_t i = 0; i < update.size(); ++i)
    update[i] = 100.0f + float(i);
  const std::vector<int32_t> positions = {4, 1, 0, 5};
  std::vector<float> want = cache;
  for (int64_t o = 0; o < batch * heads; ++o)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t c = 0; c < dim; ++c)
        want[size_t(
            (o * cacheRows + positions[size_t((o / heads) * rows + t)]) * dim +
            c)] = update[size_t((o * rows + t) * dim + c)];
  auto bytes = [](auto &v) { return reinterpret_cast<std::byte *>(v.data()); };
  cacheWrite(bytes(cache), bytes(update), batch * heads, cacheRows, rows, dim,
             sizeof(float), positions.data(), batch);
  EXPECT_EQ(cache, want);
  const std::vector<int32_t> outside = {4, 6, 0, 5};
  expectRuntimeError(
      [&] {
        cacheWrite(bytes(cache), bytes(update), batch * heads, cacheRows, rows,
                   dim, sizeof(float), outside.data(), batch);
      },
      "position 6 is outside the KV cache of 6 positions");
}

TEST(CpuKernels, RotaryRejectsOddDim) {
  std::vector<float> x(3), y(3);
  EXPECT_THROW(rotary(x.data(), y.data(), 1, 1, 3, 10000.0, false),
               std::runtime_error);
}

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

} // namespace
