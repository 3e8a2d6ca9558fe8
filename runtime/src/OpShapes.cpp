#include "tpc/runtime/OpShapes.h"

namespace tpc::runtime {

ProductSizes productSizes(std::span<const int64_t> lhs, bool transposeLhs,
                          std::span<const int64_t> rhs, bool transposeRhs) {
  const size_t l = lhs.size(), r = rhs.size();
  ProductSizes s;
  s.m = transposeLhs ? lhs[l - 1] : lhs[l - 2];
  s.k = transposeLhs ? lhs[l - 2] : lhs[l - 1];
  s.rhsK = transposeRhs ? rhs[r - 1] : rhs[r - 2];
  s.n = transposeRhs ? rhs[r - 2] : rhs[r - 1];
  return s;
}

size_t attentionQueryOperand(plan::OpKind kind) {
  return kind == plan::OpKind::AttentionGrad ? 1 : 0;
}

AttentionSizes attentionSizes(std::span<const int64_t> query,
                              std::span<const int64_t> key,
                              std::span<const int64_t> value) {
  const size_t rank = query.size() - 2;
  AttentionSizes s;
  s.batch = query.first(rank);
  s.keyBatch = key.first(rank);
  s.queries = query[rank];
  s.keys = key[rank];
  s.headDim = query[rank + 1];
  s.keyHeadDim = key[rank + 1];
  s.valueDim = value[rank + 1];
  return s;
}

} // namespace tpc::runtime
