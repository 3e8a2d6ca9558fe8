#include "Simulation.h"

#include "Pool.h"
#include "Random.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace tpc::sched {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

const ModelProfile &profileOf(const std::vector<ModelProfile> &models,
                              const std::string &name) {
  for (const ModelProfile &model : models)
    if (model.name == name)
      return model;
  throw std::invalid_argument("no profile for model '" + name + "'");
}

double stepSeconds(const ModelProfile &model, const Config &config) {
  auto it = model.stepSeconds.find({config.ranks, config.batch});
  return it == model.stepSeconds.end() ? kInfinity : it->second;
}

double rateOf(const ModelProfile &model, const Config &config) {
  return double(config.batch) / stepSeconds(model, config);
}

struct SimJob {
  const TraceJob *spec = nullptr;
  const ModelProfile *model = nullptr;
  double done = 0, pause = 0, runStart = 0, service = 0;
  Config config;
  bool arrived = false, finished = false, started = false;
  std::vector<int> slots;
  JobOutcome outcome;

  double remaining() const { return std::max(0.0, spec->targetSamples - done); }
};

double percentile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t rank = size_t(std::ceil(q * double(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

} // namespace

std::vector<TraceJob> generateTrace(const std::vector<ModelProfile> &models,
                                    const TraceOptions &options) {
  if (models.empty())
    throw std::invalid_argument("a trace needs at least one model profile");
  if (options.requestedRanks.size() != options.requestedWeights.size() ||
      options.requestedRanks.empty())
    throw std::invalid_argument("requested ranks and weights differ in count");
  Rng rng(options.seed);
  const double totalWeight = std::accumulate(
      options.requestedWeights.begin(), options.requestedWeights.end(), 0.0);
  std::vector<TraceJob> trace;
  double now = 0;
  for (int i = 0; i < options.jobs; ++i) {
    now += -std::log(1 - rng.uniform()) * options.meanInterarrival;
    TraceJob job;
    char name[32];
    std::snprintf(name, sizeof name, "job-%03d", i);
    job.name = name;
    job.arrival = now;
    for (int attempt = 0; job.configs.empty(); ++attempt) {
      if (attempt == 100)
        throw std::invalid_argument(
            "the model profiles hold none of the trace's configurations");
      const ModelProfile &model = models[rng.below(models.size())];
      double draw = rng.uniform() * totalWeight;
      size_t pick = 0;
      while (pick + 1 < options.requestedWeights.size() &&
             draw >= options.requestedWeights[pick]) {
        draw -= options.requestedWeights[pick];
        ++pick;
      }
      const int wanted = std::min(options.requestedRanks[pick], options.ranks);
      const int64_t batch = options.samplesPerRank * wanted;
      job.model = model.name;
      for (int64_t b : {batch / 2, batch, 2 * batch, 4 * batch}) {
        if (b < 1)
          continue;
        for (int n = 1; n <= std::min(options.ranks, 4 * wanted); n *= 2)
          if (b % n == 0 && model.stepSeconds.count({n, b}))
            job.configs.push_back({n, b});
      }
      // The requested configuration: the fewest ranks from the wanted
      // count up at the requested batch (a model too large for fewer).
      job.requested = {};
      for (const Config &c : job.configs)
        if (c.batch == batch && c.ranks >= wanted &&
            (!job.requested.runs() || c.ranks < job.requested.ranks))
          job.requested = c;
      if (!job.requested.runs())
        job.configs.clear();
    }
    const double duration =
        std::exp(std::log(options.minDuration) +
                 rng.uniform() * (std::log(options.maxDuration) -
                                  std::log(options.minDuration)));
    job.targetSamples =
        duration * rateOf(profileOf(models, job.model), job.requested);
    trace.push_back(std::move(job));
  }
  return trace;
}

SimulationResult simulate(const std::vector<TraceJob> &trace,
                          const std::vector<ModelProfile> &models,
                          Policy &policy, const SimulationOptions &options) {
  std::vector<SimJob> jobs(trace.size());
  for (size_t j = 0; j < trace.size(); ++j) {
    jobs[j].spec = &trace[j];
    jobs[j].model = &profileOf(models, trace[j].model);
    jobs[j].outcome.name = trace[j].name;
    jobs[j].outcome.arrival = trace[j].arrival;
    if (trace[j].requested.ranks > options.ranks)
      throw std::invalid_argument(trace[j].name + " requests " +
                                  std::to_string(trace[j].requested.ranks) +
                                  " ranks of " + std::to_string(options.ranks));
  }
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(trace[a].arrival, a) <
           std::make_pair(trace[b].arrival, b);
  });
  SimulationResult result;
  result.policy = policy.name();
  std::vector<int> owner(size_t(options.ranks), -1);
  double now = 0, lastDecision = -kInfinity, usefulRankSeconds = 0;
  size_t nextArrival = 0;
  auto restartCost = [&](const SimJob &job) {
    return options.restartSeconds +
           (job.started
                ? 2 * job.model->checkpointBytes / options.storageBytesPerSecond
                : 0.0);
  };
  auto closeSpans = [&](size_t j) {
    SimJob &job = jobs[j];
    for (const auto &[first, count] : slotRuns(job.slots))
      result.timeline.push_back(
          {job.spec->name, first, count, job.config.batch, job.runStart, now});
    for (int s : job.slots)
      owner[size_t(s)] = -1;
    job.slots.clear();
  };
  for (;;) {
    bool active = false;
    for (const SimJob &job : jobs)
      active |= job.arrived && !job.finished;
    if (!active && nextArrival == order.size())
      break;
    double next = kInfinity;
    if (nextArrival < order.size())
      next = trace[order[nextArrival]].arrival;
    for (const SimJob &job : jobs)
      if (job.config.runs())
        next = std::min(next,
                        now + job.pause +
                            job.remaining() / rateOf(*job.model, job.config));
    if (active)
      next = std::min(next, lastDecision + options.interval);
    if (!std::isfinite(next))
      throw std::logic_error(policy.name() +
                             ": jobs wait on an idle pool and nothing is due");
    next = std::max(next, now);
    const double dt = next - now;
    for (SimJob &job : jobs) {
      if (!job.config.runs())
        continue;
      const double paused = std::min(job.pause, dt);
      job.pause -= paused;
      const double useful = dt - paused;
      job.done += useful * rateOf(*job.model, job.config);
      job.service += double(job.config.ranks) * dt;
      usefulRankSeconds += double(job.config.ranks) * useful;
    }
    now = next;
    for (size_t j = 0; j < jobs.size(); ++j) {
      SimJob &job = jobs[j];
      if (!job.config.runs() || job.pause > 0)
        continue;
      // Done, up to rounding of the advance.
      if (job.remaining() / rateOf(*job.model, job.config) < 1e-6) {
        closeSpans(j);
        job.finished = true;
        job.config = {};
        job.outcome.finish = now;
      }
    }
    while (nextArrival < order.size() &&
           trace[order[nextArrival]].arrival <= now)
      jobs[order[nextArrival++]].arrived = true;

    std::vector<size_t> live;
    for (size_t j : order)
      if (jobs[j].arrived && !jobs[j].finished)
        live.push_back(j);
    if (live.empty())
      continue;
    std::vector<JobView> views;
    for (size_t j : live) {
      const SimJob &job = jobs[j];
      JobView view;
      view.name = job.spec->name;
      view.arrival = job.spec->arrival;
      view.service = job.service;
      view.remainingSamples = job.remaining();
      for (const Config &c : job.spec->configs)
        view.options.push_back({c, rateOf(*job.model, c)});
      view.requested = job.spec->requested;
      view.current = job.config;
      view.resizeSeconds = restartCost(job);
      view.runningSeconds = job.config.runs() ? now - job.runStart : 0;
      views.push_back(std::move(view));
    }
    const Allocation allocation =
        policy.decide(views, options.ranks, uint64_t(result.decisions));
    ++result.decisions;
    lastDecision = now;
    int used = 0;
    for (const Config &c : allocation)
      used += c.ranks;
    if (used > options.ranks)
      throw std::logic_error(policy.name() + " allocated " +
                             std::to_string(used) + " of " +
                             std::to_string(options.ranks) + " ranks");
    for (size_t v = 0; v < live.size(); ++v)
      if (allocation[v] != jobs[live[v]].config && jobs[live[v]].config.runs())
        closeSpans(live[v]);
    for (size_t v = 0; v < live.size(); ++v) {
      SimJob &job = jobs[live[v]];
      if (allocation[v] == job.config)
        continue;
      job.config = allocation[v];
      if (!job.config.runs())
        continue;
      job.pause = restartCost(job);
      if (job.started)
        ++job.outcome.restarts;
      if (!job.started)
        job.outcome.start = now;
      job.started = true;
      job.runStart = now;
      for (size_t s = 0;
           s < owner.size() && int(job.slots.size()) < job.config.ranks; ++s)
        if (owner[s] < 0) {
          owner[s] = int(live[v]);
          job.slots.push_back(int(s));
        }
    }
  }
  std::vector<double> jct;
  double first = kInfinity, last = 0;
  for (const SimJob &job : jobs) {
    result.jobs.push_back(job.outcome);
    result.restarts += job.outcome.restarts;
    jct.push_back(job.outcome.finish - job.outcome.arrival);
    first = std::min(first, job.outcome.arrival);
    last = std::max(last, job.outcome.finish);
  }
  if (!jct.empty()) {
    result.averageJct =
        std::accumulate(jct.begin(), jct.end(), 0.0) / double(jct.size());
    result.medianJct = percentile(jct, 0.5);
    result.p95Jct = percentile(jct, 0.95);
    result.maxJct = percentile(jct, 1.0);
    result.makespan = last - first;
    result.utilisation =
        result.makespan > 0
            ? usefulRankSeconds / (double(options.ranks) * result.makespan)
            : 0;
  }
  return result;
}

