// Compiling a job for one configuration: tpc-import at the global batch,
// then tp-pipeline for the rank count in the job's mode, with the step
// simulator's prediction on the pool's cluster description when one is
// given (docs/simulator.md). tp-sched runs the tools as processes: it links
// no compiler, as tp-run does not.
#pragma once

#include "Policy.h"

#include <optional>
#include <string>

namespace tpc::sched {

/// How a job's ranks are used: "dp" (data parallelism alone: `mode=1d
/// grid=1 dp=N`), "1d" (Megatron-LM's tensor parallelism over all N) or
/// "auto" (the simulator's choice among every scheme, grid and dp; needs a
/// cluster file).
std::string pipelineOptions(const std::string &mode, int ranks);

struct CompileRequest {
  std::string config;         // the model's config.json
  int64_t batch = 0, seq = 0; // global batch (sequences) and length
  int ranks = 0;
  std::string mode = "dp";
  std::string extraOptions; // more tp-pipeline options (AdamW settings)
  std::string cluster;      // a cluster file; empty: no prediction
  std::string plan;         // write the plan here; empty: predict only
  std::string workDir;      // for the imported module
};

struct CompileResult {
  bool ok = false;
  std::string error; // the tool's last line when not ok
  /// The tp-pipeline options that compile the same plan again: the mode's
  /// (auto's choice), without extraOptions except after auto's choice.
  std::string mode;
  /// With a cluster: the predicted @train_step seconds and bytes per rank
  /// (the planned arena and the arguments: parameters, moments, inputs).
  std::optional<double> stepSeconds;
  double bytesPerRank = 0, argumentBytes = 0;
};

/// Runs tpc-import and tpc-opt from `binDir`.
CompileResult compileJob(const std::string &binDir,
                         const CompileRequest &request);

/// The simulator's remarks in tp-pipeline's output: "@train_step on NAME:
/// X ms per run (...); B bytes per rank (arena A + arguments G)", and with
/// mode=auto "chose mode=... for". Sets what it finds in `result`.
void parseSimulatorRemarks(const std::string &output, CompileResult &result);

} // namespace tpc::sched
