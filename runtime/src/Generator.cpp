#include "tpc/runtime/Generator.h"

#include "tpc/runtime/Tokens.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>

namespace tpc::runtime {

namespace {

/// What generation has produced so far, sample by sample.
struct Progress {
  /// Per sample: the prompt and the tokens drawn so far, its random stream
  /// (seeded seed + sample) and per new token its log-probability. Every
  /// sample has the same length at every step.
  std::vector<std::vector<int32_t>> contexts;
  std::vector<std::mt19937_64> randoms;
  std::vector<std::vector<double>> logProbs;
  std::vector<size_t> promptLengths;
  const std::vector<int32_t> &endIds;
  /// Per sample, how many new tokens it kept (its first end token
  /// included), or -1 while it runs on.
  std::vector<int64_t> ended;
  const SamplingOptions &sampling;

  Progress(const GenerationRequest &request)
      : contexts(request.prompts), logProbs(contexts.size()),
        endIds(request.endIds), ended(contexts.size(), -1),
        sampling(request.sampling) {
    for (size_t i = 0; i < contexts.size(); ++i) {
      randoms.emplace_back(request.seed + uint64_t(i));
      promptLengths.push_back(contexts[i].size());
    }
  }
  size_t samples() const { return contexts.size(); }
  /// The tokens so far of the sequence in batch row `row`: rows past the
  /// samples repeat the first (their results are not read).
  const std::vector<int32_t> &context(int64_t row) const {
    return contexts[size_t(row) < samples() ? size_t(row) : 0];
  }
  int64_t length(int64_t row) const { return int64_t(context(row).size()); }
  int32_t token(int64_t row, int64_t position) const {
    return context(row)[size_t(position)];
  }
  int64_t longest() const {
    size_t most = 0;
    for (const auto &context : contexts)
      most = std::max(most, context.size());
    return int64_t(most);
  }
  /// Every sample has ended: generation stops.
  bool done() const {
    return std::all_of(ended.begin(), ended.end(),
                       [](int64_t kept) { return kept >= 0; });
  }
  /// Draws sample `i`'s next token from one position's logits.
  void append(size_t i, std::span<const float> logits) {
    const int32_t id = nextToken(logits, sampling, randoms[i]);
    logProbs[i].push_back(logProbability(logits, id));
    contexts[i].push_back(id);
    // A sample that ended keeps drawing (every row advances together) but
    // keeps none of it.
    if (ended[i] < 0 &&
        std::find(endIds.begin(), endIds.end(), id) != endIds.end())
      ended[i] = int64_t(logProbs[i].size());
  }
};

/// Every generation step's wall time, into `stepSeconds`.
template <typename Step>
void timedStep(std::vector<double> &stepSeconds, Step &&step) {
  const auto start = std::chrono::steady_clock::now();
  step();
  stepSeconds.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
}

/// The index of `program`'s [batch, seq, vocab] "logits" result.
size_t logitsResult(const LoadedPlan &plan, const ProgramRunner &runner,
                    const char *program) {
  const auto *names = plan.program(program)->result_names();
  for (size_t i = 0; names && i < names->size(); ++i)
    if (names->Get(i)->str() == "logits" && runner.resultShape(i).size() == 3)
      return i;
  throw std::runtime_error(std::string("@") + program +
                           " has no [batch, seq, vocab] logits result");
}

void checkSamples(const Progress &out, int64_t batch) {
  if (int64_t(out.samples()) > batch)
    throw std::invalid_argument(
        std::to_string(out.samples()) + " samples: the plan generates " +
        std::to_string(batch) + " sequences at once (tpc-import --batch)");
}

} // namespace

void GenerationLog::contextCropped(int64_t token, int64_t positions) {
  out << "note: from token " << token
      << " on, a context is longer than @forward's " << positions
      << " positions: each step sees its last " << positions
      << " tokens only, where HuggingFace sees them all (the KV caches of "
         "tpc-import --kv-cache keep them)\n"
      << std::flush;
}

Generator::Generator(const LoadedPlan &plan, ParamStore &params, GridComm *grid,
                     Backend &backend)
    : plan(plan), params(params), grid(grid), backend(backend) {}

bool Generator::hasKvCaches() const {
  return plan.program("prefill") && plan.program("decode");
}

int64_t Generator::sequencesAtOnce(bool kvCaches) const {
  const std::vector<int64_t> shape =
      plan.wholeInputShape(kvCaches && hasKvCaches() ? "prefill" : "forward",
                           plan::InputKind::Tokens);
  return shape.empty() ? 0 : shape[0];
}

namespace {

/// @forward over the last seq tokens of the context for every new token.
void generateWithForward(const LoadedPlan &plan, ProgramRunner &runner,
                         int64_t newTokens, Progress &out,
                         GenerationResult &result,
                         GenerationObserver *observer) {
  const std::vector<int64_t> shape = runner.tokensShape();
  const int64_t batch = shape[0], seq = shape[1];
  checkSamples(out, batch);
  result.arenaBytes = runner.arenaBytes();
  result.inputBytes = runner.inputBytes();
  const size_t logitsIndex = logitsResult(plan, runner, "forward");
  const int64_t vocab = runner.resultShape(logitsIndex)[2];
  std::vector<int32_t> window(size_t(batch * seq));
  bool cropped = false;
  for (int64_t n = 0; n < newTokens && !out.done(); ++n)
    timedStep(result.stepSeconds, [&] {
      if (!cropped && out.longest() > seq) {
        cropped = true;
        if (observer)
          observer->contextCropped(n + 1, seq);
      }
      // The last seq tokens of each sample's context in its row, zeros
      // after them: causal attention leaves the padding unseen.
      std::fill(window.begin(), window.end(), 0);
      auto usedOf = [&](int64_t row) { return std::min(out.length(row), seq); };
      for (int64_t row = 0; row < batch; ++row)
        for (int64_t t = 0, used = usedOf(row); t < used; ++t)
          window[size_t(row * seq + t)] =
              out.token(row, out.length(row) - used + t);
      runner.setInput(plan::InputKind::Tokens, window);
      runner.run();
      std::span<const float> logits = runner.result(logitsIndex);
      for (size_t i = 0; i < out.samples(); ++i)
        out.append(
            i, logits.subspan(
                   size_t((int64_t(i) * seq + usedOf(int64_t(i)) - 1) * vocab),
                   size_t(vocab)));
    });
}

/// The positions every KV cache holds (the loader checked their ranks).
int64_t cachePositions(const LoadedPlan &plan) {
  const auto *cacheTable = plan.plan().caches();
  if (!cacheTable || cacheTable->size() == 0)
    throw std::runtime_error("@prefill and @decode keep no KV caches");
  int64_t capacity = std::numeric_limits<int64_t>::max();
  for (const plan::Cache *cache : *cacheTable)
    capacity =
        std::min(capacity, cache->shape()->Get(cache->shape()->size() - 2));
  return capacity;
}

/// @prefill over the prompts in chunks of its seq tokens, then @decode once
/// per new token, both reading and extending the KV caches. The first step
/// time is the prefill's (with the first token), each later one a decode.
void generateWithCaches(const LoadedPlan &plan, ParamStore &params,
                        GridComm *grid, Backend &backend, int64_t newTokens,
                        Progress &out, GenerationResult &result) {
  // Generator::check saw that the prompts and new tokens fit.
  const int64_t capacity = cachePositions(plan);
  KvCaches caches(plan, backend);
  result.cacheBytes = caches.bytes();
  ProgramRunner prefill(plan, "prefill", params, grid, backend);
  ProgramRunner decode(plan, "decode", params, grid, backend);
  prefill.setCaches(&caches);
  decode.setCaches(&caches);
  result.arenaBytes = prefill.arenaBytes() + decode.arenaBytes();
  result.inputBytes = prefill.inputBytes() + decode.inputBytes();
  const int64_t batch = prefill.tokensShape()[0],
                chunk = prefill.tokensShape()[1];
  if (decode.tokensShape() != std::vector<int64_t>{batch, 1})
    throw std::runtime_error("@decode must take one token per sequence of "
                             "@prefill's batch");
  checkSamples(out, batch);
  const size_t prefillLogits = logitsResult(plan, prefill, "prefill");
  const size_t decodeLogits = logitsResult(plan, decode, "decode");
  const int64_t vocab = prefill.resultShape(prefillLogits)[2];
  // Positions first(row) .. first(row) + width - 1 of every row. Past the
  // end of a row's context, padding: its last token at the next positions
  // (within the caches). No real query sees those keys before the real
  // tokens there replace them; at the row's last position (a cache full to
  // the end) the padding is the token that is there.
  auto feed = [&](ProgramRunner &runner, auto first, int64_t width) {
    std::vector<int32_t> tokens(size_t(batch * width)),
        positions(size_t(batch * width));
    for (int64_t row = 0; row < batch; ++row)
      for (int64_t t = 0; t < width; ++t) {
        const int64_t at = first(row) + t;
        tokens[size_t(row * width + t)] =
            out.token(row, std::min(at, out.length(row) - 1));
        positions[size_t(row * width + t)] =
            int32_t(std::min(at, capacity - 1));
      }
    runner.setInput(plan::InputKind::Tokens, tokens);
    runner.setInput(plan::InputKind::Positions, positions);
    runner.run();
  };
  timedStep(result.stepSeconds, [&] {
    // Chunks over the longest prompt (taken before any sample grows); each
    // sample draws its first token from the chunk holding its prompt's last
    // token.
    const int64_t longest = out.longest();
    for (int64_t first = 0; first < longest; first += chunk) {
      ++result.prefillChunks;
      feed(
          prefill, [&](int64_t) { return first; }, chunk);
      std::span<const float> logits = prefill.result(prefillLogits);
      for (size_t i = 0; i < out.samples(); ++i) {
        const int64_t last = int64_t(out.promptLengths[i]) - 1;
        if (last / chunk == first / chunk)
          out.append(i, logits.subspan(
                            size_t((int64_t(i) * chunk + last - first) * vocab),
                            size_t(vocab)));
      }
    }
  });
  for (int64_t n = 1; n < newTokens && !out.done(); ++n)
    timedStep(result.stepSeconds, [&] {
      feed(
          decode, [&](int64_t row) { return out.length(row) - 1; }, 1);
      std::span<const float> logits = decode.result(decodeLogits);
      for (size_t i = 0; i < out.samples(); ++i)
        out.append(i, logits.subspan(i * size_t(vocab), size_t(vocab)));
    });
}

} // namespace

void Generator::check(const GenerationRequest &request) const {
  if (request.prompts.empty())
    throw std::invalid_argument("generation needs at least one prompt");
  if (request.newTokens < 1)
    throw std::invalid_argument("generation needs at least one new token");
  const int64_t vocab = plan.vocabularySize();
  size_t longest = 0;
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    const std::string what = "prompt " + std::to_string(i + 1);
    if (request.prompts[i].empty())
      throw std::invalid_argument(what + " has no tokens");
    longest = std::max(longest, request.prompts[i].size());
    if (vocab > 0) {
      try {
        checkTokenIds(request.prompts[i], vocab, what);
      } catch (const std::runtime_error &error) {
        throw std::invalid_argument(error.what());
      }
    }
  }
  const bool cached = request.kvCaches && hasKvCaches();
  if (!cached && !plan.program("forward"))
    throw std::runtime_error("the plan has no @forward, which generation "
                             "without KV caches runs");
  if (const int64_t batch = sequencesAtOnce(cached);
      int64_t(request.prompts.size()) > batch)
    throw std::invalid_argument(std::to_string(request.prompts.size()) +
                                " samples: the plan generates " +
                                std::to_string(batch) +
                                " sequences at once (tpc-import --batch)");
  if (!cached)
    return;
  // The last token generated is never fed back.
  const int64_t capacity = cachePositions(plan);
  const int64_t needed = int64_t(longest) + request.newTokens - 1;
  if (needed > capacity)
    throw std::invalid_argument(
        std::string(request.prompts.size() > 1 ? "the longest prompt ("
                                               : "the prompt (") +
        std::to_string(longest) + " tokens) and " +
        std::to_string(request.newTokens) + " new tokens need " +
        std::to_string(needed) + " positions, but the plan's KV caches hold " +
        std::to_string(capacity) + " (tpc-import --kv-cache)");
}

