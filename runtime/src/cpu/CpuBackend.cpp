// The CPU backend: host memory, and one kernel per plan op kind that unpacks
// a dispatch into a call of cpu/Kernels.h (or, for collectives, into
// GridComm exchanges around local relayouts).

#include "tpc/runtime/Backend.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/OpShapes.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/cpu/Kernels.h"

#include "../CollectiveLayout.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

using plan::OpKind;

namespace {

//===----------------------------------------------------------------------===//
// Host buffers
//===----------------------------------------------------------------------===//

class HostBuffer final : public Buffer {
public:
  explicit HostBuffer(uint64_t bytes)
      : bytes(bytes),
        memory(static_cast<std::byte *>(std::aligned_alloc(
            64, std::max<uint64_t>((bytes + 63) / 64 * 64, 64)))) {
    if (!memory)
      throw std::runtime_error("cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory");
  }
  ~HostBuffer() override { std::free(memory); }
  HostBuffer(const HostBuffer &) = delete;
  HostBuffer &operator=(const HostBuffer &) = delete;

  std::byte *data() override { return memory; }
  uint64_t size() const override { return bytes; }

private:
  uint64_t bytes;
  std::byte *memory;
};

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// The rows of a tensor seen as [rows, last dim].
int64_t rowsOf(const TensorBinding &t) {
  return t.shape.empty() || t.shape.back() == 0 ? 0
                                                : t.elements / t.shape.back();
}

/// Per-token {max, sum of exps, target logit} of this rank's `vocab` logit
/// columns, all-gathered over the step's vocabulary axes: [blocks, tokens, 3]
/// in block order.
std::vector<float> gatheredCrossEntropyStats(const Dispatch &d,
                                             const VocabBlock &block,
                                             int64_t tokens, int64_t vocab) {
  std::vector<float> stats(size_t(3 * tokens)),
      gathered(size_t(3 * tokens * block.blocks));
  cpu::crossEntropyBlockStats(d.operands[0].f32(), tokens, vocab, block.first,
                              block.blocks * vocab, d.operands[1].i32(),
                              stats.data());
  channelOf(d).allGather(groupAxes(d), WireType::F32, stats.data(),
                         gathered.data(), stats.size());
  return gathered;
}

/// A cached table's lookups (operand 2, the slot map): each id in the
/// rank's block becomes the slot caching its row, every other id the index
/// just past the cache, which the kernels treat as another rank's row. The
/// kernels then run on the cache exactly as on the table.
std::vector<int32_t> cacheSlotIds(const Dispatch &d, const TensorBinding &ids,
                                  int64_t cacheRows) {
  const TensorBinding &map = d.operands[2];
  const int64_t blockRows = map.shape[0];
  const VocabBlock block = vocabBlock(d, blockRows);
  const int64_t vocab = block.blocks * blockRows;
  const int32_t *id = ids.i32(), *slotOf = map.i32();
  std::vector<int32_t> slots(size_t(ids.elements));
  for (int64_t t = 0; t < ids.elements; ++t) {
    if (id[t] < 0 || id[t] >= vocab)
      throw std::runtime_error("embedding: id " + std::to_string(id[t]) +
                               " is outside the vocabulary of " +
                               std::to_string(vocab));
    const int64_t row = int64_t(id[t]) - block.first;
    if (row < 0 || row >= blockRows) {
      slots[size_t(t)] = int32_t(cacheRows);
      continue;
    }
    const int32_t slot = slotOf[row];
    if (slot < 0 || slot >= cacheRows)
      throw std::runtime_error(
          "embedding: row " + std::to_string(id[t]) +
          " is not in the cache (slot " + std::to_string(slot) +
          "); the runtime fetches a batch's rows before its step");
    slots[size_t(t)] = slot;
  }
  return slots;
}

void embedding(const Dispatch &d) {
  const TensorBinding &table = d.operands[0], &ids = d.operands[1];
  if (d.operands.size() > 2) {
    const int64_t cacheRows = table.shape[0];
    const std::vector<int32_t> slots = cacheSlotIds(d, ids, cacheRows);
    cpu::embeddingBlock(table.f32(), 0, cacheRows, cacheRows + 1,
                        table.shape[1], slots.data(), ids.elements,
                        d.results[0].f32());
    return;
  }
  VocabBlock block = vocabBlock(d, table.shape[0]);
  cpu::embeddingBlock(table.f32(), block.first, table.shape[0],
                      block.blocks * table.shape[0], table.shape[1], ids.i32(),
                      ids.elements, d.results[0].f32());
}

/// Mixed precision: the operands of a step's products are rounded, the
/// products run in f32 (the reference for a GPU's tf32 and bf16 GEMMs).
/// Widened bf16 operands are bf16 values already; rounding them again keeps
/// them, and rounds what a bf16 kernel rounds inside (attention's
/// probabilities).
cpu::Rounding roundingOf(const Dispatch &d) {
  if (d.bf16Products)
    return cpu::Rounding::BF16;
  switch (d.step.precision()) {
  case plan::Precision::F32:
    return cpu::Rounding::None;
  case plan::Precision::TF32:
    return cpu::Rounding::TF32;
  case plan::Precision::BF16:
    return cpu::Rounding::BF16;
  }
  throw std::runtime_error("unknown matmul precision");
}

void matmul(const Dispatch &d) {
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1];
  const float *l = lhs.f32(), *r = rhs.f32();
  std::vector<float> rounded;
  if (const cpu::Rounding rounding = roundingOf(d);
      rounding != cpu::Rounding::None) {
    rounded.resize(size_t(lhs.elements + rhs.elements));
    cpu::round(rounding, l, rounded.data(), lhs.elements);
    cpu::round(rounding, r, rounded.data() + lhs.elements, rhs.elements);
    l = rounded.data();
    r = rounded.data() + lhs.elements;
  }
  cpu::matmul(l, lhs.shape, d.step.transpose_lhs(), r, rhs.shape,
              d.step.transpose_rhs(), d.results[0].f32(), d.results[0].shape,
              /*accumulate=*/false, static_cast<float>(d.step.alpha()));
}

