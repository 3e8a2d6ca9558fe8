#include "BlasLt.h"

#include <stdexcept>
#include <type_traits>

namespace tpc::runtime::cuda {
namespace {

using device::Epilogue;
using device::RowMajorProduct;

void check(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cublasLt: ") + what + ": " +
                             cublasGetStatusString(status));
}

cudaDataType_t cudaType(plan::DType type) {
  return type == plan::DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasLtEpilogue_t ltEpilogue(Epilogue epilogue) {
  switch (epilogue) {
  case Epilogue::None:
    return CUBLASLT_EPILOGUE_DEFAULT;
  case Epilogue::Bias:
    return CUBLASLT_EPILOGUE_BIAS;
  case Epilogue::BiasGelu:
    return CUBLASLT_EPILOGUE_GELU_BIAS;
  case Epilogue::BiasGeluAux:
    return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case Epilogue::GeluGrad:
    return CUBLASLT_EPILOGUE_DGELU;
  case Epilogue::GeluGradBiasGrad:
    return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class T, class Value>
void setDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t what,
             Value value) {
  const T typed = static_cast<T>(value);
  check(cublasLtMatmulDescSetAttribute(desc, what, &typed, sizeof(typed)),
        "setting a product attribute");
}

/// A column-major matrix layout, batched when `batches` > 1.
cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols,
                              int64_t ld, int64_t batches, int64_t stride) {
  cublasLtMatrixLayout_t result = nullptr;
  check(cublasLtMatrixLayoutCreate(&result, type, uint64_t(rows),
                                   uint64_t(cols), ld),
        "creating a matrix layout");
  if (batches > 1) {
    const int32_t count = int32_t(batches);
    check(cublasLtMatrixLayoutSetAttribute(result,
                                           CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                           &count, sizeof(count)),
          "setting a batch count");
    check(cublasLtMatrixLayoutSetAttribute(
              result, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
              sizeof(stride)),
          "setting a batch stride");
  }
  return result;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t *desc) const {
    cublasLtMatmulDescDestroy(desc);
  }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t *layout) const {
    cublasLtMatrixLayoutDestroy(layout);
  }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;

} // namespace

/// A product's descriptors and algorithm, or why cuBLASLt has none.
struct BlasLt::Plan {
  DescPtr desc;
  LayoutPtr a, b, d;
  cublasLtMatmulAlgo_t algo{};
  std::string whyNot;
};

struct BlasLt::State {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  device::PlanCache<device::GemmKey, Plan> cache;

  Plan build(const device::GemmKey &key);
};

BlasLt::Plan BlasLt::State::build(const device::GemmKey &key) {
  const RowMajorProduct &p = key.product;
  Plan plan;
  if (std::string why = device::whyNotBlasLt(p); !why.empty()) {
    plan.whyNot = why;
    return plan;
  }
  const device::ColumnMajorGemm g = device::columnMajor(p);
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(
            &desc, p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
            CUDA_R_32F),
        "creating a product");
  plan.desc.reset(desc);
  setDesc<int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                   g.transA ? CUBLAS_OP_T : CUBLAS_OP_N);
  setDesc<int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                   g.transB ? CUBLAS_OP_T : CUBLAS_OP_N);
  setDesc<uint32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    ltEpilogue(p.epilogue));
  if (p.hasBias())
    setDesc<int32_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                     cudaType(p.biasType));
  if (p.hasAux())
    setDesc<int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldAux);
  const cudaDataType_t in = cudaType(p.inType), out = cudaType(p.outType);
  plan.a.reset(layout(in, g.rowsA, g.colsA, g.lda, g.batches, g.strideA));
  plan.b.reset(layout(in, g.rowsB, g.colsB, g.ldb, g.batches, g.strideB));
  plan.d.reset(layout(out, g.rowsD, g.colsD, g.ldd, g.batches, g.strideD));

  // The heuristic sees the operands' alignment through the preference (A
  // is rhs, B lhs) and the bias and aux pointers' through placeholders at
  // the key's alignment (it reads their values, never their memory).
  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&preference), "creating a preference");
  auto setPreference = [&](cublasLtMatmulPreferenceAttributes_t what,
                           auto value) {
    check(cublasLtMatmulPreferenceSetAttribute(preference, what, &value,
                                               sizeof(value)),
          "setting a preference");
  };
  setPreference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                uint64_t(workspaceBytes));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                uint32_t(key.alignRhs));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                uint32_t(key.alignLhs));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                uint32_t(key.alignOut));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                uint32_t(key.alignOut));
  if (p.hasBias())
    setDesc<uintptr_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                       uintptr_t(key.alignBias));
  if (p.hasAux())
    setDesc<uintptr_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                       uintptr_t(key.alignAux));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, plan.a.get(), plan.b.get(), plan.d.get(), plan.d.get(),
      preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    plan.whyNot =
        std::string("no algorithm (") +
        (status != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(status)
                                         : "none returned") +
        ")";
    return plan;
  }
  plan.algo = result.algo;
  return plan;
}

BlasLt::BlasLt(void *workspace, uint64_t workspaceBytes)
    : state(std::make_unique<State>()) {
  check(cublasLtCreate(&state->handle), "creating a handle");
  state->workspace = workspace;
  state->workspaceBytes = workspaceBytes;
}

BlasLt::~BlasLt() {
  if (state && state->handle) {
    state->cache = {};
    cublasLtDestroy(state->handle);
  }
}

bool BlasLt::run(const RowMajorProduct &product, const LtOperands &operands,
                 cudaStream_t stream, std::string &note) {
  const device::GemmKey key =
      device::gemmKey(product, operands.lhs, operands.rhs, operands.out,
                      operands.bias, operands.aux);
  bool built = false;
  Plan &plan = state->cache.get(key, [&] {
    built = true;
    return state->build(key);
  });
  if (!plan.whyNot.empty()) {
    if (built)
      note = "cuBLASLt: " + device::describe(key) + ": " + plan.whyNot +
             "; using cuBLAS";
    return false;
  }
  cublasLtMatmulDesc_t desc = plan.desc.get();
  // Pointers change between runs (a plan serves every tensor of its shape).
  if (product.hasBias())
    setDesc<uintptr_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                       reinterpret_cast<uintptr_t>(operands.bias));
  if (product.hasAux())
    setDesc<uintptr_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                       reinterpret_cast<uintptr_t>(operands.aux));
  const float beta = product.accumulate ? 1.0f : 0.0f;
  check(cublasLtMatmul(state->handle, desc, &operands.alpha, operands.rhs,
                       plan.a.get(), operands.lhs, plan.b.get(), &beta,
                       operands.out, plan.d.get(), operands.out, plan.d.get(),
                       &plan.algo, state->workspace, state->workspaceBytes,
                       stream),
        "product");
  return true;
}

std::string BlasLt::description() const {
  return "cuBLASLt " + std::to_string(cublasLtGetVersion());
}
size_t BlasLt::plans() const { return state->cache.size(); }
uint64_t BlasLt::builds() const { return state->cache.builds(); }

} // namespace tpc::runtime::cuda
