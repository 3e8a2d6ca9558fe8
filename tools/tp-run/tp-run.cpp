// tp-run: executes a tpc plan.
//
// Evaluate (forward and loss on one batch):
//   tp-run model.tpplan --data tokens.tokens [--weights model.safetensors]
//          [--program loss|forward] [--offset N] [--repeat N]
//          [--dump out.safetensors] [--dump-grads grads.safetensors]
// Train (@train_step, AdamW with warmup + cosine decay and clipping):
//   tp-run model.tpplan --data tokens.tokens --steps N [--lr 3e-4]
//          [--min-lr LR/10] [--warmup min(100, N/10)] [--decay-steps N]
//          [--clip 1.0] [--checkpoint-dir DIR] [--checkpoint-every K]
//          [--resume DIR] [--export DIR] [--plot loss.svg]
// Both: [--metrics metrics.json] [--threads N] [--print-plan]
//
// Without --weights (or --resume), parameters get the deterministic
// initialisation that every plan of the same model shares. Every error is
// one line on stderr and exit code 1.
//
// Under mpirun (mpirun -np N tp-run ...) every rank runs this program on a
// plan whose grid has N ranks; only rank 0 prints normal output.

#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/Plot.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/SanitizerDefaults.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/Training.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <streambuf>
#include <sys/resource.h>

using namespace tpc::runtime;

TPC_ASAN_DEFAULT_OPTIONS(":detect_leaks=0") // an MPI program

namespace {

struct Options {
  std::string plan, data, weights, program, metrics, dump, dumpGrads;
  int64_t offset = 0;
  int64_t repeat = 1;
  int threads = 0;
  bool printPlan = false;
  // Training.
  int64_t steps = 0;
  double lr = 3e-4;
  std::optional<double> minLr, warmup, decaySteps;
  double clip = 1.0;
  std::string checkpointDir, resume, exportDir, plot;
  int64_t checkpointEvery = 0;
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

double parseNumber(const std::string &flag, const std::string &text,
                   double min) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !std::isfinite(value))
    usageError(flag + " expects a number, got '" + text + "'");
  if (value < min)
    usageError(flag + " must be >= " + std::to_string(min) + ", got " + text);
  return value;
}

const char *kUsage =
    "usage: tp-run PLAN --data TOKENS [--weights SAFETENSORS] [--program NAME]"
    " [--offset N] [--repeat N] [--dump SAFETENSORS] [--dump-grads "
    "SAFETENSORS]\n"
    "       tp-run PLAN --data TOKENS --steps N [--lr X] [--min-lr X] "
    "[--warmup N] [--decay-steps N] [--clip X] [--checkpoint-dir DIR] "
    "[--checkpoint-every K] [--resume DIR] [--export DIR] [--plot SVG]\n"
    "       common: [--metrics JSON] [--threads N] [--print-plan]\n";

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
    else if (arg == "--dump-grads")
      o.dumpGrads = value();
    else if (arg == "--offset")
      o.offset = parseInt(arg, value(), 0);
    else if (arg == "--repeat")
      o.repeat = parseInt(arg, value(), 1);
    else if (arg == "--threads") {
      o.threads = static_cast<int>(parseInt(arg, value(), 1));
      if (o.threads > cpu::maxThreads())
        usageError(
            "--threads must be at most " + std::to_string(cpu::maxThreads()) +
            " (4 per hardware thread), got " + std::to_string(o.threads));
    } else if (arg == "--print-plan")
      o.printPlan = true;
    else if (arg == "--steps")
      o.steps = parseInt(arg, value(), 1);
    else if (arg == "--lr")
      o.lr = parseNumber(arg, value(), 0.0);
    else if (arg == "--min-lr")
      o.minLr = parseNumber(arg, value(), 0.0);
    else if (arg == "--warmup")
      o.warmup = static_cast<double>(parseInt(arg, value(), 0));
    else if (arg == "--decay-steps")
      o.decaySteps = static_cast<double>(parseInt(arg, value(), 0));
    else if (arg == "--clip")
      o.clip = parseNumber(arg, value(), 0.0);
    else if (arg == "--checkpoint-dir")
      o.checkpointDir = value();
    else if (arg == "--checkpoint-every")
      o.checkpointEvery = parseInt(arg, value(), 1);
    else if (arg == "--resume")
      o.resume = value();
    else if (arg == "--export")
      o.exportDir = value();
    else if (arg == "--plot")
      o.plot = value();
    else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
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
  bool training = o.steps > 0;
  if (!training &&
      (!o.checkpointDir.empty() || !o.resume.empty() || !o.plot.empty()))
    usageError("--checkpoint-dir, --resume and --plot need --steps");
  if (training && (!o.dump.empty() || !o.dumpGrads.empty() ||
                   !o.program.empty() || o.repeat != 1))
    usageError("--dump, --dump-grads, --program and --repeat evaluate one "
               "batch; they do not combine with --steps");
  if (o.checkpointEvery > 0 && o.checkpointDir.empty())
    usageError("--checkpoint-every needs --checkpoint-dir");
  if (!o.weights.empty() && !o.resume.empty())
    usageError("--weights and --resume both set the parameters; give one");
  return o;
}

