// Runs a loaded plan's programs on a backend: parameters and their optimizer
// state live in a ParamStore shared by all programs (on the host, with a copy
// on the device when the backend's memory is not the host's); each
// ProgramRunner owns its activation arena and inputs.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Blocks.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Plan.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class GridComm;
class StagedSteps;

/// This rank's block of a parameter: per dim the offset and size, from the
/// parameter's split axes and the rank's grid coordinates (all zeros: one
/// rank, or the first rank of every group).
struct ParamBlock {
  std::vector<int64_t> globalShape, offset, shape;
};
ParamBlock paramBlock(const LoadedPlan &plan, const plan::Param &param,
                      const std::vector<int64_t> &coords);

/// Where one stored block of a parameter lies: in the rank's storage (a
/// row-major region starting at element `base`) and in the whole parameter.
/// A parameter without rebalance dims is one block, its rank's even share.
/// One with a rebalance dim stores the blocks the rank computes as one
/// region (the array its kernels see, in held order), then its parked blocks
/// as another.
struct StoredBlock {
  int64_t base = 0;
  std::vector<int64_t> regionShape, regionOffset;
  std::vector<int64_t> globalOffset, shape;
  int64_t point = -1, id = -1; // the rebalance point and block id, if any
};
std::vector<StoredBlock> storedBlocks(const LoadedPlan &plan,
                                      const plan::Param &param,
                                      const std::vector<int64_t> &coords,
                                      const BlockAssignment &assignment);
/// `block`'s values in a rank's `storage`, row-major in block.shape; and
/// back.
std::vector<float> readStoredBlock(const float *storage,
                                   const StoredBlock &block);
void writeStoredBlock(const float *values, const StoredBlock &block,
                      float *storage);

/// What moving to another block assignment cost this rank.
struct RelayoutCost {
  int64_t blocksSent = 0, blocksReceived = 0;
  double bytesSent = 0, bytesReceived = 0;
  double seconds = 0;
};

/// The plan's parameters as f32 host arrays, in plan order, and AdamW's
/// moments for each (zeros until a train step writes them): this rank's
/// blocks, laid out by storedBlocks. A parameter with rebalance dims is
/// allocated for its point's capacity.
///
/// Programs on a backend whose memory the host cannot address run on
/// device copies (deviceData). The two sides stay coherent without their
/// users' help: every accessor returns current host values (downloading
/// after a device run wrote them), and a mutable access makes the host
/// side the newer one, uploaded before the next device run.
class ParamStore {
public:
  enum class State { Value, ExpAvg, ExpAvgSq };

  /// Sharding-independent deterministic initialisation (Init.h).
  /// With `coords`, only this rank's blocks of each split parameter; every
  /// rebalance point starts evenly split.
  static ParamStore initialise(const LoadedPlan &plan,
                               const std::vector<int64_t> &coords = {});
  /// Loads every parameter by its HF name from a safetensors file
  /// (f32/f16/bf16), keeping this rank's blocks. Throws std::runtime_error
  /// if one is missing or its shape differs; tensors the plan does not use
  /// are ignored.
  static ParamStore fromSafetensors(const LoadedPlan &plan,
                                    const std::string &path,
                                    const std::vector<int64_t> &coords = {});

  /// The whole parameters (and moments, if any) from every rank's blocks,
  /// on every rank: collective over `comm`'s grid, not counted as step
  /// traffic. The result is a one-rank store.
  ParamStore gathered(const LoadedPlan &plan, GridComm &comm) const;
  /// Replaces this rank's blocks of parameter `index` (or of a moment) with
  /// theirs in `whole`, the whole parameter-shaped array.
  void setFromWhole(const LoadedPlan &plan, size_t index, State state,
                    const std::vector<float> &whole);

  /// Moves to the block assignment `next` (validated; the same on every
  /// rank): blocks that change hands go with their weights and moments
  /// straight to their new rank, blocks that change between computed and
  /// parked move within the rank's storage. Collective over the ranks that
  /// send or receive; every rank must call it.
  RelayoutCost relayout(const LoadedPlan &plan, const BlockAssignment &next,
                        GridComm *comm);
  const BlockAssignment &blocks() const { return assignment; }
  const std::vector<int64_t> &coords() const { return coords_; }
  /// Changes with every relayout: runners recompute their shapes then.
  uint64_t layoutVersion() const { return version; }

