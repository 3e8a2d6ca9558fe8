// The CUDA backend's own kernels (Kernels.cu), one launcher per kernel. Each
// has the semantics of the CPU kernel of the same name (cpu/Kernels.h): the
// CPU backend is their reference (test/runtime/KernelParityTest.cpp). Every
// launcher queues work on `stream` and returns; pointers are device memory.
// Reductions run in a fixed order, so a step is reproducible on one GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tpc::runtime::cuda {

/// Up to this many dims per tensor (the plans use at most 5).
inline constexpr int kMaxDims = 8;

/// A shape, and per dim a stride into another tensor (0: broadcast).
struct Indexing {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  int64_t stride2[kMaxDims] = {};
};

enum class Binary : int { Add, Sub, Mul, Div };
/// How a tensor's elements are stored: f32, or bf16 as raw bits. Typed
/// kernels load each element as f32, compute in f32 and round each result
/// once into its storage (the CPU backend's mixed-precision rule).
enum class Storage : int { F32, BF16 };

/// out[i] = lhs[a(i)] op rhs[b(i)]: `index.size` is out's shape, `stride`
/// lhs's and `stride2` rhs's strides (0 on broadcast dims). With
/// `sameShapes` (no broadcast) it moves 16 bytes per tensor at a time.
void binary(Binary kind, Storage storage, const void *lhs, const void *rhs,
            void *out, int64_t count, const Indexing &index, bool sameShapes,
            cudaStream_t stream);
inline void binary(Binary kind, const float *lhs, const float *rhs, float *out,
                   int64_t count, const Indexing &index, cudaStream_t stream) {
  binary(kind, Storage::F32, lhs, rhs, out, count, index, false, stream);
}
/// Elementwise kinds over same-shape tensors of one storage, 16 bytes per
/// tensor at a time where every pointer is 16-byte aligned.
void scale(Storage storage, const void *in, float factor, void *out,
           int64_t count, cudaStream_t stream);
void gelu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream);
void silu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream);
void geluGrad(Storage storage, const void *resultGrad, const void *input,
              void *out, int64_t count, cudaStream_t stream);
void siluGrad(Storage storage, const void *resultGrad, const void *input,
              void *out, int64_t count, cudaStream_t stream);
void relu(Storage storage, const void *in, void *out, int64_t count,
          cudaStream_t stream);
void reluGrad(Storage storage, const void *resultGrad, const void *input,
              void *out, int64_t count, cudaStream_t stream);
/// out = silu(gate) * up; and its gradients (cpu::swiglu, swigluGrad).
void swiglu(Storage storage, const void *gate, const void *up, void *out,
            int64_t count, cudaStream_t stream);
void swigluGrad(Storage storage, const void *resultGrad, const void *gate,
                const void *up, void *gateGrad, void *upGrad, int64_t count,
                cudaStream_t stream);
inline void gelu(const float *in, float *out, int64_t count,
                 cudaStream_t stream) {
  gelu(Storage::F32, in, out, count, stream);
}
inline void geluGrad(const float *resultGrad, const float *input, float *out,
                     int64_t count, cudaStream_t stream) {
  geluGrad(Storage::F32, resultGrad, input, out, count, stream);
}
/// out[i] = in[i] rounded to bfloat16 (to nearest even), as raw bits.
void toBf16(const float *in, uint16_t *out, int64_t count, cudaStream_t stream);
/// data[i] rounded to bfloat16 and back, in place (what storing a bf16
/// tensor would keep).
void roundBf16(float *data, int64_t count, cudaStream_t stream);
/// out[i] = the bfloat16 in[i] (raw bits) as f32, exactly.
void fromBf16(const uint16_t *in, float *out, int64_t count,
              cudaStream_t stream);
void fill(float value, float *out, int64_t count, cudaStream_t stream);

/// out[i] = in[j(i)]: `index.size` is out's shape, `stride` in's stride of
/// each out dim (a permutation or a slice), plus `base`.
void gather(Storage storage, const void *in, int64_t base, void *out,
            int64_t count, const Indexing &index, cudaStream_t stream);