template <cpu::BinaryKind kKind> void binary(const Dispatch &d) {
  cpu::binary(kKind, d.operands[0].f32(), d.operands[0].shape,
              d.operands[1].f32(), d.operands[1].shape, d.results[0].f32(),
              d.results[0].shape);
}

void scale(const Dispatch &d) {
  cpu::scale(d.operands[0].f32(), static_cast<float>(d.step.factor()),
             d.results[0].f32(), d.results[0].elements);
}

void gelu(const Dispatch &d) {
  cpu::gelu(d.operands[0].f32(), d.results[0].f32(), d.results[0].elements);
}

void silu(const Dispatch &d) {
  cpu::silu(d.operands[0].f32(), d.results[0].f32(), d.results[0].elements);
}

void relu(const Dispatch &d) {
  cpu::relu(d.operands[0].f32(), d.results[0].f32(), d.results[0].elements);
}

void swiglu(const Dispatch &d) {
  cpu::swiglu(d.operands[0].f32(), d.operands[1].f32(), d.results[0].f32(),
              d.results[0].elements);
}

void swigluGrad(const Dispatch &d) {
  cpu::swigluGrad(d.operands[0].f32(), d.operands[1].f32(), d.operands[2].f32(),
                  d.results[0].f32(), d.results[1].f32(),
                  d.results[0].elements);
}

/// For a normalisation whose step names grid axes (its features split over
/// them): all-gathers per-row statistics over those axes.
cpu::RowGather featureGather(const Dispatch &d) {
  if (!d.comm)
    throw std::runtime_error("a feature-split normalisation needs a "
                             "communicator");
  std::vector<int> axes(d.ints().begin(), d.ints().end());
  int64_t blocks = 1;
  for (int axis : axes)
    blocks *= d.comm->shape()[axis];
  return [&d, axes, blocks](const std::vector<float> &local, int64_t) {
    std::vector<float> gathered(local.size() * size_t(blocks));
    channelOf(d).allGather(axes, WireType::F32, local.data(), gathered.data(),
                           local.size());
    return gathered;
  };
}

void layerNorm(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    return cpu::layerNormSplit(d.operands[0].f32(), d.operands[1].f32(),
                               d.operands[2].f32(), out.f32(), rowsOf(out),
                               out.shape.back(), epsilon, featureGather(d));
  cpu::layerNorm(d.operands[0].f32(), d.operands[1].f32(), d.operands[2].f32(),
                 out.f32(), rowsOf(out), out.shape.back(), epsilon);
}

void rmsNorm(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    return cpu::rmsNormSplit(d.operands[0].f32(), d.operands[1].f32(),
                             out.f32(), rowsOf(out), out.shape.back(), epsilon,
                             featureGather(d));
  cpu::rmsNorm(d.operands[0].f32(), d.operands[1].f32(), out.f32(), rowsOf(out),
               out.shape.back(), epsilon);
}

/// The residual add of AddLayerNorm and AddRmsNorm: sum = input + residual.
void residualSum(const Dispatch &d) {
  const TensorBinding &sum = d.results[0];
  cpu::binary(cpu::BinaryKind::Add, d.operands[0].f32(), d.operands[0].shape,
              d.operands[1].f32(), d.operands[1].shape, sum.f32(), sum.shape);
}

/// The norm of `sum`, as the standalone kernels run it (split features
/// included): AddLayerNorm and AddRmsNorm are the add and the norm.
void addLayerNorm(const Dispatch &d) {
  residualSum(d);
  const TensorBinding &sum = d.results[0], &out = d.results[1];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    return cpu::layerNormSplit(sum.f32(), d.operands[2].f32(),
                               d.operands[3].f32(), out.f32(), rowsOf(out),
                               out.shape.back(), epsilon, featureGather(d));
  cpu::layerNorm(sum.f32(), d.operands[2].f32(), d.operands[3].f32(), out.f32(),
                 rowsOf(out), out.shape.back(), epsilon);
}

void addRmsNorm(const Dispatch &d) {
  residualSum(d);
  const TensorBinding &sum = d.results[0], &out = d.results[1];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    return cpu::rmsNormSplit(sum.f32(), d.operands[2].f32(), out.f32(),
                             rowsOf(out), out.shape.back(), epsilon,
                             featureGather(d));
  cpu::rmsNorm(sum.f32(), d.operands[2].f32(), out.f32(), rowsOf(out),
               out.shape.back(), epsilon);
}

/// A norm gradient's optional residual_grad (operand 3) added to its
/// input gradient: the residual stream's gradient, in place.
void addResidualGrad(const Dispatch &d) {
  if (d.operands.size() < 4)
    return;
  const TensorBinding &inputGrad = d.results[0];
  cpu::binary(cpu::BinaryKind::Add, inputGrad.f32(), inputGrad.shape,
              d.operands[3].f32(), d.operands[3].shape, inputGrad.f32(),
              inputGrad.shape);
}

void softmax(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  cpu::softmax(d.operands[0].f32(), out.f32(), rowsOf(out), out.shape.back(),
               d.step.causal());
}

/// The sizes of an Attention or AttentionGrad step.
cpu::AttentionShape attentionShape(const Dispatch &d) {
  const size_t first = attentionQueryOperand(d.step.kind());
  const AttentionSizes sizes =
      attentionSizes(d.operands[first].shape, d.operands[first + 1].shape,
                     d.operands[first + 2].shape);
  cpu::AttentionShape s;
  s.batch = sizes.batch;
  s.keyBatch = sizes.keyBatch;
  s.queries = sizes.queries;
  s.keys = sizes.keys;
  s.headDim = sizes.headDim;
  s.valueDim = sizes.valueDim;
  s.causal = d.step.causal();
  s.alpha = static_cast<float>(d.step.alpha());
  s.rounding = roundingOf(d);
  // Attention's optional positions (its gradient takes none).
  if (first == 0 && d.operands.size() == 4) {
    s.positions = d.operands[3].i32();
    s.positionRows = d.operands[3].shape[0];
  }
  return s;
}

