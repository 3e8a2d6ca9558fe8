// CPU kernels: layout (transpose, slice, pad: f32 and bf16; reduce, fill:
// f32). See
// Kernels.h for the semantics of each function and KernelSupport.h for the
// conventions they share.

#include "KernelSupport.h"

namespace tpc::runtime::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// transpose / slice / reduce
//===----------------------------------------------------------------------===//

namespace {

template <typename T>
void transposeElements(const T *in, Shape inShape,
                       std::span<const int64_t> perm, T *out) {
  size_t rank = inShape.size();
  if (perm.size() != rank)
    throw std::runtime_error("transpose: permutation size " +
                             std::to_string(perm.size()) + " != rank " +
                             std::to_string(rank));
  std::vector<bool> used(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(rank) || used[size_t(p)])
      throw std::runtime_error("transpose: invalid permutation");
    used[size_t(p)] = true;
  }
  int64_t total = product(inShape);
  if (total == 0)
    return;
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  // Output dims (size, input stride), size-1 dims dropped, and output dims
  // that are also adjacent in the input merged.
  std::vector<int64_t> sizes, strides;
  for (size_t i = 0; i < rank; ++i) {
    int64_t size = inShape[size_t(perm[i])];
    int64_t stride = inStrides[size_t(perm[i])];
    if (size == 1)
      continue;
    if (!sizes.empty() && strides.back() == stride * size) {
      sizes.back() *= size;
      strides.back() = stride;
      continue;
    }
    sizes.push_back(size);
    strides.push_back(stride);
  }
  if (sizes.size() <= 1) {
    // Identity up to size-1 dims.
    parallelFor(total, kElementGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(out + begin, in + begin, sizeof(T) * size_t(end - begin));
    });
    return;
  }
  size_t n = sizes.size();
  std::vector<int64_t> outStrides = contiguousStrides(sizes);

  if (strides.back() == 1) {
    // The innermost output dim is contiguous in the input: copy rows.
    int64_t rowLen = sizes.back();
    int64_t rows = total / rowLen;
    parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
      std::vector<int64_t> index(n - 1);
      int64_t offset = 0, rest = begin;
      for (size_t d = n - 1; d-- > 0;) {
        index[d] = rest % sizes[d];
        rest /= sizes[d];
        offset += index[d] * strides[d];
      }
      for (int64_t row = begin; row < end; ++row) {
        std::memcpy(out + row * rowLen, in + offset,
                    sizeof(T) * size_t(rowLen));
        for (size_t d = n - 1; d-- > 0;) {
          offset += strides[d];
          if (++index[d] < sizes[d])
            break;
          offset -= strides[d] * sizes[d];
          index[d] = 0;
        }
      }
    });
    return;
  }

  // Tiled 2-D transpose between output dim p (contiguous in the input) and
  // the innermost output dim q, for every index of the other dims.
  size_t q = n - 1;
  size_t p = 0;
  while (strides[p] != 1)
    ++p;
  constexpr int64_t kTile = 32;
  int64_t sizeP = sizes[p], sizeQ = sizes[q];
  int64_t inStrideQ = strides[q], outStrideP = outStrides[p];
  std::vector<size_t> others;
  for (size_t d = 0; d < q; ++d)
    if (d != p)
      others.push_back(d);
  int64_t blocksP = (sizeP + kTile - 1) / kTile;
  int64_t units = total / (sizeP * sizeQ) * blocksP;
  parallelFor(units, rowGrain(kTile * sizeQ), [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t outer = unit / blocksP;
      int64_t p0 = unit % blocksP * kTile;
      int64_t p1 = std::min(sizeP, p0 + kTile);
      int64_t inBase = 0, outBase = 0;
      for (size_t j = others.size(); j-- > 0;) {
        size_t d = others[j];
        int64_t idx = outer % sizes[d];
        outer /= sizes[d];
        inBase += idx * strides[d];
        outBase += idx * outStrides[d];
      }
      for (int64_t q0 = 0; q0 < sizeQ; q0 += kTile) {
        int64_t q1 = std::min(sizeQ, q0 + kTile);
        for (int64_t ip = p0; ip < p1; ++ip) {
          const T *__restrict src = in + inBase + ip;
          T *__restrict dst = out + outBase + ip * outStrideP;
          for (int64_t iq = q0; iq < q1; ++iq)
            dst[iq] = src[iq * inStrideQ];
        }
      }
    }
  });
}

} // namespace

