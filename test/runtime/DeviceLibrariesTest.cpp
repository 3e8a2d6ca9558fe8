// The host side of the CUDA backend's library calls (DeviceLibraries.h),
// which runs without a GPU: the column-major problem handed to cuBLASLt
// computes the row-major product (checked by evaluating both), plan cache
// keys tell apart every field an algorithm depends on, cuDNN's [N, H, S, D]
// view of an attention step reads the key head tp.attention does, and the
// choice of attention kernels names its reason.
#include "tpc/runtime/DeviceLibraries.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace tpc::runtime::device {
namespace {

using plan::DType;

/// Row-major out = op(lhs) op(rhs), element by element.
std::vector<double> rowMajorReference(const RowMajorProduct &p,
                                      const std::vector<double> &lhs,
                                      const std::vector<double> &rhs,
                                      int64_t batch) {
  std::vector<double> out(size_t(p.m * p.ldOut), 0.0);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double a =
            p.transposeLhs ? lhs[size_t(batch * p.strideLhs + l * p.ldLhs + i)]
                           : lhs[size_t(batch * p.strideLhs + i * p.ldLhs + l)];
        const double b =
            p.transposeRhs ? rhs[size_t(batch * p.strideRhs + j * p.ldRhs + l)]
                           : rhs[size_t(batch * p.strideRhs + l * p.ldRhs + j)];
        sum += a * b;
      }
      out[size_t(i * p.ldOut + j)] = sum;
    }
  return out;
}

/// What cuBLAS computes for a column-major problem: D = op(A) op(B), each
/// matrix column-major with its leading dim.
std::vector<double> columnMajorProduct(const ColumnMajorGemm &g,
                                       const std::vector<double> &a,
                                       const std::vector<double> &b,
                                       int64_t batch) {
  auto at = [](const std::vector<double> &x, int64_t ld, int64_t offset,
               int64_t row,
               int64_t col) { return x[size_t(offset + col * ld + row)]; };
  std::vector<double> d(size_t(g.n * g.ldd), 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double x = g.transA ? at(a, g.lda, batch * g.strideA, l, i)
                                  : at(a, g.lda, batch * g.strideA, i, l);
        const double y = g.transB ? at(b, g.ldb, batch * g.strideB, j, l)
                                  : at(b, g.ldb, batch * g.strideB, l, j);
        sum += x * y;
      }
      d[size_t(j * g.ldd + i)] = sum;
    }
  return d;
}

TEST(DeviceLibraries, ColumnMajorProblemComputesTheRowMajorProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (bool tl : {false, true})
    for (bool tr : {false, true}) {
      RowMajorProduct p;
      p.m = 5;
      p.n = 3;
      p.k = 4;
      p.transposeLhs = tl;
      p.transposeRhs = tr;
      // Padded rows: a column block of a wider matrix.
      p.ldLhs = p.lhsCols() + 2;
      p.ldRhs = p.rhsCols() + 1;
      p.ldOut = p.n + 3;
      p.batches = 2;
      p.strideLhs = p.lhsRows() * p.ldLhs;
      p.strideRhs = p.rhsRows() * p.ldRhs;
      p.strideOut = p.m * p.ldOut;
      std::vector<double> lhs(size_t(p.batches * p.strideLhs)),
          rhs(size_t(p.batches * p.strideRhs));
      for (double &x : lhs)
        x = uniform(rng);
      for (double &x : rhs)
        x = uniform(rng);
      const ColumnMajorGemm g = columnMajor(p);
      EXPECT_EQ(g.rowsA, g.transA ? g.k : g.m);
      EXPECT_EQ(g.colsA, g.transA ? g.m : g.k);
      EXPECT_EQ(g.rowsB, g.transB ? g.n : g.k);
      EXPECT_EQ(g.rowsD, g.m);
      EXPECT_LE(g.rowsA, g.lda);
      EXPECT_LE(g.rowsB, g.ldb);
      for (int64_t batch = 0; batch < p.batches; ++batch) {
        // cuBLAS multiplies rhs (A) by lhs (B); D^T is the row-major out.
        const std::vector<double> want = rowMajorReference(p, lhs, rhs, batch),
                                  got = columnMajorProduct(g, rhs, lhs, batch);
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 0; j < p.n; ++j)
            EXPECT_NEAR(got[size_t(i * g.ldd + j)],
                        want[size_t(i * p.ldOut + j)], 1e-12)
                << "transposeLhs " << tl << " transposeRhs " << tr << " (" << i
                << ", " << j << ")";
      }
    }
}

