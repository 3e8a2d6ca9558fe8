#include "Kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tpc::runtime::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t count) {
  return unsigned(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1,
                                      int64_t(1) << 20));
}

#define TPC_GRID_STRIDE(i, count)                                              \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;             \
       i < (count); i += int64_t(gridDim.x) * blockDim.x)

/// The offsets into the tensors `index` strides of out element `i`.
__device__ void offsetsOf(int64_t i, const Indexing &index, int64_t &first,
                          int64_t &second) {
  first = 0;
  second = 0;
  for (int d = index.rank - 1; d >= 0; --d) {
    const int64_t coord = i % index.size[d];
    i /= index.size[d];
    first += coord * index.stride[d];
    second += coord * index.stride2[d];
  }
}

/// Block-wide sum of `value` (every thread gets it); `shared` holds
/// kThreads / 32 values.
template <typename T> __device__ T blockSum(T value, T *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads(); // `shared` may still be read from a previous call
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < int(blockDim.x / 32); ++w)
    total += shared[w];
  return total;
}

__device__ float blockMax(float value, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  float best = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w)
    best = fmaxf(best, shared[w]);
  return best;
}

/// A row's max and sum of exp(x - max) over its first `count` entries
/// (every thread gets both).
__device__ void maxAndSumOfExps(const float *in, int64_t count, float *shared,
                                float &best, float &sum) {
  best = -INFINITY;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
    best = fmaxf(best, in[j]);
  best = blockMax(best, shared);
  sum = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
    sum += expf(in[j] - best);
  sum = blockSum(sum, shared);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// A stored element as f32: f32 as it is, bf16 (raw bits) exactly.
__device__ inline float toFloat(float x) { return x; }
__device__ inline float toFloat(uint16_t x) {
  return __uint_as_float(uint32_t(x) << 16);
}
/// An f32 value stored as T: bf16 rounded to nearest even.
template <class T> __device__ inline T fromFloat(float x);
template <> __device__ inline float fromFloat<float>(float x) { return x; }
template <> __device__ inline uint16_t fromFloat<uint16_t>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ inline float applyBinary(Binary kind, float x, float y) {
  switch (kind) {
  case Binary::Add:
    return x + y;
  case Binary::Sub:
    return x - y;
  case Binary::Mul:
    return x * y;
  case Binary::Div:
    return x / y;
  }
  return 0.0f;
}

/// Broadcasting binary ops: each output element's operands by strides.
template <class T>
__global__ void binaryKernel(Binary kind, const T *lhs, const T *rhs, T *out,
                             int64_t count, Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t a, b;
    offsetsOf(i, index, a, b);
    out[i] = fromFloat<T>(applyBinary(kind, toFloat(lhs[a]), toFloat(rhs[b])));
  }
}

/// The pointers of an elementwise kernel: kIn inputs and kOut outputs of
/// one storage type and shape.
template <class T, int kIn, int kOut> struct MapArgs {
  const T *in[kIn];
  T *out[kOut];
};

/// Elementwise over same-shape tensors: `f(x, y)` computes kOut f32 values
/// from kIn. With `vectorised` (every pointer 16-byte aligned) each thread
/// moves 16 bytes per tensor at a time (8 bf16 or 4 f32 elements), the
/// remainder element by element. Each element's arithmetic is the same
/// either way; outputs may alias inputs (each element is read first).
template <class T, int kIn, int kOut, class F>
__global__ void mapKernel(MapArgs<T, kIn, kOut> args, int64_t count,
                          bool vectorised, F f) {
  constexpr int kWidth = int(16 / sizeof(T));
  const int64_t packs = vectorised ? count / kWidth : 0;
  TPC_GRID_STRIDE(p, packs) {
    uint4 in[kIn], out[kOut];
    for (int k = 0; k < kIn; ++k)
      in[k] = reinterpret_cast<const uint4 *>(args.in[k])[p];
    for (int j = 0; j < kWidth; ++j) {
      float x[kIn], y[kOut];
      for (int k = 0; k < kIn; ++k)
        x[k] = toFloat(reinterpret_cast<const T *>(&in[k])[j]);
      f(x, y);
      for (int o = 0; o < kOut; ++o)
        reinterpret_cast<T *>(&out[o])[j] = fromFloat<T>(y[o]);
    }
    for (int o = 0; o < kOut; ++o)
      reinterpret_cast<uint4 *>(args.out[o])[p] = out[o];
  }
  const int64_t done = packs * kWidth;
  TPC_GRID_STRIDE(t, count - done) {
    const int64_t i = done + t;
    float x[kIn], y[kOut];
    for (int k = 0; k < kIn; ++k)
      x[k] = toFloat(args.in[k][i]);
    f(x, y);
    for (int o = 0; o < kOut; ++o)
      args.out[o][i] = fromFloat<T>(y[o]);
  }
}

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

struct BinaryOp {
  Binary kind;
  __device__ void operator()(const float *x, float *y) const {
    y[0] = applyBinary(kind, x[0], x[1]);
  }
};
struct ScaleOp {
  float factor;
  __device__ void operator()(const float *x, float *y) const {
    y[0] = x[0] * factor;
  }
};
struct GeluOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[0];
    y[0] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
};
/// (result_grad, input) -> input_grad.
struct GeluGradOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[1];
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    y[0] = in[0] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};
struct SiluOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[0];
    y[0] = x / (1.0f + expf(-x));
  }
};
struct ReluOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[0];
    y[0] = x <= 0.0f ? 0.0f : x; // NaN passes, as on the CPU
  }
};
/// (result_grad, input) -> input_grad.
struct ReluGradOp {
  __device__ void operator()(const float *in, float *y) const {
    y[0] = in[1] > 0.0f ? in[0] : 0.0f;
  }
};
struct SiluGradOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[1], s = 1.0f / (1.0f + expf(-x));
    y[0] = in[0] * s * (1.0f + x * (1.0f - s));
  }
};
/// (gate, up) -> silu(gate) * up.
struct SwigluOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[0];
    y[0] = x / (1.0f + expf(-x)) * in[1];
  }
};
/// (result_grad, gate, up) -> (gate_grad, up_grad).
struct SwigluGradOp {
  __device__ void operator()(const float *in, float *y) const {
    const float x = in[1], s = 1.0f / (1.0f + expf(-x)), dy = in[0];
    y[0] = dy * in[2] * s * (1.0f + x * (1.0f - s));
    y[1] = dy * x * s;
  }
};

__global__ void toBf16Kernel(const float *in, uint16_t *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

__global__ void roundBf16Kernel(float *data, int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    data[i] = __bfloat162float(__float2bfloat16_rn(data[i]));
  }
}

__global__ void fromBf16Kernel(const uint16_t *in, float *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) { out[i] = __uint_as_float(uint32_t(in[i]) << 16); }
}

/// One thread per column of a chunk of rows (consecutive threads read
/// consecutive columns).
template <class T>
__global__ void sumRowChunksKernel(const T *in, int64_t rows, int64_t cols,
                                   float *partials) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (col >= cols)
    return;
  const int64_t first = chunk * kRowSumChunk,
                last = min(rows, first + kRowSumChunk);
  float sum = 0.0f;
  for (int64_t row = first; row < last; ++row) {
    if constexpr (sizeof(T) == 2)
      sum += __uint_as_float(uint32_t(in[row * cols + col]) << 16);
    else
      sum += in[row * cols + col];
  }
  partials[chunk * cols + col] = sum;
}

__global__ void sumChunksKernel(const float *partials, int64_t chunks,
                                int64_t cols, float *out) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols)
    return;
  float sum = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    sum += partials[chunk * cols + col];
  out[col] = sum;
}

__global__ void fillKernel(float value, float *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) { out[i] = value; }
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

template <class T>
__global__ void gatherKernel(const T *in, int64_t base, T *out, int64_t count,
                             Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t from, unused;
    offsetsOf(i, index, from, unused);
    out[i] = in[base + from];
  }
}

template <class T>
__global__ void scatterKernel(const T *in, T *out, int64_t base, int64_t count,
                              Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t to, unused;
    offsetsOf(i, index, to, unused);
    out[base + to] = in[i];
  }
}

// Reductions keep a fixed summation order (no atomics), so a run is
// reproducible, and spread each output's terms over many threads: one thread
// per output summing thousands of terms in order left most of the GPU idle
// (a bias gradient over 8192 tokens took 5 ms on an H200).

/// Outputs whose reduced terms are contiguous in memory (the innermost
/// reduced dim has stride 1): one warp per output, lanes over the terms, then
/// a fixed shuffle tree.
template <class In, class Out>
__global__ void reduceContiguousKernel(const In *in, Out *out, int64_t count,
                                       Indexing index, Indexing inner,
                                       int64_t reduced, bool mean) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
       i < count; i += warps) {
    int64_t base, unused;
    offsetsOf(i, index, base, unused);
    double sum = 0.0;
    for (int64_t j = lane; j < reduced; j += 32) {
      int64_t offset, unused2;
      offsetsOf(j, inner, offset, unused2);
      sum += toFloat(in[base + offset]);
    }
    for (int width = 16; width > 0; width /= 2)
      sum += __shfl_down_sync(0xffffffffu, sum, width);
    if (lane == 0)
      out[i] = fromFloat<Out>(float(mean ? sum / double(reduced) : sum));
  }
}