/// The communicator of the plan's grid, created once the plan is loaded.
std::unique_ptr<GridComm> gridComm;

/// Files (metrics, dumps, exports, plots) are written by the first rank:
/// every rank computes the same whole values.
bool isFirstRank() { return Comm::world().rank() == 0; }

int64_t maxRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

/// Bytes this rank sent per collective kind (ring rule, as
/// tp-report-communication computes them statically) over `runs` runs of
/// the program, in total and per run (per training step), in whole bytes as
/// the static report prints them.
nlohmann::ordered_json
commStatsJson(const std::map<std::string, CommStats> &stats, int64_t runs) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto &[kind, s] : stats)
    json[kind] = {
        {"calls", s.calls},
        {"bytes", std::llround(s.bytes)},
        {"bytes_per_step", std::llround(s.bytes / std::max<int64_t>(runs, 1))}};
  return json;
}

nlohmann::ordered_json
opStatsJson(const std::map<std::string, OpStats> &stats) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto &[kind, s] : stats)
    json[kind] = {{"count", s.count}, {"seconds", s.seconds}};
  return json;
}

/// Runs `name` on one batch and adds its results to `writer` under the
/// plan's result names ("logits", "loss", a gradient's parameter name).
void dumpProgram(const LoadedPlan &plan, ParamStore &params,
                 const std::string &name, const Batch &batch,
                 SafetensorsWriter &writer) {
  ProgramRunner runner(plan, name, params, gridComm.get());
  runner.setInput(tpc::plan::InputKind::Tokens, batch.tokens);
  if (runner.hasInput(tpc::plan::InputKind::Targets))
    runner.setInput(tpc::plan::InputKind::Targets, batch.targets);
  runner.run();
  const auto *names = plan.program(name)->result_names();
  for (size_t i = 0; i < runner.numResults(); ++i) {
    std::vector<int64_t> shape = runner.resultShape(i);
    std::string key = names && i < names->size()
                          ? names->Get(i)->str()
                          : name + ".result" + std::to_string(i);
    // A gradient is named after its parameter and takes its file shape.
    for (const tpc::plan::Param *param : *plan.plan().params())
      if (param->name()->str() == key)
        shape = fileShape(*param);
    writer.addF32(key, shape, runner.result(i));
  }
}

