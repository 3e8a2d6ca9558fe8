// Every device kernel against the CPU backend's, one step at a time through
// the Backend interface: operands uploaded, the step enqueued, results read
// back. staged-cpu runs the CPU kernels behind device-style memory, so it
// must match exactly (which checks the harness itself); cuda must match
// within each case's tolerance, and skips with the reason when no GPU is
// usable. Shapes are small and odd so that indexing mistakes show.
#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace tpc::runtime;
namespace fb = tpc::plan;

namespace {

/// How an operand is filled.
// Rows: distinct rows in [0, idBound) in a shuffled order, then -1 padding
// (a cached table's listed rows). SlotMap: a shuffled permutation of
// [0, n) (each row of a block cached in some slot).
enum class Fill {
  Normal,
  Positive,
  Ids,
  Step,
  Hyper,
  Positions,
  Rows,
  SlotMap
};

struct Operand {
  std::vector<int64_t> shape;
  Fill fill = Fill::Normal;
  int64_t idBound = 0;              // Ids, Positions: values in [0, idBound)
  fb::DType dtype = fb::DType::F32; // of a Normal or Positive fill
};

/// `operand` stored in bf16 (mixed precision's activations).
Operand bf16(Operand operand) {
  operand.dtype = fb::DType::BF16;
  return operand;
}

struct Attributes {
  bool transposeLhs = false, transposeRhs = false, causal = false,
       inverse = false, gelu = false;
  int64_t chunk = 0;
  double epsilon = 0, factor = 0, theta = 0, alpha = 1, value = 0;
  double beta1 = 0, beta2 = 0, weightDecay = 0;
  fb::Precision precision = fb::Precision::F32;
  int64_t dim = 0, ringStep = 0;
  std::vector<int64_t> ints;
};

struct KernelCase {
  std::string name;
  fb::OpKind kind;
  std::vector<Operand> operands;
  std::vector<std::vector<int64_t>> results;
  Attributes attributes;
  /// Largest |device - cpu| / (1 + |cpu|) allowed on a GPU (f32).
  float tolerance = 1e-5f;
  /// The results' dtypes; empty: all f32.
  std::vector<fb::DType> resultTypes = {};
  /// AttentionGrad: the forward's result and log-sum-exp (operands 4 and 5)
  /// computed from the query, key and value by the CPU's Attention, as a
  /// training step has them. Random ones make probabilities above 1 whose
  /// large score gradients cancel, and turn rounding-order differences of
  /// one bf16 step into large errors of small results.
  bool forwardFromOperands = false;
};

/// `c` with forwardFromOperands set.
KernelCase fromForward(KernelCase c) {
  c.forwardFromOperands = true;
  return c;
}

constexpr fb::DType kF32 = fb::DType::F32, kBf16 = fb::DType::BF16;
/// A case's result dtype.
fb::DType resultType(const KernelCase &c, size_t r) {
  return c.resultTypes.empty() ? kF32 : c.resultTypes[r];
}

std::ostream &operator<<(std::ostream &os, const KernelCase &c) {
  return os << c.name;
}

/// A standalone step of `c`'s kind and attributes (operand and result ids
/// are placeholders: the dispatch binds tensors directly).
std::vector<uint8_t> buildStep(const KernelCase &c) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<uint32_t> operandIds(c.operands.size()),
      resultIds(c.results.size());
  auto operands = b.CreateVector(operandIds);
  auto results = b.CreateVector(resultIds);
  auto ints = c.attributes.ints.empty() ? 0 : b.CreateVector(c.attributes.ints);
  const Attributes &a = c.attributes;
  fb::StepBuilder step(b);
  step.add_kind(c.kind);
  step.add_operands(operands);
  step.add_results(results);
  step.add_transpose_lhs(a.transposeLhs);
  step.add_transpose_rhs(a.transposeRhs);
  step.add_causal(a.causal);
  step.add_inverse(a.inverse);
  step.add_epsilon(a.epsilon);
  step.add_factor(a.factor);
  step.add_theta(a.theta);
  step.add_beta1(a.beta1);
  step.add_beta2(a.beta2);
  step.add_weight_decay(a.weightDecay);
  step.add_alpha(a.alpha);
  step.add_value(a.value);
  step.add_precision(a.precision);
  step.add_dim(a.dim);
  step.add_ring_step(a.ringStep);
  step.add_gelu(a.gelu);
  step.add_chunk(a.chunk);
  if (!a.ints.empty())
    step.add_ints(ints);
  b.Finish(step.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Each operand's bytes, filled deterministically.
std::vector<std::vector<uint8_t>> operandValues(const KernelCase &c) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<uint8_t>> values;
  for (const Operand &operand : c.operands) {
    const int64_t n = count(operand.shape);
    std::vector<uint8_t> bytes;
    auto put = [&](const auto &array) {
      bytes.resize(sizeof(array[0]) * array.size());
      std::memcpy(bytes.data(), array.data(), bytes.size());
    };
    switch (operand.fill) {
    case Fill::Normal:
    case Fill::Positive: {
      std::vector<float> v(static_cast<size_t>(n));
      for (float &x : v)
        x = operand.fill == Fill::Normal ? normal(random)
                                         : 0.5f + std::abs(normal(random));
      if (operand.dtype == fb::DType::BF16) {
        std::vector<uint16_t> narrow(v.size());
        narrowToBf16(v.data(), narrow.data(), n);
        put(narrow);
      } else {
        put(v);
      }
      break;
    }
    case Fill::Ids: {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (int32_t &x : v)
        x = int32_t(random() % uint32_t(operand.idBound));
      put(v);
      break;
    }
    case Fill::Rows:
    case Fill::SlotMap: {
      const int64_t bound = operand.fill == Fill::SlotMap ? n : operand.idBound;
      std::vector<int32_t> all(static_cast<size_t>(bound));
      for (size_t i = 0; i < all.size(); ++i)
        all[i] = int32_t(i);
      for (size_t i = all.size(); i > 1; --i)
        std::swap(all[i - 1], all[size_t(random() % uint32_t(i))]);
      std::vector<int32_t> v(static_cast<size_t>(n), -1);
      // Rows: three quarters listed, the rest padding.
      const size_t listed = operand.fill == Fill::SlotMap
                                ? size_t(n)
                                : std::min(all.size(), size_t(n * 3 / 4));
      std::copy(all.begin(), all.begin() + ptrdiff_t(listed), v.begin());
      put(v);
      break;
    }
    case Fill::Positions: { // [rows, T]: distinct within a row
      std::vector<int32_t> v(static_cast<size_t>(n));
      const int64_t width = operand.shape.back();
      for (int64_t i = 0; i < n; ++i)
        v[size_t(i)] =
            int32_t((7 * (i / width) + 3 * (i % width) + 1) % operand.idBound);
      put(v);
      break;
    }
    case Fill::Step:
      put(std::vector<int64_t>{7});
      break;
    case Fill::Hyper: // peak, min lr, warmup, decay steps, max norm
      put(std::vector<float>{1e-3f, 1e-4f, 5.0f, 20.0f, 1.0f});
      break;
    }
    values.push_back(std::move(bytes));
  }
  return values;
}

std::vector<std::vector<float>> runOn(Backend &backend, const KernelCase &c,
                                      std::vector<std::vector<uint8_t>> values);

/// The operands of `c`: operandValues, and for forwardFromOperands the
/// forward's results in place of operands 4 and 5.
std::vector<std::vector<uint8_t>> caseOperands(const KernelCase &c) {
  std::vector<std::vector<uint8_t>> values = operandValues(c);
  if (!c.forwardFromOperands)
    return values;
  const Operand &result = c.operands[4], &logSumExp = c.operands[5];
  KernelCase forward{c.name + " forward",
                     fb::OpKind::Attention,
                     {c.operands[1], c.operands[2], c.operands[3]},
                     {result.shape, logSumExp.shape},
                     c.attributes,
                     c.tolerance,
                     {result.dtype, kF32}};
  std::vector<std::vector<float>> computed =
      runOn(cpuBackend(), forward, {values[1], values[2], values[3]});
  auto bytesOf = [](const std::vector<float> &v, fb::DType dtype) {
    std::vector<uint8_t> bytes;
    if (dtype == kBf16) { // exact: the CPU rounded it into bf16
      std::vector<uint16_t> narrow(v.size());
      narrowToBf16(v.data(), narrow.data(), int64_t(v.size()));
      bytes.resize(narrow.size() * 2);
      std::memcpy(bytes.data(), narrow.data(), bytes.size());
    } else {
      bytes.resize(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    return bytes;
  };
  values[4] = bytesOf(computed[0], result.dtype);
  values[5] = bytesOf(computed[1], kF32);
  return values;
}

/// Runs the case on `backend` with the operands `values` and returns its
/// results. AdamW's results update operands 0, 2 and 3 in place, as the
/// plans bind them.
std::vector<std::vector<float>>
runOn(Backend &backend, const KernelCase &c,
      std::vector<std::vector<uint8_t>> values) {
  const std::vector<uint8_t> stepBytes = buildStep(c);
  const fb::Step &step = *flatbuffers::GetRoot<fb::Step>(stepBytes.data());
  const OpInfo &info = *findOpInfo(c.kind);
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<TensorBinding> operands, results;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    buffers.push_back(backend.allocate(values[i].size()));
    backend.upload(buffers.back()->data(), values[i].data(), values[i].size());
    const Operand &operand = c.operands[i];
    const bool isFloat = operand.fill == Fill::Normal ||
                         operand.fill == Fill::Positive ||
                         operand.fill == Fill::Hyper;
    operands.push_back({buffers.back()->data(), operand.shape,
                        count(operand.shape),
                        isFloat                      ? operand.dtype
                        : operand.fill == Fill::Step ? fb::DType::I64
                                                     : fb::DType::I32});
  }
  for (size_t r = 0; r < c.results.size(); ++r) {
    const int64_t n = count(c.results[r]);
    const fb::DType dtype = resultType(c, r);
    if (info.placement == ResultPlacement::UpdateInPlace) {
      results.push_back(
          {operands[info.updatedOperand[r]].data, c.results[r], n, dtype});
      continue;
    }
    // NaNs where a kernel writes nothing show up in the comparison.
    std::vector<float> poison(size_t(n),
                              std::numeric_limits<float>::quiet_NaN());
    std::vector<uint16_t> poison16(size_t(n), 0x7FC0);
    const bool narrow = dtype == kBf16;
    const size_t bytes = narrow ? poison16.size() * 2 : poison.size() * 4;
    buffers.push_back(backend.allocate(bytes));
    backend.upload(buffers.back()->data(),
                   narrow ? static_cast<const void *>(poison16.data())
                          : static_cast<const void *>(poison.data()),
                   bytes);
    results.push_back({buffers.back()->data(), c.results[r], n, dtype});
  }
  EXPECT_TRUE(backend.runsNatively(step)) << backend.name();
  // Steps that read their place in the grid see a one-rank grid (this
  // process; the integration tests run real groups).
  static GridComm oneRank({1});
  backend.enqueue({step, operands, results, &oneRank});
  backend.synchronize();
  std::vector<std::vector<float>> out;
  for (const TensorBinding &result : results) {
    out.emplace_back(size_t(result.elements));
    if (result.dtype == kBf16) {
      std::vector<uint16_t> stored(size_t(result.elements));
      backend.download(stored.data(), result.data, stored.size() * 2);
      widenBf16(stored.data(), out.back().data(), result.elements);
    } else {
      backend.download(out.back().data(), result.data,
                       out.back().size() * sizeof(float));
    }
  }
  return out;
}

/// Every element of every result within `tolerance` of the CPU's, relative
/// to 1 + |cpu|. A failure names the worst element and the result's
/// ||device - cpu|| / ||cpu||, which tells a rounding-order difference
/// (small norm error) from a wrong kernel.
void expectParity(Backend &device, const KernelCase &c, float tolerance) {
  const std::vector<std::vector<uint8_t>> values = caseOperands(c);
  std::vector<std::vector<float>> want = runOn(cpuBackend(), c, values);
  std::vector<std::vector<float>> got = runOn(device, c, values);
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    float worst = 0.0f;
    size_t worstAt = 0;
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < want[r].size(); ++i) {
      const float error =
          std::abs(got[r][i] - want[r][i]) / (1.0f + std::abs(want[r][i]));
      if (!(error <= worst)) { // NaN counts as the worst
        worst = error;
        worstAt = i;
      }
      difference += double(got[r][i] - want[r][i]) * (got[r][i] - want[r][i]);
      norm += double(want[r][i]) * want[r][i];
    }
    EXPECT_TRUE(worst <= tolerance)
        << device.name() << " result " << r << "[" << worstAt
        << "] = " << got[r][worstAt] << ", the CPU's " << want[r][worstAt]
        << " (error " << worst << ", tolerance " << tolerance
        << "); the result's norm error "
        << std::sqrt(difference / std::max(norm, 1e-300));
  }
}

