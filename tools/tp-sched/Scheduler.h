// tp-sched's scheduler: jobs from a queue directory share one pool of
// ranks; each runs as a sequence of segments (mpirun ... tp-run resuming
// its last checkpoint), and between segments a policy may give it another
// rank count and batch size: checkpoint, recompile (plans are compiled per
// configuration when the job is admitted) and resume on the new grid, the
// learning rate rescaled (JobSpec::learningRate). All of it is kept in
// STATE/state.json, written atomically after every change, so a restarted
// tp-sched continues where the last one stopped (docs/scheduling.md).
#pragma once

#include "JobSpec.h"
#include "Policy.h"
#include "Pool.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpc::sched {

struct SchedulerOptions {
  std::string stateDir;
  std::string policy = "ones";
  PolicyOptions policyOptions;
  /// Required when the state is new; a restart may repeat it (it must be
  /// the same) or leave it out.
  std::optional<Pool> pool;
  std::string cluster; // a cluster file: the simulator predicts each plan
  std::string binDir;  // tpc-import, tpc-opt, tp-run
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirunArgs;
  int threadsPerRank = 1;
  double interval = 60;       // seconds between periodic decisions
  double segmentSeconds = 20; // the planned length of a segment
  int64_t segmentSteps = 0;   // or a fixed number of steps (0: by time)
  bool follow = false;        // keep waiting for jobs when all are done
  double resizeGuess = 3;     // a resize's seconds until one is measured
};

/// One run of a job on one configuration: steps firstStep..lastStep.
struct Segment {
  int index = 0;
  Config config;
  std::vector<int> slots;
  std::string hosts, plan, pipeline, command;
  double lr = 0;
  int64_t firstStep = 0, lastStep = 0;
  double started = 0, ended = -1;
  /// "starting", "running", "done", "interrupted" (stopped before its last
  /// step: the scheduler was killed; the job resumes from its checkpoint)
  /// or "failed".
  std::string status = "starting";
  int sid = 0, exitCode = 0;
  std::optional<double> loss; // at lastStep
  double stepSeconds = 0;     // median, the first step of a run apart
  double wallSeconds = 0;
  /// Whether the scheduler asked the segment to stop after its current
  /// step (its stop file, tp-run --stop-file) to resize or preempt the job
  /// mid-segment; lastStep is then the step it stopped after, and
  /// plannedLastStep the one it was started for.
  bool stopRequested = false;
  int64_t plannedLastStep = 0;
};

struct CompiledPlan {
  Config config;
  std::string plan, pipeline;
  std::optional<double> predictedSeconds;
};

struct JobRecord {
  JobSpec spec;
  std::string status = "queued"; // queued, running, done, failed
  double arrival = 0;
  std::optional<double> finish;
  double service = 0; // rank-seconds
  int64_t step = 0, tokensSeen = 0;
  std::optional<double> loss;
  std::string error;
  Config target;
  std::vector<CompiledPlan> plans;
  std::vector<Config> infeasible;
  std::vector<Segment> segments;

  int64_t samplesDone() const { return tokensSeen / spec.seq; }
  bool active() const { return status == "queued" || status == "running"; }
};

class Scheduler {
public:
  /// Loads STATE/state.json or creates the state; takes STATE/.lock for
  /// the scheduler's life. Throws std::runtime_error with a one-line
  /// message (another tp-sched holds the state, a corrupt state file, a
  /// pool that differs from the state's).
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler &) = delete;
  Scheduler &operator=(const Scheduler &) = delete;

  /// Schedules until every job is done or failed (with `follow`, until
  /// killed); returns the number of failed jobs.
  int run();

  /// Checks a job spec and queues it in STATE/queue atomically; returns the
  /// queued file. Throws std::invalid_argument for a bad spec.
  static std::string submit(const std::string &stateDir,
                            const std::string &specPath);

  const std::vector<JobRecord> &jobs() const { return records; }

private:
  double clock() const;
  void load();
  void save();
  void recover();
  /// STATE/queue's job specs, by name.
  std::vector<std::filesystem::path> queuedSpecs() const;
  bool admit();
  bool admitOne(const std::string &path);
  bool reap();
  void endSegment(JobRecord &job, Segment &segment, int exitCode);
  void readProgress(JobRecord &job);
  void pruneCheckpoints(const JobRecord &job);
  void decide();
  /// Asks each running segment whose job the last decision moved to
  /// another configuration (or preempted) to stop after its current step.
  void requestStops();
  /// The file whose presence stops `segment` after its current step.
  std::string stopFile(const JobRecord &job, const Segment &segment) const;
  bool launch();
  void startSegment(JobRecord &job);
  JobView view(const JobRecord &job) const;
  double stepSecondsEstimate(const JobRecord &job, const Config &c) const;
  double resizeSecondsEstimate(const JobRecord &job) const;
  std::string jobDir(const JobRecord &job) const;
  void log(const std::string &line) const;

  SchedulerOptions options;
  std::unique_ptr<Policy> policy;
  std::optional<Pool> pool;
  std::vector<JobRecord> records;
  double created = 0;
  uint64_t decisions = 0;
  double lastDecision = -1e300;
  bool needDecision = true;
  int lockFd = -1;
};

/// The state file's jobs and segments as a timeline SVG: one row per rank
/// slot, one bar per segment labelled with its job and configuration.
void writeScheduleTimeline(const std::vector<JobRecord> &jobs, int ranks,
                           const std::string &title, const std::string &path);

/// Reads STATE/state.json for `tp-sched status` and `timeline`.
std::vector<JobRecord> readStateJobs(const std::string &stateDir, int &ranks,
                                     std::string &policy);

} // namespace tpc::sched