TEST(DeviceLibraries, EpiloguesNameTheirVectorAndAuxiliaryMatrix) {
  RowMajorProduct p;
  p.m = 6;
  p.n = 16;
  p.k = 8;
  p.ldLhs = 8;
  p.ldRhs = 16;
  p.ldOut = 16;
  EXPECT_EQ(columnMajor(p).biasLength, 0);
  p.epilogue = Epilogue::GeluGrad;
  p.ldAux = 16;
  EXPECT_EQ(columnMajor(p).biasLength, 0);
  EXPECT_EQ(columnMajor(p).ldAux, 16);
  p.epilogue = Epilogue::BiasGeluAux;
  // The bias runs over out's columns: cuBLAS's rows of D.
  EXPECT_EQ(columnMajor(p).biasLength, 16);
  EXPECT_EQ(columnMajor(p).ldAux, 16);
  EXPECT_EQ(whyNotBlasLt(p), "");
  p.ldAux = 12;
  EXPECT_EQ(whyNotBlasLt(p), "the preactivation's row stride 12 is not a "
                             "multiple of 8 (cuBLASLt's auxiliary matrix)");
  p.biasType = DType::BF16;
  EXPECT_EQ(whyNotBlasLt(p), "a bias of another element type than the "
                             "result (cuBLASLt's is the result's)");
  p.biasType = DType::F32;
  p.epilogue = Epilogue::Bias;
  p.batches = 2;
  EXPECT_EQ(whyNotBlasLt(p), "an epilogue on a batched product");
  p.epilogue = Epilogue::None;
  EXPECT_EQ(whyNotBlasLt(p), "");
  p.inType = DType::F32;
  p.outType = DType::BF16;
  EXPECT_EQ(whyNotBlasLt(p), "f32 operands into a bf16 result");
  p.inType = DType::BF16;
  p.tf32 = true;
  EXPECT_EQ(whyNotBlasLt(p), "TF32 on operands that are not f32");
  p.tf32 = false;
  p.ldOut = 15;
  EXPECT_EQ(whyNotBlasLt(p), "a row stride shorter than its row");
  p.k = 0;
  EXPECT_EQ(whyNotBlasLt(p), "an empty product");
}

TEST(DeviceLibraries, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  alignas(512) static std::byte buffer[1024];
  EXPECT_EQ(alignmentOf(buffer), 256u);
  EXPECT_EQ(alignmentOf(buffer + 2), 2u);
  EXPECT_EQ(alignmentOf(buffer + 48), 16u);
  EXPECT_EQ(alignmentOf(buffer + 128), 128u);
  EXPECT_EQ(alignmentOf(buffer + 1), 1u);
}

TEST(DeviceLibraries, GemmKeysTellEveryFieldApart) {
  alignas(256) static std::byte memory[4096];
  RowMajorProduct base;
  base.m = 64;
  base.n = 32;
  base.k = 16;
  base.ldLhs = 16;
  base.ldRhs = 32;
  base.ldOut = 32;
  base.inType = base.outType = base.biasType = DType::BF16;
  base.epilogue = Epilogue::BiasGeluAux;
  base.ldAux = 32;
  auto key = [&](const RowMajorProduct &p, size_t shift = 0) {
    return gemmKey(p, memory, memory + 256, memory + 512 + shift, memory + 1024,
                   memory + 2048);
  };
  std::vector<GemmKey> keys = {key(base)};
  auto vary = [&](auto change) {
    RowMajorProduct p = base;
    change(p);
    keys.push_back(key(p));
  };
  vary([](RowMajorProduct &p) { p.m = 65; });
  vary([](RowMajorProduct &p) { p.n = 40; });
  vary([](RowMajorProduct &p) { p.k = 8; });
  vary([](RowMajorProduct &p) { p.transposeLhs = true; });
  vary([](RowMajorProduct &p) { p.transposeRhs = true; });
  vary([](RowMajorProduct &p) { p.ldLhs = 24; });
  vary([](RowMajorProduct &p) { p.ldRhs = 48; });
  vary([](RowMajorProduct &p) { p.ldOut = 48; });
  vary([](RowMajorProduct &p) { p.batches = 2; });
  vary([](RowMajorProduct &p) { p.strideLhs = 1024; });
  vary([](RowMajorProduct &p) { p.strideRhs = 1024; });
  vary([](RowMajorProduct &p) { p.strideOut = 2048; });
  vary([](RowMajorProduct &p) { p.inType = DType::F32; });
  vary([](RowMajorProduct &p) { p.outType = DType::F32; });
  vary([](RowMajorProduct &p) { p.tf32 = true; });
  vary([](RowMajorProduct &p) { p.accumulate = true; });
  vary([](RowMajorProduct &p) { p.epilogue = Epilogue::BiasGelu; });
  vary([](RowMajorProduct &p) { p.biasType = DType::F32; });
  vary([](RowMajorProduct &p) { p.epilogue = Epilogue::GeluGrad; });
  vary([](RowMajorProduct &p) { p.ldAux = 40; });
  keys.push_back(key(base, 16)); // the result only 16-byte aligned
  PlanCache<GemmKey, int> cache;
  int built = 0;
  for (const GemmKey &k : keys)
    cache.get(k, [&] { return built++; });
  EXPECT_EQ(cache.size(), keys.size()) << "two keys compared equal";
  EXPECT_EQ(cache.builds(), keys.size());
  // The same product at the same alignment finds its plan.
  EXPECT_EQ(cache.get(key(base), [] { return -1; }), 0);
  EXPECT_EQ(cache.get(keys.back(), [] { return -1; }), int(keys.size()) - 1);
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_EQ(cache.builds(), keys.size());
  EXPECT_EQ(describe(key(base)),
            "bf16 64x16 @ 16x32 -> bf16, bias+gelu(aux) (bf16 bias), aligned "
            "256/256/256");
}

