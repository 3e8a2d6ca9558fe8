// Text generation over a plan's programs: with @prefill and @decode and
// their KV caches, or with @forward over the whole context each step.
//
// Every rank of the plan's grid calls generate() with the same request: the
// programs run their collectives, and every rank draws the same tokens from
// the same seeds. The library prints nothing; what a run has to say while it
// runs reaches the caller through a GenerationObserver.
#pragma once

#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Sampling.h"

#include <cstdint>
#include <ostream>
#include <vector>

namespace tpc::runtime {

struct GenerationRequest {
  /// One prompt per sample, of any lengths (each at least one token).
  std::vector<std::vector<int32_t>> prompts;
  /// New tokens per sample, at most.
  int64_t newTokens = 0;
  SamplingOptions sampling;
  /// Sample i draws from a generator seeded with seed + i.
  uint64_t seed = 0;
  /// Ids that end a sample, which keeps it (as HuggingFace's generate()
  /// does); empty: every sample draws newTokens.
  std::vector<int32_t> endIds;
  /// With @prefill and @decode and their KV caches when the plan has them;
  /// false (or without them): @forward over the last seq tokens each step.
  bool kvCaches = true;
};

struct GeneratedSample {
  std::vector<int32_t> prompt;
  /// The tokens kept: up to and including its first end token.
  std::vector<int32_t> generated;
  /// Per generated token, its log-probability under the model (the raw
  /// logits' log-softmax, before temperature or filtering).
  std::vector<double> logProbs;
  /// It stopped at an end token (else it drew every token asked for).
  bool endedAtEos = false;
};

struct GenerationResult {
  std::vector<GeneratedSample> samples;
  bool usedKvCaches = false;
  /// Per step: the first reads the prompts (with the first token), each
  /// later one draws a token for every sample.
  std::vector<double> stepSeconds;
  double seconds = 0;
  /// Tokens drawn, all samples (those past an end token too: every
  /// sequence advances together).
  int64_t tokensDrawn = 0;
  /// This rank's KV caches, and the arenas and inputs of the programs run.
  uint64_t cacheBytes = 0, arenaBytes = 0, inputBytes = 0;
  /// @prefill runs over the prompts (KV caches only).
  int64_t prefillChunks = 0;
};

class GenerationObserver {
public:
  virtual ~GenerationObserver() = default;
  /// Without KV caches, from new token `token` (1-based) on a context is
  /// longer than @forward's `positions`: each step sees only the last
  /// `positions` tokens, where HuggingFace sees them all.
  virtual void contextCropped(int64_t token, int64_t positions) {}
};

/// tp-run's generation notes ("note: from token N on, a context is longer
/// than @forward's P positions ..."), to `out`.
class GenerationLog : public GenerationObserver {
public:
  explicit GenerationLog(std::ostream &out) : out(out) {}
  void contextCropped(int64_t token, int64_t positions) override;

private:
  std::ostream &out;
};

class Generator {
public:
  /// `grid` may be null on one rank; the parameters and the backend outlive
  /// the generator.
  Generator(const LoadedPlan &plan, ParamStore &params, GridComm *grid,
            Backend &backend);

  /// The plan has @prefill and @decode (tpc-import --kv-cache).
  bool hasKvCaches() const;
  /// How many sequences the programs generate at once (tpc-import's
  /// --batch), with the caches or with @forward.
  int64_t sequencesAtOnce(bool kvCaches) const;

  /// Throws std::invalid_argument for a request the plan cannot serve (no
  /// prompt or new token, more samples than sequencesAtOnce, prompts and
  /// new tokens past the caches' positions, an id outside the vocabulary)
  /// and std::runtime_error for a plan without the programs it needs. Runs
  /// nothing: every rank can check before the collective generate.
  void check(const GenerationRequest &request) const;

  /// Continues every prompt (after check). Collective over the grid.
  GenerationResult generate(const GenerationRequest &request,
                            GenerationObserver *observer = nullptr);

private:
  const LoadedPlan &plan;
  ParamStore &params;
  GridComm *grid;
  Backend &backend;
};

} // namespace tpc::runtime