constexpr int kTileOutputs = 32, kTileLanes = 32,
              kTileThreads = kTileOutputs * kTileLanes;

/// Blocks of the tiled reductions for `outputs` outputs.
static unsigned tilesFor(int64_t outputs) {
  return unsigned(std::clamp<int64_t>(
      (outputs + kTileOutputs - 1) / kTileOutputs, 1, int64_t(1) << 20));
}

/// Every other reduction: a block sums kTileOutputs consecutive outputs
/// (adjacent in memory in the common case, so a warp's reads coalesce), each
/// over kTileLanes lanes of terms, whose partial sums it adds in lane order.
template <class In, class Out>
__global__ void reduceTiledKernel(const In *in, Out *out, int64_t count,
                                  Indexing index, Indexing inner,
                                  int64_t reduced, bool mean) {
  __shared__ double partial[kTileLanes][kTileOutputs];
  const int column = threadIdx.x % kTileOutputs,
            lane = threadIdx.x / kTileOutputs;
  for (int64_t first = blockIdx.x * int64_t(kTileOutputs); first < count;
       first += int64_t(gridDim.x) * kTileOutputs) {
    const int64_t i = first + column;
    double sum = 0.0;
    if (i < count) {
      int64_t base, unused;
      offsetsOf(i, index, base, unused);
      for (int64_t j = lane; j < reduced; j += kTileLanes) {
        int64_t offset, unused2;
        offsetsOf(j, inner, offset, unused2);
        sum += toFloat(in[base + offset]);
      }
    }
    partial[lane][column] = sum;
    __syncthreads();
    if (lane == 0 && i < count) {
      for (int l = 1; l < kTileLanes; ++l)
        sum += partial[l][column];
      out[i] = fromFloat<Out>(float(mean ? sum / double(reduced) : sum));
    }
    __syncthreads();
  }
}

//===----------------------------------------------------------------------===//
// Rows: one block per row
//===----------------------------------------------------------------------===//

__global__ void softmaxKernel(const float *x, float *y, int64_t cols,
                              bool causal) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t visible = causal ? row % cols + 1 : cols;
  const float *in = x + row * cols;
  float *out = y + row * cols;
  float best, sum;
  maxAndSumOfExps(in, visible, shared, best, sum);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = j < visible ? expf(in[j] - best) / sum : 0.0f;
}

__global__ void softmaxGradKernel(const float *grad, const float *result,
                                  float *out, int64_t cols) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = int64_t(blockIdx.x) * cols;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    dot += grad[offset + j] * result[offset + j];
  dot = blockSum(dot, shared);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[offset + j] = result[offset + j] * (grad[offset + j] - dot);
}

/// Per row: the mean (0 for RMS) and 1 / sqrt(variance or mean square + eps).
template <class T>
__device__ void rowStatistics(const T *in, int64_t cols, bool rms,
                              float epsilon, float *shared, float &mean,
                              float &rstd) {
  float sum = 0.0f;
  if (!rms) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += toFloat(in[j]);
    mean = blockSum(sum, shared) / float(cols);
  } else {
    mean = 0.0f;
  }
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float centred = toFloat(in[j]) - mean;
    squares += centred * centred;
  }
  rstd = rsqrtf(blockSum(squares, shared) / float(cols) + epsilon);
}

/// Activations x and y stored as T; the gain and bias f32.
template <class T>
__global__ void normKernel(const T *x, const float *gamma, const float *beta,
                           T *y, int64_t cols, float epsilon) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = int64_t(blockIdx.x) * cols;
  float mean, rstd;
  rowStatistics(x + offset, cols, beta == nullptr, epsilon, shared, mean, rstd);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float normalised = (toFloat(x[offset + j]) - mean) * rstd * gamma[j];
    y[offset + j] = fromFloat<T>(beta ? normalised + beta[j] : normalised);
  }
}

/// inputGrad = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with
/// dxhat = dy gamma (the mean(dxhat) term only for layer norm).
template <class T>
__global__ void
normGradRowsKernel(const T *grad, const T *x, const float *gamma, T *inputGrad,
                   float *rowStats, int64_t cols, bool rms, float epsilon) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x, offset = row * cols;
  float mean, rstd;
  rowStatistics(x + offset, cols, rms, epsilon, shared, mean, rstd);
  float sumDxhat = 0.0f, sumDxhatXhat = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float dxhat = toFloat(grad[offset + j]) * gamma[j];
    sumDxhat += dxhat;
    sumDxhatXhat += dxhat * (toFloat(x[offset + j]) - mean) * rstd;
  }
  const float meanDxhat = rms ? 0.0f : blockSum(sumDxhat, shared) / float(cols);
  const float meanDxhatXhat = blockSum(sumDxhatXhat, shared) / float(cols);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xhat = (toFloat(x[offset + j]) - mean) * rstd;
    const float dxhat = toFloat(grad[offset + j]) * gamma[j];
    inputGrad[offset + j] =
        fromFloat<T>(rstd * (dxhat - meanDxhat - xhat * meanDxhatXhat));
  }
  if (threadIdx.x == 0) {
    rowStats[2 * row] = mean;
    rowStats[2 * row + 1] = rstd;
  }
}

/// gammaGrad[c] = sum over rows of dy xhat, betaGrad[c] = sum of dy: a block
/// per kTileOutputs columns, kTileLanes lanes of rows each, the lanes'
/// partial sums added in lane order (fixed, so reproducible).
template <class T>
__global__ void normGradColumnsKernel(const T *grad, const T *x,
                                      const float *rowStats, float *gammaGrad,
                                      float *betaGrad, int64_t rows,
                                      int64_t cols) {
  __shared__ float partial[2][kTileLanes][kTileOutputs];
  const int column = threadIdx.x % kTileOutputs,
            lane = threadIdx.x / kTileOutputs;
  for (int64_t first = blockIdx.x * int64_t(kTileOutputs); first < cols;
       first += int64_t(gridDim.x) * kTileOutputs) {
    const int64_t c = first + column;
    float g = 0.0f, b = 0.0f;
    if (c < cols) {
      for (int64_t r = lane; r < rows; r += kTileLanes) {
        const float dy = toFloat(grad[r * cols + c]);
        g += dy * (toFloat(x[r * cols + c]) - rowStats[2 * r]) *
             rowStats[2 * r + 1];
        b += dy;
      }
    }
    partial[0][lane][column] = g;
    partial[1][lane][column] = b;
    __syncthreads();
    if (lane == 0 && c < cols) {
      for (int l = 1; l < kTileLanes; ++l) {
        g += partial[0][l][column];
        b += partial[1][l][column];
      }
      gammaGrad[c] = g;
      if (betaGrad)
        betaGrad[c] = b;
    }
    __syncthreads();
  }
}

__global__ void normSplitPartialsKernel(const float *x, int64_t cols, bool rms,
                                        float *partials) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float *in = x + row * cols;
  float mean = 0.0f;
  if (!rms) {
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += in[j];
    mean = blockSum(sum, shared) / float(cols);
  }
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    squares += (in[j] - mean) * (in[j] - mean);
  squares = blockSum(squares, shared);
  if (threadIdx.x == 0 && rms) {
    partials[row] = squares;
  } else if (threadIdx.x == 0) {
    partials[2 * row] = mean;
    partials[2 * row + 1] = squares;
  }
}

__global__ void normSplitCombineKernel(const float *gathered, int64_t blocks,
                                       int64_t rows, int64_t k, int64_t cols,
                                       bool rms, float epsilon,
                                       float *rowStats) {
  TPC_GRID_STRIDE(r, rows) {
    const double fullCols = double(blocks * cols);
    double mean = 0.0, spread = 0.0;
    if (rms) {
      for (int64_t b = 0; b < blocks; ++b)
        spread += double(gathered[(b * rows + r) * k]);
    } else {
      // Chan et al.'s parallel variance over equal blocks.
      for (int64_t b = 0; b < blocks; ++b)
        mean += double(gathered[(b * rows + r) * k]);
      mean /= double(blocks);
      for (int64_t b = 0; b < blocks; ++b) {
        const double blockMean = double(gathered[(b * rows + r) * k]);
        spread += double(gathered[(b * rows + r) * k + 1]) +
                  double(cols) * (blockMean - mean) * (blockMean - mean);
      }
    }
    rowStats[2 * r] = float(mean);
    rowStats[2 * r + 1] =
        float(1.0 / sqrt(spread / fullCols + double(epsilon)));
  }
}