GenerationResult Generator::generate(const GenerationRequest &request,
                                     GenerationObserver *observer) {
  check(request);
  Progress out(request);
  GenerationResult result;
  result.usedKvCaches = request.kvCaches && hasKvCaches();
  const auto start = std::chrono::steady_clock::now();
  if (result.usedKvCaches) {
    generateWithCaches(plan, params, grid, backend, request.newTokens, out,
                       result);
  } else {
    ProgramRunner runner(plan, "forward", params, grid, backend);
    generateWithForward(plan, runner, request.newTokens, out, result, observer);
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (size_t i = 0; i < out.samples(); ++i) {
    GeneratedSample sample;
    const auto promptEnd =
        out.contexts[i].begin() + std::ptrdiff_t(out.promptLengths[i]);
    const size_t kept =
        out.ended[i] >= 0 ? size_t(out.ended[i]) : out.logProbs[i].size();
    sample.prompt.assign(out.contexts[i].begin(), promptEnd);
    sample.generated.assign(promptEnd, promptEnd + std::ptrdiff_t(kept));
    sample.logProbs.assign(out.logProbs[i].begin(),
                           out.logProbs[i].begin() + std::ptrdiff_t(kept));
    sample.endedAtEos = out.ended[i] >= 0;
    result.samples.push_back(std::move(sample));
  }
  result.tokensDrawn =
      int64_t(out.samples()) * int64_t(out.logProbs.front().size());
  return result;
}

} // namespace tpc::runtime
