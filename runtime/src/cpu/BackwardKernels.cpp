// CPU kernels, f32: backward ops (the gradients of embedding, activations,
// norms and softmax). See Kernels.h for the semantics of each function and
// KernelSupport.h for the conventions they share.

#include "KernelSupport.h"

namespace tpc::runtime::cpu {

using namespace detail;

// Reductions across rows (gammaGrad, betaGrad, embeddingGrad) use blocks fixed
// by the shape alone, whose double partials are combined in block order, so
// like the forward kernels these give bit-identical results for any thread
// count. In place: geluGrad and siluGrad (inputGrad == either input),
// layerNormGrad and rmsNormGrad (inputGrad == resultGrad or input) and
// softmaxGrad (inputGrad == resultGrad or result).

namespace {

// d/dx of x sigmoid(2u), u = sqrt(2/pi) (x + a x^3): with e = exp(-2u) and
// s = 1 / (1 + e), 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s)
// = 4 e s^2, so the derivative is s + 2 x e s^2 sqrt(2/pi) (1 + 3 a x^2).
// No cancellation, and e saturates cleanly for large |x|.
void geluGradRange(const float *dy, const float *in, float *dx, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float x2 = x * x;
    float u2 = 2.0f * kSqrt2OverPi * (x + kCubic * x2 * x);
    float e = fastExp(-u2);
    float s = 1.0f / (1.0f + e);
    float slope = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
    dx[i] = dy[i] * (s + (e * s) * s * x * slope);
  }
}

void reluGradRange(const float *dy, const float *in, float *dx, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i)
    dx[i] = in[i] > 0.0f ? dy[i] : 0.0f;
}

// d/dx of x s, s = sigmoid(x) = 1 / (1 + e), e = exp(-x):
// s + x s (1 - s) = s + x e s^2.
void siluGradRange(const float *dy, const float *in, float *dx, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float e = fastExp(-x);
    float s = 1.0f / (1.0f + e);
    dx[i] = dy[i] * (s + (e * s) * s * x);
  }
}

/// One row of layerNormGrad; adds this row's gamma and beta gradients into
/// accGamma and accBeta. With g = dy gamma and xhat = (x - mean) rstd:
///   dx = rstd (g - mean(g)) - (x - mean) rstd^3 mean(g (x - mean)).
void layerNormGradRow(const float *dy, const float *x,
                      const float *__restrict gamma, float *dx,
                      double *__restrict accGamma, double *__restrict accBeta,
                      int64_t cols, float epsilon) {
  // Same statistics as layerNormRow.
  double mean = sumDouble(x, cols) / double(cols);
  double var = sumSquaredDouble(x, cols, mean) / double(cols);
  double rstd = 1.0 / std::sqrt(var + double(epsilon));
  double sumG = 0.0, sumGX = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < cols; ++i) {
    double d = static_cast<double>(dy[i]);
    double xc = static_cast<double>(x[i]) - mean;
    double g = d * static_cast<double>(gamma[i]);
    sumG += g;
    sumGX += g * xc;
    accGamma[i] += d * (xc * rstd);
    accBeta[i] += d;
  }
  float a = static_cast<float>(rstd);
  float meanG = static_cast<float>(sumG / double(cols));
  float k = static_cast<float>(rstd * rstd * rstd * sumGX / double(cols));
  float meanF = static_cast<float>(mean);
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    dx[i] = a * (dy[i] * gamma[i] - meanG) - (x[i] - meanF) * k;
}

/// One row of rmsNormGrad; adds the row's gamma gradient into accGamma. With
/// r = 1 / sqrt(mean(x^2) + eps):
///   dx = r dy gamma - x r^3 mean(dy gamma x).
void rmsNormGradRow(const float *dy, const float *x,
                    const float *__restrict gamma, float *dx,
                    double *__restrict accGamma, int64_t cols, float epsilon) {
  double ms = sumSquaredDouble(x, cols, 0.0) / double(cols);
  double r = 1.0 / std::sqrt(ms + double(epsilon));
  double sumGX = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < cols; ++i) {
    double d = static_cast<double>(dy[i]);
    double xd = static_cast<double>(x[i]);
    sumGX += d * static_cast<double>(gamma[i]) * xd;
    accGamma[i] += d * (xd * r);
  }
  float a = static_cast<float>(r);
  float k = static_cast<float>(r * r * r * sumGX / double(cols));
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    dx[i] = a * (dy[i] * gamma[i]) - x[i] * k;
}

} // namespace

void embeddingGrad(const float *resultGrad, const int32_t *ids, int64_t tokens,
                   int64_t vocab, int64_t hidden, float *tableGrad) {
  embeddingGradBlock(resultGrad, ids, tokens, /*firstRow=*/0, vocab, vocab,
                     hidden, tableGrad);
}