namespace {

/// Copies the window of `whole` at `offsets` (of `window`'s shape) out of it
/// (`fromWhole`) or into it: slice and insert share the row walk.
template <typename T>
void copyWindow(const char *what, T *whole, Shape wholeShape, T *window,
                Shape windowShape, std::span<const int64_t> offsets,
                bool fromWhole) {
  size_t rank = wholeShape.size();
  checkWindow(what, wholeShape, windowShape, offsets);
  int64_t total = product(windowShape);
  if (total == 0)
    return;
  std::vector<int64_t> wholeStrides = contiguousStrides(wholeShape);
  auto copy = [&](int64_t windowAt, int64_t wholeAt, int64_t count) {
    T *to = fromWhole ? window + windowAt : whole + wholeAt;
    const T *from = fromWhole ? whole + wholeAt : window + windowAt;
    std::memcpy(to, from, sizeof(T) * size_t(count));
  };
  // Rows: the innermost dims copied in full plus the first partial one going
  // outward are contiguous in both tensors.
  size_t k = rank;
  int64_t rowLen = 1;
  while (k > 0) {
    --k;
    rowLen *= windowShape[k];
    if (windowShape[k] != wholeShape[k])
      break;
  }
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d)
    base += offsets[d] * wholeStrides[d];
  int64_t rows = total / rowLen;
  if (rows == 1) {
    parallelFor(rowLen, kElementGrain, [&](int64_t begin, int64_t end) {
      copy(begin, base + begin, end - begin);
    });
    return;
  }
  parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(k);
    int64_t offset = base, rest = begin;
    for (size_t d = k; d-- > 0;) {
      index[d] = rest % windowShape[d];
      rest /= windowShape[d];
      offset += index[d] * wholeStrides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      copy(row * rowLen, offset, rowLen);
      for (size_t d = k; d-- > 0;) {
        offset += wholeStrides[d];
        if (++index[d] < windowShape[d])
          break;
        offset -= wholeStrides[d] * windowShape[d];
        index[d] = 0;
      }
    }
  });
}

} // namespace

namespace {

template <typename T>
void sliceElements(const T *in, Shape inShape, std::span<const int64_t> offsets,
                   T *out, Shape outShape) {
  // Read only: fromWhole never writes `whole`.
  copyWindow("slice", const_cast<T *>(in), inShape, out, outShape, offsets,
             /*fromWhole=*/true);
}

template <typename T>
void insertElements(const T *in, Shape inShape,
                    std::span<const int64_t> offsets, T *out, Shape outShape) {
  copyWindow("insert", out, outShape, const_cast<T *>(in), inShape, offsets,
             /*fromWhole=*/false);
}

} // namespace

namespace {

/// Merged dims of a reduction: alternating kept/reduced groups.
struct ReduceGroup {
  int64_t size;
  int64_t inStride;
  int64_t outStride; // 0 for reduced groups
  bool reduced;
};

/// Adds the input under `in` for groups [g, end) into acc, whose offsets are
/// relative to the first output element this walk covers.
void reduceWalk(const std::vector<ReduceGroup> &groups, size_t g,
                const float *in, double *acc) {
  const ReduceGroup &group = groups[g];
  if (g + 1 == groups.size()) {
    if (group.reduced)
      acc[0] += sumDouble(in, group.size);
    else
      accumulateRow(in, acc, group.size);
    return;
  }
  for (int64_t i = 0; i < group.size; ++i)
    reduceWalk(groups, g + 1, in + i * group.inStride,
               acc + i * group.outStride);
}

/// Writes elements [begin, end) of a row of zeros holding src[0, len) at
/// [lo, lo + len).
template <typename T>
void padSegment(const T *src, int64_t lo, int64_t len, T *row, int64_t begin,
                int64_t end) {
  int64_t zeroEnd = std::min(end, lo);
  if (begin < zeroEnd)
    std::memset(row + begin, 0, sizeof(T) * size_t(zeroEnd - begin));
  int64_t copyBegin = std::max(begin, lo);
  int64_t copyEnd = std::min(end, lo + len);
  if (copyBegin < copyEnd)
    std::memcpy(row + copyBegin, src + (copyBegin - lo),
                sizeof(T) * size_t(copyEnd - copyBegin));
  int64_t zeroBegin = std::max(begin, lo + len);
  if (zeroBegin < end)
    std::memset(row + zeroBegin, 0, sizeof(T) * size_t(end - zeroBegin));
}

} // namespace

