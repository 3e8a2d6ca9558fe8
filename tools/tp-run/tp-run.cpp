// tp-run: runs a tpc plan (the driver; its command line is Options.cpp).
//
//   tp-run train PLAN --data TOKENS --steps N [--lr ...] [--checkpoint-dir D]
//   tp-run eval PLAN --data TOKENS [--program loss|forward] [--dump F]
//   tp-run generate PLAN --max-new-tokens N --prompt TEXT [--temperature T]
//   tp-run inspect PLAN
//
// Under mpirun every rank runs this program on a plan whose grid has as many
// ranks; only rank 0 prints normal output and writes files. Without
// --weights (or --resume) parameters get the deterministic initialisation
// that every plan of the same model shares. Every error is one line on
// stderr and exit code 1.

#include "Options.h"
#include "Plot.h"
#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Generator.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/RunReport.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/SanitizerDefaults.h"
#include "tpc/runtime/Session.h"
#include "tpc/runtime/TextCodec.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/Training.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <streambuf>

using namespace tpc::runtime;
using namespace tpc::tools;

TPC_ASAN_DEFAULT_OPTIONS(":detect_leaks=0") // an MPI program

namespace {

/// Files (metrics, dumps, exports, plots) are written by the first rank:
/// every rank computes the same whole values.
bool isFirstRank() { return Comm::world().rank() == 0; }

/// Everything the run holds once set up: the session (plan, grid, backend,
/// parameters) and the token data.
struct Prepared {
  std::unique_ptr<Session> session;
  std::vector<int32_t> stream;
  /// Held-out tokens (--eval-data, or the tail --eval-fraction cut off
  /// `stream`) and how many batches each evaluation runs.
  std::vector<int32_t> evalStream;
  int64_t evalBatches = 0;
  /// Held by the rank that writes checkpoints, for the whole run.
  std::unique_ptr<CheckpointDirLock> checkpointLock;
};

int evaluate(const Options &o, Prepared &p) {
  const LoadedPlan &plan = p.session->plan();
  ParamStore &params = p.session->params();
  std::span<const int32_t> stream = p.stream;
  Session &session = *p.session;
  std::string name = o.program;
  if (name.empty())
    name = plan.program("loss") ? "loss" : "forward";
  if (plan.program(name) &&
      !plan.wholeInputShape(name, tpc::plan::InputKind::Positions).empty())
    throw std::invalid_argument("--program " + name +
                                ": a generation program (it reads positions "
                                "and KV caches); run it with tp-run "
                                "generate");
  std::optional<Evaluator> evaluator;
  try {
    evaluator.emplace(plan, params, &session.grid(), session.backend(), name);
  } catch (const std::invalid_argument &error) {
    throw std::invalid_argument("--program " + name + ": " +
                                std::string(error.what()));
  }
  const BatchRun run = evaluator->runBatch(stream, o.offset, o.repeat);
  ProgramRunner &runner = evaluator->programRunner();
  const int64_t batch = run.batch, seq = run.seq;
  const Batch window = cutBatch(stream, o.offset, batch, seq);
  // The last run's traffic, before any dump runs programs again.
  const std::map<std::string, CommStats> commStats = session.grid().stats();
  const double median = run.medianSeconds();
  const double tokensPerSecond = double(batch * seq) / median;

  const std::optional<float> loss = run.loss;
  std::cout << std::setprecision(8) << "program " << name << ": ";
  if (loss)
    std::cout << "loss " << *loss << ", ";
  std::cout << std::setprecision(4) << batch * seq << " tokens, "
            << median * 1e3 << " ms, " << tokensPerSecond << " tokens/s\n";

  if (!o.dump.empty()) {
    SafetensorsWriter writer;
    for (const char *program : {"forward", "loss"})
      if (plan.program(program))
        addProgramResults(plan, params, &p.session->grid(),
                          p.session->backend(), program, window, writer);
    if (isFirstRank())
      writer.write(o.dump);
  }
  if (!o.dumpGrads.empty()) {
    SafetensorsWriter writer;
    addProgramResults(plan, params, &p.session->grid(), p.session->backend(),
                      "gradients", window, writer);
    if (isFirstRank())
      writer.write(o.dumpGrads);
  }

  if (!o.metrics.empty()) {
    RunReport report(RunReport::Mode::Evaluate);
    report.setDevice(p.session->backend());
    report.setBatch(name, run, runner.arenaBytes(), params.bytes(),
                    runner.inputBytes());
    report.setCommunication(commStats, 1);
    report.setOps(runner.stats());
    if (isFirstRank())
      report.write(o.metrics);
  }
  return 0;
}

int trainRun(const Options &o, Prepared &p) {
  const LoadedPlan &plan = p.session->plan();
  ParamStore &params = p.session->params();
  std::span<const int32_t> stream = p.stream;
  TrainConfig config;
  config.evalEvery = o.evalEvery;
  config.evalBatches = p.evalBatches;
  config.evalStream = p.evalStream;
  config.steps = o.steps;
  config.hyperparameters = o.schedule.hyperparameters(o.steps);
  config.checkpointEvery = o.checkpointEvery;
  config.opByOpSteps = o.opByOpSteps;
  config.rankTimes = o.rankTimes;
  config.checkpointDir = o.checkpointDir;
  config.resume = o.resume;
  config.comm = &p.session->grid();
  config.backend = &p.session->backend();
  config.rebalance = o.rebalanceOptions;
  if (!o.stopFile.empty())
    config.stopRequested = [&o] {
      std::error_code error;
      return std::filesystem::exists(o.stopFile, error);
    };
  auto start = std::chrono::steady_clock::now();
  ProgressLog progress(std::cout);
  TrainResult result = train(plan, params, stream, config, progress);
  double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  if (!o.exportDir.empty() && result.stoppedBecause.empty()) {
    p.session->exportHuggingFace(o.exportDir);
    std::cout << "exported: " << o.exportDir << "/{model.safetensors,"
              << "config.json}\n";
  }
  if (!o.plot.empty() && isFirstRank()) {
    writeTrainingCurvesSvg(o.plot, result);
    std::cout << "loss curve: " << o.plot << "\n";
  }
  if (!o.metrics.empty()) {
    RunReport report(RunReport::Mode::Train);
    report.setDevice(p.session->backend());
    report.setTraining(plan, config, result, o.steps, total);
    if (o.evalEvery > 0)
      report.json()["evaluation"]["source"] =
          o.evalFraction ? "last " + std::to_string(p.evalStream.size()) +
                               " tokens of " + o.data
                         : o.evalData;
    if (rebalancingAsked(o))
      report.setRebalance(o.rebalanceOptions, o.slow, result);
    report.setCommunication(p.session->grid().stats(),
                            int64_t(result.records.size()));
    report.setTrainingOps(result.opStats, result.firstStepOpStats,
                          result.opSteps);
    if (isFirstRank())
      report.write(o.metrics);
  }
  if (!result.stoppedBecause.empty())
    throw std::runtime_error(result.stoppedBecause);
  return 0;
}

/// Everything before the first collective: a failure here happens on each
/// rank on its own (a bad flag, plan, weights or token file), so all ranks
/// can report it and stop together. Null for --print-plan.
std::unique_ptr<Prepared> prepare(const Options &o) {
  if (o.threads)
    cpu::setNumThreads(o.threads);
  checkOutputs(o);
  if (o.inspect) {
    // Shown, not run: no device, grid or parameters.
    LoadedPlan::load(o.plan, kAnyWorldSize).printJson(std::cout);
    return nullptr;
  }
  auto session = std::make_unique<Session>(
      o.plan, SessionOptions{o.device, machineLocalRank(), o.weights});
  const LoadedPlan &plan = session->plan();
  if (o.steps > 0 && !plan.program("train_step"))
    throw std::runtime_error(o.plan + ": has no train_step program (compile "
                                      "with tp-pipeline's train=true)");
  std::vector<int32_t> stream =
      o.data.empty() ? std::vector<int32_t>() : readTokenFile(o.data);
  if (int64_t vocab = plan.vocabularySize())
    checkTokenIds(stream, vocab, o.data);
  if (o.generate > 0 && !plan.program("forward") &&
      (o.noKvCache || !plan.program("decode")))
    throw std::runtime_error(o.plan + ": has no forward program, which "
                                      "--generate runs without KV caches");
  HeldOut heldOut;
  if (o.evalEvery > 0) {
    if (!plan.program("loss"))
      throw std::runtime_error(o.plan + ": has no loss program, which "
                                        "--eval-every runs");
    std::vector<int32_t> given;
    if (!o.evalFraction) {
      given = readTokenFile(o.evalData);
      if (int64_t vocab = plan.vocabularySize())
        checkTokenIds(given, vocab, o.evalData);
    }
    std::ostringstream source;
    if (o.evalFraction)
      source << "--eval-fraction " << *o.evalFraction;
    else
      source << o.evalData;
    heldOut = holdOut(plan, stream, o.evalFraction, std::move(given),
                      o.evalTokens, source.str());
  }
  std::unique_ptr<CheckpointDirLock> lock;
  if (!o.checkpointDir.empty() && isFirstRank()) {
    lock = std::make_unique<CheckpointDirLock>(o.checkpointDir, o.resume);
    for (const std::string &leftover : lock->removedLeftovers())
      std::cout << "removed a leftover of a killed run: " << leftover << "\n";
  }
  return std::unique_ptr<Prepared>(new Prepared{
      std::move(session), std::move(stream), std::move(heldOut.tokens),
      heldOut.batches, std::move(lock)});
}

/// What every rank must agree on besides its options (checked before, in
/// main): the contents of the files they read, and what each derived from
/// its own machine or files. A rank given another plan or data would
/// otherwise deadlock or train on garbage. Returns the first thing that
/// differs, or an empty string.
std::string disagreement(const Comm &world, const Options &o,
                         const Prepared &p) {
  std::ostringstream derived;
  derived << p.session->backend().name() << ' ' << p.evalBatches << ' '
          << o.promptLines.size() << ' ';
  for (const std::string &line : o.promptLines)
    derived << line.size() << ':' << line;
  const std::string settings = derived.str();
  const std::pair<uint64_t, const char *> checks[] = {
      {p.session->plan().contentChecksum(), "plan files"},
      {contentChecksum(std::as_bytes(std::span(p.stream))), "token data"},
      {contentChecksum(std::as_bytes(std::span(p.evalStream))),
       "held-out token data"},
      {contentChecksum(std::as_bytes(std::span(settings))),
       "devices, prompts or held-out batches"}};
  for (const auto &[checksum, what] : checks)
    if (!world.allEqual(checksum))
      return what;
  return {};
}

/// Continues the prompt by --generate tokens: every rank runs the same
/// steps and draws the same tokens from the same seed; rank 0 prints and
/// writes.
int generateRun(const Options &o, Prepared &p) {
  if (!o.resume.empty())
    readCheckpoint(o.resume, p.session->plan(), p.session->params());
  // The prompt's and the output's tokenizer.
  const TextCodec codec = TextCodec::open(o.tokenizerJson, o.sentencePiece);
  std::vector<int32_t> context;
  if (!o.promptIds.empty()) {
    try {
      context = parseTokenIds(o.promptIds);
    } catch (const std::invalid_argument &error) {
      throw std::invalid_argument(std::string("--prompt-ids: ") + error.what());
    }
  } else if (!o.prompt.empty()) {
    context = codec.encode(o.prompt);
  }
  // One prompt per sample: --prompts' lines, or the prompt --samples times.
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string &line : o.promptLines)
    prompts.push_back(codec.encode(line));
  if (prompts.empty())
    prompts.assign(size_t(o.samples), context);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what =
        o.promptLines.empty()
            ? "the prompt"
            : "prompt " + std::to_string(i + 1) + " of " + o.promptsFile;
    if (int64_t vocab = p.session->plan().vocabularySize())
      checkTokenIds(prompts[i], vocab, what);
    if (prompts[i].empty())
      throw std::invalid_argument(what + " has no tokens");
  }
  Generator generator = p.session->generator();
  GenerationRequest request;
  request.prompts = std::move(prompts);
  request.newTokens = o.generate;
  request.sampling = o.sampling;
  request.seed = o.seed;
  if (!o.ignoreEos)
    request.endIds = p.session->plan().endTokenIds();
  request.kvCaches = !o.noKvCache;
  const bool kvCache = request.kvCaches && generator.hasKvCaches();
  // The samples (--samples, or --prompts' lines) must fit the programs'
  // batch: said in the flags' words.
  if (const int64_t batch = generator.sequencesAtOnce(kvCache);
      int64_t(request.prompts.size()) > batch)
    throw std::invalid_argument(
        (o.promptsFile.empty()
             ? "--samples " + std::to_string(o.samples)
             : "--prompts " + o.promptsFile + ": " +
                   std::to_string(request.prompts.size()) + " prompts") +
        ": the plan generates " + std::to_string(batch) +
        " sequences at once (tpc-import --batch)");
  // Progress notes go to the log (rank 0 prints it).
  GenerationLog notes(std::cout);
  const GenerationResult out = generator.generate(request, &notes);
  const double seconds = out.seconds;
  // Samples after the first follow a separator line, as nanoGPT prints them.
  for (size_t i = 0; i < out.samples.size(); ++i) {
    std::vector<int32_t> text = out.samples[i].prompt;
    text.insert(text.end(), out.samples[i].generated.begin(),
                out.samples[i].generated.end());
    std::cout << (i ? "---------------\n" : "") << codec.decode(text) << "\n";
  }
  // On stderr, so that stdout is the text alone; once, by the first rank.
  const size_t newTokens = size_t(out.tokensDrawn);
  if (isFirstRank())
    std::cerr << "generated " << newTokens << " tokens in " << seconds << " s ("
              << double(newTokens) / seconds << " tokens/s, "
              << (kvCache ? "KV caches" : "the whole context each step")
              << ")\n";
  if (!o.metrics.empty() && isFirstRank()) {
    RunReport report(RunReport::Mode::Generate);
    report.setDevice(p.session->backend());
    report.setGeneration(
        request, out, p.session->params().bytes(),
        [&](std::span<const int32_t> ids) { return codec.decode(ids); });
    report.write(o.metrics);
  }
  return 0;
}

