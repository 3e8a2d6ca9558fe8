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
// (`tp-run --help` lists every option with its type and check.)
//
// Without --weights (or --resume), parameters get the deterministic
// initialisation that every plan of the same model shares. Every error is
// one line on stderr and exit code 1.
//
// Under mpirun (mpirun -np N tp-run ...) every rank runs this program on a
// plan whose grid has N ranks; only rank 0 prints normal output.

#include "Plot.h"
#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Generator.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/RunReport.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/Sampling.h"
#include "tpc/runtime/SanitizerDefaults.h"
#include "tpc/runtime/SentencePiece.h"
#include "tpc/runtime/Session.h"
#include "tpc/runtime/TextCodec.h"
#include "tpc/runtime/Tokenizer.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/Training.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <streambuf>
#include <sys/resource.h>

using namespace tpc::runtime;
using tpc::tools::writeLossCurveSvg;

TPC_ASAN_DEFAULT_OPTIONS(":detect_leaks=0") // an MPI program

namespace {

/// One prompt per line; a generation batch is a few hundred of them.
constexpr uint64_t kMaxPromptsBytes = uint64_t(256) << 20;

struct Options {
  std::string plan, data, weights, program, metrics, dump, dumpGrads;
  int64_t offset = 0;
  int64_t repeat = 1;
  int threads = 0;
  std::string device;   // empty: defaultDevice()
  bool inspect = false; // print the plan, on any number of ranks
  // Training.
  int64_t steps = 0;
  LearningRateSchedule schedule;
  std::string checkpointDir, resume, exportDir, plot;
  int64_t checkpointEvery = 0;
  // Generation.
  int64_t generate = 0;
  int64_t samples = 1;
  bool noKvCache = false, ignoreEos = false;
  std::string prompt, promptIds, tokenizerJson, sentencePiece;
  // --prompts FILE: its lines, each one sample's prompt (read while the
  // options are checked, so that ranks compare them).
  std::string promptsFile;
  std::vector<std::string> promptLines;
  SamplingOptions sampling;
  uint64_t seed = 0;
  // Held-out evaluation.
  std::string evalData;
  std::optional<double> evalFraction;
  int64_t evalEvery = 0;
  std::optional<int64_t> evalTokens;
  // Mixed hardware (docs/rebalancing.md).
  std::string rebalance = "off";
  std::vector<std::string> slow;
  RebalanceOptions rebalanceOptions;
  /// Every option as the ranks must agree on it, built from the parser's
  /// own list (agreedOptions), so a new option cannot be left out.
  std::vector<std::pair<std::string, std::string>> agreed;
};

/// How the ranks' agreement treats an option. By default its value must be
/// the same on every rank. Paths of files whose contents are compared (the
/// plan, token data) or that only rank 0 writes may differ, but all ranks
/// must give them or none: rank 0 alone exporting, dumping or printing the
/// plan would leave the others waiting in a collective. Thread counts are
/// each rank's own.
enum class Agreement { Value, Presence, Local };

Agreement agreementOf(const std::string &name) {
  static const std::set<std::string> presence = {
      "plan",     "--data",           "--eval-data", "--weights",
      "--resume", "--metrics",        "--dump",      "--dump-grads",
      "--export", "--checkpoint-dir", "--plot",      "--prompts"};
  if (name == "--threads")
    return Agreement::Local;
  return presence.count(name) ? Agreement::Presence : Agreement::Value;
}

/// The options of `app` and of the subcommand it ran, if any.
std::vector<const CLI::Option *> givenOptions(const CLI::App &app) {
  std::vector<const CLI::Option *> options = app.get_options();
  for (const CLI::App *sub : app.get_subcommands())
    for (const CLI::Option *option : sub->get_options())
      options.push_back(option);
  return options;
}

/// (name, what must agree) for every option the parser knows, in its order,
/// and the subcommand run.
std::vector<std::pair<std::string, std::string>>
agreedOptions(const CLI::App &app) {
  std::vector<std::pair<std::string, std::string>> agreed;
  std::string subcommand;
  for (const CLI::App *sub : app.get_subcommands())
    subcommand = sub->get_name();
  agreed.emplace_back("the subcommand",
                      subcommand.empty() ? "none" : subcommand);
  for (const CLI::Option *option : givenOptions(app)) {
    std::string name = option->get_name();
    if (name == "--help")
      continue;
    std::string value;
    switch (agreementOf(name)) {
    case Agreement::Local:
      continue;
    case Agreement::Presence:
      value = option->count() ? "given" : "not given";
      break;
    case Agreement::Value:
      for (const std::string &result : option->results())
        value += std::to_string(result.size()) + ":" + result + ";";
      break;
    }
    // An option of the root and of a subcommand: both count.
    agreed.emplace_back(std::move(name), std::move(value));
  }
  return agreed;
}

/// Whether the run rebalances, emulates a straggler or splits by known
/// speeds: each needs training steps and records a `rebalance` section.
bool rebalancingAsked(const Options &o) {
  return o.rebalance != "off" || !o.slow.empty() ||
         !o.rebalanceOptions.rankSpeeds.empty();
}

[[noreturn]] void usageError(const std::string &message) {
  throw std::invalid_argument(message);
}

/// A numeric option's check, with a readable message (CLI11's own range
/// checks print their bounds as 300-digit decimals): a finite number (an
/// integer when `integer`) of at least `min`, and at most `max` if given.
CLI::Validator numberCheck(bool integer, double min,
                           std::optional<double> max = std::nullopt,
                           const std::string &maxReason = "") {
  auto format = [](double value) {
    std::ostringstream os;
    os << value;
    return os.str();
  };
  std::string description = std::string(integer ? "INT" : "NUMBER") +
                            " >= " + format(min) +
                            (max ? ", <= " + format(*max) : "");
  return CLI::Validator(
      [=](std::string &text) -> std::string {
        // Whole text, no saturation: 1e99 steps is an error, not INT64_MAX.
        double value = 0;
        bool parsed = false;
        if (integer) {
          int64_t whole = 0;
          auto [end, error] =
              std::from_chars(text.data(), text.data() + text.size(), whole);
          parsed = error == std::errc() && end == text.data() + text.size();
          value = double(whole);
        } else {
          char *end = nullptr;
          errno = 0;
          value = std::strtod(text.c_str(), &end);
          parsed = !text.empty() && errno == 0 && *end == '\0';
        }
        if (!parsed || !std::isfinite(value))
          return std::string("expects ") +
                 (integer ? "an integer" : "a number") + ", got '" + text + "'";
        if (value < min)
          return "must be >= " + format(min) + ", got " + text;
        if (max && value > *max)
          return "must be at most " + format(*max) + maxReason + ", got " +
                 text;
        return {};
      },
      description);
}

/// Today's flat form, `tp-run PLAN [--steps N | --generate N |
/// --print-plan] ...`, as the subcommand it names (train, generate with
/// --max-new-tokens N, inspect; else eval): it keeps working for this
/// release. The subcommands themselves pass unchanged.
std::vector<std::string> subcommandForm(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  static const std::set<std::string> subcommands = {
      "train", "eval", "generate", "inspect", "--help", "-h"};
  if (args.size() < 2 || subcommands.count(args[1]))
    return args;
  auto given = [&](const std::string &flag) {
    return std::find_if(args.begin() + 1, args.end(), [&](const auto &arg) {
      return arg == flag || arg.rfind(flag + "=", 0) == 0;
    });
  };
  std::string mode = "eval";
  if (auto it = given("--print-plan"); it != args.end()) {
    args.erase(it);
    mode = "inspect";
  } else if (auto it = given("--generate"); it != args.end()) {
    it->replace(0, std::string("--generate").size(), "--max-new-tokens");
    mode = "generate";
  } else if (given("--steps") != args.end()) {
    mode = "train";
  }
  args.insert(args.begin() + 1, mode);
  return args;
}

/// The command line, with --help generated from the options below.
Options parseArgs(int argc, char **argv) {
  Options o;
  const std::vector<std::string> args = subcommandForm(argc, argv);
  CLI::App app("Runs a tpc plan: tp-run train|eval|generate|inspect PLAN "
               "..., each with only its own options (see tp-run SUBCOMMAND "
               "--help). Under mpirun every rank runs it on the same plan, "
               "whose grid must have as many ranks. The flat form (tp-run "
               "PLAN ...: train with --steps, generate with --generate N, "
               "inspect with --print-plan, else eval) still works for this "
               "release.",
               "tp-run");
  app.get_formatter()->column_width(34);
  // The options by what they are for; each subcommand takes only its own.
  auto addPlan = [&](CLI::App &a) {
    a.add_option("plan", o.plan, "The plan file (.tpplan)");
  };
  auto addData = [&](CLI::App &a) {
    return a.add_option("--data", o.data, "Token file (tpc-tokenize)");
  };
  auto addCommon = [&](CLI::App &a) {
    a.add_option("--metrics", o.metrics, "Write metrics JSON here");
    a.add_option("--threads", o.threads, "Threads per rank (default: all)")
        ->check(numberCheck(true, 1, cpu::maxThreads(),
                            " (4 per hardware thread)"));
    // Every name, also one this build lacks: deviceBackend says why.
    a.add_option("--device", o.device,
                 "Where the programs run: cpu, cuda (one GPU per rank) or "
                 "staged-cpu (the CPU behind device-style memory, for "
                 "tests). Default: cuda when a GPU is visible, else cpu")
        ->check(CLI::IsMember(std::vector<std::string>(kDeviceNames.begin(),
                                                       kDeviceNames.end())));
  };
  auto addWeights = [&](CLI::App &a, const char *group) {
    a.add_option("--weights", o.weights,
                 "Parameters by HF name (f32/f16/bf16 safetensors); default: "
                 "the deterministic initialisation")
        ->group(group);
  };
  auto addResume = [&](CLI::App &a, const char *group) {
    a.add_option("--resume", o.resume,
                 "Continue from a checkpoint (or a directory with 'latest')")
        ->group(group);
  };
  auto addEvaluation = [&](CLI::App &a) {
    const char *evaluationGroup = "Evaluation (one batch)";
    a.add_option("--program", o.program,
                 "Program to run (default: loss, else forward)")
        ->group(evaluationGroup);
    a.add_option("--offset", o.offset, "First token of the batch")
        ->check(numberCheck(true, 0))
        ->group(evaluationGroup);
    a.add_option("--repeat", o.repeat, "Runs, for timing (median reported)")
        ->check(numberCheck(true, 1))
        ->group(evaluationGroup);
    a.add_option("--dump", o.dump, "Write forward/loss results (safetensors)")
        ->group(evaluationGroup);
    a.add_option("--dump-grads", o.dumpGrads,
                 "Write every parameter's gradient (safetensors)")
        ->group(evaluationGroup);
  };
  auto addTraining = [&](CLI::App &a) {
    const char *trainingGroup = "Training";
    a.add_option("--steps", o.steps, "Train until this step")
        ->check(numberCheck(true, 1))
        ->group(trainingGroup);
    a.add_option("--lr", o.schedule.peak,
                 "Peak learning rate (default 3e-4); AdamW's betas, epsilon "
                 "and weight decay are compiled into the plan (tp-pipeline's "
                 "beta1=, beta2=, epsilon=, weight-decay=)")
        ->check(numberCheck(false, 0))
        ->group(trainingGroup);
    a.add_option("--min-lr", o.schedule.min,
                 "Final learning rate (default lr/10)")
        ->check(numberCheck(false, 0))
        ->group(trainingGroup);
    a.add_option("--warmup", o.schedule.warmup,
                 "Linear warmup steps (default min(100, steps/10))")
        ->check(numberCheck(true, 0))
        ->group(trainingGroup);
    a.add_option("--decay-steps", o.schedule.decaySteps,
                 "Cosine decay length (default: steps)")
        ->check(numberCheck(true, 0))
        ->group(trainingGroup);
    a.add_option("--clip", o.schedule.clip,
                 "Global gradient-norm clip (default 1)")
        ->check(numberCheck(false, 0))
        ->group(trainingGroup);
    a.add_option("--checkpoint-dir", o.checkpointDir,
                 "Write checkpoints here (locked while training)")
        ->group(trainingGroup);
    a.add_option("--checkpoint-every", o.checkpointEvery,
                 "Checkpoint every K steps (default: only at the end)")
        ->check(numberCheck(true, 1))
        ->group(trainingGroup);
    a.add_option("--export", o.exportDir,
                 "Write model.safetensors + config.json (HF layout) here")
        ->group(trainingGroup);
    a.add_option("--plot", o.plot, "Draw the loss curve (SVG)")
        ->group(trainingGroup);
  };
  auto addGeneration = [&](CLI::App &a) {
    const char *generationGroup = "Generation";
    a.add_flag("--ignore-eos", o.ignoreEos,
               "Generate all N tokens; by default a sample ends at the "
               "model's end-of-sequence token (eos_token_id of its "
               "generation_config.json or config.json, else the model "
               "type's default), as HuggingFace's generate() does")
        ->group(generationGroup);
    a.add_flag("--no-kv-cache", o.noKvCache,
               "Generate with @forward over the whole prefix each step even "
               "when the plan has KV-cache programs (the reference they must "
               "equal)")
        ->group(generationGroup);
    a.add_option("--prompt", o.prompt,
                 "Text to continue, tokenised by --tokenizer, --sentencepiece "
                 "or byte by byte")
        ->group(generationGroup);
    a.add_option("--prompt-ids", o.promptIds, "Token ids to continue: 1,2,3")
        ->group(generationGroup);
    a.add_option("--prompts", o.promptsFile,
                 "A text file of prompts, one per line, continued at once: "
                 "line i is sample i (one sequence of the plan's batch, "
                 "drawing from seed + i)")
        ->group(generationGroup);
    a.add_option("--tokenizer", o.tokenizerJson,
                 "HuggingFace tokenizer.json for the prompt and the output")
        ->group(generationGroup);
    a.add_option("--sentencepiece", o.sentencePiece,
                 "SentencePiece .model for the prompt and the output")
        ->group(generationGroup);
    a.add_option("--temperature", o.sampling.temperature,
                 "Sampling temperature (default 0: greedy)")
        ->check(numberCheck(false, 0))
        ->group(generationGroup);
    a.add_option("--top-k", o.sampling.topK,
                 "Sample from the k most likely tokens (default 0: all)")
        ->check(numberCheck(true, 0))
        ->group(generationGroup);
    a.add_option("--top-p", o.sampling.topP,
                 "Sample from the most likely tokens holding this much "
                 "probability (default 1)")
        ->check(numberCheck(false, 1e-9, 1.0))
        ->group(generationGroup);
    a.add_option("--seed", o.seed, "Sampling seed (default 0)")
        ->check(numberCheck(true, 0))
        ->group(generationGroup);
    a.add_option("--samples", o.samples,
                 "Continue the prompt N times at once, one sequence of the "
                 "plan's batch each (sample i draws from seed + i; default 1)")
        ->check(numberCheck(true, 1))
        ->group(generationGroup);
  };
  auto addHeldOut = [&](CLI::App &a) {
    const char *heldOutGroup = "Held-out evaluation (training)";
    a.add_option("--eval-every", o.evalEvery,
                 "Run @loss on held-out tokens every N steps and after the "
                 "last; validation loss and perplexity in the progress line, "
                 "the metrics and the plot")
        ->check(numberCheck(true, 1))
        ->group(heldOutGroup);
    a.add_option("--eval-data", o.evalData,
                 "Held-out token file (tpc-tokenize)")
        ->group(heldOutGroup);
    a.add_option("--eval-fraction", o.evalFraction,
                 "Hold out this last fraction of --data instead (e.g. 0.1)")
        ->check(numberCheck(false, 0, 0.9))
        ->group(heldOutGroup);
    a.add_option("--eval-tokens", o.evalTokens,
                 "Tokens per evaluation, rounded up to whole batches "
                 "(default: 4 batches)")
        ->check(numberCheck(true, 1))
        ->group(heldOutGroup);
  };
  auto addMixed = [&](CLI::App &a) {
    const char *mixedGroup = "Mixed hardware (training)";
    a.add_option("--rebalance", o.rebalance,
                 "When a rank straggles: off, resize (slow rank computes "
                 "fewer blocks), migrate (blocks move to faster ranks) or "
                 "auto (default off)")
        ->check(CLI::IsMember({"off", "resize", "migrate", "auto"}))
        ->group(mixedGroup);
    a.add_option("--slow", o.slow,
                 "Emulate a straggler: RANK:FACTOR[:FROM_STEP[:TO_STEP]] "
                 "stretches that rank's compute by FACTOR (repeatable)")
        ->group(mixedGroup);
    a.add_option("--rebalance-window", o.rebalanceOptions.window,
                 "Steps between exchanges of compute times (default 3)")
        ->check(numberCheck(true, 1))
        ->group(mixedGroup);
    a.add_option("--rebalance-patience", o.rebalanceOptions.patience,
                 "Windows over the threshold before acting (default 2)")
        ->check(numberCheck(true, 1))
        ->group(mixedGroup);
    a.add_option("--rebalance-threshold", o.rebalanceOptions.threshold,
                 "Imbalance that counts: slowest / mean of others - 1 "
                 "(default 0.2)")
        ->check(numberCheck(false, 0.001))
        ->group(mixedGroup);
    a.add_option("--rebalance-min-gain", o.rebalanceOptions.minGain,
                 "Fraction of the predicted step a re-plan must save "
                 "(default 0.1)")
        ->check(numberCheck(false, 0, 0.99))
        ->group(mixedGroup);
    a.add_option("--rank-speeds", o.rebalanceOptions.rankSpeeds,
                 "Known relative speeds, one per rank (e.g. 1,0.5): split "
                 "the blocks by them before the first step (any --rebalance)")
        ->delimiter(',')
        ->check(numberCheck(false, 0.001))
        ->group(mixedGroup);
  };

  CLI::App *train =
      app.add_subcommand("train", "Train with @train_step (AdamW, warmup + "
                                  "cosine decay, global-norm clipping)");
  addPlan(*train);
  addData(*train)->required();
  addCommon(*train);
  addWeights(*train, "Training");
  addTraining(*train);
  addResume(*train, "Training");
  addHeldOut(*train);
  addMixed(*train);
  train->get_option("--steps")->required();
  CLI::App *eval = app.add_subcommand(
      "eval", "Run @loss (else @forward) on one batch: the loss, the time, "
              "dumps of results and gradients");
  addPlan(*eval);
  addData(*eval)->required();
  addCommon(*eval);
  addWeights(*eval, "Evaluation (one batch)");
  addEvaluation(*eval);
  CLI::App *generate = app.add_subcommand(
      "generate", "Continue prompts with @prefill and @decode and their KV "
                  "caches, else @forward");
  addPlan(*generate);
  addCommon(*generate);
  addWeights(*generate, "Generation");
  addResume(*generate, "Generation");
  generate
      ->add_option("--max-new-tokens", o.generate,
                   "New tokens per sample, at most (a sample ends at its "
                   "end-of-sequence token unless --ignore-eos)")
      ->check(numberCheck(true, 1))
      ->required();
  addGeneration(*generate);
  CLI::App *inspect = app.add_subcommand(
      "inspect", "Print the plan as JSON (on any number of ranks)");
  addPlan(*inspect);
  app.require_subcommand(1);
  if (args.size() < 2)
    usageError("missing the plan file (usage: tp-run train|eval|generate|"
               "inspect PLAN ...; see --help)");
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);
    app.parse(reversed); // CLI11 takes the arguments last first
  } catch (const CLI::CallForHelp &help) {
    std::exit(app.exit(help)); // the help of the subcommand asked about
  } catch (const CLI::ArgumentMismatch &error) {
    // CLI11 says "--threads: At Most 1 required but received 2".
    for (const CLI::Option *option : givenOptions(app))
      if (option->get_items_expected_max() == 1 && option->count() > 1)
        usageError(option->get_name() + " is given " +
                   std::to_string(option->count()) + " times; give it once");
    usageError(error.what());
  } catch (const CLI::ExtrasError &error) {
    // An option of another mode given to a subcommand: name the one that
    // takes it.
    for (const CLI::App *sub : app.get_subcommands())
      for (const std::string &arg : args) {
        const std::string flag = arg.substr(0, arg.find('='));
        if (flag.rfind("--", 0) != 0 || sub->get_option_no_throw(flag))
          continue;
        for (const CLI::App *other : app.get_subcommands({}))
          if (other != sub && other->get_option_no_throw(flag))
            usageError("tp-run " + sub->get_name() + " has no " + flag +
                       " (tp-run " + other->get_name() + " takes it" +
                       (args[1] != argv[1]
                            ? "; the flat form ran tp-run " + sub->get_name()
                            : std::string()) +
                       ")");
      }
    usageError(error.what());
  } catch (const CLI::ParseError &error) {
    usageError(error.what());
  }
  o.agreed = agreedOptions(app);
  o.inspect = inspect->parsed();
  if (o.plan.empty())
    usageError("missing the plan file (usage: tp-run train|eval|generate|"
               "inspect PLAN ...; see --help)");
  std::vector<std::string> promptFlags;
  for (auto [value, flag] : {std::pair{&o.prompt, "--prompt"},
                             {&o.promptIds, "--prompt-ids"},
                             {&o.promptsFile, "--prompts"}})
    if (!value->empty())
      promptFlags.push_back(flag);
  if (promptFlags.size() > 1)
    usageError(promptFlags[0] + " and " + promptFlags[1] +
               " each give the prompt; give one");
  if (generate->parsed() && promptFlags.empty())
    usageError("tp-run generate needs one of --prompt TEXT, --prompt-ids IDS "
               "and --prompts FILE");
  if (!o.promptsFile.empty()) {
    if (o.samples != 1)
      usageError("--prompts makes one sample of each line; it does not "
                 "combine with --samples");
    std::string text;
    try {
      text = readRegularFile(o.promptsFile, kMaxPromptsBytes, "prompts file");
    } catch (const std::runtime_error &error) {
      usageError(std::string("--prompts ") + error.what());
    }
    std::istringstream file(text);
    for (std::string line; std::getline(file, line);) {
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (line.empty())
        usageError("--prompts " + o.promptsFile + ": line " +
                   std::to_string(o.promptLines.size() + 1) +
                   " is empty (one prompt per line)");
      o.promptLines.push_back(std::move(line));
    }
    if (o.promptLines.empty())
      usageError("--prompts " + o.promptsFile + ": the file has no prompt");
  }
  if (!o.tokenizerJson.empty() && !o.sentencePiece.empty())
    usageError("--tokenizer and --sentencepiece both give the tokenizer; "
               "give one");
  if (o.checkpointEvery > 0 && o.checkpointDir.empty())
    usageError("--checkpoint-every needs --checkpoint-dir");
  if (!o.weights.empty() && !o.resume.empty())
    usageError("--weights and --resume both set the parameters; give one");
  const bool heldOut = !o.evalData.empty() || o.evalFraction.has_value();
  if (o.evalEvery > 0 && !heldOut)
    usageError("--eval-every needs held-out tokens: --eval-data FILE or "
               "--eval-fraction F");
  if (!o.evalData.empty() && o.evalFraction)
    usageError("--eval-data and --eval-fraction both give held-out tokens; "
               "give one");
  if ((heldOut || o.evalTokens) && o.evalEvery == 0)
    usageError("--eval-data, --eval-fraction and --eval-tokens need "
               "--eval-every N");
  if (o.evalFraction && !(*o.evalFraction > 0))
    usageError("--eval-fraction must be above 0");
  o.rebalanceOptions.policy = parseRebalancePolicy(o.rebalance);
  o.rebalanceOptions.slow = parseSlowdowns(o.slow);
  return o;
}