void reduce(const float *in, Shape inShape, std::span<const int64_t> dims,
            bool mean, float *out) {
  size_t rank = inShape.size();
  std::vector<bool> reduced(rank, false);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= int64_t(rank) ||
        (i > 0 && dims[i] <= dims[i - 1]))
      throw std::runtime_error("reduce: dims must be strictly increasing "
                               "and within the rank");
    reduced[size_t(dims[i])] = true;
  }
  int64_t outCount = 1, reduceCount = 1;
  for (size_t d = 0; d < rank; ++d)
    (reduced[d] ? reduceCount : outCount) *= inShape[d];
  if (outCount == 0)
    return;
  double factor = mean ? 1.0 / double(reduceCount) : 1.0;
  if (reduceCount == 0) {
    std::fill(out, out + outCount,
              mean ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
    return;
  }

  std::vector<ReduceGroup> groups;
  {
    std::vector<int64_t> inStrides = contiguousStrides(inShape);
    for (size_t d = 0; d < rank; ++d) {
      if (inShape[d] == 1)
        continue;
      if (!groups.empty() && groups.back().reduced == reduced[d]) {
        groups.back().size *= inShape[d];
        groups.back().inStride = inStrides[d];
        continue;
      }
      groups.push_back({inShape[d], inStrides[d], 0, reduced[d]});
    }
    int64_t s = 1;
    for (size_t g = groups.size(); g-- > 0;)
      if (!groups[g].reduced) {
        groups[g].outStride = s;
        s *= groups[g].size;
      }
  }

  if (groups.empty()) {
    out[0] = static_cast<float>(double(in[0]) * factor);
    return;
  }

  // Split the work over the outermost kept group: each index of it owns a
  // disjoint, contiguous block of the output.
  size_t split = 0;
  while (split < groups.size() && groups[split].reduced)
    ++split;
  if (split == groups.size()) {
    // Everything reduced: fixed blocks, partial sums added in block order.
    int64_t total = groups[0].size * groups[0].inStride;
    constexpr int64_t kBlock = int64_t(1) << 16;
    int64_t blocks = (total + kBlock - 1) / kBlock;
    std::vector<double> partial(size_t(blocks), 0.0);
    parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        partial[size_t(b)] =
            sumDouble(in + b * kBlock, std::min(kBlock, total - b * kBlock));
    });
    double sum = 0.0;
    for (double v : partial)
      sum += v;
    out[0] = static_cast<float>(sum * factor);
    return;
  }

  const ReduceGroup &splitGroup = groups[split];
  int64_t perIndex = outCount / splitGroup.size; // outputs per split index
  int64_t workPerIndex = reduceCount * perIndex;
  parallelFor(
      splitGroup.size, rowGrain(workPerIndex), [&](int64_t begin, int64_t end) {
        std::vector<double> acc(size_t((end - begin) * perIndex), 0.0);
        // Walk the groups before the split (all reduced) by odometer,
        // then the split range, then the rest recursively.
        int64_t prefix = 1;
        for (size_t g = 0; g < split; ++g)
          prefix *= groups[g].size;
        for (int64_t pi = 0; pi < prefix; ++pi) {
          int64_t inOffset = 0, rest = pi;
          for (size_t g = split; g-- > 0;) {
            inOffset += rest % groups[g].size * groups[g].inStride;
            rest /= groups[g].size;
          }
          if (split + 1 == groups.size()) {
            // The split group is innermost (unit stride).
            accumulateRow(in + inOffset + begin, acc.data(), end - begin);
            continue;
          }
          for (int64_t i = begin; i < end; ++i)
            reduceWalk(groups, split + 1,
                       in + inOffset + i * splitGroup.inStride,
                       acc.data() + (i - begin) * perIndex);
        }
        float *dst = out + begin * perIndex;
        for (size_t i = 0; i < acc.size(); ++i)
          dst[i] = static_cast<float>(acc[i] * factor);
      });
}

