// CPU kernels, f32: forward ops (embedding, matmul, binary, elementwise,
// norms, softmax, rotary). See Kernels.h for the semantics of each function
// and KernelSupport.h for the conventions they share.

#include "KernelSupport.h"

#include "tpc/runtime/OpShapes.h"

#include <cblas.h>

namespace tpc::runtime::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

void embedding(const float *table, int64_t vocab, int64_t hidden,
               const int32_t *ids, int64_t tokens, float *out) {
  embeddingBlock(table, /*firstRow=*/0, vocab, vocab, hidden, ids, tokens, out);
}

void embeddingBlock(const float *table, int64_t firstRow, int64_t rows,
                    int64_t fullVocab, int64_t hidden, const int32_t *ids,
                    int64_t tokens, float *out) {
  checkIndices("embedding", "id", ids, tokens, fullVocab);
  parallelFor(tokens, rowGrain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t row = int64_t(ids[t]) - firstRow;
      if (row >= 0 && row < rows)
        std::memcpy(out + t * hidden, table + row * hidden,
                    sizeof(float) * size_t(hidden));
      else
        std::memset(out + t * hidden, 0, sizeof(float) * size_t(hidden));
    }
  });
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

void round(Rounding rounding, const float *in, float *out, int64_t count) {
  // Bits dropped below the kept mantissa: 13 for tf32, 16 for bfloat16.
  const int dropped = rounding == Rounding::TF32 ? 13 : 16;
  const uint32_t half = (uint32_t(1) << (dropped - 1)) - 1,
                 mask = ~((uint32_t(1) << dropped) - 1);
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &in[i], sizeof bits);
      if (rounding != Rounding::None && (bits & 0x7f800000u) != 0x7f800000u)
        bits = (bits + half + ((bits >> dropped) & 1)) & mask;
      std::memcpy(&out[i], &bits, sizeof bits);
    }
  });
}

void matmul(const float *lhs, Shape lhsShape, bool transposeLhs,
            const float *rhs, Shape rhsShape, bool transposeRhs, float *out,
            Shape outShape, bool accumulate, float alpha) {
  auto fail = [&](const std::string &why) {
    throw std::runtime_error(
        "matmul: " + why + " (lhs " + shapeString(lhsShape) + ", rhs " +
        shapeString(rhsShape) + ", out " + shapeString(outShape) + ")");
  };
  if (lhsShape.size() < 2 || rhsShape.size() < 2 || outShape.size() < 2)
    fail("operands need rank >= 2");
  size_t lr = lhsShape.size(), rr = rhsShape.size(), orank = outShape.size();
  const auto [m, n, k, kr] =
      productSizes(lhsShape, transposeLhs, rhsShape, transposeRhs);
  if (k != kr || outShape[orank - 2] != m || outShape[orank - 1] != n)
    fail("matrix dims do not match");
  if (std::max<int64_t>({m, n, k}) > std::numeric_limits<int>::max())
    fail("matrix dims exceed the BLAS int range");
  numThreads(); // applies TPC_NUM_THREADS to OpenBLAS on first use

  // Batch dims, right-aligned against the output's (NumPy broadcasting).
  size_t lb = lr - 2, rb = rr - 2, ob = orank - 2;
  if (lb > ob || rb > ob)
    fail("operand has more batch dims than the output");
  std::vector<int64_t> lhsStride(ob, 0), rhsStride(ob, 0);
  {
    int64_t ls = m * k, rs = k * n;
    for (size_t i = ob; i-- > 0;) {
      int64_t size = outShape[i];
      if (i + lb >= ob) {
        int64_t dim = lhsShape[i + lb - ob];
        if (dim != size && dim != 1)
          fail("lhs batch dims do not broadcast to the output's");
        lhsStride[i] = dim == 1 ? 0 : ls;
        ls *= dim;
      }
      if (i + rb >= ob) {
        int64_t dim = rhsShape[i + rb - ob];
        if (dim != size && dim != 1)
          fail("rhs batch dims do not broadcast to the output's");
        rhsStride[i] = dim == 1 ? 0 : rs;
        rs *= dim;
      }
    }
  }
  int64_t batch = product(outShape.first(ob));
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (k == 0) {
    if (!accumulate)
      std::fill(out, out + batch * m * n, 0.0f);
    return;
  }

  CBLAS_TRANSPOSE ta = transposeLhs ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transposeRhs ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(transposeLhs ? m : k);
  int ldb = static_cast<int>(transposeRhs ? k : n);
  float beta = accumulate ? 1.0f : 0.0f;

  // X[b..., M, K] * W[K, N]: rows of all batches are one [b*M, K] matrix.
  bool lhsDense = true;
  for (size_t i = 0; i < ob; ++i)
    lhsDense &= lhsStride[i] != 0 || outShape[i] == 1;
  bool rhsShared = true;
  for (size_t i = 0; i < ob; ++i)
    rhsShared &= rhsStride[i] == 0;
  if (!transposeLhs && lhsDense && rhsShared &&
      batch * m <= std::numeric_limits<int>::max()) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(batch * m),
                static_cast<int>(n), static_cast<int>(k), alpha, lhs, lda, rhs,
                ldb, beta, out, static_cast<int>(n));
    return;
  }

  std::vector<int64_t> index(ob, 0);
  int64_t lhsOffset = 0, rhsOffset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, lhs + lhsOffset, lda,
                rhs + rhsOffset, ldb, beta, out + b * m * n,
                static_cast<int>(n));
    // Odometer over the output batch dims.
    for (size_t i = ob; i-- > 0;) {
      lhsOffset += lhsStride[i];
      rhsOffset += rhsStride[i];
      if (++index[i] < outShape[i])
        break;
      lhsOffset -= lhsStride[i] * outShape[i];
      rhsOffset -= rhsStride[i] * outShape[i];
      index[i] = 0;
    }
  }
}

