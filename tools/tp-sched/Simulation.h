// A trace-driven simulation of a shared cluster: jobs arrive, a policy
// allocates ranks and batch sizes at every arrival, completion and
// interval, jobs progress at the step simulator's predicted speed for
// their configuration and pay a restart for every change (writing and
// reading a checkpoint and starting the processes). Reports job completion
// times and utilisation per policy (docs/performance.md, "Scheduling
// several jobs").
#pragma once

#include "Policy.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tpc::sched {

/// One model's predicted steps on the simulated cluster: seconds per step
/// by (ranks, global batch); a configuration that does not compile or fit
/// in the devices' memory is absent.
struct ModelProfile {
  std::string name;
  double checkpointBytes = 0; // parameters and AdamW moments, f32
  std::map<std::pair<int, int64_t>, double> stepSeconds;
};

struct TraceJob {
  std::string name, model;
  double arrival = 0;
  Config requested;
  std::vector<Config> configs; // where the job may run
  double targetSamples = 0;
};

/// The documented distributions of a generated trace (seeded).
struct TraceOptions {
  int jobs = 240;
  uint64_t seed = 1;
  int ranks = 64;
  double meanInterarrival = 180; // seconds, Poisson arrivals
  /// A job's run time on its requested configuration: log-uniform.
  double minDuration = 300, maxDuration = 7200;
  /// Requested rank counts and their weights.
  std::vector<int> requestedRanks = {1, 2, 4, 8, 16};
  std::vector<double> requestedWeights = {0.2, 0.2, 0.25, 0.2, 0.15};
  int64_t samplesPerRank = 8; // requested global batch = 8 x ranks
};

/// A trace over `models` (each job's model uniform among them): requested
/// configuration, its batch range (half to four times the requested) and
/// rank counts (powers of two up to 4x the requested, as ONES caps a job's
/// growth), kept where the model's profile has the configuration.
std::vector<TraceJob> generateTrace(const std::vector<ModelProfile> &models,
                                    const TraceOptions &options);

struct SimulationOptions {
  int ranks = 64;
  double interval = 300;              // seconds between periodic decisions
  double restartSeconds = 30;         // starting the processes of a job
  double storageBytesPerSecond = 1e9; // writing and reading checkpoints
};

struct TimelineSpan {
  std::string job;
  int firstRank = 0, ranks = 0; // a job's ranks are consecutive slots here
  int64_t batch = 0;
  double start = 0, end = 0;
};

struct JobOutcome {
  std::string name;
  double arrival = 0, start = -1, finish = -1;
  int restarts = 0; // starts on another configuration after the first
};

struct SimulationResult {
  std::string policy;
  std::vector<JobOutcome> jobs;
  double averageJct = 0, medianJct = 0, p95Jct = 0, maxJct = 0;
  double makespan = 0;
  /// Rank-seconds training (restarts excluded) over ranks x makespan.
  double utilisation = 0;
  int decisions = 0, restarts = 0;
  std::vector<TimelineSpan> timeline;
};

SimulationResult simulate(const std::vector<TraceJob> &trace,
                          const std::vector<ModelProfile> &models,
                          Policy &policy, const SimulationOptions &options);

/// Traces and profiles as JSON files (tp-sched trace / simulate).
std::string traceJson(const std::vector<TraceJob> &trace);
std::vector<TraceJob> parseTrace(const std::string &text,
                                 const std::string &source);
std::string profilesJson(const std::vector<ModelProfile> &models);
std::vector<ModelProfile> parseProfiles(const std::string &text,
                                        const std::string &source);
std::string simulationJson(const std::vector<SimulationResult> &results);

} // namespace tpc::sched
