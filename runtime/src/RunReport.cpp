#include "tpc/runtime/RunReport.h"

#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <cmath>
#include <sys/resource.h>

namespace tpc::runtime {

RunReport::RunReport(Mode mode) {
  root["format"] = "tpc-run-report";
  root["version"] = kVersion;
  root["mode"] = mode == Mode::Train      ? "train"
                 : mode == Mode::Evaluate ? "evaluate"
                                          : "generate";
  root["threads"] = cpu::numThreads();
}

nlohmann::ordered_json
embeddingCachesJson(const std::vector<EmbeddingCacheReport> &caches) {
  // This rank's caches: lookups are the batches' ids in the rank's block.
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const EmbeddingCacheReport &cache : caches) {
    const CacheStats &s = cache.stats;
    json.push_back(
        {{"name", cache.name},
         {"slots", cache.slots},
         {"block_rows", cache.blockRows},
         {"lookups", s.lookups},
         {"misses", s.misses},
         {"hit_rate",
          s.lookups ? 1.0 - double(s.misses) / double(s.lookups) : 1.0},
         {"rows_fetched", s.rowsFetched},
         {"rows_written_back", s.rowsWrittenBack},
         {"bytes_fetched", s.bytesFetched},
         {"bytes_written_back", s.bytesWrittenBack},
         {"seconds", s.seconds},
         {"rows_prefetched", s.rowsPrefetched},
         {"lookahead_seconds", s.lookaheadSeconds},
         {"lookaheads_skipped", s.lookaheadsSkipped}});
  }
  return json;
}

int64_t RunReport::maxRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

void RunReport::setDevice(const Backend &device) {
  backend = &device;
  root["device"] = {{"name", device.name()},
                    {"collectives", device.collectivePath()},
                    {"kernels", device.kernelLibraries()}};
}

void RunReport::setCommunication(const std::map<std::string, CommStats> &stats,
                                 int64_t runs) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto &[kind, s] : stats)
    json[kind] = {
        {"calls", s.calls},
        {"bytes", std::llround(s.bytes)},
        {"bytes_per_step", std::llround(s.bytes / std::max<int64_t>(runs, 1))}};
  root["communication"] = std::move(json);
}

namespace {
nlohmann::ordered_json opsJson(const std::map<std::string, OpStats> &stats) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto &[kind, s] : stats)
    json[kind] = {{"count", s.count}, {"seconds", s.seconds}};
  return json;
}
} // namespace

void RunReport::setOps(const std::map<std::string, OpStats> &stats) {
  root["ops"] = opsJson(stats);
}

void RunReport::setTrainingOps(const std::map<std::string, OpStats> &stats,
                               const std::map<std::string, OpStats> &firstStep,
                               int64_t opSteps) {
  root["ops"] = opsJson(stats);
  root["op_steps"] = opSteps;
  root["first_step_ops"] = opsJson(firstStep);
}

namespace {
uint64_t devicePeak(const Backend *backend) {
  return backend ? backend->peakDeviceBytes() : 0;
}
} // namespace

