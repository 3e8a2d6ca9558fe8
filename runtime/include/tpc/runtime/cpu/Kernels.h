// CPU kernels for the tp ops, f32. GEMMs go through OpenBLAS (cblas_sgemm);
// everything else is our own code, written so the compiler vectorises it
// (contiguous inner loops, no aliasing) and split over rows with
// parallelFor. All tensors are dense, row-major; shapes are in elements.
// Kernels validate what the plan loader cannot (token ids against the
// vocabulary) and throw std::runtime_error with a one-line message.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace tpc::runtime::cpu {

using Shape = std::span<const int64_t>;

/// Threads used by parallelFor (and OpenBLAS); 0 = hardware concurrency.
void setNumThreads(int threads);
/// The most threads setNumThreads accepts from a user: 4 per hardware
/// thread (at least 16); far more only thrash or exhaust the process.
int maxThreads();
int numThreads();
/// Runs body(begin, end) over [0, count) in contiguous chunks of at least
/// `grain` items on the kernel thread pool; runs inline when one chunk.
void parallelFor(int64_t count, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body);

/// out[t, :] = table[ids[t], :] for t in [0, tokens). Throws if an id is
/// outside [0, vocab).
void embedding(const float *table, int64_t vocab, int64_t hidden,
               const int32_t *ids, int64_t tokens, float *out);

/// The vocabulary-parallel lookup: `table` holds rows [firstRow, firstRow +
/// rows) of a [fullVocab, hidden] table; out[t, :] is ids[t]'s row when this
/// block holds it and zeros otherwise. Throws if an id is outside
/// [0, fullVocab).
void embeddingBlock(const float *table, int64_t firstRow, int64_t rows,
                    int64_t fullVocab, int64_t hidden, const int32_t *ids,
                    int64_t tokens, float *out);

/// Batched matrix product with the semantics of tp.matmul: lhs is
/// [b..., M, K] ([b..., K, M] if transposeLhs), rhs [b..., K, N]
/// ([b..., N, K] if transposeRhs), out [b..., M, N]. Batch dims: either side
/// may have none (broadcast), or both have the same count and each pair is
/// equal or 1 (NumPy broadcast). The product is scaled by `alpha`;
/// `accumulate` adds into out instead of overwriting it.
void matmul(const float *lhs, Shape lhsShape, bool transposeLhs,
            const float *rhs, Shape rhsShape, bool transposeRhs, float *out,
            Shape outShape, bool accumulate = false, float alpha = 1.0f);

/// A matmul operand's precision: f32 values rounded to nearest even to
/// tf32 (10-bit mantissa) or bfloat16 (7-bit), still stored as f32. NaN and
/// infinities pass through.
enum class Rounding { None, TF32, BF16 };
void round(Rounding rounding, const float *in, float *out, int64_t count);

enum class BinaryKind { Add, Sub, Mul, Div };
/// out = lhs (op) rhs with NumPy broadcasting (operands aligned on trailing
/// dims; size-1 or missing dims broadcast). outShape is the broadcast shape.
void binary(BinaryKind kind, const float *lhs, Shape lhsShape, const float *rhs,
            Shape rhsShape, float *out, Shape outShape);

void scale(const float *in, float factor, float *out, int64_t count);
/// GELU, tanh approximation (GPT-2's gelu_new):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu(const float *in, float *out, int64_t count);
/// x * sigmoid(x).
void silu(const float *in, float *out, int64_t count);
/// max(x, 0); NaN stays NaN.
void relu(const float *in, float *out, int64_t count);
/// out = silu(gate) * up, computed as silu then mul compute it (the same
/// float operations: bit-identical to the two kernels on f32).
void swiglu(const float *gate, const float *up, float *out, int64_t count);

/// Layer norm over the last dim of [rows, cols]: biased variance, like
/// torch.nn.LayerNorm.
void layerNorm(const float *x, const float *gamma, const float *beta, float *y,
               int64_t rows, int64_t cols, float epsilon);
/// RMS norm over the last dim (LLaMA): y = x / sqrt(mean(x^2) + eps) * gamma.
void rmsNorm(const float *x, const float *gamma, float *y, int64_t rows,
             int64_t cols, float epsilon);

/// Softmax over the last dim of [rows, cols]. With `causal`, rows come in
/// blocks of `cols` queries (a [..., S, S] tensor viewed as rows) and query
/// q = row % cols sees keys 0..q only (masked entries are exactly 0).
void softmax(const float *x, float *y, int64_t rows, int64_t cols, bool causal);

