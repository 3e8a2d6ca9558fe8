#include "CudnnAttention.h"

// cuDNN is loaded at run time (dlopen), so that tp-run starts where it is
// missing and attention runs tpc's kernels there; cudnn-frontend reaches
// cuDNN (and the CUDA runtime and NVRTC it may use) through dlsym.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <dlfcn.h>

#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace cudnn_frontend {
/// The loaded libcudnn, which cudnn-frontend's calls resolve against.
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend

namespace tpc::runtime::cuda {
namespace {

namespace fe = cudnn_frontend;

/// Loads libcudnn once; empty when loaded, else why not.
const std::string &loadCudnn() {
  static const std::string why = [] {
    // tpc links CUDA 13's runtime statically; cudnn-frontend loads one by
    // name, and must not pick another major version.
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);
    std::string errors;
    for (const char *name : {"libcudnn.so.9", "libcudnn.so"}) {
      if (void *handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) {
        fe::cudnn_dlhandle = handle;
        return std::string();
      }
      const char *error = dlerror();
      errors +=
          std::string(errors.empty() ? "" : "; ") + (error ? error : name);
    }
    return errors;
  }();
  return why;
}
using Graph = fe::graph::Graph;

// The uids a graph's tensors are bound by.
enum Uid : int64_t {
  kQuery = 1,
  kKey,
  kValue,
  kResult,
  kStats,
  kResultGrad,
  kQueryGrad,
  kKeyGrad,
  kValueGrad,
};

/// [batch, heads, seq, dim], contiguous.
std::vector<int64_t> dimsOf(int64_t batch, int64_t heads, int64_t seq,
                            int64_t dim) {
  return {batch, heads, seq, dim};
}
std::vector<int64_t> stridesOf(int64_t heads, int64_t seq, int64_t dim) {
  return {heads * seq * dim, seq * dim, dim, 1};
}

/// Graph tensors of tp.attention's operands.
struct SdpaGraphTensors {
  std::shared_ptr<fe::graph::Tensor_attributes> query, key, value;
};

SdpaGraphTensors operands(Graph &graph, const device::SdpaDims &d) {
  auto tensor = [&](const char *name, int64_t uid, int64_t heads, int64_t seq,
                    int64_t dim) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim(dimsOf(d.batch, heads, seq, dim))
                            .set_stride(stridesOf(heads, seq, dim)));
  };
  return {tensor("query", kQuery, d.queryHeads, d.queries, d.headDim),
          tensor("key", kKey, d.keyHeads, d.keys, d.headDim),
          tensor("value", kValue, d.keyHeads, d.keys, d.valueDim)};
}

/// The softmax statistics: f32 [batch, heads, queries, 1], as tpc's
/// logsumexp [b..., Sq].
void asStats(fe::graph::Tensor_attributes &stats, const device::SdpaDims &d) {
  stats.set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({d.batch, d.queryHeads, d.queries, 1})
      .set_stride({d.queryHeads * d.queries, d.queries, 1, 1});
}