inline void gather(const float *in, int64_t base, float *out, int64_t count,
                   const Indexing &index, cudaStream_t stream) {
  gather(Storage::F32, in, base, out, count, index, stream);
}
/// out[j(i)] = in[i] over in's elements (a pad's interior); the rest of out
/// is left as it is. `index.size` is in's shape, `stride` out's strides.
void scatter(Storage storage, const void *in, void *out, int64_t base,
             int64_t count, const Indexing &index, cudaStream_t stream);
inline void scatter(const float *in, float *out, int64_t base, int64_t count,
                    const Indexing &index, cudaStream_t stream) {
  scatter(Storage::F32, in, out, base, count, index, stream);
}
/// Sum (or mean) of `reduced` elements per output element: `index.size` and
/// `stride` walk the kept dims (out's shape), `inner` the reduced ones;
/// accumulated in double, in a fixed order.
void reduce(Storage inStorage, const void *in, Storage outStorage, void *out,
            int64_t count, const Indexing &index, const Indexing &inner,
            bool mean, cudaStream_t stream);
inline void reduce(const float *in, float *out, int64_t count,
                   const Indexing &index, const Indexing &inner, bool mean,
                   cudaStream_t stream) {
  reduce(Storage::F32, in, Storage::F32, out, count, index, inner, mean,
         stream);
}

/// The rows per partial sum of sumRows.
inline constexpr int64_t kRowSumChunk = 128;
/// The partial sums sumRows needs per column (its `partials` holds
/// rowSumChunks(rows) * cols floats).
inline int64_t rowSumChunks(int64_t rows) {
  return (rows + kRowSumChunk - 1) / kRowSumChunk;
}
/// out[c] = the sum over the rows of in [rows, cols] (f32, or bf16 raw
/// bits), accumulated in f32: each chunk of kRowSumChunk rows in order,
/// then the chunks in order, so every run adds in the same order (no
/// atomics).
void sumRows(const void *in, bool bf16, int64_t rows, int64_t cols,
             float *partials, float *out, cudaStream_t stream);

void softmax(const float *x, float *y, int64_t rows, int64_t cols, bool causal,
             cudaStream_t stream);
void softmaxGrad(const float *resultGrad, const float *result, float *out,
                 int64_t rows, int64_t cols, cudaStream_t stream);
/// The sizes of a fused attention (cpu::AttentionShape's meaning): query
/// [batch..., Sq, D], key [keyBatch..., Sk, D], value [keyBatch..., Sk, Dv].
struct AttentionDims {
  int rank = 0; // batch dims
  int64_t batch[kMaxDims] = {};
  int64_t keyBatch[kMaxDims] = {};
  int64_t queries = 0, keys = 0, headDim = 0, valueDim = 0;
  bool causal = false;
  float alpha = 1.0f;
  /// The operands of every product rounded: 0 none, 1 tf32, 2 bf16.
  int rounding = 0;
  /// A generation step's positions in device memory, [positionRows,
  /// queries], or null (cpu::AttentionShape::positions). A position past
  /// the keys sees them all; the host checks positions before a run.
  const int32_t *positions = nullptr;
  int64_t positionRows = 0;
  /// Heads per row of positions: product(batch) / positionRows.
  int64_t headsPerPositionRow = 1;
};
/// The largest D and Dv the attention kernels take (a lane holds
/// kMaxAttentionDim / 32 columns of a row).
inline constexpr int64_t kMaxAttentionDim = 256;
/// FlashAttention-style: one block per 16 query rows of a head, key and
/// value tiles in shared memory, an online softmax; logSumExp [batch...,
/// Sq]. Throws if a head dim exceeds kMaxAttentionDim.
void attention(const float *query, const float *key, const float *value,
               const AttentionDims &dims, float *result, float *logSumExp,
               cudaStream_t stream);
/// Its gradients without atomics: one kernel for queryGrad over query
/// blocks, one for keyGrad and valueGrad over key blocks, each summing over
/// the query heads sharing the key head in a fixed order. `rowDelta` holds
/// one float per query row (sum(resultGrad * result)).
void attentionGrad(const float *resultGrad, const float *query,
                   const float *key, const float *value, const float *result,
                   const float *logSumExp, const AttentionDims &dims,
                   float *rowDelta, float *queryGrad, float *keyGrad,
                   float *valueGrad, cudaStream_t stream);