void attention(const Dispatch &d) {
  cpu::attention(d.operands[0].f32(), d.operands[1].f32(), d.operands[2].f32(),
                 attentionShape(d), d.results[0].f32(), d.results[1].f32());
}

void attentionGrad(const Dispatch &d) {
  cpu::attentionGrad(d.operands[0].f32(), d.operands[1].f32(),
                     d.operands[2].f32(), d.operands[3].f32(),
                     d.operands[4].f32(), d.operands[5].f32(),
                     attentionShape(d), d.results[0].f32(), d.results[1].f32(),
                     d.results[2].f32());
}

void rotary(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  int64_t dim = out.shape.back(), seq = out.shape[out.shape.size() - 2];
  int64_t outer = seq * dim ? out.elements / (seq * dim) : 0;
  if (d.operands.size() == 2)
    cpu::rotaryAt(d.operands[0].f32(), out.f32(), outer, seq, dim,
                  d.step.theta(), d.step.inverse(), d.operands[1].i32(),
                  d.operands[1].shape[0]);
  else
    cpu::rotary(d.operands[0].f32(), out.f32(), outer, seq, dim, d.step.theta(),
                d.step.inverse());
}

/// An AliasOperand result the plan placed elsewhere starts as a copy.
void copyIfMoved(const TensorBinding &operand, const TensorBinding &result) {
  if (result.data != operand.data)
    std::memmove(result.data, operand.data, size_t(result.bytes()));
}

//===----------------------------------------------------------------------===//
// Kernels that move elements without arithmetic run on f32 and bf16 tensors
// alike (the loader checked that result and operand share the dtype).
//===----------------------------------------------------------------------===//

/// The tensor's elements as T: float for f32, uint16_t (bits) for bf16.
template <typename T> T *elementsOf(const TensorBinding &t) {
  return reinterpret_cast<T *>(t.data);
}
template <typename T> std::span<T> spanOf(const TensorBinding &t) {
  return {elementsOf<T>(t), size_t(t.elements)};
}

/// Instantiates `kernel<T>` for the element type of the step's operand 0.
template <template <typename> class Kernel>
void byElementType(const Dispatch &d) {
  if (d.operands[0].dtype == plan::DType::BF16)
    Kernel<uint16_t>::run(d);
  else
    Kernel<float>::run(d);
}

void cacheWrite(const Dispatch &d) {
  const TensorBinding &cache = d.results[0], &update = d.operands[1],
                      &positions = d.operands[2];
  copyIfMoved(d.operands[0], cache);
  const int64_t dim = cache.shape.back(),
                cacheRows = cache.shape[cache.shape.size() - 2],
                rows = update.shape[update.shape.size() - 2];
  cpu::cacheWrite(cache.data, update.data,
                  cacheRows * dim ? cache.elements / (cacheRows * dim) : 0,
                  cacheRows, rows, dim, size_t(dtypeSize(cache.dtype)),
                  positions.i32(), positions.shape[0]);
}

void reshape(const Dispatch &d) {
  // A view: nothing to do when the result aliases its operand.
  copyIfMoved(d.operands[0], d.results[0]);
}

template <typename T> struct Transpose {
  static void run(const Dispatch &d) {
    cpu::transpose(elementsOf<T>(d.operands[0]), d.operands[0].shape, d.ints(),
                   elementsOf<T>(d.results[0]));
  }
};

template <typename T> struct Slice {
  static void run(const Dispatch &d) {
    cpu::slice(elementsOf<T>(d.operands[0]), d.operands[0].shape, d.ints(),
               elementsOf<T>(d.results[0]), d.results[0].shape);
  }
};

/// Slice on f32, bf16 or (1.12) a block of token ids.
void slice(const Dispatch &d) {
  if (d.operands[0].dtype == plan::DType::I32)
    return Slice<int32_t>::run(d);
  byElementType<Slice>(d);
}

template <typename T> struct Pad {
  static void run(const Dispatch &d) {
    cpu::pad(elementsOf<T>(d.operands[0]), d.operands[0].shape, d.ints(),
             elementsOf<T>(d.results[0]), d.results[0].shape);
  }
};

/// f32 <-> bf16, rounding to nearest even; the same type is a copy.
void convert(const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  if (in.dtype == out.dtype)
    return copyIfMoved(in, out);
  if (out.dtype == plan::DType::BF16)
    narrowToBf16(in.f32(), out.bf16(), out.elements);
  else
    widenBf16(in.bf16(), out.f32(), out.elements);
}

template <bool kMean> void reduce(const Dispatch &d) {
  cpu::reduce(d.operands[0].f32(), d.operands[0].shape, d.ints(), kMean,
              d.results[0].f32());
}

void constant(const Dispatch &d) {
  cpu::fill(static_cast<float>(d.step.value()), d.results[0].f32(),
            d.results[0].elements);
}

void crossEntropy(const Dispatch &d) {
  const TensorBinding &logits = d.operands[0];
  int64_t vocab = logits.shape.back();
  int64_t tokens = vocab ? logits.elements / vocab : 0;
  if (d.ints().empty()) {
    *d.results[0].f32() =
        cpu::crossEntropy(logits.f32(), tokens, vocab, d.operands[1].i32());
    return;
  }
  // Vocabulary-parallel: every block's statistics, combined alike on every
  // rank.
  VocabBlock block = vocabBlock(d, vocab);
  std::vector<float> stats = gatheredCrossEntropyStats(d, block, tokens, vocab);
  *d.results[0].f32() =
      cpu::crossEntropyFromBlockStats(stats.data(), block.blocks, tokens);
}

void embeddingGrad(const Dispatch &d) {
  const TensorBinding &table = d.results[0], &ids = d.operands[1];
  if (d.operands.size() > 2) {
    const int64_t cacheRows = table.shape[0];
    const std::vector<int32_t> slots = cacheSlotIds(d, ids, cacheRows);
    cpu::embeddingGradBlock(d.operands[0].f32(), slots.data(), ids.elements, 0,
                            cacheRows, cacheRows + 1, table.shape[1],
                            table.f32());
    return;
  }
  VocabBlock block = vocabBlock(d, table.shape[0]);
  cpu::embeddingGradBlock(
      d.operands[0].f32(), ids.i32(), ids.elements, block.first, table.shape[0],
      block.blocks * table.shape[0], table.shape[1], table.f32());
}

