#include "Scheduler.h"

#include "Compile.h"
#include "Plot.h"
#include "Process.h"

#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Files.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sys/file.h>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace tpc::sched {

// The state file's records (Scheduler::save, parseJobRecord), one place per
// type for both directions; found by nlohmann's ADL lookup. Absent optional
// numbers are null; fields added since version 1 of the state file have
// defaults when read.

/// [ranks, batch].
template <class Json> void to_json(Json &j, const Config &c) {
  j = Json::array({c.ranks, c.batch});
}
template <class Json> void from_json(const Json &j, Config &c) {
  c = {j.at(0).template get<int>(), j.at(1).template get<int64_t>()};
}

template <class Json> Json optionalNumber(const std::optional<double> &v) {
  return v && std::isfinite(*v) ? Json(*v) : Json(nullptr);
}
template <class Json>
std::optional<double> readOptional(const Json &j, const char *key) {
  if (!j.contains(key) || j[key].is_null())
    return std::nullopt;
  return j[key].template get<double>();
}

template <class Json> void to_json(Json &j, const CompiledPlan &p) {
  j = Json{{"config", p.config},
           {"plan", p.plan},
           {"pipeline", p.pipeline},
           {"predicted_seconds", optionalNumber<Json>(p.predictedSeconds)}};
}
template <class Json> void from_json(const Json &j, CompiledPlan &p) {
  j.at("config").get_to(p.config);
  j.at("plan").get_to(p.plan);
  j.at("pipeline").get_to(p.pipeline);
  p.predictedSeconds = readOptional(j, "predicted_seconds");
}

template <class Json> void to_json(Json &j, const Segment &s) {
  j = Json{{"index", s.index},
           {"config", s.config},
           {"slots", s.slots},
           {"hosts", s.hosts},
           {"plan", s.plan},
           {"pipeline", s.pipeline},
           {"command", s.command},
           {"lr", s.lr},
           {"first_step", s.firstStep},
           {"last_step", s.lastStep},
           {"started", s.started},
           {"ended", s.ended},
           {"status", s.status},
           {"sid", s.sid},
           {"exit", s.exitCode},
           {"loss", optionalNumber<Json>(s.loss)},
           {"step_seconds", s.stepSeconds},
           {"wall_seconds", s.wallSeconds},
           {"stop_requested", s.stopRequested},
           {"planned_last_step", s.plannedLastStep}};
}
template <class Json> void from_json(const Json &j, Segment &s) {
  j.at("index").get_to(s.index);
  j.at("config").get_to(s.config);
  j.at("slots").get_to(s.slots);
  j.at("hosts").get_to(s.hosts);
  j.at("plan").get_to(s.plan);
  j.at("pipeline").get_to(s.pipeline);
  j.at("command").get_to(s.command);
  j.at("lr").get_to(s.lr);
  j.at("first_step").get_to(s.firstStep);
  j.at("last_step").get_to(s.lastStep);
  j.at("started").get_to(s.started);
  j.at("ended").get_to(s.ended);
  j.at("status").get_to(s.status);
  j.at("sid").get_to(s.sid);
  j.at("exit").get_to(s.exitCode);
  s.loss = readOptional(j, "loss");
  j.at("step_seconds").get_to(s.stepSeconds);
  j.at("wall_seconds").get_to(s.wallSeconds);
  s.stopRequested = j.value("stop_requested", false);
  s.plannedLastStep = j.value("planned_last_step", s.lastStep);
}

namespace {

constexpr int kStateVersion = 1;
constexpr uint64_t kMaxStateBytes = uint64_t(256) << 20;

double wallSeconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string configName(const Config &c) {
  return std::to_string(c.ranks) + "x" + std::to_string(c.batch);
}

std::string readText(const std::string &path, const char *what) {
  return runtime::readRegularFile(path, kMaxStateBytes, what);
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// Why a segment failed: tp-run's first error line (its ranks print the
/// same), else the log's last line (mpirun's own banner follows it).
std::string failureLine(const std::string &path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.rfind("tp-run: error: ", 0) == 0)
      return line;
    if (line.find_first_not_of(" \t\r-") != std::string::npos)
      last = line;
  }
  return last.empty() ? "no output" : last;
}