  std::vector<float> &operator[](size_t index) {
    hostWillChange();
    return values[index];
  }
  const std::vector<float> &operator[](size_t index) const {
    syncHost();
    return values[index];
  }
  std::vector<float> &expAvg(size_t index);
  std::vector<float> &expAvgSq(size_t index);
  const std::vector<float> &expAvg(size_t index) const;
  const std::vector<float> &expAvgSq(size_t index) const;
  std::vector<float> &state(size_t index, State which);
  bool hasMoments() const { return !moments1.empty(); }
  size_t size() const { return values.size(); }
  uint64_t bytes() const;

  /// Parameter `index`'s `which` array on `backend` (not host-visible; one
  /// backend per store), uploaded first if the host holds newer values.
  std::byte *deviceData(Backend &backend, size_t index, State which);
  /// A device run may have written parameters or moments: the host arrays
  /// are refreshed before they are next read.
  void markDeviceWritten();

private:
  /// Storage for every parameter, zero, sized for this rank.
  static ParamStore allocate(const LoadedPlan &plan,
                             const std::vector<int64_t> &coords);

  /// The host array without syncing (moments allocated on first use).
  std::vector<float> &hostArray(size_t index, State which) const;
  /// Downloads what a device run wrote, if the host is behind.
  void syncHost() const;
  /// Before the host arrays may be written: sync, then the device copies
  /// are behind.
  void hostWillChange();

  /// Device copies of the arrays, per parameter and State.
  struct DeviceCopies {
    Backend *backend = nullptr;
    std::vector<std::array<std::unique_ptr<Buffer>, 3>> buffers;
    /// Whether each buffer holds the host array's values.
    std::vector<std::array<bool, 3>> current;
    /// Whether the host arrays hold the newest values.
    bool hostCurrent = true;
  };

  mutable std::vector<std::vector<float>> values;
  // Allocated on first use: inference never pays for them.
  mutable std::vector<std::vector<float>> moments1, moments2;
  std::unique_ptr<DeviceCopies> device;
  BlockAssignment assignment;
  std::vector<int64_t> coords_;
  uint64_t version = 0;
};

/// Calls `write` with whole parameters on the first rank only: `params`
/// itself when `comm` is null or has one rank, else the store gathered from
/// every rank (collective over `comm`: every rank must call this).
void writeWholeParams(const LoadedPlan &plan, const ParamStore &params,
                      GridComm *comm,
                      const std::function<void(const ParamStore &)> &write);

/// The KV caches of a plan's generation programs (Plan.caches): this rank's
/// blocks in one backend's memory, zeros at first. Every runner given them
/// (ProgramRunner::setCaches) reads and writes them in place, so @prefill
/// and @decode continue one another.
class KvCaches {
public:
  KvCaches(const LoadedPlan &plan, Backend &backend);
  /// Cache `index` of the plan.
  std::byte *data(size_t index);
  size_t size() const { return buffers.size(); }
  uint64_t bytes() const;
  /// Back to zeros (a new prompt; not needed for correctness, since a
  /// step reads only positions written for its own sequence).
  void clear();

private:
  Backend &backend;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<uint64_t> sizes;
};

/// Time spent per op kind.
struct OpStats {
  int64_t count = 0;
  double seconds = 0.0;
};

class ProgramRunner {
public:
  /// Throws PlanError if `plan` has no program `name`. Collectives run on
  /// `comm` (required when the program has any); kernels on `backend`.
  ProgramRunner(const LoadedPlan &plan, const std::string &name,
                ParamStore &params, GridComm *comm = nullptr,
                Backend &backend = cpuBackend());
  ~ProgramRunner();

  bool hasInput(plan::InputKind kind) const;
  /// The KV caches a generation program reads and writes (required before
  /// run() when it has any; on this runner's backend).
  void setCaches(KvCaches *caches);
  /// Sets tokens or targets from the whole [batch, seq] values (every rank
  /// passes the same); a rank whose input is split over the grid keeps its
  /// block. Throws if the size differs from tokensShape().
  void setInput(plan::InputKind kind, std::span<const int32_t> values);
  /// Sets the 1-based step of a train step.
  void setStep(int64_t step);
  /// Sets [peak_lr, min_lr, warmup_steps, decay_steps, max_grad_norm].
  void setHyperparameters(const std::array<float, 5> &values);
  /// The whole [batch, seq] shape of the tokens input (of all ranks'
  /// blocks together when it is split over the grid).
  std::vector<int64_t> tokensShape() const;