TEST(DeviceLibraries, SdpaDimsGroupTheBroadcastHeads) {
  std::string why;
  // Multi-head: [B, H, S, D] as it is.
  std::optional<SdpaDims> mha = sdpaDims(std::vector<int64_t>{2, 4, 16, 64},
                                         std::vector<int64_t>{2, 4, 16, 64},
                                         std::vector<int64_t>{2, 4, 16, 32});
  ASSERT_TRUE(mha);
  EXPECT_EQ(*mha, (SdpaDims{2, 4, 4, 16, 16, 64, 32}));
  // Grouped-query: [B, Hkv, G] queries against [B, Hkv, 1] keys.
  std::optional<SdpaDims> gqa = sdpaDims(std::vector<int64_t>{2, 2, 3, 5, 8},
                                         std::vector<int64_t>{2, 2, 1, 7, 8},
                                         std::vector<int64_t>{2, 2, 1, 7, 8});
  ASSERT_TRUE(gqa);
  EXPECT_EQ(*gqa, (SdpaDims{2, 6, 2, 5, 7, 8, 8}));
  // One key head for all.
  std::optional<SdpaDims> mqa = sdpaDims(std::vector<int64_t>{3, 4, 5, 8},
                                         std::vector<int64_t>{1, 1, 5, 8},
                                         std::vector<int64_t>{1, 1, 5, 8});
  ASSERT_TRUE(mqa);
  EXPECT_EQ(*mqa, (SdpaDims{1, 12, 1, 5, 5, 8, 8}));
  // A broadcast dim before a head dim has no cuDNN grouping.
  EXPECT_FALSE(sdpaDims(std::vector<int64_t>{2, 4, 5, 8},
                        std::vector<int64_t>{1, 4, 5, 8},
                        std::vector<int64_t>{1, 4, 5, 8}, &why));
  EXPECT_EQ(why, "key batch dim 1 (4) follows a broadcast dim");
  EXPECT_FALSE(sdpaDims(std::vector<int64_t>{2, 4, 5, 8},
                        std::vector<int64_t>{2, 4, 5, 16},
                        std::vector<int64_t>{2, 4, 5, 8}, &why));
  EXPECT_EQ(why, "query and key have different head dims");
}

