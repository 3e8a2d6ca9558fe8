// Running a plan's @loss or @forward on token data: one batch, repeated for
// timing (tp-run's evaluation), or the mean loss over windows of a held-out
// stream (evaluation while training).
#pragma once

#include "tpc/runtime/Executor.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

/// One batch's run (the last of `repeat`).
struct BatchRun {
  /// The scalar loss, when the program's first result is one.
  std::optional<float> loss;
  int64_t batch = 0, seq = 0;
  /// Wall seconds of each run, in order.
  std::vector<double> seconds;
  double medianSeconds() const;
};

class SafetensorsWriter;
struct Batch;

/// Runs `program` once on `batch` and adds its results to `writer` under
/// the plan's result names ("logits", "loss"; a gradient under its
/// parameter's name, in the parameter's file shape). Collective.
void addProgramResults(const LoadedPlan &plan, ParamStore &params,
                       GridComm *grid, Backend &backend,
                       const std::string &program, const Batch &batch,
                       SafetensorsWriter &writer);

class Evaluator {
public:
  /// Runs `program` ("loss" or "forward"; a generation program, which reads
  /// positions and KV caches, is refused with std::invalid_argument).
  /// `grid` may be null on one rank.
  Evaluator(const LoadedPlan &plan, ParamStore &params, GridComm *grid,
            Backend &backend, const std::string &program);

  const std::string &program() const { return name; }
  /// [batch, seq] of the program's tokens.
  std::vector<int64_t> tokensShape() const { return runner.tokensShape(); }
  ProgramRunner &programRunner() { return runner; }

  /// Runs the program `repeat` times on the batch at `offset` of `stream`
  /// (tokens and, for @loss, the next tokens as targets). Collective.
  BatchRun runBatch(std::span<const int32_t> stream, int64_t offset,
                    int64_t repeat = 1);

  /// Runs the program `repeat` times on whole [batch, seq] `tokens` and, for
  /// @loss, `targets` (the same on every rank). Throws
  /// std::invalid_argument for a wrong size or a token outside the
  /// vocabulary. Collective.
  BatchRun runOn(std::span<const int32_t> tokens,
                 std::span<const int32_t> targets, int64_t repeat = 1);

  /// The mean of @loss over the first `batches` windows of `stream` (the
  /// same windows every time). Each batch's loss is the mean over its
  /// tokens and the batches are alike, so this is the mean over all of
  /// them. On the parameters' blocks as they are; while they are resized,
  /// every held block is computed for the evaluation (parked blocks sit out
  /// of training, not out of the model) and the resize is restored after.
  /// Collective.
  double meanLoss(std::span<const int32_t> stream, int64_t batches);

private:
  const LoadedPlan &plan;
  ParamStore &params;
  GridComm *grid;
  std::string name;
  ProgramRunner runner;
};

} // namespace tpc::runtime