/// `beta` null: RMS norm. x and y stored as `storage`, gamma and beta f32.
void norm(Storage storage, const void *x, const float *gamma, const float *beta,
          void *y, int64_t rows, int64_t cols, float epsilon,
          cudaStream_t stream);
/// `betaGrad` null: RMS norm. `rowStats` holds 2 floats per row. The
/// activations and their gradients stored as `storage`; gamma and the
/// parameter gradients f32.
void normGrad(Storage storage, const void *resultGrad, const void *input,
              const float *gamma, void *inputGrad, float *gammaGrad,
              float *betaGrad, float *rowStats, int64_t rows, int64_t cols,
              float epsilon, cudaStream_t stream);
/// Norms whose features are split over a group (cpu::layerNormSplit and
/// the others): each rank reduces its `cols` features to per-row partials,
/// the backend all-gathers them, and every rank combines all blocks' in
/// block order. Per row: layer norm {mean, sum of squared deviations}
/// ([rows, 2]); RMS norm its sum of squares ([rows]).
void normSplitPartials(const float *x, int64_t rows, int64_t cols, bool rms,
                       float *partials, cudaStream_t stream);
/// rowStats [rows, 2] = {mean (0 for RMS), 1 / sqrt(variance or mean square
/// + eps)} of the whole rows from `gathered` [blocks, rows, k] (a block's
/// first k values: its normSplitPartials, or its sum of squares first).
void normSplitCombine(const float *gathered, int64_t blocks, int64_t rows,
                      int64_t k, int64_t cols, bool rms, float epsilon,
                      float *rowStats, cudaStream_t stream);
/// y = (x - mean) rstd gamma (+ beta) from rowStats.
void normApply(const float *x, const float *gamma, const float *beta,
               const float *rowStats, float *y, int64_t rows, int64_t cols,
               cudaStream_t stream);
/// Per row, g = dy gamma: layer norm {sum g, sum g (x - mean)}; RMS norm
/// {sum x^2, sum g x} (its one gather of the backward).
void normSplitGradPartials(const float *grad, const float *x,
                           const float *gamma, const float *rowStats,
                           int64_t rows, int64_t cols, bool rms,
                           float *partials, cudaStream_t stream);
/// gammaGrad (and betaGrad, null for RMS) from rowStats, then inputGrad from
/// every block's gradient partials `gathered` [blocks, rows, 2].
void normSplitGrad(const float *grad, const float *x, const float *gamma,
                   const float *rowStats, const float *gathered, int64_t blocks,
                   int64_t rows, int64_t cols, bool rms, float *inputGrad,
                   float *gammaGrad, float *betaGrad, cudaStream_t stream);
/// `positions` null: row s of every outer index at position s; else at
/// positions[n, s] ([positionRows, seq], cpu::rotaryAt).
void rotary(Storage storage, const void *x, void *y, int64_t outer, int64_t seq,
            int64_t dim, double theta, bool inverse, const int32_t *positions,
            int64_t positionRows, cudaStream_t stream);
/// cpu::cacheWrite; a position outside the cache writes nothing (the host
/// checks positions before a run).
void cacheWrite(float *cache, const float *update, int64_t outer,
                int64_t cacheRows, int64_t rows, int64_t dim,
                const int32_t *positions, int64_t positionRows,
                cudaStream_t stream);

/// `table` holds vocabulary rows [firstRow, firstRow + rows) (all of them
/// unless vocabulary-parallel); a token whose row another rank holds gets
/// zeros (cpu::embeddingBlock).
/// With `slotMap` (a cached table, length `rows`), `table` is the cache:
/// block row r lies in its row slotMap[r].
void embedding(const float *table, int64_t firstRow, int64_t rows,
               int64_t hidden, const int32_t *ids, int64_t tokens,
               const int32_t *slotMap, Storage storage, void *out,
               cudaStream_t stream);
/// The gradient of those rows (cpu::embeddingGradBlock); with `slotMap`,
/// of a cache of `tableRows` rows.
void embeddingGrad(const float *resultGrad, const int32_t *ids, int64_t tokens,
                   int64_t firstRow, int64_t rows, int64_t hidden,
                   const int32_t *slotMap, int64_t tableRows, float *tableGrad,
                   cudaStream_t stream);
