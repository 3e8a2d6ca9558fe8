#include "CudaBackend.h"

#include "BlasLt.h"
#ifdef TPC_HAVE_CUDNN
#include "CudnnAttention.h"
#endif
#include "Kernels.h"

#include "../CollectiveLayout.h"

#include "tpc/runtime/OpShapes.h"
#include "tpc/runtime/OpTable.h"

#include "tpc/runtime/Comm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef TPC_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <array>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

using plan::OpKind;

namespace {

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("cuda: ") + what + ": " +
                             cudaGetErrorString(error));
}

void check(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cublas: ") + what + ": " +
                             cublasGetStatusString(status));
}

/// Bytes held by device buffers now and at most (for the metrics).
struct DeviceBytes {
  uint64_t live = 0, peak = 0;
};

#ifdef TPC_HAVE_NCCL
void check(ncclResult_t result, const char *what) {
  if (result != ncclSuccess)
    throw std::runtime_error(std::string("nccl: ") + what + ": " +
                             ncclGetErrorString(result));
}

/// NCCL between the GPUs of the grid's ranks, one communicator per set of
/// axes (as GridComm's groups), split from one world communicator whose id
/// travels over MPI. Collectives queue on the backend's stream; ring shifts
/// on a stream of their own, and pipeline transfers on one communicator and
/// stream per direction between two stages, each joined back by an event at
/// its wait. Collectives are f32 only: bf16 ones run on f32 copies (their
/// sums must round once, as GridComm's do); transfers move bytes as stored.
/// Traffic is counted in the grid's statistics.
class NcclChannel final : public CollectiveChannel {
public:
  NcclChannel(GridComm &grid, cudaStream_t stream)
      : grid(grid), stream(stream) {
    ncclUniqueId id{};
    if (grid.rank() == 0)
      check(ncclGetUniqueId(&id), "creating the unique id");
    Comm::world().broadcastBytes(
        {reinterpret_cast<std::byte *>(&id), sizeof id}, 0);
    check(ncclCommInitRank(&world, grid.size(), id, grid.rank()),
          "creating the world communicator");
    check(cudaStreamCreateWithFlags(&shiftStream, cudaStreamNonBlocking),
          "creating the communication stream");
    check(cudaEventCreateWithFlags(&shiftReady, cudaEventDisableTiming),
          "creating an event");
    check(cudaEventCreateWithFlags(&transferReady, cudaEventDisableTiming),
          "creating an event");
  }
  ~NcclChannel() override {
    for (auto &[buffer, event] : shiftDone)
      cudaEventDestroy(event);
    for (auto &[buffer, event] : transferDone)
      cudaEventDestroy(event);
    if (transferReady)
      cudaEventDestroy(transferReady);
    for (auto &[route, r] : routes) {
      if (r.comm)
        ncclCommDestroy(r.comm);
      if (r.stream)
        cudaStreamDestroy(r.stream);
    }
    if (shiftReady)
      cudaEventDestroy(shiftReady);
    for (auto &[axes, comm] : groups)
      ncclCommDestroy(comm);
    if (world)
      ncclCommDestroy(world);
    if (shiftStream)
      cudaStreamDestroy(shiftStream);
  }
  NcclChannel(const NcclChannel &) = delete;
  NcclChannel &operator=(const NcclChannel &) = delete;

  std::string_view transport() const override { return "NCCL"; }
  bool waitsOnHost() const override { return false; }

  void allReduceSum(const std::vector<int> &axes, WireType type, void *data,
                    size_t count) override {
    requireF32(type);
    grid.countCollective("all_reduce", axes, count);
    check(ncclAllReduce(data, data, count, ncclFloat, ncclSum, group(axes),
                        stream),
          "all-reduce");
  }
  void allGather(const std::vector<int> &axes, WireType type, const void *in,
                 void *out, size_t count) override {
    requireF32(type);
    grid.countCollective("all_gather", axes, count * members(axes));
    check(ncclAllGather(in, out, count, ncclFloat, group(axes), stream),
          "all-gather");
  }
  void reduceScatterSum(const std::vector<int> &axes, WireType type,
                        const void *in, void *out, size_t count) override {
    requireF32(type);
    grid.countCollective("reduce_scatter", axes, count * members(axes));
    check(ncclReduceScatter(in, out, count, ncclFloat, ncclSum, group(axes),
                            stream),
          "reduce-scatter");
  }
  void allToAll(const std::vector<int> &axes, WireType type, const void *in,
                void *out, size_t count) override {
    requireF32(type);
    grid.countCollective("all_to_all", axes, count);
    const size_t n = members(axes), chunk = count / n;
    const auto *send = static_cast<const float *>(in);
    auto *received = static_cast<float *>(out);
    ncclComm_t comm = group(axes);
    check(ncclGroupStart(), "all-to-all");
    for (size_t j = 0; j < n; ++j) {
      check(ncclSend(send + j * chunk, chunk, ncclFloat, int(j), comm, stream),
            "all-to-all send");
      check(ncclRecv(received + j * chunk, chunk, ncclFloat, int(j), comm,
                     stream),
            "all-to-all receive");
    }
    check(ncclGroupEnd(), "all-to-all");
  }
  void startShift(const std::vector<int> &axes, WireType type, const void *in,
                  void *out, size_t count) override {
    // On the shift stream, after what the compute stream queued so far;
    // finishShift joins it back.
    requireF32(type);
    const CommGroup &g = grid.group(axes);
    grid.countCollective("ring_shift", axes, count);
    cudaEvent_t &done = shiftDone[out];
    if (!done)
      check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
            "creating an event");
    check(cudaEventRecord(shiftReady, stream), "ring shift");
    check(cudaStreamWaitEvent(shiftStream, shiftReady), "ring shift");
    if (g.size == 1) {
      if (in != out)
        check(cudaMemcpyAsync(out, in, count * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream),
              "ring shift copy");
    } else {
      ncclComm_t comm = group(axes);
      check(ncclGroupStart(), "ring shift");
      check(ncclSend(in, count, ncclFloat, (g.rank + 1) % g.size, comm,
                     shiftStream),
            "ring shift send");
      check(ncclRecv(out, count, ncclFloat, (g.rank - 1 + g.size) % g.size,
                     comm, shiftStream),
            "ring shift receive");
      check(ncclGroupEnd(), "ring shift");
    }
    check(cudaEventRecord(done, shiftStream), "ring shift");
  }
  bool matchesTransfersByTag() const override { return false; }
  void prepareGroups(std::span<const std::vector<int>> collectives,
                     std::span<const TransferRoute> routes) override {
    for (const std::vector<int> &axes : collectives)
      group(axes);
    for (const TransferRoute &route : routes)
      routeOf(route);
  }
  // Pipeline transfers (of plans whose order the loader proved,
  // LoadedPlan::inOrderTransferProblem): each direction between two stages
  // has a communicator and a stream of its own, so its transfers run in
  // order and wait for no other direction's; a start queues after the
  // computation before it, a wait joins the transfer back into the compute
  // stream.
  void startSend(int axis, int64_t peer, int tag, WireType type, const void *in,
                 size_t count) override {
    (void)tag; // matched in order: the loader checked the tags agree
    grid.countCollective("send", {axis}, count, wireBytes(type));
    startTransfer({axis, grid.coords()[size_t(axis)], peer},
                  const_cast<void *>(in), count * wireBytes(type));
  }
  void startReceive(int axis, int64_t peer, int tag, WireType type, void *out,
                    size_t count) override {
    (void)tag;
    startTransfer({axis, peer, grid.coords()[size_t(axis)]}, out,
                  count * wireBytes(type));
  }
  void finishTransfer(const void *buffer) override {
    if (!inFlight.erase(buffer))
      throw std::logic_error("nccl: a transfer wait with no transfer started");
    check(cudaStreamWaitEvent(stream, transferDone.at(buffer)),
          "pipeline transfer wait");
  }
  void finishShift(const void *out) override {
    auto it = shiftDone.find(out);
    if (it == shiftDone.end())
      throw std::logic_error("cuda: a ring shift wait with no shift started");
    check(cudaStreamWaitEvent(stream, it->second), "ring shift wait");
  }

private:
  static void requireF32(WireType type) {
    if (type != WireType::F32)
      throw std::logic_error("nccl: bf16 collectives run on f32 copies");
  }
  size_t members(const std::vector<int> &axes) {
    return size_t(grid.group(axes).size);
  }
  /// The communicator of the group over `axes`, split on first use
  /// (collective over the world: every rank asks in the same order, as the
  /// steps run in the same order).
  ncclComm_t group(const std::vector<int> &axes) {
    if (auto it = groups.find(axes); it != groups.end())
      return it->second;
    const CommGroup &g = grid.group(axes);
    // Ranks sharing every coordinate outside `axes` share a colour.
    int64_t colour = 0;
    for (size_t axis = 0; axis < grid.shape().size(); ++axis)
      if (std::find(axes.begin(), axes.end(), int(axis)) == axes.end())
        colour = colour * grid.shape()[axis] + grid.coords()[axis];
    ncclComm_t comm = nullptr;
    check(ncclCommSplit(world, int(colour), g.rank, &comm, nullptr),
          "splitting a group");
    groups.emplace(axes, comm);
    return comm;
  }

  /// A direction of transfers: a communicator of its two ranks (the
  /// sender rank 0) and a stream.
  struct Route {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  /// The route's communicator and stream, split from the axis's group
  /// (collective over it: prepareGroups creates every route of the plan up
  /// front, in one order on every rank).
  Route &routeOf(const TransferRoute &route) {
    if (auto it = routes.find(route); it != routes.end())
      return it->second;
    const int64_t self = grid.coords()[size_t(route.axis)];
    const bool member = self == route.from || self == route.to;
    Route created;
    check(ncclCommSplit(group({route.axis}), member ? 0 : NCCL_SPLIT_NOCOLOR,
                        self == route.from ? 0 : 1, &created.comm, nullptr),
          "splitting a transfer route");
    if (member)
      check(cudaStreamCreateWithFlags(&created.stream, cudaStreamNonBlocking),
            "creating a transfer stream");
    return routes.emplace(route, created).first->second;
  }
  void startTransfer(const TransferRoute &route, void *data, size_t bytes) {
    auto found = routes.find(route);
    if (found == routes.end() || !found->second.comm)
      throw std::logic_error("nccl: a transfer on a route prepareGroups did "
                             "not create");
    const Route &r = found->second;
    if (inFlight.count(data))
      throw std::logic_error("nccl: a buffer already in a pipeline transfer");
    cudaEvent_t &done = transferDone[data];
    if (!done)
      check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
            "creating an event");
    check(cudaEventRecord(transferReady, stream), "pipeline transfer");
    check(cudaStreamWaitEvent(r.stream, transferReady), "pipeline transfer");
    const bool send = grid.coords()[size_t(route.axis)] == route.from;
    if (send)
      check(ncclSend(data, bytes, ncclUint8, 1, r.comm, r.stream),
            "pipeline send");
    else
      check(ncclRecv(data, bytes, ncclUint8, 0, r.comm, r.stream),
            "pipeline receive");
    check(cudaEventRecord(done, r.stream), "pipeline transfer");
    inFlight.insert(data);
  }

  GridComm &grid;
  cudaStream_t stream;
  ncclComm_t world = nullptr;
  std::map<std::vector<int>, ncclComm_t> groups;
  cudaStream_t shiftStream = nullptr;
  cudaEvent_t shiftReady = nullptr;
  std::map<const void *, cudaEvent_t> shiftDone;
  std::map<TransferRoute, Route> routes;
  cudaEvent_t transferReady = nullptr;
  /// Each buffer's completion event (reused), and the buffers whose
  /// transfer is not waited for yet.
  std::map<const void *, cudaEvent_t> transferDone;
  std::set<const void *> inFlight;
};
#endif

