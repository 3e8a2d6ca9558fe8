#include "Compile.h"

#include "Process.h"

#include <filesystem>
#include <regex>
#include <stdexcept>

namespace fs = std::filesystem;

namespace tpc::sched {

std::string pipelineOptions(const std::string &mode, int ranks) {
  const std::string n = std::to_string(ranks);
  if (mode == "dp")
    return "mode=1d grid=1 dp=" + n;
  if (mode == "1d")
    return "mode=1d grid=" + n;
  if (mode == "auto")
    return "mode=auto grid=" + n;
  throw std::invalid_argument("unknown mode '" + mode + "' (dp, 1d or auto)");
}

void parseSimulatorRemarks(const std::string &output, CompileResult &result) {
  static const std::regex step(
      R"(@train_step on [^:]*: ([0-9.eE+-]+) ms per run[^\n]*; ([0-9]+) bytes per rank \(arena [0-9]+ \+ arguments ([0-9]+)\))");
  std::smatch match;
  if (std::regex_search(output, match, step)) {
    result.stepSeconds = std::stod(match[1]) * 1e-3;
    result.bytesPerRank = std::stod(match[2]);
    result.argumentBytes = std::stod(match[3]);
  }
  // mode=auto names its choice and that compile's prediction instead.
  static const std::regex chose(
      R"(chose (mode=[^\n]*?) for [0-9]+ ranks of [^:]*: ([0-9.eE+-]+) ms per step, ([0-9]+) bytes per rank)");
  if (std::regex_search(output, match, chose)) {
    result.mode = match[1];
    result.stepSeconds = std::stod(match[2]) * 1e-3;
    result.bytesPerRank = std::stod(match[3]);
  }
}

namespace {
std::string lastLine(const std::string &text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos)
    return "no output";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}
} // namespace

CompileResult compileJob(const std::string &binDir,
                         const CompileRequest &request) {
  CompileResult result;
  fs::create_directories(request.workDir);
  const std::string module = (fs::path(request.workDir) /
                              ("b" + std::to_string(request.batch) + ".mlir"))
                                 .string();
  if (!fs::exists(module)) {
    // Imported once per batch size, under a temporary name first.
    const std::string tmp = module + ".tmp";
    CommandResult imported =
        runCommand({binDir + "/tpc-import", request.config, "--batch",
                    std::to_string(request.batch), "--seq",
                    std::to_string(request.seq), "-o", tmp});
    if (imported.exitCode != 0) {
      result.error = lastLine(imported.output);
      return result;
    }
    fs::rename(tmp, module);
  }
  std::string options = pipelineOptions(request.mode, request.ranks);
  if (!request.extraOptions.empty())
    options += " " + request.extraOptions;
  if (!request.cluster.empty())
    options += " cluster=" + request.cluster;
  std::vector<std::string> argv = {binDir + "/tpc-opt", module,
                                   "--tp-pipeline=" + options};
  // tpc-opt writes a plan for a .tpplan name (else MLIR text).
  const std::string plan =
      request.plan.empty() ? std::string() : request.plan + ".tmp.tpplan";
  argv.insert(argv.end(), {"-o", plan.empty() ? "/dev/null" : plan});
  CommandResult compiled = runCommand(argv);
  if (compiled.exitCode != 0) {
    result.error = lastLine(compiled.output);
    return result;
  }
  if (!plan.empty())
    fs::rename(plan, request.plan);
  result.ok = true;
  result.mode = pipelineOptions(request.mode, request.ranks);
  parseSimulatorRemarks(compiled.output, result);
  if (!request.extraOptions.empty() && request.mode == "auto")
    result.mode += " " + request.extraOptions;
  return result;
}

} // namespace tpc::sched