__global__ void normApplyKernel(const float *x, const float *gamma,
                                const float *beta, const float *rowStats,
                                float *y, int64_t rows, int64_t cols) {
  TPC_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const float normalised =
        (x[i] - rowStats[2 * r]) * rowStats[2 * r + 1] * gamma[c];
    y[i] = beta ? normalised + beta[c] : normalised;
  }
}

__global__ void normSplitGradPartialsKernel(const float *grad, const float *x,
                                            const float *gamma,
                                            const float *rowStats, int64_t cols,
                                            bool rms, float *partials) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x, offset = row * cols;
  const float mean = rms ? 0.0f : rowStats[2 * row];
  float first = 0.0f, second = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xj = x[offset + j], g = grad[offset + j] * gamma[j];
    first += rms ? xj * xj : g;
    second += g * (xj - mean);
  }
  first = blockSum(first, shared);
  second = blockSum(second, shared);
  if (threadIdx.x == 0) {
    partials[2 * row] = first;
    partials[2 * row + 1] = second;
  }
}

/// inputGrad = rstd (g - mean(g)) - (x - mean) rstd^3 mean(g (x - mean))
/// over the whole rows (mean(g) only for layer norm), g = dy gamma.
__global__ void normSplitGradRowsKernel(const float *grad, const float *x,
                                        const float *gamma,
                                        const float *rowStats,
                                        const float *gathered, int64_t blocks,
                                        int64_t rows, int64_t cols, bool rms,
                                        float *inputGrad) {
  TPC_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const double fullCols = double(blocks * cols);
    double sumG = 0.0, sumGX = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      sumG += double(gathered[(b * rows + r) * 2]);
      sumGX += double(gathered[(b * rows + r) * 2 + 1]);
    }
    const double rstd = double(rowStats[2 * r + 1]);
    const float meanG = rms ? 0.0f : float(sumG / fullCols);
    const float k = float(rstd * rstd * rstd * sumGX / fullCols);
    inputGrad[i] = float(rstd) * (grad[i] * gamma[c] - meanG) -
                   (x[i] - rowStats[2 * r]) * k;
  }
}

template <class T>
__global__ void rotaryKernel(const T *x, T *y, int64_t outer, int64_t seq,
                             int64_t dim, double theta, bool inverse,
                             const int32_t *positions, int64_t perPositionRow) {
  const int64_t half = dim / 2, count = outer * seq * half;
  TPC_GRID_STRIDE(i, count) {
    const int64_t k = i % half, row = i / half;
    const int64_t position =
        positions ? positions[(row / seq / perPositionRow) * seq + row % seq]
                  : row % seq;
    double angle =
        double(position) * pow(theta, -2.0 * double(k) / double(dim));
    if (inverse)
      angle = -angle;
    const float c = float(cos(angle)), s = float(sin(angle));
    const T *in = x + row * dim;
    T *out = y + row * dim;
    const float a = toFloat(in[k]), b = toFloat(in[k + half]);
    out[k] = fromFloat<T>(a * c - b * s);
    out[k + half] = fromFloat<T>(b * c + a * s);
  }
}

__global__ void cacheWriteKernel(float *cache, const float *update,
                                 int64_t outer, int64_t cacheRows, int64_t rows,
                                 int64_t dim, const int32_t *positions,
                                 int64_t perPositionRow) {
  TPC_GRID_STRIDE(i, outer * rows * dim) {
    const int64_t c = i % dim, r = i / dim, o = r / rows, t = r % rows;
    const int64_t at = positions[(o / perPositionRow) * rows + t];
    if (at >= 0 && at < cacheRows)
      cache[(o * cacheRows + at) * dim + c] = update[i];
  }
}

//===----------------------------------------------------------------------===//
// Embeddings and the loss
//===----------------------------------------------------------------------===//

/// The f32 table's rows into activations stored as T.
template <class T>
__global__ void embeddingKernel(const float *table, int64_t firstRow,
                                int64_t rows, int64_t hidden,
                                const int32_t *ids, int64_t tokens,
                                const int32_t *slotMap, T *out) {
  TPC_GRID_STRIDE(i, tokens * hidden) {
    const int64_t t = i / hidden, h = i % hidden;
    // The loader checked the token file against the vocabulary, the
    // runtime cached every row of the batch.
    const int64_t row = int64_t(ids[t]) - firstRow;
    const bool inBlock = row >= 0 && row < rows;
    const int64_t at = inBlock && slotMap ? slotMap[row] : row;
    out[i] = fromFloat<T>(inBlock ? table[at * hidden + h] : 0.0f);
  }
}

/// One thread per hidden column, tokens in order: no two threads write one
/// element, so the sums need no atomics and are reproducible.
__global__ void embeddingGradKernel(const float *grad, const int32_t *ids,
                                    int64_t tokens, int64_t firstRow,
                                    int64_t rows, int64_t hidden,
                                    const int32_t *slotMap, float *tableGrad) {
  TPC_GRID_STRIDE(h, hidden) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = int64_t(ids[t]) - firstRow;
      if (row >= 0 && row < rows)
        tableGrad[(slotMap ? slotMap[row] : row) * hidden + h] +=
            grad[t * hidden + h];
    }
  }
}

/// rowLoss[t] = logsumexp(logits[t]) - logits[t][target].
__global__ void crossEntropyRowsKernel(const float *logits,
                                       const int32_t *targets, int64_t vocab,
                                       double *rowLoss) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float *in = logits + row * vocab;
  float best, sum;
  maxAndSumOfExps(in, vocab, shared, best, sum);
  if (threadIdx.x == 0) {
    const int32_t target = targets[row];
    const float picked = target >= 0 && target < vocab ? in[target] : best;
    rowLoss[row] = double(best) + log(double(sum)) - double(picked);
  }
}

__global__ void crossEntropyBlockStatsKernel(const float *logits,
                                             const int32_t *targets,
                                             int64_t columns,
                                             int64_t firstColumn,
                                             float *stats) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float *in = logits + row * columns;
  float best, sum;
  maxAndSumOfExps(in, columns, shared, best, sum);
  if (threadIdx.x == 0) {
    const int64_t column = int64_t(targets[row]) - firstColumn;
    stats[3 * row] = best;
    stats[3 * row + 1] = sum;
    stats[3 * row + 2] = column >= 0 && column < columns ? in[column] : 0.0f;
  }
}

/// A token's global max and sum of exps from every block's statistics,
/// combined in block order (cpu::crossEntropyFromBlockStats).
__device__ void combineBlockStats(const float *stats, int64_t blocks,
                                  int64_t tokens, int64_t t, float &best,
                                  double &sum) {
  best = stats[3 * t];
  for (int64_t b = 1; b < blocks; ++b)
    best = fmaxf(best, stats[3 * (b * tokens + t)]);
  sum = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const float *block = stats + 3 * (b * tokens + t);
    sum += double(block[1]) * exp(double(block[0]) - double(best));
  }
}

__global__ void crossEntropyCombineKernel(const float *stats, int64_t blocks,
                                          int64_t tokens, double *rowLoss) {
  TPC_GRID_STRIDE(t, tokens) {
    float best;
    double sum, target = 0.0;
    combineBlockStats(stats, blocks, tokens, t, best, sum);
    for (int64_t b = 0; b < blocks; ++b)
      target += double(stats[3 * (b * tokens + t) + 2]);
    rowLoss[t] = log(sum) + double(best) - target;
  }
}

/// One block per token row of this rank's columns.
__global__ void crossEntropyGradBlockKernel(const float *logits,
                                            const int32_t *targets,
                                            const float *lossGrad,
                                            const float *stats, int64_t blocks,
                                            int64_t tokens, int64_t columns,
                                            int64_t firstColumn, float *out) {
  const int64_t row = blockIdx.x;
  float best;
  double sum;
  combineBlockStats(stats, blocks, tokens, row, best, sum);
  const double scale = double(*lossGrad) / double(tokens);
  const float *in = logits + row * columns;
  const int64_t target = int64_t(targets[row]) - firstColumn;
  const float factor = float(scale / sum);
  for (int64_t j = threadIdx.x; j < columns; j += blockDim.x) {
    if (j == target) {
      const double expTarget = exp(double(in[j]) - double(best));
      out[row * columns + j] = float(-scale * ((sum - expTarget) / sum));
    } else {
      out[row * columns + j] = expf(in[j] - best) * factor;
    }
  }
}

__global__ void mergeStatsKernel(const float *chunkStats, int64_t chunks,
                                 int64_t tokens, float *stats) {
  TPC_GRID_STRIDE(t, tokens) {
    float best = chunkStats[3 * t];
    for (int64_t c = 1; c < chunks; ++c)
      best = fmaxf(best, chunkStats[3 * (c * tokens + t)]);
    double sum = 0.0, target = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      const float *chunk = chunkStats + 3 * (c * tokens + t);
      sum += double(chunk[1]) * exp(double(chunk[0]) - double(best));
      target += double(chunk[2]);
    }
    stats[3 * t] = best;
    stats[3 * t + 1] = float(sum);
    stats[3 * t + 2] = float(target);
  }
}

