#include "JobSpec.h"

#include "Compile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>

namespace fs = std::filesystem;

namespace tpc::sched {

std::vector<Config> JobSpec::configs() const {
  std::vector<Config> out;
  for (int r = 1; r <= maxRanks; ++r)
    for (int64_t b : batchSizes)
      if (mode != "dp" || b % r == 0)
        out.push_back({r, b});
  return out;
}

double JobSpec::learningRate(int64_t globalBatch) const {
  return std::min(maxLr, lr * double(globalBatch) / double(batch));
}

nlohmann::ordered_json JobSpec::toJson() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["config"] = config;
  j["data"] = data;
  if (!weights.empty())
    j["weights"] = weights;
  j["seq"] = seq;
  j["batch_sizes"] = batchSizes;
  j["batch"] = batch;
  j["max_ranks"] = maxRanks;
  j["ranks"] = ranks;
  if (targetSamples)
    j["target_samples"] = *targetSamples;
  if (targetLoss) {
    j["target_loss"] = *targetLoss;
    j["max_samples"] = maxSamples;
  }
  j["lr"] = lr;
  j["max_lr"] = maxLr;
  j["warmup"] = warmup;
  j["clip"] = clip;
  j["mode"] = mode;
  if (!pipeline.empty())
    j["pipeline"] = pipeline;
  return j;
}

JobSpec parseJobSpec(const std::string &text, const std::string &source,
                     const std::string &baseDir) {
  auto fail = [&](const std::string &what) {
    return std::invalid_argument(source + ": " + what);
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    std::string message = e.what();
    throw fail("invalid JSON: " + message.substr(message.find(' ') + 1));
  }
  if (!root.is_object())
    throw fail("a job spec is a JSON object");
  static const std::set<std::string> known = {
      "name",        "config",      "data",    "weights",   "seq",
      "batch_sizes", "batch",       "ranks",   "max_ranks", "target_samples",
      "target_loss", "max_samples", "lr",      "max_lr",    "warmup",
      "clip",        "mode",        "pipeline"};
  for (auto it = root.begin(); it != root.end(); ++it)
    if (!known.count(it.key()))
      throw fail("unknown field \"" + it.key() + "\"");
  auto has = [&](const char *key) { return root.contains(key); };
  auto require = [&](const char *key) -> const nlohmann::json & {
    if (!has(key))
      throw fail(std::string("missing \"") + key + "\"");
    return root[key];
  };
  auto integer = [&](const char *key, int64_t min) {
    const nlohmann::json &v = require(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min)
      throw fail(std::string("\"") + key +
                 "\" must be an integer >= " + std::to_string(min));
    return v.get<int64_t>();
  };
  auto number = [&](const char *key, bool positive) {
    const nlohmann::json &v = require(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) ||
        (positive ? v.get<double>() <= 0 : v.get<double>() < 0))
      throw fail(std::string("\"") + key + "\" must be a " +
                 (positive ? "positive" : "non-negative") + " number");
    return v.get<double>();
  };
  auto string = [&](const char *key) {
    const nlohmann::json &v = require(key);
    if (!v.is_string() || v.get<std::string>().empty())
      throw fail(std::string("\"") + key + "\" must be a non-empty string");
    return v.get<std::string>();
  };
  auto file = [&](const char *key) {
    fs::path path = string(key);
    if (path.is_relative())
      path = fs::path(baseDir) / path;
    std::error_code error;
    if (!fs::is_regular_file(path, error))
      throw fail(std::string("\"") + key + "\" " + path.string() +
                 ": not a readable file");
    return fs::absolute(path).lexically_normal().string();
  };

  JobSpec spec;
  spec.name = string("name");
  static const std::regex namePattern("[A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
  if (!std::regex_match(spec.name, namePattern))
    throw fail("\"name\" '" + spec.name +
               "' must be 1-64 letters, digits, '_', '.' or '-', "
               "beginning with a letter or digit");
  spec.config = file("config");
  spec.data = file("data");
  if (has("weights"))
    spec.weights = file("weights");
  spec.seq = integer("seq", 1);
  const nlohmann::json &sizes = require("batch_sizes");
  if (!sizes.is_array() || sizes.empty())
    throw fail("\"batch_sizes\" must be a non-empty array of batch sizes");
  for (const nlohmann::json &b : sizes) {
    if (!b.is_number_integer() || b.get<int64_t>() < 1)
      throw fail("\"batch_sizes\" must hold integers >= 1");
    if (!spec.batchSizes.empty() && b.get<int64_t>() <= spec.batchSizes.back())
      throw fail("\"batch_sizes\" must rise");
    spec.batchSizes.push_back(b.get<int64_t>());
  }
  spec.batch = integer("batch", 1);
  if (std::find(spec.batchSizes.begin(), spec.batchSizes.end(), spec.batch) ==
      spec.batchSizes.end())
    throw fail("\"batch\" " + std::to_string(spec.batch) +
               " is not one of \"batch_sizes\"");
  spec.maxRanks = int(std::min<int64_t>(integer("max_ranks", 1), 1 << 20));
  spec.ranks = int(std::min<int64_t>(integer("ranks", 1), 1 << 20));
  if (spec.ranks > spec.maxRanks)
    throw fail("\"ranks\" " + std::to_string(spec.ranks) +
               " exceeds \"max_ranks\" " + std::to_string(spec.maxRanks));
  if (has("mode")) {
    spec.mode = string("mode");
    try {
      pipelineOptions(spec.mode, 1);
    } catch (const std::invalid_argument &e) {
      throw fail("\"mode\": " + std::string(e.what()));
    }
  }
  if (spec.mode == "dp" && spec.batch % spec.ranks != 0)
    throw fail("the requested batch " + std::to_string(spec.batch) +
               " does not split over its " + std::to_string(spec.ranks) +
               " ranks (mode dp)");
  if (has("target_samples") == has("target_loss"))
    throw fail("give one of \"target_samples\" and \"target_loss\"");
  if (has("target_samples")) {
    spec.targetSamples = integer("target_samples", 1);
    spec.maxSamples = *spec.targetSamples;
    if (has("max_samples"))
      throw fail("\"max_samples\" bounds a \"target_loss\" job only");
  } else {
    spec.targetLoss = number("target_loss", true);
    spec.maxSamples = integer("max_samples", 1);
  }
  spec.lr = number("lr", true);
  spec.maxLr = has("max_lr") ? number("max_lr", true)
                             : spec.lr * double(spec.batchSizes.back()) /
                                   double(spec.batch);
  if (spec.maxLr < spec.lr)
    throw fail("\"max_lr\" is below \"lr\"");
  spec.warmup = has("warmup") ? integer("warmup", 0) : 0;
  spec.clip = has("clip") ? number("clip", false) : 1.0;
  if (has("pipeline")) {
    spec.pipeline = string("pipeline");
    for (const char *owned : {"mode=", "grid=", "dp=", "cluster="})
      if (spec.pipeline.find(owned) != std::string::npos)
        throw fail(std::string("\"pipeline\" may not set ") + owned +
                   " (tp-sched chooses it)");
  }
  return spec;
}

} // namespace tpc::sched