//===----------------------------------------------------------------------===//
// binary
//===----------------------------------------------------------------------===//

namespace {

template <BinaryKind Kind>
[[gnu::always_inline]] inline float applyBinary(float a, float b) {
  if constexpr (Kind == BinaryKind::Add)
    return a + b;
  else if constexpr (Kind == BinaryKind::Sub)
    return a - b;
  else if constexpr (Kind == BinaryKind::Mul)
    return a * b;
  else
    return a / b;
}

/// out[i] = lhs[i * ls] op rhs[i * rs] for i < n, with the unit-stride and
/// broadcast (stride 0) cases as separate vectorisable loops. out may be lhs or
/// rhs (in place).
template <BinaryKind Kind>
void binaryRow(const float *lhs, int64_t ls, const float *rhs, int64_t rs,
               float *out, int64_t n) {
  if (ls == 1 && rs == 1) {
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i], rhs[i]);
  } else if (ls == 1 && rs == 0) {
    float b = rhs[0];
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i], b);
  } else if (ls == 0 && rs == 1) {
    float a = lhs[0];
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(a, rhs[i]);
  } else {
    // Not reached after dim merging (the innermost stride is 0 or 1).
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i * ls], rhs[i * rs]);
  }
}

template <BinaryKind Kind>
void binaryImpl(const float *lhs, Shape lhsShape, const float *rhs,
                Shape rhsShape, float *out, Shape outShape) {
  size_t rank = outShape.size();
  if (lhsShape.size() > rank || rhsShape.size() > rank)
    throw std::runtime_error("binary: operand rank exceeds the output's");
  int64_t total = product(outShape);
  if (total == 0)
    return;

  // Per-dim strides in the output's index space (0 where broadcast), then
  // drop size-1 dims and merge dims that are contiguous for both operands.
  std::vector<int64_t> sizes, ls, rs;
  {
    std::vector<int64_t> lStride(rank, 0), rStride(rank, 0);
    int64_t l = 1, r = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t size = outShape[d];
      size_t lo = rank - lhsShape.size(), ro = rank - rhsShape.size();
      if (d >= lo) {
        int64_t dim = lhsShape[d - lo];
        if (dim != size && dim != 1)
          throw std::runtime_error("binary: lhs " + shapeString(lhsShape) +
                                   " does not broadcast to " +
                                   shapeString(outShape));
        lStride[d] = dim == 1 ? 0 : l;
        l *= dim;
      }
      if (d >= ro) {
        int64_t dim = rhsShape[d - ro];
        if (dim != size && dim != 1)
          throw std::runtime_error("binary: rhs " + shapeString(rhsShape) +
                                   " does not broadcast to " +
                                   shapeString(outShape));
        rStride[d] = dim == 1 ? 0 : r;
        r *= dim;
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      int64_t size = outShape[d];
      if (size == 1)
        continue;
      if (!sizes.empty() && ls.back() == lStride[d] * size &&
          rs.back() == rStride[d] * size) {
        sizes.back() *= size;
        ls.back() = lStride[d];
        rs.back() = rStride[d];
        continue;
      }
      sizes.push_back(size);
      ls.push_back(lStride[d]);
      rs.push_back(rStride[d]);
    }
  }
  if (sizes.empty()) {
    out[0] = applyBinary<Kind>(lhs[0], rhs[0]);
    return;
  }

  int64_t inner = sizes.back();
  int64_t innerL = ls.back(), innerR = rs.back();
  size_t outerRank = sizes.size() - 1;
  int64_t rows = total / inner;
  if (rows == 1) {
    // Same shape, or a scalar against a tensor: one long row, split it.
    parallelFor(inner, kElementGrain, [&](int64_t begin, int64_t end) {
      binaryRow<Kind>(lhs + begin * innerL, innerL, rhs + begin * innerR,
                      innerR, out + begin, end - begin);
    });
    return;
  }
  // Rows of the innermost merged dim, e.g. bias [N] over [M, N]: M rows.
  parallelFor(rows, rowGrain(inner), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(outerRank);
    int64_t lo = 0, ro = 0;
    int64_t rest = begin;
    for (size_t d = outerRank; d-- > 0;) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      lo += index[d] * ls[d];
      ro += index[d] * rs[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      binaryRow<Kind>(lhs + lo, innerL, rhs + ro, innerR, out + row * inner,
                      inner);
      for (size_t d = outerRank; d-- > 0;) {
        lo += ls[d];
        ro += rs[d];
        if (++index[d] < sizes[d])
          break;
        lo -= ls[d] * sizes[d];
        ro -= rs[d] * sizes[d];
        index[d] = 0;
      }
    }
  });
}

} // namespace