int evaluate(const Options &o, const LoadedPlan &plan, ParamStore &params,
             std::span<const int32_t> stream) {
  std::string name = o.program;
  if (name.empty())
    name = plan.program("loss") ? "loss" : "forward";
  ProgramRunner runner(plan, name, params, gridComm.get());
  std::vector<int64_t> tokensShape = runner.tokensShape();
  const int64_t batch = tokensShape[0], seq = tokensShape[1];
  Batch window = cutBatch(stream, o.offset, batch, seq);
  runner.setInput(tpc::plan::InputKind::Tokens, window.tokens);
  if (runner.hasInput(tpc::plan::InputKind::Targets))
    runner.setInput(tpc::plan::InputKind::Targets, window.targets);

  std::vector<double> seconds;
  for (int64_t r = 0; r < o.repeat; ++r) {
    if (r + 1 == o.repeat) {
      runner.resetStats(); // per-op times and traffic of the last run
      gridComm->resetStats();
    }
    auto start = std::chrono::steady_clock::now();
    runner.run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  // The last run's traffic, before any dump runs programs again.
  const std::map<std::string, CommStats> commStats = gridComm->stats();
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double tokensPerSecond = double(batch * seq) / median;

  std::optional<float> loss;
  if (runner.numResults() >= 1 && runner.resultShape(0).empty())
    loss = runner.result(0)[0];
  std::cout << std::setprecision(8) << "program " << name << ": ";
  if (loss)
    std::cout << "loss " << *loss << ", ";
  std::cout << std::setprecision(4) << batch * seq << " tokens, "
            << median * 1e3 << " ms, " << tokensPerSecond << " tokens/s\n";

  if (!o.dump.empty()) {
    SafetensorsWriter writer;
    for (const char *program : {"forward", "loss"})
      if (plan.program(program))
        dumpProgram(plan, params, program, window, writer);
    if (isFirstRank())
      writer.write(o.dump);
  }
  if (!o.dumpGrads.empty()) {
    SafetensorsWriter writer;
    dumpProgram(plan, params, "gradients", window, writer);
    if (isFirstRank())
      writer.write(o.dumpGrads);
  }

  if (!o.metrics.empty()) {
    const uint64_t peak =
        runner.arenaBytes() + params.bytes() + runner.inputBytes();
    // nlohmann writes a NaN or infinite number as null: the file stays
    // valid JSON whatever the loss did.
    nlohmann::ordered_json json;
    json["program"] = name;
    if (loss)
      json["loss"] = *loss;
    json["batch"] = batch;
    json["seq"] = seq;
    json["tokens"] = batch * seq;
    json["threads"] = cpu::numThreads();
    json["runs"] = seconds.size();
    json["seconds"] = seconds;
    json["seconds_median"] = median;
    json["tokens_per_second"] = tokensPerSecond;
    json["memory"] = {{"arena_bytes", runner.arenaBytes()},
                      {"param_bytes", params.bytes()},
                      {"input_bytes", runner.inputBytes()},
                      {"planned_peak_bytes", peak},
                      {"max_rss_bytes", maxRssBytes()}};
    json["communication"] = commStatsJson(commStats, 1);
    json["ops"] = opStatsJson(runner.stats());
    if (isFirstRank())
      writeFileAtomically(o.metrics, json.dump(2) + "\n");
  }
  return 0;
}

int trainRun(const Options &o, const LoadedPlan &plan, ParamStore &params,
             std::span<const int32_t> stream) {
  TrainConfig config;
  config.steps = o.steps;
  const double warmup =
      o.warmup ? *o.warmup : std::min<double>(100.0, double(o.steps / 10));
  config.hyperparameters = {
      static_cast<float>(o.lr),
      static_cast<float>(o.minLr ? *o.minLr : o.lr / 10),
      static_cast<float>(warmup),
      static_cast<float>(o.decaySteps ? *o.decaySteps : double(o.steps)),
      static_cast<float>(o.clip)};
  config.checkpointEvery = o.checkpointEvery;
  config.checkpointDir = o.checkpointDir;
  config.resume = o.resume;
  config.comm = gridComm.get();
  auto start = std::chrono::steady_clock::now();
  TrainResult result = train(plan, params, stream, config, std::cout);
  double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  if (!o.exportDir.empty() && result.stoppedBecause.empty()) {
    // One model.safetensors of whole parameters, written by rank 0.
    writeWholeParams(plan, params, gridComm.get(),
                     [&](const ParamStore &whole) {
                       exportHuggingFace(o.exportDir, plan, whole);
                     });
    std::cout << "exported: " << o.exportDir << "/{model.safetensors,"
              << "config.json}\n";
  }
  if (!o.plot.empty() && isFirstRank()) {
    std::vector<int64_t> steps;
    std::vector<double> losses;
    for (const StepRecord &r : result.records) {
      if (!std::isfinite(r.loss))
        continue; // the step that stopped a diverging run
      steps.push_back(r.step);
      losses.push_back(r.loss);
    }
    writeLossCurveSvg(o.plot, steps, losses, "training loss");
    std::cout << "loss curve: " << o.plot << "\n";
  }
  if (!o.metrics.empty()) {
    double stepSeconds = 0;
    for (const StepRecord &r : result.records)
      stepSeconds += r.seconds;
    nlohmann::ordered_json json;
    json["program"] = "train_step";
    json["tokens_per_step"] = result.tokensPerStep;
    json["first_step"] = result.firstStep;
    json["steps"] = o.steps;
    json["threads"] = cpu::numThreads();
    json["seconds_total"] = total;
    json["tokens_per_second"] =
        stepSeconds > 0
            ? result.tokensPerStep * result.records.size() / stepSeconds
            : 0.0;
    json["hyperparameters"] = hyperparametersJson(config.hyperparameters);
    json["memory"] = {
        {"arena_bytes", result.arenaBytes},
        {"param_and_optimizer_bytes", result.paramBytes},
        {"input_bytes", result.inputBytes},
        {"planned_peak_bytes",
         result.arenaBytes + result.paramBytes + result.inputBytes},
        {"max_rss_bytes", maxRssBytes()}};
    nlohmann::ordered_json curve = nlohmann::ordered_json::array();
    for (const StepRecord &r : result.records)
      curve.push_back({{"step", r.step},
                       {"loss", r.loss},
                       {"lr", r.learningRate},
                       {"seconds", r.seconds}});
    json["loss_curve"] = std::move(curve);
    json["communication"] =
        commStatsJson(gridComm->stats(), int64_t(result.records.size()));
    json["ops"] = opStatsJson(result.opStats);
    if (isFirstRank())
      writeFileAtomically(o.metrics, json.dump(2) + "\n");
  }
  if (!result.stoppedBecause.empty())
    throw std::runtime_error(result.stoppedBecause);
  return 0;
}

/// Everything before the first collective: a failure here happens on each
/// rank on its own (a bad flag, plan, weights or token file), so all ranks
/// can report it and stop together.
struct Prepared {
  LoadedPlan plan;
  ParamStore params;
  std::vector<int32_t> stream;
  /// Held by the rank that writes checkpoints, for the whole run.
  std::unique_ptr<CheckpointDirLock> checkpointLock;
};

/// Every file and directory the run will write can be written: checked
/// before anything long starts, on the rank that writes them.
void checkOutputs(const Options &o) {
  if (!isFirstRank())
    return;
  for (auto [path, flag] : {std::pair{&o.metrics, "--metrics"},
                            {&o.plot, "--plot"},
                            {&o.dump, "--dump"},
                            {&o.dumpGrads, "--dump-grads"}})
    if (!path->empty())
      checkWritableFile(*path, flag);
  for (auto [path, flag] : {std::pair{&o.exportDir, "--export"},
                            {&o.checkpointDir, "--checkpoint-dir"}})
    if (!path->empty())
      checkWritableDirectory(*path, flag);
}

std::optional<Prepared> prepare(const Options &o) {
  if (o.threads)
    cpu::setNumThreads(o.threads);
  checkOutputs(o);
  LoadedPlan plan = LoadedPlan::load(o.plan, Comm::world().size());
  if (o.printPlan) {
    plan.printJson(std::cout);
    return std::nullopt;
  }
  if (o.steps > 0 && !plan.program("train_step"))
    throw std::runtime_error(o.plan + ": has no train_step program (compile "
                                      "with tp-pipeline's train=true)");
  gridComm = std::make_unique<GridComm>(std::vector<int64_t>(
      plan.plan().grid()->begin(), plan.plan().grid()->end()));
  const std::vector<int64_t> &coords = gridComm->coords();
  ParamStore params =
      o.weights.empty() ? ParamStore::initialise(plan, coords)
                        : ParamStore::fromSafetensors(plan, o.weights, coords);
  std::vector<int32_t> stream = readTokenFile(o.data);
  if (int64_t vocab = plan.vocabularySize())
    checkTokenIds(stream, vocab, o.data);
  std::unique_ptr<CheckpointDirLock> lock;
  if (!o.checkpointDir.empty() && isFirstRank()) {
    lock = std::make_unique<CheckpointDirLock>(o.checkpointDir);
    for (const std::string &leftover : lock->removedLeftovers())
      std::cout << "removed a leftover of a killed run: " << leftover << "\n";
  }
  return Prepared{std::move(plan), std::move(params), std::move(stream),
                  std::move(lock)};
}

/// What every rank must agree on before the first collective: a rank given
/// another plan, data or schedule would otherwise deadlock or train on
/// garbage. Returns the first thing that differs, or an empty string.
std::string disagreement(const Comm &world, const Options &o,
                         const Prepared &p) {
  std::ostringstream schedule;
  schedule << std::setprecision(17) << o.steps << ' ' << o.lr << ' '
           << o.minLr.value_or(-1) << ' ' << o.warmup.value_or(-1) << ' '
           << o.decaySteps.value_or(-1) << ' ' << o.clip << ' '
           << o.checkpointEvery << ' ' << o.offset << ' ' << o.repeat << ' '
           << o.program << ' ' << o.weights.empty() << o.resume.empty();
  const std::string options = schedule.str();
  const std::pair<uint64_t, const char *> checks[] = {
      {p.plan.contentChecksum(), "plan files"},
      {contentChecksum(std::as_bytes(std::span(p.stream))), "token data"},
      {contentChecksum(std::as_bytes(std::span(options))),
       "options (steps, schedule, program, offset, weights or resume)"}};
  for (const auto &[checksum, what] : checks)
    if (!world.allEqual(checksum))
      return what;
  return {};
}

int execute(const Options &o, Prepared &p) {
  if (o.steps > 0)
    return trainRun(o, p.plan, p.params, p.stream);
  return evaluate(o, p.plan, p.params, p.stream);
}

/// Swallows the normal output of ranks other than 0.
class NullBuffer : public std::streambuf {
protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char *, std::streamsize n) override { return n; }
};