bool byArrival(const JobRecord *a, const JobRecord *b) {
  return std::tie(a->arrival, a->spec.name) <
         std::tie(b->arrival, b->spec.name);
}

/// One job of the state file (Scheduler::save writes them).
JobRecord parseJobRecord(const json &j, const std::string &path) {
  JobRecord job;
  job.spec = parseJobSpec(j.at("spec").dump(), path + ": a job's spec", "/");
  j.at("status").get_to(job.status);
  j.at("arrival").get_to(job.arrival);
  job.finish = readOptional(j, "finish");
  j.at("service").get_to(job.service);
  j.at("step").get_to(job.step);
  j.at("tokens_seen").get_to(job.tokensSeen);
  job.loss = readOptional(j, "loss");
  j.at("error").get_to(job.error);
  j.at("target").get_to(job.target);
  j.at("plans").get_to(job.plans);
  j.at("infeasible").get_to(job.infeasible);
  j.at("segments").get_to(job.segments);
  return job;
}

} // namespace

Scheduler::Scheduler(SchedulerOptions opts) : options(std::move(opts)) {
  // Segments run elsewhere (their own sessions, Open MPI's session
  // directories): every path they get is absolute.
  options.stateDir = fs::absolute(options.stateDir).lexically_normal().string();
  fs::create_directories(fs::path(options.stateDir) / "queue");
  fs::create_directories(fs::path(options.stateDir) / "jobs");
  const std::string lock = (fs::path(options.stateDir) / ".lock").string();
  lockFd =
      ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lockFd < 0)
    throw std::runtime_error(lock + ": " + std::strerror(errno));
  if (::flock(lockFd, LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error(options.stateDir +
                             ": another tp-sched schedules this state");
  load();
  policy = makePolicy(options.policy, options.policyOptions);
}

Scheduler::~Scheduler() {
  if (lockFd >= 0)
    ::close(lockFd);
}

double Scheduler::clock() const { return wallSeconds() - created; }

void Scheduler::log(const std::string &line) const {
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "[%8.1f s] ", clock());
  std::cout << stamp << line << std::endl;
}

std::string Scheduler::jobDir(const JobRecord &job) const {
  return (fs::path(options.stateDir) / "jobs" / job.spec.name).string();
}

void Scheduler::load() {
  const std::string path = (fs::path(options.stateDir) / "state.json").string();
  if (!fs::exists(path)) {
    if (!options.pool)
      throw std::runtime_error(options.stateDir +
                               ": a new state needs the pool (--ranks, "
                               "--hostfile or --slurm)");
    pool = options.pool;
    created = wallSeconds();
    save();
    return;
  }
  auto fail = [&](const std::string &what) {
    return std::runtime_error(path + ": " + what);
  };
  json root;
  try {
    root = json::parse(readText(path, "scheduler state"));
  } catch (const json::exception &e) {
    throw fail(std::string("invalid JSON: ") + e.what());
  }
  try {
    if (root.at("format") != "tpc-sched-state")
      throw fail("not a tp-sched state file");
    if (root.at("version") != kStateVersion)
      throw fail("version " + root.at("version").dump() +
                 "; this tp-sched reads " + std::to_string(kStateVersion));
    if (root.at("policy") != options.policy)
      throw fail("the state is scheduled by policy '" +
                 root.at("policy").get<std::string>() + "', not '" +
                 options.policy + "'");
    std::vector<Host> hosts;
    for (const json &h : root.at("hosts"))
      hosts.push_back(
          {h.at("name").get<std::string>(), h.at("slots").get<int>()});
    pool.emplace(hosts);
    if (options.pool) {
      bool same = options.pool->hosts().size() == hosts.size();
      for (size_t h = 0; same && h < hosts.size(); ++h)
        same = options.pool->hosts()[h].name == hosts[h].name &&
               options.pool->hosts()[h].slots == hosts[h].slots;
      if (!same)
        throw fail("the state was scheduled on another pool of ranks");
    }
    created = root.at("created").get<double>();
    decisions = root.at("decisions").get<uint64_t>();
    for (const json &j : root.at("jobs"))
      records.push_back(parseJobRecord(j, path));
  } catch (const json::exception &e) {
    throw fail(std::string("malformed: ") + e.what());
  } catch (const std::invalid_argument &e) {
    throw fail(e.what());
  }
}