void geluGrad(const Dispatch &d) {
  cpu::geluGrad(d.operands[0].f32(), d.operands[1].f32(), d.results[0].f32(),
                d.results[0].elements);
}

void siluGrad(const Dispatch &d) {
  cpu::siluGrad(d.operands[0].f32(), d.operands[1].f32(), d.results[0].f32(),
                d.results[0].elements);
}

void reluGrad(const Dispatch &d) {
  cpu::reluGrad(d.operands[0].f32(), d.operands[1].f32(), d.results[0].f32(),
                d.results[0].elements);
}

void layerNormGrad(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    cpu::layerNormGradSplit(d.operands[0].f32(), d.operands[1].f32(),
                            d.operands[2].f32(), out.f32(), d.results[1].f32(),
                            d.results[2].f32(), rowsOf(out), out.shape.back(),
                            epsilon, featureGather(d));
  else
    cpu::layerNormGrad(d.operands[0].f32(), d.operands[1].f32(),
                       d.operands[2].f32(), out.f32(), d.results[1].f32(),
                       d.results[2].f32(), rowsOf(out), out.shape.back(),
                       epsilon);
  addResidualGrad(d);
}

void rmsNormGrad(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  float epsilon = static_cast<float>(d.step.epsilon());
  if (!d.ints().empty())
    cpu::rmsNormGradSplit(d.operands[0].f32(), d.operands[1].f32(),
                          d.operands[2].f32(), out.f32(), d.results[1].f32(),
                          rowsOf(out), out.shape.back(), epsilon,
                          featureGather(d));
  else
    cpu::rmsNormGrad(d.operands[0].f32(), d.operands[1].f32(),
                     d.operands[2].f32(), out.f32(), d.results[1].f32(),
                     rowsOf(out), out.shape.back(), epsilon);
  addResidualGrad(d);
}

void softmaxGrad(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  cpu::softmaxGrad(d.operands[0].f32(), d.operands[1].f32(), out.f32(),
                   rowsOf(out), out.shape.back());
}

void crossEntropyGrad(const Dispatch &d) {
  const TensorBinding &logits = d.operands[0], &out = d.results[0];
  const float lossGrad = *d.operands[2].f32();
  int64_t vocab = out.shape.back(), tokens = rowsOf(out);
  if (d.ints().empty()) {
    cpu::crossEntropyGrad(logits.f32(), d.operands[1].i32(), lossGrad, tokens,
                          vocab, out.f32());
    return;
  }
  // Vocabulary-parallel: the loss step's statistics, then the softmax of
  // this rank's columns.
  VocabBlock block = vocabBlock(d, vocab);
  std::vector<float> stats = gatheredCrossEntropyStats(d, block, tokens, vocab);
  cpu::crossEntropyGradFromBlockStats(logits.f32(), d.operands[1].i32(),
                                      lossGrad, tokens, vocab, block.first,
                                      stats.data(), block.blocks, out.f32());
}

bool hasBf16(std::span<const TensorBinding> tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const auto &t) {
    return t.dtype == plan::DType::BF16;
  });
}

/// Runs an f32 kernel on a step with bf16 tensors: bf16 operands widened
/// (exactly) to f32 copies, the kernel, then each bf16 result rounded once
/// from its f32 copy. This is mixed precision's definition of every such
/// kind (compute in f32, store rounded), which a GPU's bf16 kernels match.
void runWidened(Kernel kernel, const Dispatch &d) {
  std::array<TensorBinding, kMaxStepOperands> operands;
  std::array<TensorBinding, kMaxStepResults> results;
  std::vector<std::vector<float>> copies;
  copies.reserve(kMaxStepOperands + kMaxStepResults);
  auto widened = [&](const TensorBinding &t) {
    std::vector<float> &copy = copies.emplace_back(size_t(t.elements));
    return TensorBinding{reinterpret_cast<std::byte *>(copy.data()), t.shape,
                         t.elements, plan::DType::F32};
  };
  for (size_t i = 0; i < d.operands.size(); ++i) {
    operands[i] = d.operands[i];
    if (d.operands[i].dtype == plan::DType::BF16) {
      operands[i] = widened(d.operands[i]);
      widenBf16(d.operands[i].bf16(), operands[i].f32(), operands[i].elements);
    }
  }
  for (size_t i = 0; i < d.results.size(); ++i)
    results[i] = d.results[i].dtype == plan::DType::BF16 ? widened(d.results[i])
                                                         : d.results[i];
  kernel({d.step,
          {operands.data(), d.operands.size()},
          {results.data(), d.results.size()},
          d.comm,
          d.bf16Products || hasBf16(d.operands),
          d.channel});
  for (size_t i = 0; i < d.results.size(); ++i)
    if (d.results[i].dtype == plan::DType::BF16)
      narrowToBf16(results[i].f32(), d.results[i].bf16(),
                   d.results[i].elements);
}

//===----------------------------------------------------------------------===//
// Products fused with what follows them: each computes its unfused ops'
// float operations (Linear and LinearGeluGrad are bit-identical to them on
// f32; the chunked heads combine their softmax statistics per chunk).
//===----------------------------------------------------------------------===//

/// Linear: the product into the preactivation (the result when it is not
/// returned), the bias added in place, then GELU into the result.
void linear(const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &w = d.operands[1];
  const TensorBinding &pre = d.results.back();
  const float *l = in.f32(), *r = w.f32();
  std::vector<float> rounded;
  if (const cpu::Rounding rounding = roundingOf(d);
      rounding != cpu::Rounding::None) {
    rounded.resize(size_t(in.elements + w.elements));
    cpu::round(rounding, l, rounded.data(), in.elements);
    cpu::round(rounding, r, rounded.data() + in.elements, w.elements);
    l = rounded.data();
    r = rounded.data() + in.elements;
  }
  cpu::matmul(l, in.shape, false, r, w.shape, d.step.transpose_rhs(), pre.f32(),
              pre.shape);
  cpu::binary(cpu::BinaryKind::Add, pre.f32(), pre.shape, d.operands[2].f32(),
              d.operands[2].shape, pre.f32(), pre.shape);
  if (d.step.gelu())
    cpu::gelu(pre.f32(), d.results[0].f32(), d.results[0].elements);
}