/// The sizes of a fused attention (tp.attention): query [batch..., Sq, D],
/// key [keyBatch..., Sk, D], value [keyBatch..., Sk, Dv], with as many
/// keyBatch dims as batch dims, each equal to batch's or 1 (broadcast over
/// grouped query heads). With `causal`, Sq == Sk and query i sees keys
/// 0..i. `rounding` rounds the operands of every product (mixed precision).
struct AttentionShape {
  Shape batch, keyBatch;
  int64_t queries = 0, keys = 0, headDim = 0, valueDim = 0;
  bool causal = false;
  float alpha = 1.0f;
  Rounding rounding = Rounding::None;
  /// A generation step's positions, [positionRows, queries] (positionRows
  /// is batch[0]), or null: query i of batch row n then sees keys
  /// 0..positions[n, i] (a KV cache) instead of all or, causal, 0..i.
  const int32_t *positions = nullptr;
  int64_t positionRows = 0;
};

/// result [batch..., Sq, Dv] = softmax(alpha q k^T) v, and logSumExp
/// [batch..., Sq] = the log of each row's softmax denominator plus its max
/// (so that p = exp(alpha q k^T - logSumExp)). The scores exist only for
/// one block of queries of one head at a time.
void attention(const float *query, const float *key, const float *value,
               const AttentionShape &shape, float *result, float *logSumExp);

/// The gradients of `attention` from resultGrad, recomputing the
/// probabilities from logSumExp block by block; each row's softmax backward
/// sum is resultGrad . result (the forward's result). keyGrad and valueGrad
/// sum over the query heads that share a key head; all three are
/// overwritten.
void attentionGrad(const float *resultGrad, const float *query,
                   const float *key, const float *value, const float *result,
                   const float *logSumExp, const AttentionShape &shape,
                   float *queryGrad, float *keyGrad, float *valueGrad);

/// Rotary embedding (rotate-half form, as HF LLaMA) on [outer, seq, dim]:
/// for position p = positionOffset + s and i < dim/2, with
/// angle = p * theta^(-2i/dim) (negated if `inverse`):
///   y[i]         = x[i] cos(angle) - x[i + dim/2] sin(angle)
///   y[i + dim/2] = x[i + dim/2] cos(angle) + x[i] sin(angle)
void rotary(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, int64_t positionOffset = 0);
/// `rotary` with row s of outer index o at position positions[n, s]
/// ([positionRows, seq]; n = o / (outer / positionRows)): a generation
/// step's tokens continuing a KV cache.
void rotaryAt(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
              double theta, bool inverse, const int32_t *positions,
              int64_t positionRows);

/// Writes `update` [outer, T, dim] into `cache` [outer, S, dim] at rows
/// positions[n, t] ([positionRows, T]; n = o / (outer / positionRows)).
/// Throws on a position outside [0, S).
/// `elementSize` bytes per element (f32 or bf16 caches).
void cacheWrite(std::byte *cache, const std::byte *update, int64_t outer,
                int64_t cacheRows, int64_t rows, int64_t dim,
                size_t elementSize, const int32_t *positions,
                int64_t positionRows);

// The layout kernels move elements without arithmetic, so each has an f32
// and a bf16 (uint16_t bits) form.
/// out = in permuted: out dim i is in dim perm[i].
void transpose(const float *in, Shape inShape, std::span<const int64_t> perm,
               float *out);
void transpose(const uint16_t *in, Shape inShape, std::span<const int64_t> perm,
               uint16_t *out);
/// out = in[offsets[d] : offsets[d] + outShape[d]] per dim.
void slice(const float *in, Shape inShape, std::span<const int64_t> offsets,
           float *out, Shape outShape);
void slice(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
           uint16_t *out, Shape outShape);
/// A block of token ids (a pipelined step's micro-batch).
void slice(const int32_t *in, Shape inShape, std::span<const int64_t> offsets,
           int32_t *out, Shape outShape);
/// out[offsets[d] : offsets[d] + inShape[d]] = in per dim; the rest of `out`
/// is left as it is.
void insert(const float *in, Shape inShape, std::span<const int64_t> offsets,
            float *out, Shape outShape);
void insert(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
            uint16_t *out, Shape outShape);
/// Sum (or mean) over `dims` (strictly increasing), which are removed.
void reduce(const float *in, Shape inShape, std::span<const int64_t> dims,
            bool mean, float *out);

/// Mean over tokens of -log softmax(logits[t])[targets[t]], for logits
/// [tokens, vocab]; accumulates in double. Throws if a target is outside
/// [0, vocab).
float crossEntropy(const float *logits, int64_t tokens, int64_t vocab,
                   const int32_t *targets);