__global__ void meanKernel(const double *values, int64_t count, float *out) {
  __shared__ double shared[kThreads / 32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    sum += values[i];
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    *out = count ? float(sum / double(count)) : 0.0f;
}

__global__ void crossEntropyGradKernel(const float *logits,
                                       const int32_t *targets,
                                       const float *lossGrad, int64_t tokens,
                                       int64_t vocab, float *out) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float *in = logits + row * vocab;
  float best, sum;
  maxAndSumOfExps(in, vocab, shared, best, sum);
  const float scale = *lossGrad / float(tokens);
  const int32_t target = targets[row];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(in[j] - best) / sum;
    out[row * vocab + j] = (p - (j == target ? 1.0f : 0.0f)) * scale;
  }
}

__global__ void squaresKernel(const float *in, int64_t count, double *partial) {
  __shared__ double shared[kThreads / 32];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    sum += double(in[i]) * double(in[i]);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = sum;
}

/// One block per listed row: its squares in double (-1: padding, zero).
__global__ void rowSquaresKernel(const float *in, const int32_t *rows,
                                 int64_t rowElements, double *perRow) {
  __shared__ double shared[kThreads / 32];
  const int32_t row = rows[blockIdx.x];
  double sum = 0.0;
  if (row >= 0)
    for (int64_t i = threadIdx.x; i < rowElements; i += blockDim.x) {
      const double x = in[int64_t(row) * rowElements + i];
      sum += x * x;
    }
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    perRow[blockIdx.x] = sum;
}

/// The rows' sums in list order, one thread: as the CPU adds them.
__global__ void sumInOrderKernel(const double *perRow, int64_t count,
                                 float *out) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i)
    sum += perRow[i];
  *out = float(sum);
}

__global__ void sumPartialsKernel(const double *partial, float *out) {
  __shared__ double shared[kThreads / 32];
  double sum = threadIdx.x < kNormPartials ? partial[threadIdx.x] : 0.0;
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    *out = float(sum);
}

//===----------------------------------------------------------------------===//
// The optimizer: scalars stay on the device, so a captured step replays
//===----------------------------------------------------------------------===//

__global__ void learningRateKernel(const int64_t *stepIn, const float *hyper,
                                   float *out) {
  const double s = double(*stepIn), p = double(hyper[0]), lo = double(hyper[1]),
               w = double(hyper[2]), d = double(hyper[3]);
  if (w > 0.0 && s <= w)
    *out = float(p * s / w);
  else if (d <= w)
    *out = hyper[0];
  else if (s >= d)
    *out = hyper[1];
  else
    *out = float(lo + (p - lo) * 0.5 *
                          (1.0 + cos(3.141592653589793 * (s - w) / (d - w))));
}

__global__ void clipScaleKernel(const float *sumSquares, const float *hyper,
                                float *out) {
  const float maxNorm = hyper[4];
  if (!(maxNorm > 0.0f)) {
    *out = 1.0f;
    return;
  }
  const double coef = double(maxNorm) / (sqrt(double(*sumSquares)) + 1e-6);
  *out = isnan(coef) ? NAN : (coef < 1.0 ? float(coef) : 1.0f);
}

struct AdamWBatch {
  AdamWTensor tensors[kAdamWTensorsPerLaunch];
};
static_assert(sizeof(AdamWBatch) + sizeof(int) <= 4096,
              "a kernel's parameters take at most 4 KiB");

/// One AdamW step of a tensor: its scalars as the CPU kernel rounds them
/// (double, then f32 once), and the update of one element.
struct AdamWStep {
  float gradScale, b1, c1, b2, c2, decay, stepSize, bc2Sqrt, eps;
  __device__ explicit AdamWStep(const AdamWTensor &t) {
    const float lr = *t.lr;
    const double step = double(*t.step);
    const double bc1 = 1.0 - pow(t.beta1, step), bc2 = 1.0 - pow(t.beta2, step);
    gradScale = *t.gradScale;
    b1 = float(t.beta1);
    c1 = float(1.0 - t.beta1);
    b2 = float(t.beta2);
    c2 = float(1.0 - t.beta2);
    decay = float(1.0 - double(lr) * t.weightDecay);
    stepSize = float(double(lr) / bc1);
    bc2Sqrt = float(sqrt(bc2));
    eps = float(t.epsilon);
  }
  __device__ void update(const AdamWTensor &t, int64_t i) const {
    const float g = t.grad[i] * gradScale;
    const float m = b1 * t.expAvg[i] + c1 * g;
    const float v = b2 * t.expAvgSq[i] + c2 * (g * g);
    const float denom = sqrtf(v) / bc2Sqrt + eps;
    t.newParam[i] = t.param[i] * decay - stepSize * (m / denom);
    t.newExpAvg[i] = m;
    t.newExpAvgSq[i] = v;
  }
};

/// blockIdx.y picks the parameter; blocks stride over its elements.
__global__ void adamwKernel(AdamWBatch batch) {
  const AdamWTensor &t = batch.tensors[blockIdx.y];
  const AdamWStep step(t);
  TPC_GRID_STRIDE(i, t.count) { step.update(t, i); }
}

__global__ void scatterRowsKernel(const uint32_t *packed, const int64_t *rows,
                                  int64_t count, int64_t words,
                                  uint32_t *array) {
  TPC_GRID_STRIDE(i, count * words) {
    array[rows[i / words] * words + i % words] = packed[i];
  }
}

__global__ void gatherRowsKernel(const uint32_t *array, const int64_t *rows,
                                 int64_t count, int64_t words,
                                 uint32_t *packed) {
  TPC_GRID_STRIDE(i, count * words) {
    packed[i] = array[rows[i / words] * words + i % words];
  }
}

/// AdamW on the listed rows, in place; one thread per element of them.
__global__ void adamwRowsKernel(AdamWTensor t, const int32_t *rows,
                                int64_t listed, int64_t rowElements) {
  const AdamWStep step(t);
  TPC_GRID_STRIDE(k, listed * rowElements) {
    const int32_t row = rows[k / rowElements];
    if (row >= 0)
      step.update(t, int64_t(row) * rowElements + k % rowElements);
  }
}

//===----------------------------------------------------------------------===//
// Fused attention
//===----------------------------------------------------------------------===//

// Eight warps per block, two rows (queries, or keys in the key-side
// gradient) per warp; a lane takes one key (or query) of a 32-wide tile for
// the dot products and kMaxAttentionDim / 32 columns of the accumulators.
constexpr int kAttentionWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kAttentionRows = kAttentionWarps * kRowsPerWarp;
constexpr int kAttentionTile = 32;
constexpr int kColumnsPerLane = int(kMaxAttentionDim / 32);
constexpr unsigned kFullMask = 0xffffffffu;

/// x rounded to nearest even to tf32 (mode 1) or bf16 (mode 2), as f32;
/// NaN and infinities pass through (cpu::round).
__device__ float roundOperand(float x, int mode) {
  if (mode == 0 || !isfinite(x))
    return x;
  unsigned bits = __float_as_uint(x);
  const int drop = mode == 1 ? 13 : 16;
  bits += ((1u << (drop - 1)) - 1) + ((bits >> drop) & 1u);
  bits &= ~((1u << drop) - 1);
  return __uint_as_float(bits);
}

__device__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  return value;
}
__device__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

/// The flattened key batch index query head `head` reads.
__device__ int64_t keyHeadOf(const AttentionDims &a, int64_t head) {
  int64_t key = 0, stride = 1;
  for (int d = a.rank - 1; d >= 0; --d) {
    const int64_t coord = head % a.batch[d];
    head /= a.batch[d];
    if (a.keyBatch[d] == a.batch[d])
      key += coord * stride;
    stride *= a.keyBatch[d];
  }
  return key;
}

/// The `group`-th query head (in increasing order) reading key head `key`.
__device__ int64_t queryHeadOf(const AttentionDims &a, int64_t key,
                               int64_t group) {
  int64_t head = 0, stride = 1;
  for (int d = a.rank - 1; d >= 0; --d) {
    int64_t coord;
    if (a.keyBatch[d] == a.batch[d]) {
      coord = key % a.keyBatch[d];
      key /= a.keyBatch[d];
    } else {
      coord = group % a.batch[d];
      group /= a.batch[d];
    }
    head += coord * stride;
    stride *= a.batch[d];
  }
  return head;
}

/// rows x cols of `from` (row stride `cols`, rows from `first`, zero past
/// `limit`) into `to` with row stride `pitch`, rounded.
__device__ void loadTile(const float *from, int64_t first, int64_t limit,
                         int64_t rows, int64_t cols, int64_t pitch, float *to,
                         int rounding) {
  for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    to[r * pitch + c] =
        first + r < limit ? roundOperand(from[(first + r) * cols + c], rounding)
                          : 0.0f;
  }
}