void RunReport::setTraining(const LoadedPlan &plan, const TrainConfig &config,
                            const TrainResult &result, int64_t steps,
                            double seconds) {
  double stepSeconds = 0;
  for (const StepRecord &r : result.records)
    stepSeconds += r.seconds;
  root["program"] = "train_step";
  root["tokens_per_step"] = result.tokensPerStep;
  root["first_step"] = result.firstStep;
  root["tokens_seen"] = result.tokensSeen;
  root["stopped_on_request"] = result.stoppedOnRequest;
  root["steps"] = steps;
  root["device"]["replayed_steps"] = result.replays;
  root["seconds_total"] = seconds;
  root["tokens_per_second"] =
      stepSeconds > 0 ? double(result.tokensPerStep) *
                            double(result.records.size()) / stepSeconds
                      : 0.0;
  root["hyperparameters"] = hyperparametersJson(config.hyperparameters);
  // What the compiler fixed in the plan (tp-autodiff's options).
  if (const plan::Program *step = plan.program("train_step"))
    if (auto adamw = optimizerSettings(*step))
      root["optimizer"] = {{"kind", "adamw"},
                           {"beta1", adamw->beta1},
                           {"beta2", adamw->beta2},
                           {"epsilon", adamw->epsilon},
                           {"weight_decay", adamw->weightDecay},
                           {"decayed_parameters", adamw->decayedParameters},
                           {"parameters", adamw->parameters}};
  // With held-out evaluation, @loss runs from its own arena and inputs,
  // held alongside the step's.
  const uint64_t inputBytes = result.inputBytes + result.evalInputBytes;
  root["memory"] = {{"arena_bytes", result.arenaBytes},
                    {"eval_arena_bytes", result.evalArenaBytes},
                    {"param_and_optimizer_bytes", result.paramBytes},
                    {"input_bytes", inputBytes},
                    {"planned_peak_bytes", result.arenaBytes +
                                               result.evalArenaBytes +
                                               result.paramBytes + inputBytes},
                    {"max_rss_bytes", maxRssBytes()},
                    {"device_peak_bytes", devicePeak(backend)}};
  nlohmann::ordered_json curve = nlohmann::ordered_json::array();
  // nlohmann writes a NaN or infinite number as null: the file stays valid
  // JSON whatever the loss did.
  for (const StepRecord &r : result.records)
    curve.push_back({{"step", r.step},
                     {"loss", r.loss},
                     {"lr", r.learningRate},
                     {"seconds", r.seconds}});
  root["loss_curve"] = std::move(curve);
  if (!result.embeddingCaches.empty())
    root["embedding_caches"] = embeddingCachesJson(result.embeddingCaches);
  if (!result.rankComputeSeconds.empty())
    root["rank_compute_seconds"] = result.rankComputeSeconds;
  if (config.evalEvery > 0) {
    root["evaluation"] = {
        {"every", config.evalEvery},
        {"batches", config.evalBatches},
        {"tokens", config.evalBatches * result.tokensPerStep}};
    nlohmann::ordered_json evals = nlohmann::ordered_json::array();
    for (const EvalRecord &e : result.evals)
      evals.push_back({{"step", e.step},
                       {"loss", e.loss},
                       {"perplexity", std::exp(e.loss)},
                       {"tokens", e.tokens}});
    root["eval_curve"] = std::move(evals);
  }
}

void RunReport::setBatch(const std::string &program, const BatchRun &run,
                         uint64_t arenaBytes, uint64_t paramBytes,
                         uint64_t inputBytes) {
  const double median = run.medianSeconds();
  root["program"] = program;
  if (run.loss)
    root["loss"] = *run.loss;
  root["batch"] = run.batch;
  root["seq"] = run.seq;
  root["tokens"] = run.batch * run.seq;
  root["runs"] = run.seconds.size();
  root["seconds"] = run.seconds;
  root["seconds_median"] = median;
  root["tokens_per_second"] =
      median > 0 ? double(run.batch * run.seq) / median : 0.0;
  root["memory"] = {
      {"arena_bytes", arenaBytes},
      {"param_bytes", paramBytes},
      {"input_bytes", inputBytes},
      {"planned_peak_bytes", arenaBytes + paramBytes + inputBytes},
      {"max_rss_bytes", maxRssBytes()},
      {"device_peak_bytes", devicePeak(backend)}};
}