/// Vocabulary-parallel cross-entropy, per block: `logits` [tokens, columns]
/// holds columns [firstColumn, firstColumn + columns) of fullVocab-wide rows.
/// Normalisations whose features are split over the ranks of a group (the
/// layer norms of the 2D and 3D schemes): each rank holds `cols` of every
/// row's features and gamma/beta/their gradients for those features.
/// `gather(local, k)` all-gathers this rank's [rows, k] floats over the
/// group and returns [blocks, rows, k] in block order, the same on every
/// rank, so every rank combines the statistics alike. Rows are normalised
/// over all blocks' features; results are this rank's features.
using RowGather =
    std::function<std::vector<float>(const std::vector<float> &, int64_t)>;
void layerNormSplit(const float *x, const float *gamma, const float *beta,
                    float *y, int64_t rows, int64_t cols, float epsilon,
                    const RowGather &gather);
void rmsNormSplit(const float *x, const float *gamma, float *y, int64_t rows,
                  int64_t cols, float epsilon, const RowGather &gather);
/// Their gradients; gammaGrad and betaGrad are this rank's rows' sums (a
/// partial sum over the ranks that split the rows).
void layerNormGradSplit(const float *resultGrad, const float *input,
                        const float *gamma, float *inputGrad, float *gammaGrad,
                        float *betaGrad, int64_t rows, int64_t cols,
                        float epsilon, const RowGather &gather);
void rmsNormGradSplit(const float *resultGrad, const float *input,
                      const float *gamma, float *inputGrad, float *gammaGrad,
                      int64_t rows, int64_t cols, float epsilon,
                      const RowGather &gather);

/// Writes per token {max, sum of exp(logit - max), the target's logit when
/// this block holds it else 0} into `stats` [tokens, 3]. Throws if a target
/// is outside [0, fullVocab).
void crossEntropyBlockStats(const float *logits, int64_t tokens,
                            int64_t columns, int64_t firstColumn,
                            int64_t fullVocab, const int32_t *targets,
                            float *stats);

/// The mean loss from every block's statistics, `stats` [blocks, tokens, 3]
/// (in block order, so every rank computes the same value).
/// Merges `chunks` blocks of per-token statistics (crossEntropyBlockStats's
/// [chunks, tokens, 3], each over other columns of one block) into one
/// [tokens, 3]: the largest max, the sums of exps rescaled to it (in
/// double), the target logits summed (one chunk holds each target).
void mergeCrossEntropyStats(const float *chunkStats, int64_t chunks,
                            int64_t tokens, float *stats);
float crossEntropyFromBlockStats(const float *stats, int64_t blocks,
                                 int64_t tokens);

//===----------------------------------------------------------------------===//
// Backward and optimizer kernels. Every kernel is bit-reproducible for a
// fixed thread count (reductions combine per-thread partials in a fixed
// order), which resumable training relies on.
//===----------------------------------------------------------------------===//

/// tableGrad[v, :] = sum over t with ids[t] == v of resultGrad[t, :], for
/// resultGrad [tokens, hidden]; tableGrad [vocab, hidden] is overwritten.
/// Throws if an id is outside [0, vocab).
void embeddingGrad(const float *resultGrad, const int32_t *ids, int64_t tokens,
                   int64_t vocab, int64_t hidden, float *tableGrad);
/// The vocabulary-parallel embeddingGrad: `tableGrad` [rows, hidden] is rows
/// [firstRow, firstRow + rows) of the [fullVocab, hidden] gradient; tokens
/// whose id lies outside the block are skipped. Throws if an id is outside
/// [0, fullVocab).
void embeddingGradBlock(const float *resultGrad, const int32_t *ids,
                        int64_t tokens, int64_t firstRow, int64_t rows,
                        int64_t fullVocab, int64_t hidden, float *tableGrad);

/// inputGrad = resultGrad * d gelu(x)/dx (tanh form, as `gelu`).
void geluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count);
/// inputGrad = resultGrad * d silu(x)/dx.
/// gateGrad = siluGrad(resultGrad * up, gate), upGrad = resultGrad *
/// silu(gate): the unfused ops' float operations.
void swigluGrad(const float *resultGrad, const float *gate, const float *up,
                float *gateGrad, float *upGrad, int64_t count);
void siluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count);
/// inputGrad = resultGrad where input > 0, else 0 (PyTorch's subgradient
/// at 0).
void reluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count);