__device__ float dot(const float *a, const float *b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    sum = fmaf(a[i], b[i], sum);
  return sum;
}

/// acc[c] += sum over the tile's first `valid` rows kk of lane kk's
/// `weight` times row kk's column lane + 32 c (below `cols`): a row of
/// weights times a tile in shared memory, into this lane's columns.
__device__ void accumulateTile(float (&acc)[kColumnsPerLane], float weight,
                               const float *tile, int64_t pitch, int64_t cols,
                               int64_t valid) {
  const int lane = threadIdx.x % 32;
  for (int kk = 0; kk < kAttentionTile && kk < valid; ++kk) {
    const float w = __shfl_sync(kFullMask, weight, kk);
#pragma unroll
    for (int c = 0; c < kColumnsPerLane; ++c) {
      const int64_t col = lane + 32 * c;
      if (col < cols)
        acc[c] = fmaf(w, tile[kk * pitch + col], acc[c]);
    }
  }
}

/// out[lane + 32 c] = scale * acc[c] for the columns below `cols`.
__device__ void storeColumns(const float (&acc)[kColumnsPerLane], float scale,
                             float *out, int64_t cols) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < kColumnsPerLane; ++c)
    if (lane + 32 * c < cols)
      out[lane + 32 * c] = scale * acc[c];
}

/// grid (heads, query blocks). Shared: queries [rows][D], keys [tile][D+1],
/// values [tile][Dv] (the padding keeps a lane's key row on its own bank).
__global__ void attentionKernel(const float *query, const float *key,
                                const float *value, AttentionDims a,
                                float *result, float *logSumExp) {
  extern __shared__ float shared[];
  const int64_t D = a.headDim, Dv = a.valueDim, Sq = a.queries, Sk = a.keys;
  const int64_t head = blockIdx.x, keyHead = keyHeadOf(a, head);
  const int64_t row0 = int64_t(blockIdx.y) * kAttentionRows;
  float *qs = shared, *ks = qs + kAttentionRows * D,
        *vs = ks + kAttentionTile * (D + 1);
  const float *k = key + keyHead * Sk * D, *v = value + keyHead * Sk * Dv;
  loadTile(query + head * Sq * D, row0, Sq, kAttentionRows, D, D, qs,
           a.rounding);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float best[kRowsPerWarp], total[kRowsPerWarp] = {};
  float acc[kRowsPerWarp][kColumnsPerLane] = {};
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
    best[rr] = -INFINITY;
  const int64_t lastRow = min(row0 + kAttentionRows, Sq) - 1;
  // A generation step's rows see keys up to their positions.
  const int32_t *rowPositions =
      a.positions ? a.positions + (head / a.headsPerPositionRow) * Sq : nullptr;
  int64_t keyEnd = a.causal ? lastRow + 1 : Sk;
  if (rowPositions) {
    keyEnd = 0;
    for (int64_t row = row0; row <= lastRow; ++row)
      keyEnd = max(keyEnd, min(int64_t(rowPositions[row]) + 1, Sk));
  }
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kAttentionTile) {
    __syncthreads(); // the previous tile is consumed (and qs loaded)
    loadTile(k, j0, Sk, kAttentionTile, D, D + 1, ks, a.rounding);
    loadTile(v, j0, Sk, kAttentionTile, Dv, Dv, vs, a.rounding);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int local = warp * kRowsPerWarp + rr;
      const int64_t row = row0 + local;
      if (row >= Sq)
        continue; // the whole warp
      const int64_t keyIndex = j0 + lane;
      const bool visible =
          keyIndex < Sk && (!a.causal || keyIndex <= row) &&
          (!rowPositions || keyIndex <= int64_t(rowPositions[row]));
      const float score =
          visible ? a.alpha * dot(qs + local * D, ks + lane * (D + 1), D)
                  : -INFINITY;
      const float tileBest = warpMax(score);
      if (tileBest == -INFINITY)
        continue; // no key of this tile is visible to the row
      const float newBest = fmaxf(best[rr], tileBest);
      const float p = visible ? expf(score - newBest) : 0.0f;
      const float correction = expf(best[rr] - newBest);
      total[rr] = total[rr] * correction + warpSum(p);
      best[rr] = newBest;
      const float pr = roundOperand(p, a.rounding);
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c)
        acc[rr][c] *= correction;
      accumulateTile(acc[rr], pr, vs, Dv, Dv, Sk - j0);
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t row = row0 + warp * kRowsPerWarp + rr;
    if (row >= Sq)
      continue;
    storeColumns(acc[rr], 1.0f / total[rr], result + (head * Sq + row) * Dv,
                 Dv);
    if (lane == 0)
      logSumExp[head * Sq + row] = best[rr] + logf(total[rr]);
  }
}

/// delta[row] = sum(resultGrad[row] * result[row]): the softmax backward's
/// row sums. One warp per row.
__global__ void attentionDeltaKernel(const float *resultGrad,
                                     const float *result, int64_t rows,
                                     int64_t Dv, float *delta) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float sum = 0.0f;
  for (int64_t c = lane; c < Dv; c += 32)
    sum = fmaf(resultGrad[row * Dv + c], result[row * Dv + c], sum);
  sum = warpSum(sum);
  if (lane == 0)
    delta[row] = sum;
}

/// queryGrad for 16 query rows of one head, over all the keys they see.
/// Shared: queries [rows][D], resultGrad [rows][Dv], keys [tile][D+1],
/// values [tile][Dv+1].
__global__ void attentionQueryGradKernel(const float *resultGrad,
                                         const float *query, const float *key,
                                         const float *value,
                                         const float *logSumExp,
                                         const float *delta, AttentionDims a,
                                         float *queryGrad) {
  extern __shared__ float shared[];
  const int64_t D = a.headDim, Dv = a.valueDim, Sq = a.queries, Sk = a.keys;
  const int64_t head = blockIdx.x, keyHead = keyHeadOf(a, head);
  const int64_t row0 = int64_t(blockIdx.y) * kAttentionRows;
  float *qs = shared, *dys = qs + kAttentionRows * D,
        *ks = dys + kAttentionRows * Dv, *vs = ks + kAttentionTile * (D + 1);
  const float *k = key + keyHead * Sk * D, *v = value + keyHead * Sk * Dv;
  loadTile(query + head * Sq * D, row0, Sq, kAttentionRows, D, D, qs,
           a.rounding);
  loadTile(resultGrad + head * Sq * Dv, row0, Sq, kAttentionRows, Dv, Dv, dys,
           a.rounding);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float grad[kRowsPerWarp][kColumnsPerLane] = {};
  const int64_t lastRow = min(row0 + kAttentionRows, Sq) - 1;
  const int64_t keyEnd = a.causal ? lastRow + 1 : Sk;
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kAttentionTile) {
    __syncthreads();
    loadTile(k, j0, Sk, kAttentionTile, D, D + 1, ks, a.rounding);
    loadTile(v, j0, Sk, kAttentionTile, Dv, Dv + 1, vs, a.rounding);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int local = warp * kRowsPerWarp + rr;
      const int64_t row = row0 + local;
      if (row >= Sq)
        continue;
      const int64_t keyIndex = j0 + lane;
      const bool visible = keyIndex < Sk && (!a.causal || keyIndex <= row);
      float ds = 0.0f;
      if (visible) {
        const float p =
            expf(a.alpha * dot(qs + local * D, ks + lane * (D + 1), D) -
                 logSumExp[head * Sq + row]);
        const float dp = dot(dys + local * Dv, vs + lane * (Dv + 1), Dv);
        ds = roundOperand(p * (dp - delta[head * Sq + row]), a.rounding);
      }
      accumulateTile(grad[rr], ds, ks, D + 1, D, Sk - j0);
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t row = row0 + warp * kRowsPerWarp + rr;
    if (row < Sq)
      storeColumns(grad[rr], a.alpha, queryGrad + (head * Sq + row) * D, D);
  }
}

