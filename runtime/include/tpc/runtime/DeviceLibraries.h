// What the CUDA backend asks of NVIDIA's libraries, in host terms with no
// CUDA types so that the CPU tests cover it: the row-major products it hands
// cuBLASLt and the column-major problem cuBLASLt solves for them, the keys
// of the plan caches (an algorithm per product shape, a cuDNN graph per
// attention shape), the cuDNN shape of an attention step, and the choice
// between cuDNN's fused attention and tpc's own kernels.
#pragma once

#include "tpc/runtime/Plan.h"

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace tpc::runtime::device {

//===----------------------------------------------------------------------===//
// Products (cuBLASLt)
//===----------------------------------------------------------------------===//

/// What a product's epilogue applies to `op(lhs) op(rhs)` (cuBLASLt's
/// epilogues, named by what tpc's fused ops compute).
enum class Epilogue : uint8_t {
  None,
  /// + bias (a row vector, broadcast over the rows).
  Bias,
  /// gelu(+ bias), the preactivation not kept (a forward-only linear).
  BiasGelu,
  /// gelu(+ bias), the preactivation written to the auxiliary matrix.
  BiasGeluAux,
  /// * gelu'(auxiliary matrix) (tp.linear_gelu_grad whose bias gradient
  /// is wider than its result: summed apart).
  GeluGrad,
  /// * gelu'(auxiliary matrix), and the bias gradient: the result's sum
  /// over its rows (tp.linear_gelu_grad).
  GeluGradBiasGrad,
};
std::string_view epilogueName(Epilogue epilogue);

/// out[m, n] (+)= alpha op(lhs)[m, k] op(rhs)[k, n], then the epilogue, in
/// row-major terms: each matrix's rows `ld*` elements apart (a column block
/// of a wider matrix has a larger one), `batches` products `stride*`
/// elements apart.
struct RowMajorProduct {
  int64_t m = 0, n = 0, k = 0;
  bool transposeLhs = false, transposeRhs = false;
  int64_t ldLhs = 0, ldRhs = 0, ldOut = 0;
  int64_t batches = 1, strideLhs = 0, strideRhs = 0, strideOut = 0;
  /// lhs and rhs share one element type; out may be wider (an f32 weight
  /// gradient from bf16 activations).
  plan::DType inType = plan::DType::F32, outType = plan::DType::F32;
  /// TF32 products of f32 operands (the plan's precision = tf32).
  bool tf32 = false;
  /// out += the product (beta 1) instead of out = it.
  bool accumulate = false;
  Epilogue epilogue = Epilogue::None;
  /// The bias or bias gradient's element type (cuBLASLt's is the
  /// result's).
  plan::DType biasType = plan::DType::F32;
  /// The auxiliary matrix's row stride (BiasGeluAux, GeluGradBiasGrad): the
  /// preactivation, shaped as out.
  int64_t ldAux = 0;

  /// The product's row-major dims, for the caller's own checks: the rows a
  /// matrix has in memory before any transpose.
  int64_t lhsRows() const { return transposeLhs ? k : m; }
  int64_t lhsCols() const { return transposeLhs ? m : k; }
  int64_t rhsRows() const { return transposeRhs ? n : k; }
  int64_t rhsCols() const { return transposeRhs ? k : n; }
  bool hasBias() const {
    return epilogue != Epilogue::None && epilogue != Epilogue::GeluGrad;
  }
  bool hasAux() const {
    return epilogue == Epilogue::BiasGeluAux ||
           epilogue == Epilogue::GeluGrad ||
           epilogue == Epilogue::GeluGradBiasGrad;
  }
  auto operator<=>(const RowMajorProduct &) const = default;
};

/// The column-major problem cuBLASLt solves for a row-major product: a
/// row-major [r, c] matrix with row stride ld is a column-major [c, r] one
/// with leading dim ld, so out^T = op(rhs)^T op(lhs)^T: A is rhs, B is lhs,
/// D [n, m]; a row-vector bias over out's columns is a column vector over
/// D's rows (length n), and the auxiliary matrix is laid out as D.
struct ColumnMajorGemm {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0; // D is [m, n]: cuBLAS's m is the product's n
  int64_t rowsA = 0, colsA = 0, lda = 0;
  int64_t rowsB = 0, colsB = 0, ldb = 0;
  int64_t rowsD = 0, colsD = 0, ldd = 0;
  int64_t strideA = 0, strideB = 0, strideD = 0, batches = 1;
  int64_t biasLength = 0, ldAux = 0;
};
ColumnMajorGemm columnMajor(const RowMajorProduct &product);

/// Why cuBLASLt is not asked for a product at all (empty when it is):
/// shapes its descriptors cannot hold (32-bit batch counts), epilogues on a
/// batched product, a bias of another type than the result, an auxiliary
/// row stride that is not a multiple of 8.
std::string whyNotBlasLt(const RowMajorProduct &product);

/// The largest power of two up to 256 that divides `address` (cuBLASLt
/// picks algorithms by the operands' alignment; 256 is its default
/// assumption).
unsigned alignmentOf(const void *address);

/// What a product's algorithm depends on: the product without alpha, and
/// the alignment of each matrix it reads or writes.
struct GemmKey {
  RowMajorProduct product;
  unsigned alignLhs = 0, alignRhs = 0, alignOut = 0, alignBias = 0,
           alignAux = 0;
  auto operator<=>(const GemmKey &) const = default;
};
GemmKey gemmKey(const RowMajorProduct &product, const void *lhs,
                const void *rhs, const void *out, const void *bias = nullptr,
                const void *aux = nullptr);
/// One line for logs: "bf16 [512x768]x[768x2304] -> bf16, bias+gelu(aux)".
std::string describe(const GemmKey &key);

//===----------------------------------------------------------------------===//
// Plan caches
//===----------------------------------------------------------------------===//

/// Plans (a cuBLASLt algorithm, a cuDNN graph) built once per key and kept:
/// the first run of a program builds them, every later one (and the
/// recorded CUDA graph of a step) finds them.
template <class Key, class Plan> class PlanCache {
public:
  /// The plan of `key`, built by `build()` (returning a Plan) when absent.
  template <class Build> Plan &get(const Key &key, Build &&build) {
    auto found = plans.find(key);
    if (found != plans.end()) {
      ++hitCount;
      return found->second;
    }
    Plan plan = build();
    ++buildCount;
    return plans.emplace(key, std::move(plan)).first->second;
  }
  size_t size() const { return plans.size(); }
  uint64_t builds() const { return buildCount; }
  uint64_t hits() const { return hitCount; }

private:
  std::map<Key, Plan> plans;
  uint64_t buildCount = 0, hitCount = 0;
};

//===----------------------------------------------------------------------===//
// Attention (cuDNN's fused scaled dot-product attention)
//===----------------------------------------------------------------------===//

/// tp.attention's operands as cuDNN's [N, H, S, D] tensors: query
/// [batch, queryHeads, queries, headDim], key and value [batch, keyHeads,
/// keys, headDim or valueDim], query head h reading key head
/// h / (queryHeads / keyHeads) (grouped-query attention). All contiguous.
struct SdpaDims {
  int64_t batch = 1, queryHeads = 1, keyHeads = 1, queries = 0, keys = 0,
          headDim = 0, valueDim = 0;
  auto operator<=>(const SdpaDims &) const = default;
};

/// The cuDNN dims of [b..., Sq, D] query, [b'..., Sk, D] key and
/// [b'..., Sk, Dv] value, where each of key's batch dims equals query's or
/// is 1 (broadcast). cuDNN's grouping needs the broadcast dims last: query
/// [B, Hkv, G] with key [B, Hkv, 1]. Otherwise nullopt and `whyNot` says
/// which dim.
std::optional<SdpaDims> sdpaDims(std::span<const int64_t> query,
                                 std::span<const int64_t> key,
                                 std::span<const int64_t> value,
                                 std::string *whyNot = nullptr);

/// What a cuDNN attention graph depends on.
struct SdpaKey {
  SdpaDims dims;
  bool causal = false;
  float alpha = 1.0f;
  plan::DType type = plan::DType::BF16;
  bool backward = false;
  auto operator<=>(const SdpaKey &) const = default;
};
std::string describe(const SdpaKey &key);

/// The attention library at start-up: whether tpc was built with cuDNN,
/// why libcudnn could not be loaded (empty when it was), the version it
/// reports (cudnnGetVersion, 0 when none), the GPU's compute capability
/// (major * 10 + minor) and whether TPC_CUDNN=0 turned it off.
struct AttentionLibrary {
  bool built = false;
  std::string loadError;
  int64_t version = 0;
  int computeCapability = 0;
  bool disabledByUser = false;
};
/// Empty when cuDNN's fused attention can run on this GPU, else why not.
std::string whyNoCudnnAttention(const AttentionLibrary &library);
/// The largest head dim cuDNN's fused attention takes on this GPU.
int64_t cudnnMaxHeadDim(const AttentionLibrary &library);

/// One attention step as the kernel choice sees it.
struct AttentionStep {
  std::span<const int64_t> query, key, value;
  /// The element type of the operands, result and gradients (one for all;
  /// nullopt when they differ).
  std::optional<plan::DType> type;
  bool causal = false;
  /// A KV-cache step (tp.attention's positions operand).
  bool positions = false;
};
/// Empty when cuDNN runs the step, else why tpc's own kernel does.
std::string whyOwnAttention(const AttentionLibrary &library,
                            const AttentionStep &step);

} // namespace tpc::runtime::device