void binary(BinaryKind kind, const float *lhs, Shape lhsShape, const float *rhs,
            Shape rhsShape, float *out, Shape outShape) {
  switch (kind) {
  case BinaryKind::Add:
    return binaryImpl<BinaryKind::Add>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Sub:
    return binaryImpl<BinaryKind::Sub>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Mul:
    return binaryImpl<BinaryKind::Mul>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Div:
    return binaryImpl<BinaryKind::Div>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  }
  throw std::runtime_error("binary: unknown kind");
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {

void scaleRange(const float *in, float factor, float *out, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i)
    out[i] = in[i] * factor;
}

// 0.5 x (1 + tanh(u)) == x * sigmoid(2u) == x / (1 + exp(-2u)): no
// cancellation near 0, and exp saturates cleanly for large |x|.
void geluRange(const float *in, float *out, int64_t n) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float u2 = kTwoSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = x / (1.0f + fastExp<false>(-u2));
  }
}

void reluRange(const float *in, float *out, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    // x <= 0 is false for NaN, which passes through as torch.relu's does.
    out[i] = x <= 0.0f ? 0.0f : x;
  }
}

void siluRange(const float *in, float *out, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    out[i] = x / (1.0f + fastExp<false>(-x));
  }
}

} // namespace

void scale(const float *in, float factor, float *out, int64_t count) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    scaleRange(in + begin, factor, out + begin, end - begin);
  });
}

void gelu(const float *in, float *out, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    geluRange(in + begin, out + begin, end - begin);
  });
}

void silu(const float *in, float *out, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    siluRange(in + begin, out + begin, end - begin);
  });
}

void relu(const float *in, float *out, int64_t count) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    reluRange(in + begin, out + begin, end - begin);
  });
}

void swiglu(const float *gate, const float *up, float *out, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    TPC_INDEPENDENT_LOOP
    for (int64_t i = begin; i < end; ++i) {
      float x = gate[i];
      float s = x / (1.0f + fastExp<false>(-x));
      out[i] = s * up[i];
    }
  });
}

//===----------------------------------------------------------------------===//
// Norms and softmax
//===----------------------------------------------------------------------===//

namespace {

void layerNormRow(const float *x, const float *__restrict gamma,
                  const float *__restrict beta, float *y, int64_t cols,
                  float epsilon) {
  double mean = sumDouble(x, cols) / double(cols);
  double var = sumSquaredDouble(x, cols, mean) / double(cols);
  float rstd = static_cast<float>(1.0 / std::sqrt(var + double(epsilon)));
  float meanF = static_cast<float>(mean);
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    y[i] = (x[i] - meanF) * rstd * gamma[i] + beta[i];
}

void rmsNormRow(const float *x, const float *__restrict gamma, float *y,
                int64_t cols, float epsilon) {
  double ms = sumSquaredDouble(x, cols, 0.0) / double(cols);
  float rrms = static_cast<float>(1.0 / std::sqrt(ms + double(epsilon)));
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    y[i] = x[i] * rrms * gamma[i];
}

/// Softmax of x[0..n) into y[0..n).
void softmaxRow(const float *x, float *y, int64_t n) {
  float m = maxFloat(x, n);
  expShifted(x, m, y, n); // y may be x
  scaleInPlace(y, static_cast<float>(1.0 / sumDouble(y, n)), n);
}

} // namespace

void layerNorm(const float *x, const float *gamma, const float *beta, float *y,
               int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      layerNormRow(x + r * cols, gamma, beta, y + r * cols, cols, epsilon);
  });
}