std::string traceJson(const std::vector<TraceJob> &trace) {
  nlohmann::ordered_json root;
  root["format"] = "tpc-sched-trace";
  root["version"] = 1;
  root["jobs"] = nlohmann::ordered_json::array();
  for (const TraceJob &job : trace) {
    nlohmann::ordered_json j;
    j["name"] = job.name;
    j["model"] = job.model;
    j["arrival"] = job.arrival;
    j["requested"] = {job.requested.ranks, job.requested.batch};
    j["configs"] = nlohmann::ordered_json::array();
    for (const Config &c : job.configs)
      j["configs"].push_back({c.ranks, c.batch});
    j["target_samples"] = job.targetSamples;
    root["jobs"].push_back(std::move(j));
  }
  return root.dump(1) + "\n";
}

namespace {
nlohmann::json parseRoot(const std::string &text, const std::string &source,
                         const char *format) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    throw std::invalid_argument(source + ": invalid JSON: " + e.what());
  }
  if (!root.is_object() || root.value("format", "") != format)
    throw std::invalid_argument(source + ": not a " + std::string(format) +
                                " file");
  if (root.value("version", 0) != 1)
    throw std::invalid_argument(source + ": version " +
                                root.value("version", nlohmann::json()).dump() +
                                "; this tp-sched reads 1");
  return root;
}

