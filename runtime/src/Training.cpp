#include "tpc/runtime/Training.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>

namespace tpc::runtime {

int64_t batchOffset(int64_t step, int64_t streamTokens, int64_t tokensPerStep) {
  const int64_t batches = (streamTokens - 1) / tokensPerStep;
  if (batches < 1)
    throw std::runtime_error(
        "the token stream has " + std::to_string(streamTokens) +
        " tokens; one step needs " + std::to_string(tokensPerStep + 1));
  return ((step - 1) % batches) * tokensPerStep;
}

int64_t batchOffsetAt(int64_t position, int64_t streamTokens,
                      int64_t tokensPerStep) {
  batchOffset(1, streamTokens, tokensPerStep); // one batch must fit
  return position + tokensPerStep + 1 > streamTokens ? 0 : position;
}

int64_t evaluationBatches(int64_t evalTokens, int64_t tokensPerStep,
                          int64_t streamTokens) {
  const int64_t batches =
      std::max<int64_t>(1, (evalTokens + tokensPerStep - 1) / tokensPerStep);
  if (batches * tokensPerStep + 1 > streamTokens)
    throw std::runtime_error("the evaluation tokens hold " +
                             std::to_string(streamTokens) + " tokens; " +
                             std::to_string(batches) + " batch(es) of " +
                             std::to_string(tokensPerStep) + " tokens need " +
                             std::to_string(batches * tokensPerStep + 1));
  return batches;
}

HeldOut holdOut(const LoadedPlan &plan, std::vector<int32_t> &stream,
                std::optional<double> fraction, std::vector<int32_t> given,
                std::optional<int64_t> evalTokens, const std::string &source) {
  HeldOut held;
  if (fraction) {
    const auto count = size_t(std::llround(*fraction * double(stream.size())));
    held.tokens.assign(stream.end() - std::ptrdiff_t(count), stream.end());
    stream.resize(stream.size() - count);
  } else {
    held.tokens = std::move(given);
  }
  const std::vector<int64_t> tokens =
      plan.wholeInputShape("train_step", plan::InputKind::Tokens);
  const int64_t tokensPerStep = tokens.size() == 2 ? tokens[0] * tokens[1] : 0;
  if (tokensPerStep <= 0)
    throw std::runtime_error("the plan's train_step has no [batch, seq] "
                             "tokens input");
  try {
    held.batches =
        evaluationBatches(evalTokens.value_or(4 * tokensPerStep), tokensPerStep,
                          int64_t(held.tokens.size()));
    batchOffset(1, int64_t(stream.size()), tokensPerStep);
  } catch (const std::runtime_error &error) {
    throw std::runtime_error(source + ": " + error.what());
  }
  return held;
}

void ProgressLog::started(const Backend &backend) {
  out << "device: " << backend.name()
      << " (collectives: " << backend.collectivePath() << ")\n"
      << "kernels: " << backend.kernelLibraries() << "\n";
}

void ProgressLog::pipelineTransfers(const std::string &path) {
  out << "pipeline transfers: " << path << "\n";
}

void ProgressLog::stoppedOnRequest(int64_t step) {
  out << "stopped after step " << step << " on request\n";
}

void ProgressLog::cachingEmbeddings(
    const std::vector<EmbeddingCacheReport> &caches) {
  for (const EmbeddingCacheReport &cache : caches)
    out << "embedding cache: " << cache.name << ", " << cache.slots << " of "
        << cache.blockRows << " rows per rank on the device, the rest in host "
        << "memory\n";
}

void ProgressLog::resumed(int64_t step, const std::string &from) {
  out << "resumed from step " << step << " (" << from << ")\n";
}

void ProgressLog::stepDone(const StepProgress &p) {
  const double loss = p.record.loss;
  char lossText[32];
  if (std::isfinite(loss))
    std::snprintf(lossText, sizeof(lossText), "%.4f", loss);
  else // not printf's "-nan"
    std::snprintf(lossText, sizeof(lossText), "%s",
                  std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"));
  char line[240];
  std::snprintf(
      line, sizeof(line),
      "step %lld/%lld | loss %s | lr %.3e | %.0f tokens/s | "
      "%.1f ms/step",
      static_cast<long long>(p.record.step), static_cast<long long>(p.steps),
      lossText, p.record.learningRate,
      double(p.tokensPerStep) / p.record.seconds, p.record.seconds * 1e3);
  out << line;
  if (p.heldOutLoss) {
    char text[80];
    std::snprintf(text, sizeof(text), " | val loss %.4f | val ppl %.2f",
                  *p.heldOutLoss, std::exp(*p.heldOutLoss));
    out << text;
  }
  if (!p.rebalanceStatus.empty())
    out << " | " << p.rebalanceStatus;
  if (!p.action.empty())
    out << " | action " << p.action;
  out << "\n" << std::flush;
}

void ProgressLog::rebalanced(const RebalanceEvent &event) {
  // The reason has no bound on its length: only the numbers go through a
  // fixed buffer.
  char moved[80];
  std::snprintf(moved, sizeof moved, "moved %.0f bytes in %.2f ms\n",
                event.bytesMoved, event.seconds * 1e3);
  out << "rebalance: " << event.action << " after step " << event.step << " ("
      << event.reason << "); ";
  if (event.cut >= 0) {
    // Per stage, or per virtual stage in layer order when interleaved.
    out << "stage cut " << event.cut << ", layers in pipeline order";
    for (size_t s = 0; s < event.stageLayers.size(); ++s)
      out << (s ? "," : " ") << event.stageLayers[s];
    out << "; ";
  }
  out << moved << std::flush;
}

void ProgressLog::checkpointWritten(const std::string &path) {
  out << "checkpoint: " << path << "\n" << std::flush;
}

std::array<float, 5>
LearningRateSchedule::hyperparameters(int64_t steps) const {
  auto check = [](double value, const char *what) {
    if (!std::isfinite(value) || value < 0)
      throw std::invalid_argument(std::string(what) +
                                  " must be a finite number >= 0, got " +
                                  std::to_string(value));
    return static_cast<float>(value);
  };
  const double warmupSteps =
      warmup ? double(*warmup) : std::min<double>(100.0, double(steps / 10));
  return {check(peak, "the learning rate"),
          check(min ? *min : peak / 10, "the final learning rate"),
          check(warmupSteps, "the warmup steps"),
          check(decaySteps ? double(*decaySteps) : double(steps),
                "the decay steps"),
          check(clip, "the gradient-norm clip")};
}

namespace {
/// @train_step's runner, with the plan's absence said in its words.
const LoadedPlan &withTrainStep(const LoadedPlan &plan) {
  if (!plan.program("train_step"))
    throw std::invalid_argument("the plan has no train_step program (compile "
                                "with tp-pipeline's train=true)");
  return plan;
}
} // namespace

Trainer::Trainer(const LoadedPlan &plan, ParamStore &params, GridComm *comm,
                 Backend &backend, const std::array<float, 5> &hyperparameters,
                 const RebalanceOptions &rebalance)
    : plan(withTrainStep(plan)), params(params), comm(comm), backend(backend),
      balancer(plan, params, comm, rebalance), settings(hyperparameters) {
  // Only rebalancing reads the per-step times: without it a device may
  // replay a recorded step.
  stepTiming = balancer.enabled();
  makeRunner();
  shape = runner->tokensShape();
  targetShape = runner->wholeInputShape(plan::InputKind::Targets);
  if (runner->hasInput(plan::InputKind::Dense))
    denseFeatureShape = runner->wholeInputShape(plan::InputKind::Dense);
  targetClasses = this->plan.targetClasses();
}

void Trainer::rankCachedRows(std::span<const int32_t> stream) {
  const auto &all = *plan.plan().params();
  for (size_t i = 0; i < all.size(); ++i) {
    const CachedTable *cache = params.cachedTable(i);
    if (!cache)
      continue;
    const std::string name = all.Get(i)->name()->str();
    try {
      // The whole table's ranking: a resumed checkpoint's, else the data's.
      std::vector<int64_t> &order = embeddingOrders[name];
      if (order.empty())
        order =
            IdFrequencies::count(stream, cache->vocabulary(), tokensPerStep())
                .order();
      // This block's rows in that order; the data decides the rows one
      // step uses (what the cache must hold).
      std::vector<int64_t> blockOrder;
      for (int64_t row : order)
        if (row >= cache->firstRow() &&
            row < cache->firstRow() + cache->blockRows())
          blockOrder.push_back(row - cache->firstRow());
      params.rankCachedRows(
          i, IdFrequencies::fromOrder(
                 std::move(blockOrder),
                 IdFrequencies::countBlock(stream, cache->vocabulary(),
                                           cache->firstRow(),
                                           cache->blockRows(), tokensPerStep())
                     .maxDistinctPerBatch()));
    } catch (const std::invalid_argument &error) {
      throw std::invalid_argument("embedding cache of '" + name +
                                  "': " + error.what());
    }
  }
}

/// This rank's cached tables and what their caches did.
std::vector<EmbeddingCacheReport>
embeddingCacheReports(const LoadedPlan &plan, const ParamStore &params) {
  std::vector<EmbeddingCacheReport> reports;
  const auto &all = *plan.plan().params();
  for (size_t i = 0; i < all.size(); ++i)
    if (const CachedTable *cache = params.cachedTable(i))
      reports.push_back({all.Get(i)->name()->str(), cache->slots(),
                         cache->blockRows(), cache->stats()});
  return reports;
}

void Trainer::makeRunner() {
  // The old program's arena goes before the new one's is allocated.
  runner.reset();
  runner = std::make_unique<ProgramRunner>(plan, "train_step", params, comm,
                                           backend);
  runnerCut = params.blocks().cut();
  runner->setHyperparameters(settings);
  runner->setStepTiming(stepTiming);
  if (opByOpRuns)
    runner->setOpByOpRuns(*opByOpRuns);
}

void Trainer::setOpByOpRuns(int64_t runs) {
  opByOpRuns = runs;
  runner->setOpByOpRuns(runs);
}

void Trainer::setStepTiming(bool on) {
  stepTiming = on;
  runner->setStepTiming(on);
}

CheckpointState Trainer::resume(const std::string &path) {
  CheckpointState state = readCheckpoint(path, plan, params);
  next = state.step + 1;
  seen = state.tokensSeen;
  dataOffset = state.dataOffset;
  embeddingOrders = state.embeddingOrders;
  return state;
}

std::optional<RebalanceEvent> Trainer::applyRankSpeeds() {
  // After a resume the checkpoint holds whole parameters, loaded at the
  // even split.
  return balancer.applyRankSpeeds(next - 1);
}

StepOutcome Trainer::step(std::span<const int32_t> tokens,
                          std::span<const int32_t> targets,
                          std::span<const int32_t> nextTokens,
                          std::span<const float> dense) {
  checkTokenBatch(tokens, shape[0], shape[1], plan.vocabularySize(), "tokens",
                  "the plan's step");
  checkTokenBatch(targets, targetShape[0], targetShape[1], 0, "targets",
                  "the plan's step");
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] < 0 || targets[i] >= targetClasses)
      throw std::runtime_error("targets: entry " + std::to_string(i) + " is " +
                               std::to_string(targets[i]) +
                               ", outside the loss's " +
                               std::to_string(targetClasses) + " classes");
  int64_t denseValues = 1;
  for (int64_t d : denseFeatureShape)
    denseValues *= d;
  if (denseFeatureShape.empty() ? !dense.empty()
                                : int64_t(dense.size()) != denseValues)
    throw std::invalid_argument(
        denseFeatureShape.empty()
            ? "dense features given, but the plan's step takes none"
            : "dense: " + std::to_string(dense.size()) +
                  " values; the plan's step takes [" +
                  std::to_string(denseFeatureShape[0]) + ", 1, " +
                  std::to_string(denseFeatureShape[2]) + "]");
  const int64_t step = next;
  // A stage rebalance after the last step switched the stage cut.
  if (params.blocks().cut() != runnerCut)
    makeRunner();
  ProgramRunner &runner = *this->runner;
  runner.setInput(plan::InputKind::Tokens, tokens);
  runner.setInput(plan::InputKind::Targets, targets);
  if (!dense.empty())
    runner.setInput(plan::InputKind::Dense, dense);
  runner.setNextTokens(nextTokens);
  runner.setStep(step);
  runner.setComputeStretch(balancer.stretch(step));
  auto start = std::chrono::steady_clock::now();
  runner.run();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double loss = runner.result(0)[0];
  const auto &h = settings;
  StepOutcome outcome;
  outcome.record = {step, loss, cpu::learningRate(step, h[0], h[1], h[2], h[3]),
                    seconds};
  // Collective every window (all ranks reach it: the loss is the same on
  // every rank, so all stop at the same step).
  if (std::isfinite(loss))
    outcome.rebalance = balancer.afterStep(
        step, seconds, runner.computeSeconds(), runner.pointComputeSeconds());
  ++next;
  seen += tokensPerStep();
  return outcome;
}

