// tp-sched: several training jobs on one pool of ranks (docs/scheduling.md).
//
//   tp-sched submit STATE JOB.json...       queue jobs
//   tp-sched run STATE --policy ones --ranks 4 [--cluster FILE] ...
//   tp-sched status STATE                   one line per job
//   tp-sched timeline STATE -o FILE.svg     the segments as a Gantt chart
//   tp-sched profile ... / trace ... / simulate ...   the trace-driven study
#include "Compile.h"
#include "JobSpec.h"
#include "Plot.h"
#include "Policy.h"
#include "Pool.h"
#include "Scheduler.h"
#include "Simulation.h"

#include "tpc/runtime/Files.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tpc::sched;

namespace {

std::string ownDirectory() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string(".") : self.parent_path().string();
}

std::string readAll(const std::string &path, const char *what) {
  return tpc::runtime::readRegularFile(path, uint64_t(1) << 30, what);
}

std::vector<std::string> splitList(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// tp-sched profile: the simulator's step per (ranks, batch) for each model.
int profile(const std::vector<std::string> &models, int64_t seq,
            const std::string &cluster, const std::string &mode,
            const std::vector<int64_t> &batches, int maxRanks,
            int64_t maxPerRank, const std::string &output,
            const std::string &binDir) {
  const nlohmann::json clusterJson =
      nlohmann::json::parse(readAll(cluster, "cluster file"));
  const double memory = clusterJson.at("device").value("memory_bytes", 1e300);
  std::vector<ModelProfile> profiles;
  const std::string work = (fs::temp_directory_path() /
                            ("tp-sched-profile-" + std::to_string(::getpid())))
                               .string();
  for (const std::string &entry : models) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--model '" + entry +
                                  "' must be NAME=CONFIG.json");
    ModelProfile model;
    model.name = entry.substr(0, eq);
    const std::string config = entry.substr(eq + 1);
    {
      // What a checkpoint holds: one whole replica's parameters and AdamW
      // moments (the simulator's argument bytes on one rank, whether or not
      // they fit a device; the inputs are a rounding error beside them).
      CompileRequest whole;
      whole.config = config;
      whole.batch = batches.front();
      whole.seq = seq;
      whole.ranks = 1;
      whole.mode = "dp";
      whole.cluster = cluster;
      whole.workDir = work + "/" + model.name;
      CompileResult result = compileJob(binDir, whole);
      if (!result.ok || result.argumentBytes <= 0)
        throw std::runtime_error(
            "model '" + model.name +
            "' does not compile on one rank: " + result.error);
      model.checkpointBytes = result.argumentBytes;
    }
    for (int64_t batch : batches)
      for (int ranks = 1; ranks <= maxRanks; ranks *= 2) {
        if (batch % ranks != 0 || batch / ranks > maxPerRank)
          continue;
        CompileRequest request;
        request.config = config;
        request.batch = batch;
        request.seq = seq;
        request.ranks = ranks;
        request.mode = mode;
        request.cluster = cluster;
        request.workDir = work + "/" + model.name;
        CompileResult result = compileJob(binDir, request);
        const bool fits =
            result.ok && result.stepSeconds && result.bytesPerRank <= memory;
        std::fprintf(stderr, "%s %d x %lld: %s\n", model.name.c_str(), ranks,
                     (long long)batch,
                     !result.ok ? ("does not compile: " + result.error).c_str()
                     : !fits    ? "does not fit in the device's memory"
                                : (std::to_string(*result.stepSeconds * 1e3) +
                                " ms/step, " + result.mode)
                                   .c_str());
        if (!fits)
          continue;
        model.stepSeconds[{ranks, batch}] = *result.stepSeconds;
      }
    if (model.stepSeconds.empty())
      throw std::runtime_error("model '" + model.name +
                               "': no configuration fits the cluster");
    profiles.push_back(std::move(model));
  }
  fs::remove_all(work);
  tpc::runtime::writeFileAtomically(output, profilesJson(profiles));
  return 0;
}

/// The policies' settings, for `run` and `simulate` alike; each default is
/// `options`' own.
void addPolicyOptions(CLI::App &app, PolicyOptions &options) {
  app.add_option("--seed", options.seed, "ONES's seed")->capture_default_str();
  app.add_option("--min-run-seconds", options.minRunSeconds,
                 "ONES moves no job that ran less")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--las-thresholds", options.lasThresholds,
                 "LAS's queue thresholds in rank-seconds")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
}

