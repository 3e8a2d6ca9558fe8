#include "tpc/runtime/DeviceLibraries.h"

#include "tpc/runtime/OpShapes.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

namespace tpc::runtime::device {

std::string_view epilogueName(Epilogue epilogue) {
  switch (epilogue) {
  case Epilogue::None:
    return "none";
  case Epilogue::Bias:
    return "bias";
  case Epilogue::BiasGelu:
    return "bias+gelu";
  case Epilogue::BiasGeluAux:
    return "bias+gelu(aux)";
  case Epilogue::GeluGrad:
    return "dgelu(aux)";
  case Epilogue::GeluGradBiasGrad:
    return "dgelu(aux)+bgrad";
  }
  return "?";
}

ColumnMajorGemm columnMajor(const RowMajorProduct &p) {
  ColumnMajorGemm g;
  g.transA = p.transposeRhs;
  g.transB = p.transposeLhs;
  g.m = p.n;
  g.n = p.m;
  g.k = p.k;
  g.rowsA = p.rhsCols();
  g.colsA = p.rhsRows();
  g.lda = p.ldRhs;
  g.rowsB = p.lhsCols();
  g.colsB = p.lhsRows();
  g.ldb = p.ldLhs;
  g.rowsD = p.n;
  g.colsD = p.m;
  g.ldd = p.ldOut;
  g.strideA = p.strideRhs;
  g.strideB = p.strideLhs;
  g.strideD = p.strideOut;
  g.batches = p.batches;
  g.biasLength = p.hasBias() ? p.n : 0;
  g.ldAux = p.hasAux() ? p.ldAux : 0;
  return g;
}

std::string whyNotBlasLt(const RowMajorProduct &p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0)
    return "an empty product";
  if (p.batches < 1 || p.batches > std::numeric_limits<int32_t>::max())
    return "a batch count outside cuBLASLt's 32-bit one";
  if (p.ldLhs < p.lhsCols() || p.ldRhs < p.rhsCols() || p.ldOut < p.n)
    return "a row stride shorter than its row";
  if (p.inType == plan::DType::F32 && p.outType == plan::DType::BF16)
    return "f32 operands into a bf16 result";
  if (p.tf32 && p.inType != plan::DType::F32)
    return "TF32 on operands that are not f32";
  if (p.epilogue != Epilogue::None && p.batches > 1)
    return "an epilogue on a batched product";
  if (p.hasBias() && p.biasType != p.outType)
    return "a bias of another element type than the result (cuBLASLt's is "
           "the result's)";
  if (p.hasAux() && (p.ldAux < p.n || p.ldAux % 8 != 0))
    return "the preactivation's row stride " + std::to_string(p.ldAux) +
           " is not a multiple of 8 (cuBLASLt's auxiliary matrix)";
  return {};
}

unsigned alignmentOf(const void *address) {
  const auto bits = reinterpret_cast<uintptr_t>(address);
  if (bits == 0)
    return 256;
  return unsigned(std::min<uintptr_t>(256, bits & (~bits + 1)));
}

GemmKey gemmKey(const RowMajorProduct &product, const void *lhs,
                const void *rhs, const void *out, const void *bias,
                const void *aux) {
  GemmKey key;
  key.product = product;
  key.alignLhs = alignmentOf(lhs);
  key.alignRhs = alignmentOf(rhs);
  key.alignOut = alignmentOf(out);
  key.alignBias = product.hasBias() ? alignmentOf(bias) : 0;
  key.alignAux = product.hasAux() ? alignmentOf(aux) : 0;
  return key;
}

namespace {
std::string_view typeName(plan::DType type) {
  return type == plan::DType::BF16 ? "bf16" : "f32";
}
} // namespace

std::string describe(const GemmKey &key) {
  const RowMajorProduct &p = key.product;
  std::ostringstream os;
  os << typeName(p.inType) << ' ' << p.lhsRows() << 'x' << p.lhsCols()
     << (p.transposeLhs ? "^T" : "") << " @ " << p.rhsRows() << 'x'
     << p.rhsCols() << (p.transposeRhs ? "^T" : "") << " -> "
     << typeName(p.outType);
  if (p.batches > 1)
    os << " (" << p.batches << " batches)";
  if (p.epilogue != Epilogue::None)
    os << ", " << epilogueName(p.epilogue);
  if (p.hasBias())
    os << " (" << typeName(p.biasType) << " bias)";
  if (p.tf32)
    os << ", tf32";
  if (p.accumulate)
    os << ", accumulating";
  os << ", aligned " << key.alignLhs << '/' << key.alignRhs << '/'
     << key.alignOut;
  return os.str();
}