  /// Executes every step once.
  void run();
  /// Whether run() times each step (op statistics, the compute times
  /// rebalancing reads; the default). Without, a backend that can record
  /// command buffers runs the program from one recorded on an earlier run
  /// (when every step runs natively and no buffer moved since).
  void setStepTiming(bool on) { stepTiming = on; }
  /// Runs that submitted the recorded command buffer.
  int64_t replays() const { return replayCount; }
  /// Stretches this rank's compute (not its collectives) by `factor` >= 1
  /// from the next run on: an emulated slower device.
  void setComputeStretch(double factor) { stretch = factor; }
  /// The last run's compute seconds: its time less the time spent in
  /// blocking collectives (waiting for other ranks included).
  double computeSeconds() const { return computeTime; }
  /// Of those, the seconds of the steps computing on each rebalance point's
  /// blocks (they scale with the blocks the rank computes).
  const std::vector<double> &pointComputeSeconds() const { return pointTime; }

  size_t numResults() const;
  /// Host values (copied from the device after each run when the backend's
  /// memory is not the host's).
  std::span<const float> result(size_t index) const;
  std::vector<int64_t> resultShape(size_t index) const;

  const std::map<std::string, OpStats> &stats() const { return opStats; }
  void resetStats() { opStats.clear(); }
  uint64_t arenaBytes() const { return program->arena_bytes(); }
  uint64_t inputBytes() const;

private:
  /// Where `tensor` lives: host memory, or device memory when the backend
  /// is not host-visible.
  std::byte *storage(uint32_t tensor);
  std::span<const int64_t> shape(uint32_t tensor) const;
  int64_t elements(uint32_t tensor) const;
  /// The index of the input of `kind`; throws if the program has none.
  size_t inputIndex(plan::InputKind kind) const;
  std::vector<uint64_t> &inputStorage(plan::InputKind kind, size_t bytes);
  /// Binds every tensor to its storage; parameters and moments may have
  /// been replaced or allocated since the last run.
  void bindTensors();
  /// Runs the program from a recorded command buffer when step timing is
  /// off and the backend can (see setStepTiming); false when it did not.
  bool runRecorded();
  /// One step's bound tensors, held by the caller while its dispatch runs.
  struct StepBindings {
    std::array<TensorBinding, kMaxStepOperands> operands;
    std::array<TensorBinding, kMaxStepResults> results;
  };
  /// The dispatch of `step` on the current bindings.
  Dispatch dispatchOf(const plan::Step &step, StepBindings &bound) const;

  /// Recomputes the tensors' shapes when the parameters' block assignment
  /// changed: a rebalanced dim holds the blocks this rank computes.
  void updateShapes();

  const plan::Plan *plan;
  const plan::Program *program;
  ParamStore &params;
  /// The layout the shapes were computed for.
  uint64_t layoutVersion = 0;
  /// Whether the program views a rebalanced parameter at the even split.
  bool needsEvenBlocks = false;
  double stretch = 1.0, computeTime = 0.0;
  double stretchDebt = 0.0;        // emulated slowdown not yet slept
  std::vector<double> pointTime;   // per rebalance point
  std::vector<int32_t> stepPoints; // per step: its point, or -1
  GridComm *comm;
  Backend &backend;
  KvCaches *caches = nullptr;
  std::unique_ptr<Buffer> arena;
  std::vector<std::vector<uint64_t>> inputs; // 8-byte aligned bytes
  /// The inputs' device copies, uploaded by every run, and the results'
  /// host copies (when the backend is not host-visible).
  std::vector<std::unique_ptr<Buffer>> deviceInputs;
  mutable std::vector<std::vector<float>> resultCopies;
  /// Whether a run writes parameters or moments (a train step).
  bool writesParams = false;
  bool stepTiming = true;
  /// The program recorded for replay, and the storage it was recorded on.
  std::unique_ptr<CommandBuffer> recorded;
  std::vector<std::byte *> recordedStorage;
  /// What one submission's collectives move, by kind (GridComm::stats).
  std::map<std::string, CommStats> recordedTraffic;
  int64_t untimedRuns = 0, replayCount = 0;
  std::unique_ptr<StagedSteps> staged;
  /// Per input: this rank's block of the whole input (the whole input when
  /// it is not split).
  std::vector<ParamBlock> inputBlocks;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorBinding> bindings; // by tensor index
  std::map<std::string, OpStats> opStats;
};

} // namespace tpc::runtime