/// The mean loss into *out; `rowLoss` holds one double per token.
void crossEntropy(const float *logits, const int32_t *targets, int64_t tokens,
                  int64_t vocab, double *rowLoss, float *out,
                  cudaStream_t stream);
void crossEntropyGrad(const float *logits, const int32_t *targets,
                      const float *lossGrad, int64_t tokens, int64_t vocab,
                      float *out, cudaStream_t stream);
/// Vocabulary-parallel cross-entropy (cpu::crossEntropyBlockStats and the
/// combinations after it): per token {max, sum of exps, the target's logit
/// when this block holds it else 0} of this rank's `columns` logit columns
/// starting at `firstColumn`, into stats [tokens, 3].
void crossEntropyBlockStats(const float *logits, const int32_t *targets,
                            int64_t tokens, int64_t columns,
                            int64_t firstColumn, float *stats,
                            cudaStream_t stream);
/// Chunks of one block's statistics [chunks, tokens, 3] merged into one
/// [tokens, 3] (cpu::mergeCrossEntropyStats).
void mergeCrossEntropyStats(const float *chunkStats, int64_t chunks,
                            int64_t tokens, float *stats, cudaStream_t stream);
/// The mean loss into *out from every block's statistics, `stats` [blocks,
/// tokens, 3] in block order; `rowLoss` holds one double per token.
void crossEntropyFromBlockStats(const float *stats, int64_t blocks,
                                int64_t tokens, double *rowLoss, float *out,
                                cudaStream_t stream);
/// The gradient of this rank's columns from every block's statistics.
void crossEntropyGradFromBlockStats(const float *logits, const int32_t *targets,
                                    const float *lossGrad, const float *stats,
                                    int64_t blocks, int64_t tokens,
                                    int64_t columns, int64_t firstColumn,
                                    float *out, cudaStream_t stream);
/// Sum of squares into *out; `partial` holds kNormPartials doubles.
inline constexpr int kNormPartials = 256;
void normSquared(const float *in, int64_t count, double *partial, float *out,
                 cudaStream_t stream);
/// hyper = [peak, min_lr, warmup, decay_steps, max_grad_norm].
void learningRate(const int64_t *step, const float *hyper, float *out,
                  cudaStream_t stream);
void clipScale(const float *sumSquares, const float *hyper, float *out,
               cudaStream_t stream);
/// One parameter's AdamW update (cpu::adamw): its operands, the shared
/// scalars on the device (learning rate, step, gradient scale), its
/// hyperparameters and results (possibly the operands themselves).
struct AdamWTensor {
  const float *param, *grad, *expAvg, *expAvgSq, *lr;
  const int64_t *step;
  const float *gradScale;
  float *newParam, *newExpAvg, *newExpAvgSq;
  int64_t count;
  double beta1, beta2, epsilon, weightDecay;
};
/// Parameters per multi-tensor launch: their descriptors travel as the
/// kernel's argument (as PyTorch's multi_tensor_apply does), within the
/// 4 KiB a kernel's parameters may take.
inline constexpr int kAdamWTensorsPerLaunch = 24;
/// AdamW over `n` parameters, kAdamWTensorsPerLaunch per launch.
void adamw(const AdamWTensor *tensors, int64_t n, cudaStream_t stream);
/// Row i of `packed` (`count` rows of `words` 4-byte words) into row
/// rows[i] of `array`, and the reverse (an embedding cache's transfers).
void scatterRows(const void *packed, const int64_t *rows, int64_t count,
                 int64_t words, void *array, cudaStream_t stream);
void gatherRows(const void *array, const int64_t *rows, int64_t count,
                int64_t words, void *packed, cudaStream_t stream);
/// AdamW on the rows of `t` (count = rows x rowElements elements in all)
/// that `rows` lists (`listed` entries, -1 padding), in place
/// (cpu::adamwRows).
void adamwRows(const AdamWTensor &t, const int32_t *rows, int64_t listed,
               int64_t rowElements, cudaStream_t stream);
/// The sum of squares of the listed rows, each row's in double, then the
/// rows' in list order (cpu::normSquaredRows); `perRow` holds `listed`
/// doubles.
void normSquaredRows(const float *in, const int32_t *rows, int64_t listed,
                     int64_t rowElements, double *perRow, float *out,
                     cudaStream_t stream);

} // namespace tpc::runtime::cuda