class DeviceBuffer final : public Buffer {
public:
  DeviceBuffer(uint64_t bytes, DeviceBytes &usage)
      : bytes(bytes), usage(usage) {
    void *memory = nullptr;
    // cudaMalloc aligns to 256 bytes.
    check(cudaMalloc(&memory, std::max<uint64_t>(bytes, 1)),
          ("allocating " + std::to_string(bytes) + " bytes").c_str());
    this->memory = static_cast<std::byte *>(memory);
    usage.live += bytes;
    usage.peak = std::max(usage.peak, usage.live);
  }
  ~DeviceBuffer() override {
    cudaFree(memory);
    usage.live -= bytes;
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  std::byte *data() override { return memory; }
  uint64_t size() const override { return bytes; }

private:
  uint64_t bytes;
  DeviceBytes &usage;
  std::byte *memory = nullptr;
};

/// A captured CUDA graph, launched on the backend's stream.
class CudaGraph final : public CommandBuffer {
public:
  CudaGraph(cudaGraphExec_t graph, cudaStream_t stream)
      : graph(graph), stream(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(graph); }
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;
  void submit() override {
    check(cudaGraphLaunch(graph, stream), "launching the recorded step");
  }

private:
  cudaGraphExec_t graph;
  cudaStream_t stream;
};

class CudaBackend;
using CudaKernel = void (*)(CudaBackend &, const Dispatch &);

class CudaBackend final : public Backend {
public:
  /// `localRank`: this rank's index among the ranks of its machine.
  CudaBackend(int ordinal, int localRank);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  bool hostVisible() const override { return false; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    return std::make_unique<DeviceBuffer>(bytes, usage);
  }
  uint64_t peakDeviceBytes() const override { return usage.peak; }
  DeviceDescription describeDevice() const override;
  void upload(std::byte *device, const void *host, uint64_t bytes) override {
    flushAdamW();
    if (bytes == 0)
      return;
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream),
          "upload");
    // The caller may reuse `host` once this returns.
    check(cudaStreamSynchronize(stream), "upload");
  }
  void download(void *host, const std::byte *device, uint64_t bytes) override {
    flushAdamW();
    if (bytes == 0)
      return;
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream),
          "download");
    check(cudaStreamSynchronize(stream), "download");
  }
  // An embedding cache's rows: the packed rows and their indices in one
  // copy each, then a kernel puts each row in place (or the reverse), one
  // synchronisation in all.
  void uploadRows(std::byte *device, uint64_t rowBytes,
                  std::span<const int64_t> rows, const void *host) override {
    if (rowBytes % sizeof(uint32_t) != 0)
      return Backend::uploadRows(device, rowBytes, rows, host);
    if (rows.empty())
      return;
    const RowStaging staging = stageRowIndices(rows, rowBytes, "upload rows");
    check(cudaMemcpyAsync(staging.packed, host, rows.size() * rowBytes,
                          cudaMemcpyHostToDevice, stream),
          "upload rows");
    cuda::scatterRows(staging.packed, staging.indices, int64_t(rows.size()),
                      int64_t(rowBytes / sizeof(uint32_t)), device, stream);
    check(cudaStreamSynchronize(stream), "upload rows");
  }
  void downloadRows(void *host, const std::byte *device, uint64_t rowBytes,
                    std::span<const int64_t> rows) override {
    if (rowBytes % sizeof(uint32_t) != 0)
      return Backend::downloadRows(host, device, rowBytes, rows);
    if (rows.empty())
      return;
    const RowStaging staging = stageRowIndices(rows, rowBytes, "download rows");
    cuda::gatherRows(device, staging.indices, int64_t(rows.size()),
                     int64_t(rowBytes / sizeof(uint32_t)), staging.packed,
                     stream);
    check(cudaMemcpyAsync(host, staging.packed, rows.size() * rowBytes,
                          cudaMemcpyDeviceToHost, stream),
          "download rows");
    check(cudaStreamSynchronize(stream), "download rows");
  }
  /// The scratch for a packed row transfer: the row indices (copied in),
  /// then room for the rows.
  struct RowStaging {
    int64_t *indices;
    std::byte *packed;
  };
  RowStaging stageRowIndices(std::span<const int64_t> rows, uint64_t rowBytes,
                             const char *what) {
    flushAdamW();
    const uint64_t indexBytes =
        (uint64_t(rows.size()) * sizeof(int64_t) + 255) / 256 * 256;
    auto *base = static_cast<std::byte *>(
        scratch(indexBytes + uint64_t(rows.size()) * rowBytes));
    check(cudaMemcpyAsync(base, rows.data(), rows.size() * sizeof(int64_t),
                          cudaMemcpyHostToDevice, stream),
          what);
    return {reinterpret_cast<int64_t *>(base), base + indexBytes};
  }
  bool runsNatively(const plan::Step &step) const override {
    // Steps that only read their place in the grid (vocabulary-parallel
    // embeddings included) have device kernels; collectives, ring shifts,
    // the vocabulary-parallel loss, the feature-split norms and pipeline
    // transfers run here with NCCL, else staged over MPI.
    if (!stepExchanges(step))
      return true;
    return hasNccl() && exchangesOverNccl[size_t(step.kind())];
  }
  void connect(GridComm &grid) override;
  CollectiveChannel *channel() override {
#ifdef TPC_HAVE_NCCL
    return nccl.get();
#else
    return nullptr;
#endif
  }
  std::string collectivePath() const override {
    return hasNccl() ? "NCCL" : Backend::collectivePath();
  }
  std::string kernelLibraries() const override;
  bool hasNccl() const {
#ifdef TPC_HAVE_NCCL
    return nccl != nullptr;
#else
    return false;
#endif
  }
  void enqueue(const Dispatch &dispatch) override {
    if (dispatch.step.kind() != OpKind::AdamW)
      flushAdamW();
    const size_t kind = size_t(dispatch.step.kind());
    if (bf16Kernels[kind] || !hasBf16(dispatch))
      kernels[kind](*this, dispatch);
    else
      runWidened(dispatch);
    check(cudaGetLastError(), opKindName(dispatch.step.kind()));
  }
  /// Runs the f32 kernel of a step with bf16 tensors on f32 copies of them
  /// in the widening workspace, rounding its bf16 results once from their
  /// copies: mixed precision's definition of the kind, as the CPU backend
  /// runs it (kinds without a bf16 kernel of their own yet).
  void runWidened(const Dispatch &d);
  static bool hasBf16(const Dispatch &d) {
    auto bf16 = [](const TensorBinding &t) {
      return t.dtype == plan::DType::BF16;
    };
    return std::any_of(d.operands.begin(), d.operands.end(), bf16) ||
           std::any_of(d.results.begin(), d.results.end(), bf16);
  }
  void synchronize() override {
    flushAdamW();
    check(cudaStreamSynchronize(stream), "synchronize");
  }
  /// AdamW steps queued since the last other work (see adamw below).
  std::vector<cuda::AdamWTensor> pendingAdamW;
  void flushAdamW() {
    if (pendingAdamW.empty())
      return;
    cuda::adamw(pendingAdamW.data(), int64_t(pendingAdamW.size()), stream);
    pendingAdamW.clear();
    check(cudaGetLastError(), "AdamW");
  }
  std::unique_ptr<CommandBuffer>
  record(const std::function<void()> &enqueueSteps) override {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
          "recording the step");
    cudaGraph_t graph = nullptr;
    try {
      enqueueSteps();
      flushAdamW();
    } catch (...) {
      pendingAdamW.clear();
      cudaStreamEndCapture(stream, &graph);
      if (graph)
        cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "recording the step");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(instantiated, "instantiating the recorded step");
    return std::make_unique<CudaGraph>(exec, stream);
  }

  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  /// Products through cuBLASLt (null with TPC_CUBLASLT=0: cuBLAS's only).
  std::unique_ptr<cuda::BlasLt> lt;
  /// Runs `product` through cuBLASLt; false when the caller's cuBLAS path
  /// must (the first time a shape falls back, the log says why).
  bool runLt(const device::RowMajorProduct &product,
             const cuda::LtOperands &operands) {
    if (!lt)
      return false;
    std::string note;
    const bool ran = lt->run(product, operands, stream, note);
    if (!note.empty() && localRank == 0)
      std::cerr << "cuda: " << note << "\n";
    return ran;
  }
  /// cuDNN's fused attention as this GPU has it (whyNoCudnnAttention).
  device::AttentionLibrary attentionLibrary;
#ifdef TPC_HAVE_CUDNN
  /// Null when cuDNN cannot run attention here.
  std::unique_ptr<cuda::CudnnAttention> cudnn;
  /// Runs `run(note)` (a CudnnAttention call); false when tpc's kernel must.
  template <class Run> bool runCudnn(Run &&run) {
    std::string note;
    const bool ran = run(note);
    if (!note.empty() && localRank == 0)
      std::cerr << "cuda: " << note << "\n";
    return ran;
  }
  cuda::Workspace cudnnWorkspace() {
    return [this](uint64_t bytes) { return scratch(bytes); };
  }
#endif
  /// Device workspace of at least `bytes` (kernels' per-row statistics and
  /// partial sums); grows to the largest request, then stays.
  void *scratch(uint64_t bytes) {
    if (!workspace || workspace->size() < bytes) {
      synchronize(); // a queued kernel may still use the old one
      workspace.reset();
      workspace = std::make_unique<DeviceBuffer>(bytes, usage);
    }
    return workspace->data();
  }

#ifdef TPC_HAVE_NCCL
  /// The native steps' channel once connect() found a GPU per rank.
  std::unique_ptr<NcclChannel> nccl;
#endif

private:
  int localRank = 0;
  DeviceBytes usage; // before the buffers: they report to it when freed
  std::array<CudaKernel, size_t(OpKind::MAX) + 1> kernels{};
  /// The kinds whose kernel takes bf16 tensors itself.
  std::array<bool, size_t(OpKind::MAX) + 1> bf16Kernels{};
  /// f32 copies of a widened step's bf16 tensors: one buffer reused by
  /// every step in stream order, grown (between steps, never while a step
  /// is recorded: the first run sizes it) to the largest step.
  std::unique_ptr<DeviceBuffer> widened;
  /// The kinds whose exchanges this backend makes itself over NCCL.
  std::array<bool, size_t(OpKind::MAX) + 1> exchangesOverNccl{};
  std::unique_ptr<DeviceBuffer> workspace;
  static constexpr uint64_t kBlasWorkspaceBytes = uint64_t(32) << 20;
  std::unique_ptr<DeviceBuffer> blasWorkspace;
};

//===----------------------------------------------------------------------===//
// Kernels: each unpacks a dispatch as the CPU backend's does
//===----------------------------------------------------------------------===//

float *f32(const TensorBinding &t) { return reinterpret_cast<float *>(t.data); }
const int32_t *i32(const TensorBinding &t) {
  return reinterpret_cast<const int32_t *>(t.data);
}
const int64_t *i64(const TensorBinding &t) {
  return reinterpret_cast<const int64_t *>(t.data);
}
int64_t rowsOf(const TensorBinding &t) {
  return t.shape.empty() || t.shape.back() == 0 ? 0
                                                : t.elements / t.shape.back();
}

std::vector<int64_t> stridesOf(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

cuda::Indexing indexing(std::span<const int64_t> shape) {
  if (shape.size() > size_t(cuda::kMaxDims))
    throw std::runtime_error("cuda: a tensor of rank " +
                             std::to_string(shape.size()) + " (at most " +
                             std::to_string(cuda::kMaxDims) + ")");
  cuda::Indexing index;
  index.rank = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    index.size[d] = shape[d];
  return index;
}

/// Where batch element i of an operand of `shape` (batch dims, then the
/// matrix) starts, for the result's batch dims `outBatch` (NumPy
/// broadcasting; an operand without batch dims is shared by all).
std::vector<int64_t> batchOffsets(std::span<const int64_t> shape,
                                  std::span<const int64_t> outBatch) {
  const size_t rank = shape.size(), batchRank = rank - 2;
  const int64_t matrix = shape[rank - 2] * shape[rank - 1];
  int64_t count = 1;
  for (int64_t d : outBatch)
    count *= d;
  std::vector<int64_t> offsets(size_t(count), 0);
  if (batchRank == 0)
    return offsets;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = 0, stride = matrix;
    for (size_t d = outBatch.size(); d-- > 0;) {
      const int64_t coord = rest % outBatch[d];
      rest /= outBatch[d];
      const int64_t size = shape[d];
      offset += (size == 1 ? 0 : coord) * stride;
      stride *= size;
    }
    offsets[size_t(i)] = offset;
  }
  return offsets;
}

/// The stride between consecutive offsets, or -1 when they are not evenly
/// spaced (a broadcast inside the batch dims, as grouped-query attention's).
int64_t uniformStride(const std::vector<int64_t> &offsets) {
  const int64_t stride = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  for (size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] - offsets[i - 1] != stride)
      return -1;
  return stride;
}

