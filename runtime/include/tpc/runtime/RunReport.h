// The run report: the metrics JSON of every mode (tp-run --metrics; the
// schema is docs/formats.md's "Run reports"). One type for training,
// evaluation and generation, so the sections they share (device, memory,
// communication, ops) are written once and every file says what it is:
// "format": "tpc-run-report", "version", "mode".
#pragma once

#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Generator.h"
#include "tpc/runtime/Training.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <span>
#include <string>

namespace tpc::runtime {

/// The report's "embedding_caches" section: one object per cached table of
/// this rank (hit rate, rows and bytes each way, seconds).
nlohmann::ordered_json
embeddingCachesJson(const std::vector<EmbeddingCacheReport> &caches);

class RunReport {
public:
  /// Version 1: the fields tp-run wrote before there was a version, under
  /// "format", "version" and "mode".
  static constexpr int kVersion = 1;
  enum class Mode { Train, Evaluate, Generate };

  explicit RunReport(Mode mode);

  /// The JSON so far, for what a caller adds of its own.
  nlohmann::ordered_json &json() { return root; }
  const nlohmann::ordered_json &json() const { return root; }

  /// "device": the backend, its collectives' path and kernel libraries.
  void setDevice(const Backend &backend);
  /// "communication": bytes this rank sent per collective kind over `runs`
  /// runs of the program, in total and per run, in whole bytes (the ring
  /// rule, as tp-report-communication computes them statically).
  void setCommunication(const std::map<std::string, CommStats> &stats,
                        int64_t runs);
  /// "ops": per op kind, its count and seconds.
  void setOps(const std::map<std::string, OpStats> &stats);
  /// A training run's: "ops" over its `opSteps` steps run op by op, and
  /// "first_step_ops", the first of them (one-time setup included), so that
  /// the rest give a warm profile.
  void setTrainingOps(const std::map<std::string, OpStats> &stats,
                      const std::map<std::string, OpStats> &firstStep,
                      int64_t opSteps);

  /// A training run: the schedule, the plan's AdamW settings, memory, the
  /// loss curve and held-out evaluations.
  void setTraining(const LoadedPlan &plan, const TrainConfig &config,
                   const TrainResult &result, int64_t steps, double seconds);
  /// One batch's run of `program`.
  /// The `rebalance` section: the policy and its settings (`slow`: the
  /// emulated stragglers as given), every rank's compute seconds per step,
  /// every window and every re-plan with its reason, blocks and cost.
  void setRebalance(const RebalanceOptions &options,
                    const std::vector<std::string> &slow,
                    const TrainResult &result);
  void setBatch(const std::string &program, const BatchRun &run,
                uint64_t arenaBytes, uint64_t paramBytes, uint64_t inputBytes);
  /// A generation: every sample (`decode` turns ids into text), the
  /// sampling settings, the steps' times and memory.
  void setGeneration(
      const GenerationRequest &request, const GenerationResult &result,
      uint64_t paramBytes,
      const std::function<std::string(std::span<const int32_t>)> &decode);

  /// Writes the report atomically. Decoded text need not be UTF-8 (a
  /// byte-level model may draw any bytes), which JSON strings must be:
  /// invalid bytes are written as U+FFFD, as HuggingFace's decode() does.
  void write(const std::string &path) const;

  /// The process's peak resident memory.
  static int64_t maxRssBytes();

private:
  nlohmann::ordered_json root;
  const Backend *backend = nullptr;
};

} // namespace tpc::runtime