void embeddingGradBlock(const float *resultGrad, const int32_t *ids,
                        int64_t tokens, int64_t firstRow, int64_t rows,
                        int64_t fullVocab, int64_t hidden, float *tableGrad) {
  checkIndices("embeddingGrad", "id", ids, tokens, fullVocab);
  const int64_t vocab = rows;
  if (vocab <= 0 || hidden <= 0)
    return;
  auto inBlock = [&](int64_t t) {
    int64_t row = int64_t(ids[t]) - firstRow;
    return row >= 0 && row < rows;
  };
  // This block's tokens bucketed by row (a stable counting sort): the tokens
  // of row v are order[start[v] .. start[v + 1]), in token order.
  std::vector<int64_t> start(size_t(vocab) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t)
    if (inBlock(t))
      ++start[size_t(ids[t] - firstRow) + 1];
  for (size_t v = 0; v < size_t(vocab); ++v)
    start[v + 1] += start[v];
  std::vector<int64_t> order(size_t(start.back()));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < tokens; ++t)
      if (inBlock(t))
        order[size_t(next[size_t(ids[t] - firstRow)]++)] = t;
  }
  // Each output row is written once, by whichever chunk owns it: zeros, a
  // copy, or a double sum in token order.
  parallelFor(vocab, rowGrain(hidden), [&](int64_t begin, int64_t end) {
    std::vector<double> acc;
    int64_t v = begin;
    while (v < end) {
      if (start[size_t(v)] == start[size_t(v) + 1]) {
        int64_t w = v + 1;
        while (w < end && start[size_t(w)] == start[size_t(w) + 1])
          ++w;
        std::memset(tableGrad + v * hidden, 0,
                    sizeof(float) * size_t((w - v) * hidden));
        v = w;
        continue;
      }
      int64_t first = start[size_t(v)], last = start[size_t(v) + 1];
      float *dst = tableGrad + v * hidden;
      if (last - first == 1) {
        std::memcpy(dst, resultGrad + order[size_t(first)] * hidden,
                    sizeof(float) * size_t(hidden));
      } else {
        acc.assign(size_t(hidden), 0.0);
        for (int64_t k = first; k < last; ++k)
          accumulateRow(resultGrad + order[size_t(k)] * hidden, acc.data(),
                        hidden);
        const double *__restrict src = acc.data();
        for (int64_t i = 0; i < hidden; ++i)
          dst[i] = static_cast<float>(src[i]);
      }
      ++v;
    }
  });
}

void geluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    geluGradRange(resultGrad + begin, input + begin, inputGrad + begin,
                  end - begin);
  });
}

void swigluGrad(const float *resultGrad, const float *gate, const float *up,
                float *gateGrad, float *upGrad, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    TPC_INDEPENDENT_LOOP
    for (int64_t i = begin; i < end; ++i) {
      float x = gate[i], dy = resultGrad[i];
      // As silu's forward kernel computes silu(x), then as siluGrad.
      float silu = x / (1.0f + fastExp<false>(-x));
      float e = fastExp(-x);
      float s = 1.0f / (1.0f + e);
      float ds = dy * up[i];
      gateGrad[i] = ds * (s + (e * s) * s * x);
      upGrad[i] = dy * silu;
    }
  });
}

void siluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    siluGradRange(resultGrad + begin, input + begin, inputGrad + begin,
                  end - begin);
  });
}

void reluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    reluGradRange(resultGrad + begin, input + begin, inputGrad + begin,
                  end - begin);
  });
}

void layerNormGrad(const float *resultGrad, const float *input,
                   const float *gamma, float *inputGrad, float *gammaGrad,
                   float *betaGrad, int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    std::fill(gammaGrad, gammaGrad + cols, 0.0f);
    std::fill(betaGrad, betaGrad + cols, 0.0f);
    return;
  }
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = (rows + blockRows - 1) / blockRows;
  // Per block: gamma partials [cols], then beta partials [cols].
  std::vector<double> partial(size_t(blocks * 2 * cols), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * 2 * cols;
      double *accBeta = accGamma + cols;
      int64_t rowEnd = std::min(rows, (b + 1) * blockRows);
      for (int64_t r = b * blockRows; r < rowEnd; ++r)
        layerNormGradRow(resultGrad + r * cols, input + r * cols, gamma,
                         inputGrad + r * cols, accGamma, accBeta, cols,
                         epsilon);
    }
  });
  combineBlocks(partial, blocks, 2 * cols, 0, cols, gammaGrad);
  combineBlocks(partial, blocks, 2 * cols, cols, cols, betaGrad);
}

void rmsNormGrad(const float *resultGrad, const float *input,
                 const float *gamma, float *inputGrad, float *gammaGrad,
                 int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    std::fill(gammaGrad, gammaGrad + cols, 0.0f);
    return;
  }
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = (rows + blockRows - 1) / blockRows;
  std::vector<double> partial(size_t(blocks * cols), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * cols;
      int64_t rowEnd = std::min(rows, (b + 1) * blockRows);
      for (int64_t r = b * blockRows; r < rowEnd; ++r)
        rmsNormGradRow(resultGrad + r * cols, input + r * cols, gamma,
                       inputGrad + r * cols, accGamma, cols, epsilon);
    }
  });
  combineBlocks(partial, blocks, cols, 0, cols, gammaGrad);
}

void softmaxGrad(const float *resultGrad, const float *result, float *inputGrad,
                 int64_t rows, int64_t cols) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *dy = resultGrad + r * cols;
      const float *y = result + r * cols;
      float *dx = inputGrad + r * cols; // may be dy or y
      float dot = static_cast<float>(dotDouble(dy, y, cols));
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < cols; ++i)
        dx[i] = y[i] * (dy[i] - dot);
    }
  });
}

} // namespace tpc::runtime::cpu