void matmul(CudaBackend &b, const Dispatch &d) {
  // Row-major C[M,N] = alpha op(A) op(B) is column-major C^T = op(B)^T
  // op(A)^T: cuBLAS multiplies B by A.
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1],
                      &out = d.results[0];
  const bool tl = d.step.transpose_lhs(), tr = d.step.transpose_rhs();
  const size_t rank = out.shape.size();
  const auto [m, n, k, rhsK] = productSizes(lhs.shape, tl, rhs.shape, tr);
  if (out.elements == 0)
    return;
  if (k == 0) {
    check(cudaMemsetAsync(out.data, 0, size_t(out.bytes()), b.stream), "zeros");
    return;
  }
  const std::span<const int64_t> outBatch = out.shape.first(rank - 2);
  const std::vector<int64_t> lhsAt = batchOffsets(lhs.shape, outBatch),
                             rhsAt = batchOffsets(rhs.shape, outBatch);
  // bf16 tensors (mixed precision) go to the GEMM as they are, into a bf16
  // or f32 result (a weight gradient accumulating in f32). f32 tensors go
  // in the step's precision: bf16 copies in the scratch buffer, or f32 in
  // place (TF32 rounds inside the GEMM).
  const plan::Precision precision = d.step.precision();
  const void *a = rhs.data, *bm = lhs.data;
  const bool bf16Tensors = lhs.dtype == plan::DType::BF16;
  const int64_t strideA = uniformStride(rhsAt), strideB = uniformStride(lhsAt);
  const int64_t batches = int64_t(lhsAt.size());
  // cuBLASLt takes the stored operands as they are (bf16 products of f32
  // tensors, precision = bf16, round copies below instead).
  if (strideA >= 0 && strideB >= 0 && lhs.dtype == rhs.dtype &&
      (bf16Tensors || precision != plan::Precision::BF16)) {
    device::RowMajorProduct p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.transposeLhs = tl;
    p.transposeRhs = tr;
    p.ldLhs = tl ? m : k;
    p.ldRhs = tr ? k : n;
    p.ldOut = n;
    p.batches = batches;
    p.strideLhs = strideB;
    p.strideRhs = strideA;
    p.strideOut = m * n;
    p.inType = lhs.dtype;
    p.outType = out.dtype;
    p.tf32 = precision == plan::Precision::TF32 && !bf16Tensors;
    if (b.runLt(p, {lhs.data, rhs.data, out.data, nullptr, nullptr,
                    static_cast<float>(d.step.alpha())}))
      return;
  }
  cudaDataType_t inType = bf16Tensors ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t outType =
      out.dtype == plan::DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // Plain f32 (PyTorch's default too): full-precision products and
  // accumulation. The pedantic variant also bars cuBLAS's faster f32
  // algorithms and bought no accuracy the tests could see.
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (precision == plan::Precision::TF32 && !bf16Tensors)
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (precision == plan::Precision::BF16 && !bf16Tensors) {
    auto *copies = static_cast<uint16_t *>(
        b.scratch(uint64_t(lhs.elements + rhs.elements) * sizeof(uint16_t)));
    cuda::toBf16(f32(lhs), copies, lhs.elements, b.stream);
    cuda::toBf16(f32(rhs), copies + lhs.elements, rhs.elements, b.stream);
    bm = copies;
    a = copies + lhs.elements;
    inType = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
  }
  const size_t inBytes = inType == CUDA_R_16BF ? 2 : 4,
               outBytes = outType == CUDA_R_16BF ? 2 : 4;
  const float alpha = static_cast<float>(d.step.alpha()), beta = 0.0f;
  const cublasOperation_t opA = tr ? CUBLAS_OP_T : CUBLAS_OP_N,
                          opB = tl ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = int(tr ? k : n), ldb = int(tl ? m : k), ldc = int(n);
  auto at = [&](const void *base, int64_t offset) {
    return static_cast<const char *>(base) + offset * int64_t(inBytes);
  };
  if (strideA >= 0 && strideB >= 0) {
    check(cublasGemmStridedBatchedEx(
              b.blas, opA, opB, int(n), int(m), int(k), &alpha, a, inType, lda,
              strideA, bm, inType, ldb, strideB, &beta, out.data, outType, ldc,
              m * n, int(batches), compute, CUBLAS_GEMM_DEFAULT),
          "gemm");
    return;
  }
  // A broadcast inside the batch dims: one product per batch element.
  for (int64_t i = 0; i < batches; ++i)
    check(cublasGemmEx(b.blas, opA, opB, int(n), int(m), int(k), &alpha,
                       at(a, rhsAt[size_t(i)]), inType, lda,
                       at(bm, lhsAt[size_t(i)]), inType, ldb, &beta,
                       out.data + i * m * n * int64_t(outBytes), outType, ldc,
                       compute, CUBLAS_GEMM_DEFAULT),
          "gemm");
}

/// The element storage a kernel moves: bf16, else 4-byte elements (f32, and
/// the i32 token blocks a slice copies bit for bit).
cuda::Storage storageOf(const TensorBinding &t) {
  return t.dtype == plan::DType::BF16 ? cuda::Storage::BF16
                                      : cuda::Storage::F32;
}

/// The one storage of every float tensor of an elementwise step, or nullopt
/// when they differ (the step then runs widened).
std::optional<cuda::Storage> sharedStorage(const Dispatch &d) {
  std::optional<plan::DType> type;
  for (std::span<const TensorBinding> tensors : {d.operands, d.results})
    for (const TensorBinding &t : tensors) {
      if (t.dtype != plan::DType::F32 && t.dtype != plan::DType::BF16)
        continue;
      if (type && *type != t.dtype)
        return std::nullopt;
      type = t.dtype;
    }
  return type ? storageOf(d.results[0]) : cuda::Storage::F32;
}

template <cuda::Binary kKind> void binary(CudaBackend &b, const Dispatch &d) {
  const std::optional<cuda::Storage> storage = sharedStorage(d);
  if (!storage)
    return b.runWidened(d);
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1],
                      &out = d.results[0];
  cuda::Indexing index = indexing(out.shape);
  const size_t rank = out.shape.size();
  auto align = [&](std::span<const int64_t> shape, int64_t *strides) {
    std::vector<int64_t> own = stridesOf(shape);
    for (size_t i = 0; i < shape.size(); ++i)
      strides[rank - shape.size() + i] = shape[i] == 1 ? 0 : own[i];
  };
  align(lhs.shape, index.stride);
  align(rhs.shape, index.stride2);
  const bool sameShapes = std::ranges::equal(lhs.shape, out.shape) &&
                          std::ranges::equal(rhs.shape, out.shape);
  cuda::binary(kKind, *storage, lhs.data, rhs.data, out.data, out.elements,
               index, sameShapes, b.stream);
}

/// An elementwise step on its tensors' one storage (or widened): `run`
/// launches the kernel.
template <class Run>
void elementwise(CudaBackend &b, const Dispatch &d, Run &&run) {
  const std::optional<cuda::Storage> storage = sharedStorage(d);
  if (!storage)
    return b.runWidened(d);
  run(*storage, d.results[0].elements);
}

void scale(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::scale(s, d.operands[0].data, static_cast<float>(d.step.factor()),
                d.results[0].data, n, b.stream);
  });
}
void gelu(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::gelu(s, d.operands[0].data, d.results[0].data, n, b.stream);
  });
}
void silu(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::silu(s, d.operands[0].data, d.results[0].data, n, b.stream);
  });
}
void geluGrad(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::geluGrad(s, d.operands[0].data, d.operands[1].data, d.results[0].data,
                   n, b.stream);
  });
}
void siluGrad(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::siluGrad(s, d.operands[0].data, d.operands[1].data, d.results[0].data,
                   n, b.stream);
  });
}
void relu(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::relu(s, d.operands[0].data, d.results[0].data, n, b.stream);
  });
}
void reluGrad(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::reluGrad(s, d.operands[0].data, d.operands[1].data, d.results[0].data,
                   n, b.stream);
  });
}
void constant(CudaBackend &b, const Dispatch &d) {
  cuda::fill(static_cast<float>(d.step.value()), f32(d.results[0]),
             d.results[0].elements, b.stream);
}

void copyIfMoved(CudaBackend &b, const TensorBinding &operand,
                 const TensorBinding &result) {
  if (result.data != operand.data && result.elements > 0)
    check(cudaMemcpyAsync(result.data, operand.data, size_t(result.bytes()),
                          cudaMemcpyDeviceToDevice, b.stream),
          "copy");
}
void reshape(CudaBackend &b, const Dispatch &d) {
  copyIfMoved(b, d.operands[0], d.results[0]);
}

/// f32 <-> bf16, rounding to nearest even; the same type is a copy.
void convert(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  if (in.dtype == out.dtype)
    return copyIfMoved(b, in, out);
  if (out.dtype == plan::DType::BF16)
    cuda::toBf16(f32(in), out.bf16(), out.elements, b.stream);
  else
    cuda::fromBf16(in.bf16(), f32(out), out.elements, b.stream);
}

/// out = in permuted: out dim i is in dim perm[i].
void permute(CudaBackend &b, cuda::Storage storage, const void *in,
             std::span<const int64_t> inShape, std::span<const int64_t> perm,
             void *out) {
  std::vector<int64_t> inStrides = stridesOf(inShape), outShape;
  for (int64_t p : perm)
    outShape.push_back(inShape[size_t(p)]);
  cuda::Indexing index = indexing(outShape);
  int64_t count = 1;
  for (size_t i = 0; i < perm.size(); ++i) {
    index.stride[i] = inStrides[size_t(perm[i])];
    count *= outShape[i];
  }
  cuda::gather(storage, in, 0, out, count, index, b.stream);
}

/// out = in[offsets...] (a block of `in` of out's shape).
void sliceAt(CudaBackend &b, const TensorBinding &in,
             std::span<const int64_t> offsets, const TensorBinding &out) {
  std::vector<int64_t> inStrides = stridesOf(in.shape);
  cuda::Indexing index = indexing(out.shape);
  int64_t base = 0;
  for (size_t i = 0; i < inStrides.size(); ++i) {
    index.stride[i] = inStrides[i];
    base += offsets[i] * inStrides[i];
  }
  cuda::gather(storageOf(in), in.data, base, out.data, out.elements, index,
               b.stream);
}

/// out[offsets...] = block; the rest of out is left as it is.
void insertAt(CudaBackend &b, const TensorBinding &block,
              std::span<const int64_t> offsets, const TensorBinding &out) {
  std::vector<int64_t> outStrides = stridesOf(out.shape);
  cuda::Indexing index = indexing(block.shape);
  int64_t base = 0;
  for (size_t i = 0; i < outStrides.size(); ++i) {
    index.stride[i] = outStrides[i];
    base += offsets[i] * outStrides[i];
  }
  cuda::scatter(storageOf(block), block.data, out.data, base, block.elements,
                index, b.stream);
}

void transpose(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  permute(b, storageOf(in), in.data, in.shape, d.ints(), out.data);
}

void slice(CudaBackend &b, const Dispatch &d) {
  sliceAt(b, d.operands[0], d.ints(), d.results[0]);
}

void pad(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  // Zeros are zero bits in f32 and bf16 alike.
  check(cudaMemsetAsync(out.data, 0, size_t(out.bytes()), b.stream), "pad");
  insertAt(b, d.operands[0], d.ints(), out);
}

template <bool kMean> void reduce(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  std::vector<int64_t> strides = stridesOf(in.shape);
  std::vector<int64_t> kept, keptStrides, reduced, reducedStrides;
  std::span<const int64_t> dims = d.ints();
  for (size_t i = 0; i < in.shape.size(); ++i) {
    const bool isReduced =
        std::find(dims.begin(), dims.end(), int64_t(i)) != dims.end();
    (isReduced ? reduced : kept).push_back(in.shape[i]);
    (isReduced ? reducedStrides : keptStrides).push_back(strides[i]);
  }
  cuda::Indexing index = indexing(kept), inner = indexing(reduced);
  std::copy(keptStrides.begin(), keptStrides.end(), index.stride);
  std::copy(reducedStrides.begin(), reducedStrides.end(), inner.stride);
  cuda::reduce(storageOf(in), in.data, storageOf(out), out.data, out.elements,
               index, inner, kMean, b.stream);
}

void softmax(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  cuda::softmax(f32(d.operands[0]), f32(out), rowsOf(out), out.shape.back(),
                d.step.causal(), b.stream);
}
void softmaxGrad(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  cuda::softmaxGrad(f32(d.operands[0]), f32(d.operands[1]), f32(out),
                    rowsOf(out), out.shape.back(), b.stream);
}