void Scheduler::save() {
  ordered_json root;
  root["format"] = "tpc-sched-state";
  root["version"] = kStateVersion;
  root["policy"] = options.policy;
  root["hosts"] = ordered_json::array();
  for (const Host &h : pool->hosts())
    root["hosts"].push_back({{"name", h.name}, {"slots", h.slots}});
  root["created"] = created;
  root["decisions"] = decisions;
  root["jobs"] = ordered_json::array();
  for (const JobRecord &job : records)
    root["jobs"].push_back(
        {{"spec", job.spec.toJson()},
         {"status", job.status},
         {"arrival", job.arrival},
         {"finish", optionalNumber<ordered_json>(job.finish)},
         {"service", job.service},
         {"step", job.step},
         {"tokens_seen", job.tokensSeen},
         {"samples_done", job.samplesDone()},
         {"loss", optionalNumber<ordered_json>(job.loss)},
         {"error", job.error},
         {"target", job.target},
         {"plans", job.plans},
         {"infeasible", job.infeasible},
         {"segments", job.segments}});
  runtime::writeFileAtomically(
      (fs::path(options.stateDir) / "state.json").string(),
      root.dump(1) + "\n");
}

std::string Scheduler::submit(const std::string &stateDir,
                              const std::string &specPath) {
  const std::string text =
      runtime::readRegularFile(specPath, uint64_t(1) << 20, "job spec");
  JobSpec spec = parseJobSpec(text, specPath,
                              fs::absolute(specPath).parent_path().string());
  const fs::path queue = fs::path(stateDir) / "queue";
  fs::create_directories(queue);
  const std::string queued = (queue / (spec.name + ".json")).string();
  if (fs::exists(queued))
    throw std::invalid_argument(specPath + ": a job named '" + spec.name +
                                "' is already queued");
  // Paths made absolute, so the queue does not depend on where the spec was.
  runtime::writeFileAtomically(queued, spec.toJson().dump(1) + "\n");
  return queued;
}