std::string Trainer::saveCheckpoint(const std::string &dir) {
  const CheckpointState state{next - 1, settings,   tokensPerStep(),
                              seen,     dataOffset, embeddingOrders};
  std::string written;
  // Checkpoints hold whole parameters, written by rank 0.
  writeWholeParams(plan, params, comm, [&](const ParamStore &whole) {
    written = writeCheckpoint(dir, plan, whole, state);
  });
  return written;
}

TrainResult train(const LoadedPlan &plan, ParamStore &params,
                  std::span<const int32_t> stream, const TrainConfig &config,
                  TrainingObserver &observer) {
  Backend &backend = config.backend ? *config.backend : cpuBackend();
  Trainer trainer(plan, params, config.comm, backend, config.hyperparameters,
                  config.rebalance);
  trainer.setOpByOpRuns(config.opByOpSteps);
  if (config.rankTimes)
    trainer.setStepTiming(true);
  std::vector<float> computeSeconds; // this rank's, with rankTimes
  Rebalancer &rebalancer = trainer.rebalancer();
  observer.started(backend);
  if (std::string path = trainer.programRunner().transferPath(); !path.empty())
    observer.pipelineTransfers(path);
  const std::vector<int64_t> &shape = trainer.tokensShape();
  TrainResult result;
  result.tokensPerStep = trainer.tokensPerStep();
  // The held-out loss runs @loss on the parameters train_step updates.
  std::optional<Evaluator> evaluator;
  int64_t evaluatorCut = 0;
  if (config.evalEvery > 0) {
    if (!plan.program("loss"))
      throw std::runtime_error("evaluation needs the plan's @loss program");
    evaluator.emplace(plan, params, config.comm, backend, "loss");
  }
  // Where the next batch begins: batches follow one another through the
  // stream, so a run resumed at another batch size neither skips nor
  // repeats data.
  int64_t position = 0;
  if (!config.resume.empty()) {
    CheckpointState state = trainer.resume(config.resume);
    result.firstStep = state.step + 1;
    // A version-2 checkpoint's run read windows of its own batch size.
    position = state.dataOffset
                   ? *state.dataOffset
                   : batchOffset(state.step + 1, int64_t(stream.size()),
                                 state.tokensPerStep);
    observer.resumed(state.step, config.resume);
  }
  // Before step 1: every token in range and every cache large enough.
  trainer.rankCachedRows(stream);
  if (std::vector<EmbeddingCacheReport> caches =
          embeddingCacheReports(plan, params);
      !caches.empty())
    observer.cachingEmbeddings(caches);
  auto report = [&](RebalanceEvent event) {
    observer.rebalanced(event);
    result.rebalanceEvents.push_back(std::move(event));
  };
  // Known speeds split the blocks before the first step.
  if (std::optional<RebalanceEvent> given = trainer.applyRankSpeeds())
    report(std::move(*given));
  // Where a run that diverges can restart from.
  std::string lastCheckpoint =
      config.resume.empty() ? std::string() : config.resume;
  for (int64_t step = result.firstStep; step <= config.steps; ++step) {
    const auto streamTokens = int64_t(stream.size());
    const int64_t offset =
        batchOffsetAt(position, streamTokens, result.tokensPerStep);
    position = offset + result.tokensPerStep;
    trainer.setDataOffset(position);
    Batch batch = cutBatch(stream, offset, shape[0], shape[1]);
    // The next step's tokens: cached embedding tables fetch their rows
    // while this step runs.
    Batch next;
    if (step < config.steps)
      next = cutBatch(
          stream, batchOffsetAt(position, streamTokens, result.tokensPerStep),
          shape[0], shape[1]);
    StepOutcome outcome =
        trainer.step(batch.tokens, batch.targets, next.tokens);
    ProgramRunner &runner = trainer.programRunner();
    const double loss = outcome.record.loss;
    result.records.push_back(outcome.record);
    if (config.rankTimes)
      computeSeconds.push_back(float(runner.computeSeconds()));
    StepProgress progress;
    progress.steps = config.steps;
    progress.record = outcome.record;
    progress.tokensPerStep = result.tokensPerStep;
    if (evaluator && std::isfinite(loss) &&
        (step % config.evalEvery == 0 || step == config.steps)) {
      // While resized, every held block is computed for it (Evaluator);
      // after a stage rebalance, the stages run the new cut's @loss.
      if (params.blocks().cut() != evaluatorCut) {
        evaluator.reset();
        evaluator.emplace(plan, params, config.comm, backend, "loss");
        evaluatorCut = params.blocks().cut();
      }
      const double heldOut =
          evaluator->meanLoss(config.evalStream, config.evalBatches);
      result.evals.push_back(
          {step, heldOut, config.evalBatches * result.tokensPerStep});
      progress.heldOutLoss = heldOut;
    }
    if (rebalancer.enabled())
      progress.rebalanceStatus = rebalancer.status();
    if (outcome.rebalance)
      progress.action = outcome.rebalance->action;
    observer.stepDone(progress);
    if (outcome.rebalance)
      report(std::move(*outcome.rebalance));
    if (!std::isfinite(loss)) {
      result.stoppedBecause =
          "step " + std::to_string(step) + ": the loss is " +
          (std::isnan(loss) ? "NaN" : "infinite") +
          "; training stopped. Last good checkpoint: " +
          (lastCheckpoint.empty() ? std::string("none (use --checkpoint-dir)")
                                  : lastCheckpoint);
      break;
    }
    if (!runner.stats().empty()) { // run op by op, not replayed
      if (result.opSteps++ == 0)
        result.firstStepOpStats = runner.stats();
      for (const auto &[kind, stats] : runner.stats()) {
        result.opStats[kind].count += stats.count;
        result.opStats[kind].seconds += stats.seconds;
      }
    }
    runner.resetStats();
    bool periodic =
        config.checkpointEvery > 0 && step % config.checkpointEvery == 0;
    bool last = step == config.steps;
    if (!config.checkpointDir.empty() && (periodic || last)) {
      std::string written = trainer.saveCheckpoint(config.checkpointDir);
      if (!written.empty())
        observer.checkpointWritten(written);
      lastCheckpoint = checkpointPath(config.checkpointDir, step);
    }
    // Every rank asks and all follow the first that wants to stop, so the
    // ranks end at one step.
    if (config.stopRequested && step < config.steps) {
      const bool wanted = config.stopRequested();
      const bool anyRank =
          config.comm ? !Comm::world().allSucceeded(!wanted) : wanted;
      if (anyRank) {
        if (!config.checkpointDir.empty() && !periodic) {
          std::string written = trainer.saveCheckpoint(config.checkpointDir);
          if (!written.empty())
            observer.checkpointWritten(written);
        }
        result.stoppedOnRequest = step;
        observer.stoppedOnRequest(step);
        break;
      }
    }
  }
  if (config.rankTimes) {
    // Every rank ran as many steps (all stop at the same loss).
    const int ranks = config.comm ? config.comm->size() : 1;
    std::vector<float> all(computeSeconds.size() * size_t(ranks));
    if (config.comm)
      config.comm->gatherState(computeSeconds, all);
    else
      all = computeSeconds;
    for (int r = 0; r < ranks; ++r)
      result.rankComputeSeconds.emplace_back(
          all.begin() + ptrdiff_t(size_t(r) * computeSeconds.size()),
          all.begin() + ptrdiff_t(size_t(r + 1) * computeSeconds.size()));
  }
  ProgramRunner &runner = trainer.programRunner();
  result.computeTimes = rebalancer.computeTimes();
  result.rebalanceWindows = rebalancer.windows();
  result.arenaBytes = runner.arenaBytes();
  if (evaluator) {
    result.evalArenaBytes = evaluator->programRunner().arenaBytes();
    result.evalInputBytes = evaluator->programRunner().inputBytes();
  }
  result.paramBytes = params.bytes();
  result.inputBytes = runner.inputBytes();
  result.replays = runner.replays();
  result.embeddingCaches = embeddingCacheReports(plan, params);
  result.tokensSeen = trainer.tokensSeen();
  return result;
}

} // namespace tpc::runtime