/// The sizes of an Attention or AttentionGrad step.
cuda::AttentionDims attentionDims(const Dispatch &d) {
  const size_t first = attentionQueryOperand(d.step.kind());
  const AttentionSizes s =
      attentionSizes(d.operands[first].shape, d.operands[first + 1].shape,
                     d.operands[first + 2].shape);
  cuda::AttentionDims a;
  a.rank = int(s.batch.size());
  if (a.rank > cuda::kMaxDims)
    throw std::runtime_error("attention: more than " +
                             std::to_string(cuda::kMaxDims) + " batch dims");
  std::copy(s.batch.begin(), s.batch.end(), a.batch);
  std::copy(s.keyBatch.begin(), s.keyBatch.end(), a.keyBatch);
  a.queries = s.queries;
  a.keys = s.keys;
  a.headDim = s.headDim;
  a.valueDim = s.valueDim;
  a.causal = d.step.causal();
  a.alpha = static_cast<float>(d.step.alpha());
  a.rounding = d.step.precision() == plan::Precision::TF32 ? 1
               : d.step.precision() == plan::Precision::BF16 || d.bf16Products
                   ? 2
                   : 0;
  // Attention's optional positions (its gradient takes none).
  if (first == 0 && d.operands.size() == 4) {
    a.positions = i32(d.operands[3]);
    a.positionRows = d.operands[3].shape[0];
    int64_t heads = 1;
    for (int i = 0; i < a.rank; ++i)
      heads *= a.batch[i];
    a.headsPerPositionRow = a.positionRows > 0 ? heads / a.positionRows : 1;
  }
  return a;
}

#ifdef TPC_HAVE_CUDNN
/// The one element type of `tensors`, or nullopt when they differ.
std::optional<plan::DType>
sharedType(std::initializer_list<const TensorBinding *> tensors) {
  const plan::DType type = (*tensors.begin())->dtype;
  for (const TensorBinding *t : tensors)
    if (t->dtype != type)
      return std::nullopt;
  return type;
}

/// The cuDNN graph key of an attention step whose query, key and value are
/// operands `first`..`first + 2`, or nullopt when tpc's kernel runs it
/// (device::whyOwnAttention).
std::optional<device::SdpaKey>
cudnnAttentionKey(const CudaBackend &b, const Dispatch &d, size_t first,
                  std::optional<plan::DType> type, bool positions) {
  const TensorBinding &q = d.operands[first], &k = d.operands[first + 1],
                      &v = d.operands[first + 2];
  const device::AttentionStep step{q.shape, k.shape,         v.shape,
                                   type,    d.step.causal(), positions};
  if (!device::whyOwnAttention(b.attentionLibrary, step).empty())
    return std::nullopt;
  device::SdpaKey key;
  key.dims = *device::sdpaDims(q.shape, k.shape, v.shape);
  key.causal = d.step.causal();
  key.alpha = static_cast<float>(d.step.alpha());
  key.type = *type;
  key.backward = first != 0;
  return key;
}
#endif

bool attentionCudnn(CudaBackend &b, const Dispatch &d) {
#ifdef TPC_HAVE_CUDNN
  if (!b.cudnn || d.results[1].dtype != plan::DType::F32)
    return false;
  const std::optional<device::SdpaKey> key =
      cudnnAttentionKey(b, d, 0,
                        sharedType({&d.operands[0], &d.operands[1],
                                    &d.operands[2], &d.results[0]}),
                        d.operands.size() == 4);
  if (!key)
    return false;
  const cuda::SdpaForward tensors{d.operands[0].data, d.operands[1].data,
                                  d.operands[2].data, d.results[0].data,
                                  f32(d.results[1])};
  return b.runCudnn([&](std::string &note) {
    return b.cudnn->forward(*key, tensors, b.cudnnWorkspace(), note);
  });
#else
  (void)b;
  (void)d;
  return false;
#endif
}

bool attentionGradCudnn(CudaBackend &b, const Dispatch &d) {
#ifdef TPC_HAVE_CUDNN
  if (!b.cudnn || d.operands[5].dtype != plan::DType::F32)
    return false;
  const std::optional<device::SdpaKey> key = cudnnAttentionKey(
      b, d, 1,
      sharedType({&d.operands[0], &d.operands[1], &d.operands[2],
                  &d.operands[3], &d.operands[4], &d.results[0], &d.results[1],
                  &d.results[2]}),
      false);
  if (!key)
    return false;
  const cuda::SdpaBackward tensors{
      d.operands[0].data, d.operands[1].data, d.operands[2].data,
      d.operands[3].data, d.operands[4].data, f32(d.operands[5]),
      d.results[0].data,  d.results[1].data,  d.results[2].data};
  return b.runCudnn([&](std::string &note) {
    return b.cudnn->backward(*key, tensors, b.cudnnWorkspace(), note);
  });
#else
  (void)b;
  (void)d;
  return false;
#endif
}

void attention(CudaBackend &b, const Dispatch &d) {
  if (attentionCudnn(b, d))
    return;
  if (CudaBackend::hasBf16(d))
    return b.runWidened(d);
  cuda::attention(f32(d.operands[0]), f32(d.operands[1]), f32(d.operands[2]),
                  attentionDims(d), f32(d.results[0]), f32(d.results[1]),
                  b.stream);
}
void attentionGrad(CudaBackend &b, const Dispatch &d) {
  if (attentionGradCudnn(b, d))
    return;
  if (CudaBackend::hasBf16(d))
    return b.runWidened(d);
  const int64_t rows = std::max<int64_t>(d.operands[5].elements, 1);
  auto *delta = static_cast<float *>(b.scratch(uint64_t(rows) * sizeof(float)));
  cuda::attentionGrad(f32(d.operands[0]), f32(d.operands[1]),
                      f32(d.operands[2]), f32(d.operands[3]),
                      f32(d.operands[4]), f32(d.operands[5]), attentionDims(d),
                      delta, f32(d.results[0]), f32(d.results[1]),
                      f32(d.results[2]), b.stream);
}

#ifdef TPC_HAVE_NCCL
/// The scratch of a feature-split norm, carved from one workspace: this
/// rank's per-row partials [rows, 2], every block's [blocks, rows, 2], the
/// rows' statistics [rows, 2], and the backward's second partials and
/// gather.
struct SplitNormScratch {
  float *local, *gathered, *rowStats, *gradLocal, *gradGathered;
  int64_t blocks;
};
SplitNormScratch splitNormScratch(CudaBackend &b, const Dispatch &d,
                                  int64_t rows) {
  const std::vector<int> axes = groupAxes(d);
  const int64_t blocks = commOf(d).group(axes).size;
  const int64_t perRow = 2 * rows;
  auto *base = static_cast<float *>(
      b.scratch(uint64_t(std::max<int64_t>(perRow, 1) * (2 * blocks + 3)) *
                sizeof(float)));
  SplitNormScratch s;
  s.local = base;
  s.gathered = s.local + perRow;
  s.rowStats = s.gathered + blocks * perRow;
  s.gradLocal = s.rowStats + perRow;
  s.gradGathered = s.gradLocal + perRow;
  s.blocks = blocks;
  return s;
}
/// All-gathers `floats` floats per rank over the step's axes, counted as
/// the CPU backend counts its gather of the same statistics.
void gatherRowStats(CudaBackend &b, const Dispatch &d, const float *local,
                    float *gathered, int64_t floats) {
  channelOf(d).allGather(groupAxes(d), WireType::F32, local, gathered,
                         size_t(floats));
}
/// A layer (`beta`) or RMS norm over features split across the step's axes.
void normSplit(CudaBackend &b, const Dispatch &d, const float *beta) {
  const TensorBinding &out = d.results[0];
  const int64_t rows = rowsOf(out), cols = out.shape.back();
  const bool rms = beta == nullptr;
  const int64_t k = rms ? 1 : 2;
  SplitNormScratch s = splitNormScratch(b, d, rows);
  cuda::normSplitPartials(f32(d.operands[0]), rows, cols, rms, s.local,
                          b.stream);
  gatherRowStats(b, d, s.local, s.gathered, k * rows);
  cuda::normSplitCombine(s.gathered, s.blocks, rows, k, cols, rms,
                         static_cast<float>(d.step.epsilon()), s.rowStats,
                         b.stream);
  cuda::normApply(f32(d.operands[0]), f32(d.operands[1]), beta, s.rowStats,
                  f32(out), rows, cols, b.stream);
}
template <bool kLayer> void normGradSplit(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  const int64_t rows = rowsOf(out), cols = out.shape.back();
  const float epsilon = static_cast<float>(d.step.epsilon());
  const float *grad = f32(d.operands[0]), *x = f32(d.operands[1]),
              *gamma = f32(d.operands[2]);
  SplitNormScratch s = splitNormScratch(b, d, rows);
  if (kLayer) {
    // The forward's statistics, then {sum g, sum g (x - mean)}: two gathers,
    // as on the CPU.
    cuda::normSplitPartials(x, rows, cols, false, s.local, b.stream);
    gatherRowStats(b, d, s.local, s.gathered, 2 * rows);
    cuda::normSplitCombine(s.gathered, s.blocks, rows, 2, cols, false, epsilon,
                           s.rowStats, b.stream);
  }
  cuda::normSplitGradPartials(grad, x, gamma, s.rowStats, rows, cols, !kLayer,
                              s.gradLocal, b.stream);
  gatherRowStats(b, d, s.gradLocal, s.gradGathered, 2 * rows);
  if (!kLayer) // RMS: the sums of squares came with the one gather
    cuda::normSplitCombine(s.gradGathered, s.blocks, rows, 2, cols, true,
                           epsilon, s.rowStats, b.stream);
  cuda::normSplitGrad(grad, x, gamma, s.rowStats, s.gradGathered, s.blocks,
                      rows, cols, !kLayer, f32(out), f32(d.results[1]),
                      kLayer ? f32(d.results[2]) : nullptr, b.stream);
}
#endif

/// Whether a norm step runs on its stored tensors: activations (and their
/// gradients) of one storage, gains and parameter gradients f32, the
/// features on this rank (a feature-split norm runs f32 tensors only).
bool normTakesStoredTypes(const Dispatch &d,
                          std::initializer_list<const TensorBinding *> acts,
                          std::initializer_list<const TensorBinding *> f32s) {
  if (!CudaBackend::hasBf16(d))
    return true;
  if (!d.ints().empty())
    return false;
  const plan::DType type = (*acts.begin())->dtype;
  return std::all_of(
             acts.begin(), acts.end(),
             [&](const TensorBinding *t) { return t->dtype == type; }) &&
         std::all_of(f32s.begin(), f32s.end(), [](const TensorBinding *t) {
           return t->dtype == plan::DType::F32;
         });
}

void layerNorm(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
#ifdef TPC_HAVE_NCCL
  if (!d.ints().empty())
    return normSplit(b, d, f32(d.operands[2]));
#endif
  cuda::norm(storageOf(out), d.operands[0].data, f32(d.operands[1]),
             f32(d.operands[2]), out.data, rowsOf(out), out.shape.back(),
             static_cast<float>(d.step.epsilon()), b.stream);
}
void rmsNorm(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
#ifdef TPC_HAVE_NCCL
  if (!d.ints().empty())
    return normSplit(b, d, nullptr);
#endif
  cuda::norm(storageOf(out), d.operands[0].data, f32(d.operands[1]), nullptr,
             out.data, rowsOf(out), out.shape.back(),
             static_cast<float>(d.step.epsilon()), b.stream);
}
/// LayerNorm and RmsNorm steps.
template <bool kLayer> void normStep(CudaBackend &b, const Dispatch &d) {
  if (!normTakesStoredTypes(
          d, {&d.operands[0], &d.results[0]},
          {&d.operands[1], kLayer ? &d.operands[2] : &d.operands[1]}))
    return b.runWidened(d);
  if (kLayer)
    layerNorm(b, d);
  else
    rmsNorm(b, d);
}
/// out = lhs + rhs, tensors of one shape and storage.
void addSameShape(CudaBackend &b, const TensorBinding &lhs,
                  const TensorBinding &rhs, const TensorBinding &out) {
  cuda::binary(cuda::Binary::Add, storageOf(out), lhs.data, rhs.data, out.data,
               out.elements, cuda::Indexing{}, /*sameShapes=*/true, b.stream);
}

