// The library classes a run is made of (Session, Generator, Evaluator,
// RunReport, the training loop and its observer), on real plans compiled
// at build time (test/CMakeLists.txt) from GPT-2 over bytes
// (tp-run/Inputs/gpt2-bytes.json): batch 2 x seq 8, with KV caches of 32
// positions for generation, and with @train_step for training; one rank,
// the deterministic initialisation, the CPU backend.
#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Generator.h"
#include "tpc/runtime/RunReport.h"
#include "tpc/runtime/Session.h"
#include "tpc/runtime/Tokens.h"
#include "tpc/runtime/Training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

using namespace tpc::runtime;

namespace {
class GeneratorTest : public ::testing::Test {
protected:
  GeneratorTest()
      : plan(LoadedPlan::load(TPC_GENERATOR_TEST_PLAN, 1)),
        params(ParamStore::initialise(plan, {0})),
        generator(plan, params, nullptr, cpuBackend()) {}

  GenerationResult run(std::vector<std::vector<int32_t>> prompts,
                       int64_t newTokens, bool kvCaches = true,
                       SamplingOptions sampling = {}, uint64_t seed = 0,
                       std::vector<int32_t> endIds = {},
                       GenerationObserver *observer = nullptr) {
    GenerationRequest request;
    request.prompts = std::move(prompts);
    request.newTokens = newTokens;
    request.kvCaches = kvCaches;
    request.sampling = sampling;
    request.seed = seed;
    request.endIds = std::move(endIds);
    return generator.generate(request, observer);
  }

  LoadedPlan plan;
  ParamStore params;
  Generator generator;
};

struct CropLog : GenerationObserver {
  std::vector<std::pair<int64_t, int64_t>> crops;
  void contextCropped(int64_t token, int64_t positions) override {
    crops.emplace_back(token, positions);
  }
};
} // namespace

TEST_F(GeneratorTest, KnowsItsProgramsAndBatch) {
  EXPECT_TRUE(generator.hasKvCaches());
  EXPECT_EQ(generator.sequencesAtOnce(true), 2);
  EXPECT_EQ(generator.sequencesAtOnce(false), 2);
}

// Within @forward's 8 positions both see the whole context: the same greedy
// tokens, log-probabilities equal to float rounding.
TEST_F(GeneratorTest, KvCachesEqualTheWholeContextEachStep) {
  const std::vector<std::vector<int32_t>> prompt = {{72, 105, 33}};
  GenerationResult cached = run(prompt, 5, true);
  GenerationResult whole = run(prompt, 5, false);
  EXPECT_TRUE(cached.usedKvCaches);
  EXPECT_FALSE(whole.usedKvCaches);
  ASSERT_EQ(cached.samples.size(), 1u);
  EXPECT_EQ(cached.samples[0].prompt, prompt[0]);
  ASSERT_EQ(cached.samples[0].generated.size(), 5u);
  EXPECT_EQ(cached.samples[0].generated, whole.samples[0].generated);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LT(cached.samples[0].logProbs[i], 0.0);
    EXPECT_NEAR(cached.samples[0].logProbs[i], whole.samples[0].logProbs[i],
                1e-4);
  }
  EXPECT_EQ(cached.stepSeconds.size(), 5u); // the prefill, then 4 decodes
  EXPECT_EQ(cached.prefillChunks, 1);
  EXPECT_GT(cached.cacheBytes, 0u);
  EXPECT_EQ(whole.cacheBytes, 0u);
  EXPECT_EQ(cached.tokensDrawn, 5);
}

// Prompts of different lengths at once: each sample draws what it draws
// alone (rows do not see each other; padding is never attended), to the
// rounding of the batch row it is in.
TEST_F(GeneratorTest, SamplesOfDifferentLengthsEqualEachAlone) {
  const std::vector<int32_t> shortPrompt = {10, 20},
                             longPrompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  GenerationResult both = run({shortPrompt, longPrompt}, 4);
  GenerationResult shortAlone = run({shortPrompt}, 4);
  GenerationResult longAlone = run({longPrompt}, 4);
  EXPECT_EQ(both.prefillChunks, 2); // 10 tokens in chunks of 8
  EXPECT_EQ(both.samples[0].generated, shortAlone.samples[0].generated);
  EXPECT_EQ(both.samples[1].generated, longAlone.samples[0].generated);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(both.samples[0].logProbs[i], shortAlone.samples[0].logProbs[i],
                1e-5);
    EXPECT_NEAR(both.samples[1].logProbs[i], longAlone.samples[0].logProbs[i],
                1e-5);
  }
}