namespace {

template <typename T>
void padElements(const T *in, Shape inShape, std::span<const int64_t> offsets,
                 T *out, Shape outShape) {
  size_t rank = outShape.size();
  checkWindow("pad", outShape, inShape, offsets);
  int64_t total = product(outShape);
  if (total == 0)
    return;
  if (product(inShape) == 0) {
    std::memset(out, 0, sizeof(T) * size_t(total));
    return;
  }
  // Output rows: the innermost dims where input and output agree, plus the
  // first differing one going outward. Within a row the input is one
  // contiguous run at `lo`.
  size_t k = rank;
  int64_t rowLen = 1, inRowLen = 1, lo = 0;
  while (k > 0) {
    --k;
    lo = offsets[k] * rowLen;
    rowLen *= outShape[k];
    inRowLen *= inShape[k];
    if (outShape[k] != inShape[k])
      break;
  }
  int64_t rows = total / rowLen;
  if (rows == 1) {
    parallelFor(rowLen, kElementGrain, [&](int64_t begin, int64_t end) {
      padSegment(in, lo, inRowLen, out, begin, end);
    });
    return;
  }
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(k);
    int64_t rest = begin;
    for (size_t d = k; d-- > 0;) {
      index[d] = rest % outShape[d];
      rest /= outShape[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      bool inside = true;
      int64_t inOffset = 0;
      for (size_t d = 0; d < k; ++d) {
        int64_t i = index[d] - offsets[d];
        inside &= i >= 0 && i < inShape[d];
        inOffset += i * inStrides[d];
      }
      T *dst = out + row * rowLen;
      if (inside)
        padSegment(in + inOffset, lo, inRowLen, dst, 0, rowLen);
      else
        std::memset(dst, 0, sizeof(T) * size_t(rowLen));
      for (size_t d = k; d-- > 0;) {
        if (++index[d] < outShape[d])
          break;
        index[d] = 0;
      }
    }
  });
}

} // namespace

void fill(float value, float *out, int64_t count) {
  // +0.0f is all zero bits: memset (rep stosb) beats a store loop there.
  bool zero = std::bit_cast<uint32_t>(value) == 0;
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    if (zero)
      std::memset(out + begin, 0, sizeof(float) * size_t(end - begin));
    else
      std::fill(out + begin, out + end, value);
  });
}

// The layout kernels move elements without arithmetic: one body per element
// size, f32 and bf16 (uint16_t bits) alike.
void transpose(const float *in, Shape inShape, std::span<const int64_t> perm,
               float *out) {
  transposeElements(in, inShape, perm, out);
}
void transpose(const uint16_t *in, Shape inShape, std::span<const int64_t> perm,
               uint16_t *out) {
  transposeElements(in, inShape, perm, out);
}
void slice(const float *in, Shape inShape, std::span<const int64_t> offsets,
           float *out, Shape outShape) {
  sliceElements(in, inShape, offsets, out, outShape);
}
void slice(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
           uint16_t *out, Shape outShape) {
  sliceElements(in, inShape, offsets, out, outShape);
}
void slice(const int32_t *in, Shape inShape, std::span<const int64_t> offsets,
           int32_t *out, Shape outShape) {
  sliceElements(in, inShape, offsets, out, outShape);
}
void insert(const float *in, Shape inShape, std::span<const int64_t> offsets,
            float *out, Shape outShape) {
  insertElements(in, inShape, offsets, out, outShape);
}
void insert(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
            uint16_t *out, Shape outShape) {
  insertElements(in, inShape, offsets, out, outShape);
}
void pad(const float *in, Shape inShape, std::span<const int64_t> offsets,
         float *out, Shape outShape) {
  padElements(in, inShape, offsets, out, outShape);
}
void pad(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
         uint16_t *out, Shape outShape) {
  padElements(in, inShape, offsets, out, outShape);
}

} // namespace tpc::runtime::cpu