void printError(const Comm &world, const std::exception &error) {
  std::ostringstream line;
  line << "tp-run: error: ";
  if (world.size() > 1)
    line << "rank " << world.rank() << ": ";
  line << error.what() << "\n";
  std::cerr << line.str() << std::flush;
}

} // namespace

// Every rank runs main. Errors are one line on stderr from each failing rank
// ("tp-run: error: rank R: ..." when there are several) and exit code 1:
// setup failures are agreed on over the world so all ranks exit cleanly;
// a failure once the programs run aborts every rank (abortAll).
int main(int argc, char **argv) {
  Comm &world = Comm::world();
  if (world.rank() != 0)
    std::cout.rdbuf(new NullBuffer); // kept to the end: cout flushes at exit

  Options options;
  std::optional<Prepared> prepared;
  bool ok = true;
  try {
    options = parseArgs(argc, argv);
    prepared = prepare(options);
  } catch (const std::exception &error) {
    printError(world, error);
    ok = false;
  }
  if (!world.allSucceeded(ok)) {
    if (ok)
      std::cerr << ("tp-run: error: rank " + std::to_string(world.rank()) +
                    ": stopping: another rank failed to start\n")
                << std::flush;
    return 1;
  }
  if (!prepared)
    return 0; // --print-plan
  if (std::string what = disagreement(world, options, *prepared);
      !what.empty()) {
    std::cerr << ("tp-run: error: rank " + std::to_string(world.rank()) +
                  ": the ranks were given different " + what +
                  "; every rank must run the same command on the same "
                  "files\n")
              << std::flush;
    return 1;
  }
  try {
    return execute(options, *prepared);
  } catch (const std::exception &error) {
    printError(world, error);
    if (world.size() > 1)
      abortAll(1);
    return 1;
  }
}
