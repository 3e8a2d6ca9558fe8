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

namespace tpc::runtime::cpu {

using Shape = std::span<const int64_t>;

/// Threads used by parallelFor (and OpenBLAS); 0 = hardware concurrency.
void setNumThreads(int threads);
int numThreads();
/// Runs body(begin, end) over [0, count) in contiguous chunks of at least
/// `grain` items on the kernel thread pool; runs inline when one chunk.
void parallelFor(int64_t count, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body);

/// out[t, :] = table[ids[t], :] for t in [0, tokens). Throws if an id is
/// outside [0, vocab).
void embedding(const float *table, int64_t vocab, int64_t hidden,
               const int32_t *ids, int64_t tokens, float *out);

/// Batched matrix product with the semantics of tp.matmul: lhs is
/// [b..., M, K] ([b..., K, M] if transposeLhs), rhs [b..., K, N]
/// ([b..., N, K] if transposeRhs), out [b..., M, N]. Batch dims: either side
/// may have none (broadcast), or both have the same count and each pair is
/// equal or 1 (NumPy broadcast). The product is scaled by `alpha`;
/// `accumulate` adds into out instead of overwriting it.
void matmul(const float *lhs, Shape lhsShape, bool transposeLhs,
            const float *rhs, Shape rhsShape, bool transposeRhs, float *out,
            Shape outShape, bool accumulate = false, float alpha = 1.0f);

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

/// Rotary embedding (rotate-half form, as HF LLaMA) on [outer, seq, dim]:
/// for position p = positionOffset + s and i < dim/2, with
/// angle = p * theta^(-2i/dim) (negated if `inverse`):
///   y[i]         = x[i] cos(angle) - x[i + dim/2] sin(angle)
///   y[i + dim/2] = x[i + dim/2] cos(angle) + x[i] sin(angle)
void rotary(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, int64_t positionOffset = 0);

/// out = in permuted: out dim i is in dim perm[i].
void transpose(const float *in, Shape inShape, std::span<const int64_t> perm,
               float *out);
/// out = in[offsets[d] : offsets[d] + outShape[d]] per dim.
void slice(const float *in, Shape inShape, std::span<const int64_t> offsets,
           float *out, Shape outShape);
/// Sum (or mean) over `dims` (strictly increasing), which are removed.
void reduce(const float *in, Shape inShape, std::span<const int64_t> dims,
            bool mean, float *out);

/// Mean over tokens of -log softmax(logits[t])[targets[t]], for logits
/// [tokens, vocab]; accumulates in double. Throws if a target is outside
/// [0, vocab).
float crossEntropy(const float *logits, int64_t tokens, int64_t vocab,
                   const int32_t *targets);

} // namespace tpc::runtime::cpu
