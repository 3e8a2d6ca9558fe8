// A training job as tp-sched takes it (docs/scheduling.md): a JSON object
// naming the model's config.json, the token data, the sequence length, the
// global batch sizes it may run at and the one it asks for, the most ranks
// it may use and the count it asks for, a target (samples, or a loss with a
// bound on samples) and the learning-rate rule.
#pragma once

#include "Policy.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tpc::sched {

struct JobSpec {
  std::string name;
  std::string config, data, weights; // absolute paths
  int64_t seq = 0;
  std::vector<int64_t> batchSizes; // ascending
  int64_t batch = 0;               // requested; `lr` is for this batch
  int maxRanks = 0, ranks = 0;     // the most it may use; requested
  std::optional<int64_t> targetSamples;
  std::optional<double> targetLoss;
  int64_t maxSamples = 0; // the bound on samples (the target's, or given)
  double lr = 0, maxLr = 0, clip = 1.0;
  int64_t warmup = 0;
  std::string mode = "dp";
  std::string pipeline; // more tp-pipeline options (AdamW settings)

  /// Every configuration the job may run in: a batch size of its list on
  /// 1..maxRanks ranks (in dp mode, ranks dividing the batch), ordered by
  /// ranks then batch.
  std::vector<Config> configs() const;
  Config requested() const { return {ranks, batch}; }
  /// The linear scaling rule (Goyal et al., as ONES applies it): the rate
  /// grows with the batch, lr x batch / requested batch, up to max_lr.
  double learningRate(int64_t globalBatch) const;
  /// The spec as JSON, paths absolute (kept in tp-sched's state).
  nlohmann::ordered_json toJson() const;
};

/// Parses and checks a job spec; relative paths are taken from
/// `baseDir`. Throws std::invalid_argument("<source>: <what is wrong>") for
/// the first problem: malformed JSON, an unknown or missing field, a value
/// of the wrong type or range, a file that is not there, a requested
/// configuration outside the job's own ranges.
JobSpec parseJobSpec(const std::string &text, const std::string &source,
                     const std::string &baseDir);

} // namespace tpc::sched