bool Scheduler::admitOne(const std::string &path) {
  const std::string name = fs::path(path).filename().string();
  auto reject = [&](const std::string &why) {
    const fs::path rejected = fs::path(options.stateDir) / "queue" / "rejected";
    fs::create_directories(rejected);
    runtime::writeFileAtomically((rejected / (name + ".error")).string(),
                                 why + "\n");
    fs::rename(path, rejected / name);
    log("rejected " + why);
  };
  JobSpec spec;
  try {
    spec = parseJobSpec(readText(path, "job spec"), path,
                        fs::path(path).parent_path().string());
  } catch (const std::exception &e) {
    reject(e.what());
    return false;
  }
  for (const JobRecord &job : records)
    if (job.spec.name == spec.name) {
      if (job.spec.toJson() == spec.toJson()) { // admitted before a crash
        fs::remove(path);
        return false;
      }
      reject(path + ": a job named '" + spec.name + "' was already admitted");
      return false;
    }
  if (spec.mode == "auto" && options.cluster.empty()) {
    reject(path + ": mode auto needs tp-sched's --cluster");
    return false;
  }
  if (spec.ranks > pool->size()) {
    reject(path + ": asks for " + std::to_string(spec.ranks) +
           " ranks; the pool has " + std::to_string(pool->size()));
    return false;
  }
  JobRecord job;
  job.spec = spec;
  job.arrival = clock();
  // Every configuration within the pool is compiled now: the policy then
  // chooses among plans that exist, with the simulator's predictions.
  const std::string dir = jobDir(job);
  fs::create_directories(fs::path(dir) / "plans");
  std::string lastError;
  for (const Config &c : spec.configs()) {
    if (c.ranks > pool->size())
      continue;
    CompileRequest request;
    request.config = spec.config;
    request.batch = c.batch;
    request.seq = spec.seq;
    request.ranks = c.ranks;
    request.mode = spec.mode;
    request.extraOptions = spec.pipeline;
    request.cluster = options.cluster;
    request.plan =
        (fs::path(dir) / "plans" / (configName(c) + ".tpplan")).string();
    request.workDir = (fs::path(dir) / "plans").string();
    CompileResult compiled = compileJob(options.binDir, request);
    if (!compiled.ok) {
      job.infeasible.push_back(c);
      lastError = compiled.error;
      continue;
    }
    std::string pipeline = compiled.mode;
    if (!spec.pipeline.empty())
      pipeline += " " + spec.pipeline;
    job.plans.push_back({c, request.plan, pipeline, compiled.stepSeconds});
  }
  const bool requestedCompiles = std::any_of(
      job.plans.begin(), job.plans.end(),
      [&](const CompiledPlan &p) { return p.config == spec.requested(); });
  if (!requestedCompiles) {
    fs::remove_all(dir);
    reject(path + ": the requested configuration (" +
           configName(spec.requested()) + ") does not compile: " + lastError);
    return false;
  }
  records.push_back(std::move(job));
  save();
  fs::remove(path);
  log("admitted " + spec.name + ": " +
      std::to_string(records.back().plans.size()) +
      " configurations compiled, " +
      std::to_string(records.back().infeasible.size()) + " do not compile");
  return true;
}

std::vector<fs::path> Scheduler::queuedSpecs() const {
  std::vector<fs::path> queued;
  for (const auto &entry :
       fs::directory_iterator(fs::path(options.stateDir) / "queue"))
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      queued.push_back(entry.path());
  std::sort(queued.begin(), queued.end());
  return queued;
}

bool Scheduler::admit() {
  bool any = false;
  for (const fs::path &path : queuedSpecs())
    any |= admitOne(path.string());
  return any;
}

void Scheduler::readProgress(JobRecord &job) {
  const fs::path checkpoints = fs::path(jobDir(job)) / "checkpoints";
  const fs::path latest = checkpoints / "latest";
  if (!fs::exists(latest))
    return;
  std::string name;
  std::ifstream(latest) >> name;
  json manifest = json::parse(readText(
      (checkpoints / name / "manifest.json").string(), "checkpoint manifest"));
  job.step = manifest.at("step").get<int64_t>();
  job.tokensSeen = manifest.at("tokens_seen").get<int64_t>();
}

void Scheduler::pruneCheckpoints(const JobRecord &job) {
  // Each segment adds a whole checkpoint (1.5 GB for GPT-2-small); the
  // last two are kept: the one the next segment resumes and the one
  // before, should that be damaged.
  const fs::path dir = fs::path(jobDir(job)) / "checkpoints";
  std::vector<std::string> steps;
  for (const auto &entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && runtime::isCheckpointStepName(name))
      steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + 2 < steps.size(); ++i)
    fs::remove_all(dir / steps[i]);
}

