// Tests of the layout kernels (transpose, slice, reduce, pad, fill) against
// straightforward double-precision references (naive loops over
// multi-indices) on random inputs with odd sizes, chosen so that both the
// single-chunk and the threaded paths of each kernel run.
#include "CpuKernelsTestSupport.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <numbers>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace tpc::runtime::cpu;
using namespace tpc::runtime::cpu::test;

namespace {

void checkTranspose(const Dims &inShape, const Dims &perm, std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " perm " + dimsString(perm));
  std::vector<float> in = randomVector(numel(inShape), rng);
  Dims outShape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    outShape[i] = inShape[size_t(perm[i])];
  std::vector<float> out(in.size(), 99.0f);
  transpose(in.data(), inShape, perm, out.data());
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims outIndex = unravel(o, outShape);
    Dims inIndex(inShape.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inIndex[size_t(perm[i])] = outIndex[i];
    int64_t src = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      src = src * inShape[d] + inIndex[d];
    ASSERT_EQ(out[size_t(o)], in[size_t(src)]) << "output element " << o;
  }
}

TEST(CpuKernels, Transpose) {
  std::mt19937 rng(19);
  checkTranspose({7, 13}, {1, 0}, rng);
  checkTranspose({7, 13}, {0, 1}, rng);
  checkTranspose({2, 3, 4, 5}, {0, 2, 1, 3}, rng);
  checkTranspose({2, 3, 4, 5}, {0, 1, 3, 2}, rng);
  checkTranspose({2, 3, 4, 5}, {3, 1, 0, 2}, rng);
  checkTranspose({2, 3, 4, 5}, {3, 2, 1, 0}, rng);
  checkTranspose({2, 3, 1, 4, 5}, {4, 0, 3, 2, 1}, rng);
  checkTranspose({2, 3, 1, 4, 5}, {1, 0, 2, 3, 4}, rng);
  checkTranspose({3, 1, 5, 2, 4}, {2, 4, 0, 1, 3}, rng);
  checkTranspose({2, 1, 3, 2, 3, 2}, {5, 2, 0, 4, 1, 3}, rng);
  checkTranspose({1, 7, 1}, {2, 1, 0}, rng);
  checkTranspose({5}, {0}, rng);
  checkTranspose({}, {}, rng);
  // Threaded: row copies and tiled.
  checkTranspose({4, 96, 12, 40}, {0, 2, 1, 3}, rng);
  checkTranspose({64, 96, 40}, {2, 0, 1}, rng);
  checkTranspose({3, 200, 70}, {0, 2, 1}, rng);
  checkTranspose({333, 257}, {1, 0}, rng);
}

void checkSlice(const Dims &inShape, const Dims &offsets, const Dims &outShape,
                std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " offsets " + dimsString(offsets) +
               " out " + dimsString(outShape));
  std::vector<float> in = randomVector(numel(inShape), rng);
  std::vector<float> out(size_t(numel(outShape)), 99.0f);
  slice(in.data(), inShape, offsets, out.data(), outShape);
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims index = unravel(o, outShape);
    int64_t src = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      src = src * inShape[d] + index[d] + offsets[d];
    ASSERT_EQ(out[size_t(o)], in[size_t(src)]) << "output element " << o;
  }
}

TEST(CpuKernels, Slice) {
  std::mt19937 rng(20);
  checkSlice({7, 13}, {2, 3}, {4, 5}, rng);
  checkSlice({7, 13}, {0, 0}, {7, 13}, rng);
  checkSlice({7, 13}, {6, 12}, {1, 1}, rng);
  checkSlice({7, 13}, {2, 0}, {3, 13}, rng);
  checkSlice({2, 3, 4, 5}, {1, 0, 1, 0}, {1, 3, 2, 5}, rng);
  checkSlice({2, 3, 4, 5}, {0, 1, 0, 2}, {2, 2, 4, 3}, rng);
  checkSlice({3, 2, 4, 1, 5}, {1, 1, 0, 0, 1}, {2, 1, 4, 1, 3}, rng);
  checkSlice({2, 3, 2, 3, 2, 3}, {1, 1, 0, 1, 1, 0}, {1, 2, 2, 2, 1, 2}, rng);
  checkSlice({}, {}, {}, rng);
  // Threaded: many rows, and one long row.
  checkSlice({3, 2048, 96}, {0, 0, 32}, {3, 2048, 32}, rng);
  checkSlice({400000}, {1234}, {300000}, rng);
}

void checkReduce(const Dims &inShape, const Dims &dims, bool mean,
                 std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " dims " + dimsString(dims) +
               (mean ? " mean" : " sum"));
  std::vector<float> in = randomVector(numel(inShape), rng, -1.0f, 2.0f);
  Dims outShape;
  std::vector<bool> reduced(inShape.size(), false);
  for (int64_t d : dims)
    reduced[size_t(d)] = true;
  int64_t count = 1;
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (reduced[d])
      count *= inShape[d];
    else
      outShape.push_back(inShape[d]);
  }
  std::vector<double> ref(size_t(numel(outShape)), 0.0);
  for (int64_t i = 0; i < numel(inShape); ++i) {
    Dims index = unravel(i, inShape);
    int64_t o = 0;
    for (size_t d = 0; d < inShape.size(); ++d)
      if (!reduced[d])
        o = o * inShape[d] + index[d];
    ref[size_t(o)] += in[size_t(i)];
  }
  if (mean)
    for (double &r : ref)
      r /= double(count);
  std::vector<float> out(ref.size(), 99.0f);
  reduce(in.data(), inShape, dims, mean, out.data());
  EXPECT_TRUE(closeToMax(out, ref));
}

