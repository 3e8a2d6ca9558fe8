#include "Options.h"

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

using namespace tpc::runtime;

namespace tpc::tools {

namespace {

/// One prompt per line; a generation batch is a few hundred of them.
constexpr uint64_t kMaxPromptsBytes = uint64_t(256) << 20;

} // namespace

Agreement agreementOf(const std::string &name) {
  static const std::set<std::string> presence = {
      "plan",     "--data",           "--eval-data", "--weights",
      "--resume", "--metrics",        "--dump",      "--dump-grads",
      "--export", "--checkpoint-dir", "--plot",      "--prompts"};
  if (name == "--threads")
    return Agreement::Local;
  return presence.count(name) ? Agreement::Presence : Agreement::Value;
}

namespace {

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

} // namespace

/// Whether the run rebalances, emulates a straggler or splits by known
/// speeds: each needs training steps and records a `rebalance` section.
bool rebalancingAsked(const Options &o) {
  return o.rebalance != "off" || !o.slow.empty() ||
         !o.rebalanceOptions.rankSpeeds.empty();
}

namespace {

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

} // namespace

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
    a.add_option("--stop-file", o.stopFile,
                 "Stop after the step at whose end FILE exists, writing a "
                 "checkpoint there (how tp-sched takes ranks back "
                 "mid-segment); needs --checkpoint-dir")
        ->group(trainingGroup);
    a.add_option("--profile-steps", o.opByOpSteps,
                 "Run the first N steps op by op, timing each op for the "
                 "metrics' \"ops\" (default 1; the first pays one-time "
                 "setup, so 2 gives one warm profile); later steps replay a "
                 "recorded step where the device can")
        ->check(numberCheck(true, 1))
        ->group(trainingGroup);
    a.add_flag("--rank-times", o.rankTimes,
               "Time every step's ops on every rank and write each rank's "
               "compute seconds per step to the metrics' "
               "\"rank_compute_seconds\" (the rest of a step is waiting: a "
               "pipeline's bubble); no step is replayed")
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
  if (!o.stopFile.empty() && o.checkpointDir.empty())
    usageError("--stop-file needs --checkpoint-dir (the run stops at a "
               "checkpoint)");
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

/// Every file and directory the run will write can be written: checked
/// before anything long starts, on the rank that writes them.
void checkOutputs(const Options &o) {
  if (Comm::world().rank() != 0)
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

std::string optionsDisagreement(const Comm &world, const Options &o) {
  // One collective per option, so the message names the one that differs.
  for (const auto &[name, value] : o.agreed)
    if (!world.allEqual(contentChecksum(std::as_bytes(std::span(value)))))
      return name + (agreementOf(name) == Agreement::Presence
                         ? " (given on some ranks only)"
                         : "");
  return {};
}

} // namespace tpc::tools
