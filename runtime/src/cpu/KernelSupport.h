// Helpers shared by the CPU kernel families (ForwardKernels.cpp,
// LayoutKernels.cpp, LossOptimizerKernels.cpp, BackwardKernels.cpp): inline so
// that each family's loops still vectorise with them.
//
// Conventions used throughout:
//  * Inner loops are plain counted loops over contiguous memory with
//    __restrict pointers and no calls, so clang/GCC vectorise them for
//    x86-64-v3 (AVX2 + FMA).
//  * In place: scale, gelu, silu, binary (out == an operand of the output's
//    shape), layerNorm, rmsNorm, softmax and rotary accept out == in. Their
//    in/out loops carry TPC_INDEPENDENT_LOOP instead of __restrict on the
//    in/out pair: iteration i only reads and writes element i, so there is no
//    loop-carried dependence and they vectorise without runtime alias checks
//    (a __restrict there would be undefined behaviour for out == in, and
//    compilers do exploit it). No other overlap is allowed.
//  * Floating-point reductions (sum, max) vectorise without -ffast-math via
//    TPC_REDUCTION_LOOP (or explicit lanes on non-clang compilers); norms,
//    softmax denominators, reduce and cross-entropy accumulate in double.
//  * exp is a Cephes-style polynomial (fastExp) that vectorises; std::exp is
//    only used outside inner loops.
//  * Work is split with parallelFor over rows/elements; the split never
//    changes what a given output element is computed from or in which order,
//    so results do not depend on the thread count.
#pragma once

#include "tpc/runtime/cpu/Kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime::cpu::detail {

/// Elements per parallel chunk for cheap elementwise work.
inline constexpr int64_t kElementGrain = int64_t(1) << 15;

/// Rows per chunk so that a chunk holds about `elements` elements.
inline int64_t rowGrain(int64_t cols, int64_t elements = kElementGrain) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(cols, 1));
}

/// exp(x) for float, Cephes expf: x = n ln2 + r with |r| <= ln2/2,
/// exp(r) by a degree-7 polynomial, 2^n built in the exponent bits. Max
/// relative error about 1.5 ulp over the normal range; NaN propagates; about
/// 2.4e38 (not inf) above 88.376. Below ln(FLT_MIN) the result is exactly 0
/// if kZeroBelow, else FLT_MIN (cheaper; fine where it is added to 1).
template <bool kZeroBelow = true>
[[gnu::always_inline]] inline float fastExp(float x) {
  constexpr float kHi = 88.3762626647949f;
  constexpr float kLo = -87.3365447505531f; // ln(FLT_MIN)
  // Adding 1.5 * 2^23 rounds to an integer kept in the low mantissa bits;
  // the extra 127 pre-biases it as an exponent.
  constexpr float kRound = 12582912.0f + 127.0f;
  float c = x > kHi ? kHi : x;
  c = c < kLo ? kLo : c;
  float t = c * 1.44269504088896341f + kRound;
  float n = t - kRound; // round(c / ln2), in [-126, 127]
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // The low mantissa bits of t hold n + 127; shifting them into the exponent
  // field drops everything above, giving 2^n.
  float scale = std::bit_cast<float>(std::bit_cast<uint32_t>(t) << 23);
  float result = p * scale;
  if constexpr (kZeroBelow)
    return x < kLo ? 0.0f : result;
  else
    return result;
}

// Marks a loop whose iterations touch disjoint elements, though its input and
// output may be the same buffer.
#if defined(__clang__)
#define TPC_INDEPENDENT_LOOP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TPC_INDEPENDENT_LOOP _Pragma("GCC ivdep")
#else
#define TPC_INDEPENDENT_LOOP
#endif

// Floating-point reductions only vectorise if the compiler may reorder
// them. Clang does so for a loop with an explicit vectorize pragma (no
// -ffast-math needed); elsewhere, independent lanes give the same effect.
// Sums are accumulated in double, so the reordering is harmless.
#if defined(__clang__)
// Unoptimised or instrumented builds may not vectorise; that is no error.
#pragma clang diagnostic ignored "-Wpass-failed"
#define TPC_REDUCTION_LOOP                                                     \
  _Pragma("clang loop vectorize(enable) interleave(enable)")
#endif

/// Sum of x[0..n) in double.
[[gnu::always_inline]] inline double sumDouble(const float *__restrict x,
                                               int64_t n) {
#ifdef TPC_REDUCTION_LOOP
  double sum = 0.0;
  TPC_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i]);
  return sum;
#else
  constexpr int64_t kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      acc[l] += static_cast<double>(x[i + l]);
  double sum = 0.0;
  for (int64_t l = 0; l < kLanes; ++l)
    sum += acc[l];
  for (; i < n; ++i)
    sum += static_cast<double>(x[i]);
  return sum;
#endif
}

/// Sum of (x[i] - shift)^2 in double.
[[gnu::always_inline]] inline double sumSquaredDouble(const float *__restrict x,
                                                      int64_t n, double shift) {
#ifdef TPC_REDUCTION_LOOP
  double sum = 0.0;
  TPC_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(x[i]) - shift;
    sum += d * d;
  }
  return sum;
#else
  constexpr int64_t kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      double d = static_cast<double>(x[i + l]) - shift;
      acc[l] += d * d;
    }
  double sum = 0.0;
  for (int64_t l = 0; l < kLanes; ++l)
    sum += acc[l];
  for (; i < n; ++i) {
    double d = static_cast<double>(x[i]) - shift;
    sum += d * d;
  }
  return sum;
