// tp-run: executes a tpc plan.
//
//   tp-run model.tpplan --data tokens.tokens [--weights model.safetensors]
//          [--program loss] [--offset N] [--repeat N] [--threads N]
//          [--metrics metrics.json] [--dump out.safetensors] [--print-plan]
//
// Without --weights, parameters get the deterministic initialisation that
// every plan of the same model shares. Every error is one line on stderr and
// exit code 1.

#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

using namespace tpc::runtime;

namespace {

struct Options {
  std::string plan;
  std::string data;
  std::string weights;
  std::string program;
  std::string metrics;
  std::string dump;
  int64_t offset = 0;
  int64_t repeat = 1;
  int threads = 0;
  bool printPlan = false;
};

[[noreturn]] void usageError(const std::string &message) {
  throw std::invalid_argument(message);
}

int64_t parseInt(const std::string &flag, const std::string &text,
                 int64_t min) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != text.size() || text.empty())
    usageError(flag + " expects an integer, got '" + text + "'");
  if (value < min)
    usageError(flag + " must be >= " + std::to_string(min) + ", got " + text);
  return value;
}

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--data")
      o.data = value();
    else if (arg == "--weights")
      o.weights = value();
    else if (arg == "--program")
      o.program = value();
    else if (arg == "--metrics")
      o.metrics = value();
    else if (arg == "--dump")
      o.dump = value();
    else if (arg == "--offset")
      o.offset = parseInt(arg, value(), 0);
    else if (arg == "--repeat")
      o.repeat = parseInt(arg, value(), 1);
    else if (arg == "--threads")
      o.threads = static_cast<int>(parseInt(arg, value(), 1));
    else if (arg == "--print-plan")
      o.printPlan = true;
    else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: tp-run PLAN --data TOKENS [--weights SAFETENSORS] "
                   "[--program NAME] [--offset N] [--repeat N] [--threads N] "
                   "[--metrics JSON] [--dump SAFETENSORS] [--print-plan]\n";
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-')
      usageError("unknown flag '" + arg + "' (see --help)");
    else if (o.plan.empty())
      o.plan = arg;
    else
      usageError("unexpected argument '" + arg + "'");
  }
  if (o.plan.empty())
    usageError("missing the plan file (usage: tp-run PLAN --data TOKENS ...)");
  if (!o.printPlan && o.data.empty())
    usageError("--data is required to run a program");
  return o;
}

std::string jsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

/// Writes `text` to `path` atomically.
void writeFileAtomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out || !(out << text) || !out.flush()) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": cannot write");
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path +
                             ": cannot rename into place: " + error.message());
  }
}

int run(const Options &o) {
  if (o.threads)
    cpu::setNumThreads(o.threads);
  LoadedPlan plan = LoadedPlan::load(o.plan, /*worldSize=*/1);
  if (o.printPlan) {
    plan.printJson(std::cout);
    return 0;
  }
  ParamStore params = o.weights.empty()
                          ? ParamStore::initialise(plan)
                          : ParamStore::fromSafetensors(plan, o.weights);
  std::vector<int32_t> stream = readTokenFile(o.data);

  std::string name = o.program;
  if (name.empty())
    name = plan.program("loss") ? "loss" : "forward";
  ProgramRunner runner(plan, name, params);
  std::vector<int64_t> tokensShape = runner.tokensShape();
  const int64_t batch = tokensShape[0], seq = tokensShape[1];
  Batch window = cutBatch(stream, o.offset, batch, seq);
  runner.setInput(tpc::plan::InputKind::Tokens, window.tokens);
  if (runner.hasInput(tpc::plan::InputKind::Targets))
    runner.setInput(tpc::plan::InputKind::Targets, window.targets);

  std::vector<double> seconds;
  for (int64_t r = 0; r < o.repeat; ++r) {
    if (r + 1 == o.repeat)
      runner.resetStats(); // per-op times of the last (warm) run
    auto start = std::chrono::steady_clock::now();
    runner.run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double tokensPerSecond = double(batch * seq) / median;

  std::optional<float> loss;
  if (runner.numResults() == 1 && runner.resultShape(0).empty())
    loss = runner.result(0)[0];
  std::cout << std::setprecision(8) << "program " << name << ": ";
  if (loss)
    std::cout << "loss " << *loss << ", ";
  std::cout << std::setprecision(4) << batch * seq << " tokens, "
            << median * 1e3 << " ms, " << tokensPerSecond << " tokens/s\n";

  if (!o.dump.empty()) {
    SafetensorsWriter writer;
    auto addResults = [&](ProgramRunner &r, const std::string &prefix) {
      for (size_t i = 0; i < r.numResults(); ++i) {
        std::vector<int64_t> shape = r.resultShape(i);
        std::string key = shape.empty()    ? "loss"
                          : prefix.empty() ? "result" + std::to_string(i)
                                           : prefix;
        writer.addF32(key, shape, r.result(i));
      }
    };
    // The dump holds forward's logits and the loss, whichever program ran.
    if (plan.program("forward") && name != "forward") {
      ProgramRunner forward(plan, "forward", params);
      forward.setInput(tpc::plan::InputKind::Tokens, window.tokens);
      forward.run();
      addResults(forward, "logits");
    }
    addResults(runner, name == "forward" ? "logits" : "");
    if (name == "forward" && plan.program("loss")) {
      ProgramRunner lossRunner(plan, "loss", params);
      lossRunner.setInput(tpc::plan::InputKind::Tokens, window.tokens);
      lossRunner.setInput(tpc::plan::InputKind::Targets, window.targets);
      lossRunner.run();
      addResults(lossRunner, "");
    }
    writer.write(o.dump);
  }

  if (!o.metrics.empty()) {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    const uint64_t peak =
        runner.arenaBytes() + params.bytes() + runner.inputBytes();
    std::ostringstream json;
    json << std::setprecision(10) << "{\n  \"program\": \"" << jsonEscape(name)
         << "\",\n";
    if (loss)
      json << "  \"loss\": " << *loss << ",\n";
    json << "  \"batch\": " << batch << ",\n  \"seq\": " << seq
         << ",\n  \"tokens\": " << batch * seq
         << ",\n  \"threads\": " << cpu::numThreads()
         << ",\n  \"runs\": " << seconds.size() << ",\n  \"seconds\": [";
    for (size_t i = 0; i < seconds.size(); ++i)
      json << (i ? ", " : "") << seconds[i];
    json << "],\n  \"seconds_median\": " << median
         << ",\n  \"tokens_per_second\": " << tokensPerSecond
         << ",\n  \"memory\": {\"arena_bytes\": " << runner.arenaBytes()
         << ", \"param_bytes\": " << params.bytes()
         << ", \"input_bytes\": " << runner.inputBytes()
         << ", \"planned_peak_bytes\": " << peak
         << ", \"max_rss_bytes\": " << int64_t(usage.ru_maxrss) * 1024
         << "},\n  \"ops\": {";
    bool first = true;
    for (const auto &[kind, stats] : runner.stats()) {
      json << (first ? "" : ",") << "\n    \"" << kind
           << "\": {\"count\": " << stats.count
           << ", \"seconds\": " << stats.seconds << "}";
      first = false;
    }
    json << "\n  }\n}\n";
    writeFileAtomically(o.metrics, json.str());
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(parseArgs(argc, argv));
  } catch (const std::exception &error) {
    std::cerr << "tp-run: error: " << error.what() << "\n";
    return 1;
  }
}
