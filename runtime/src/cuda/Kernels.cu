#include "Kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

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

__global__ void binaryKernel(Binary kind, const float *lhs, const float *rhs,
                             float *out, int64_t count, Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t a, b;
    offsetsOf(i, index, a, b);
    const float x = lhs[a], y = rhs[b];
    switch (kind) {
    case Binary::Add:
      out[i] = x + y;
      break;
    case Binary::Sub:
      out[i] = x - y;
      break;
    case Binary::Mul:
      out[i] = x * y;
      break;
    case Binary::Div:
      out[i] = x / y;
      break;
    }
  }
}

__global__ void scaleKernel(const float *in, float factor, float *out,
                            int64_t count) {
  TPC_GRID_STRIDE(i, count) { out[i] = in[i] * factor; }
}

__global__ void toBf16Kernel(const float *in, uint16_t *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

__global__ void fillKernel(float value, float *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) { out[i] = value; }
}

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void geluKernel(const float *in, float *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    const float x = in[i];
    out[i] =
        0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

__global__ void geluGradKernel(const float *grad, const float *in, float *out,
                               int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    const float x = in[i];
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    out[i] = grad[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

__global__ void siluKernel(const float *in, float *out, int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    const float x = in[i];
    out[i] = x / (1.0f + expf(-x));
  }
}

__global__ void siluGradKernel(const float *grad, const float *in, float *out,
                               int64_t count) {
  TPC_GRID_STRIDE(i, count) {
    const float x = in[i], s = 1.0f / (1.0f + expf(-x));
    out[i] = grad[i] * s * (1.0f + x * (1.0f - s));
  }
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

__global__ void gatherKernel(const float *in, int64_t base, float *out,
                             int64_t count, Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t from, unused;
    offsetsOf(i, index, from, unused);
    out[i] = in[base + from];
  }
}

__global__ void scatterKernel(const float *in, float *out, int64_t base,
                              int64_t count, Indexing index) {
  TPC_GRID_STRIDE(i, count) {
    int64_t to, unused;
    offsetsOf(i, index, to, unused);
    out[base + to] = in[i];
  }
}

__global__ void reduceKernel(const float *in, float *out, int64_t count,
                             Indexing index, Indexing inner, int64_t reduced,
                             bool mean) {
  TPC_GRID_STRIDE(i, count) {
    int64_t base, unused;
    offsetsOf(i, index, base, unused);
    double sum = 0.0;
    for (int64_t j = 0; j < reduced; ++j) {
      int64_t offset, unused2;
      offsetsOf(j, inner, offset, unused2);
      sum += in[base + offset];
    }
    out[i] = float(mean ? sum / double(reduced) : sum);
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
__device__ void rowStatistics(const float *in, int64_t cols, bool rms,
                              float epsilon, float *shared, float &mean,
                              float &rstd) {
  float sum = 0.0f;
  if (!rms) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      sum += in[j];
    mean = blockSum(sum, shared) / float(cols);
  } else {
    mean = 0.0f;
  }
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float centred = in[j] - mean;
    squares += centred * centred;
  }
  rstd = rsqrtf(blockSum(squares, shared) / float(cols) + epsilon);
}

__global__ void normKernel(const float *x, const float *gamma,
                           const float *beta, float *y, int64_t cols,
                           float epsilon) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = int64_t(blockIdx.x) * cols;
  float mean, rstd;
  rowStatistics(x + offset, cols, beta == nullptr, epsilon, shared, mean, rstd);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float normalised = (x[offset + j] - mean) * rstd * gamma[j];
    y[offset + j] = beta ? normalised + beta[j] : normalised;
  }
}

/// inputGrad = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with
/// dxhat = dy gamma (the mean(dxhat) term only for layer norm).
__global__ void normGradRowsKernel(const float *grad, const float *x,
                                   const float *gamma, float *inputGrad,
                                   float *rowStats, int64_t cols, bool rms,
                                   float epsilon) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x, offset = row * cols;
  float mean, rstd;
  rowStatistics(x + offset, cols, rms, epsilon, shared, mean, rstd);
  float sumDxhat = 0.0f, sumDxhatXhat = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float dxhat = grad[offset + j] * gamma[j];
    sumDxhat += dxhat;
    sumDxhatXhat += dxhat * (x[offset + j] - mean) * rstd;
  }
  const float meanDxhat = rms ? 0.0f : blockSum(sumDxhat, shared) / float(cols);
  const float meanDxhatXhat = blockSum(sumDxhatXhat, shared) / float(cols);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xhat = (x[offset + j] - mean) * rstd;
    const float dxhat = grad[offset + j] * gamma[j];
    inputGrad[offset + j] = rstd * (dxhat - meanDxhat - xhat * meanDxhatXhat);
  }
  if (threadIdx.x == 0) {
    rowStats[2 * row] = mean;
    rowStats[2 * row + 1] = rstd;
  }
}

