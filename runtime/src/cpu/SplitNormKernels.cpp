// CPU kernels, f32: layer and RMS norms (and their gradients) whose features
// are split over the ranks of a group. See Kernels.h for the semantics and
// KernelSupport.h for the conventions. Each rank reduces its features to
// per-row partial statistics in double, the RowGather callback exchanges
// them, and every rank combines all blocks' statistics in block order, so
// every rank normalises a row alike.

#include "KernelSupport.h"

namespace tpc::runtime::cpu {

using namespace detail;

namespace {

/// Per-row statistics of the whole rows, in double.
struct RowStats {
  std::vector<double> mean, scale; // mean (0 for RMS) and 1 / sqrt(var + eps)
  int64_t fullCols = 0;
};

/// Blocks in a gathered [blocks, rows, k] buffer.
int64_t blocksOf(const std::vector<float> &gathered, int64_t rows, int64_t k) {
  int64_t blocks = rows * k ? int64_t(gathered.size()) / (rows * k) : 1;
  if (blocks < 1 || blocks * rows * k != int64_t(gathered.size()))
    throw std::runtime_error("split norm: gathered statistics of size " +
                             std::to_string(gathered.size()) +
                             " are not [blocks, " + std::to_string(rows) +
                             ", " + std::to_string(k) + "]");
  return blocks;
}

/// Layer-norm statistics: each block's {mean, sum of squared deviations},
/// combined as Chan et al.'s parallel variance (blocks of equal size).
RowStats layerNormStats(const float *x, int64_t rows, int64_t cols,
                        float epsilon, const RowGather &gather) {
  std::vector<float> local(size_t(2 * rows));
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double mean = sumDouble(x + r * cols, cols) / double(cols);
      local[size_t(2 * r)] = static_cast<float>(mean);
      local[size_t(2 * r + 1)] =
          static_cast<float>(sumSquaredDouble(x + r * cols, cols, mean));
    }
  });
  std::vector<float> gathered = gather(local, 2);
  int64_t blocks = blocksOf(gathered, rows, 2);
  RowStats stats{std::vector<double>(size_t(rows)),
                 std::vector<double>(size_t(rows)), blocks * cols};
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (int64_t b = 0; b < blocks; ++b)
      mean += double(gathered[size_t((b * rows + r) * 2)]);
    mean /= double(blocks);
    double m2 = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      double blockMean = double(gathered[size_t((b * rows + r) * 2)]);
      m2 += double(gathered[size_t((b * rows + r) * 2 + 1)]) +
            double(cols) * (blockMean - mean) * (blockMean - mean);
    }
    stats.mean[size_t(r)] = mean;
    stats.scale[size_t(r)] =
        1.0 / std::sqrt(m2 / double(stats.fullCols) + double(epsilon));
  }
  return stats;
}

/// Sums over blocks of a gathered [blocks, rows, k] buffer: [rows, k].
std::vector<double> sumBlocks(const std::vector<float> &gathered, int64_t rows,
                              int64_t k) {
  int64_t blocks = blocksOf(gathered, rows, k);
  std::vector<double> total(size_t(rows * k), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < rows * k; ++i)
      total[size_t(i)] += double(gathered[size_t(b * rows * k + i)]);
  return total;
}

} // namespace

void layerNormSplit(const float *x, const float *gamma, const float *beta,
                    float *y, int64_t rows, int64_t cols, float epsilon,
                    const RowGather &gather) {
  RowStats stats = layerNormStats(x, rows, cols, epsilon, gather);
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      float mean = static_cast<float>(stats.mean[size_t(r)]);
      float rstd = static_cast<float>(stats.scale[size_t(r)]);
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < cols; ++i)
        yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
  });
}

void rmsNormSplit(const float *x, const float *gamma, float *y, int64_t rows,
                  int64_t cols, float epsilon, const RowGather &gather) {
  std::vector<float> local(static_cast<size_t>(rows));
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      local[size_t(r)] =
          static_cast<float>(sumSquaredDouble(x + r * cols, cols, 0.0));
  });
  std::vector<float> gathered = gather(local, 1);
  int64_t blocks = blocksOf(gathered, rows, 1);
  std::vector<double> squares = sumBlocks(gathered, rows, 1);
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      float rrms = static_cast<float>(
          1.0 / std::sqrt(squares[size_t(r)] / double(blocks * cols) +
                          double(epsilon)));
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < cols; ++i)
        yr[i] = xr[i] * rrms * gamma[i];
    }
  });
}

