// Scheduling policies for several training jobs on one pool of ranks: each
// decision maps every active job to a configuration (ranks and global batch
// size) or to waiting. The same policies drive the real scheduler
// (Scheduler.h) and the trace-driven simulation (Simulation.h), so what
// docs/performance.md measures is what tp-sched runs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpc::sched {

/// Where a job runs: `ranks` ranks stepping on global batches of `batch`
/// samples. ranks 0: it waits.
struct Config {
  int ranks = 0;
  int64_t batch = 0;
  bool operator==(const Config &) const = default;
  bool runs() const { return ranks > 0; }
};

/// One configuration a job may run in and its expected throughput.
struct Option {
  Config config;
  double samplesPerSecond = 0;
};

/// What a policy knows of one active (waiting or running) job.
struct JobView {
  std::string name;
  double arrival = 0;          // seconds on the scheduler's clock
  double service = 0;          // rank-seconds the job has run so far
  double remainingSamples = 0; // to its target (or its bound)
  /// The configurations it may run in (non-empty), each with its expected
  /// samples per second (measured, else the simulator's prediction).
  std::vector<Option> options;
  Config requested; // the fixed configuration of FIFO and LAS
  Config current;   // where it runs now (ranks 0: not running)
  /// What the last decision gave it, when that is not applied yet (a
  /// running job changes configuration at its segment's end): ONES keeps
  /// such a decision unless a new one is clearly better.
  std::optional<Config> pending;
  double resizeSeconds = 0; // starting on another configuration costs this
  /// Seconds it has run since its last start; ONES leaves a job alone until
  /// it ran PolicyOptions::minRunSeconds.
  double runningSeconds = 0;
};

/// Per job of the view, in its order.
using Allocation = std::vector<Config>;

struct PolicyOptions {
  uint64_t seed = 1;
  // ONES: population, generations per decision, per-job probabilities of
  // taking the other parent's gene and of mutating.
  int population = 16;
  int generations = 30;
  double crossover = 0.5;
  double mutation = 0.3;
  /// A running job is not moved before it ran this long (ONES: two
  /// epochs), so that the search cannot thrash.
  double minRunSeconds = 0;
  /// ONES keeps the last decision while it is pending unless the best new
  /// one predicts a sum of completion times this much (relatively) lower:
  /// measurements arriving from one segment end to the next must not flip
  /// a decision back before it took effect.
  double keepMargin = 0.05;
  /// Tiresias-like LAS: the attained-service thresholds (rank-seconds)
  /// between its priority queues.
  std::vector<double> lasThresholds = {3600, 36000};
};

class Policy {
public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  /// The configuration of every job in `jobs` (the same order), within
  /// `ranks` in all. `decision` numbers the decisions of a schedule: a
  /// seeded policy draws from (seed, decision), so a restarted scheduler
  /// decides as the first one would have.
  virtual Allocation decide(const std::vector<JobView> &jobs, int ranks,
                            uint64_t decision) = 0;
};

/// "fifo", "las" or "ones"; throws std::invalid_argument naming the others.
std::unique_ptr<Policy> makePolicy(const std::string &name,
                                   const PolicyOptions &options = {});

/// The policies makePolicy knows.
const std::vector<std::string> &policyNames();

/// The expected throughput of `config` for `job` (0 when not an option).
double samplesPerSecond(const JobView &job, const Config &config);

/// ONES's fitness of an allocation (lower is better): the sum over jobs of
/// their predicted completion times from now. A running job finishes its
/// remaining samples at its configuration's throughput, plus the cost of a
/// resize when its configuration changes; a waiting one waits for the
/// first of them to finish, then runs at its fastest option.
double predictedCompletionSum(const std::vector<JobView> &jobs,
                              const Allocation &allocation);

/// ONES's online evolutionary search on its own, for tests: one decision's
/// population after its generations, best first, with their fitness.
struct Candidate {
  std::vector<int> genes; // per job: index into its options, -1 waits
  double fitness = 0;
};
std::vector<Candidate> evolve(const std::vector<JobView> &jobs, int ranks,
                              const PolicyOptions &options, uint64_t decision);

} // namespace tpc::sched
