// CPU kernels, f32: fused attention (tp.attention) and its gradient. See
// Kernels.h for the semantics and KernelSupport.h for the conventions.
//
// FlashAttention's idea on a CPU: the scores of one block of queries of one
// head exist at a time ([kQueryBlock, keys] floats), and the backward
// recomputes the probabilities from the saved log-sum-exp instead of reading
// a stored [.., S, S] tensor. The products are SGEMMs (OpenBLAS threads the
// large ones); a causal block only multiplies the keys its queries see.
// Each product rounds the operands the unfused program's matmuls round, so
// the two agree to rounding.

#include "KernelSupport.h"

#include <cblas.h>

namespace tpc::runtime::cpu {

using namespace detail;

namespace {

/// Queries per block: big enough for efficient SGEMMs, small enough that a
/// block's scores stay in cache for the row softmax.
constexpr int64_t kQueryBlock = 128;

int blasInt(int64_t value) {
  if (value > std::numeric_limits<int>::max())
    throw std::runtime_error("attention: a dimension of " +
                             std::to_string(value) + " exceeds BLAS's int");
  return static_cast<int>(value);
}

/// C [m, n] = alpha op(A) op(B) + beta C, row-major, contiguous.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, const float *b, float beta, float *c) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasInt(m), blasInt(n),
              blasInt(k), alpha, a, blasInt(transA ? m : k), b,
              blasInt(transB ? k : n), beta, c, blasInt(n));
}

/// For each flattened query batch index, the flattened key batch index it
/// reads (broadcast dims of size 1 contribute nothing).
std::vector<int64_t> keyBatchIndices(const AttentionShape &s) {
  if (s.batch.size() != s.keyBatch.size())
    throw std::runtime_error("attention: query and key differ in rank");
  const int64_t count = product(s.batch);
  std::vector<int64_t> keyOf(size_t(count), 0);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rest = flat, keyFlat = 0, keyStride = 1;
    for (size_t d = s.batch.size(); d-- > 0;) {
      const int64_t coord = rest % s.batch[d];
      rest /= s.batch[d];
      if (s.keyBatch[d] == s.batch[d])
        keyFlat += coord * keyStride;
      else if (s.keyBatch[d] != 1)
        throw std::runtime_error("attention: key batch dim " +
                                 std::to_string(d) +
                                 " is neither query's nor 1");
      keyStride *= s.keyBatch[d];
    }
    keyOf[size_t(flat)] = keyFlat;
  }
  return keyOf;
}

/// `data` rounded to `rounding` in a copy, or `data` itself without one.
const float *rounded(Rounding rounding, const float *data, int64_t count,
                     std::vector<float> &storage) {
  if (rounding == Rounding::None)
    return data;
  storage.resize(size_t(count));
  round(rounding, data, storage.data(), count);
  return storage.data();
}

/// The keys query row `row` of head `head` sees, and the keys a block of
/// rows [rowBegin, rowEnd) needs.
int64_t visibleKeys(const AttentionShape &s, int64_t head, int64_t row) {
  if (s.positions) {
    const int64_t perRow = product(s.batch) / s.positionRows;
    return int64_t(s.positions[(head / perRow) * s.queries + row]) + 1;
  }
  return s.causal ? row + 1 : s.keys;
}
int64_t blockKeys(const AttentionShape &s, int64_t head, int64_t rowBegin,
                  int64_t rowEnd) {
  if (s.positions) {
    int64_t most = 0;
    for (int64_t row = rowBegin; row < rowEnd; ++row)
      most = std::max(most, visibleKeys(s, head, row));
    return most;
  }
  return s.causal ? rowEnd : s.keys;
}

/// Positions, when given, must name keys that exist.
void checkPositions(const AttentionShape &s) {
  if (!s.positions)
    return;
  if (s.batch.empty() || s.positionRows != s.batch[0])
    throw std::runtime_error("attention: positions must have one row per "
                             "query batch row");
  for (int64_t i = 0; i < s.positionRows * s.queries; ++i)
    if (s.positions[i] < 0 || s.positions[i] >= s.keys)
      throw std::runtime_error("position " + std::to_string(s.positions[i]) +
                               " is outside the KV cache of " +
                               std::to_string(s.keys) + " positions");
}

} // namespace