void Scheduler::endSegment(JobRecord &job, Segment &segment, int exitCode) {
  segment.ended = clock();
  segment.exitCode = exitCode;
  segment.wallSeconds = segment.ended - segment.started;
  pool->release(job.spec.name);
  job.service += double(segment.config.ranks) * segment.wallSeconds;
  readProgress(job);
  std::error_code ignored;
  fs::remove(stopFile(job, segment), ignored);
  // Stopped on request after a step, at its checkpoint: a shorter segment.
  if (segment.stopRequested && exitCode == 0 && job.step >= segment.firstStep &&
      job.step < segment.lastStep)
    segment.lastStep = job.step;
  const std::string metrics =
      (fs::path(jobDir(job)) /
       ("segment-" + std::to_string(segment.index) + ".json"))
          .string();
  if (exitCode == 0 && job.step == segment.lastStep && fs::exists(metrics)) {
    json report = json::parse(readText(metrics, "run report"));
    std::vector<double> seconds;
    for (const json &r : report.at("loss_curve")) {
      seconds.push_back(r.at("seconds").get<double>());
      if (!r.at("loss").is_null())
        segment.loss = r.at("loss").get<double>();
    }
    // The first step of a run sets up (allocations, first-touch).
    if (seconds.size() > 1)
      seconds.erase(seconds.begin());
    segment.stepSeconds = median(seconds);
    segment.status = "done";
    job.loss = segment.loss;
    pruneCheckpoints(job);
  } else if (job.step == segment.lastStep) {
    segment.status = "done"; // its checkpoint is complete
  } else if (exitCode == 0 || segment.status == "interrupted") {
    segment.status = "interrupted";
  } else {
    segment.status = "failed";
    job.status = "failed";
    job.error =
        "segment " + std::to_string(segment.index) + " exited " +
        std::to_string(exitCode) + ": " +
        failureLine(fs::path(jobDir(job)) /
                    ("segment-" + std::to_string(segment.index) + ".log"));
    job.finish = clock();
    log("failed " + job.spec.name + ": " + job.error);
    needDecision = true;
    return;
  }
  const bool reached =
      job.samplesDone() >= job.spec.maxSamples ||
      (job.spec.targetLoss && job.loss && *job.loss <= *job.spec.targetLoss);
  job.status = reached ? "done" : "queued";
  if (reached) {
    job.finish = clock();
    log("done " + job.spec.name + " at step " + std::to_string(job.step) +
        " (" + std::to_string(job.samplesDone()) + " samples, loss " +
        (job.loss ? std::to_string(*job.loss) : std::string("?")) + ")");
  }
  needDecision = true;
}

bool Scheduler::reap() {
  bool any = false;
  for (JobRecord &job : records) {
    if (job.status != "running" || job.segments.empty())
      continue;
    Segment &segment = job.segments.back();
    int status = 0;
    pid_t done = ::waitpid(segment.sid, &status, WNOHANG);
    if (done != segment.sid)
      continue;
    // The ranks may outlive mpirun briefly; the session must be empty
    // before its slots go to another job.
    stopSession(segment.sid, 2);
    endSegment(job, segment, exitCodeOf(status));
    any = true;
  }
  return any;
}

void Scheduler::recover() {
  bool changed = false;
  for (JobRecord &job : records) {
    if (job.status != "running" || job.segments.empty())
      continue;
    Segment &segment = job.segments.back();
    // A segment the last tp-sched started: stop whatever of it still runs
    // (a session started before its pid was recorded holds the job's
    // checkpoint lock, whose file names its pid).
    pid_t sid = segment.sid;
    if (sid == 0) {
      std::ifstream lock(fs::path(jobDir(job)) / "checkpoints" / ".lock");
      long pid = 0;
      if (lock >> pid && pid > 0 && ::kill(pid_t(pid), 0) == 0)
        sid = ::getsid(pid_t(pid));
    }
    if (sid > 0 && !sessionProcesses(sid).empty()) {
      log("stopping " + job.spec.name + "'s segment " +
          std::to_string(segment.index) + " left by the last tp-sched");
      stopSession(sid);
    }
    segment.status = "interrupted";
    endSegment(job, segment, 1);
    changed = true;
  }
  if (changed)
    save();
}

