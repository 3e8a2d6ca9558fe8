// Helpers shared by the CPU kernel tests (one file per kernel family:
// CpuForwardKernelsTest, CpuLayoutKernelsTest, CpuLossOptimizerKernelsTest,
// CpuBackwardKernelsTest, CpuParallelForTest): random inputs, tolerances,
// and the double-precision references more than one family checks against.
#pragma once

#include "tpc/runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace tpc::runtime::cpu::test {

using Dims = std::vector<int64_t>;

inline int64_t numel(const Dims &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// `run` must throw a std::runtime_error whose message is `message`.
inline void expectRuntimeError(const std::function<void()> &run,
                               const std::string &message) {
  try {
    run();
    ADD_FAILURE() << "no exception; expected: " << message;
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

inline std::vector<float> randomVector(int64_t n, std::mt19937 &rng,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = dist(rng);
  return v;
}

inline std::string dimsString(const Dims &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

/// |got - ref| <= tol * max|ref| everywhere.
inline ::testing::AssertionResult closeToMax(const std::vector<float> &got,
                                             const std::vector<double> &ref,
                                             double tol = 1e-5) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << ref.size();
  double scale = 0.0;
  for (double r : ref)
    scale = std::max(scale, std::abs(r));
  if (scale == 0.0)
    scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(double(got[i]) - ref[i]);
    if (!(err <= tol * scale))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", expected " << ref[i]
             << " (error " << err << ", allowed " << tol * scale << ")";
  }
  return ::testing::AssertionSuccess();
}

/// |got - ref| <= rel * |ref| + abs everywhere.
inline ::testing::AssertionResult
closeElementwise(const std::vector<float> &got, const std::vector<double> &ref,
                 double rel, double abs) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << ref.size();
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(double(got[i]) - ref[i]);
    if (!(err <= rel * std::abs(ref[i]) + abs))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", expected " << ref[i]
             << " (error " << err << ")";
  }
  return ::testing::AssertionSuccess();
}

/// Row-major multi-index of flat index `flat` in `shape`.
inline Dims unravel(int64_t flat, const Dims &shape) {
  Dims index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

/// Flat offset in an operand of `shape` (right-aligned against `index`,
/// size-1 dims broadcast) of the output element at `index`.
inline int64_t broadcastOffset(const Dims &index, const Dims &shape) {
  size_t lead = index.size() - shape.size();
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  return offset;
}

/// Naive batched matmul in double with NumPy batch broadcasting.
inline std::vector<double> refMatmul(const std::vector<float> &lhs,
                                     const Dims &ls, bool tl,
                                     const std::vector<float> &rhs,
                                     const Dims &rs, bool tr, const Dims &os) {
  size_t lr = ls.size(), orank = os.size();
  int64_t m = os[orank - 2], n = os[orank - 1];
  int64_t k = tl ? ls[lr - 2] : ls[lr - 1];
  Dims lb(ls.begin(), ls.end() - 2), rb(rs.begin(), rs.end() - 2),
      ob(os.begin(), os.end() - 2);
  int64_t batch = numel(ob);
  std::vector<double> out(size_t(batch * m * n), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    Dims index = unravel(b, ob);
    int64_t lo = broadcastOffset(index, lb) * m * k;
    int64_t ro = broadcastOffset(index, rb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double a = lhs[size_t(lo + (tl ? p * m + i : i * k + p))];
          double c = rhs[size_t(ro + (tr ? j * k + p : p * n + j))];
          acc += a * c;
        }
        out[size_t((b * m + i) * n + j)] = acc;
      }
  }
  return out;
}

struct MatmulCase {
  Dims lhs;
  bool tl;
  Dims rhs;
  bool tr;
  Dims out;
};

inline std::vector<float> activationInputs(std::mt19937 &rng, int64_t n) {
  std::vector<float> in = randomVector(n, rng, -8.0f, 8.0f);
  // Edge values: 0, tiny, saturated, and beyond exp's range.
  std::vector<float> edges = {0.0f,    1e-6f,  -1e-6f, 1e-3f,  -1e-3f,
                              20.0f,   -20.0f, 50.0f,  -50.0f, 100.0f,
                              -100.0f, 1e4f,   -1e4f,  3.0f,   -3.0f};
  std::copy(edges.begin(), edges.end(), in.begin());
  return in;
}

inline std::vector<double> refSoftmax(const std::vector<float> &x, int64_t rows,
                                      int64_t cols, bool causal) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t visible = causal ? r % cols + 1 : cols;
    const float *row = x.data() + r * cols;
    double m = row[0];
    for (int64_t i = 0; i < visible; ++i)
      m = std::max(m, double(row[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < visible; ++i)
      sum += std::exp(row[i] - m);
    for (int64_t i = 0; i < visible; ++i)
      y[size_t(r * cols + i)] = std::exp(row[i] - m) / sum;
  }
  return y;
}