template <bool kLayer> void normGrad(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  const bool residual = d.operands.size() == 4;
  if (!normTakesStoredTypes(
          d,
          {&d.operands[0], &d.operands[1], &out,
           residual ? &d.operands[3] : &out},
          {&d.operands[2], &d.results[1], kLayer ? &d.results[2] : &out}))
    return b.runWidened(d);
#ifdef TPC_HAVE_NCCL
  if (!d.ints().empty()) {
    normGradSplit<kLayer>(b, d);
  } else
#endif
  {
    const int64_t rows = rowsOf(out);
    auto *stats = static_cast<float *>(
        b.scratch(uint64_t(std::max<int64_t>(rows, 1)) * 2 * sizeof(float)));
    cuda::normGrad(storageOf(out), d.operands[0].data, d.operands[1].data,
                   f32(d.operands[2]), out.data, f32(d.results[1]),
                   kLayer ? f32(d.results[2]) : nullptr, stats, rows,
                   out.shape.back(), static_cast<float>(d.step.epsilon()),
                   b.stream);
  }
  // The residual stream's gradient (operand 3), added in place.
  if (residual)
    addSameShape(b, out, d.operands[3], out);
}

/// AddLayerNorm and AddRmsNorm: the residual sum (result 0), then the norm
/// of it as the standalone kind runs it (split features included).
template <bool kLayer> void addNorm(CudaBackend &b, const Dispatch &d) {
  if (!normTakesStoredTypes(
          d, {&d.operands[0], &d.operands[1], &d.results[0], &d.results[1]},
          {&d.operands[2], kLayer ? &d.operands[3] : &d.operands[2]}))
    return b.runWidened(d);
  addSameShape(b, d.operands[0], d.operands[1], d.results[0]);
  const std::array<TensorBinding, 3> operands = {
      d.results[0], d.operands[2], kLayer ? d.operands[3] : TensorBinding{}};
  const Dispatch norm{d.step,
                      {operands.data(), size_t(kLayer ? 3 : 2)},
                      d.results.subspan(1, 1),
                      d.comm,
                      d.bf16Products,
                      d.channel};
  if (kLayer)
    layerNorm(b, norm);
  else
    rmsNorm(b, norm);
}

void swiglu(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::swiglu(s, d.operands[0].data, d.operands[1].data, d.results[0].data,
                 n, b.stream);
  });
}
void swigluGrad(CudaBackend &b, const Dispatch &d) {
  elementwise(b, d, [&](cuda::Storage s, int64_t n) {
    cuda::swigluGrad(s, d.operands[0].data, d.operands[1].data,
                     d.operands[2].data, d.results[0].data, d.results[1].data,
                     n, b.stream);
  });
}

void rotary(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  int64_t dim = out.shape.back(), seq = out.shape[out.shape.size() - 2];
  int64_t outer = seq * dim ? out.elements / (seq * dim) : 0;
  const bool atPositions = d.operands.size() == 2;
  if (d.operands[0].dtype != out.dtype)
    return b.runWidened(d);
  cuda::rotary(storageOf(out), d.operands[0].data, out.data, outer, seq, dim,
               d.step.theta(), d.step.inverse(),
               atPositions ? i32(d.operands[1]) : nullptr,
               atPositions ? d.operands[1].shape[0] : 0, b.stream);
}

void cacheWrite(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &cache = d.results[0], &update = d.operands[1],
                      &positions = d.operands[2];
  copyIfMoved(b, d.operands[0], cache);
  const int64_t dim = cache.shape.back(),
                cacheRows = cache.shape[cache.shape.size() - 2],
                rows = update.shape[update.shape.size() - 2];
  cuda::cacheWrite(f32(cache), f32(update),
                   cacheRows * dim ? cache.elements / (cacheRows * dim) : 0,
                   cacheRows, rows, dim, i32(positions), positions.shape[0],
                   b.stream);
}

// Vocabulary-parallel: this rank's rows of the table (CollectiveLayout).
void embedding(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &table = d.operands[0], &ids = d.operands[1];
  if (table.dtype != plan::DType::F32) // a bf16 table: widened
    return b.runWidened(d);
  // A cached table (operand 2, the slot map): the block has the map's rows.
  const int32_t *slotMap = d.operands.size() > 2 ? i32(d.operands[2]) : nullptr;
  const int64_t rows = slotMap ? d.operands[2].shape[0] : table.shape[0];
  const VocabBlock block = vocabBlock(d, rows);
  cuda::embedding(f32(table), block.first, rows, table.shape[1], i32(ids),
                  ids.elements, slotMap, storageOf(d.results[0]),
                  d.results[0].data, b.stream);
}
void embeddingGrad(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &table = d.results[0], &ids = d.operands[1];
  const int32_t *slotMap = d.operands.size() > 2 ? i32(d.operands[2]) : nullptr;
  const int64_t rows = slotMap ? d.operands[2].shape[0] : table.shape[0];
  const VocabBlock block = vocabBlock(d, rows);
  cuda::embeddingGrad(f32(d.operands[0]), i32(ids), ids.elements, block.first,
                      rows, table.shape[1], slotMap, table.shape[0], f32(table),
                      b.stream);
}

#ifdef TPC_HAVE_NCCL
/// The vocabulary-parallel loss's scratch: per token a double (the row
/// losses), then this rank's statistics [tokens, 3] and every block's
/// [blocks, tokens, 3], all-gathered over the step's axes in block order
/// (as the CPU backend gathers them, and counted alike).
struct BlockStats {
  double *rowLoss;
  const float *gathered;
};
BlockStats gatheredBlockStats(CudaBackend &b, const Dispatch &d,
                              const VocabBlock &block, int64_t tokens,
                              int64_t columns) {
  const uint64_t statFloats = uint64_t(3 * tokens);
  auto *base = static_cast<std::byte *>(
      b.scratch(uint64_t(tokens) * sizeof(double) +
                statFloats * uint64_t(block.blocks + 1) * sizeof(float)));
  auto *rowLoss = reinterpret_cast<double *>(base);
  auto *local = reinterpret_cast<float *>(rowLoss + tokens);
  float *gathered = local + statFloats;
  cuda::crossEntropyBlockStats(f32(d.operands[0]), i32(d.operands[1]), tokens,
                               columns, block.first, local, b.stream);
  channelOf(d).allGather(groupAxes(d), WireType::F32, local, gathered,
                         size_t(statFloats));
  return {rowLoss, gathered};
}
#endif

void crossEntropy(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &logits = d.operands[0];
  const int64_t vocab = logits.shape.back();
  const int64_t tokens = vocab ? logits.elements / vocab : 0;
#ifdef TPC_HAVE_NCCL
  if (!d.ints().empty()) {
    const VocabBlock block = vocabBlock(d, vocab);
    const BlockStats stats = gatheredBlockStats(b, d, block, tokens, vocab);
    return cuda::crossEntropyFromBlockStats(stats.gathered, block.blocks,
                                            tokens, stats.rowLoss,
                                            f32(d.results[0]), b.stream);
  }
#endif
  auto *rows = static_cast<double *>(
      b.scratch(uint64_t(std::max<int64_t>(tokens, 1)) * sizeof(double)));
  cuda::crossEntropy(f32(logits), i32(d.operands[1]), tokens, vocab, rows,
                     f32(d.results[0]), b.stream);
}
void crossEntropyGrad(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
#ifdef TPC_HAVE_NCCL
  if (!d.ints().empty()) {
    // The loss step's statistics again, then the softmax of this rank's
    // columns.
    const int64_t columns = out.shape.back(), tokens = rowsOf(out);
    const VocabBlock block = vocabBlock(d, columns);
    const BlockStats stats = gatheredBlockStats(b, d, block, tokens, columns);
    return cuda::crossEntropyGradFromBlockStats(
        f32(d.operands[0]), i32(d.operands[1]), f32(d.operands[2]),
        stats.gathered, block.blocks, tokens, columns, block.first, f32(out),
        b.stream);
  }
#endif
  cuda::crossEntropyGrad(f32(d.operands[0]), i32(d.operands[1]),
                         f32(d.operands[2]), rowsOf(out), out.shape.back(),
                         f32(out), b.stream);
}

//===----------------------------------------------------------------------===//
// Products fused with what follows them: cuBLASLt's epilogues on the stored
// operands where it has an algorithm, else cuBLAS products and our epilogue
// kernels (the cpu backend's float operations), on f32 copies of bf16
// tensors.
//===----------------------------------------------------------------------===//

/// Row-major out[m, n] (row stride ldo) = op(lhs)[m, k] op(rhs)[k, n] +
/// beta out, f32 tensors with rows `ldl` and `ldr` apart (a column block of
/// a wider matrix), in the step's precision.
void gemm(CudaBackend &b, const Dispatch &d, int64_t m, int64_t n, int64_t k,
          const float *lhs, int64_t ldl, bool transposeLhs, const float *rhs,
          int64_t ldr, bool transposeRhs, float *out, int64_t ldo, float beta) {
  if (m == 0 || n == 0)
    return;
  const float alpha = 1.0f;
  const cublasComputeType_t compute =
      d.step.precision() == plan::Precision::TF32 && !d.bf16Products
          ? CUBLAS_COMPUTE_32F_FAST_TF32
          : CUBLAS_COMPUTE_32F;
  // Column-major out^T = op(rhs)^T op(lhs)^T: cuBLAS multiplies rhs by lhs.
  check(cublasGemmEx(b.blas, transposeRhs ? CUBLAS_OP_T : CUBLAS_OP_N,
                     transposeLhs ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m),
                     int(k), &alpha, rhs, CUDA_R_32F, int(ldr), lhs, CUDA_R_32F,
                     int(ldl), &beta, out, CUDA_R_32F, int(ldo), compute,
                     CUBLAS_GEMM_DEFAULT),
        "gemm");
}

/// A fused product's lhs [b..., M, K] as rows x K, and its n for a 2-D rhs.
struct ProductSizes {
  int64_t rows, k, n;
  ProductSizes(const TensorBinding &lhs, const TensorBinding &rhs,
               bool transposeRhs)
      : rows(lhs.shape.back() ? lhs.elements / lhs.shape.back() : 0),
        k(lhs.shape.back()), n(rhs.shape[transposeRhs ? 0 : 1]) {}
};

/// out [rows, n] += bias [n], broadcast over the rows (in place).
void addBias(CudaBackend &b, const TensorBinding &out, const float *bias) {
  cuda::Indexing index = indexing(out.shape);
  const std::vector<int64_t> strides = stridesOf(out.shape);
  for (size_t i = 0; i < strides.size(); ++i)
    index.stride[i] = strides[i];
  index.stride2[out.shape.size() - 1] = 1; // the bias: the last dim only
  cuda::binary(cuda::Binary::Add, f32(out), bias, f32(out), out.elements, index,
               b.stream);
}

/// The row-major product of a fused linear's input [b..., M, K] and 2-D
/// weight, on the tensors' stored types; nullopt when cuBLASLt cannot take
/// them as they are (operands of two types, or f32 ones rounded to bf16).
std::optional<device::RowMajorProduct> fusedProduct(const Dispatch &d,
                                                    const TensorBinding &out) {
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1];
  if (lhs.dtype != rhs.dtype ||
      (lhs.dtype == plan::DType::F32 &&
       d.step.precision() == plan::Precision::BF16 && !d.bf16Products))
    return std::nullopt;
  const bool tr = d.step.transpose_rhs();
  const ProductSizes s(lhs, rhs, tr);
  device::RowMajorProduct p;
  p.m = s.rows;
  p.n = s.n;
  p.k = s.k;
  p.transposeRhs = tr;
  p.ldLhs = s.k;
  p.ldRhs = tr ? s.k : s.n;
  p.ldOut = s.n;
  p.ldAux = s.n;
  p.inType = lhs.dtype;
  p.outType = out.dtype;
  p.tf32 = d.step.precision() == plan::Precision::TF32 &&
           lhs.dtype == plan::DType::F32 && !d.bf16Products;
  return p;
}

/// Linear through one cuBLASLt product with its bias (and GELU) epilogue.
bool linearLt(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &out = d.results[0], &bias = d.operands[2];
  std::optional<device::RowMajorProduct> p = fusedProduct(d, out);
  const bool keepsPreactivation = d.results.size() == 2;
  if (!p || (keepsPreactivation && d.results[1].dtype != out.dtype))
    return false;
  p->epilogue = !d.step.gelu()       ? device::Epilogue::Bias
                : keepsPreactivation ? device::Epilogue::BiasGeluAux
                                     : device::Epilogue::BiasGelu;
  p->biasType = bias.dtype;
  return b.runLt(*p,
                 {d.operands[0].data, d.operands[1].data, out.data, bias.data,
                  keepsPreactivation ? d.results[1].data : nullptr});
}