using fb::OpKind;
const std::vector<KernelCase> &cases() {
  static const std::vector<KernelCase> all = [] {
    Attributes none;
    auto with = [](auto set) {
      Attributes a;
      set(a);
      return a;
    };
    std::vector<KernelCase> c = {
        {"Matmul", OpKind::Matmul, {{{5, 7}}, {{7, 3}}}, {{5, 3}}, none, 1e-4f},
        {"MatmulTransposedScaled",
         OpKind::Matmul,
         {{{7, 5}}, {{3, 7}}},
         {{5, 3}},
         with([](Attributes &a) {
           a.transposeLhs = a.transposeRhs = true;
           a.alpha = 0.5;
         }),
         1e-4f},
        // Batched: both sides (one strided GEMM), a weight shared by the
        // batch, and a broadcast inside the batch dims (grouped-query
        // attention: one product per batch element).
        {"MatmulBatched",
         OpKind::Matmul,
         {{{2, 3, 5, 7}}, {{2, 3, 7, 4}}},
         {{2, 3, 5, 4}},
         none,
         1e-4f},
        {"MatmulSharedWeight",
         OpKind::Matmul,
         {{{2, 5, 7}}, {{4, 7}}},
         {{2, 5, 4}},
         with([](Attributes &a) { a.transposeRhs = true; }),
         1e-4f},
        {"MatmulGroupedBroadcast",
         OpKind::Matmul,
         {{{2, 4, 5, 7}}, {{2, 1, 7, 3}}},
         {{2, 4, 5, 3}},
         none,
         1e-4f},
        // Mixed precision: the CPU rounds the operands and runs SGEMM; the
        // GPU's tf32 and bf16 GEMMs must land within rounding of it.
        {"MatmulTf32",
         OpKind::Matmul,
         {{{2, 5, 33}}, {{33, 6}}},
         {{2, 5, 6}},
         with([](Attributes &a) { a.precision = fb::Precision::TF32; }),
         2e-3f},
        {"MatmulBf16",
         OpKind::Matmul,
         {{{2, 5, 33}}, {{6, 33}}},
         {{2, 5, 6}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.precision = fb::Precision::BF16;
         }),
         1e-4f},
        {"AddBroadcast", OpKind::Add, {{{2, 3, 4}}, {{4}}}, {{2, 3, 4}}, none},
        {"SubBroadcastBoth",
         OpKind::Sub,
         {{{2, 1, 4}}, {{3, 1}}},
         {{2, 3, 4}},
         none},
        {"Mul", OpKind::Mul, {{{3, 4}}, {{3, 4}}}, {{3, 4}}, none},
        {"Div",
         OpKind::Div,
         {{{2, 3}}, {{1, 3}, Fill::Positive}},
         {{2, 3}},
         none},
        {"Scale", OpKind::Scale, {{{37}}}, {{37}}, with([](Attributes &a) {
           a.factor = 1.7;
         })},
        {"Gelu", OpKind::Gelu, {{{300}}}, {{300}}, none},
        {"Silu", OpKind::Silu, {{{300}}}, {{300}}, none},
        {"GeluGrad", OpKind::GeluGrad, {{{300}}, {{300}}}, {{300}}, none},
        {"SiluGrad", OpKind::SiluGrad, {{{300}}, {{300}}}, {{300}}, none},
        {"Relu", OpKind::Relu, {{{300}}}, {{300}}, none},
        {"ReluGrad", OpKind::ReluGrad, {{{300}}, {{300}}}, {{300}}, none},
        {"LayerNorm",
         OpKind::LayerNorm,
         {{{6, 33}}, {{33}}, {{33}}},
         {{6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-5; })},
        {"LayerNormGrad",
         OpKind::LayerNormGrad,
         {{{6, 33}}, {{6, 33}}, {{33}}},
         {{6, 33}, {33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         1e-4f},
        {"LayerNormGradManyRows",
         OpKind::LayerNormGrad,
         {{{300, 70}}, {{300, 70}}, {{70}}},
         {{300, 70}, {70}, {70}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         1e-4f},
        {"RmsNorm",
         OpKind::RmsNorm,
         {{{6, 33}}, {{33}}},
         {{6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-6; })},
        {"RmsNormGrad",
         OpKind::RmsNormGrad,
         {{{6, 33}}, {{6, 33}}, {{33}}},
         {{6, 33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-6; }),
         1e-4f},
        {"Softmax", OpKind::Softmax, {{{4, 300}}}, {{4, 300}}, none},
        {"SoftmaxCausal",
         OpKind::Softmax,
         {{{2, 5, 5}}},
         {{2, 5, 5}},
         with([](Attributes &a) { a.causal = true; })},
        {"SoftmaxGrad",
         OpKind::SoftmaxGrad,
         {{{4, 9}}, {{4, 9}}},
         {{4, 9}},
         none},
        // Fused attention: grouped-query heads (3 per key head), more rows
        // than a CUDA block (16) and keys than a tile (32), value features
        // unlike the key's. The GPU's online softmax sums in another order.
        {"AttentionGroupedCausal",
         OpKind::Attention,
         {{{2, 2, 3, 37, 24}}, {{2, 2, 1, 37, 24}}, {{2, 2, 1, 37, 20}}},
         {{2, 2, 3, 37, 20}, {2, 2, 3, 37}},
         with([](Attributes &a) {
           a.causal = true;
           a.alpha = 0.2;
         }),
         1e-4f},
        {"AttentionUnmasked",
         OpKind::Attention,
         {{{3, 19, 8}}, {{3, 45, 8}}, {{3, 45, 8}}},
         {{3, 19, 8}, {3, 19}},
         with([](Attributes &a) { a.alpha = 0.35; }),
         1e-4f},
        // The GPU rounds the online softmax's unnormalised probabilities,
        // the CPU the normalised ones: within bf16's precision.
        {"AttentionBf16",
         OpKind::Attention,
         {{{2, 33, 16}}, {{2, 33, 16}}, {{2, 33, 16}}},
         {{2, 33, 16}, {2, 33}},
         with([](Attributes &a) {
           a.causal = true;
           a.alpha = 0.25;
           a.precision = fb::Precision::BF16;
         }),
         1e-2f},
        // (result_grad, query, key, value, result, logsumexp): independent
        // values, which both backends use alike.
        {"AttentionGradGroupedCausal",
         OpKind::AttentionGrad,
         {{{2, 2, 3, 37, 20}},
          {{2, 2, 3, 37, 24}},
          {{2, 2, 1, 37, 24}},
          {{2, 2, 1, 37, 20}},
          {{2, 2, 3, 37, 20}},
          {{2, 2, 3, 37}, Fill::Positive}},
         {{2, 2, 3, 37, 24}, {2, 2, 1, 37, 24}, {2, 2, 1, 37, 20}},
         with([](Attributes &a) {
           a.causal = true;
           a.alpha = 0.2;
         }),
         1e-4f},
        {"AttentionGradUnmaskedTf32",
         OpKind::AttentionGrad,
         {{{3, 19, 8}},
          {{3, 19, 8}},
          {{3, 45, 8}},
          {{3, 45, 8}},
          {{3, 19, 8}},
          {{3, 19}, Fill::Positive}},
         {{3, 19, 8}, {3, 45, 8}, {3, 45, 8}},
         with([](Attributes &a) {
           a.alpha = 0.35;
           a.precision = fb::Precision::TF32;
         }),
         2e-3f},
        // A generation step: five queries of each row at their positions in
        // a cache of 37 keys, grouped heads.
        {"AttentionAtPositions",
         OpKind::Attention,
         {{{2, 2, 3, 5, 24}},
          {{2, 2, 1, 37, 24}},
          {{2, 2, 1, 37, 20}},
          {{2, 5}, Fill::Positions, 37}},
         {{2, 2, 3, 5, 20}, {2, 2, 3, 5}},
         with([](Attributes &a) { a.alpha = 0.2; }),
         1e-4f},
        {"CacheWrite",
         OpKind::CacheWrite,
         {{{2, 3, 11, 8}}, {{2, 3, 4, 8}}, {{2, 4}, Fill::Positions, 11}},
         {{2, 3, 11, 8}},
         none},
        {"Rotary",
         OpKind::Rotary,
         {{{2, 3, 6, 8}}},
         {{2, 3, 6, 8}},
         with([](Attributes &a) { a.theta = 10000.0; })},
        {"RotaryAtPositions",
         OpKind::Rotary,
         {{{2, 3, 6, 8}}, {{2, 6}, Fill::Positions, 300}},
         {{2, 3, 6, 8}},
         with([](Attributes &a) { a.theta = 10000.0; })},
        {"RotaryInverse",
         OpKind::Rotary,
         {{{2, 6, 8}}},
         {{2, 6, 8}},
         with([](Attributes &a) {
           a.theta = 500000.0;
           a.inverse = true;
         })},
        {"Reshape", OpKind::Reshape, {{{2, 3, 4}}}, {{6, 4}}, none},
        {"Transpose",
         OpKind::Transpose,
         {{{2, 3, 4, 5}}},
         {{2, 4, 3, 5}},
         with([](Attributes &a) {
           a.ints = {0, 2, 1, 3};
         })},
        {"Transpose2d",
         OpKind::Transpose,
         {{{3, 4}}},
         {{4, 3}},
         with([](Attributes &a) {
           a.ints = {1, 0};
         })},
        {"Slice", OpKind::Slice, {{{5, 6}}}, {{3, 3}}, with([](Attributes &a) {
           a.ints = {1, 2};
         })},
        {"Pad", OpKind::Pad, {{{3, 3}}}, {{5, 6}}, with([](Attributes &a) {
           a.ints = {1, 2};
         })},
        {"ReduceSum",
         OpKind::ReduceSum,
         {{{2, 3, 4}}},
         {{3}},
         with([](Attributes &a) {
           a.ints = {0, 2};
         })},
        {"ReduceMean",
         OpKind::ReduceMean,
         {{{2, 3, 4}}},
         {{2, 3}},
         with([](Attributes &a) { a.ints = {2}; })},
        // Many terms per output, outputs not a multiple of the GPU's tile
        // of 32: a bias gradient's shape (tiled), and a contiguous inner
        // reduction (a warp per output) over two dims.
        {"ReduceSumTiled",
         OpKind::ReduceSum,
         {{{300, 70}}},
         {{70}},
         with([](Attributes &a) { a.ints = {0}; })},
        {"ReduceMeanContiguous",
         OpKind::ReduceMean,
         {{{5, 7, 40}}},
         {{5}},
         with([](Attributes &a) {
           a.ints = {1, 2};
         })},
        {"ReduceSumStrided",
         OpKind::ReduceSum,
         {{{6, 50, 3}}},
         {{50}},
         with([](Attributes &a) {
           a.ints = {0, 2};
         })},
        {"LocalSplit",
         OpKind::LocalSplit,
         {{{4, 6}}},
         {{4, 6}},
         with([](Attributes &a) {
           a.ints = {0};
           a.dim = 1;
         })},
        {"RingSlice",
         OpKind::RingSlice,
         {{{3, 5}}},
         {{3, 5}},
         with([](Attributes &a) {
           a.ints = {0};
           a.ringStep = 1;
         })},
        {"RingInsert",
         OpKind::RingInsert,
         {{{3, 5}}, {{3, 5}}},
         {{3, 5}},
         with([](Attributes &a) {
           a.ints = {0};
           a.dim = 1;
         })},
        {"Constant", OpKind::Constant, {}, {{7}}, with([](Attributes &a) {
           a.value = 0.25;
         })},
        {"Embedding",
         OpKind::Embedding,
         {{{11, 6}}, {{2, 5}, Fill::Ids, 11}},
         {{2, 5, 6}},
         none},
        // Vocabulary-parallel over a one-rank grid: block 0 of 1.
        {"EmbeddingVocabBlock",
         OpKind::Embedding,
         {{{11, 6}}, {{2, 5}, Fill::Ids, 11}},
         {{2, 5, 6}},
         with([](Attributes &a) { a.ints = {0}; })},
        {"EmbeddingGrad",
         OpKind::EmbeddingGrad,
         {{{2, 5, 6}}, {{2, 5}, Fill::Ids, 4}},
         {{11, 6}},
         none},
        // A cached table: the block's 11 rows in shuffled cache slots, read
        // and scattered through the slot map.
        {"EmbeddingCached",
         OpKind::Embedding,
         {{{11, 6}}, {{2, 5}, Fill::Ids, 11}, {{11}, Fill::SlotMap}},
         {{2, 5, 6}},
         with([](Attributes &a) { a.ints = {0}; })},
        {"EmbeddingGradCached",
         OpKind::EmbeddingGrad,
         {{{2, 5, 6}}, {{2, 5}, Fill::Ids, 11}, {{11}, Fill::SlotMap}},
         {{11, 6}},
         none},
        {"CrossEntropy",
         OpKind::CrossEntropy,
         {{{6, 13}}, {{6}, Fill::Ids, 13}},
         {{}},
         none},
        {"CrossEntropyGrad",
         OpKind::CrossEntropyGrad,
         {{{6, 13}}, {{6}, Fill::Ids, 13}, {{}, Fill::Positive}},
         {{6, 13}},
         none},
        {"NormSquared", OpKind::NormSquared, {{{1000}}}, {{}}, none},
        {"LrSchedule",
         OpKind::LrSchedule,
         {{{}, Fill::Step}, {{5}, Fill::Hyper}},
         {{}},
         none},
        {"ClipScale",
         OpKind::ClipScale,
         {{{}, Fill::Positive}, {{5}, Fill::Hyper}},
         {{}},
         none},
        {"AdamW",
         OpKind::AdamW,
         {{{50}},
          {{50}},
          {{50}},
          {{50}, Fill::Positive},
          {{}, Fill::Positive},
          {{}, Fill::Step},
          {{}, Fill::Positive}},
         {{50}, {50}, {50}},
         with([](Attributes &a) {
           a.beta1 = 0.8;
           a.beta2 = 0.95;
           a.epsilon = 1e-6;
           a.weightDecay = 0.05;
         })},
        {"NormSquaredRows",
         OpKind::NormSquaredRows,
         {{{9, 70}}, {{8}, Fill::Rows, 9}},
         {{}},
         none},
        {"AdamWRows",
         OpKind::AdamWRows,
         {{{9, 40}},
          {{9, 40}},
          {{9, 40}},
          {{9, 40}, Fill::Positive},
          {{8}, Fill::Rows, 9},
          {{}, Fill::Positive},
          {{}, Fill::Step},
          {{}, Fill::Positive}},
         {{9, 40}, {9, 40}, {9, 40}},
         with([](Attributes &a) {
           a.beta1 = 0.85;
           a.beta2 = 0.99;
           a.epsilon = 1e-7;
           a.weightDecay = 0.1;
         })},
        // Fused elementwise chains (tp-fuse-elementwise).
        {"Swiglu", OpKind::Swiglu, {{{300}}, {{300}}}, {{300}}, none},
        {"SwigluGrad",
         OpKind::SwigluGrad,
         {{{2, 150}}, {{2, 150}}, {{2, 150}}},
         {{2, 150}, {2, 150}},
         none},
        {"AddLayerNorm",
         OpKind::AddLayerNorm,
         {{{6, 33}}, {{6, 33}}, {{33}}, {{33}}},
         {{6, 33}, {6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-5; })},
        {"AddRmsNorm",
         OpKind::AddRmsNorm,
         {{{6, 33}}, {{6, 33}}, {{33}}},
         {{6, 33}, {6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-6; })},
        // A norm gradient adding the residual stream's gradient.
        {"LayerNormGradResidual",
         OpKind::LayerNormGrad,
         {{{6, 33}}, {{6, 33}}, {{33}}, {{6, 33}}},
         {{6, 33}, {33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         1e-4f},
        {"RmsNormGradResidual",
         OpKind::RmsNormGrad,
         {{{6, 33}}, {{6, 33}}, {{33}}, {{6, 33}}},
         {{6, 33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-6; }),
         1e-4f},
        {"SwigluBf16",
         OpKind::Swiglu,
         {bf16({{300}}), bf16({{300}})},
         {{300}},
         none,
         8e-3f,
         {kBf16}},
        {"AddRmsNormBf16",
         OpKind::AddRmsNorm,
         {bf16({{6, 33}}), bf16({{6, 33}}), {{33}}},
         {{6, 33}, {6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-6; }),
         8e-3f,
         {kBf16, kBf16}},
        // Products fused with their epilogues (tp-fuse-products).
        {"LinearGelu",
         OpKind::Linear,
         {{{2, 5, 33}}, {{7, 33}}, {{7}}},
         {{2, 5, 7}, {2, 5, 7}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.gelu = true;
         }),
         1e-4f},
        {"LinearGeluInPlace",
         OpKind::Linear,
         {{{9, 33}}, {{33, 7}}, {{7}}},
         {{9, 7}},
         with([](Attributes &a) { a.gelu = true; }),
         1e-4f},
        {"LinearBias",
         OpKind::Linear,
         {{{9, 33}}, {{33, 7}}, {{7}}},
         {{9, 7}},
         none,
         1e-4f},
        {"LinearGeluGrad",
         OpKind::LinearGeluGrad,
         {{{2, 5, 33}}, {{7, 33}}, {{2, 5, 7}}},
         {{2, 5, 7}, {7}},
         with([](Attributes &a) { a.transposeRhs = true; }),
         1e-4f},
        // bf16 storage: cuBLASLt's bias, GELU (keeping the preactivation)
        // and GELU-gradient epilogues on the stored operands; an f32 bias
        // gradient of bf16 activations is summed apart.
        {"LinearGeluBf16",
         OpKind::Linear,
         {bf16({{2, 5, 32}}), bf16({{16, 32}}), bf16({{16}})},
         {{2, 5, 16}, {2, 5, 16}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.gelu = true;
         }),
         8e-3f,
         {kBf16, kBf16}},
        {"LinearBiasBf16",
         OpKind::Linear,
         {bf16({{9, 32}}), bf16({{32, 24}}), bf16({{24}})},
         {{9, 24}},
         none,
         8e-3f,
         {kBf16}},
        {"LinearGeluGradBf16",
         OpKind::LinearGeluGrad,
         {bf16({{2, 5, 32}}), bf16({{16, 32}}), bf16({{2, 5, 16}})},
         {{2, 5, 16}, {16}},
         with([](Attributes &a) { a.transposeRhs = true; }),
         1e-2f,
         {kBf16, kBf16}},
        {"LinearGeluGradBf16IntoF32",
         OpKind::LinearGeluGrad,
         {bf16({{3, 150, 32}}), bf16({{32, 24}}), bf16({{3, 150, 24}})},
         {{3, 150, 24}, {24}},
         none,
         1e-2f,
         {kBf16, kF32}},
        // Chunks of 16 columns over 45 (a short last chunk), the weight
        // [vocab, hidden] (tied embeddings) and [hidden, vocab].
        {"LinearCrossEntropy",
         OpKind::LinearCrossEntropy,
         {{{2, 7, 24}}, {{45, 24}}, {{2, 7}, Fill::Ids, 45}},
         {{}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.chunk = 16;
         }),
         1e-4f},
        {"LinearCrossEntropyGrad",
         OpKind::LinearCrossEntropyGrad,
         {{{2, 7, 24}},
          {{24, 45}},
          {{2, 7}, Fill::Ids, 45},
          {{}, Fill::Positive}},
         {{2, 7, 24}, {24, 45}},
         with([](Attributes &a) { a.chunk = 16; }),
         1e-4f},
        {"LinearCrossEntropyGradTied",
         OpKind::LinearCrossEntropyGrad,
         {{{14, 24}}, {{45, 24}}, {{14}, Fill::Ids, 45}, {{}, Fill::Positive}},
         {{14, 24}, {45, 24}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.chunk = 16;
         }),
         1e-4f},
        // bf16 storage: the products on the stored operands, the chunk's
        // logits and gradient rounded to bf16 as stored ones would be, the
        // weight gradient f32.
        {"LinearCrossEntropyBf16",
         OpKind::LinearCrossEntropy,
         {bf16({{2, 7, 24}}), bf16({{45, 24}}), {{2, 7}, Fill::Ids, 45}},
         {{}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.chunk = 16;
         }),
         1e-3f,
         {kF32}},
        {"LinearCrossEntropyGradBf16",
         OpKind::LinearCrossEntropyGrad,
         {bf16({{2, 7, 24}}),
          bf16({{24, 45}}),
          {{2, 7}, Fill::Ids, 45},
          {{}, Fill::Positive}},
         {{2, 7, 24}, {24, 45}},
         with([](Attributes &a) { a.chunk = 16; }),
         1e-2f,
         {kBf16, kF32}},
        {"LinearCrossEntropyGradTiedBf16",
         OpKind::LinearCrossEntropyGrad,
         {bf16({{14, 24}}),
          bf16({{45, 24}}),
          {{14}, Fill::Ids, 45},
          {{}, Fill::Positive}},
         {{14, 24}, {45, 24}},
         with([](Attributes &a) {
           a.transposeRhs = true;
           a.chunk = 16;
         }),
         1e-2f,
         {kBf16, kF32}},
        // Mixed precision (plan 1.10): bf16 activations, each kernel
        // computing in f32 and rounding its results once. A GPU's f32
        // arithmetic may land on the other side of a rounding boundary:
        // one bf16 step (2^-8) of tolerance.
        {"ConvertToBf16",
         OpKind::Convert,
         {{{3, 77}}},
         {{3, 77}},
         none,
         0.0f,
         {kBf16}},
        {"ConvertToF32",
         OpKind::Convert,
         {bf16({{3, 77}})},
         {{3, 77}},
         none,
         0.0f,
         {kF32}},
        {"MatmulBf16Storage",
         OpKind::Matmul,
         {bf16({{2, 5, 33}}), bf16({{6, 33}})},
         {{2, 5, 6}},
         with([](Attributes &a) { a.transposeRhs = true; }),
         8e-3f,
         {kBf16}},
        // A weight gradient: bf16 operands accumulating into f32.
        {"MatmulBf16IntoF32",
         OpKind::Matmul,
         {bf16({{40, 9}}), bf16({{40, 7}})},
         {{9, 7}},
         with([](Attributes &a) { a.transposeLhs = true; }),
         1e-4f,
         {kF32}},
        {"AddBf16",
         OpKind::Add,
         {bf16({{2, 3, 4}}), bf16({{4}})},
         {{2, 3, 4}},
         none,
         8e-3f,
         {kBf16}},
        // Same shapes: 16 bytes per tensor at a time (8 bf16), then the
        // 4 left over.
        {"AddSameShapesBf16",
         OpKind::Add,
         {bf16({{3, 100}}), bf16({{3, 100}})},
         {{3, 100}},
         none,
         8e-3f,
         {kBf16}},
        {"ScaleBf16",
         OpKind::Scale,
         {bf16({{301}})},
         {{301}},
         with([](Attributes &a) { a.factor = -0.37; }),
         8e-3f,
         {kBf16}},
        {"SwigluGradBf16",
         OpKind::SwigluGrad,
         {bf16({{2, 150}}), bf16({{2, 150}}), bf16({{2, 150}})},
         {{2, 150}, {2, 150}},
         none,
         8e-3f,
         {kBf16, kBf16}},
        {"GeluBf16",
         OpKind::Gelu,
         {bf16({{300}})},
         {{300}},
         none,
         8e-3f,
         {kBf16}},
        {"ReluBf16",
         OpKind::Relu,
         {bf16({{300}})},
         {{300}},
         none,
         0.0f,
         {kBf16}},
        {"SiluGradBf16",
         OpKind::SiluGrad,
         {bf16({{300}}), bf16({{300}})},
         {{300}},
         none,
         8e-3f,
         {kBf16}},
        // Gains and biases are f32 masters, read as stored.
        {"LayerNormBf16",
         OpKind::LayerNorm,
         {bf16({{6, 33}}), {{33}}, {{33}}},
         {{6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         8e-3f,
         {kBf16}},
        {"LayerNormGradBf16",
         OpKind::LayerNormGrad,
         {bf16({{6, 33}}), bf16({{6, 33}}), {{33}}},
         {{6, 33}, {33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         8e-3f,
         {kBf16, kF32, kF32}},
        // The fused forms on bf16 storage: the residual sum then the norm;
        // the norm's gradient plus the residual stream's.
        {"AddLayerNormBf16",
         OpKind::AddLayerNorm,
         {bf16({{6, 33}}), bf16({{6, 33}}), {{33}}, {{33}}},
         {{6, 33}, {6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-5; }),
         8e-3f,
         {kBf16, kBf16}},
        {"RmsNormGradResidualBf16",
         OpKind::RmsNormGrad,
         {bf16({{6, 33}}), bf16({{6, 33}}), {{33}}, bf16({{6, 33}})},
         {{6, 33}, {33}},
         with([](Attributes &a) { a.epsilon = 1e-6; }),
         8e-3f,
         {kBf16, kF32}},
        {"RmsNormBf16",
         OpKind::RmsNorm,
         {bf16({{6, 33}}), {{33}}},
         {{6, 33}},
         with([](Attributes &a) { a.epsilon = 1e-6; }),
         8e-3f,
         {kBf16}},
        {"SoftmaxCausalBf16",
         OpKind::Softmax,
         {bf16({{2, 5, 5}})},
         {{2, 5, 5}},
         with([](Attributes &a) { a.causal = true; }),
         8e-3f,
         {kBf16}},
        // bf16 operands: the probabilities are rounded to bf16 before they
        // multiply the values, as flash attention does; the log-sum-exp is
        // f32.
        {"AttentionBf16Storage",
         OpKind::Attention,
         {bf16({{2, 2, 3, 37, 24}}), bf16({{2, 2, 1, 37, 24}}),
          bf16({{2, 2, 1, 37, 20}})},
         {{2, 2, 3, 37, 20}, {2, 2, 3, 37}},
         with([](Attributes &a) {
           a.causal = true;
           a.alpha = 0.2;
         }),
         1e-2f,
         {kBf16, kF32}},
        // Head dim 12 (not a multiple of 8): tpc's own kernels.
        fromForward({"AttentionGradBf16Storage",
                     OpKind::AttentionGrad,
                     {bf16({{3, 19, 12}}),
                      bf16({{3, 19, 12}}),
                      bf16({{3, 19, 12}}),
                      bf16({{3, 19, 12}}),
                      bf16({{3, 19, 12}}),
                      {{3, 19}, Fill::Positive}},
                     {{3, 19, 12}, {3, 19, 12}, {3, 19, 12}},
                     with([](Attributes &a) {
                       a.causal = true;
                       a.alpha = 0.35;
                     }),
                     2e-2f,
                     {kBf16, kBf16, kBf16}}),
        // Head dims cuDNN's fused attention takes (multiples of 8):
        // grouped-query heads forward, the gradient with its key heads
        // summed over their group.
        {"AttentionBf16Cudnn",
         OpKind::Attention,
         {bf16({{2, 2, 3, 37, 32}}), bf16({{2, 2, 1, 37, 32}}),
          bf16({{2, 2, 1, 37, 32}})},
         {{2, 2, 3, 37, 32}, {2, 2, 3, 37}},
         with([](Attributes &a) {
           a.causal = true;
           a.alpha = 0.2;
         }),
         1e-2f,
         {kBf16, kF32}},
        fromForward({"AttentionGradBf16Cudnn",
                     OpKind::AttentionGrad,
                     {bf16({{2, 2, 2, 19, 16}}),
                      bf16({{2, 2, 2, 19, 16}}),
                      bf16({{2, 2, 1, 19, 16}}),
                      bf16({{2, 2, 1, 19, 16}}),
                      bf16({{2, 2, 2, 19, 16}}),
                      {{2, 2, 2, 19}, Fill::Positive}},
                     {{2, 2, 2, 19, 16}, {2, 2, 1, 19, 16}, {2, 2, 1, 19, 16}},
                     with([](Attributes &a) {
                       a.causal = true;
                       a.alpha = 0.25;
                     }),
                     2e-2f,
                     {kBf16, kBf16, kBf16}}),
        {"RotaryBf16",
         OpKind::Rotary,
         {bf16({{2, 3, 6, 8}})},
         {{2, 3, 6, 8}},
         with([](Attributes &a) { a.theta = 10000.0; }),
         8e-3f,
         {kBf16}},
        {"CacheWriteBf16",
         OpKind::CacheWrite,
         {bf16({{2, 3, 11, 8}}),
          bf16({{2, 3, 4, 8}}),
          {{2, 4}, Fill::Positions, 11}},
         {{2, 3, 11, 8}},
         none,
         0.0f,
         {kBf16}},
        {"TransposeBf16",
         OpKind::Transpose,
         {bf16({{2, 3, 5}})},
         {{5, 2, 3}},
         with([](Attributes &a) {
           a.ints = {2, 0, 1};
         }),
         0.0f,
         {kBf16}},
        {"SliceBf16",
         OpKind::Slice,
         {bf16({{5, 6}})},
         {{3, 3}},
         with([](Attributes &a) {
           a.ints = {1, 2};
         }),
         0.0f,
         {kBf16}},
        {"PadBf16",
         OpKind::Pad,
         {bf16({{3, 3}})},
         {{5, 6}},
         with([](Attributes &a) {
           a.ints = {1, 2};
         }),
         0.0f,
         {kBf16}},
        {"ReshapeBf16",
         OpKind::Reshape,
         {bf16({{2, 3, 4}})},
         {{6, 4}},
         none,
         0.0f,
         {kBf16}},
        // A bias gradient: a sum of bf16 rows kept in f32.
        {"ReduceSumBf16IntoF32",
         OpKind::ReduceSum,
         {bf16({{6, 5, 7}})},
         {{7}},
         with([](Attributes &a) {
           a.ints = {0, 1};
         }),
         1e-4f,
         {kF32}},
        {"EmbeddingBf16",
         OpKind::Embedding,
         {{{11, 6}}, {{2, 5}, Fill::Ids, 11}},
         {{2, 5, 6}},
         none,
         0.0f,
         {kBf16}},
        {"EmbeddingGradBf16",
         OpKind::EmbeddingGrad,
         {bf16({{2, 5, 6}}), {{2, 5}, Fill::Ids, 4}},
         {{11, 6}},
         none,
         1e-5f,
         {kF32}},
        {"CrossEntropyBf16",
         OpKind::CrossEntropy,
         {bf16({{6, 13}}), {{6}, Fill::Ids, 13}},
         {{}},
         none},
        {"CrossEntropyGradBf16",
         OpKind::CrossEntropyGrad,
         {bf16({{6, 13}}), {{6}, Fill::Ids, 13}, {{}, Fill::Positive}},
         {{6, 13}},
         none,
         8e-3f,
         {kBf16}},
    };
    return c;
  }();
  return all;
}

class KernelParity : public testing::TestWithParam<KernelCase> {};

TEST_P(KernelParity, StagedCpuMatchesExactly) {
  expectParity(stagedTestBackend(), GetParam(), 0.0f);
}

TEST_P(KernelParity, CudaMatchesWithinTolerance) {
  Backend *cuda = nullptr;
  try {
    cuda = &deviceBackend("cuda");
  } catch (const std::invalid_argument &unavailable) {
    GTEST_SKIP() << unavailable.what();
  }
  expectParity(*cuda, GetParam(), GetParam().tolerance);
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelParity, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<KernelCase> &info) {
                           return info.param.name;
                         });

const KernelCase &caseNamed(const std::string &name) {
  for (const KernelCase &c : cases())
    if (c.name == name)
      return c;
  throw std::invalid_argument("no kernel case " + name);
}

// Mixed precision's definition, which the CUDA backend's row sum follows:
// the bias gradient of a bf16 dz is the f32 sum of dz as stored (rounded),
// not of the values before rounding.
TEST(CpuKernels, LinearGeluGradSumsTheStoredBf16Gradient) {
  for (const char *name : {"LinearGeluGradBf16IntoF32", "LinearGeluGradBf16"}) {
    const KernelCase &c = caseNamed(name);
    std::vector<std::vector<float>> got =
        runOn(cpuBackend(), c, caseOperands(c));
    const int64_t n = c.results[1].back();
    const int64_t rows = count(c.results[0]) / n;
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < rows; ++i)
        sum += got[0][size_t(i * n + j)];
      // A bf16 result may round the other way from an f32 sum in another
      // order: one bf16 step.
      const bool narrow = resultType(c, 1) == kBf16;
      const double want = narrow ? bf16ToF32(f32ToBF16(float(sum))) : sum;
      EXPECT_NEAR(got[1][size_t(j)], want,
                  (narrow ? 0x1p-8 : 1e-5) * (1.0 + std::abs(want)))
          << name << " column " << j;
    }
  }
}

