// Runs one program of a loaded plan on a backend: its activation arena and
// inputs, its steps dispatched to the backend (or staged through the host),
// replayed from a recorded command buffer where the backend can.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/CollectiveChannel.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/KvCaches.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/ParamStore.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/StepTimer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class StagedSteps;

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
  /// Sets tokens, targets or positions from the whole [batch, seq] values
  /// (every rank passes the same); a rank whose input is split over the grid
  /// keeps its block. Throws if the size differs from the input's whole
  /// shape.
  void setInput(plan::InputKind kind, std::span<const int32_t> values);
  /// The same for the dense features, f32 [batch, 1, features].
  void setInput(plan::InputKind kind, std::span<const float> values);
  /// The whole shape of input `kind` (of all ranks' blocks together).
  const std::vector<int64_t> &wholeInputShape(plan::InputKind kind) const;
  /// The next run's whole tokens, when known: cached embedding tables plan
  /// and gather that run's rows while this one runs (the lookahead). For
  /// the next run() only.
  void setNextTokens(std::span<const int32_t> values);
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
  /// How many untimed runs go step by step (timed per op) before one is
  /// recorded; at least 1, since the first allocates what the steps need
  /// and builds the libraries' plans. 2 adds one warm per-op profile.
  void setOpByOpRuns(int64_t runs) { opByOpRuns = std::max<int64_t>(runs, 1); }
  /// Runs that submitted the recorded command buffer.
  int64_t replays() const { return replayCount; }
  /// Stretches this rank's compute (not its collectives) by `factor` >= 1
  /// from the next run on: an emulated slower device.
  void setComputeStretch(double factor) { timer->setStretch(factor); }
  /// The last run's compute seconds: its time less the time spent in
  /// blocking collectives (waiting for other ranks included).
  double computeSeconds() const { return timer->computeSeconds(); }
  /// Of those, the seconds of the steps computing on each rebalance point's
  /// blocks (they scale with the blocks the rank computes).
  const std::vector<double> &pointComputeSeconds() const {
    return timer->pointComputeSeconds();
  }

  size_t numResults() const;
  /// Host values (copied from the device after each run when the backend's
  /// memory is not the host's).
  std::span<const float> result(size_t index) const;
  std::vector<int64_t> resultShape(size_t index) const;

  const std::map<std::string, OpStats> &stats() const { return timer->stats(); }
  void resetStats() { timer->resetStats(); }
  uint64_t arenaBytes() const { return program->arena_bytes(); }
  /// How this program's pipeline transfers travel, for the progress log
  /// ("NCCL, matched in order", "MPI staged through the host (...)"); empty
  /// when it has none.
  std::string transferPath() const;
  uint64_t inputBytes() const;

private:
  /// Copies this rank's block of input `kind` from its whole `count`
  /// values of type `dtype`.
  void setInputBlock(plan::InputKind kind, plan::DType dtype,
                     const std::byte *values, size_t count);
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
  /// Whether `step` runs on the backend itself (else staged through the
  /// host): the backend's choice, except that a pipeline transfer goes
  /// over the backend's channel only when that channel matches transfers
  /// by tag or the plan's transfers can be matched in order.
  bool runsNatively(const plan::Step &step) const;
  /// The dispatch of `step` on the current bindings.
  Dispatch dispatchOf(const plan::Step &step, StepBindings &bound,
                      bool native) const;

  /// Recomputes the tensors' shapes when the parameters' block assignment
  /// changed: a rebalanced dim holds the blocks this rank computes.
  void updateShapes();
  /// Before a run of a program that reads cached embedding tables: caches
  /// the rows the whole batch uses and writes the tables' slot maps and
  /// row lists into their inputs.
  void prepareEmbeddingCaches();

  const plan::Plan *plan;
  /// LoadedPlan::inOrderTransferProblem: empty when a channel matching
  /// transfers by order may carry this plan's.
  std::string inOrderProblem;
  const plan::Program *program;
  ParamStore &params;
  /// The layout the shapes were computed for.
  uint64_t layoutVersion = 0;
  /// Whether the program views a rebalanced parameter at the even split.
  bool needsEvenBlocks = false;
  /// Compute seconds, op statistics and the emulated straggler.
  std::unique_ptr<StepTimer> timer;
  GridComm *comm;
  /// MPI on the host over `comm`: the channel of steps that run staged or
  /// on a backend without one of its own.
  std::unique_ptr<MpiChannel> hostChannel;
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
  /// With cached embedding tables: the whole batch's tokens, which every
  /// rank caches the rows of (replicas alike, so their caches agree).
  std::vector<int32_t> wholeTokens, nextWholeTokens;
  bool readsCachedTables = false;
  bool stepTiming = true;
  /// The program recorded for replay, and the storage it was recorded on.
  std::unique_ptr<CommandBuffer> recorded;
  std::vector<std::byte *> recordedStorage;
  /// What one submission's collectives move, by kind (GridComm::stats).
  std::map<std::string, CommStats> recordedTraffic;
  int64_t untimedRuns = 0, replayCount = 0, opByOpRuns = 1;
  std::unique_ptr<StagedSteps> staged;
  /// Per input: this rank's block of the whole input (the whole input when
  /// it is not split).
  std::vector<ParamBlock> inputBlocks;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorBinding> bindings; // by tensor index
};

} // namespace tpc::runtime