/// keyGrad and valueGrad for 16 keys of one key head, over every query (of
/// every query head sharing it) that sees them. Shared: keys [rows][D],
/// values [rows][Dv], queries [tile][D+1], resultGrad [tile][Dv+1].
__global__ void attentionKeyValueGradKernel(
    const float *resultGrad, const float *query, const float *key,
    const float *value, const float *logSumExp, const float *delta,
    AttentionDims a, int64_t groups, float *keyGrad, float *valueGrad) {
  extern __shared__ float shared[];
  const int64_t D = a.headDim, Dv = a.valueDim, Sq = a.queries, Sk = a.keys;
  const int64_t keyHead = blockIdx.x;
  const int64_t key0 = int64_t(blockIdx.y) * kAttentionRows;
  float *ks = shared, *vs = ks + kAttentionRows * D,
        *qs = vs + kAttentionRows * Dv, *dys = qs + kAttentionTile * (D + 1);
  loadTile(key + keyHead * Sk * D, key0, Sk, kAttentionRows, D, D, ks,
           a.rounding);
  loadTile(value + keyHead * Sk * Dv, key0, Sk, kAttentionRows, Dv, Dv, vs,
           a.rounding);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float dk[kRowsPerWarp][kColumnsPerLane] = {};
  float dv[kRowsPerWarp][kColumnsPerLane] = {};
  // A causal block's first key sees no earlier query.
  const int64_t firstQuery =
      a.causal ? key0 / kAttentionTile * kAttentionTile : 0;
  for (int64_t group = 0; group < groups; ++group) {
    const int64_t head = queryHeadOf(a, keyHead, group);
    for (int64_t i0 = firstQuery; i0 < Sq; i0 += kAttentionTile) {
      __syncthreads();
      loadTile(query + head * Sq * D, i0, Sq, kAttentionTile, D, D + 1, qs,
               a.rounding);
      loadTile(resultGrad + head * Sq * Dv, i0, Sq, kAttentionTile, Dv, Dv + 1,
               dys, a.rounding);
      __syncthreads();
      const int64_t queryIndex = i0 + lane;
      const float lse =
          queryIndex < Sq ? logSumExp[head * Sq + queryIndex] : 0.0f;
      const float rowDelta =
          queryIndex < Sq ? delta[head * Sq + queryIndex] : 0.0f;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int local = warp * kRowsPerWarp + rr;
        const int64_t keyIndex = key0 + local;
        if (keyIndex >= Sk)
          continue;
        const bool visible =
            queryIndex < Sq && (!a.causal || keyIndex <= queryIndex);
        float p = 0.0f, ds = 0.0f;
        if (visible) {
          p = expf(a.alpha * dot(qs + lane * (D + 1), ks + local * D, D) - lse);
          const float dp = dot(dys + lane * (Dv + 1), vs + local * Dv, Dv);
          ds = roundOperand(p * (dp - rowDelta), a.rounding);
          p = roundOperand(p, a.rounding);
        }
        accumulateTile(dv[rr], p, dys, Dv + 1, Dv, Sq - i0);
        accumulateTile(dk[rr], ds, qs, D + 1, D, Sq - i0);
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t keyIndex = key0 + warp * kRowsPerWarp + rr;
    if (keyIndex >= Sk)
      continue;
    storeColumns(dv[rr], 1.0f, valueGrad + (keyHead * Sk + keyIndex) * Dv, Dv);
    storeColumns(dk[rr], a.alpha, keyGrad + (keyHead * Sk + keyIndex) * D, D);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

namespace {
/// Launches mapKernel on T storage, vectorised when every pointer is
/// 16-byte aligned.
template <class T, int kIn, int kOut, class F>
void mapAs(const void *const (&in)[kIn], void *const (&out)[kOut],
           int64_t count, cudaStream_t stream, F f) {
  if (count == 0)
    return;
  MapArgs<T, kIn, kOut> args;
  bool aligned = true;
  for (int k = 0; k < kIn; ++k) {
    args.in[k] = static_cast<const T *>(in[k]);
    aligned &= reinterpret_cast<uintptr_t>(in[k]) % 16 == 0;
  }
  for (int o = 0; o < kOut; ++o) {
    args.out[o] = static_cast<T *>(out[o]);
    aligned &= reinterpret_cast<uintptr_t>(out[o]) % 16 == 0;
  }
  constexpr int64_t kWidth = int64_t(16 / sizeof(T));
  const int64_t work = aligned ? count / kWidth + count % kWidth : count;
  mapKernel<<<blocksFor(work), kThreads, 0, stream>>>(args, count, aligned, f);
}
template <int kIn, int kOut, class F>
void map(Storage storage, const void *const (&in)[kIn],
         void *const (&out)[kOut], int64_t count, cudaStream_t stream, F f) {
  if (storage == Storage::BF16)
    mapAs<uint16_t>(in, out, count, stream, f);
  else
    mapAs<float>(in, out, count, stream, f);
}

} // namespace

void binary(Binary kind, Storage storage, const void *lhs, const void *rhs,
            void *out, int64_t count, const Indexing &index, bool sameShapes,
            cudaStream_t stream) {
  if (sameShapes) {
    map(storage, {lhs, rhs}, {out}, count, stream, BinaryOp{kind});
    return;
  }
  if (count == 0)
    return;
  if (storage == Storage::BF16)
    binaryKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        kind, static_cast<const uint16_t *>(lhs),
        static_cast<const uint16_t *>(rhs), static_cast<uint16_t *>(out), count,
        index);
  else
    binaryKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        kind, static_cast<const float *>(lhs), static_cast<const float *>(rhs),
        static_cast<float *>(out), count, index);
}
void scale(Storage storage, const void *in, float factor, void *out,
           int64_t count, cudaStream_t stream) {
  map(storage, {in}, {out}, count, stream, ScaleOp{factor});
}
void gelu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream) {
  map(storage, {in}, {out}, count, stream, GeluOp{});
}
void silu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream) {
  map(storage, {in}, {out}, count, stream, SiluOp{});
}
void geluGrad(Storage storage, const void *grad, const void *input, void *out,
              int64_t count, cudaStream_t stream) {
  map(storage, {grad, input}, {out}, count, stream, GeluGradOp{});
}
void siluGrad(Storage storage, const void *grad, const void *input, void *out,
              int64_t count, cudaStream_t stream) {
  map(storage, {grad, input}, {out}, count, stream, SiluGradOp{});
}
void relu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream) {
  map(storage, {in}, {out}, count, stream, ReluOp{});
}
void reluGrad(Storage storage, const void *grad, const void *input, void *out,
              int64_t count, cudaStream_t stream) {
  map(storage, {grad, input}, {out}, count, stream, ReluGradOp{});
}
void swiglu(Storage storage, const void *gate, const void *up, void *out,
            int64_t count, cudaStream_t stream) {
  map(storage, {gate, up}, {out}, count, stream, SwigluOp{});
}
void swigluGrad(Storage storage, const void *grad, const void *gate,
                const void *up, void *gateGrad, void *upGrad, int64_t count,
                cudaStream_t stream) {
  map(storage, {grad, gate, up}, {gateGrad, upGrad}, count, stream,
      SwigluGradOp{});
}
void toBf16(const float *in, uint16_t *out, int64_t count,
            cudaStream_t stream) {
  toBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count);
}
void roundBf16(float *data, int64_t count, cudaStream_t stream) {
  roundBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(data, count);
}
void fromBf16(const uint16_t *in, float *out, int64_t count,
              cudaStream_t stream) {
  fromBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count);
}
void sumRows(const void *in, bool bf16, int64_t rows, int64_t cols,
             float *partials, float *out, cudaStream_t stream) {
  if (cols == 0)
    return;
  const int64_t chunks = rowSumChunks(rows);
  const unsigned columnBlocks = unsigned((cols + kThreads - 1) / kThreads);
  if (chunks == 0) {
    fill(0.0f, out, cols, stream);
    return;
  }
  const dim3 grid(columnBlocks, unsigned(chunks));
  if (bf16)
    sumRowChunksKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(in), rows, cols, partials);
  else
    sumRowChunksKernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const float *>(in), rows, cols, partials);
  sumChunksKernel<<<columnBlocks, kThreads, 0, stream>>>(partials, chunks, cols,
                                                         out);
}
void fill(float value, float *out, int64_t count, cudaStream_t stream) {
  fillKernel<<<blocksFor(count), kThreads, 0, stream>>>(value, out, count);
}
void gather(Storage storage, const void *in, int64_t base, void *out,
            int64_t count, const Indexing &index, cudaStream_t stream) {
  if (count == 0)
    return;
  if (storage == Storage::BF16)
    gatherKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(in), base, static_cast<uint16_t *>(out),
        count, index);
  else
    gatherKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const float *>(in), base, static_cast<float *>(out), count,
        index);
}
void scatter(Storage storage, const void *in, void *out, int64_t base,
             int64_t count, const Indexing &index, cudaStream_t stream) {
  if (count == 0)
    return;
  if (storage == Storage::BF16)
    scatterKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(in), static_cast<uint16_t *>(out), base,
        count, index);
  else
    scatterKernel<<<blocksFor(count), kThreads, 0, stream>>>(
        static_cast<const float *>(in), static_cast<float *>(out), base, count,
        index);
}

namespace {
template <class In, class Out>
void reduceAs(const void *in, void *out, int64_t count, const Indexing &index,
              const Indexing &inner, bool mean, cudaStream_t stream) {
  int64_t reduced = 1;
  for (int d = 0; d < inner.rank; ++d)
    reduced *= inner.size[d];
  const bool contiguous = inner.rank > 0 && inner.stride[inner.rank - 1] == 1 &&
                          inner.size[inner.rank - 1] >= 32;
  if (contiguous) {
    reduceContiguousKernel<<<blocksFor(count * 32), kThreads, 0, stream>>>(
        static_cast<const In *>(in), static_cast<Out *>(out), count, index,
        inner, reduced, mean);
    return;
  }
  reduceTiledKernel<<<tilesFor(count), kTileThreads, 0, stream>>>(
      static_cast<const In *>(in), static_cast<Out *>(out), count, index, inner,
      reduced, mean);
}
} // namespace