/// LinearGeluGrad's first result: the product, then GELU's gradient in place.
void linearGeluGradInput(const Dispatch &d) {
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1],
                      &dz = d.results[0];
  const float *l = lhs.f32(), *r = rhs.f32();
  std::vector<float> rounded;
  if (const cpu::Rounding rounding = roundingOf(d);
      rounding != cpu::Rounding::None) {
    rounded.resize(size_t(lhs.elements + rhs.elements));
    cpu::round(rounding, l, rounded.data(), lhs.elements);
    cpu::round(rounding, r, rounded.data() + lhs.elements, rhs.elements);
    l = rounded.data();
    r = rounded.data() + lhs.elements;
  }
  cpu::matmul(l, lhs.shape, false, r, rhs.shape, d.step.transpose_rhs(),
              dz.f32(), dz.shape);
  cpu::geluGrad(dz.f32(), d.operands[2].f32(), dz.f32(), dz.elements);
}

/// `values` (shaped like `dz`) summed over every dim but the last.
void sumBiasGrad(const float *values, const TensorBinding &dz, float *out) {
  std::vector<int64_t> rows(dz.shape.size() - 1);
  std::iota(rows.begin(), rows.end(), 0);
  cpu::reduce(values, dz.shape, rows, /*mean=*/false, out);
}

/// LinearGeluGrad: dz (the product, GELU's gradient in place) rounded once
/// into its storage, and the bias gradient summed in f32 over dz as stored,
/// rounded once if it is bf16. The sum reads the stored dz as the CUDA
/// backend's row sum does.
void linearGeluGrad(const Dispatch &d) {
  const TensorBinding &dz = d.results[0], &db = d.results[1];
  if (!hasBf16(d.operands) && !hasBf16(d.results)) {
    linearGeluGradInput(d);
    sumBiasGrad(dz.f32(), dz, db.f32());
    return;
  }
  runWidened(linearGeluGradInput, {d.step, d.operands, d.results.first(1),
                                   d.comm, d.bf16Products, d.channel});
  std::vector<float> stored, sum;
  const float *values = dz.f32();
  if (dz.dtype == plan::DType::BF16) {
    stored.resize(size_t(dz.elements));
    widenBf16(dz.bf16(), stored.data(), dz.elements);
    values = stored.data();
  }
  if (db.dtype != plan::DType::BF16)
    return sumBiasGrad(values, dz, db.f32());
  sum.resize(size_t(db.elements));
  sumBiasGrad(values, dz, sum.data());
  narrowToBf16(sum.data(), db.bf16(), db.elements);
}

/// A chunked vocabulary head: the input as [tokens, hidden], the weight
/// [hidden, vocab] or ([vocab, hidden]) transposed, this rank's block of the
/// vocabulary, and scratch for one chunk's logits and weight columns.
class ChunkedHead {
public:
  explicit ChunkedHead(const Dispatch &d)
      : d(d), input(d.operands[0].f32()), weight(d.operands[1].f32()),
        targets(d.operands[2].i32()), transposed(d.step.transpose_rhs()),
        hidden(d.operands[0].shape.back()),
        tokens(hidden ? d.operands[0].elements / hidden : 0),
        vocab(d.operands[1].shape[transposed ? 0 : 1]),
        chunk(std::min<int64_t>(d.step.chunk(), std::max<int64_t>(vocab, 1))),
        block(vocabBlock(d, vocab)), logits(size_t(tokens * chunk)) {
    if (!transposed)
      columns.resize(size_t(hidden * chunk));
    // Mixed precision on f32 tensors: the products' operands rounded once.
    if (const cpu::Rounding rounding = roundingOf(d);
        rounding != cpu::Rounding::None && !d.bf16Products) {
      const int64_t in = d.operands[0].elements, w = d.operands[1].elements;
      rounded.resize(size_t(in + w));
      cpu::round(rounding, input, rounded.data(), in);
      cpu::round(rounding, weight, rounded.data() + in, w);
      input = rounded.data();
      weight = rounded.data() + in;
    }
  }

  int64_t chunks() const { return (vocab + chunk - 1) / chunk; }
  int64_t width(int64_t c) const { return std::min(chunk, vocab - c * chunk); }
  /// The global vocabulary index of chunk c's first column.
  int64_t firstColumn(int64_t c) const { return block.first + c * chunk; }

  /// Chunk c's weight as [width, hidden] (transposed) or [hidden, width],
  /// and the shape to multiply it with.
  std::pair<const float *, std::vector<int64_t>> weightChunk(int64_t c) {
    const int64_t w = width(c);
    if (transposed)
      return {weight + c * chunk * hidden, {w, hidden}};
    const std::vector<int64_t> whole = {hidden, vocab}, part = {hidden, w},
                               offsets = {0, c * chunk};
    cpu::slice(weight, whole, offsets, columns.data(), part);
    return {columns.data(), part};
  }

  /// Chunk c's logits [tokens, width] in `logits`, rounded to bf16 when the
  /// activations are (as a stored logits tensor would be).
  void computeLogits(int64_t c) {
    auto [w, shape] = weightChunk(c);
    const std::vector<int64_t> in = {tokens, hidden}, out = {tokens, width(c)};
    cpu::matmul(input, in, false, w, shape, transposed, logits.data(), out);
    if (d.bf16Products)
      cpu::round(cpu::Rounding::BF16, logits.data(), logits.data(),
                 tokens * width(c));
  }