void rmsNorm(const float *x, const float *gamma, float *y, int64_t rows,
             int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      rmsNormRow(x + r * cols, gamma, y + r * cols, cols, epsilon);
  });
}

void softmax(const float *x, float *y, int64_t rows, int64_t cols,
             bool causal) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      int64_t visible = causal ? r % cols + 1 : cols;
      softmaxRow(xr, yr, visible);
      std::fill(yr + visible, yr + cols, 0.0f);
    }
  });
}

//===----------------------------------------------------------------------===//
// rotary
//===----------------------------------------------------------------------===//

void rotary(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, int64_t positionOffset) {
  if (dim % 2 != 0)
    throw std::runtime_error("rotary: dim " + std::to_string(dim) +
                             " must be even");
  int64_t half = dim / 2;
  if (outer <= 0 || seq <= 0 || half == 0)
    return;
  // cos/sin per (position, frequency), angles in double.
  std::vector<double> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(dim));
  std::vector<float> cosTable(size_t(seq * half)), sinTable(size_t(seq * half));
  double sign = inverse ? -1.0 : 1.0;
  parallelFor(seq, rowGrain(half, 4096), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      double position = double(positionOffset + s);
      for (int64_t i = 0; i < half; ++i) {
        double angle = sign * position * invFreq[size_t(i)];
        cosTable[size_t(s * half + i)] = static_cast<float>(std::cos(angle));
        sinTable[size_t(s * half + i)] = static_cast<float>(std::sin(angle));
      }
    }
  });
  const float *cosData = cosTable.data();
  const float *sinData = sinTable.data();
  parallelFor(outer * seq, rowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t s = row % seq;
      const float *__restrict c = cosData + s * half;
      const float *__restrict sn = sinData + s * half;
      const float *lo = x + row * dim;
      const float *hi = lo + half;
      float *ylo = y + row * dim; // may be lo
      float *yhi = ylo + half;
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < half; ++i) {
        float a = lo[i], b = hi[i];
        ylo[i] = a * c[i] - b * sn[i];
        yhi[i] = b * c[i] + a * sn[i];
      }
    }
  });
}

void rotaryAt(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
              double theta, bool inverse, const int32_t *positions,
              int64_t positionRows) {
  if (dim % 2 != 0)
    throw std::runtime_error("rotary: dim " + std::to_string(dim) +
                             " must be even");
  const int64_t half = dim / 2;
  if (outer <= 0 || seq <= 0 || half == 0)
    return;
  if (positionRows <= 0 || outer % positionRows != 0)
    throw std::runtime_error(
        "rotary: positions of " + std::to_string(positionRows) +
        " rows do not divide the input's " + std::to_string(outer));
  std::vector<double> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(dim));
  const double sign = inverse ? -1.0 : 1.0;
  const int64_t perRow = outer / positionRows;
  // The angles as `rotary` computes them, so both agree bit for bit.
  parallelFor(outer * seq, rowGrain(dim * 8), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t s = row % seq, n = row / seq / perRow;
      const double position = double(positions[n * seq + s]);
      const float *lo = x + row * dim, *hi = lo + half;
      float *ylo = y + row * dim, *yhi = ylo + half;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = sign * position * invFreq[size_t(i)];
        const float c = static_cast<float>(std::cos(angle)),
                    sn = static_cast<float>(std::sin(angle));
        const float a = lo[i], b = hi[i];
        ylo[i] = a * c - b * sn;
        yhi[i] = b * c + a * sn;
      }
    }
  });
}

void cacheWrite(std::byte *cache, const std::byte *update, int64_t outer,
                int64_t cacheRows, int64_t rows, int64_t dim,
                size_t elementSize, const int32_t *positions,
                int64_t positionRows) {
  if (outer <= 0 || rows <= 0)
    return;
  if (positionRows <= 0 || outer % positionRows != 0)
    throw std::runtime_error(
        "cache write: positions of " + std::to_string(positionRows) +
        " rows do not divide the cache's " + std::to_string(outer));
  for (int64_t i = 0; i < positionRows * rows; ++i)
    if (positions[i] < 0 || positions[i] >= cacheRows)
      throw std::runtime_error("position " + std::to_string(positions[i]) +
                               " is outside the KV cache of " +
                               std::to_string(cacheRows) + " positions");
  const int64_t perRow = outer / positionRows;
  parallelFor(outer * rows, rowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / rows, t = r % rows;
      const int64_t at = positions[(o / perRow) * rows + t];
      const size_t row = size_t(dim) * elementSize;
      std::memcpy(cache + size_t(o * cacheRows + at) * row,
                  update + size_t(r) * row, row);
    }
  });
}

} // namespace tpc::runtime::cpu
