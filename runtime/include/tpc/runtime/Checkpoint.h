// Training checkpoints and HuggingFace export.
//
// A checkpoint is a directory DIR/step-NNNNNNNN holding state.safetensors
// (every parameter by HF name, and AdamW's moments as
// "optimizer.exp_avg.<name>" / "optimizer.exp_avg_sq.<name>", all f32, bit
// exact) and manifest.json (docs/formats.md: step, plan fingerprint,
// hyperparameters, and each file's size and XXH3 checksum, all checked on
// resume). It is built in a temporary directory and renamed
// into place, then DIR/latest is replaced (temp + rename) to name it: a crash
// at any point leaves the previous checkpoint intact.
#pragma once

#include "tpc/runtime/Executor.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::runtime {

struct CheckpointState {
  int64_t step = 0; // steps completed
  std::array<float, 5> hyperparameters{};
  int64_t tokensPerStep = 0;
  /// Tokens trained on in all steps so far: steps of other batch sizes (a
  /// run resumed on another plan) count their own.
  int64_t tokensSeen = 0;
  /// Where in the token stream the next step's batch begins (before it
  /// wraps around), when the run read its batches from one; a resume at
  /// another batch size continues there, so no data is skipped or repeated.
  std::optional<int64_t> dataOffset;
  /// Per cached embedding table (by HF name): its rows by descending
  /// frequency in the training data, whole-table ids, so that a resumed run
  /// caches alike on any grid (stored as
  /// `embedding_cache.order.<name>`, i64).
  std::map<std::string, std::vector<int64_t>> embeddingOrders;
};

/// `{"peak_lr": .., "min_lr": .., "warmup_steps": .., "decay_steps": ..,
/// "max_grad_norm": ..}` (checkpoint manifests and tp-run's metrics).
nlohmann::ordered_json
hyperparametersJson(const std::array<float, 5> &hyperparameters);

/// Identifies the parameter set (names and shapes) a checkpoint belongs to.
std::string planFingerprint(const LoadedPlan &plan);

/// The directory writeCheckpoint writes for `step` under `dir`.
std::string checkpointPath(const std::string &dir, int64_t step);
/// Whether `name` is the name of such a directory ("step-NNNNNNNN"); these
/// names sort by step.
bool isCheckpointStepName(std::string_view name);

/// An exclusive lock on a checkpoint directory for the life of a run (flock
/// on DIR/.lock, never through a symbolic link, released when the process
/// ends, even if killed), so two runs never write the same checkpoints.
/// Taking it also removes what runs that were killed while writing left
/// behind (temporary step directories and files); no live run can own them
/// once the lock is held.
class CheckpointDirLock {
public:
  /// Creates `dir` if needed. Throws std::runtime_error ("<dir>: in use by
  /// another run (pid N)") if another process holds the lock, and when `dir`
  /// already holds checkpoints that this run does not continue (`resume`,
  /// the run's --resume, is not `dir` or one of its steps): its step
  /// directories would be overwritten and `latest` rewound, mixing two runs.
  CheckpointDirLock(const std::string &dir, const std::string &resume);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock &) = delete;
  CheckpointDirLock &operator=(const CheckpointDirLock &) = delete;

  /// Leftovers of killed runs removed when the lock was taken.
  const std::vector<std::string> &removedLeftovers() const { return removed; }

private:
  static void refuseAnotherRunsCheckpoints(const std::string &dir,
                                           const std::string &resume);

  int fd = -1;
  std::vector<std::string> removed;
};

/// Writes a checkpoint of `params` (whole parameters: gather a sharded
/// store first) after `state.step` steps; returns its directory.
std::string writeCheckpoint(const std::string &dir, const LoadedPlan &plan,
                            const ParamStore &params,
                            const CheckpointState &state);

/// Loads a checkpoint directory, or the one DIR/latest names, into `params`
/// (this rank's blocks, as the store lays them out; checkpoints hold whole
/// parameters, so a run may resume on another grid or block assignment).
/// Throws std::runtime_error if it is incomplete or belongs to another model.
CheckpointState readCheckpoint(const std::string &path, const LoadedPlan &plan,
                               ParamStore &params);

/// Writes DIR/model.safetensors (the parameters under their HF names, f32)
/// and DIR/config.json (the model's config), so that HuggingFace's
/// from_pretrained loads the trained model. Atomic per file.
void exportHuggingFace(const std::string &dir, const LoadedPlan &plan,
                       const ParamStore &params);

} // namespace tpc::runtime