void RunReport::setGeneration(
    const GenerationRequest &request, const GenerationResult &result,
    uint64_t paramBytes,
    const std::function<std::string(std::span<const int32_t>)> &decode) {
  auto stopOf = [](const GeneratedSample &s) {
    return s.endedAtEos ? "eos" : "length";
  };
  const GeneratedSample &first = result.samples.front();
  root["program"] = result.usedKvCaches ? "prefill+decode" : "forward";
  root["prompt_ids"] = first.prompt;
  // The first sample; all of them under "samples" when there are several.
  root["generated_ids"] = first.generated;
  root["text"] = decode(first.generated);
  root["generated_logprobs"] = first.logProbs;
  root["stop"] = stopOf(first);
  root["eos_token_ids"] = request.endIds;
  if (result.samples.size() > 1) {
    root["samples"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < result.samples.size(); ++i) {
      const GeneratedSample &s = result.samples[i];
      root["samples"].push_back({{"seed", request.seed + i},
                                 {"prompt_ids", s.prompt},
                                 {"generated_ids", s.generated},
                                 {"text", decode(s.generated)},
                                 {"generated_logprobs", s.logProbs},
                                 {"stop", stopOf(s)}});
    }
  }
  root["sampling"] = {{"temperature", request.sampling.temperature},
                      {"top_k", request.sampling.topK},
                      {"top_p", request.sampling.topP},
                      {"seed", request.seed}};
  root["seconds"] = result.seconds;
  // The first step reads the prompt (prefill); each later one a token.
  root["step_seconds"] = result.stepSeconds;
  if (result.usedKvCaches) {
    root["kv_cache_bytes_per_rank"] = result.cacheBytes;
    root["prefill_chunks"] = result.prefillChunks;
  }
  // This rank's: each program's arena and inputs, the parameters, the KV
  // caches.
  root["memory"] = {
      {"arena_bytes", result.arenaBytes},
      {"param_bytes", paramBytes},
      {"kv_cache_bytes", result.cacheBytes},
      {"input_bytes", result.inputBytes},
      {"planned_peak_bytes",
       result.arenaBytes + paramBytes + result.cacheBytes + result.inputBytes},
      {"max_rss_bytes", maxRssBytes()},
      {"device_peak_bytes", devicePeak(backend)}};
  root["tokens_per_second"] =
      result.seconds > 0 ? double(result.tokensDrawn) / result.seconds : 0.0;
}

void RunReport::write(const std::string &path) const {
  writeFileAtomically(
      path, root.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                "\n");
}

void RunReport::setRebalance(const RebalanceOptions &options,
                             const std::vector<std::string> &slow,
                             const TrainResult &result) {
  nlohmann::ordered_json json;
  json["policy"] = rebalancePolicyName(options.policy);
  json["slow"] = slow;
  json["window"] = options.window;
  json["patience"] = options.patience;
  json["threshold"] = options.threshold;
  json["min_gain"] = options.minGain;
  json["rank_speeds"] = options.rankSpeeds;
  nlohmann::ordered_json times = nlohmann::ordered_json::array();
  for (const Rebalancer::StepTimes &t : result.computeTimes)
    times.push_back({{"step", t.step}, {"seconds", t.seconds}});
  json["compute_seconds"] = std::move(times);
  nlohmann::ordered_json windows = nlohmann::ordered_json::array();
  for (const Rebalancer::WindowRecord &w : result.rebalanceWindows)
    windows.push_back({{"step", w.step},
                       {"slowest_rank", w.slowestRank},
                       {"imbalance", w.imbalance},
                       {"fixed_seconds", w.fixedSeconds},
                       {"speeds", w.speeds}});
  json["windows"] = std::move(windows);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const RebalanceEvent &e : result.rebalanceEvents) {
    events.push_back({{"step", e.step},
                      {"action", e.action},
                      {"reason", e.reason},
                      {"slowest_rank", e.slowestRank},
                      {"imbalance", e.imbalance},
                      {"speeds", e.speeds},
                      {"held", e.held},
                      {"computed", e.computed},
                      {"bytes_moved", e.bytesMoved},
                      {"move_seconds", e.seconds}});
    // Stage rebalancing: the cut the stages run afterwards.
    if (e.cut >= 0) {
      events.back()["stage_cut"] = e.cut;
      events.back()["stage_layers"] = e.stageLayers;
    }
  }
  json["decisions"] = std::move(events);
  root["rebalance"] = std::move(json);
}

} // namespace tpc::runtime