void linear(CudaBackend &b, const Dispatch &d) {
  if (linearLt(b, d))
    return;
  if (CudaBackend::hasBf16(d))
    return b.runWidened(d);
  const TensorBinding &in = d.operands[0], &w = d.operands[1];
  const bool tr = d.step.transpose_rhs();
  // The preactivation is the result when it is not returned (GELU in place).
  const TensorBinding &pre = d.results.back();
  const ProductSizes s(in, w, tr);
  gemm(b, d, s.rows, s.n, s.k, f32(in), s.k, false, f32(w), tr ? s.k : s.n, tr,
       f32(pre), s.n, 0.0f);
  addBias(b, pre, f32(d.operands[2]));
  if (d.step.gelu())
    cuda::gelu(f32(pre), f32(d.results[0]), d.results[0].elements, b.stream);
}

/// The bias gradient of LinearGeluGrad from dz as stored ([rows, n], f32 or
/// bf16): summed in f32 in a fixed order, rounded once when it is bf16, as
/// the CPU backend defines it.
void sumStoredBiasGrad(CudaBackend &b, const TensorBinding &dz,
                       const TensorBinding &db) {
  const int64_t n = dz.shape.back(), rows = n ? dz.elements / n : 0;
  const int64_t chunks = cuda::rowSumChunks(rows);
  const bool narrow = db.dtype == plan::DType::BF16;
  auto *partials = static_cast<float *>(
      b.scratch(uint64_t(chunks * n + (narrow ? n : 0)) * sizeof(float)));
  float *sum = narrow ? partials + chunks * n : f32(db);
  cuda::sumRows(dz.data, dz.dtype == plan::DType::BF16, rows, n, partials, sum,
                b.stream);
  if (narrow)
    cuda::toBf16(sum, reinterpret_cast<uint16_t *>(db.data), n, b.stream);
}

/// LinearGeluGrad through one cuBLASLt product with its DGELU epilogue; the
/// bias gradient from the epilogue when dz and it are f32, else summed from
/// the stored dz (cuBLASLt's bf16 bias-gradient epilogue sums values it has
/// not rounded, which the CPU's definition does not).
bool linearGeluGradLt(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &dz = d.results[0], &db = d.results[1],
                      &pre = d.operands[2];
  std::optional<device::RowMajorProduct> p = fusedProduct(d, dz);
  if (!p || pre.dtype != dz.dtype)
    return false;
  const bool epilogueSums =
      dz.dtype == plan::DType::F32 && db.dtype == plan::DType::F32;
  p->epilogue = epilogueSums ? device::Epilogue::GeluGradBiasGrad
                             : device::Epilogue::GeluGrad;
  p->biasType = db.dtype;
  if (!b.runLt(*p, {d.operands[0].data, d.operands[1].data, dz.data,
                    epilogueSums ? db.data : nullptr, pre.data}))
    return false;
  if (!epilogueSums)
    sumStoredBiasGrad(b, dz, db);
  return true;
}

void linearGeluGrad(CudaBackend &b, const Dispatch &d) {
  if (linearGeluGradLt(b, d))
    return;
  if (CudaBackend::hasBf16(d)) {
    b.runWidened(d);
    if (d.results[0].dtype == plan::DType::BF16)
      sumStoredBiasGrad(b, d.results[0], d.results[1]);
    return;
  }
  const TensorBinding &lhs = d.operands[0], &rhs = d.operands[1],
                      &dz = d.results[0], &db = d.results[1];
  const bool tr = d.step.transpose_rhs();
  const ProductSizes s(lhs, rhs, tr);
  gemm(b, d, s.rows, s.n, s.k, f32(lhs), s.k, false, f32(rhs), tr ? s.k : s.n,
       tr, f32(dz), s.n, 0.0f);
  cuda::geluGrad(f32(dz), f32(d.operands[2]), f32(dz), dz.elements, b.stream);
  // The sum over the rows: [rows] reduced, [n] kept.
  const std::vector<int64_t> kept = {s.n}, reduced = {s.rows};
  cuda::Indexing index = indexing(kept), inner = indexing(reduced);
  index.stride[0] = 1;
  inner.stride[0] = s.n;
  cuda::reduce(f32(dz), f32(db), db.elements, index, inner, false, b.stream);
}

/// A chunked vocabulary head on the device (the cpu backend's ChunkedHead):
/// chunk c's logits from the weight's rows or columns in place (a column
/// block is a strided matrix), statistics merged per rank, then gathered.
/// With bf16 input and weight (bf16 storage) the products run on them
/// through cuBLASLt (bf16 in, f32 out); `native` is then false where
/// cuBLASLt has no algorithm, and the caller runs the step widened.
struct DeviceHead {
  DeviceHead(CudaBackend &b, const Dispatch &d)
      : b(b), d(d), tr(d.step.transpose_rhs()),
        bf16(d.operands[0].dtype == plan::DType::BF16 &&
             d.operands[1].dtype == plan::DType::BF16),
        rounds(bf16 || d.bf16Products), hidden(d.operands[0].shape.back()),
        tokens(hidden ? d.operands[0].elements / hidden : 0),
        vocab(d.operands[1].shape[tr ? 0 : 1]),
        chunk(std::min<int64_t>(d.step.chunk(), std::max<int64_t>(vocab, 1))),
        block(vocabBlock(d, vocab)) {
    const int64_t chunks = (vocab + chunk - 1) / chunk;
    const bool grad = d.step.kind() == OpKind::LinearCrossEntropyGrad;
    // Each piece 256-byte aligned (cuBLASLt's preferred alignment).
    auto bytes = [](uint64_t n) { return (n + 255) / 256 * 256; };
    const uint64_t rowLossBytes =
                       bytes(uint64_t(std::max<int64_t>(tokens, 1)) * 8),
                   logitsBytes = bytes(uint64_t(tokens * chunk) * 4),
                   chunkStatBytes = bytes(uint64_t(3 * tokens * chunks) * 4),
                   statBytes = bytes(uint64_t(3 * tokens) * 4),
                   gatheredBytes =
                       bytes(uint64_t(3 * tokens * block.blocks) * 4),
                   gradBf16Bytes =
                       bf16 && grad ? bytes(uint64_t(tokens * chunk) * 2) : 0,
                   accumulatorBytes =
                       bf16 && grad && d.results[0].dtype == plan::DType::BF16
                           ? bytes(uint64_t(tokens * hidden) * 4)
                           : 0;
    auto *base = static_cast<std::byte *>(
        b.scratch(rowLossBytes + logitsBytes + chunkStatBytes + statBytes +
                  gatheredBytes + gradBf16Bytes + accumulatorBytes));
    rowLoss = reinterpret_cast<double *>(base);
    base += rowLossBytes;
    logits = reinterpret_cast<float *>(base);
    base += logitsBytes;
    chunkStats = reinterpret_cast<float *>(base);
    base += chunkStatBytes;
    stats = reinterpret_cast<float *>(base);
    base += statBytes;
    gathered = reinterpret_cast<float *>(base);
    base += gatheredBytes;
    gradBf16 = gradBf16Bytes ? reinterpret_cast<uint16_t *>(base) : nullptr;
    base += gradBf16Bytes;
    accumulator = accumulatorBytes ? reinterpret_cast<float *>(base) : nullptr;
  }
  int64_t chunks() const { return (vocab + chunk - 1) / chunk; }
  int64_t width(int64_t c) const { return std::min(chunk, vocab - c * chunk); }
  /// Chunk c's weight: its rows (transposed) or column block.
  int64_t weightOffset(int64_t c) const {
    return tr ? c * chunk * hidden : c * chunk;
  }
  const float *weightAt(int64_t c) const {
    return f32(d.operands[1]) + weightOffset(c);
  }
  int64_t weightStride() const { return tr ? hidden : vocab; }
  /// A bf16 product through cuBLASLt: out[m, n] (+)= op(lhs) op(rhs).
  bool product(int64_t m, int64_t n, int64_t k, const void *lhs, int64_t ldl,
               bool transposeLhs, const void *rhs, int64_t ldr,
               bool transposeRhs, void *out, plan::DType outType, int64_t ldo,
               bool accumulate) {
    device::RowMajorProduct p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.transposeLhs = transposeLhs;
    p.transposeRhs = transposeRhs;
    p.ldLhs = ldl;
    p.ldRhs = ldr;
    p.ldOut = ldo;
    p.inType = plan::DType::BF16;
    p.outType = outType;
    p.accumulate = accumulate;
    return b.runLt(p, {lhs, rhs, out});
  }
  /// Chunk c's logits into `logits` (rounded to bf16 as stored bf16 logits
  /// would be); false where cuBLASLt has no algorithm for a bf16 product.
  bool computeLogits(int64_t c) {
    if (bf16) {
      if (!product(tokens, width(c), hidden, d.operands[0].data, hidden, false,
                   d.operands[1].bf16() + weightOffset(c), weightStride(), tr,
                   logits, plan::DType::F32, width(c), false))
        return false;
    } else {
      gemm(b, d, tokens, width(c), hidden, f32(d.operands[0]), hidden, false,
           weightAt(c), weightStride(), tr, logits, width(c), 0.0f);
    }
    if (rounds)
      cuda::roundBf16(logits, tokens * width(c), b.stream);
    return true;
  }
  /// Every token's statistics over this rank's columns, merged over the
  /// chunks and gathered over the step's vocabulary axes ([blocks, tokens,
  /// 3] in block order, as the unfused cross-entropy gathers them); null
  /// where a bf16 product has no cuBLASLt algorithm.
  const float *gatheredStats() {
    for (int64_t c = 0; c < chunks(); ++c) {
      if (!computeLogits(c))
        return nullptr;
      cuda::crossEntropyBlockStats(logits, i32(d.operands[2]), tokens, width(c),
                                   block.first + c * chunk,
                                   chunkStats + 3 * tokens * c, b.stream);
    }
    cuda::mergeCrossEntropyStats(chunkStats, chunks(), tokens, stats, b.stream);
    if (d.ints().empty())
      return stats;
#ifdef TPC_HAVE_NCCL
    channelOf(d).allGather(groupAxes(d), WireType::F32, stats, gathered,
                           size_t(3 * tokens));
    return gathered;
#else
    throw std::logic_error("cuda: a vocabulary-parallel head runs staged");
#endif
  }

  CudaBackend &b;
  const Dispatch &d;
  const bool tr, bf16, rounds;
  const int64_t hidden, tokens, vocab, chunk;
  const VocabBlock block;
  double *rowLoss;
  float *logits, *chunkStats, *stats, *gathered;
  /// bf16 storage: a chunk's logits gradient in bf16, and the f32 sum of
  /// a bf16 input gradient over the chunks (rounded once at the end).
  uint16_t *gradBf16;
  float *accumulator;
};

/// Whether a head step's tensors suit DeviceHead as they are: all f32, or
/// bf16 input and weight (their products through cuBLASLt).
bool headTakesStoredTypes(const Dispatch &d) {
  return !CudaBackend::hasBf16(d) ||
         (d.operands[0].dtype == plan::DType::BF16 &&
          d.operands[1].dtype == plan::DType::BF16);
}

void linearCrossEntropy(CudaBackend &b, const Dispatch &d) {
  if (!headTakesStoredTypes(d))
    return b.runWidened(d);
  DeviceHead head(b, d);
  const float *stats = head.gatheredStats();
  if (!stats)
    return b.runWidened(d);
  cuda::crossEntropyFromBlockStats(stats, head.block.blocks, head.tokens,
                                   head.rowLoss, f32(d.results[0]), b.stream);
}

/// The gradient's products for chunk c on bf16 storage: input_grad (f32
/// sum) += grad op(weight)^T, and chunk c of weight_grad; false where
/// cuBLASLt has no algorithm.
bool headGradProductsBf16(DeviceHead &head, int64_t c, void *inputGradF32) {
  const Dispatch &d = head.d;
  const TensorBinding &weightGrad = d.results[1];
  const int64_t h = head.hidden, t = head.tokens, w = head.width(c);
  cuda::toBf16(head.logits, head.gradBf16, t * w, head.b.stream);
  if (!head.product(t, h, w, head.gradBf16, w, false,
                    d.operands[1].bf16() + head.weightOffset(c),
                    head.weightStride(), !head.tr, inputGradF32,
                    plan::DType::F32, h, c > 0))
    return false;
  const size_t gradBytes = dtypeSize(weightGrad.dtype);
  if (head.tr) // rows of weight_grad [vocab, hidden]: grad^T input
    return head.product(
        w, h, t, head.gradBf16, w, true, d.operands[0].data, h, false,
        weightGrad.data + size_t(c * head.chunk * h) * gradBytes,
        weightGrad.dtype, h, false);
  // a column block of weight_grad [hidden, vocab]: input^T grad
  return head.product(h, w, t, d.operands[0].data, h, true, head.gradBf16, w,
                      false,
                      weightGrad.data + size_t(c * head.chunk) * gradBytes,
                      weightGrad.dtype, head.vocab, false);
}