std::optional<SdpaDims> sdpaDims(std::span<const int64_t> query,
                                 std::span<const int64_t> key,
                                 std::span<const int64_t> value,
                                 std::string *whyNot) {
  auto fail = [&](std::string reason) -> std::optional<SdpaDims> {
    if (whyNot)
      *whyNot = std::move(reason);
    return std::nullopt;
  };
  if (query.size() < 2 || key.size() != query.size() ||
      value.size() != query.size())
    return fail("operands of different ranks");
  const size_t rank = query.size() - 2;
  // Key dims equal to query's, then broadcast ones: the group.
  size_t shared = 0;
  while (shared < rank && key[shared] == query[shared])
    ++shared;
  for (size_t i = shared; i < rank; ++i) {
    if (key[i] != 1)
      return fail("key batch dim " + std::to_string(i) + " (" +
                  std::to_string(key[i]) + ") follows a broadcast dim");
  }
  for (size_t i = 0; i < rank; ++i)
    if (value[i] != key[i])
      return fail("value's batch dims differ from key's");
  if (value[rank] != key[rank])
    return fail("value and key have different lengths");
  auto product = [](std::span<const int64_t> dims) {
    return std::accumulate(dims.begin(), dims.end(), int64_t(1),
                           std::multiplies<int64_t>());
  };
  SdpaDims d;
  const std::span<const int64_t> prefix = query.first(shared),
                                 group = query.subspan(shared, rank - shared);
  d.keyHeads = prefix.empty() ? 1 : prefix.back();
  d.batch = prefix.empty() ? 1 : product(prefix.first(prefix.size() - 1));
  d.queryHeads = d.keyHeads * product(group);
  const AttentionSizes sizes = attentionSizes(query, key, value);
  d.queries = sizes.queries;
  d.keys = sizes.keys;
  d.headDim = sizes.headDim;
  if (sizes.keyHeadDim != d.headDim)
    return fail("query and key have different head dims");
  d.valueDim = sizes.valueDim;
  return d;
}

std::string describe(const SdpaKey &key) {
  const SdpaDims &d = key.dims;
  std::ostringstream os;
  os << typeName(key.type) << (key.backward ? " backward" : " forward")
     << " batch " << d.batch << ", heads " << d.queryHeads << '/' << d.keyHeads
     << ", seq " << d.queries << 'x' << d.keys << ", dims " << d.headDim << '/'
     << d.valueDim << (key.causal ? ", causal" : "");
  return os.str();
}

std::string whyNoCudnnAttention(const AttentionLibrary &library) {
  if (!library.built)
    return "tpc was built without cuDNN (cudnn-frontend headers and "
           "libcudnn; tools/install-deps.sh fetches the headers)";
  if (library.disabledByUser)
    return "TPC_CUDNN=0";
  if (!library.loadError.empty())
    return "libcudnn not loaded (" + library.loadError + ")";
  if (library.version <= 0)
    return "libcudnn reports no version";
  if (library.version < 90000)
    return "cuDNN " + std::to_string(library.version) + " is older than 9.0";
  if (library.computeCapability < 80)
    return "compute capability " +
           std::to_string(library.computeCapability / 10) + "." +
           std::to_string(library.computeCapability % 10) +
           " has no fused flash attention in cuDNN (8.0 or newer)";
  return {};
}

int64_t cudnnMaxHeadDim(const AttentionLibrary &library) {
  return library.computeCapability >= 90 ? 256 : 128;
}

std::string whyOwnAttention(const AttentionLibrary &library,
                            const AttentionStep &step) {
  if (std::string why = whyNoCudnnAttention(library); !why.empty())
    return why;
  if (step.positions)
    return "a KV-cache step (positions)";
  if (!step.type)
    return "operands and results of different element types";
  if (*step.type != plan::DType::BF16)
    return "f32 operands (cuDNN's fused attention takes bf16)";
  std::string why;
  std::optional<SdpaDims> dims =
      sdpaDims(step.query, step.key, step.value, &why);
  if (!dims)
    return why;
  if (dims->queries == 0 || dims->keys == 0 || dims->batch == 0 ||
      dims->queryHeads == 0)
    return "an empty attention";
  const int64_t most = cudnnMaxHeadDim(library);
  for (int64_t dim : {dims->headDim, dims->valueDim}) {
    if (dim % 8 != 0)
      return "head dim " + std::to_string(dim) + " is not a multiple of 8";
    if (dim > most)
      return "head dim " + std::to_string(dim) + " exceeds cuDNN's " +
             std::to_string(most) + " on this GPU";
  }
  if (step.causal && dims->queries != dims->keys)
    return "causal attention with " + std::to_string(dims->queries) +
           " queries and " + std::to_string(dims->keys) + " keys";
  return {};
}

} // namespace tpc::runtime::device