#endif
}

/// max of x[0..n) (-inf for n == 0); NaNs are skipped. Independent lanes
/// (compiled to vmaxps) beat a vectorised fmax, which must blend for NaNs.
[[gnu::always_inline]] inline float maxFloat(const float *__restrict x,
                                             int64_t n) {
  constexpr int64_t kLanes = 32;
  float acc[kLanes];
  for (int64_t l = 0; l < kLanes; ++l)
    acc[l] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i)
    m = x[i] > m ? x[i] : m;
  for (int64_t l = 0; l < kLanes; ++l)
    m = acc[l] > m ? acc[l] : m;
  return m;
}

/// y[i] = exp(x[i] - shift).
[[gnu::always_inline]] inline void expShifted(const float *x, float shift,
                                              float *y, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastExp(x[i] - shift);
}

/// sum_i exp(x[i] - shift) in double, through a stack buffer so both loops
/// vectorise.
inline double sumExpShifted(const float *__restrict x, float shift, int64_t n) {
  constexpr int64_t kBlock = 512;
  alignas(64) float buffer[kBlock];
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t len = std::min(kBlock, n - b);
    expShifted(x + b, shift, buffer, len);
    total += sumDouble(buffer, len);
  }
  return total;
}

/// Rows per block of the norm gradients' gamma/beta partial sums: a function
/// of the shape only, never of the thread count.
inline int64_t normGradBlockRows(int64_t cols) { return rowGrain(cols); }

/// out[c] = sum over blocks b, in order, of partial[b * stride + offset + c],
/// for c < cols.
inline void combineBlocks(const std::vector<double> &partial, int64_t blocks,
                          int64_t stride, int64_t offset, int64_t cols,
                          float *out) {
  parallelFor(cols, rowGrain(blocks), [&](int64_t begin, int64_t end) {
    std::vector<double> sum(size_t(end - begin), 0.0);
    double *__restrict acc = sum.data();
    for (int64_t b = 0; b < blocks; ++b) {
      const double *__restrict src =
          partial.data() + b * stride + offset + begin;
      for (int64_t c = 0; c < end - begin; ++c)
        acc[c] += src[c];
    }
    for (int64_t c = 0; c < end - begin; ++c)
      out[begin + c] = static_cast<float>(acc[c]);
  });
}

inline int64_t product(Shape shape) {
  int64_t p = 1;
  for (int64_t d : shape)
    p *= d;
  return p;
}

inline std::vector<int64_t> contiguousStrides(Shape shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

inline std::string shapeString(Shape shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d)
      s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

/// Throws "KERNEL: WHAT ID of token T is outside [0, LIMIT)" for the first
/// index outside [0, limit).
inline void checkIndices(const char *kernel, const char *what,
                         const int32_t *indices, int64_t count, int64_t limit) {
  for (int64_t t = 0; t < count; ++t)
    if (indices[t] < 0 || indices[t] >= limit)
      throw std::runtime_error(std::string(kernel) + ": " + what + " " +
                               std::to_string(indices[t]) + " of token " +
                               std::to_string(t) + " is outside [0, " +
                               std::to_string(limit) + ")");
}

/// Checks that `window` at `offsets` lies inside `whole` (slice reads such a
/// window, pad writes one); throws "KERNEL: ..." otherwise.
inline void checkWindow(const char *kernel, Shape whole, Shape window,
                        std::span<const int64_t> offsets) {
  size_t rank = whole.size();
  if (offsets.size() != rank || window.size() != rank)
    throw std::runtime_error(std::string(kernel) + ": rank mismatch");
  for (size_t d = 0; d < rank; ++d)
    if (offsets[d] < 0 || window[d] < 0 || offsets[d] + window[d] > whole[d])
      throw std::runtime_error(
          std::string(kernel) + ": window " + std::to_string(offsets[d]) + "+" +
          std::to_string(window[d]) + " of dim " + std::to_string(d) +
          " exceeds its size " + std::to_string(whole[d]));
}

/// acc[i] += x[i].
inline void accumulateRow(const float *__restrict x, double *__restrict acc,
                          int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    acc[i] += static_cast<double>(x[i]);
}

inline void scaleInPlace(float *__restrict y, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] *= factor;
}

// Loops that mix a double reduction with other work: vectorised by clang's
// pragma; elsewhere they stay scalar (same results, slower).
#ifdef TPC_REDUCTION_LOOP
#define TPC_MIXED_REDUCTION_LOOP TPC_REDUCTION_LOOP
#else
#define TPC_MIXED_REDUCTION_LOOP
#endif

/// Sum of a[i] * b[i] in double.
[[gnu::always_inline]] inline double
dotDouble(const float *__restrict a, const float *__restrict b, int64_t n) {
  double sum = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return sum;
}

/// y[i] = exp(x[i] - shift) (y may be x); returns their sum in double, formed
/// exactly as sumExpShifted forms it, so crossEntropyGrad's softmax
/// denominator is bit-identical to crossEntropy's.
inline double expShiftedStore(const float *x, float shift, float *y,
                              int64_t n) {
  constexpr int64_t kBlock = 512;
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t len = std::min(kBlock, n - b);
    expShifted(x + b, shift, y + b, len);
    total += sumDouble(y + b, len);
  }
  return total;
}

} // namespace tpc::runtime::cpu::detail