/// Gradients of layerNorm over [rows, cols]: inputGrad [rows, cols],
/// gammaGrad and betaGrad [cols] (sums over rows), all overwritten.
void layerNormGrad(const float *resultGrad, const float *input,
                   const float *gamma, float *inputGrad, float *gammaGrad,
                   float *betaGrad, int64_t rows, int64_t cols, float epsilon);
/// Gradients of rmsNorm: inputGrad [rows, cols], gammaGrad [cols].
void rmsNormGrad(const float *resultGrad, const float *input,
                 const float *gamma, float *inputGrad, float *gammaGrad,
                 int64_t rows, int64_t cols, float epsilon);

/// Softmax backward from its result y over [rows, cols]:
/// inputGrad = y * (resultGrad - sum(resultGrad * y)) per row. (Causally
/// masked entries have y = 0 and so get 0.)
void softmaxGrad(const float *resultGrad, const float *result, float *inputGrad,
                 int64_t rows, int64_t cols);

/// Gradient of crossEntropy (mean over tokens) w.r.t. logits [tokens, vocab]:
/// (softmax(logits) - onehot(target)) * lossGrad / tokens. Throws on a target
/// outside [0, vocab).
void crossEntropyGrad(const float *logits, const int32_t *targets,
                      float lossGrad, int64_t tokens, int64_t vocab,
                      float *logitsGrad);
/// The vocabulary-parallel crossEntropyGrad: `logits` and `logitsGrad`
/// [tokens, columns] are columns [firstColumn, firstColumn + columns) of
/// the rows; `stats` [blocks, tokens, 3] are every block's
/// crossEntropyBlockStats, from which each row's softmax is normalised.
/// Targets are checked by crossEntropyBlockStats.
void crossEntropyGradFromBlockStats(const float *logits, const int32_t *targets,
                                    float lossGrad, int64_t tokens,
                                    int64_t columns, int64_t firstColumn,
                                    const float *stats, int64_t blocks,
                                    float *logitsGrad);

/// out = zeros(outShape) with in placed at `offsets` (the gradient of
/// `slice`).
void pad(const float *in, Shape inShape, std::span<const int64_t> offsets,
         float *out, Shape outShape);
void pad(const uint16_t *in, Shape inShape, std::span<const int64_t> offsets,
         uint16_t *out, Shape outShape);
void fill(float value, float *out, int64_t count);
/// Sum of squares, accumulated in double.
float normSquared(const float *in, int64_t count);

/// One AdamW step (decoupled weight decay, bias-corrected moments, as
/// torch.optim.AdamW) on `count` elements, with g = grad * gradScale and
/// t = step (1-based):
///   m' = b1 m + (1 - b1) g,  v' = b2 v + (1 - b2) g^2
///   p' = p - lr * wd * p - lr * (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) +
///   eps)
/// Outputs may alias their inputs (in-place update).
void adamw(const float *param, const float *grad, const float *expAvg,
           const float *expAvgSq, float lr, int64_t step, float gradScale,
           double beta1, double beta2, double epsilon, double weightDecay,
           float *newParam, float *newExpAvg, float *newExpAvgSq,
           int64_t count);

/// adamw on the rows of [*, rowElements] arrays that `rows` lists (count
/// entries; negative ones are padding), in place; other rows stay. Each row
/// is updated exactly as adamw updates it.
void adamwRows(float *param, const float *grad, float *expAvg, float *expAvgSq,
               const int32_t *rows, int64_t count, int64_t rowElements,
               float lr, int64_t step, float gradScale, double beta1,
               double beta2, double epsilon, double weightDecay);
/// Sum of squares of the listed rows of [*, rowElements] `in` (negative
/// entries are padding): each row's in double, then the rows' in list
/// order, so that the sum does not depend on where the rows lie.
float normSquaredRows(const float *in, const int32_t *rows, int64_t count,
                      int64_t rowElements);

/// Linear warmup then cosine decay, for a 1-based step:
///   step <= warmup:          peak * step / warmup
///   step >= decaySteps:      minLr
///   otherwise:               minLr + (peak - minLr) * 0.5 * (1 + cos(pi p)),
///                            p = (step - warmup) / (decaySteps - warmup)
/// (warmup 0: no warmup; decaySteps <= warmup: constant peak after warmup).
float learningRate(int64_t step, float peak, float minLr, float warmup,
                   float decaySteps);
/// Gradient clipping factor min(1, maxNorm / (sqrt(sumSquares) + 1e-6)), as
/// torch.nn.utils.clip_grad_norm_; 1 when maxNorm <= 0 (clipping off).
float clipScale(float sumSquares, float maxNorm);

} // namespace tpc::runtime::cpu