/// A bf16 graph for a GPU of compute capability `sm` (major * 10 + minor):
/// cudnn-frontend then never asks the device, so graphs validate without
/// one.
std::shared_ptr<Graph> newGraph(int sm) {
  auto graph = std::make_shared<Graph>();
  graph->set_sm_version(sm);
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

/// Validates the graph and builds its plan; the reason on failure.
std::string buildPlan(Graph &graph, cudnnHandle_t handle) {
  auto failed = [](fe::error_t error, const char *stage) -> std::string {
    if (error.is_good())
      return {};
    return std::string(stage) + ": " + error.get_message();
  };
  if (std::string why = failed(graph.validate(), "validating"); !why.empty())
    return why;
  if (std::string why =
          failed(graph.build_operation_graph(handle), "building the graph");
      !why.empty())
    return why;
  if (std::string why =
          failed(graph.create_execution_plans({fe::HeurMode_t::A}),
                 "choosing an engine");
      !why.empty())
    return why;
  if (std::string why = failed(graph.check_support(), "checking support");
      !why.empty())
    return why;
  return failed(graph.build_plans(), "building the plan");
}

/// tp.attention's graph, not yet built.
std::shared_ptr<Graph> defineForward(const device::SdpaKey &key, int sm) {
  const device::SdpaDims &d = key.dims;
  std::shared_ptr<Graph> graph = newGraph(sm);
  SdpaGraphTensors in = operands(*graph, d);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_attn_scale(key.alpha);
  if (key.causal)
    options.set_causal_mask(true);
  auto [result, stats] = graph->sdpa(in.query, in.key, in.value, options);
  result->set_output(true)
      .set_uid(kResult)
      .set_dim(dimsOf(d.batch, d.queryHeads, d.queries, d.valueDim))
      .set_stride(stridesOf(d.queryHeads, d.queries, d.valueDim));
  stats->set_output(true);
  asStats(*stats, d);
  return graph;
}

/// tp.attention_grad's graph, not yet built.
std::shared_ptr<Graph> defineBackward(const device::SdpaKey &key, int sm) {
  const device::SdpaDims &d = key.dims;
  std::shared_ptr<Graph> graph = newGraph(sm);
  SdpaGraphTensors in = operands(*graph, d);
  auto activation = [&](const char *name, int64_t uid) {
    return graph->tensor(
        fe::graph::Tensor_attributes()
            .set_name(name)
            .set_uid(uid)
            .set_dim(dimsOf(d.batch, d.queryHeads, d.queries, d.valueDim))
            .set_stride(stridesOf(d.queryHeads, d.queries, d.valueDim)));
  };
  auto result = activation("result", kResult);
  auto resultGrad = activation("result_grad", kResultGrad);
  auto stats = graph->tensor(fe::graph::Tensor_attributes().set_name("stats"));
  asStats(*stats, d);
  // Deterministic: the same gradients every run (no atomics), as tpc's
  // kernels, so resumed runs stay bit-identical.
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_grad")
                     .set_attn_scale(key.alpha)
                     .set_deterministic_algorithm(true);
  if (key.causal)
    options.set_causal_mask(true);
  auto [queryGrad, keyGrad, valueGrad] = graph->sdpa_backward(
      in.query, in.key, in.value, result, resultGrad, stats, options);
  queryGrad->set_output(true)
      .set_uid(kQueryGrad)
      .set_dim(dimsOf(d.batch, d.queryHeads, d.queries, d.headDim))
      .set_stride(stridesOf(d.queryHeads, d.queries, d.headDim));
  keyGrad->set_output(true)
      .set_uid(kKeyGrad)
      .set_dim(dimsOf(d.batch, d.keyHeads, d.keys, d.headDim))
      .set_stride(stridesOf(d.keyHeads, d.keys, d.headDim));
  valueGrad->set_output(true)
      .set_uid(kValueGrad)
      .set_dim(dimsOf(d.batch, d.keyHeads, d.keys, d.valueDim))
      .set_stride(stridesOf(d.keyHeads, d.keys, d.valueDim));
  return graph;
}

std::shared_ptr<Graph> define(const device::SdpaKey &key, int sm) {
  return key.backward ? defineBackward(key, sm) : defineForward(key, sm);
}

/// A built graph, or why there is none.
struct CachedGraph {
  std::shared_ptr<Graph> graph;
  std::string whyNot;
};

} // namespace

struct CudnnAttention::State {
  cudnnHandle_t handle = nullptr;
  int computeCapability = 0;
  device::PlanCache<device::SdpaKey, CachedGraph> cache;