// Sampling draws from seed + sample: one seed repeats, another differs.
TEST_F(GeneratorTest, SamplingFromASeedRepeats) {
  SamplingOptions sampling;
  sampling.temperature = 1.0;
  const std::vector<std::vector<int32_t>> prompts = {{65, 66}, {65, 66}};
  GenerationResult first = run(prompts, 12, true, sampling, 7);
  GenerationResult again = run(prompts, 12, true, sampling, 7);
  GenerationResult other = run(prompts, 12, true, sampling, 8);
  EXPECT_EQ(first.samples[0].generated, again.samples[0].generated);
  EXPECT_EQ(first.samples[1].generated, again.samples[1].generated);
  // Sample 1 of seed 7 draws from seed 8, as sample 0 of seed 8 does.
  EXPECT_EQ(first.samples[1].generated, other.samples[0].generated);
  EXPECT_NE(first.samples[0].generated, first.samples[1].generated);
  // The near-uniform model of a fresh initialisation: greedy would repeat
  // one token; sampling does not.
  GenerationResult greedy = run({{65, 66}}, 12);
  EXPECT_NE(first.samples[0].generated, greedy.samples[0].generated);
}

// A sample ends at its first end token, which it keeps.
TEST_F(GeneratorTest, StopsAtAnEndTokenAndKeepsIt) {
  SamplingOptions sampling;
  sampling.temperature = 1.0;
  GenerationResult free = run({{80, 81, 82}}, 10, true, sampling, 3);
  const int32_t end = free.samples[0].generated[3];
  const auto first = std::find(free.samples[0].generated.begin(),
                               free.samples[0].generated.end(), end) -
                     free.samples[0].generated.begin();
  GenerationResult stopped = run({{80, 81, 82}}, 10, true, sampling, 3, {end});
  EXPECT_TRUE(stopped.samples[0].endedAtEos);
  EXPECT_FALSE(free.samples[0].endedAtEos);
  ASSERT_EQ(stopped.samples[0].generated.size(), size_t(first + 1));
  EXPECT_EQ(stopped.samples[0].generated.back(), end);
  EXPECT_EQ(stopped.samples[0].logProbs.size(), size_t(first + 1));
  // Every sample ended: no step after that one.
  EXPECT_EQ(stopped.stepSeconds.size(), size_t(first + 1));
}

// Without caches, past @forward's 8 positions the observer hears it once.
TEST_F(GeneratorTest, TellsTheObserverWhenTheContextIsCropped) {
  CropLog log;
  run({{1, 2, 3, 4, 5, 6}}, 5, false, {}, 0, {}, &log);
  // 6 + 2 drawn = 8 fit; the 4th new token sees 9 tokens' last 8.
  ASSERT_EQ(log.crops.size(), 1u);
  EXPECT_EQ(log.crops[0], (std::pair<int64_t, int64_t>{4, 8}));
  CropLog none;
  run({{1, 2, 3}}, 5, false, {}, 0, {}, &none);
  EXPECT_TRUE(none.crops.empty());
}

TEST_F(GeneratorTest, RefusesWhatThePlanCannotServe) {
  auto message = [&](auto &&call) {
    try {
      call();
    } catch (const std::invalid_argument &error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] {
              run({{1}, {2}, {3}}, 2);
            }),
            "3 samples: the plan generates 2 sequences at once (tpc-import "
            "--batch)");
  EXPECT_EQ(message([&] { run({std::vector<int32_t>(30, 1)}, 4); }),
            "the prompt (30 tokens) and 4 new tokens need 33 positions, but "
            "the plan's KV caches hold 32 (tpc-import --kv-cache)");
  EXPECT_EQ(message([&] {
              run({{1, 300}}, 2);
            }),
            "prompt 1: token 1 has id 300, outside the vocabulary of 256");
  EXPECT_EQ(message([&] { run({{}}, 2); }), "prompt 1 has no tokens");
  EXPECT_EQ(message([&] { run({{1}}, 0); }),
            "generation needs at least one new token");
}