TEST(OpTable, SaysWhichStepsExchangeData) {
  // Vocabulary-parallel embeddings read only their rows' place; the loss
  // and split norms exchange statistics; a device without its own transport
  // stages exactly the exchanging steps.
  auto step = [](OpKind kind, std::vector<int64_t> ints) {
    KernelCase c{"", kind, {}, {}, {}};
    c.attributes.ints = std::move(ints);
    return buildStep(c);
  };
  struct Expect {
    OpKind kind;
    std::vector<int64_t> ints;
    bool usesGrid, exchanges;
  };
  for (const Expect &e : std::vector<Expect>{
           {OpKind::Embedding, {}, false, false},
           {OpKind::Embedding, {0}, true, false},
           {OpKind::EmbeddingGrad, {1}, true, false},
           {OpKind::CrossEntropy, {}, false, false},
           {OpKind::CrossEntropy, {0}, true, true},
           {OpKind::LayerNorm, {1}, true, true},
           {OpKind::RingSlice, {0}, true, false},
           {OpKind::AllReduce, {0}, true, true},
           {OpKind::Attention, {}, false, false},
       }) {
    const std::vector<uint8_t> bytes = step(e.kind, e.ints);
    const fb::Step &s = *flatbuffers::GetRoot<fb::Step>(bytes.data());
    EXPECT_EQ(stepUsesGrid(s), e.usesGrid) << fb::EnumNameOpKind(e.kind);
    EXPECT_EQ(stepExchanges(s), e.exchanges) << fb::EnumNameOpKind(e.kind);
    EXPECT_EQ(stagedTestBackend().runsNatively(s), !e.exchanges)
        << fb::EnumNameOpKind(e.kind);
  }
}

TEST(KernelParity, CoversEveryKindThatExchangesNoData) {
  for (const OpInfo &info : opTable()) {
    if (info.grid == GridUse::Always)
      continue;
    bool covered = false;
    for (const KernelCase &c : cases())
      covered |= c.kind == info.kind;
    EXPECT_TRUE(covered) << "no parity case for " << opKindName(info.kind);
  }
}

} // namespace