  bool run(const device::SdpaKey &key,
           std::unordered_map<int64_t, void *> pointers,
           const Workspace &workspace, std::string &note) {
    bool built = false;
    CachedGraph &cached = cache.get(key, [&] {
      built = true;
      CachedGraph result;
      // cudnn-frontend throws where a library it loads is missing.
      try {
        std::shared_ptr<Graph> graph = define(key, computeCapability);
        result.whyNot = buildPlan(*graph, handle);
        if (result.whyNot.empty())
          result.graph = std::move(graph);
      } catch (const std::exception &error) {
        result.graph = nullptr;
        result.whyNot = error.what();
      }
      return result;
    });
    if (!cached.graph) {
      if (built)
        note = "cuDNN attention: " + device::describe(key) + ": " +
               cached.whyNot + "; using tpc's kernels";
      return false;
    }
    int64_t bytes = 0;
    if (fe::error_t error = cached.graph->get_workspace_size(bytes);
        error.is_bad())
      throw std::runtime_error("cuDNN attention: workspace size: " +
                               error.get_message());
    void *space = bytes > 0 ? workspace(uint64_t(bytes)) : nullptr;
    if (fe::error_t error = cached.graph->execute(handle, pointers, space);
        error.is_bad())
      throw std::runtime_error("cuDNN attention: " + device::describe(key) +
                               ": " + error.get_message());
    return true;
  }
};

device::AttentionLibrary CudnnAttention::probe(int device) {
  device::AttentionLibrary library;
  library.built = true;
  library.loadError = loadCudnn();
  if (library.loadError.empty())
    library.version = int64_t(fe::detail::get_backend_version());
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) == cudaSuccess)
    library.computeCapability = major * 10 + minor;
  const char *wanted = std::getenv("TPC_CUDNN");
  library.disabledByUser = wanted && std::string(wanted) == "0";
  return library;
}

std::string CudnnAttention::validate(const device::SdpaKey &key,
                                     int computeCapability) {
  if (const std::string &why = loadCudnn(); !why.empty())
    return "libcudnn not loaded (" + why + ")";
  try {
    if (fe::error_t error = define(key, computeCapability)->validate();
        error.is_bad())
      return error.get_message();
  } catch (const std::exception &error) {
    return error.what();
  }
  return {};
}

CudnnAttention::CudnnAttention(cudaStream_t stream, int computeCapability)
    : state(std::make_unique<State>()) {
  state->computeCapability = computeCapability;
  if (!loadCudnn().empty())
    throw std::logic_error("cuDNN attention without libcudnn");
  if (cudnnStatus_t status = fe::detail::create_handle(&state->handle);
      status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN: creating a handle: ") +
                             fe::detail::get_error_string(status));
  if (cudnnStatus_t status = fe::detail::set_stream(state->handle, stream);
      status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN: setting the stream: ") +
                             fe::detail::get_error_string(status));
}

CudnnAttention::~CudnnAttention() {
  if (state && state->handle) {
    state->cache = {};
    fe::detail::destroy_handle(state->handle);
  }
}

bool CudnnAttention::forward(const device::SdpaKey &key, const SdpaForward &t,
                             const Workspace &workspace, std::string &note) {
  return state->run(key,
                    {{kQuery, const_cast<void *>(t.query)},
                     {kKey, const_cast<void *>(t.key)},
                     {kValue, const_cast<void *>(t.value)},
                     {kResult, t.result},
                     {kStats, t.logsumexp}},
                    workspace, note);
}

bool CudnnAttention::backward(const device::SdpaKey &key, const SdpaBackward &t,
                              const Workspace &workspace, std::string &note) {
  return state->run(key,
                    {{kQuery, const_cast<void *>(t.query)},
                     {kKey, const_cast<void *>(t.key)},
                     {kValue, const_cast<void *>(t.value)},
                     {kResult, const_cast<void *>(t.result)},
                     {kResultGrad, const_cast<void *>(t.resultGrad)},
                     {kStats, const_cast<float *>(t.logsumexp)},
                     {kQueryGrad, t.queryGrad},
                     {kKeyGrad, t.keyGrad},
                     {kValueGrad, t.valueGrad}},
                    workspace, note);
}

size_t CudnnAttention::graphs() const { return state->cache.size(); }

} // namespace tpc::runtime::cuda