int execute(const Options &o, Prepared &p) {
  // Collective: every rank got here (main agreed on the set-up).
  p.session->connect();
  if (o.steps > 0)
    return trainRun(o, p);
  if (o.generate > 0)
    return generateRun(o, p);
  return evaluate(o, p);
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
  // std::bad_alloc says only "std::bad_alloc".
  if (dynamic_cast<const std::bad_alloc *>(&error))
    line << "out of memory: this machine cannot hold the run's parameters, "
            "optimizer state, activations or data (std::bad_alloc)\n";
  else
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

  // Each start-up stage ends with the ranks agreeing that all of them got
  // through it: one that failed alone would leave the others waiting in a
  // collective.
  auto startTogether = [&](auto &&stage) {
    try {
      runTogether(world, stage);
      return true;
    } catch (const std::exception &error) {
      printError(world, error);
      return false;
    }
  };
  Options options;
  if (!startTogether([&] { options = parseArgs(argc, argv); }))
    return 1;
  // Before anything a rank may do alone (print the plan, write a file).
  if (std::string what = optionsDisagreement(world, options); !what.empty()) {
    std::cerr << ("tp-run: error: rank " + std::to_string(world.rank()) +
                  ": the ranks were given different options: " + what +
                  "; every rank must run the same command\n")
              << std::flush;
    return 1;
  }
  std::unique_ptr<Prepared> prepared;
  if (!startTogether([&] { prepared = prepare(options); }))
    return 1;
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