void attention(const float *query, const float *key, const float *value,
               const AttentionShape &s, float *result, float *logSumExp) {
  const std::vector<int64_t> keyOf = keyBatchIndices(s);
  checkPositions(s);
  const int64_t sq = s.queries, d = s.headDim, dv = s.valueDim;
  std::vector<float> qStore, kStore, vStore;
  const float *q =
      rounded(s.rounding, query, product(s.batch) * sq * d, qStore);
  const float *k =
      rounded(s.rounding, key, product(s.keyBatch) * s.keys * d, kStore);
  const float *v =
      rounded(s.rounding, value, product(s.keyBatch) * s.keys * dv, vStore);
  std::vector<float> probs(size_t(std::min(kQueryBlock, sq) * s.keys));
  for (size_t head = 0; head < keyOf.size(); ++head) {
    const float *qh = q + int64_t(head) * sq * d;
    const float *kh = k + keyOf[head] * s.keys * d;
    const float *vh = v + keyOf[head] * s.keys * dv;
    for (int64_t r0 = 0; r0 < sq; r0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, sq - r0);
      const int64_t cols = blockKeys(s, int64_t(head), r0, r0 + rows);
      float *p = probs.data();
      gemm(false, true, rows, cols, d, s.alpha, qh + r0 * d, kh, 0.0f, p);
      float *lse = logSumExp + int64_t(head) * sq + r0;
      parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float *row = p + i * cols;
          const int64_t visible = visibleKeys(s, int64_t(head), r0 + i);
          const float max = maxFloat(row, visible);
          expShifted(row, max, row, visible);
          const double sum = sumDouble(row, visible);
          scaleInPlace(row, static_cast<float>(1.0 / sum), visible);
          std::fill(row + visible, row + cols, 0.0f);
          lse[i] = static_cast<float>(double(max) + std::log(sum));
          if (s.rounding != Rounding::None)
            round(s.rounding, row, row, visible);
        }
      });
      gemm(false, false, rows, dv, cols, 1.0f, p, vh, 0.0f,
           result + (int64_t(head) * sq + r0) * dv);
    }
  }
}

void attentionGrad(const float *resultGrad, const float *query,
                   const float *key, const float *value, const float *result,
                   const float *logSumExp, const AttentionShape &s,
                   float *queryGrad, float *keyGrad, float *valueGrad) {
  const std::vector<int64_t> keyOf = keyBatchIndices(s);
  checkPositions(s);
  const int64_t heads = product(s.batch), keyHeads = product(s.keyBatch);
  const int64_t sq = s.queries, sk = s.keys, d = s.headDim, dv = s.valueDim;
  std::fill(keyGrad, keyGrad + keyHeads * sk * d, 0.0f);
  std::fill(valueGrad, valueGrad + keyHeads * sk * dv, 0.0f);
  std::vector<float> qStore, kStore, vStore, dyStore;
  const float *q = rounded(s.rounding, query, heads * sq * d, qStore);
  const float *k = rounded(s.rounding, key, keyHeads * sk * d, kStore);
  const float *v = rounded(s.rounding, value, keyHeads * sk * dv, vStore);
  const float *dy = rounded(s.rounding, resultGrad, heads * sq * dv, dyStore);
  const size_t blockFloats = size_t(std::min(kQueryBlock, sq) * sk);
  std::vector<float> probs(blockFloats), scoresGrad(blockFloats);
  // Query heads in order, each accumulating into its key head's gradients:
  // the sums run in a fixed order whatever the thread count.
  for (int64_t head = 0; head < heads; ++head) {
    const int64_t kv = keyOf[size_t(head)];
    const float *qh = q + head * sq * d, *kh = k + kv * sk * d,
                *vh = v + kv * sk * dv, *dyh = dy + head * sq * dv;
    float *dkh = keyGrad + kv * sk * d, *dvh = valueGrad + kv * sk * dv;
    for (int64_t r0 = 0; r0 < sq; r0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, sq - r0);
      const int64_t cols = blockKeys(s, head, r0, r0 + rows);
      float *p = probs.data(), *ds = scoresGrad.data();
      // p = exp(alpha q k^T - lse); dp = dy v^T.
      gemm(false, true, rows, cols, d, s.alpha, qh + r0 * d, kh, 0.0f, p);
      gemm(false, true, rows, cols, dv, 1.0f, dyh + r0 * dv, vh, 0.0f, ds);
      const float *lse = logSumExp + head * sq + r0;
      const int64_t firstRow = head * sq + r0;
      parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float *pr = p + i * cols, *dsr = ds + i * cols;
          const int64_t visible = visibleKeys(s, head, r0 + i);
          expShifted(pr, lse[i], pr, visible);
          std::fill(pr + visible, pr + cols, 0.0f);
          // The softmax's backward: ds = p (dp - sum(dp p)), where
          // sum(dp p) = dy . result (FlashAttention's D).
          const int64_t at = (firstRow + i) * dv;
          const float dot =
              static_cast<float>(dotDouble(resultGrad + at, result + at, dv));
          TPC_INDEPENDENT_LOOP
          for (int64_t j = 0; j < visible; ++j)
            dsr[j] = pr[j] * (dsr[j] - dot);
          std::fill(dsr + visible, dsr + cols, 0.0f);
          if (s.rounding != Rounding::None) {
            round(s.rounding, pr, pr, visible);
            round(s.rounding, dsr, dsr, visible);
          }
        }
      });
      // dv += p^T dy; dq = alpha ds k; dk += alpha ds^T q.
      gemm(true, false, cols, dv, rows, 1.0f, p, dyh + r0 * dv, 1.0f, dvh);
      gemm(false, false, rows, d, cols, s.alpha, ds, kh, 0.0f,
           queryGrad + (head * sq + r0) * d);
      gemm(true, false, cols, d, rows, s.alpha, ds, qh + r0 * d, 1.0f, dkh);
    }
  }
}

} // namespace tpc::runtime::cpu
