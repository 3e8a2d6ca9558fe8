// CPU kernels, f32: loss and optimizer (cross-entropy and its gradient, the
// gradient norm, AdamW, the learning-rate schedule, clipping). See Kernels.h
// for the semantics of each function and KernelSupport.h for the conventions
// they share. In place: crossEntropyGrad (logitsGrad == logits) and adamw
// (each output == its input).

#include "KernelSupport.h"

#include <numbers>

namespace tpc::runtime::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// crossEntropy
//===----------------------------------------------------------------------===//

float crossEntropy(const float *logits, int64_t tokens, int64_t vocab,
                   const int32_t *targets) {
  checkIndices("crossEntropy", "target", targets, tokens, vocab);
  if (tokens <= 0)
    return 0.0f;
  std::vector<double> losses(static_cast<size_t>(tokens));
  parallelFor(tokens, rowGrain(vocab, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * vocab;
      float m = maxFloat(row, vocab);
      double sum = sumExpShifted(row, m, vocab);
      losses[size_t(t)] = std::log(sum) + double(m) - double(row[targets[t]]);
    }
  });
  double total = 0.0;
  for (double loss : losses)
    total += loss;
  return static_cast<float>(total / double(tokens));
}

void crossEntropyBlockStats(const float *logits, int64_t tokens,
                            int64_t columns, int64_t firstColumn,
                            int64_t fullVocab, const int32_t *targets,
                            float *stats) {
  checkIndices("crossEntropy", "target", targets, tokens, fullVocab);
  parallelFor(tokens, rowGrain(columns, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * columns;
      float m = maxFloat(row, columns);
      int64_t column = int64_t(targets[t]) - firstColumn;
      stats[3 * t] = m;
      stats[3 * t + 1] = float(sumExpShifted(row, m, columns));
      stats[3 * t + 2] = column >= 0 && column < columns ? row[column] : 0.0f;
    }
  });
}

void mergeCrossEntropyStats(const float *chunkStats, int64_t chunks,
                            int64_t tokens, float *stats) {
  parallelFor(tokens, rowGrain(chunks, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float m = chunkStats[3 * t];
      for (int64_t c = 1; c < chunks; ++c)
        m = std::max(m, chunkStats[3 * (c * tokens + t)]);
      double sum = 0.0, target = 0.0;
      for (int64_t c = 0; c < chunks; ++c) {
        const float *chunk = chunkStats + 3 * (c * tokens + t);
        sum += double(chunk[1]) * std::exp(double(chunk[0]) - double(m));
        target += double(chunk[2]);
      }
      stats[3 * t] = m;
      stats[3 * t + 1] = float(sum);
      stats[3 * t + 2] = float(target);
    }
  });
}

float crossEntropyFromBlockStats(const float *stats, int64_t blocks,
                                 int64_t tokens) {
  if (tokens <= 0)
    return 0.0f;
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    // Rescale each block's sum to the row's global max (log-sum-exp).
    float m = stats[3 * t];
    for (int64_t b = 1; b < blocks; ++b)
      m = std::max(m, stats[3 * (b * tokens + t)]);
    double sum = 0.0, target = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      const float *block = stats + 3 * (b * tokens + t);
      sum += double(block[1]) * std::exp(double(block[0]) - double(m));
      target += double(block[2]);
    }
    total += std::log(sum) + double(m) - target;
  }
  return static_cast<float>(total / double(tokens));
}

void crossEntropyGrad(const float *logits, const int32_t *targets,
                      float lossGrad, int64_t tokens, int64_t vocab,
                      float *logitsGrad) {
  checkIndices("crossEntropyGrad", "target", targets, tokens, vocab);
  if (tokens <= 0)
    return;
  double scale = double(lossGrad) / double(tokens);
  parallelFor(tokens, rowGrain(vocab, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * vocab;
      float *out = logitsGrad + t * vocab; // may be row
      int64_t target = targets[t];
      // The max and the sum of exps exactly as crossEntropy forms them.
      float m = maxFloat(row, vocab);
      double sum = expShiftedStore(row, m, out, vocab);
      double expTarget = out[target];
      scaleInPlace(out, static_cast<float>(scale / sum), vocab);
      // (p - 1) scale with 1 - p = (sum of the other exps) / sum, free of
      // the cancellation in p - 1 when p is near 1.
      out[target] = static_cast<float>(-scale * ((sum - expTarget) / sum));
    }
  });
}