double Scheduler::stepSecondsEstimate(const JobRecord &job,
                                      const Config &c) const {
  // Measured here: the median of the last five segments' medians.
  std::vector<double> measured;
  for (auto it = job.segments.rbegin();
       it != job.segments.rend() && measured.size() < 5; ++it)
    if (it->config == c && it->stepSeconds > 0)
      measured.push_back(it->stepSeconds);
  if (!measured.empty())
    return median(measured);
  // Else the simulator's prediction, scaled by how its predictions of the
  // job's measured configurations compare with the measurements.
  auto predicted = [&](const Config &config) -> std::optional<double> {
    for (const CompiledPlan &p : job.plans)
      if (p.config == config)
        return p.predictedSeconds;
    return std::nullopt;
  };
  std::vector<double> ratios;
  std::optional<Config> anyMeasured;
  for (const Segment &s : job.segments)
    if (s.stepSeconds > 0) {
      anyMeasured = s.config;
      if (std::optional<double> p = predicted(s.config); p && *p > 0)
        ratios.push_back(s.stepSeconds / *p);
    }
  if (std::optional<double> p = predicted(c); p && *p > 0)
    return *p * (ratios.empty() ? 1.0 : median(ratios));
  // Neither: ONES's linear model from a measured configuration (the step
  // grows with the batch per rank), or that alone in arbitrary units.
  auto perRank = [](const Config &x) {
    return double(x.batch) / double(x.ranks);
  };
  if (anyMeasured)
    return stepSecondsEstimate(job, *anyMeasured) * perRank(c) /
           perRank(*anyMeasured);
  return perRank(c);
}

double Scheduler::resizeSecondsEstimate(const JobRecord &job) const {
  // A segment's wall time beyond its steps: starting, loading the
  // checkpoint, writing the next.
  std::vector<double> overheads;
  for (const Segment &s : job.segments)
    if (s.status == "done" && s.stepSeconds > 0)
      overheads.push_back(std::max(
          0.0, s.wallSeconds -
                   s.stepSeconds * double(s.lastStep - s.firstStep + 1)));
  return overheads.empty() ? options.resizeGuess : median(overheads);
}

JobView Scheduler::view(const JobRecord &job) const {
  JobView v;
  v.name = job.spec.name;
  v.arrival = job.arrival;
  v.service = job.service;
  if (job.status == "running")
    v.service += double(job.segments.back().config.ranks) *
                 (clock() - job.segments.back().started);
  v.remainingSamples =
      double(std::max<int64_t>(0, job.spec.maxSamples - job.samplesDone()));
  for (const CompiledPlan &p : job.plans)
    v.options.push_back({p.config, double(p.config.batch) /
                                       stepSecondsEstimate(job, p.config)});
  v.requested = job.spec.requested();
  if (job.status == "running") {
    v.current = job.segments.back().config;
    v.runningSeconds = clock() - job.segments.back().started;
  }
  v.pending = job.target;
  v.resizeSeconds = resizeSecondsEstimate(job);
  return v;
}

void Scheduler::decide() {
  std::vector<JobRecord *> live;
  for (JobRecord &job : records)
    if (job.active())
      live.push_back(&job);
  std::sort(live.begin(), live.end(), byArrival);
  lastDecision = clock();
  needDecision = false;
  if (live.empty())
    return;
  std::vector<JobView> views;
  for (JobRecord *job : live)
    views.push_back(view(*job));
  const Allocation allocation = policy->decide(views, pool->size(), decisions);
  ++decisions;
  bool changed = false;
  std::string line =
      "decision " + std::to_string(decisions) + " (" + policy->name() + "):";
  for (size_t j = 0; j < live.size(); ++j) {
    changed |= live[j]->target != allocation[j];
    live[j]->target = allocation[j];
    line += " " + live[j]->spec.name + " " +
            (allocation[j].runs() ? configName(allocation[j])
                                  : std::string("waits"));
  }
  if (changed)
    log(line);
  save();
}

std::string Scheduler::stopFile(const JobRecord &job,
                                const Segment &segment) const {
  return (fs::path(jobDir(job)) / ("stop-" + std::to_string(segment.index)))
      .string();
}