// Evaluator on the same plan: @loss on batches of 2 x 8 tokens.
namespace {
std::vector<int32_t> byteStream(size_t size) {
  std::vector<int32_t> stream(size);
  for (size_t i = 0; i < size; ++i)
    stream[i] = int32_t((i * 37 + 11) % 256);
  return stream;
}
} // namespace

TEST_F(GeneratorTest, EvaluatorRunsABatchAndAveragesHeldOutLosses) {
  Evaluator evaluator(plan, params, nullptr, cpuBackend(), "loss");
  EXPECT_EQ(evaluator.tokensShape(), (std::vector<int64_t>{2, 8}));
  const std::vector<int32_t> stream = byteStream(3 * 16 + 1);
  BatchRun first = evaluator.runBatch(stream, 0, /*repeat=*/3);
  ASSERT_TRUE(first.loss.has_value());
  EXPECT_EQ(first.seconds.size(), 3u);
  EXPECT_GT(first.medianSeconds(), 0.0);
  // A fresh model is near uniform over its 256 bytes.
  EXPECT_NEAR(*first.loss, std::log(256.0), 0.1);
  const double second = *evaluator.runBatch(stream, 16).loss,
               third = *evaluator.runBatch(stream, 32).loss;
  EXPECT_NE(*first.loss, second); // other windows, other losses
  EXPECT_NEAR(evaluator.meanLoss(stream, 3),
              (double(*first.loss) + second + third) / 3, 1e-6);
  EXPECT_NEAR(evaluator.meanLoss(stream, 1), *first.loss, 1e-6);
  // Three windows of 16 and the last target need 49 tokens.
  EXPECT_THROW(evaluator.meanLoss(std::span(stream).first(48), 3),
               std::runtime_error);
}

TEST_F(GeneratorTest, EvaluatorRefusesWhatItCannotRun) {
  EXPECT_THROW(Evaluator(plan, params, nullptr, cpuBackend(), "decode"),
               std::invalid_argument);
  Evaluator forward(plan, params, nullptr, cpuBackend(), "forward");
  const std::vector<int32_t> stream = byteStream(17);
  EXPECT_FALSE(forward.runBatch(stream, 0).loss.has_value());
  EXPECT_THROW(forward.meanLoss(stream, 1), std::invalid_argument);
}

// The run report says what it is and carries each mode's sections; text that
// is not UTF-8 (a byte model may draw any bytes) is written as U+FFFD.
TEST_F(GeneratorTest, RunReportsOfEveryModeShareOneSchema) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpc-run-report-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto readBack = [&](const RunReport &report, const std::string &name) {
    const std::string path = (dir / name).string();
    report.write(path);
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  };

  RunReport generation(RunReport::Mode::Generate);
  generation.setDevice(cpuBackend());
  GenerationRequest request;
  request.prompts = {{72, 105}, {72, 105}};
  request.newTokens = 3;
  request.seed = 5;
  GenerationResult result = generator.generate(request);
  generation.setGeneration(
      request, result, params.bytes(),
      [](std::span<const int32_t>) { return std::string("ok \xff"); });
  nlohmann::json g = readBack(generation, "generate.json");
  EXPECT_EQ(g["format"], "tpc-run-report");
  EXPECT_EQ(g["version"], RunReport::kVersion);
  EXPECT_EQ(g["mode"], "generate");
  EXPECT_EQ(g["device"]["name"], "cpu");
  EXPECT_EQ(g["program"], "prefill+decode");
  EXPECT_EQ(g["generated_ids"].size(), 3u);
  EXPECT_EQ(g["text"], "ok \xEF\xBF\xBD");
  ASSERT_EQ(g["samples"].size(), 2u);
  EXPECT_EQ(g["samples"][1]["seed"], 6);
  EXPECT_EQ(g["memory"]["planned_peak_bytes"],
            g["memory"]["arena_bytes"].get<uint64_t>() + params.bytes() +
                g["memory"]["kv_cache_bytes"].get<uint64_t>() +
                g["memory"]["input_bytes"].get<uint64_t>());

  RunReport evaluation(RunReport::Mode::Evaluate);
  evaluation.setDevice(cpuBackend());
  Evaluator evaluator(plan, params, nullptr, cpuBackend(), "loss");
  const std::vector<int32_t> stream = byteStream(17);
  const BatchRun run = evaluator.runBatch(stream, 0, 2);
  evaluation.setBatch("loss", run, 100, 200, 300);
  evaluation.setOps(evaluator.programRunner().stats());
  nlohmann::json e = readBack(evaluation, "evaluate.json");
  EXPECT_EQ(e["mode"], "evaluate");
  EXPECT_EQ(e["version"], RunReport::kVersion);
  EXPECT_FLOAT_EQ(e["loss"].get<float>(), *run.loss);
  EXPECT_EQ(e["tokens"], 16);
  EXPECT_EQ(e["runs"], 2);
  EXPECT_EQ(e["memory"]["planned_peak_bytes"], 600);
  EXPECT_TRUE(e["ops"].contains("Matmul") || e["ops"].contains("Linear"));
  std::filesystem::remove_all(dir);
}

