// tp-run's command line: the subcommands and their options (CLI11), the
// flat form of earlier releases mapped onto them, and what the ranks must
// agree on. Apart from the driver (tp-run.cpp) so that tests can parse
// command lines directly.
#pragma once

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Rebalancer.h"
#include "tpc/runtime/Sampling.h"
#include "tpc/runtime/Training.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpc::tools {

using runtime::LearningRateSchedule;
using runtime::RebalanceOptions;
using runtime::SamplingOptions;

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
  /// Training stops after the step at whose end this file exists.
  std::string stopFile;
  int64_t checkpointEvery = 0;
  int64_t opByOpSteps = 1; // --profile-steps
  bool rankTimes = false;  // --rank-times
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
Agreement agreementOf(const std::string &name);

/// Today's flat form, `tp-run PLAN [--steps N | --generate N |
/// --print-plan] ...`, as the subcommand it names (train, generate with
/// --max-new-tokens N, inspect; else eval): it keeps working for this
/// release. The subcommands themselves pass unchanged.
std::vector<std::string> subcommandForm(int argc, char **argv);

/// Whether the run rebalances, emulates a straggler or splits by known
/// speeds: each records a `rebalance` section.
bool rebalancingAsked(const Options &o);

/// Every file and directory the run will write can be written: checked
/// before anything long starts, on the rank that writes them (rank 0).
void checkOutputs(const Options &o);

/// Collective: the first option the ranks were given differently (its
/// value, or whether it is given), or an empty string.
std::string optionsDisagreement(const runtime::Comm &world, const Options &o);

/// Parses and checks the command line (std::invalid_argument with the
/// one-line message; --help prints and exits).
Options parseArgs(int argc, char **argv);

} // namespace tpc::tools