void Scheduler::requestStops() {
  bool asked = false;
  for (JobRecord &job : records) {
    if (job.status != "running" || job.segments.empty())
      continue;
    Segment &segment = job.segments.back();
    if (segment.status != "running" || segment.stopRequested ||
        job.target == segment.config)
      continue;
    const std::string path = stopFile(job, segment);
    std::ofstream(path).close();
    if (!fs::exists(path))
      throw std::runtime_error(path + ": cannot create the stop file");
    segment.stopRequested = true;
    asked = true;
    log("stopping " + job.spec.name + " after its current step: " +
        (job.target.runs() ? "to run as " + configName(job.target)
                           : std::string("preempted")));
  }
  if (asked)
    save();
}

void Scheduler::startSegment(JobRecord &job) {
  const Config c = job.target;
  const CompiledPlan *plan = nullptr;
  for (const CompiledPlan &p : job.plans)
    if (p.config == c)
      plan = &p;
  if (!plan)
    throw std::logic_error("no plan for " + job.spec.name + " " +
                           configName(c));
  const double rate = double(c.batch) / stepSecondsEstimate(job, c);
  const int64_t remaining =
      std::max<int64_t>(0, job.spec.maxSamples - job.samplesDone());
  const int64_t remainingSteps = (remaining + c.batch - 1) / c.batch;
  const auto planned =
      options.segmentSteps > 0
          ? options.segmentSteps
          : int64_t(std::ceil(options.segmentSeconds * rate / double(c.batch)));
  Segment segment;
  segment.index = int(job.segments.size());
  segment.config = c;
  segment.plan = plan->plan;
  segment.pipeline = plan->pipeline;
  segment.lr = job.spec.learningRate(c.batch);
  segment.firstStep = job.step + 1;
  segment.lastStep =
      job.step + std::max<int64_t>(1, std::min(planned, remainingSteps));
  segment.plannedLastStep = segment.lastStep;
  std::error_code stale; // from a segment a killed tp-sched left
  fs::remove(stopFile(job, segment), stale);
  segment.slots = pool->take(job.spec.name, c.ranks);
  segment.hosts = pool->hostList(segment.slots);
  segment.started = clock();
  const fs::path dir = jobDir(job);
  const std::string checkpoints = (dir / "checkpoints").string();
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.9g", segment.lr);
  std::vector<std::string> argv = {options.mpirun, "-np",
                                   std::to_string(c.ranks)};
  // A pool on this host launches without a host list: Open MPI takes a
  // "localhost" entry for another node than its own name and its ranks
  // then talk through TCP (25x slower steps here).
  if (!pool->isLocal())
    argv.insert(argv.end(), {"--host", segment.hosts});
  argv.insert(argv.end(), options.mpirunArgs.begin(), options.mpirunArgs.end());
  argv.insert(argv.end(),
              {options.binDir + "/tp-run",
               segment.plan,
               "--data",
               job.spec.data,
               "--threads",
               std::to_string(options.threadsPerRank),
               "--steps",
               std::to_string(segment.lastStep),
               "--lr",
               lr,
               "--min-lr",
               lr,
               "--warmup",
               std::to_string(job.spec.warmup),
               "--clip",
               std::to_string(job.spec.clip),
               "--checkpoint-dir",
               checkpoints,
               "--stop-file",
               stopFile(job, segment),
               "--metrics",
               (dir / ("segment-" + std::to_string(segment.index) + ".json"))
                   .string()});
  if (job.step > 0)
    argv.insert(argv.end(), {"--resume", checkpoints});
  else if (!job.spec.weights.empty())
    argv.insert(argv.end(), {"--weights", job.spec.weights});
  segment.command = shellLine(argv);
  const Config previous =
      job.segments.empty() ? Config{} : job.segments.back().config;
  // Recorded before it starts: a crash in between finds the session by
  // the checkpoint lock it holds.
  segment.status = "starting";
  job.segments.push_back(segment);
  job.status = "running";
  save();
  // Each segment's Open MPI session directory apart: concurrent mpiruns
  // race on a shared one.
  const std::string sessions =
      (fs::path(options.stateDir) / "mpi" /
       (job.spec.name + "-" + std::to_string(segment.index)))
          .string();
  fs::create_directories(sessions);
  const std::string logPath =
      (dir / ("segment-" + std::to_string(segment.index) + ".log")).string();
  Segment &started = job.segments.back();
  started.sid =
      startSession(argv, {"OMPI_MCA_orte_tmpdir_base=" + sessions}, logPath);
  started.status = "running";
  save();
  std::string what = previous.runs() && previous != c
                         ? "resized " + job.spec.name + " " +
                               configName(previous) + " -> " + configName(c)
                         : "started " + job.spec.name + " " + configName(c);
  log(what + ": steps " + std::to_string(segment.firstStep) + "-" +
      std::to_string(segment.lastStep) + " on " + segment.hosts + ", lr " + lr);
}