void reduce(Storage inStorage, const void *in, Storage outStorage, void *out,
            int64_t count, const Indexing &index, const Indexing &inner,
            bool mean, cudaStream_t stream) {
  if (count == 0)
    return;
  const bool bf16In = inStorage == Storage::BF16,
             bf16Out = outStorage == Storage::BF16;
  if (bf16In && bf16Out)
    reduceAs<uint16_t, uint16_t>(in, out, count, index, inner, mean, stream);
  else if (bf16In)
    reduceAs<uint16_t, float>(in, out, count, index, inner, mean, stream);
  else if (bf16Out)
    reduceAs<float, uint16_t>(in, out, count, index, inner, mean, stream);
  else
    reduceAs<float, float>(in, out, count, index, inner, mean, stream);
}
void softmax(const float *x, float *y, int64_t rows, int64_t cols, bool causal,
             cudaStream_t stream) {
  if (rows > 0 && cols > 0)
    softmaxKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, y, cols, causal);
}
void softmaxGrad(const float *grad, const float *result, float *out,
                 int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0 && cols > 0)
    softmaxGradKernel<<<unsigned(rows), kThreads, 0, stream>>>(grad, result,
                                                               out, cols);
}
namespace {
template <class T>
void normAs(const void *x, const float *gamma, const float *beta, void *y,
            int64_t rows, int64_t cols, float epsilon, cudaStream_t stream) {
  normKernel<<<unsigned(rows), kThreads, 0, stream>>>(
      static_cast<const T *>(x), gamma, beta, static_cast<T *>(y), cols,
      epsilon);
}
template <class T>
void normGradAs(const void *grad, const void *input, const float *gamma,
                void *inputGrad, float *gammaGrad, float *betaGrad,
                float *rowStats, int64_t rows, int64_t cols, float epsilon,
                cudaStream_t stream) {
  if (rows > 0)
    normGradRowsKernel<<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const T *>(grad), static_cast<const T *>(input), gamma,
        static_cast<T *>(inputGrad), rowStats, cols, betaGrad == nullptr,
        epsilon);
  normGradColumnsKernel<<<tilesFor(cols), kTileThreads, 0, stream>>>(
      static_cast<const T *>(grad), static_cast<const T *>(input), rowStats,
      gammaGrad, betaGrad, rows, cols);
}
} // namespace

void norm(Storage storage, const void *x, const float *gamma, const float *beta,
          void *y, int64_t rows, int64_t cols, float epsilon,
          cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  if (storage == Storage::BF16)
    normAs<uint16_t>(x, gamma, beta, y, rows, cols, epsilon, stream);
  else
    normAs<float>(x, gamma, beta, y, rows, cols, epsilon, stream);
}
void normGrad(Storage storage, const void *grad, const void *input,
              const float *gamma, void *inputGrad, float *gammaGrad,
              float *betaGrad, float *rowStats, int64_t rows, int64_t cols,
              float epsilon, cudaStream_t stream) {
  if (cols == 0)
    return;
  if (storage == Storage::BF16)
    normGradAs<uint16_t>(grad, input, gamma, inputGrad, gammaGrad, betaGrad,
                         rowStats, rows, cols, epsilon, stream);
  else
    normGradAs<float>(grad, input, gamma, inputGrad, gammaGrad, betaGrad,
                      rowStats, rows, cols, epsilon, stream);
}
void normSplitPartials(const float *x, int64_t rows, int64_t cols, bool rms,
                       float *partials, cudaStream_t stream) {
  if (rows > 0)
    normSplitPartialsKernel<<<unsigned(rows), kThreads, 0, stream>>>(
        x, cols, rms, partials);
}
void normSplitCombine(const float *gathered, int64_t blocks, int64_t rows,
                      int64_t k, int64_t cols, bool rms, float epsilon,
                      float *rowStats, cudaStream_t stream) {
  if (rows > 0)
    normSplitCombineKernel<<<blocksFor(rows), kThreads, 0, stream>>>(
        gathered, blocks, rows, k, cols, rms, epsilon, rowStats);
}
void normApply(const float *x, const float *gamma, const float *beta,
               const float *rowStats, float *y, int64_t rows, int64_t cols,
               cudaStream_t stream) {
  if (rows * cols > 0)
    normApplyKernel<<<blocksFor(rows * cols), kThreads, 0, stream>>>(
        x, gamma, beta, rowStats, y, rows, cols);
}
void normSplitGradPartials(const float *grad, const float *x,
                           const float *gamma, const float *rowStats,
                           int64_t rows, int64_t cols, bool rms,
                           float *partials, cudaStream_t stream) {
  if (rows > 0)
    normSplitGradPartialsKernel<<<unsigned(rows), kThreads, 0, stream>>>(
        grad, x, gamma, rowStats, cols, rms, partials);
}
void normSplitGrad(const float *grad, const float *x, const float *gamma,
                   const float *rowStats, const float *gathered, int64_t blocks,
                   int64_t rows, int64_t cols, bool rms, float *inputGrad,
                   float *gammaGrad, float *betaGrad, cudaStream_t stream) {
  if (cols == 0)
    return;
  // Gamma and beta first: inputGrad may overwrite grad or x.
  normGradColumnsKernel<<<tilesFor(cols), kTileThreads, 0, stream>>>(
      grad, x, rowStats, gammaGrad, betaGrad, rows, cols);
  if (rows > 0)
    normSplitGradRowsKernel<<<blocksFor(rows * cols), kThreads, 0, stream>>>(
        grad, x, gamma, rowStats, gathered, blocks, rows, cols, rms, inputGrad);
}
void rotary(Storage storage, const void *x, void *y, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse, const int32_t *positions,
            int64_t positionRows, cudaStream_t stream) {
  if (outer * seq * (dim / 2) == 0)
    return;
  const int64_t perPositionRow =
      positions && positionRows > 0 ? outer / positionRows : 1;
  const unsigned blocks = blocksFor(outer * seq * (dim / 2));
  if (storage == Storage::BF16)
    rotaryKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(x), static_cast<uint16_t *>(y), outer,
        seq, dim, theta, inverse, positions, perPositionRow);
  else
    rotaryKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float *>(x), static_cast<float *>(y), outer, seq, dim,
        theta, inverse, positions, perPositionRow);
}
void cacheWrite(float *cache, const float *update, int64_t outer,
                int64_t cacheRows, int64_t rows, int64_t dim,
                const int32_t *positions, int64_t positionRows,
                cudaStream_t stream) {
  if (outer * rows * dim == 0 || positionRows <= 0)
    return;
  cacheWriteKernel<<<blocksFor(outer * rows * dim), kThreads, 0, stream>>>(
      cache, update, outer, cacheRows, rows, dim, positions,
      outer / positionRows);
}
void embedding(const float *table, int64_t firstRow, int64_t rows,
               int64_t hidden, const int32_t *ids, int64_t tokens,
               const int32_t *slotMap, Storage storage, void *out,
               cudaStream_t stream) {
  if (tokens * hidden == 0)
    return;
  if (storage == Storage::BF16)
    embeddingKernel<<<blocksFor(tokens * hidden), kThreads, 0, stream>>>(
        table, firstRow, rows, hidden, ids, tokens, slotMap,
        static_cast<uint16_t *>(out));
  else
    embeddingKernel<<<blocksFor(tokens * hidden), kThreads, 0, stream>>>(
        table, firstRow, rows, hidden, ids, tokens, slotMap,
        static_cast<float *>(out));
}
void embeddingGrad(const float *grad, const int32_t *ids, int64_t tokens,
                   int64_t firstRow, int64_t rows, int64_t hidden,
                   const int32_t *slotMap, int64_t tableRows, float *tableGrad,
                   cudaStream_t stream) {
  cudaMemsetAsync(tableGrad, 0, size_t(tableRows * hidden) * sizeof(float),
                  stream);
  embeddingGradKernel<<<blocksFor(hidden), kThreads, 0, stream>>>(
      grad, ids, tokens, firstRow, rows, hidden, slotMap, tableGrad);
}
void scatterRows(const void *packed, const int64_t *rows, int64_t count,
                 int64_t words, void *array, cudaStream_t stream) {
  if (count * words == 0)
    return;
  scatterRowsKernel<<<blocksFor(count * words), kThreads, 0, stream>>>(
      static_cast<const uint32_t *>(packed), rows, count, words,
      static_cast<uint32_t *>(array));
}
void gatherRows(const void *array, const int64_t *rows, int64_t count,
                int64_t words, void *packed, cudaStream_t stream) {
  if (count * words == 0)
    return;
  gatherRowsKernel<<<blocksFor(count * words), kThreads, 0, stream>>>(
      static_cast<const uint32_t *>(array), rows, count, words,
      static_cast<uint32_t *>(packed));
}
void adamwRows(const AdamWTensor &t, const int32_t *rows, int64_t listed,
               int64_t rowElements, cudaStream_t stream) {
  if (listed * rowElements == 0)
    return;
  adamwRowsKernel<<<blocksFor(listed * rowElements), kThreads, 0, stream>>>(
      t, rows, listed, rowElements);
}
void normSquaredRows(const float *in, const int32_t *rows, int64_t listed,
                     int64_t rowElements, double *perRow, float *out,
                     cudaStream_t stream) {
  if (listed > 0)
    rowSquaresKernel<<<unsigned(listed), kThreads, 0, stream>>>(
        in, rows, rowElements, perRow);
  sumInOrderKernel<<<1, 1, 0, stream>>>(perRow, listed, out);
}
void crossEntropy(const float *logits, const int32_t *targets, int64_t tokens,
                  int64_t vocab, double *rowLoss, float *out,
                  cudaStream_t stream) {
  if (tokens > 0)
    crossEntropyRowsKernel<<<unsigned(tokens), kThreads, 0, stream>>>(
        logits, targets, vocab, rowLoss);
  meanKernel<<<1, kThreads, 0, stream>>>(rowLoss, tokens, out);
}
void crossEntropyGrad(const float *logits, const int32_t *targets,
                      const float *lossGrad, int64_t tokens, int64_t vocab,
                      float *out, cudaStream_t stream) {
  if (tokens > 0)
    crossEntropyGradKernel<<<unsigned(tokens), kThreads, 0, stream>>>(
        logits, targets, lossGrad, tokens, vocab, out);
}
void crossEntropyBlockStats(const float *logits, const int32_t *targets,
                            int64_t tokens, int64_t columns,
                            int64_t firstColumn, float *stats,
                            cudaStream_t stream) {
  if (tokens > 0)
    crossEntropyBlockStatsKernel<<<unsigned(tokens), kThreads, 0, stream>>>(
        logits, targets, columns, firstColumn, stats);
}
void mergeCrossEntropyStats(const float *chunkStats, int64_t chunks,
                            int64_t tokens, float *stats, cudaStream_t stream) {
  if (tokens > 0)
    mergeStatsKernel<<<blocksFor(tokens), kThreads, 0, stream>>>(
        chunkStats, chunks, tokens, stats);
}
void crossEntropyFromBlockStats(const float *stats, int64_t blocks,
                                int64_t tokens, double *rowLoss, float *out,
                                cudaStream_t stream) {
  if (tokens > 0)
    crossEntropyCombineKernel<<<blocksFor(tokens), kThreads, 0, stream>>>(
        stats, blocks, tokens, rowLoss);
  meanKernel<<<1, kThreads, 0, stream>>>(rowLoss, tokens, out);
}
void crossEntropyGradFromBlockStats(const float *logits, const int32_t *targets,
                                    const float *lossGrad, const float *stats,
                                    int64_t blocks, int64_t tokens,
                                    int64_t columns, int64_t firstColumn,
                                    float *out, cudaStream_t stream) {
  if (tokens > 0)
    crossEntropyGradBlockKernel<<<unsigned(tokens), kThreads, 0, stream>>>(
        logits, targets, lossGrad, stats, blocks, tokens, columns, firstColumn,
        out);
}
void normSquared(const float *in, int64_t count, double *partial, float *out,
                 cudaStream_t stream) {
  static_assert(kNormPartials == kThreads, "one partial per thread");
  squaresKernel<<<kNormPartials, kThreads, 0, stream>>>(in, count, partial);
  sumPartialsKernel<<<1, kThreads, 0, stream>>>(partial, out);
}
void learningRate(const int64_t *step, const float *hyper, float *out,
                  cudaStream_t stream) {
  learningRateKernel<<<1, 1, 0, stream>>>(step, hyper, out);
}
void clipScale(const float *sumSquares, const float *hyper, float *out,
               cudaStream_t stream) {
  clipScaleKernel<<<1, 1, 0, stream>>>(sumSquares, hyper, out);
}
void adamw(const AdamWTensor *tensors, int64_t n, cudaStream_t stream) {
  for (int64_t first = 0; first < n; first += kAdamWTensorsPerLaunch) {
    const int count = int(std::min<int64_t>(kAdamWTensorsPerLaunch, n - first));
    AdamWBatch batch{};
    int64_t largest = 1;
    for (int i = 0; i < count; ++i) {
      batch.tensors[i] = tensors[first + i];
      largest = std::max(largest, tensors[first + i].count);
    }
    adamwKernel<<<dim3(blocksFor(largest), unsigned(count)), kThreads, 0,
                  stream>>>(batch);
  }
}

