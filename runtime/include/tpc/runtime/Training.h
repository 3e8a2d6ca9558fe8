// The training loop over a plan's @train_step.
#pragma once

#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Rebalancer.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

struct TrainConfig {
  int64_t steps = 0; // train until this many steps have completed
  /// [peak_lr, min_lr, warmup_steps, decay_steps, max_grad_norm].
  std::array<float, 5> hyperparameters{};
  int64_t checkpointEvery = 0; // 0: only at the end if a directory is given
  std::string checkpointDir;
  std::string resume; // checkpoint directory (or its parent with `latest`)
  GridComm *comm = nullptr;   // the plan's grid, for collectives
  Backend *backend = nullptr; // where the step runs; null: the CPU
  /// Straggler emulation, detection and the policy (Rebalancer.h).
  RebalanceOptions rebalance;
  /// Held-out evaluation: every `evalEvery` steps (and after the last) the
  /// plan's @loss runs on the first `evalBatches` windows of `evalStream`,
  /// the same windows each time; 0 turns it off.
  int64_t evalEvery = 0;
  int64_t evalBatches = 0;
  std::span<const int32_t> evalStream;
  /// Steps run op by op, each op timed, before a backend that records a
  /// step replays it (without rebalancing). The first pays one-time setup
  /// (allocations, library plans), so 2 gives one warm per-op profile.
  int64_t opByOpSteps = 1;
  /// Time every step's ops on every rank and gather each rank's compute
  /// seconds per step (TrainResult::rankComputeSeconds): a rank's idle time
  /// in a step is the rest (a pipeline's bubble). A device then runs each
  /// step op by op, never replaying a recorded one.
  bool rankTimes = false;
  /// Asked on every rank after each step: whether to stop there (a
  /// scheduler taking the ranks back). When any rank says yes, every rank
  /// stops after that step, with a checkpoint when checkpointDir is set
  /// (TrainResult::stoppedOnRequest).
  std::function<bool()> stopRequested;
};

/// One held-out evaluation: the mean loss over its batches (each batch's
/// loss is the mean over its tokens, and the batches are alike, so this is
/// the mean over all of them).
struct EvalRecord {
  int64_t step;
  double loss;
  int64_t tokens;
};

struct StepRecord {
  int64_t step;
  double loss;
  double learningRate;
  double seconds;
};

/// One rank's cache of a cached embedding table, after training.
struct EmbeddingCacheReport {
  std::string name;
  int64_t slots = 0, blockRows = 0;
  CacheStats stats;
};

struct TrainResult {
  int64_t firstStep = 1; // 1 + the step resumed from
  /// Tokens trained on since step 1 when the run ended (a resumed run's
  /// earlier steps, at their own batch sizes, included).
  int64_t tokensSeen = 0;
  std::vector<StepRecord> records;
  std::vector<EvalRecord> evals;
  /// Per op kind, summed over the steps run op by op (a replayed step
  /// times only its whole); of those, `opSteps` in all and the first's
  /// (one-time setup included) apart.
  std::map<std::string, OpStats> opStats;
  std::map<std::string, OpStats> firstStepOpStats;
  int64_t opSteps = 0;
  uint64_t arenaBytes = 0, paramBytes = 0, inputBytes = 0;
  /// The held-out @loss runner's own arena and inputs (0 without it).
  uint64_t evalArenaBytes = 0, evalInputBytes = 0;
  int64_t tokensPerStep = 0;
  /// Steps run from a recorded command buffer (ProgramRunner::replays).
  int64_t replays = 0;
  /// Set when training stopped early: the step's loss was not finite. It
  /// names the step and the last good checkpoint; the records end with that
  /// step, so metrics and plots can still be written.
  std::string stoppedBecause;
  /// The step after which TrainConfig::stopRequested stopped the run (its
  /// checkpoint written), or 0.
  int64_t stoppedOnRequest = 0;
  /// With rebalancing or emulated stragglers: every rank's compute seconds
  /// per step and every re-plan.
  std::vector<Rebalancer::StepTimes> computeTimes;
  std::vector<Rebalancer::WindowRecord> rebalanceWindows;
  std::vector<RebalanceEvent> rebalanceEvents;
  /// With TrainConfig::rankTimes: [world rank][step] compute seconds (the
  /// step's wall time less its waits for other ranks).
  std::vector<std::vector<double>> rankComputeSeconds;
  /// This rank's cached embedding tables (tp-pipeline embedding-cache).
  std::vector<EmbeddingCacheReport> embeddingCaches;
};

/// The batch offset of a 1-based step: consecutive windows of batch*seq
/// tokens, wrapping around the stream.
int64_t batchOffset(int64_t step, int64_t streamTokens, int64_t tokensPerStep);