void linearCrossEntropyGrad(CudaBackend &b, const Dispatch &d) {
  if (!headTakesStoredTypes(d))
    return b.runWidened(d);
  DeviceHead head(b, d);
  const float *stats = head.gatheredStats();
  if (!stats)
    return b.runWidened(d);
  const TensorBinding &inputGrad = d.results[0], &weightGrad = d.results[1];
  const int64_t h = head.hidden, t = head.tokens;
  float *inputGradF32 = head.accumulator ? head.accumulator : f32(inputGrad);
  for (int64_t c = 0; c < head.chunks(); ++c) {
    const int64_t w = head.width(c);
    if (!head.computeLogits(c))
      return b.runWidened(d);
    cuda::crossEntropyGradFromBlockStats(
        head.logits, i32(d.operands[2]), f32(d.operands[3]), stats,
        head.block.blocks, t, w, head.block.first + c * head.chunk, head.logits,
        b.stream);
    if (head.rounds) // as a stored bf16 logits gradient would be
      cuda::roundBf16(head.logits, t * w, b.stream);
    if (head.bf16) {
      if (!headGradProductsBf16(head, c, inputGradF32))
        return b.runWidened(d);
      continue;
    }
    // input_grad (+)= grad op(weight)^T
    gemm(b, d, t, h, w, head.logits, w, false, head.weightAt(c),
         head.weightStride(), !head.tr, f32(inputGrad), h,
         c == 0 ? 0.0f : 1.0f);
    const float *input = f32(d.operands[0]);
    if (head.tr) // rows of weight_grad [vocab, hidden]: grad^T input
      gemm(b, d, w, h, t, head.logits, w, true, input, h, false,
           f32(weightGrad) + c * head.chunk * h, h, 0.0f);
    else // a column block of weight_grad [hidden, vocab]: input^T grad
      gemm(b, d, h, w, t, input, h, true, head.logits, w, false,
           f32(weightGrad) + c * head.chunk, head.vocab, 0.0f);
  }
  if (head.accumulator) // the bf16 input gradient, rounded once
    cuda::toBf16(head.accumulator, inputGrad.bf16(), t * h, b.stream);
}

void normSquared(CudaBackend &b, const Dispatch &d) {
  auto *partial =
      static_cast<double *>(b.scratch(cuda::kNormPartials * sizeof(double)));
  cuda::normSquared(f32(d.operands[0]), d.operands[0].elements, partial,
                    f32(d.results[0]), b.stream);
}
void lrSchedule(CudaBackend &b, const Dispatch &d) {
  cuda::learningRate(i64(d.operands[0]), f32(d.operands[1]), f32(d.results[0]),
                     b.stream);
}
void clipScale(CudaBackend &b, const Dispatch &d) {
  cuda::clipScale(f32(d.operands[0]), f32(d.operands[1]), f32(d.results[0]),
                  b.stream);
}
void normSquaredRows(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &rows = d.operands[1];
  auto *perRow = static_cast<double *>(b.scratch(
      uint64_t(std::max<int64_t>(rows.elements, 1)) * sizeof(double)));
  cuda::normSquaredRows(f32(d.operands[0]), i32(rows), rows.elements,
                        d.operands[0].rowElements(), perRow, f32(d.results[0]),
                        b.stream);
}
/// In place: the rows not listed keep their values (the results alias the
/// parameter and moments, ResultPlacement::UpdateInPlace).
void adamwRows(CudaBackend &b, const Dispatch &d) {
  const auto &in = d.operands;
  const plan::Step &s = d.step;
  const cuda::AdamWTensor t{f32(in[0]),
                            f32(in[1]),
                            f32(in[2]),
                            f32(in[3]),
                            f32(in[5]),
                            i64(in[6]),
                            f32(in[7]),
                            f32(d.results[0]),
                            f32(d.results[1]),
                            f32(d.results[2]),
                            d.results[0].elements,
                            s.beta1(),
                            s.beta2(),
                            s.epsilon(),
                            s.weight_decay()};
  cuda::adamwRows(t, i32(in[4]), in[4].elements, in[0].rowElements(), b.stream);
}
/// Queued, not launched: consecutive AdamW steps (a train step's last
/// stretch) go out as one multi-tensor launch when the next other step,
/// a synchronisation, a copy or the end of a recording comes.
void adamw(CudaBackend &b, const Dispatch &d) {
  const auto &in = d.operands;
  const plan::Step &s = d.step;
  b.pendingAdamW.push_back({f32(in[0]), f32(in[1]), f32(in[2]), f32(in[3]),
                            f32(in[4]), i64(in[5]), f32(in[6]),
                            f32(d.results[0]), f32(d.results[1]),
                            f32(d.results[2]), d.results[0].elements, s.beta1(),
                            s.beta2(), s.epsilon(), s.weight_decay()});
}

//===----------------------------------------------------------------------===//
// Steps that read their place in the grid: slices and inserts at the block
// the CPU backend's kernels compute (cpu/CpuBackend.cpp)
//===----------------------------------------------------------------------===//

void localSplit(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  sliceAt(b, in, groupBlockOffsets(d, in.shape, out.shape[d.step.dim()]), out);
}

void ringSlice(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  sliceAt(b, in,
          groupBlockOffsets(d, in.shape, out.shape[d.step.dim()],
                            d.step.ring_step()),
          out);
}

void ringInsert(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &block = d.operands[1], &out = d.results[0];
  copyIfMoved(b, d.operands[0], out);
  insertAt(b, block,
           groupBlockOffsets(d, out.shape, block.shape[d.step.dim()],
                             d.step.ring_step()),
           out);
}

#ifdef TPC_HAVE_NCCL
//===----------------------------------------------------------------------===//
// Collectives over NCCL (one rank per GPU), with the CPU backend's block
// orders: group rank k holds block k of the split dimension
//===----------------------------------------------------------------------===//

void allReduce(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  copyIfMoved(b, in, out);
  channelOf(d).allReduceSum(groupAxes(d), WireType::F32, out.data,
                            size_t(out.elements));
}

void allGather(CudaBackend &b, const Dispatch &d) {
  // Gathered as [n, outer, s, inner]; the result is [outer, n, s, inner].
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  const std::vector<int> axes = groupAxes(d);
  const int64_t n = commOf(d).group(axes).size;
  auto [outer, size, inner] = around(in.shape, d.step.dim());
  auto *gathered = static_cast<float *>(
      b.scratch(uint64_t(std::max<int64_t>(out.elements, 1)) * sizeof(float)));
  channelOf(d).allGather(axes, WireType::F32, in.data, gathered,
                         size_t(in.elements));
  const std::vector<int64_t> view = {n, outer, size, inner};
  permute(b, cuda::Storage::F32, gathered, view, kSwap01, f32(out));
}

void reduceScatter(CudaBackend &b, const Dispatch &d) {
  // The input [outer, n, s, inner] as [n, outer, s, inner] blocks.
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  const std::vector<int> axes = groupAxes(d);
  const int64_t n = commOf(d).group(axes).size;
  auto [outer, size, inner] = around(in.shape, d.step.dim());
  auto *blocks = static_cast<float *>(
      b.scratch(uint64_t(std::max<int64_t>(in.elements, 1)) * sizeof(float)));
  const std::vector<int64_t> view = {outer, n, size / n, inner};
  permute(b, cuda::Storage::F32, f32(in), view, kSwap01, blocks);
  channelOf(d).reduceScatterSum(axes, WireType::F32, blocks, out.data,
                                size_t(out.elements));
}

void allToAll(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  const std::vector<int> axes = groupAxes(d);
  const int64_t n = commOf(d).group(axes).size;
  const AllToAllLayout layout =
      allToAllLayout(in.shape, n, d.step.dim(), d.step.target_dim());
  auto *send = static_cast<float *>(b.scratch(
      uint64_t(std::max<int64_t>(2 * in.elements, 1)) * sizeof(float)));
  float *received = send + in.elements;
  permute(b, cuda::Storage::F32, f32(in), layout.chunked, layout.toFront, send);
  channelOf(d).allToAll(axes, WireType::F32, send, received,
                        size_t(in.elements));
  permute(b, cuda::Storage::F32, received, layout.received, layout.fromFront,
          f32(out));
}

/// A ring step overlapping the GEMMs queued before its wait (NcclChannel).
void ringShiftStart(CudaBackend &, const Dispatch &d) {
  const TensorBinding &in = d.operands[0], &out = d.results[0];
  if (in.elements != out.elements)
    throw std::invalid_argument("ring shift: the blocks differ in size");
  channelOf(d).startShift(groupAxes(d), WireType::F32, in.data, out.data,
                          size_t(in.elements));
}

void ringShiftWait(CudaBackend &b, const Dispatch &d) {
  const TensorBinding &received = d.operands[0], &out = d.results[0];
  channelOf(d).finishShift(received.data);
  copyIfMoved(b, received, out);
}

/// Pipeline transfers move a tensor's bytes as stored (f32 or bf16).
WireType wireTypeOf(const TensorBinding &t) {
  return t.dtype == plan::DType::BF16 ? WireType::BF16 : WireType::F32;
}

void sendStart(CudaBackend &, const Dispatch &d) {
  const TensorBinding &in = d.operands[0];
  channelOf(d).startSend(int(d.ints()[0]), d.step.peer(), int(d.step.tag()),
                         wireTypeOf(in), in.data, size_t(in.elements));
}

void recvStart(CudaBackend &, const Dispatch &d) {
  const TensorBinding &out = d.results[0];
  channelOf(d).startReceive(int(d.ints()[0]), d.step.peer(), int(d.step.tag()),
                            wireTypeOf(out), out.data, size_t(out.elements));
}

/// SendWait (the sent tensor) and RecvWait (received -> its result).
void transferWait(CudaBackend &b, const Dispatch &d) {
  channelOf(d).finishTransfer(d.operands[0].data);
  if (!d.results.empty())
    copyIfMoved(b, d.operands[0], d.results[0]);
}
#endif

/// Steps that use the grid are staged (runsNatively): never enqueued.
void stagedOnly(CudaBackend &, const Dispatch &d) {
  throw std::logic_error(std::string("cuda: ") + opKindName(d.step.kind()) +
                         " runs staged, not on the device");
}