Config configOf(const nlohmann::json &pair, const std::string &where) {
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
      !pair[1].is_number_integer() || pair[0].get<int>() < 1 ||
      pair[1].get<int64_t>() < 1)
    throw std::invalid_argument(where + " must be [ranks, batch], both >= 1");
  return {pair[0].get<int>(), pair[1].get<int64_t>()};
}
} // namespace

std::vector<TraceJob> parseTrace(const std::string &text,
                                 const std::string &source) {
  nlohmann::json root = parseRoot(text, source, "tpc-sched-trace");
  if (!root.contains("jobs") || !root["jobs"].is_array())
    throw std::invalid_argument(source + ": \"jobs\" must be an array");
  std::vector<TraceJob> trace;
  for (size_t i = 0; i < root["jobs"].size(); ++i) {
    const nlohmann::json &j = root["jobs"][i];
    const std::string where = source + ": jobs[" + std::to_string(i) + "]";
    try {
      TraceJob job;
      job.name = j.at("name").get<std::string>();
      job.model = j.at("model").get<std::string>();
      job.arrival = j.at("arrival").get<double>();
      job.requested = configOf(j.at("requested"), where + ".requested");
      for (const nlohmann::json &c : j.at("configs"))
        job.configs.push_back(configOf(c, where + ".configs"));
      job.targetSamples = j.at("target_samples").get<double>();
      if (!(job.arrival >= 0) || !(job.targetSamples > 0))
        throw std::invalid_argument(where +
                                    ": arrival and target_samples must be "
                                    "non-negative and positive");
      if (std::find(job.configs.begin(), job.configs.end(), job.requested) ==
          job.configs.end())
        throw std::invalid_argument(where +
                                    ": the requested configuration is not "
                                    "one of its configs");
      trace.push_back(std::move(job));
    } catch (const nlohmann::json::exception &e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
  }
  return trace;
}

std::string profilesJson(const std::vector<ModelProfile> &models) {
  nlohmann::ordered_json root;
  root["format"] = "tpc-sched-profiles";
  root["version"] = 1;
  root["models"] = nlohmann::ordered_json::array();
  for (const ModelProfile &model : models) {
    nlohmann::ordered_json m;
    m["name"] = model.name;
    m["checkpoint_bytes"] = model.checkpointBytes;
    m["steps"] = nlohmann::ordered_json::array();
    for (const auto &[config, seconds] : model.stepSeconds)
      m["steps"].push_back({{"ranks", config.first},
                            {"batch", config.second},
                            {"seconds", seconds}});
    root["models"].push_back(std::move(m));
  }
  return root.dump(1) + "\n";
}

std::vector<ModelProfile> parseProfiles(const std::string &text,
                                        const std::string &source) {
  nlohmann::json root = parseRoot(text, source, "tpc-sched-profiles");
  std::vector<ModelProfile> models;
  try {
    for (const nlohmann::json &m : root.at("models")) {
      ModelProfile model;
      model.name = m.at("name").get<std::string>();
      model.checkpointBytes = m.at("checkpoint_bytes").get<double>();
      for (const nlohmann::json &s : m.at("steps")) {
        double seconds = s.at("seconds").get<double>();
        if (!(seconds > 0))
          throw std::invalid_argument(source + ": model '" + model.name +
                                      "': a step's seconds must be positive");
        model.stepSeconds[{s.at("ranks").get<int>(),
                           s.at("batch").get<int64_t>()}] = seconds;
      }
      models.push_back(std::move(model));
    }
  } catch (const nlohmann::json::exception &e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return models;
}

std::string simulationJson(const std::vector<SimulationResult> &results) {
  nlohmann::ordered_json root;
  root["format"] = "tpc-sched-simulation";
  root["version"] = 1;
  root["policies"] = nlohmann::ordered_json::array();
  for (const SimulationResult &r : results) {
    nlohmann::ordered_json p;
    p["policy"] = r.policy;
    p["average_jct"] = r.averageJct;
    p["median_jct"] = r.medianJct;
    p["p95_jct"] = r.p95Jct;
    p["max_jct"] = r.maxJct;
    p["makespan"] = r.makespan;
    p["utilisation"] = r.utilisation;
    p["decisions"] = r.decisions;
    p["restarts"] = r.restarts;
    p["jobs"] = nlohmann::ordered_json::array();
    for (const JobOutcome &j : r.jobs)
      p["jobs"].push_back({{"name", j.name},
                           {"arrival", j.arrival},
                           {"start", j.start},
                           {"finish", j.finish},
                           {"restarts", j.restarts}});
    root["policies"].push_back(std::move(p));
  }
  return root.dump(1) + "\n";
}

} // namespace tpc::sched