/// Where a batch of `tokensPerStep` tokens (and its shifted targets) that
/// would begin at `position` begins: there, or at 0 when it would run past
/// the stream's end. With one batch size from the start this is
/// batchOffset's window; across a change of batch size (a resume on another
/// plan) it continues where the last batch ended.
int64_t batchOffsetAt(int64_t position, int64_t streamTokens,
                      int64_t tokensPerStep);

/// How many evaluation batches of `tokensPerStep` tokens give `evalTokens`
/// tokens (at least one; the rest of a batch is rounded up), checked
/// against the stream: throws naming both when it is too short.
int64_t evaluationBatches(int64_t evalTokens, int64_t tokensPerStep,
                          int64_t streamTokens);

/// Held-out tokens for the evaluation during training
/// (TrainConfig::evalStream) and the batches each evaluation runs.
struct HeldOut {
  std::vector<int32_t> tokens;
  int64_t batches = 0;
};

/// With `fraction`, the last fraction of `stream` (whole tokens), removed
/// from it so training never sees them; else `given` (a held-out token
/// file's). Each evaluation runs the batches of @train_step's tokens that
/// hold `evalTokens` (default 4 batches), checked against the held-out
/// tokens, as is one training step against what remains of `stream`.
/// Errors name `source`.
HeldOut holdOut(const LoadedPlan &plan, std::vector<int32_t> &stream,
                std::optional<double> fraction, std::vector<int32_t> given,
                std::optional<int64_t> evalTokens, const std::string &source);

/// One finished step, as a progress line shows it.
struct StepProgress {
  int64_t steps = 0; // the run's last step
  StepRecord record;
  int64_t tokensPerStep = 0;
  /// The held-out loss, when the step ended with an evaluation.
  std::optional<double> heldOutLoss;
  /// The rebalancer's verdict (empty without rebalancing) and the action
  /// its window took (empty: none).
  std::string rebalanceStatus, action;
};

/// What a training run has to say while it runs: the library prints
/// nothing itself. Calls come on every rank (checkpointWritten on the one
/// that writes).
class TrainingObserver {
public:
  virtual ~TrainingObserver() = default;
  virtual void started(const Backend &backend) {}
  /// How the pipeline's transfers travel (ProgramRunner::transferPath), on
  /// a pipelined plan, after started().
  virtual void pipelineTransfers(const std::string &path) {}
  /// Each cached embedding table's cache on this rank, before step 1.
  virtual void cachingEmbeddings(const std::vector<EmbeddingCacheReport> &) {}
  virtual void resumed(int64_t step, const std::string &from) {}
  virtual void stepDone(const StepProgress &progress) {}
  virtual void rebalanced(const RebalanceEvent &event) {}
  virtual void checkpointWritten(const std::string &path) {}
  /// TrainConfig::stopRequested ended the run after `step`.
  virtual void stoppedOnRequest(int64_t step) {}
};

/// tp-run's progress log: "step 3/10 | loss 5.1234 | lr ... | ... ms/step"
/// lines, the device, resumes, re-plans and checkpoints, to `out`.
class ProgressLog : public TrainingObserver {
public:
  explicit ProgressLog(std::ostream &out) : out(out) {}
  void started(const Backend &backend) override;
  void pipelineTransfers(const std::string &path) override;
  void
  cachingEmbeddings(const std::vector<EmbeddingCacheReport> &caches) override;
  void resumed(int64_t step, const std::string &from) override;
  void stepDone(const StepProgress &progress) override;
  void rebalanced(const RebalanceEvent &event) override;
  void checkpointWritten(const std::string &path) override;
  void stoppedOnRequest(int64_t step) override;

private:
  std::ostream &out;
};

/// The learning-rate schedule and clipping, as tp-run's flags give them:
/// what is not set follows from the run's length.
struct LearningRateSchedule {
  double peak = 3e-4;
  std::optional<double> min;         // default: peak / 10
  std::optional<int64_t> warmup;     // default: min(100, steps / 10)
  std::optional<int64_t> decaySteps; // default: steps
  double clip = 1.0;                 // global gradient-norm clip

  /// [peak_lr, min_lr, warmup_steps, decay_steps, max_grad_norm] for a run
  /// of `steps` steps. Throws std::invalid_argument for a negative or
  /// non-finite value.
  std::array<float, 5> hyperparameters(int64_t steps) const;
};

/// One step's outcome: its record and, when the step ended a rebalancing
/// window that acted, the re-plan.
struct StepOutcome {
  StepRecord record;
  std::optional<RebalanceEvent> rebalance;
};

/// Runs @train_step one step at a time on batches its caller gives: the
/// training loop (train) and the Python package's train_step both step
/// through it, so a loop fed from Python equals tp-run's.
class Trainer {
public:
  /// `comm` may be null on one rank. Throws if the plan has no @train_step.
  Trainer(const LoadedPlan &plan, ParamStore &params, GridComm *comm,
          Backend &backend, const std::array<float, 5> &hyperparameters,
          const RebalanceOptions &rebalance = {});