/// gammaGrad[c] = sum over rows of dy xhat, betaGrad[c] = sum of dy: one
/// thread per column, rows in order.
__global__ void normGradColumnsKernel(const float *grad, const float *x,
                                      const float *rowStats, float *gammaGrad,
                                      float *betaGrad, int64_t rows,
                                      int64_t cols) {
  TPC_GRID_STRIDE(c, cols) {
    float g = 0.0f, b = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float dy = grad[r * cols + c];
      g += dy * (x[r * cols + c] - rowStats[2 * r]) * rowStats[2 * r + 1];
      b += dy;
    }
    gammaGrad[c] = g;
    if (betaGrad)
      betaGrad[c] = b;
  }
}

__global__ void rotaryKernel(const float *x, float *y, int64_t outer,
                             int64_t seq, int64_t dim, double theta,
                             bool inverse) {
  const int64_t half = dim / 2, count = outer * seq * half;
  TPC_GRID_STRIDE(i, count) {
    const int64_t k = i % half, row = i / half, position = row % seq;
    double angle =
        double(position) * pow(theta, -2.0 * double(k) / double(dim));
    if (inverse)
      angle = -angle;
    const float c = float(cos(angle)), s = float(sin(angle));
    const float *in = x + row * dim;
    float *out = y + row * dim;
    const float a = in[k], b = in[k + half];
    out[k] = a * c - b * s;
    out[k + half] = b * c + a * s;
  }
}

//===----------------------------------------------------------------------===//
// Embeddings and the loss
//===----------------------------------------------------------------------===//

__global__ void embeddingKernel(const float *table, int64_t vocab,
                                int64_t hidden, const int32_t *ids,
                                int64_t tokens, float *out) {
  TPC_GRID_STRIDE(i, tokens * hidden) {
    const int64_t t = i / hidden, h = i % hidden;
    const int32_t id = ids[t];
    // The loader checked the token file against the vocabulary.
    out[i] = id >= 0 && id < vocab ? table[int64_t(id) * hidden + h] : 0.0f;
  }
}