void crossEntropyGradFromBlockStats(const float *logits, const int32_t *targets,
                                    float lossGrad, int64_t tokens,
                                    int64_t columns, int64_t firstColumn,
                                    const float *stats, int64_t blocks,
                                    float *logitsGrad) {
  if (tokens <= 0)
    return;
  double scale = double(lossGrad) / double(tokens);
  parallelFor(tokens, rowGrain(columns, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // The row's global max and sum of exps, combined in block order as
      // crossEntropyFromBlockStats does.
      float m = stats[3 * t];
      for (int64_t b = 1; b < blocks; ++b)
        m = std::max(m, stats[3 * (b * tokens + t)]);
      double sum = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float *block = stats + 3 * (b * tokens + t);
        sum += double(block[1]) * std::exp(double(block[0]) - double(m));
      }
      const float *row = logits + t * columns;
      float *out = logitsGrad + t * columns; // may be row
      int64_t target = int64_t(targets[t]) - firstColumn;
      double expTarget = target >= 0 && target < columns
                             ? std::exp(double(row[target]) - double(m))
                             : 0.0;
      expShiftedStore(row, m, out, columns);
      scaleInPlace(out, static_cast<float>(scale / sum), columns);
      if (target >= 0 && target < columns)
        out[target] = static_cast<float>(-scale * ((sum - expTarget) / sum));
    }
  });
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

namespace {

#ifdef __has_builtin
#if __has_builtin(__builtin_elementwise_sqrt)
#define TPC_HAS_ELEMENTWISE_SQRT
#endif
#endif

/// sqrt without errno, so that loops using it vectorise (std::sqrt is a
/// library call under the default -fmath-errno).
[[gnu::always_inline]] inline float sqrtNoErrno(float x) {
#ifdef TPC_HAS_ELEMENTWISE_SQRT
  return __builtin_elementwise_sqrt(x);
#else
  return std::sqrt(x);
#endif
}

void adamwRange(const float *param, const float *grad, const float *expAvg,
                const float *expAvgSq, float *newParam, float *newExpAvg,
                float *newExpAvgSq, int64_t n, float gradScale, float b1,
                float c1, float b2, float c2, float decay, float stepSize,
                float bc2Sqrt, float eps) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * gradScale;
    float m = b1 * expAvg[i] + c1 * g;
    float v = b2 * expAvgSq[i] + c2 * (g * g);
    // As torch: denom = sqrt(v) / sqrt(bc2) + eps, then
    // p = p (1 - lr wd) - (lr / bc1) m / denom.
    float denom = sqrtNoErrno(v) / bc2Sqrt + eps;
    float p = param[i] * decay - stepSize * (m / denom);
    newExpAvg[i] = m;
    newExpAvgSq[i] = v;
    newParam[i] = p;
  }
}

} // namespace

float normSquared(const float *in, int64_t count) {
  if (count <= 0)
    return 0.0f;
  constexpr int64_t kBlock = int64_t(1) << 16;
  int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      partial[size_t(b)] = sumSquaredDouble(
          in + b * kBlock, std::min(kBlock, count - b * kBlock), 0.0);
  });
  double sum = 0.0;
  for (double p : partial)
    sum += p;
  return static_cast<float>(sum);
}