  /// [batch, seq] of the tokens (and targets) a step takes.
  const std::vector<int64_t> &tokensShape() const { return shape; }
  int64_t tokensPerStep() const { return shape[0] * shape[1]; }
  /// The 1-based step the next call of step() runs.
  int64_t nextStep() const { return next; }
  const std::array<float, 5> &hyperparameters() const { return settings; }
  /// Tokens trained on since step 1, a resumed run's earlier steps included.
  int64_t tokensSeen() const { return seen; }
  /// Where the next batch begins in the stream the caller reads batches
  /// from; checkpoints record it (CheckpointState::dataOffset).
  void setDataOffset(int64_t offset) { dataOffset = offset; }

  /// Loads a checkpoint (a step directory, or one with `latest`): the
  /// parameters, AdamW's moments and the step to continue after. Before the
  /// first step.
  CheckpointState resume(const std::string &path);
  /// Ranks the rows of every cached embedding table by how often the
  /// training `stream` uses them (in the windows the steps read), so its
  /// cache keeps the most frequent ones; after a resume, by the ranking the
  /// checkpoint kept. Before the first step. Throws std::invalid_argument
  /// naming an id outside the vocabulary, or a table whose cache cannot
  /// hold the rows one step of `stream` uses.
  void rankCachedRows(std::span<const int32_t> stream);
  /// Splits the blocks by known speeds (RebalanceOptions::rankSpeeds), when
  /// given. Collective; before the first step.
  std::optional<RebalanceEvent> applyRankSpeeds();

  /// [batch, seq] of the targets ([batch, 1] for a DLRM's labels).
  const std::vector<int64_t> &targetsShape() const { return targetShape; }
  /// [batch, 1, features] of the dense features a DLRM's step takes; empty
  /// when the plan has none.
  const std::vector<int64_t> &denseShape() const { return denseFeatureShape; }

  /// Runs step nextStep() on whole `tokens` and `targets` (the same on every
  /// rank; each takes its block) and, when the plan takes them, the whole
  /// `dense` features. Throws std::invalid_argument for a wrong size, a
  /// token outside the vocabulary or a target outside the loss's classes.
  /// Collective. `nextTokens`, the next step's tokens when known, let cached
  /// embedding tables fetch that step's rows while this one runs.
  StepOutcome step(std::span<const int32_t> tokens,
                   std::span<const int32_t> targets,
                   std::span<const int32_t> nextTokens = {},
                   std::span<const float> dense = {});

  /// Writes a checkpoint after the last step run into `dir` (whole
  /// parameters, gathered; written by the grid's first rank, whose path it
  /// returns; the others return an empty string). Collective.
  std::string saveCheckpoint(const std::string &dir);

  /// The runner of the step's program. Stage rebalancing switches the
  /// program (another stage cut's): take it anew after every step.
  ProgramRunner &programRunner() { return *runner; }
  Rebalancer &rebalancer() { return balancer; }
  /// Runner settings that hold across a switch of program.
  void setOpByOpRuns(int64_t runs);
  void setStepTiming(bool on);

private:
  /// A runner for the program of the parameters' stage cut.
  void makeRunner();

  const LoadedPlan &plan;
  ParamStore &params;
  GridComm *comm;
  Backend &backend;
  std::unique_ptr<ProgramRunner> runner;
  int64_t runnerCut = 0;
  std::optional<int64_t> opByOpRuns;
  bool stepTiming = false;
  Rebalancer balancer;
  std::array<float, 5> settings;
  std::vector<int64_t> shape, targetShape, denseFeatureShape;
  int64_t targetClasses = 0;
  int64_t next = 1;
  int64_t seen = 0;
  std::optional<int64_t> dataOffset;
  /// The cached tables' whole-table rankings (rankCachedRows, or a
  /// resumed checkpoint's), which checkpoints keep.
  std::map<std::string, std::vector<int64_t>> embeddingOrders;
};

/// This rank's cached embedding tables and what their caches did.
std::vector<EmbeddingCacheReport>
embeddingCacheReports(const LoadedPlan &plan, const ParamStore &params);

/// Runs @train_step from step 1 (or after the resumed checkpoint) through
/// config.steps, telling `observer` of each step, writing checkpoints as
/// configured. A step whose loss is NaN or infinite ends the run there (see
/// TrainResult::stoppedBecause), before its checkpoint.
TrainResult train(const LoadedPlan &plan, ParamStore &params,
                  std::span<const int32_t> stream, const TrainConfig &config,
                  TrainingObserver &observer);

} // namespace tpc::runtime