bool Scheduler::launch() {
  std::vector<JobRecord *> waiting;
  for (JobRecord &job : records)
    if (job.status == "queued" && job.target.runs())
      waiting.push_back(&job);
  std::sort(waiting.begin(), waiting.end(), byArrival);
  bool any = false;
  for (JobRecord *job : waiting)
    if (job->target.ranks <= pool->free()) {
      startSegment(*job);
      any = true;
    }
  return any;
}

int Scheduler::run() {
  // Slots of segments a restart finds running are stopped first, so the
  // pool starts empty.
  recover();
  for (;;) {
    bool changed = admit();
    changed |= reap();
    if (changed || needDecision || clock() - lastDecision >= options.interval)
      decide();
    requestStops();
    launch();
    const bool active =
        std::any_of(records.begin(), records.end(),
                    [](const JobRecord &j) { return j.active(); });
    // A spec submitted since admit() ran keeps the scheduler going.
    if (!active && queuedSpecs().empty() && !options.follow)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  save();
  writeScheduleTimeline(records, pool->size(), "tp-sched " + options.policy,
                        (fs::path(options.stateDir) / "timeline.svg").string());
  int failed = 0;
  for (const JobRecord &job : records) {
    failed += job.status == "failed";
    log(job.spec.name + ": " + job.status +
        (job.finish ? ", completion " +
                          std::to_string(*job.finish - job.arrival) + " s"
                    : std::string()) +
        ", " + std::to_string(job.segments.size()) + " segments, step " +
        std::to_string(job.step) +
        (job.error.empty() ? std::string() : ": " + job.error));
  }
  return failed;
}

void writeScheduleTimeline(const std::vector<JobRecord> &jobs, int ranks,
                           const std::string &title, const std::string &path) {
  std::vector<tools::TimelineBar> bars;
  double now = 0;
  for (const JobRecord &job : jobs)
    for (const Segment &s : job.segments)
      now = std::max(now, std::max(s.started, s.ended));
  for (const JobRecord &job : jobs)
    for (const Segment &s : job.segments) {
      for (const auto &[first, count] : slotRuns(s.slots))
        bars.push_back({job.spec.name, configName(s.config), first, count,
                        s.started, s.ended >= 0 ? s.ended : now});
    }
  tools::writeTimelineSvg(path, bars, ranks, title);
}

std::vector<JobRecord> readStateJobs(const std::string &stateDir, int &ranks,
                                     std::string &policy) {
  const std::string path = (fs::path(stateDir) / "state.json").string();
  json root;
  try {
    root = json::parse(readText(path, "scheduler state"));
    policy = root.at("policy").get<std::string>();
  } catch (const json::exception &e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  std::vector<JobRecord> jobs;
  ranks = 0;
  try {
    for (const json &h : root.at("hosts"))
      ranks += h.at("slots").get<int>();
    for (const json &j : root.at("jobs"))
      jobs.push_back(parseJobRecord(j, path));
  } catch (const json::exception &e) {
    throw std::runtime_error(path + ": malformed: " + e.what());
  } catch (const std::invalid_argument &e) {
    throw std::runtime_error(e.what());
  }
  return jobs;
}

} // namespace tpc::sched