namespace {
/// AdamW's per-step scalars: computed in double, as torch computes them in
/// Python, then rounded once.
struct AdamWScalars {
  float b1, c1, b2, c2, decay, stepSize, bc2Sqrt, eps;
  AdamWScalars(float lr, int64_t step, double beta1, double beta2,
               double epsilon, double weightDecay) {
    if (step < 1)
      throw std::runtime_error("adamw: step " + std::to_string(step) +
                               " is not 1-based");
    double bc1 = 1.0 - std::pow(beta1, double(step));
    double bc2 = 1.0 - std::pow(beta2, double(step));
    b1 = static_cast<float>(beta1);
    c1 = static_cast<float>(1.0 - beta1);
    b2 = static_cast<float>(beta2);
    c2 = static_cast<float>(1.0 - beta2);
    decay = static_cast<float>(1.0 - double(lr) * weightDecay);
    stepSize = static_cast<float>(double(lr) / bc1);
    bc2Sqrt = static_cast<float>(std::sqrt(bc2));
    eps = static_cast<float>(epsilon);
  }
};
} // namespace

void adamw(const float *param, const float *grad, const float *expAvg,
           const float *expAvgSq, float lr, int64_t step, float gradScale,
           double beta1, double beta2, double epsilon, double weightDecay,
           float *newParam, float *newExpAvg, float *newExpAvgSq,
           int64_t count) {
  const AdamWScalars k(lr, step, beta1, beta2, epsilon, weightDecay);
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    adamwRange(param + begin, grad + begin, expAvg + begin, expAvgSq + begin,
               newParam + begin, newExpAvg + begin, newExpAvgSq + begin,
               end - begin, gradScale, k.b1, k.c1, k.b2, k.c2, k.decay,
               k.stepSize, k.bc2Sqrt, k.eps);
  });
}

void adamwRows(float *param, const float *grad, float *expAvg, float *expAvgSq,
               const int32_t *rows, int64_t count, int64_t rowElements,
               float lr, int64_t step, float gradScale, double beta1,
               double beta2, double epsilon, double weightDecay) {
  const AdamWScalars k(lr, step, beta1, beta2, epsilon, weightDecay);
  parallelFor(count, rowGrain(rowElements), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (rows[i] < 0)
        continue;
      const int64_t at = int64_t(rows[i]) * rowElements;
      adamwRange(param + at, grad + at, expAvg + at, expAvgSq + at, param + at,
                 expAvg + at, expAvgSq + at, rowElements, gradScale, k.b1, k.c1,
                 k.b2, k.c2, k.decay, k.stepSize, k.bc2Sqrt, k.eps);
    }
  });
}

float normSquaredRows(const float *in, const int32_t *rows, int64_t count,
                      int64_t rowElements) {
  std::vector<double> perRow(size_t(std::max<int64_t>(count, 0)), 0.0);
  parallelFor(count, rowGrain(rowElements), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      if (rows[i] >= 0)
        perRow[size_t(i)] = sumSquaredDouble(
            in + int64_t(rows[i]) * rowElements, rowElements, 0.0);
  });
  double sum = 0.0;
  for (double row : perRow)
    sum += row;
  return static_cast<float>(sum);
}

float learningRate(int64_t step, float peak, float minLr, float warmup,
                   float decaySteps) {
  double s = double(step), p = double(peak), lo = double(minLr);
  double w = double(warmup), d = double(decaySteps);
  if (w > 0.0 && s <= w)
    return static_cast<float>(p * s / w);
  if (d <= w)
    return peak;
  if (s >= d)
    return minLr;
  double progress = (s - w) / (d - w);
  return static_cast<float>(
      lo + (p - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

float clipScale(float sumSquares, float maxNorm) {
  if (!(maxNorm > 0.0f))
    return 1.0f;
  double coef = double(maxNorm) / (std::sqrt(double(sumSquares)) + 1e-6);
  // NaN propagates (as torch's clamp does); +inf norms give 0.
  if (std::isnan(coef))
    return std::numeric_limits<float>::quiet_NaN();
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

} // namespace tpc::runtime::cpu