/// d/dx of sum(resultGrad * f(x)) at element i by central differences of a
/// forward kernel: f is evaluated on x with x[i] moved by about +-h (the step
/// actually taken after rounding to float is what we divide by), and the
/// objective is formed in double.
template <typename Objective>
inline double centralDifference(std::vector<float> &x, size_t i, double h,
                                const Objective &objective) {
  float original = x[i];
  x[i] = static_cast<float>(double(original) + h);
  float up = x[i];
  double plus = objective();
  x[i] = static_cast<float>(double(original) - h);
  float down = x[i];
  double minus = objective();
  x[i] = original;
  return (plus - minus) / (double(up) - double(down));
}

/// Double-precision layer norm of x [rows, cols] (two-pass variance).
inline std::vector<double> refLayerNorm(const std::vector<float> &x,
                                        const std::vector<float> &gamma,
                                        const std::vector<float> &beta,
                                        int64_t rows, int64_t cols,
                                        double eps) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      mean += row[i];
    mean /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    var /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      ref[size_t(r * cols + i)] =
          (row[i] - mean) / std::sqrt(var + eps) * gamma[size_t(i)] +
          beta[size_t(i)];
  }
  return ref;
}

/// Double-precision RMS norm of x [rows, cols].
inline std::vector<double> refRmsNorm(const std::vector<float> &x,
                                      const std::vector<float> &gamma,
                                      int64_t rows, int64_t cols, double eps) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x.data() + r * cols;
    double ms = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      ms += double(row[i]) * row[i];
    ms /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      ref[size_t(r * cols + i)] =
          row[i] / std::sqrt(ms + eps) * gamma[size_t(i)];
  }
  return ref;
}

/// layerNorm's gradients from the analytic formula, in double.
inline void refLayerNormGrad(const std::vector<float> &dy,
                             const std::vector<float> &x,
                             const std::vector<float> &gamma, int64_t rows,
                             int64_t cols, double eps, std::vector<double> &dx,
                             std::vector<double> &dgamma,
                             std::vector<double> &dbeta) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<size_t>(cols), 0.0);
  dbeta.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * cols;
    const float *gr = dy.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      mean += xr[i];
    mean /= double(cols);
    for (int64_t i = 0; i < cols; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(cols);
    double rstd = 1.0 / std::sqrt(var + eps);
    std::vector<double> xhat(static_cast<size_t>(cols)),
        dxhat(static_cast<size_t>(cols));
    double meanDxhat = 0.0, meanDxhatXhat = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      xhat[size_t(i)] = (xr[i] - mean) * rstd;
      dxhat[size_t(i)] = double(gr[i]) * gamma[size_t(i)];
      meanDxhat += dxhat[size_t(i)] / double(cols);
      meanDxhatXhat += dxhat[size_t(i)] * xhat[size_t(i)] / double(cols);
      dgamma[size_t(i)] += double(gr[i]) * xhat[size_t(i)];
      dbeta[size_t(i)] += gr[i];
    }
    for (int64_t i = 0; i < cols; ++i)
      dx[size_t(r * cols + i)] = rstd * (dxhat[size_t(i)] - meanDxhat -
                                         xhat[size_t(i)] * meanDxhatXhat);
  }
}

/// rmsNorm's gradients through its Jacobian, in double:
/// dy_j/dx_i = gamma_j r (delta_ij - x_i x_j r^2 / n).
inline void refRmsNormGrad(const std::vector<float> &dy,
                           const std::vector<float> &x,
                           const std::vector<float> &gamma, int64_t rows,
                           int64_t cols, double eps, std::vector<double> &dx,
                           std::vector<double> &dgamma) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * cols;
    const float *gr = dy.data() + r * cols;
    double ms = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      ms += double(xr[i]) * xr[i];
    ms /= double(cols);
    double rr = 1.0 / std::sqrt(ms + eps);
    for (int64_t i = 0; i < cols; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        double jac = gamma[size_t(j)] * rr *
                     ((i == j ? 1.0 : 0.0) -
                      double(xr[i]) * xr[j] * rr * rr / double(cols));
        sum += gr[j] * jac;
      }
      dx[size_t(r * cols + i)] = sum;
      dgamma[size_t(i)] += double(gr[i]) * xr[i] * rr;
    }
  }
}

/// Gradient of the mean cross-entropy, in double:
/// (softmax - onehot) * lossGrad / tokens.
inline std::vector<double>
refCrossEntropyGrad(const std::vector<float> &logits, int64_t tokens,
                    int64_t vocab, const std::vector<int32_t> &targets,
                    double lossGrad) {
  std::vector<double> grad(logits.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const float *row = logits.data() + t * vocab;
    double m = row[0];
    for (int64_t i = 0; i < vocab; ++i)
      m = std::max(m, double(row[i]));
    double sum = 0.0, others = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      sum += std::exp(row[i] - m);
      if (i != targets[size_t(t)])
        others += std::exp(row[i] - m);
    }
    for (int64_t i = 0; i < vocab; ++i) {
      double g =
          i == targets[size_t(t)] ? -others / sum : std::exp(row[i] - m) / sum;
      grad[size_t(t * vocab + i)] = g * lossGrad / double(tokens);
    }
  }
  return grad;
}

} // namespace tpc::runtime::cpu::test