  /// Every token's {max, sum of exps, target logit} over this rank's
  /// columns, all-gathered over the step's vocabulary axes: [blocks, tokens,
  /// 3] in block order, as the unfused cross-entropy gathers them.
  std::vector<float> gatheredStats() {
    std::vector<float> chunkStats(size_t(3 * tokens * chunks()));
    for (int64_t c = 0; c < chunks(); ++c) {
      computeLogits(c);
      cpu::crossEntropyBlockStats(logits.data(), tokens, width(c),
                                  firstColumn(c), block.blocks * vocab, targets,
                                  chunkStats.data() + 3 * tokens * c);
    }
    std::vector<float> stats(size_t(3 * tokens));
    cpu::mergeCrossEntropyStats(chunkStats.data(), chunks(), tokens,
                                stats.data());
    if (d.ints().empty())
      return stats;
    std::vector<float> gathered(stats.size() * size_t(block.blocks));
    channelOf(d).allGather(groupAxes(d), WireType::F32, stats.data(),
                           gathered.data(), stats.size());
    return gathered;
  }

  const Dispatch &d;
  const float *input, *weight;
  const int32_t *targets;
  const bool transposed;
  const int64_t hidden, tokens, vocab, chunk;
  const VocabBlock block;
  std::vector<float> logits, columns, rounded;
};

void linearCrossEntropy(const Dispatch &d) {
  ChunkedHead head(d);
  std::vector<float> stats = head.gatheredStats();
  *d.results[0].f32() = cpu::crossEntropyFromBlockStats(
      stats.data(), head.block.blocks, head.tokens);
}

/// Each chunk's logits gradient from the gathered statistics, then its
/// share of the input gradient (accumulated over the chunks) and its
/// columns of the weight gradient.
void linearCrossEntropyGrad(const Dispatch &d) {
  ChunkedHead head(d);
  std::vector<float> stats = head.gatheredStats();
  const float lossGrad = *d.operands[3].f32();
  float *inputGrad = d.results[0].f32(), *weightGrad = d.results[1].f32();
  cpu::fill(0.0f, inputGrad, d.results[0].elements);
  const std::vector<int64_t> in = {head.tokens, head.hidden};
  std::vector<float> columnGrad;
  for (int64_t c = 0; c < head.chunks(); ++c) {
    const int64_t w = head.width(c);
    head.computeLogits(c);
    float *grad = head.logits.data();
    cpu::crossEntropyGradFromBlockStats(grad, head.targets, lossGrad,
                                        head.tokens, w, head.firstColumn(c),
                                        stats.data(), head.block.blocks, grad);
    if (d.bf16Products) // as a stored bf16 logits gradient
      cpu::round(cpu::Rounding::BF16, grad, grad, head.tokens * w);
    auto [weight, shape] = head.weightChunk(c);
    const std::vector<int64_t> chunkGrad = {head.tokens, w};
    // input_grad += grad op(weight)^T
    cpu::matmul(grad, chunkGrad, false, weight, shape, !head.transposed,
                inputGrad, in, /*accumulate=*/true);
    if (head.transposed) {
      // Rows c * chunk.. of weight_grad [vocab, hidden]: grad^T input.
      const std::vector<int64_t> rows = {w, head.hidden};
      cpu::matmul(grad, chunkGrad, true, head.input, in, false,
                  weightGrad + c * head.chunk * head.hidden, rows);
      continue;
    }
    // Columns of weight_grad [hidden, vocab]: input^T grad.
    const std::vector<int64_t> part = {head.hidden, w},
                               whole = {head.hidden, head.vocab},
                               offsets = {0, c * head.chunk};
    columnGrad.resize(size_t(head.hidden * w));
    cpu::matmul(head.input, in, true, grad, chunkGrad, false, columnGrad.data(),
                part);
    cpu::insert(columnGrad.data(), part, offsets, weightGrad, whole);
  }
}

void normSquared(const Dispatch &d) {
  *d.results[0].f32() =
      cpu::normSquared(d.operands[0].f32(), d.operands[0].elements);
}

/// The rows list of a cached table's step, each entry a row of `of` or -1.
void checkRowsList(const TensorBinding &rows, const TensorBinding &of,
                   const char *what) {
  const int32_t *row = rows.i32();
  for (int64_t i = 0; i < rows.elements; ++i)
    if (row[i] < -1 || row[i] >= of.shape[0])
      throw std::runtime_error(std::string(what) + ": listed row " +
                               std::to_string(row[i]) + " is outside the " +
                               std::to_string(of.shape[0]) + " rows");
}

void normSquaredRows(const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &rows = d.operands[1];
  checkRowsList(rows, in, "norm_squared_rows");
  *d.results[0].f32() = cpu::normSquaredRows(in.f32(), rows.i32(),
                                             rows.elements, in.rowElements());
}

void adamwRows(const Dispatch &d) {
  const auto &in = d.operands;
  const plan::Step &s = d.step;
  checkRowsList(in[4], in[0], "adamw_rows");
  // In place: the rows not listed keep their values.
  for (size_t r = 0; r < 3; ++r)
    copyIfMoved(in[r == 0 ? 0 : r + 1], d.results[r]);
  cpu::adamwRows(d.results[0].f32(), in[1].f32(), d.results[1].f32(),
                 d.results[2].f32(), in[4].i32(), in[4].elements,
                 in[0].rowElements(), *in[5].f32(), in[6].i64Scalar(),
                 *in[7].f32(), s.beta1(), s.beta2(), s.epsilon(),
                 s.weight_decay());
}

void lrSchedule(const Dispatch &d) {
  const float *h = d.operands[1].f32();
  *d.results[0].f32() =
      cpu::learningRate(d.operands[0].i64Scalar(), h[0], h[1], h[2], h[3]);
}

void clipScale(const Dispatch &d) {
  *d.results[0].f32() =
      cpu::clipScale(*d.operands[0].f32(), d.operands[1].f32()[4]);
}

void adamw(const Dispatch &d) {
  const auto &in = d.operands;
  const plan::Step &s = d.step;
  cpu::adamw(in[0].f32(), in[1].f32(), in[2].f32(), in[3].f32(), *in[4].f32(),
             in[5].i64Scalar(), *in[6].f32(), s.beta1(), s.beta2(), s.epsilon(),
             s.weight_decay(), d.results[0].f32(), d.results[1].f32(),
             d.results[2].f32(), d.results[0].elements);
}