TEST(CpuKernels, Reduce) {
  std::mt19937 rng(21);
  std::vector<std::pair<Dims, Dims>> cases = {
      {{7, 13}, {1}},
      {{7, 13}, {0}},
      {{7, 13}, {0, 1}},
      {{7, 13}, {}},
      {{2, 3, 4, 5}, {1}},
      {{2, 3, 4, 5}, {0, 2}},
      {{2, 3, 4, 5}, {3}},
      {{2, 3, 4, 5}, {1, 2}},
      {{2, 3, 4, 5}, {0, 3}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}},
      {{2, 3, 4, 5}, {1, 3}},
      {{3, 1, 4, 1, 5}, {1, 2}},
      {{3, 1, 4, 1, 5}, {0, 4}},
      {{3, 1, 4, 1, 5}, {1, 3}},
      {{2, 3, 2, 3, 2, 3}, {0, 2, 5}},
      {{1}, {0}},
      // Threaded.
      {{301, 257}, {0}},
      {{301, 257}, {1}},
      {{64, 33, 129}, {0, 2}},
      {{4, 65, 1000}, {1}},
      {{300000}, {0}},
      {{3, 200000}, {1}},
  };
  for (const auto &[shape, dims] : cases)
    for (bool mean : {false, true})
      checkReduce(shape, dims, mean, rng);
}

void checkPad(const Dims &inShape, const Dims &offsets, const Dims &outShape,
              std::mt19937 &rng) {
  SCOPED_TRACE("in " + dimsString(inShape) + " offsets " + dimsString(offsets) +
               " out " + dimsString(outShape));
  std::vector<float> in = randomVector(numel(inShape), rng, 1.0f, 2.0f);
  std::vector<float> out(static_cast<size_t>(numel(outShape)), 99.0f);
  pad(in.data(), inShape, offsets, out.data(), outShape);
  for (int64_t o = 0; o < numel(outShape); ++o) {
    Dims index = unravel(o, outShape);
    bool inside = true;
    int64_t src = 0;
    for (size_t d = 0; d < outShape.size(); ++d) {
      int64_t i = index[d] - offsets[d];
      inside = inside && i >= 0 && i < inShape[d];
      src = src * inShape[d] + i;
    }
    ASSERT_EQ(out[size_t(o)], inside ? in[size_t(src)] : 0.0f)
        << "output element " << o;
  }
  // pad is the adjoint of slice: slicing the window back gives the input.
  std::vector<float> back(in.size(), 99.0f);
  slice(out.data(), outShape, offsets, back.data(), inShape);
  EXPECT_EQ(back, in);
}

TEST(CpuKernels, Pad) {
  std::mt19937 rng(42);
  checkPad({4, 5}, {2, 3}, {7, 13}, rng);
  checkPad({7, 13}, {0, 0}, {7, 13}, rng);
  checkPad({1, 1}, {6, 12}, {7, 13}, rng);
  checkPad({3, 13}, {2, 0}, {7, 13}, rng);
  checkPad({7, 4}, {0, 0}, {7, 13}, rng);
  checkPad({1, 3, 2, 5}, {1, 0, 1, 0}, {2, 3, 4, 5}, rng);
  checkPad({2, 2, 4, 3}, {0, 1, 0, 2}, {2, 3, 4, 5}, rng);
  // Rank 5, with zero offsets and a partial outer dim.
  checkPad({2, 1, 4, 1, 3}, {1, 1, 0, 0, 1}, {3, 2, 4, 1, 5}, rng);
  checkPad({2, 3, 4, 2, 5}, {0, 0, 0, 0, 0}, {3, 3, 4, 3, 5}, rng);
  checkPad({1, 2, 2, 2, 1, 2}, {1, 1, 0, 1, 1, 0}, {2, 3, 2, 3, 2, 3}, rng);
  checkPad({}, {}, {}, rng);
  checkPad({0, 5}, {1, 0}, {3, 5}, rng);
  checkPad({2, 0}, {0, 0}, {2, 0}, rng);
  // Threaded: many rows (q/k/v gradient into [.., 3 * hidden]), one long row.
  checkPad({3, 2048, 32}, {0, 0, 32}, {3, 2048, 96}, rng);
  checkPad({300000}, {1234}, {400000}, rng);
  checkPad({3, 100000}, {0, 7}, {3, 100009}, rng);
}

TEST(CpuKernels, PadRejectsBadWindows) {
  std::vector<float> in(6), out(20);
  Dims inShape = {2, 3}, outShape = {4, 5};
  Dims offsets = {2, 3};
  expectRuntimeError(
      [&] { pad(in.data(), inShape, offsets, out.data(), outShape); },
      "pad: window 3+3 of dim 1 exceeds its size 5");
  Dims negative = {-1, 0}, shortOffsets = {0};
  EXPECT_THROW(pad(in.data(), inShape, negative, out.data(), outShape),
               std::runtime_error);
  EXPECT_THROW(pad(in.data(), inShape, shortOffsets, out.data(), outShape),
               std::runtime_error);
}

TEST(CpuKernels, Fill) {
  for (int64_t n : {0, 1, 13, 100003}) {
    std::vector<float> out(static_cast<size_t>(n) + 1, 99.0f);
    fill(-2.5f, out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[size_t(i)], -2.5f) << i;
    EXPECT_EQ(out[size_t(n)], 99.0f); // nothing past the end
  }
}

} // namespace
