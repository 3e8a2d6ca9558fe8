#include "tpc/runtime/Evaluator.h"

#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/Tokens.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace tpc::runtime {

double BatchRun::medianSeconds() const {
  if (seconds.empty())
    return 0;
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

Evaluator::Evaluator(const LoadedPlan &plan, ParamStore &params, GridComm *grid,
                     Backend &backend, const std::string &program)
    : plan(plan), params(params), grid(grid), name(program),
      runner(plan, program, params, grid, backend) {
  if (runner.hasInput(plan::InputKind::Positions))
    throw std::invalid_argument("@" + program +
                                " is a generation program (it reads "
                                "positions and KV caches); generate with it");
}

BatchRun Evaluator::runBatch(std::span<const int32_t> stream, int64_t offset,
                             int64_t repeat) {
  const std::vector<int64_t> shape = runner.tokensShape();
  const Batch window = cutBatch(stream, offset, shape[0], shape[1]);
  return runOn(window.tokens, window.targets, repeat);
}

BatchRun Evaluator::runOn(std::span<const int32_t> tokens,
                          std::span<const int32_t> targets, int64_t repeat) {
  const std::vector<int64_t> shape = runner.tokensShape();
  BatchRun run;
  run.batch = shape[0];
  run.seq = shape[1];
  const bool readsTargets = runner.hasInput(plan::InputKind::Targets);
  checkTokenBatch(tokens, run.batch, run.seq, plan.vocabularySize(), "tokens",
                  "@" + name);
  if (readsTargets)
    checkTokenBatch(targets, run.batch, run.seq, plan.vocabularySize(),
                    "targets", "@" + name);
  runner.setInput(plan::InputKind::Tokens, tokens);
  if (readsTargets)
    runner.setInput(plan::InputKind::Targets, targets);
  for (int64_t r = 0; r < std::max<int64_t>(repeat, 1); ++r) {
    if (r + 1 == repeat) {
      runner.resetStats(); // per-op times and traffic of the last run
      if (grid)
        grid->resetStats();
    }
    const auto start = std::chrono::steady_clock::now();
    runner.run();
    run.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  if (runner.numResults() >= 1 && runner.resultShape(0).empty())
    run.loss = runner.result(0)[0];
  return run;
}

double Evaluator::meanLoss(std::span<const int32_t> stream, int64_t batches) {
  if (!runner.hasInput(plan::InputKind::Targets) || runner.numResults() < 1 ||
      !runner.resultShape(0).empty())
    throw std::invalid_argument("@" + name + " has no scalar loss to average");
  if (batches < 1)
    throw std::invalid_argument("the mean loss needs at least one batch");
  const BlockAssignment trained = params.blocks();
  if (trained.isResized())
    params.relayout(plan, trained.everyHeldComputed(), grid);
  const std::vector<int64_t> shape = runner.tokensShape();
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const Batch window =
        cutBatch(stream, b * shape[0] * shape[1], shape[0], shape[1]);
    runner.setInput(plan::InputKind::Tokens, window.tokens);
    runner.setInput(plan::InputKind::Targets, window.targets);
    runner.run();
    sum += runner.result(0)[0];
  }
  if (trained.isResized())
    params.relayout(plan, trained, grid);
  return sum / double(batches);
}

void addProgramResults(const LoadedPlan &plan, ParamStore &params,
                       GridComm *grid, Backend &backend,
                       const std::string &name, const Batch &batch,
                       SafetensorsWriter &writer) {
  ProgramRunner runner(plan, name, params, grid, backend);
  runner.setInput(plan::InputKind::Tokens, batch.tokens);
  if (runner.hasInput(plan::InputKind::Targets))
    runner.setInput(plan::InputKind::Targets, batch.targets);
  runner.run();
  const auto *names = plan.program(name)->result_names();
  for (size_t i = 0; i < runner.numResults(); ++i) {
    std::vector<int64_t> shape = runner.resultShape(i);
    std::string key = names && i < names->size()
                          ? names->Get(i)->str()
                          : name + ".result" + std::to_string(i);
    // A gradient is named after its parameter and takes its file shape.
    for (const plan::Param *param : *plan.plan().params())
      if (param->name()->str() == key)
        shape = fileShape(*param);
    writer.addF32(key, shape, runner.result(i));
  }
}

} // namespace tpc::runtime