/// Whether this build talks NCCL (its collectives then have kernels).
constexpr bool hasNcclSupport() {
#ifdef TPC_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

/// The kinds whose kernels take bf16 tensors themselves: products on the
/// tensor cores (bf16 in, bf16 or f32 out) with their epilogues, cuDNN's
/// attention, elementwise kinds (16-byte loads), moves, reductions, norms
/// (not feature-split), rotary and embedding lookups on their tensors'
/// storage, conversions and copies. The rest (embedding gradients, the
/// unfused loss, KV-cache writes, collectives) run widened; so does a kind
/// here whose tensors' types its kernel does not take.
constexpr OpKind kBf16NativeKinds[] = {
    OpKind::SendStart,
    OpKind::SendWait,
    OpKind::RecvStart,
    OpKind::RecvWait,
    OpKind::Matmul,
    OpKind::Convert,
    OpKind::Reshape,
    OpKind::Linear,
    OpKind::LinearGeluGrad,
    OpKind::Attention,
    OpKind::AttentionGrad,
    OpKind::LinearCrossEntropy,
    OpKind::LinearCrossEntropyGrad,
    OpKind::Add,
    OpKind::Sub,
    OpKind::Mul,
    OpKind::Div,
    OpKind::Scale,
    OpKind::Gelu,
    OpKind::Silu,
    OpKind::GeluGrad,
    OpKind::SiluGrad,
    OpKind::Relu,
    OpKind::ReluGrad,
    OpKind::Swiglu,
    OpKind::SwigluGrad,
    OpKind::Transpose,
    OpKind::Slice,
    OpKind::Pad,
    OpKind::ReduceSum,
    OpKind::ReduceMean,
    OpKind::LocalSplit,
    OpKind::RingSlice,
    OpKind::RingInsert,
    OpKind::LayerNorm,
    OpKind::RmsNorm,
    OpKind::LayerNormGrad,
    OpKind::RmsNormGrad,
    OpKind::AddLayerNorm,
    OpKind::AddRmsNorm,
    OpKind::Rotary,
    OpKind::Embedding,
};

/// The CUDA backend's kernels, from this one list (no device needed: the
/// unit test checks it against the op table on any machine).
void addCudaKernels(KernelRegistry<CudaKernel> &k) {
  auto set = [&](OpKind kind, CudaKernel kernel) { k.add(kind, kernel); };
  set(OpKind::Embedding, embedding);
  set(OpKind::EmbeddingGrad, embeddingGrad);
  set(OpKind::Matmul, matmul);
  set(OpKind::Add, binary<cuda::Binary::Add>);
  set(OpKind::Sub, binary<cuda::Binary::Sub>);
  set(OpKind::Mul, binary<cuda::Binary::Mul>);
  set(OpKind::Div, binary<cuda::Binary::Div>);
  set(OpKind::Scale, scale);
  set(OpKind::Gelu, gelu);
  set(OpKind::Silu, silu);
  set(OpKind::GeluGrad, geluGrad);
  set(OpKind::SiluGrad, siluGrad);
  set(OpKind::LayerNorm, normStep<true>);
  set(OpKind::LayerNormGrad, normGrad<true>);
  set(OpKind::RmsNorm, normStep<false>);
  set(OpKind::RmsNormGrad, normGrad<false>);
  set(OpKind::Swiglu, swiglu);
  set(OpKind::SwigluGrad, swigluGrad);
  set(OpKind::AddLayerNorm, addNorm<true>);
  set(OpKind::AddRmsNorm, addNorm<false>);
  set(OpKind::Linear, linear);
  set(OpKind::LinearGeluGrad, linearGeluGrad);
  set(OpKind::LinearCrossEntropy, linearCrossEntropy);
  set(OpKind::LinearCrossEntropyGrad, linearCrossEntropyGrad);
  set(OpKind::Softmax, softmax);
  set(OpKind::SoftmaxGrad, softmaxGrad);
  set(OpKind::Attention, attention);
  set(OpKind::AttentionGrad, attentionGrad);
  set(OpKind::Rotary, rotary);
  set(OpKind::CacheWrite, cacheWrite);
  set(OpKind::Reshape, reshape);
  set(OpKind::Transpose, transpose);
  set(OpKind::Slice, slice);
  set(OpKind::ReduceSum, reduce<false>);
  set(OpKind::ReduceMean, reduce<true>);
  set(OpKind::CrossEntropy, crossEntropy);
  set(OpKind::CrossEntropyGrad, crossEntropyGrad);
  set(OpKind::AdamW, adamw);
  set(OpKind::Constant, constant);
  set(OpKind::Pad, pad);
  set(OpKind::NormSquared, normSquared);
  set(OpKind::NormSquaredRows, normSquaredRows);
  set(OpKind::AdamWRows, adamwRows);
  set(OpKind::Relu, relu);
  set(OpKind::ReluGrad, reluGrad);
  set(OpKind::LrSchedule, lrSchedule);
  set(OpKind::ClipScale, clipScale);
  set(OpKind::LocalSplit, localSplit);
  set(OpKind::RingSlice, ringSlice);
  set(OpKind::RingInsert, ringInsert);
  set(OpKind::Convert, convert);
#ifdef TPC_HAVE_NCCL
  set(OpKind::AllReduce, allReduce);
  set(OpKind::AllGather, allGather);
  set(OpKind::ReduceScatter, reduceScatter);
  set(OpKind::AllToAll, allToAll);
  set(OpKind::RingShiftStart, ringShiftStart);
  set(OpKind::RingShiftWait, ringShiftWait);
  set(OpKind::SendStart, sendStart);
  set(OpKind::SendWait, transferWait);
  set(OpKind::RecvStart, recvStart);
  set(OpKind::RecvWait, transferWait);
#endif
}

/// Kinds that need a device kernel: all but those that exchange data, and
/// those too with NCCL.
/// The kinds that exchange data over NCCL when every rank has a GPU
/// (pipeline transfers only where the plan's order allows, ProgramRunner).
constexpr std::array kNcclExchangeKinds = {OpKind::AllReduce,
                                           OpKind::AllGather,
                                           OpKind::ReduceScatter,
                                           OpKind::AllToAll,
                                           OpKind::RingShiftStart,
                                           OpKind::RingShiftWait,
                                           OpKind::SendStart,
                                           OpKind::SendWait,
                                           OpKind::RecvStart,
                                           OpKind::RecvWait,
                                           OpKind::CrossEntropy,
                                           OpKind::CrossEntropyGrad,
                                           OpKind::LayerNorm,
                                           OpKind::LayerNormGrad,
                                           OpKind::RmsNorm,
                                           OpKind::RmsNormGrad,
                                           OpKind::AddLayerNorm,
                                           OpKind::AddRmsNorm,
                                           OpKind::LinearCrossEntropy,
                                           OpKind::LinearCrossEntropyGrad};

bool needsCudaKernel(const OpInfo &info) {
  return info.grid != GridUse::Always ||
         (hasNcclSupport() &&
          std::find(kNcclExchangeKinds.begin(), kNcclExchangeKinds.end(),
                    info.kind) != kNcclExchangeKinds.end());
}

DeviceDescription CudaBackend::describeDevice() const {
  int ordinal = 0, count = 0;
  check(cudaGetDevice(&ordinal), "querying the GPU");
  check(cudaGetDeviceCount(&count), "counting GPUs");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, ordinal), "querying the GPU");
  return {properties.name, uint64_t(properties.totalGlobalMem), count, 0};
}

CudaBackend::CudaBackend(int ordinal, int localRank) : localRank(localRank) {
  check(cudaSetDevice(ordinal), "selecting the GPU");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "creating a stream");
  check(cublasCreate(&blas), "creating a handle");
  check(cublasSetStream(blas, stream), "setting the stream");
  // cuBLAS may not allocate while a step is being recorded: it gets its
  // workspace up front (32 MiB, what it asks for on Hopper).
  blasWorkspace = std::make_unique<DeviceBuffer>(kBlasWorkspaceBytes, usage);
  check(cublasSetWorkspace(blas, blasWorkspace->data(), kBlasWorkspaceBytes),
        "setting the workspace");
  // cuBLASLt shares the workspace: both run in this stream's order.
  if (const char *wanted = std::getenv("TPC_CUBLASLT");
      !wanted || std::string(wanted) != "0")
    lt = std::make_unique<cuda::BlasLt>(blasWorkspace->data(),
                                        kBlasWorkspaceBytes);
  // Each product's compute type follows its step's precision (f32 unless
  // the plan asks for TF32 or bf16).
  KernelRegistry<CudaKernel> registry("cuda");
  addCudaKernels(registry);
  // Every kind that exchanges no data has a device kernel (and, with NCCL,
  // every collective); the others run staged over MPI.
  registry.checkComplete(needsCudaKernel);
  for (const OpInfo &info : opTable())
    kernels[size_t(info.kind)] =
        registry.has(info.kind) ? registry[info.kind] : stagedOnly;
  for (OpKind kind : kBf16NativeKinds)
    bf16Kernels[size_t(kind)] = true;
#ifdef TPC_HAVE_CUDNN
  attentionLibrary = cuda::CudnnAttention::probe(ordinal);
  if (device::whyNoCudnnAttention(attentionLibrary).empty())
    cudnn = std::make_unique<cuda::CudnnAttention>(
        stream, attentionLibrary.computeCapability);
#endif
#ifdef TPC_HAVE_NCCL
  for (OpKind kind : kNcclExchangeKinds)
    exchangesOverNccl[size_t(kind)] = true;
#endif
}

std::string CudaBackend::kernelLibraries() const {
  std::string products =
      lt ? lt->description() +
               " (bias, GELU and GELU-gradient epilogues), cuBLAS otherwise"
         : "cuBLAS (TPC_CUBLASLT=0)";
  std::string attention;
  if (std::string why = device::whyNoCudnnAttention(attentionLibrary);
      !why.empty())
    attention = "tpc's kernels (" + why + ")";
  else
    attention = "cuDNN " + std::to_string(attentionLibrary.version) +
                " fused flash attention for bf16, tpc's kernels for f32 and "
                "KV-cache steps";
  return "products: " + products + "; attention: " + attention;
}

void CudaBackend::runWidened(const Dispatch &d) {
  std::array<TensorBinding, kMaxStepOperands> operands;
  std::array<TensorBinding, kMaxStepResults> results;
  // 256-byte aligned slots for every bf16 tensor's f32 copy.
  auto slot = [](const TensorBinding &t) {
    return (uint64_t(t.elements) * sizeof(float) + 255) / 256 * 256;
  };
  uint64_t bytes = 0;
  for (const TensorBinding &t : d.operands)
    bytes += t.dtype == plan::DType::BF16 ? slot(t) : 0;
  for (const TensorBinding &t : d.results)
    bytes += t.dtype == plan::DType::BF16 ? slot(t) : 0;
  if (!widened || widened->size() < bytes) {
    synchronize(); // a queued kernel may still read the old copies
    widened.reset();
    widened =
        std::make_unique<DeviceBuffer>(std::max<uint64_t>(bytes, 256), usage);
  }
  std::byte *next = widened->data();
  auto copyOf = [&](const TensorBinding &t) {
    TensorBinding copy{next, t.shape, t.elements, plan::DType::F32};
    next += slot(t);
    return copy;
  };
  bool bf16Operands = d.bf16Products;
  for (size_t i = 0; i < d.operands.size(); ++i) {
    operands[i] = d.operands[i];
    if (d.operands[i].dtype == plan::DType::BF16) {
      operands[i] = copyOf(d.operands[i]);
      cuda::fromBf16(d.operands[i].bf16(), f32(operands[i]),
                     operands[i].elements, stream);
      bf16Operands = true;
    }
  }
  // A result that updates its bf16 operand in place (a KV cache write)
  // starts from that operand's copy.
  const OpInfo &info = *findOpInfo(d.step.kind());
  for (size_t i = 0; i < d.results.size(); ++i) {
    results[i] = d.results[i];
    if (d.results[i].dtype != plan::DType::BF16)
      continue;
    if (info.placement == ResultPlacement::UpdateInPlace &&
        d.operands[info.updatedOperand[i]].data == d.results[i].data)
      results[i] = operands[info.updatedOperand[i]];
    else
      results[i] = copyOf(d.results[i]);
  }
  kernels[size_t(d.step.kind())](*this, {d.step,
                                         {operands.data(), d.operands.size()},
                                         {results.data(), d.results.size()},
                                         d.comm,
                                         bf16Operands,
                                         d.channel});
  for (size_t i = 0; i < d.results.size(); ++i)
    if (d.results[i].dtype == plan::DType::BF16)
      cuda::toBf16(f32(results[i]), d.results[i].bf16(), d.results[i].elements,
                   stream);
}

void CudaBackend::connect(GridComm &grid) {
#ifdef TPC_HAVE_NCCL
  if (nccl)
    return;
  // NCCL needs a GPU per rank: ranks sharing one stage over MPI. Every rank
  // must agree, and TPC_NCCL=0 keeps the MPI path.
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "counting GPUs");
  const char *wanted = std::getenv("TPC_NCCL");
  const bool ownGpu =
      localRank < devices && !(wanted && wanted == std::string("0"));
  if (!Comm::world().allSucceeded(ownGpu))
    return;
  nccl = std::make_unique<NcclChannel>(grid, stream);
#else
  (void)grid;
#endif
}

CudaBackend::~CudaBackend() {
#ifdef TPC_HAVE_NCCL
  nccl.reset();
#endif
#ifdef TPC_HAVE_CUDNN
  cudnn.reset();
#endif
  workspace.reset();
  lt.reset();
  if (blas)
    cublasDestroy(blas);
  blasWorkspace.reset();
  if (stream)
    cudaStreamDestroy(stream);
}

} // namespace

std::vector<OpKind> cudaKernelsMissing() {
  KernelRegistry<CudaKernel> registry("cuda");
  addCudaKernels(registry);
  return registry.missing(needsCudaKernel);
}

std::string cudaUnavailable() {
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess)
    return std::string("no usable GPU: ") + cudaGetErrorString(error);
  if (count == 0)
    return "no usable GPU: no CUDA device is visible";
  return {};
}

Backend &cudaBackend(int ordinal) {
  static std::unique_ptr<CudaBackend> backend;
  if (!backend) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "counting GPUs");
    backend =
        std::make_unique<CudaBackend>(count ? ordinal % count : 0, ordinal);
  }
  return *backend;
}

} // namespace tpc::runtime