/// tp.attention's key for query batch index `flat` (row-major over the
/// query's batch dims; a broadcast key dim reads index 0) equals cuDNN's
/// grouping: head h of batch n reads key head h / (Hq / Hk).
TEST(DeviceLibraries, SdpaGroupingReadsTheKeyHeadTpAttentionReads) {
  const std::vector<std::vector<int64_t>> queries = {
      {2, 2, 3, 5, 8}, {3, 4, 5, 8}, {2, 3, 2, 2, 5, 8}};
  const std::vector<std::vector<int64_t>> keys = {
      {2, 2, 1, 5, 8}, {1, 1, 5, 8}, {2, 3, 1, 1, 5, 8}};
  for (size_t c = 0; c < queries.size(); ++c) {
    const std::vector<int64_t> &q = queries[c], &k = keys[c];
    std::optional<SdpaDims> dims = sdpaDims(q, k, k);
    ASSERT_TRUE(dims);
    const size_t rank = q.size() - 2;
    int64_t count = 1;
    for (size_t i = 0; i < rank; ++i)
      count *= q[i];
    ASSERT_EQ(count, dims->batch * dims->queryHeads);
    for (int64_t flat = 0; flat < count; ++flat) {
      // Ours: unflatten over the query dims, clamp broadcast dims to 0,
      // flatten over the key dims.
      int64_t rest = flat, keyFlat = 0, keyStride = 1;
      for (size_t i = rank; i-- > 0;) {
        const int64_t index = rest % q[i];
        rest /= q[i];
        keyFlat += (k[i] == 1 ? 0 : index) * keyStride;
        keyStride *= k[i];
      }
      const int64_t n = flat / dims->queryHeads, h = flat % dims->queryHeads;
      const int64_t cudnn =
          n * dims->keyHeads + h / (dims->queryHeads / dims->keyHeads);
      EXPECT_EQ(cudnn, keyFlat) << "case " << c << ", query head " << flat;
    }
  }
}

TEST(DeviceLibraries, AttentionChoiceNamesItsReason) {
  AttentionLibrary h100{true, "", 91900, 90, false};
  const std::vector<int64_t> q = {2, 12, 64, 64}, kv = {2, 12, 64, 64};
  AttentionStep step{q, kv, kv, DType::BF16, true, false};
  EXPECT_EQ(whyOwnAttention(h100, step), "");
  AttentionLibrary none{false, "", 0, 90, false};
  EXPECT_EQ(whyOwnAttention(none, step),
            "tpc was built without cuDNN (cudnn-frontend headers and "
            "libcudnn; tools/install-deps.sh fetches the headers)");
  AttentionLibrary off = h100;
  off.disabledByUser = true;
  EXPECT_EQ(whyOwnAttention(off, step), "TPC_CUDNN=0");
  AttentionLibrary missing = h100;
  missing.loadError = "libcudnn.so.9: cannot open shared object file";
  missing.version = 0;
  EXPECT_EQ(whyNoCudnnAttention(missing),
            "libcudnn not loaded (libcudnn.so.9: cannot open shared object "
            "file)");
  AttentionLibrary old = h100;
  old.version = 8907;
  EXPECT_EQ(whyNoCudnnAttention(old), "cuDNN 8907 is older than 9.0");
  AttentionLibrary turing = h100;
  turing.computeCapability = 75;
  EXPECT_EQ(whyNoCudnnAttention(turing),
            "compute capability 7.5 has no fused flash attention in cuDNN "
            "(8.0 or newer)");
  AttentionStep f32 = step;
  f32.type = DType::F32;
  EXPECT_EQ(whyOwnAttention(h100, f32),
            "f32 operands (cuDNN's fused attention takes bf16)");
  AttentionStep mixed = step;
  mixed.type = std::nullopt;
  EXPECT_EQ(whyOwnAttention(h100, mixed),
            "operands and results of different element types");
  AttentionStep cache = step;
  cache.positions = true;
  EXPECT_EQ(whyOwnAttention(h100, cache), "a KV-cache step (positions)");
  const std::vector<int64_t> odd = {2, 12, 64, 72};
  AttentionStep oddDim{odd, odd, odd, DType::BF16, true, false};
  EXPECT_EQ(whyOwnAttention(h100, oddDim), "");
  const std::vector<int64_t> ragged = {2, 12, 64, 36};
  AttentionStep raggedDim{ragged, ragged, ragged, DType::BF16, true, false};
  EXPECT_EQ(whyOwnAttention(h100, raggedDim),
            "head dim 36 is not a multiple of 8");
  const std::vector<int64_t> wide = {2, 12, 64, 192};
  AttentionStep wideDim{wide, wide, wide, DType::BF16, true, false};
  EXPECT_EQ(whyOwnAttention(h100, wideDim), "");
  AttentionLibrary a100 = h100;
  a100.computeCapability = 80;
  EXPECT_EQ(whyOwnAttention(a100, wideDim),
            "head dim 192 exceeds cuDNN's 128 on this GPU");
  const std::vector<int64_t> shortQ = {2, 12, 1, 64};
  AttentionStep decode{shortQ, kv, kv, DType::BF16, true, false};
  EXPECT_EQ(whyOwnAttention(h100, decode),
            "causal attention with 1 queries and 64 keys");
  decode.causal = false;
  EXPECT_EQ(whyOwnAttention(h100, decode), "");
}

} // namespace
} // namespace tpc::runtime::device