//===----------------------------------------------------------------------===//
// Collectives on local shards. Group rank k holds shard k of the split
// dimension (the grid axes are listed major to minor, as GridComm orders its
// groups), so gathers and scatters reorder blocks around the contiguous
// buffers MPI exchanges with transposes of reshaped views.
//===----------------------------------------------------------------------===//

template <typename T> struct AllReduce {
  static void run(const Dispatch &d) {
    const TensorBinding &in = d.operands[0], &out = d.results[0];
    copyIfMoved(in, out);
    channelOf(d).allReduceSum(groupAxes(d), wireOf<T>(), out.data,
                              size_t(out.elements));
  }
};

template <typename T> struct AllGather {
  static void run(const Dispatch &d) {
    // Gathered as [n, outer, s, inner]; the result is [outer, n, s, inner].
    GridComm &comm = commOf(d);
    std::vector<int> axes = groupAxes(d);
    const TensorBinding &in = d.operands[0];
    const int64_t n = comm.group(axes).size;
    auto [outer, size, inner] = around(in.shape, d.step.dim());
    std::vector<T> gathered(size_t(n * in.elements));
    channelOf(d).allGather(axes, wireOf<T>(), in.data, gathered.data(),
                           size_t(in.elements));
    std::vector<int64_t> view = {n, outer, size, inner};
    cpu::transpose(gathered.data(), view, kSwap01, elementsOf<T>(d.results[0]));
  }
};

template <typename T> struct ReduceScatter {
  static void run(const Dispatch &d) {
    // The input [outer, n, s, inner] as [n, outer, s, inner] blocks.
    GridComm &comm = commOf(d);
    std::vector<int> axes = groupAxes(d);
    const TensorBinding &in = d.operands[0], &out = d.results[0];
    const int64_t n = comm.group(axes).size;
    auto [outer, size, inner] = around(in.shape, d.step.dim());
    std::vector<int64_t> view = {outer, n, size / n, inner};
    std::vector<T> blocks(size_t(in.elements));
    cpu::transpose(elementsOf<T>(in), view, kSwap01, blocks.data());
    channelOf(d).reduceScatterSum(axes, wireOf<T>(), blocks.data(), out.data,
                                  size_t(out.elements));
  }
};

template <typename T> struct LocalSplit {
  static void run(const Dispatch &d) {
    const TensorBinding &in = d.operands[0], &out = d.results[0];
    cpu::slice(elementsOf<T>(in), in.shape,
               groupBlockOffsets(d, in.shape, out.shape[d.step.dim()]),
               elementsOf<T>(out), out.shape);
  }
};

template <typename T> struct AllToAll {
  static void run(const Dispatch &d) {
    GridComm &comm = commOf(d);
    std::vector<int> axes = groupAxes(d);
    const TensorBinding &in = d.operands[0];
    const AllToAllLayout layout = allToAllLayout(
        in.shape, comm.group(axes).size, d.step.dim(), d.step.target_dim());
    std::vector<T> send(size_t(in.elements)), received(size_t(in.elements));
    cpu::transpose(elementsOf<T>(in), layout.chunked, layout.toFront,
                   send.data());
    channelOf(d).allToAll(axes, wireOf<T>(), send.data(), received.data(),
                          send.size());
    cpu::transpose(received.data(), layout.received, layout.fromFront,
                   elementsOf<T>(d.results[0]));
  }
};

//===----------------------------------------------------------------------===//
// Ring steps of collective matmuls: a shift starts here and completes in its
// wait, so the kernels queued between them overlap the transfer.
//===----------------------------------------------------------------------===//

template <typename T> struct RingShiftStart {
  static void run(const Dispatch &d) {
    if (d.operands[0].elements != d.results[0].elements)
      throw std::invalid_argument("ring shift: the blocks differ in size");
    channelOf(d).startShift(groupAxes(d), wireOf<T>(), d.operands[0].data,
                            d.results[0].data, size_t(d.operands[0].elements));
  }
};

void ringShiftWait(const Dispatch &d) {
  const TensorBinding &received = d.operands[0], &out = d.results[0];
  channelOf(d).finishShift(received.data);
  copyIfMoved(received, out);
}

//===----------------------------------------------------------------------===//
// Pipeline transfers: a start posts the message, its wait completes it; the
// steps in between overlap it.
//===----------------------------------------------------------------------===//

int transferAxis(const Dispatch &d) { return int(d.ints()[0]); }

template <typename T> struct SendStart {
  static void run(const Dispatch &d) {
    channelOf(d).startSend(transferAxis(d), d.step.peer(), int(d.step.tag()),
                           wireOf<T>(), d.operands[0].data,
                           size_t(d.operands[0].elements));
  }
};

void recvStart(const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  channelOf(d).startReceive(transferAxis(d), d.step.peer(), int(d.step.tag()),
                            out.dtype == plan::DType::BF16 ? WireType::BF16
                                                           : WireType::F32,
                            out.data, size_t(out.elements));
}

/// SendWait (input) and RecvWait (received) -> result in its storage.
void transferWait(const Dispatch &d) {
  channelOf(d).finishTransfer(d.operands[0].data);
  if (!d.results.empty())
    copyIfMoved(d.operands[0], d.results[0]);
}

template <typename T> struct RingSlice {
  static void run(const Dispatch &d) {
    const TensorBinding &in = d.operands[0], &out = d.results[0];
    cpu::slice(elementsOf<T>(in), in.shape,
               groupBlockOffsets(d, in.shape, out.shape[d.step.dim()],
                                 d.step.ring_step()),
               elementsOf<T>(out), out.shape);
  }
};

template <typename T> struct RingInsert {
  static void run(const Dispatch &d) {
    // The result is the destination's storage (operand 0), updated in
    // place.
    const TensorBinding &block = d.operands[1], &out = d.results[0];
    copyIfMoved(d.operands[0], out);
    cpu::insert(elementsOf<T>(block), block.shape,
                groupBlockOffsets(d, out.shape, block.shape[d.step.dim()],
                                  d.step.ring_step()),
                elementsOf<T>(out), out.shape);
  }
};

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