/// This rank's index among the ranks on its machine: it picks the GPU.
int localRank() {
  const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return value ? std::atoi(value) : 0;
}

/// Files (metrics, dumps, exports, plots) are written by the first rank:
/// every rank computes the same whole values.
bool isFirstRank() { return Comm::world().rank() == 0; }

/// Everything the run holds once set up: the session (plan, grid, backend,
/// parameters) and the token data.
struct Prepared {
  std::unique_ptr<Session> session;
  const LoadedPlan &plan;
  ParamStore &params;
  std::vector<int32_t> stream;
  /// Held-out tokens (--eval-data, or the tail --eval-fraction cut off
  /// `stream`) and how many batches each evaluation runs.
  std::vector<int32_t> evalStream;
  int64_t evalBatches = 0;
  /// Held by the rank that writes checkpoints, for the whole run.
  std::unique_ptr<CheckpointDirLock> checkpointLock;
};

int evaluate(const Options &o, Prepared &p) {
  const LoadedPlan &plan = p.plan;
  ParamStore &params = p.params;
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
        addProgramResults(p.plan, p.params, &p.session->grid(),
                          p.session->backend(), program, window, writer);
    if (isFirstRank())
      writer.write(o.dump);
  }
  if (!o.dumpGrads.empty()) {
    SafetensorsWriter writer;
    addProgramResults(p.plan, p.params, &p.session->grid(),
                      p.session->backend(), "gradients", window, writer);
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
  const LoadedPlan &plan = p.plan;
  ParamStore &params = p.params;
  std::span<const int32_t> stream = p.stream;
  TrainConfig config;
  config.evalEvery = o.evalEvery;
  config.evalBatches = p.evalBatches;
  config.evalStream = p.evalStream;
  config.steps = o.steps;
  config.hyperparameters = o.schedule.hyperparameters(o.steps);
  config.checkpointEvery = o.checkpointEvery;
  config.checkpointDir = o.checkpointDir;
  config.resume = o.resume;
  config.comm = &p.session->grid();
  config.backend = &p.session->backend();
  config.rebalance = o.rebalanceOptions;
  auto start = std::chrono::steady_clock::now();
  ProgressLog progress(std::cout);
  TrainResult result = train(plan, params, stream, config, progress);
  double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  if (!o.exportDir.empty() && result.stoppedBecause.empty()) {
    // One model.safetensors of whole parameters, written by rank 0.
    writeWholeParams(plan, params, &p.session->grid(),
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
    std::vector<int64_t> evalSteps;
    std::vector<double> evalLosses;
    for (const EvalRecord &e : result.evals) {
      evalSteps.push_back(e.step);
      evalLosses.push_back(e.loss);
    }
    writeLossCurveSvg(o.plot, steps, losses,
                      evalSteps.empty() ? "training loss"
                                        : "training and validation loss",
                      evalSteps, evalLosses);
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
    report.setOps(result.opStats);
    if (isFirstRank())
      report.write(o.metrics);
  }
  if (!result.stoppedBecause.empty())
    throw std::runtime_error(result.stoppedBecause);
  return 0;
}

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
      o.plan, SessionOptions{o.device, localRank(), o.weights});
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
  std::vector<int32_t> evalStream;
  int64_t evalBatches = 0;
  if (o.evalEvery > 0) {
    if (!plan.program("loss"))
      throw std::runtime_error(o.plan + ": has no loss program, which "
                                        "--eval-every runs");
    if (o.evalFraction) {
      // The last fraction, whole tokens; training keeps the rest.
      const auto held =
          size_t(std::llround(*o.evalFraction * double(stream.size())));
      evalStream.assign(stream.end() - held, stream.end());
      stream.resize(stream.size() - held);
    } else {
      evalStream = readTokenFile(o.evalData);
      if (int64_t vocab = plan.vocabularySize())
        checkTokenIds(evalStream, vocab, o.evalData);
    }
    std::vector<int64_t> tokens =
        plan.wholeInputShape("train_step", tpc::plan::InputKind::Tokens);
    const int64_t tokensPerStep =
        tokens.size() == 2 ? tokens[0] * tokens[1] : 0;
    if (tokensPerStep <= 0)
      throw std::runtime_error(o.plan + ": train_step has no [batch, seq] "
                                        "tokens input");
    std::ostringstream source;
    if (o.evalFraction)
      source << "--eval-fraction " << *o.evalFraction;
    else
      source << o.evalData;
    try {
      evalBatches =
          evaluationBatches(o.evalTokens.value_or(4 * tokensPerStep),
                            tokensPerStep, int64_t(evalStream.size()));
      batchOffset(1, int64_t(stream.size()), tokensPerStep);
    } catch (const std::runtime_error &error) {
      throw std::runtime_error(source.str() + ": " + error.what());
    }
  }
  std::unique_ptr<CheckpointDirLock> lock;
  if (!o.checkpointDir.empty() && isFirstRank()) {
    lock = std::make_unique<CheckpointDirLock>(o.checkpointDir, o.resume);
    for (const std::string &leftover : lock->removedLeftovers())
      std::cout << "removed a leftover of a killed run: " << leftover << "\n";
  }
  Session &opened = *session;
  return std::unique_ptr<Prepared>(new Prepared{
      std::move(session), opened.plan(), opened.params(), std::move(stream),
      std::move(evalStream), evalBatches, std::move(lock)});
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
      {p.plan.contentChecksum(), "plan files"},
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
    readCheckpoint(o.resume, p.plan, p.params);
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
    if (int64_t vocab = p.plan.vocabularySize())
      checkTokenIds(prompts[i], vocab, what);
    if (prompts[i].empty())
      throw std::invalid_argument(what + " has no tokens");
  }
  auto decode = [&](std::span<const int32_t> ids) { return codec.decode(ids); };

  Generator generator = p.session->generator();
  GenerationRequest request;
  request.prompts = std::move(prompts);
  request.newTokens = o.generate;
  request.sampling = o.sampling;
  request.seed = o.seed;
  if (!o.ignoreEos)
    request.endIds = p.plan.endTokenIds();
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
  // Progress notes go to the log, once, from the first rank.
  struct LogNotes : GenerationObserver {
    void contextCropped(int64_t token, int64_t positions) override {
      std::cout << "note: from token " << token
                << " on, a context is longer than @forward's " << positions
                << " positions: each step sees its last " << positions
                << " tokens only, where HuggingFace sees them all (the KV "
                   "caches of tpc-import --kv-cache keep them)\n"
                << std::flush;
    }
  } notes;
  const GenerationResult out = generator.generate(request, &notes);
  const double seconds = out.seconds;
  // Samples after the first follow a separator line, as nanoGPT prints them.
  for (size_t i = 0; i < out.samples.size(); ++i) {
    std::vector<int32_t> text = out.samples[i].prompt;
    text.insert(text.end(), out.samples[i].generated.begin(),
                out.samples[i].generated.end());
    std::cout << (i ? "---------------\n" : "") << decode(text) << "\n";
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
    report.setGeneration(request, out, p.params.bytes(), decode);
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
  // Before anything a rank may do alone (print the plan, write a file):
  // every option, one collective each, so the message names the one that
  // differs.
  for (const auto &[name, value] : options.agreed)
    if (!world.allEqual(contentChecksum(std::as_bytes(std::span(value))))) {
      std::cerr << ("tp-run: error: rank " + std::to_string(world.rank()) +
                    ": the ranks were given different options: " + name +
                    (agreementOf(name) == Agreement::Presence
                         ? " (given on some ranks only)"
                         : "") +
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