std::string formatHours(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f h", seconds / 3600);
  return buf;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"Schedules several training jobs on one pool of ranks: each "
               "job's rank count and batch size change by checkpoint and "
               "resume, as a policy (ONES, FIFO, Tiresias-like LAS) decides"};
  app.require_subcommand(1);
  std::string stateDir, binDir = ownDirectory();

  // submit
  CLI::App *submit = app.add_subcommand("submit", "Queue job specs");
  std::vector<std::string> specs;
  submit->add_option("state", stateDir, "The scheduler's state directory")
      ->required();
  submit->add_option("jobs", specs, "Job spec files (JSON)")->required();

  // run
  CLI::App *run = app.add_subcommand("run", "Schedule the queued jobs");
  SchedulerOptions options;
  int ranks = 0;
  std::string hostfile;
  bool slurm = false;
  run->add_option("state", stateDir, "The scheduler's state directory")
      ->required();
  run->add_option("--policy", options.policy, "ones, fifo or las")
      ->check(CLI::IsMember(policyNames()));
  auto *ranksOption =
      run->add_option("--ranks", ranks, "A pool of N ranks on this host")
          ->check(CLI::Range(1, 1 << 20));
  auto *hostfileOption =
      run->add_option("--hostfile", hostfile, "The pool: an Open MPI hostfile")
          ->check(CLI::ExistingFile)
          ->excludes(ranksOption);
  run->add_flag("--slurm", slurm,
                "The pool: this Slurm allocation (SLURM_JOB_NODELIST, "
                "SLURM_TASKS_PER_NODE)")
      ->excludes(ranksOption)
      ->excludes(hostfileOption);
  run->add_option("--cluster", options.cluster,
                  "Cluster file: the simulator predicts every plan's step")
      ->check(CLI::ExistingFile);
  run->add_option("--interval", options.interval,
                  "Seconds between periodic decisions (default 60)")
      ->check(CLI::PositiveNumber);
  run->add_option("--segment-seconds", options.segmentSeconds,
                  "A segment's planned length in seconds (default 20)")
      ->check(CLI::PositiveNumber);
  run->add_option("--segment-steps", options.segmentSteps,
                  "Steps per segment instead (tests and demos)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  addPolicyOptions(*run, options.policyOptions);
  run->add_option("--threads-per-rank", options.threadsPerRank,
                  "tp-run --threads (default 1)")
      ->check(CLI::Range(1, 1024));
  run->add_option("--mpirun", options.mpirun, "mpirun (default: from PATH)");
  run->add_option("--mpirun-arg", options.mpirunArgs,
                  "An argument for every mpirun (repeat)")
      ->allow_extra_args(false);
  run->add_flag("--follow", options.follow,
                "Keep waiting for jobs when all are done");
  run->add_option("--bin", binDir, "Where tpc-import, tpc-opt, tp-run are")
      ->check(CLI::ExistingDirectory);

  // status, timeline
  CLI::App *status = app.add_subcommand("status", "One line per job");
  status->add_option("state", stateDir)->required();
  CLI::App *timeline = app.add_subcommand("timeline", "Draw the schedule");
  std::string timelineOut;
  timeline->add_option("state", stateDir)->required();
  timeline->add_option("-o,--output", timelineOut, "SVG file")->required();

  // profile
  CLI::App *profileCommand = app.add_subcommand(
      "profile", "Predict each model's step per rank count and batch size "
                 "on a cluster (the trace simulation's speeds)");
  std::vector<std::string> models;
  int64_t seq = 1024, maxPerRank = 32;
  std::string cluster, mode = "dp", profileOut,
                       batchList = "4,8,16,32,64,128,256,512";
  int maxRanks = 64;
  profileCommand->add_option("--model", models, "NAME=CONFIG.json (repeat)")
      ->required();
  profileCommand->add_option("--seq", seq, "Sequence length (default 1024)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  profileCommand->add_option("--cluster", cluster, "Cluster file")
      ->required()
      ->check(CLI::ExistingFile);
  profileCommand->add_option("--mode", mode, "dp, 1d or auto (default dp)")
      ->check(CLI::IsMember({"dp", "1d", "auto"}));
  profileCommand->add_option("--batches", batchList,
                             "Global batch sizes (default 4,...,512)");
  profileCommand->add_option("--max-ranks", maxRanks, "(default 64)")
      ->check(CLI::Range(1, 1 << 16));
  profileCommand
      ->add_option("--max-per-rank", maxPerRank,
                   "Most sequences per rank (default 32)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  profileCommand->add_option("-o,--output", profileOut)->required();
  profileCommand->add_option("--bin", binDir)->check(CLI::ExistingDirectory);

  // trace
  CLI::App *traceCommand =
      app.add_subcommand("trace", "Generate a job trace (seeded)");
  TraceOptions traceOptions;
  std::string profilesPath, traceOut;
  traceCommand->add_option("--profiles", profilesPath)
      ->required()
      ->check(CLI::ExistingFile);
  traceCommand->add_option("--jobs", traceOptions.jobs, "(default 240)")
      ->check(CLI::Range(1, 1000000));
  traceCommand->add_option("--seed", traceOptions.seed, "(default 1)");
  traceCommand->add_option("--ranks", traceOptions.ranks, "(default 64)")
      ->check(CLI::Range(1, 1 << 20));
  traceCommand
      ->add_option("--interarrival", traceOptions.meanInterarrival,
                   "Mean seconds between arrivals (default 180)")
      ->check(CLI::PositiveNumber);
  traceCommand
      ->add_option("--min-duration", traceOptions.minDuration,
                   "(default 300 s)")
      ->check(CLI::PositiveNumber);
  traceCommand
      ->add_option("--max-duration", traceOptions.maxDuration,
                   "(default 7200 s)")
      ->check(CLI::PositiveNumber);
  traceCommand->add_option("-o,--output", traceOut)->required();

  // simulate
  CLI::App *simulateCommand = app.add_subcommand(
      "simulate", "Replay a trace under each policy; print JCTs and use");
  std::string tracePath, simulationOut, policyList = "fifo,las,ones",
                                        timelineDir;
  SimulationOptions simOptions;
  PolicyOptions simPolicy;
  // Hours-long jobs: ONES's "two epochs" before a job may move again.
  simPolicy.minRunSeconds = 1800;
  simulateCommand->add_option("--trace", tracePath)
      ->required()
      ->check(CLI::ExistingFile);
  simulateCommand->add_option("--profiles", profilesPath)
      ->required()
      ->check(CLI::ExistingFile);
  simulateCommand->add_option("--policies", policyList,
                              "(default fifo,las,ones)");
  simulateCommand->add_option("--ranks", simOptions.ranks, "(default 64)")
      ->check(CLI::Range(1, 1 << 20));
  simulateCommand
      ->add_option("--interval", simOptions.interval, "(default 300 s)")
      ->check(CLI::PositiveNumber);
  simulateCommand
      ->add_option("--restart-seconds", simOptions.restartSeconds,
                   "Starting a job's processes (default 30)")
      ->check(CLI::NonNegativeNumber);
  simulateCommand
      ->add_option("--storage-bandwidth", simOptions.storageBytesPerSecond,
                   "Checkpoint bytes/s (default 1e9)")
      ->check(CLI::PositiveNumber);
  addPolicyOptions(*simulateCommand, simPolicy);
  simulateCommand->add_option("-o,--output", simulationOut, "Results JSON");
  simulateCommand->add_option("--timelines", timelineDir,
                              "Write POLICY.svg timelines here");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::cerr << "tp-sched: error: " << e.what() << "\n";
    return 2;
  }
  try {
    if (*submit) {
      for (const std::string &spec : specs)
        std::cout << "queued " << Scheduler::submit(stateDir, spec) << "\n";
      return 0;
    }
    if (*run) {
      if (*ranksOption)
        options.pool = Pool::local(ranks);
      else if (!hostfile.empty())
        options.pool = Pool::hostfile(hostfile);
      else if (slurm) {
        const char *nodes = std::getenv("SLURM_JOB_NODELIST");
        const char *tasks = std::getenv("SLURM_TASKS_PER_NODE");
        if (!nodes || !tasks)
          throw std::invalid_argument("--slurm: SLURM_JOB_NODELIST and "
                                      "SLURM_TASKS_PER_NODE are not set");
        options.pool = Pool::slurm(nodes, tasks);
      }
      options.stateDir = stateDir;
      options.binDir = binDir;
      if (!options.cluster.empty())
        options.cluster = fs::absolute(options.cluster).string();
      Scheduler scheduler(options);
      return scheduler.run() == 0 ? 0 : 1;
    }
    if (*status || *timeline) {
      int poolRanks = 0;
      std::string policy;
      std::vector<JobRecord> jobs = readStateJobs(stateDir, poolRanks, policy);
      if (*timeline) {
        writeScheduleTimeline(jobs, poolRanks, "tp-sched " + policy,
                              timelineOut);
        return 0;
      }
      std::printf("%-16s %-8s %8s %10s %9s %8s\n", "job", "status", "step",
                  "samples", "segments", "loss");
      for (const JobRecord &job : jobs)
        std::printf(
            "%-16s %-8s %8lld %10lld %9zu %8s%s\n", job.spec.name.c_str(),
            job.status.c_str(), (long long)job.step,
            (long long)job.samplesDone(), job.segments.size(),
            job.loss ? std::to_string(*job.loss).substr(0, 8).c_str() : "-",
            job.error.empty() ? "" : ("  " + job.error).c_str());
      return 0;
    }
    if (*profileCommand) {
      std::vector<int64_t> batches;
      for (const std::string &b : splitList(batchList)) {
        char *end = nullptr;
        long long v = std::strtoll(b.c_str(), &end, 10);
        if (*end != '\0' || v < 1)
          throw std::invalid_argument("--batches: '" + b +
                                      "' is not a positive integer");
        batches.push_back(v);
      }
      return profile(models, seq, cluster, mode, batches, maxRanks, maxPerRank,
                     profileOut, binDir);
    }
    if (*traceCommand) {
      if (traceOptions.maxDuration < traceOptions.minDuration)
        throw std::invalid_argument("--max-duration is below --min-duration");
      std::vector<ModelProfile> profiles =
          parseProfiles(readAll(profilesPath, "profiles"), profilesPath);
      tpc::runtime::writeFileAtomically(
          traceOut, traceJson(generateTrace(profiles, traceOptions)));
      return 0;
    }
    if (*simulateCommand) {
      std::vector<ModelProfile> profiles =
          parseProfiles(readAll(profilesPath, "profiles"), profilesPath);
      std::vector<TraceJob> trace =
          parseTrace(readAll(tracePath, "trace"), tracePath);
      std::vector<SimulationResult> results;
      if (!timelineDir.empty())
        fs::create_directories(timelineDir);
      std::printf("%-6s %10s %10s %10s %10s %10s %6s %9s\n", "policy",
                  "avg JCT", "median", "p95", "max", "makespan", "use",
                  "restarts");
      for (const std::string &name : splitList(policyList)) {
        std::unique_ptr<Policy> policy = makePolicy(name, simPolicy);
        SimulationResult r = simulate(trace, profiles, *policy, simOptions);
        std::printf(
            "%-6s %10s %10s %10s %10s %10s %5.1f%% %9d\n", name.c_str(),
            formatHours(r.averageJct).c_str(), formatHours(r.medianJct).c_str(),
            formatHours(r.p95Jct).c_str(), formatHours(r.maxJct).c_str(),
            formatHours(r.makespan).c_str(), 100 * r.utilisation, r.restarts);
        if (!timelineDir.empty()) {
          std::vector<tpc::tools::TimelineBar> bars;
          for (const TimelineSpan &s : r.timeline)
            bars.push_back(
                {s.job, std::to_string(s.ranks) + "x" + std::to_string(s.batch),
                 s.firstRank, s.ranks, s.start, s.end});
          tpc::tools::writeTimelineSvg(
              (fs::path(timelineDir) / (name + ".svg")).string(), bars,
              simOptions.ranks, "simulated " + name);
        }
        results.push_back(std::move(r));
      }
      if (!simulationOut.empty())
        tpc::runtime::writeFileAtomically(simulationOut,
                                          simulationJson(results));
      return 0;
    }
  } catch (const std::exception &e) {
    std::cerr << "tp-sched: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