namespace {

int64_t productOf(const int64_t *dims, int rank) {
  int64_t p = 1;
  for (int d = 0; d < rank; ++d)
    p *= dims[d];
  return p;
}

/// Launches `kernel` with `floats` of dynamic shared memory, raising the
/// kernel's limit past the default 48 KiB once (before any recording: the
/// first run goes step by step).
template <typename Kernel, typename... Args>
void launchWithShared(Kernel kernel, dim3 grid, int64_t floats,
                      cudaStream_t stream, Args... args) {
  const size_t bytes = size_t(floats) * sizeof(float);
  if (bytes > 48 * 1024) {
    int device = 0, optIn = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&optIn, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                           device);
    if (bytes > size_t(optIn))
      throw std::runtime_error(
          "attention: " + std::to_string(bytes) +
          " bytes of shared memory per block exceed the GPU's " +
          std::to_string(optIn));
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(bytes));
  }
  kernel<<<grid, kAttentionWarps * 32, bytes, stream>>>(args...);
}

void checkAttentionDims(const AttentionDims &a) {
  if (a.headDim > kMaxAttentionDim || a.valueDim > kMaxAttentionDim)
    throw std::runtime_error(
        "attention: head dims " + std::to_string(a.headDim) + " and " +
        std::to_string(a.valueDim) + " exceed the cuda kernels' " +
        std::to_string(kMaxAttentionDim));
}

unsigned blocksOf(int64_t rows) {
  return unsigned((rows + kAttentionRows - 1) / kAttentionRows);
}

} // namespace

void attention(const float *query, const float *key, const float *value,
               const AttentionDims &a, float *result, float *logSumExp,
               cudaStream_t stream) {
  checkAttentionDims(a);
  const int64_t heads = productOf(a.batch, a.rank);
  if (heads == 0 || a.queries == 0)
    return;
  const int64_t floats = kAttentionRows * a.headDim +
                         kAttentionTile * (a.headDim + 1) +
                         kAttentionTile * a.valueDim;
  launchWithShared(attentionKernel, dim3(unsigned(heads), blocksOf(a.queries)),
                   floats, stream, query, key, value, a, result, logSumExp);
}

void attentionGrad(const float *resultGrad, const float *query,
                   const float *key, const float *value, const float *result,
                   const float *logSumExp, const AttentionDims &a,
                   float *rowDelta, float *queryGrad, float *keyGrad,
                   float *valueGrad, cudaStream_t stream) {
  checkAttentionDims(a);
  const int64_t heads = productOf(a.batch, a.rank);
  const int64_t keyHeads = productOf(a.keyBatch, a.rank);
  if (keyHeads == 0 || a.keys == 0)
    return;
  if (heads == 0) {
    fill(0.0f, keyGrad, keyHeads * a.keys * a.headDim, stream);
    fill(0.0f, valueGrad, keyHeads * a.keys * a.valueDim, stream);
    return;
  }
  const int64_t rows = heads * a.queries;
  attentionDeltaKernel<<<unsigned((rows * 32 + kThreads - 1) / kThreads),
                         kThreads, 0, stream>>>(resultGrad, result, rows,
                                                a.valueDim, rowDelta);
  const int64_t D = a.headDim, Dv = a.valueDim;
  launchWithShared(
      attentionQueryGradKernel, dim3(unsigned(heads), blocksOf(a.queries)),
      kAttentionRows * (D + Dv) + kAttentionTile * (D + 1 + Dv + 1), stream,
      resultGrad, query, key, value, logSumExp,
      static_cast<const float *>(rowDelta), a, queryGrad);
  launchWithShared(
      attentionKeyValueGradKernel, dim3(unsigned(keyHeads), blocksOf(a.keys)),
      kAttentionRows * (D + Dv) + kAttentionTile * (D + 1 + Dv + 1), stream,
      resultGrad, query, key, value, logSumExp,
      static_cast<const float *>(rowDelta), a, heads / keyHeads, keyGrad,
      valueGrad);
}

} // namespace tpc::runtime::cuda
