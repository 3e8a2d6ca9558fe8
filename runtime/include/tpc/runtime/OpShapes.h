// The sizes of the ops whose operand shapes need decoding (products,
// attention), decoded in one place: OpTable's checks, the CPU and the CUDA
// backends and the device libraries' keys all read them from here.
#pragma once

#include "tpc/runtime/Plan.h"

#include <cstdint>
#include <span>

namespace tpc::runtime {

/// A product lhs [b..., M, K] x rhs [b'..., K', N] (each operand given
/// transposed or not): M, N and both contraction sizes, equal in a valid
/// step. Operands of rank >= 2.
struct ProductSizes {
  int64_t m = 0, n = 0, k = 0, rhsK = 0;
};
ProductSizes productSizes(std::span<const int64_t> lhs, bool transposeLhs,
                          std::span<const int64_t> rhs, bool transposeRhs);

/// tp.attention (query operand 0, then key and value, and its optional
/// positions 3) and tp.attention_grad (result_grad 0, then query 1, key 2,
/// value 3, ...): the query's operand index.
size_t attentionQueryOperand(plan::OpKind kind);

/// query [batch..., Sq, D], key [keyBatch..., Sk, D], value [keyBatch...,
/// Sk, Dv]: the batch dims (views into the shapes) and the sizes. Operands
/// of the same rank >= 2.
struct AttentionSizes {
  std::span<const int64_t> batch, keyBatch;
  int64_t queries = 0, keys = 0, headDim = 0, keyHeadDim = 0, valueDim = 0;
};
AttentionSizes attentionSizes(std::span<const int64_t> query,
                              std::span<const int64_t> key,
                              std::span<const int64_t> value);

} // namespace tpc::runtime