/// One thread per hidden column, tokens in order: no two threads write one
/// element, so the sums need no atomics and are reproducible.
__global__ void embeddingGradKernel(const float *grad, const int32_t *ids,
                                    int64_t tokens, int64_t vocab,
                                    int64_t hidden, float *tableGrad) {
  TPC_GRID_STRIDE(h, hidden) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t id = ids[t];
      if (id >= 0 && id < vocab)
        tableGrad[int64_t(id) * hidden + h] += grad[t * hidden + h];
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

__global__ void adamwKernel(const float *param, const float *grad,
                            const float *expAvg, const float *expAvgSq,
                            const float *lrIn, const int64_t *stepIn,
                            const float *gradScaleIn, double beta1,
                            double beta2, double epsilon, double weightDecay,
                            float *newParam, float *newExpAvg,
                            float *newExpAvgSq, int64_t count) {
  // The scalars as the CPU kernel rounds them (double, then f32 once).
  const float lr = *lrIn, gradScale = *gradScaleIn;
  const double step = double(*stepIn);
  const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
  const float b1 = float(beta1), c1 = float(1.0 - beta1);
  const float b2 = float(beta2), c2 = float(1.0 - beta2);
  const float decay = float(1.0 - double(lr) * weightDecay);
  const float stepSize = float(double(lr) / bc1);
  const float bc2Sqrt = float(sqrt(bc2)), eps = float(epsilon);
  TPC_GRID_STRIDE(i, count) {
    const float g = grad[i] * gradScale;
    const float m = b1 * expAvg[i] + c1 * g;
    const float v = b2 * expAvgSq[i] + c2 * (g * g);
    const float denom = sqrtf(v) / bc2Sqrt + eps;
    newParam[i] = param[i] * decay - stepSize * (m / denom);
    newExpAvg[i] = m;
    newExpAvgSq[i] = v;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

void binary(Binary kind, const float *lhs, const float *rhs, float *out,
            int64_t count, const Indexing &index, cudaStream_t stream) {
  binaryKernel<<<blocksFor(count), kThreads, 0, stream>>>(kind, lhs, rhs, out,
                                                          count, index);
}
void scale(const float *in, float factor, float *out, int64_t count,
           cudaStream_t stream) {
  scaleKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, factor, out,
                                                         count);
}
void toBf16(const float *in, uint16_t *out, int64_t count,
            cudaStream_t stream) {
  toBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count);
}
void fill(float value, float *out, int64_t count, cudaStream_t stream) {
  fillKernel<<<blocksFor(count), kThreads, 0, stream>>>(value, out, count);
}
void gelu(const float *in, float *out, int64_t count, cudaStream_t stream) {
  geluKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count);
}
void silu(const float *in, float *out, int64_t count, cudaStream_t stream) {
  siluKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count);
}
void geluGrad(const float *grad, const float *input, float *out, int64_t count,
              cudaStream_t stream) {
  geluGradKernel<<<blocksFor(count), kThreads, 0, stream>>>(grad, input, out,
                                                            count);
}
void siluGrad(const float *grad, const float *input, float *out, int64_t count,
              cudaStream_t stream) {
  siluGradKernel<<<blocksFor(count), kThreads, 0, stream>>>(grad, input, out,
                                                            count);
}
void gather(const float *in, int64_t base, float *out, int64_t count,
            const Indexing &index, cudaStream_t stream) {
  gatherKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, base, out, count,
                                                          index);
}
void scatter(const float *in, float *out, int64_t base, int64_t count,
             const Indexing &index, cudaStream_t stream) {
  scatterKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, base, count,
                                                           index);
}
void reduce(const float *in, float *out, int64_t count, const Indexing &index,
            const Indexing &inner, bool mean, cudaStream_t stream) {
  int64_t reduced = 1;
  for (int d = 0; d < inner.rank; ++d)
    reduced *= inner.size[d];
  reduceKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, out, count, index,
                                                          inner, reduced, mean);
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
void norm(const float *x, const float *gamma, const float *beta, float *y,
          int64_t rows, int64_t cols, float epsilon, cudaStream_t stream) {
  if (rows > 0 && cols > 0)
    normKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, gamma, beta, y, cols,
                                                        epsilon);
}
void normGrad(const float *grad, const float *input, const float *gamma,
              float *inputGrad, float *gammaGrad, float *betaGrad,
              float *rowStats, int64_t rows, int64_t cols, float epsilon,
              cudaStream_t stream) {
  if (cols == 0)
    return;
  if (rows > 0)
    normGradRowsKernel<<<unsigned(rows), kThreads, 0, stream>>>(
        grad, input, gamma, inputGrad, rowStats, cols, betaGrad == nullptr,
        epsilon);
  normGradColumnsKernel<<<blocksFor(cols), kThreads, 0, stream>>>(
      grad, input, rowStats, gammaGrad, betaGrad, rows, cols);
}
void rotary(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, cudaStream_t stream) {
  rotaryKernel<<<blocksFor(outer * seq * (dim / 2)), kThreads, 0, stream>>>(
      x, y, outer, seq, dim, theta, inverse);
}
void embedding(const float *table, int64_t vocab, int64_t hidden,
               const int32_t *ids, int64_t tokens, float *out,
               cudaStream_t stream) {
  embeddingKernel<<<blocksFor(tokens * hidden), kThreads, 0, stream>>>(
      table, vocab, hidden, ids, tokens, out);
}
void embeddingGrad(const float *grad, const int32_t *ids, int64_t tokens,
                   int64_t vocab, int64_t hidden, float *tableGrad,
                   cudaStream_t stream) {
  cudaMemsetAsync(tableGrad, 0, size_t(vocab * hidden) * sizeof(float), stream);
  embeddingGradKernel<<<blocksFor(hidden), kThreads, 0, stream>>>(
      grad, ids, tokens, vocab, hidden, tableGrad);
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
void adamw(const float *param, const float *grad, const float *expAvg,
           const float *expAvgSq, const float *lr, const int64_t *step,
           const float *gradScale, double beta1, double beta2, double epsilon,
           double weightDecay, float *newParam, float *newExpAvg,
           float *newExpAvgSq, int64_t count, cudaStream_t stream) {
  adamwKernel<<<blocksFor(count), kThreads, 0, stream>>>(
      param, grad, expAvg, expAvgSq, lr, step, gradScale, beta1, beta2, epsilon,
      weightDecay, newParam, newExpAvg, newExpAvgSq, count);
}

} // namespace tpc::runtime::cuda