// Training reports its progress through an observer; tp-run's progress log
// is one. Steps, held-out losses and checkpoints arrive as they happen.
namespace {
struct Recorder : TrainingObserver {
  std::vector<std::string> calls;
  std::vector<StepProgress> steps;
  void started(const Backend &backend) override {
    calls.push_back("started " + std::string(backend.name()));
  }
  void stepDone(const StepProgress &progress) override {
    calls.push_back("step " + std::to_string(progress.record.step));
    steps.push_back(progress);
  }
  void checkpointWritten(const std::string &path) override {
    calls.push_back("checkpoint " +
                    std::filesystem::path(path).filename().string());
  }
};
} // namespace

TEST(Training, TellsItsObserverEachStepEvaluationAndCheckpoint) {
  LoadedPlan plan = LoadedPlan::load(TPC_TRAINING_TEST_PLAN, 1);
  ParamStore params = ParamStore::initialise(plan, {0});
  const std::vector<int32_t> stream = byteStream(4 * 16 + 1);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpc-train-observer-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TrainConfig config;
  config.steps = 3;
  config.hyperparameters = {1e-3f, 1e-4f, 1.0f, 3.0f, 1.0f};
  config.evalEvery = 2;
  config.evalBatches = 1;
  config.evalStream = stream;
  config.checkpointEvery = 2;
  config.checkpointDir = dir.string();
  Recorder recorder;
  TrainResult result = train(plan, params, stream, config, recorder);
  EXPECT_EQ(recorder.calls,
            (std::vector<std::string>{"started cpu", "step 1", "step 2",
                                      "checkpoint step-00000002", "step 3",
                                      "checkpoint step-00000003"}));
  ASSERT_EQ(recorder.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(recorder.steps[i].record.loss, result.records[i].loss);
    EXPECT_EQ(recorder.steps[i].steps, 3);
    EXPECT_EQ(recorder.steps[i].tokensPerStep, 16);
  }
  // Evaluated after step 2 (every 2) and after the last.
  EXPECT_FALSE(recorder.steps[0].heldOutLoss.has_value());
  ASSERT_TRUE(recorder.steps[1].heldOutLoss.has_value());
  ASSERT_TRUE(recorder.steps[2].heldOutLoss.has_value());
  EXPECT_EQ(*recorder.steps[2].heldOutLoss, result.evals[1].loss);
  // The progress log prints the same step as a line.
  std::ostringstream text;
  ProgressLog log(text);
  log.stepDone(recorder.steps[1]);
  char expected[160];
  std::snprintf(expected, sizeof expected, "step 2/3 | loss %.4f | lr %.3e | ",
                result.records[1].loss, result.records[1].learningRate);
  EXPECT_EQ(text.str().rfind(expected, 0), 0u) << text.str();
  EXPECT_NE(text.str().find(" ms/step | val loss "), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Steps fed one batch at a time through a Trainer are the training loop's
// steps, bit for bit; a checkpoint it writes resumes to the same values.
TEST(Trainer, StepsFedByHandEqualTheTrainingLoop) {
  LoadedPlan plan = LoadedPlan::load(TPC_TRAINING_TEST_PLAN, 1);
  const std::vector<int32_t> stream = byteStream(4 * 16 + 1);
  LearningRateSchedule schedule;
  schedule.peak = 2e-3;
  schedule.warmup = 1;
  const std::array<float, 5> hyperparameters = schedule.hyperparameters(4);
  ParamStore looped = ParamStore::initialise(plan, {0});
  TrainConfig config;
  config.steps = 4;
  config.hyperparameters = hyperparameters;
  TrainingObserver quiet;
  TrainResult result = train(plan, looped, stream, config, quiet);

  ParamStore stepped = ParamStore::initialise(plan, {0});
  Trainer trainer(plan, stepped, nullptr, cpuBackend(), hyperparameters);
  EXPECT_EQ(trainer.tokensShape(), (std::vector<int64_t>{2, 8}));
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpc-trainer-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (int64_t step = 1; step <= 4; ++step) {
    EXPECT_EQ(trainer.nextStep(), step);
    Batch batch = cutBatch(stream, batchOffset(step, stream.size(), 16), 2, 8);
    StepOutcome outcome = trainer.step(batch.tokens, batch.targets);
    EXPECT_EQ(outcome.record.step, step);
    EXPECT_EQ(outcome.record.loss, result.records[step - 1].loss);
    EXPECT_EQ(outcome.record.learningRate,
              result.records[step - 1].learningRate);
    EXPECT_FALSE(outcome.rebalance.has_value());
    if (step == 2)
      EXPECT_EQ(trainer.saveCheckpoint(dir.string()),
                checkpointPath(dir.string(), 2));
  }
  for (size_t i = 0; i < looped.size(); ++i)
    EXPECT_EQ(std::as_const(stepped)[i], std::as_const(looped)[i]) << i;

  // Resumed after step 2, steps 3 and 4 are the loop's again.
  ParamStore resumed = ParamStore::initialise(plan, {0});
  Trainer again(plan, resumed, nullptr, cpuBackend(), hyperparameters);
  EXPECT_EQ(again.resume(dir.string()).step, 2);
  EXPECT_EQ(again.nextStep(), 3);
  for (int64_t step = 3; step <= 4; ++step) {
    Batch batch = cutBatch(stream, batchOffset(step, stream.size(), 16), 2, 8);
    EXPECT_EQ(again.step(batch.tokens, batch.targets).record.loss,
              result.records[step - 1].loss);
  }
  std::filesystem::remove_all(dir);
}

TEST(Trainer, RefusesBatchesThePlanDoesNotTake) {
  LoadedPlan plan = LoadedPlan::load(TPC_TRAINING_TEST_PLAN, 1);
  ParamStore params = ParamStore::initialise(plan, {0});
  Trainer trainer(plan, params, nullptr, cpuBackend(),
                  LearningRateSchedule().hyperparameters(10));
  std::vector<int32_t> tokens(16, 1), shorter(15, 1);
  EXPECT_THROW(trainer.step(shorter, tokens), std::invalid_argument);
  EXPECT_THROW(trainer.step(tokens, shorter), std::invalid_argument);
  std::vector<int32_t> outside = tokens;
  outside[3] = int32_t(plan.vocabularySize());
  EXPECT_THROW(trainer.step(outside, tokens), std::runtime_error);
  // Nothing ran: the next step is still the first.
  EXPECT_EQ(trainer.nextStep(), 1);
  LoadedPlan inference = LoadedPlan::load(TPC_GENERATOR_TEST_PLAN, 1);
  ParamStore inferenceParams = ParamStore::initialise(inference, {0});
  EXPECT_THROW(Trainer(inference, inferenceParams, nullptr, cpuBackend(),
                       LearningRateSchedule().hyperparameters(10)),
               std::invalid_argument);
}

// tp-run's defaults: lr/10 at the end, warmup min(100, steps/10), decay over
// the run.
TEST(LearningRateSchedule, FillsWhatIsNotSetFromTheRunsLength) {
  LearningRateSchedule schedule;
  EXPECT_EQ(schedule.hyperparameters(50),
            (std::array<float, 5>{3e-4f, 3e-5f, 5.0f, 50.0f, 1.0f}));
  EXPECT_EQ(schedule.hyperparameters(5000)[2], 100.0f);
  schedule.min = 0;
  schedule.warmup = 7;
  schedule.decaySteps = 20;
  schedule.clip = 0.5;
  EXPECT_EQ(schedule.hyperparameters(50),
            (std::array<float, 5>{3e-4f, 0.0f, 7.0f, 20.0f, 0.5f}));
  schedule.peak = -1;
  EXPECT_THROW(schedule.hyperparameters(50), std::invalid_argument);
}

// While a resize leaves blocks out of training, the held-out loss still
// computes every block the rank holds: the same loss as the even layout, and
// the resize is back in place afterwards.
TEST(Evaluator, MeanLossOnAResizedLayoutComputesEveryHeldBlock) {
  LoadedPlan plan = LoadedPlan::load(TPC_REBALANCE_TEST_PLAN, 1);
  GridComm grid({1}); // the plan's 1D grid, of one rank
  ParamStore params = ParamStore::initialise(plan, grid.coords());
  ASSERT_GE(params.blocks().numPoints(), 1u);
  const std::vector<int32_t> stream = byteStream(2 * 16 + 1);
  Evaluator evaluator(plan, params, &grid, cpuBackend(), "loss");
  const double even = evaluator.meanLoss(stream, 2);
  const float evenBatch = *evaluator.runBatch(stream, 0).loss;

  BlockAssignment resized = params.blocks();
  const int64_t blocks = resized.blocks(0);
  ASSERT_GE(blocks, 2);
  std::vector<int64_t> held(resized.held(0, 0).begin(),
                            resized.held(0, 0).end());
  resized.set(0, 0, held, blocks - 1); // the last block parked
  resized.validate();
  ASSERT_TRUE(resized.isResized());
  params.relayout(plan, resized, &grid);
  // One batch on the resized layout leaves the parked block out...
  EXPECT_NE(*evaluator.runBatch(stream, 0).loss, evenBatch);
  // ...the held-out loss does not, and restores the resize.
  EXPECT_EQ(evaluator.meanLoss(stream, 2), even);
  EXPECT_TRUE(params.blocks() == resized);
}

// A Session holds the plan, the grid, the backend and the parameters, and
// hands them to the Generator and Evaluator: the same as building those by
// hand.
TEST_F(GeneratorTest, ASessionRunsWhatItHolds) {
  Session session(TPC_GENERATOR_TEST_PLAN, {"cpu", 0, ""});
  EXPECT_EQ(session.backend().name(), "cpu");
  EXPECT_EQ(session.grid().shape(), (std::vector<int64_t>{1}));
  EXPECT_EQ(session.params().bytes(), params.bytes());
  session.connect();
  GenerationRequest request;
  request.prompts = {{5, 6, 7}};
  request.newTokens = 4;
  GenerationResult viaSession = session.generator().generate(request);
  GenerationResult direct = generator.generate(request);
  EXPECT_EQ(viaSession.samples[0].generated, direct.samples[0].generated);
  EXPECT_EQ(viaSession.samples[0].logProbs, direct.samples[0].logProbs);
  const std::vector<int32_t> stream = byteStream(17);
  EXPECT_EQ(*session.evaluator("loss").runBatch(stream, 0).loss,
            *Evaluator(plan, params, nullptr, cpuBackend(), "loss")
                 .runBatch(stream, 0)
                 .loss);
}

// Exported weights load back into another session unchanged, and replace
// what it held.
TEST(Session, ExportedWeightsLoadBack) {
  Session trained(TPC_TRAINING_TEST_PLAN, {"cpu", 0, ""});
  Trainer trainer = trained.trainer(LearningRateSchedule().hyperparameters(2));
  const std::vector<int32_t> stream = byteStream(17);
  Batch batch = cutBatch(stream, 0, 2, 8);
  trainer.step(batch.tokens, batch.targets);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tpc-session-export-" + std::to_string(::getpid()));
  trained.exportHuggingFace(dir.string());
  Session fresh(TPC_TRAINING_TEST_PLAN, {"cpu", 0, ""});
  EXPECT_NE(std::as_const(fresh.params())[0],
            std::as_const(trained.params())[0]);
  fresh.loadWeights((dir / "model.safetensors").string());
  for (size_t i = 0; i < fresh.params().size(); ++i)
    EXPECT_EQ(std::as_const(fresh.params())[i],
              std::as_const(trained.params())[i])
        << i;
  EXPECT_THROW(fresh.loadWeights((dir / "config.json").string()),
               std::exception);
  std::filesystem::remove_all(dir);
}

TEST(Session, RefusesABadDeviceOrWeights) {
  EXPECT_THROW(Session(TPC_GENERATOR_TEST_PLAN, {"tpu", 0, ""}),
               std::exception);
  EXPECT_THROW(Session(TPC_GENERATOR_TEST_PLAN, {"cpu", 0, "/nonexistent"}),
               std::exception);
  EXPECT_THROW(Session("/nonexistent.tpplan", {"cpu", 0, ""}),
               std::runtime_error);
}