void layerNormGradSplit(const float *resultGrad, const float *input,
                        const float *gamma, float *inputGrad, float *gammaGrad,
                        float *betaGrad, int64_t rows, int64_t cols,
                        float epsilon, const RowGather &gather) {
  if (cols <= 0)
    return;
  RowStats stats = layerNormStats(input, rows, cols, epsilon, gather);
  // This rank's {sum of g, sum of g (x - mean)} per row, g = dy gamma.
  std::vector<float> local(size_t(2 * rows));
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *dy = resultGrad + r * cols, *x = input + r * cols;
      double mean = stats.mean[size_t(r)], sumG = 0.0, sumGX = 0.0;
      for (int64_t i = 0; i < cols; ++i) {
        double g = double(dy[i]) * double(gamma[i]);
        sumG += g;
        sumGX += g * (double(x[i]) - mean);
      }
      local[size_t(2 * r)] = static_cast<float>(sumG);
      local[size_t(2 * r + 1)] = static_cast<float>(sumGX);
    }
  });
  std::vector<double> sums = sumBlocks(gather(local, 2), rows, 2);
  // Gamma and beta partials per block of rows (fixed by the shape), then
  // the input gradient, which may overwrite resultGrad or input.
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = rows > 0 ? (rows + blockRows - 1) / blockRows : 0;
  std::vector<double> partial(size_t(std::max<int64_t>(blocks, 1) * 2 * cols),
                              0.0);
  double fullCols = double(stats.fullCols);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * 2 * cols;
      double *accBeta = accGamma + cols;
      for (int64_t r = b * blockRows; r < std::min(rows, (b + 1) * blockRows);
           ++r) {
        const float *dy = resultGrad + r * cols, *x = input + r * cols;
        float *dx = inputGrad + r * cols;
        double mean = stats.mean[size_t(r)], rstd = stats.scale[size_t(r)];
        for (int64_t i = 0; i < cols; ++i) {
          accGamma[i] += double(dy[i]) * ((double(x[i]) - mean) * rstd);
          accBeta[i] += double(dy[i]);
        }
        float a = static_cast<float>(rstd);
        float meanG = static_cast<float>(sums[size_t(2 * r)] / fullCols);
        float k = static_cast<float>(rstd * rstd * rstd *
                                     sums[size_t(2 * r + 1)] / fullCols);
        float meanF = static_cast<float>(mean);
        TPC_INDEPENDENT_LOOP
        for (int64_t i = 0; i < cols; ++i)
          dx[i] = a * (dy[i] * gamma[i] - meanG) - (x[i] - meanF) * k;
      }
    }
  });
  combineBlocks(partial, blocks, 2 * cols, 0, cols, gammaGrad);
  combineBlocks(partial, blocks, 2 * cols, cols, cols, betaGrad);
}

void rmsNormGradSplit(const float *resultGrad, const float *input,
                      const float *gamma, float *inputGrad, float *gammaGrad,
                      int64_t rows, int64_t cols, float epsilon,
                      const RowGather &gather) {
  if (cols <= 0)
    return;
  // This rank's {sum of x^2, sum of g x} per row, g = dy gamma: one gather.
  std::vector<float> local(size_t(2 * rows));
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *dy = resultGrad + r * cols, *x = input + r * cols;
      double sumGX = 0.0;
      for (int64_t i = 0; i < cols; ++i)
        sumGX += double(dy[i]) * double(gamma[i]) * double(x[i]);
      local[size_t(2 * r)] = static_cast<float>(sumSquaredDouble(x, cols, 0.0));
      local[size_t(2 * r + 1)] = static_cast<float>(sumGX);
    }
  });
  std::vector<float> gathered = gather(local, 2);
  double fullCols = double(blocksOf(gathered, rows, 2) * cols);
  std::vector<double> sums = sumBlocks(gathered, rows, 2);
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = rows > 0 ? (rows + blockRows - 1) / blockRows : 0;
  std::vector<double> partial(size_t(std::max<int64_t>(blocks, 1) * cols), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * cols;
      for (int64_t r = b * blockRows; r < std::min(rows, (b + 1) * blockRows);
           ++r) {
        const float *dy = resultGrad + r * cols, *x = input + r * cols;
        float *dx = inputGrad + r * cols;
        double scale =
            1.0 / std::sqrt(sums[size_t(2 * r)] / fullCols + double(epsilon));
        for (int64_t i = 0; i < cols; ++i)
          accGamma[i] += double(dy[i]) * (double(x[i]) * scale);
        float a = static_cast<float>(scale);
        float k = static_cast<float>(scale * scale * scale *
                                     sums[size_t(2 * r + 1)] / fullCols);
        TPC_INDEPENDENT_LOOP
        for (int64_t i = 0; i < cols; ++i)
          dx[i] = a * (dy[i] * gamma[i]) - x[i] * k;
      }
    }
  });
  combineBlocks(partial, blocks, cols, 0, cols, gammaGrad);
}

} // namespace tpc::runtime::cpu