/// A kind's kernel, and whether it runs on bf16 tensors itself; the others
/// run on f32 copies of them (CpuBackend::enqueue).
struct KernelEntry {
  Kernel kernel = nullptr;
  bool bf16 = false;
};
using KernelTable = KernelRegistry<KernelEntry>;

/// The CPU backend's kernels: every kind of the op table.
void addCpuKernels(KernelTable &k) {
  auto set = [&](OpKind kind, Kernel kernel) { k.add(kind, {kernel}); };
  auto setBf16 = [&](OpKind kind, Kernel kernel) {
    k.add(kind, {kernel, true});
  };
  set(OpKind::Embedding, embedding);
  set(OpKind::EmbeddingGrad, embeddingGrad);
  set(OpKind::Matmul, matmul);
  set(OpKind::Add, binary<cpu::BinaryKind::Add>);
  set(OpKind::Sub, binary<cpu::BinaryKind::Sub>);
  set(OpKind::Mul, binary<cpu::BinaryKind::Mul>);
  set(OpKind::Div, binary<cpu::BinaryKind::Div>);
  set(OpKind::Scale, scale);
  set(OpKind::Gelu, gelu);
  set(OpKind::Silu, silu);
  set(OpKind::GeluGrad, geluGrad);
  set(OpKind::SiluGrad, siluGrad);
  set(OpKind::LayerNorm, layerNorm);
  set(OpKind::LayerNormGrad, layerNormGrad);
  set(OpKind::RmsNorm, rmsNorm);
  set(OpKind::RmsNormGrad, rmsNormGrad);
  set(OpKind::Swiglu, swiglu);
  set(OpKind::SwigluGrad, swigluGrad);
  set(OpKind::AddLayerNorm, addLayerNorm);
  set(OpKind::AddRmsNorm, addRmsNorm);
  set(OpKind::Linear, linear);
  setBf16(OpKind::LinearGeluGrad, linearGeluGrad);
  set(OpKind::LinearCrossEntropy, linearCrossEntropy);
  set(OpKind::LinearCrossEntropyGrad, linearCrossEntropyGrad);
  set(OpKind::Softmax, softmax);
  set(OpKind::SoftmaxGrad, softmaxGrad);
  set(OpKind::Attention, attention);
  set(OpKind::AttentionGrad, attentionGrad);
  set(OpKind::Rotary, rotary);
  set(OpKind::ReduceSum, reduce<false>);
  set(OpKind::ReduceMean, reduce<true>);
  set(OpKind::CrossEntropy, crossEntropy);
  set(OpKind::CrossEntropyGrad, crossEntropyGrad);
  set(OpKind::AdamW, adamw);
  set(OpKind::Constant, constant);
  set(OpKind::NormSquared, normSquared);
  set(OpKind::NormSquaredRows, normSquaredRows);
  set(OpKind::AdamWRows, adamwRows);
  set(OpKind::Relu, relu);
  set(OpKind::ReluGrad, reluGrad);
  set(OpKind::LrSchedule, lrSchedule);
  set(OpKind::ClipScale, clipScale);
  // Element movers, collectives and the conversion itself.
  setBf16(OpKind::CacheWrite, cacheWrite);
  setBf16(OpKind::Reshape, reshape);
  setBf16(OpKind::Transpose, byElementType<Transpose>);
  setBf16(OpKind::Slice, slice);
  setBf16(OpKind::Pad, byElementType<Pad>);
  setBf16(OpKind::Convert, convert);
  setBf16(OpKind::AllReduce, byElementType<AllReduce>);
  setBf16(OpKind::AllGather, byElementType<AllGather>);
  setBf16(OpKind::ReduceScatter, byElementType<ReduceScatter>);
  setBf16(OpKind::AllToAll, byElementType<AllToAll>);
  setBf16(OpKind::LocalSplit, byElementType<LocalSplit>);
  setBf16(OpKind::RingShiftStart, byElementType<RingShiftStart>);
  setBf16(OpKind::RingShiftWait, ringShiftWait);
  setBf16(OpKind::RingSlice, byElementType<RingSlice>);
  setBf16(OpKind::RingInsert, byElementType<RingInsert>);
  setBf16(OpKind::SendStart, byElementType<SendStart>);
  setBf16(OpKind::SendWait, transferWait);
  setBf16(OpKind::RecvStart, recvStart);
  setBf16(OpKind::RecvWait, transferWait);
}

KernelTable makeCpuKernels() {
  KernelTable kernels("cpu");
  addCpuKernels(kernels);
  // Every kind the loader accepts must run here.
  kernels.checkComplete();
  return kernels;
}

} // namespace

std::vector<OpKind> cpuKernelsMissing() {
  KernelTable kernels("cpu");
  addCpuKernels(kernels);
  return kernels.missing();
}

namespace {

class CpuBackend final : public Backend {
public:
  std::string_view name() const override { return "cpu"; }
  bool hostVisible() const override { return true; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }
  void upload(std::byte *device, const void *host, uint64_t bytes) override {
    std::memcpy(device, host, bytes);
  }
  void download(void *host, const std::byte *device, uint64_t bytes) override {
    std::memcpy(host, device, bytes);
  }
  bool runsNatively(const plan::Step &) const override { return true; }
  void enqueue(const Dispatch &dispatch) override {
    const KernelEntry &entry = kernels[dispatch.step.kind()];
    if (entry.bf16 ||
        (!hasBf16(dispatch.operands) && !hasBf16(dispatch.results)))
      return entry.kernel(dispatch);
    runWidened(entry.kernel, dispatch);
  }
  // Kernels run as they are queued.
  void synchronize() override {}

private:
  const KernelTable kernels = makeCpuKernels();
};

} // namespace

Backend &cpuBackend() {
  static CpuBackend backend;
  return backend;
}

} // namespace tpc::runtime
