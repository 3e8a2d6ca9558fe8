// Loading a plan (.tpplan): the flatbuffers Verifier first, then semantic
// checks of everything the executor will trust -- versions, grid size, tensor
// shapes and byte ranges, operand counts, per-op shape and dtype rules, and
// that every value is written before it is read. Plans are untrusted input:
// any problem is a PlanError with a one-line message.
#pragma once

#include "tpc/plan/plan_generated.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

inline constexpr uint32_t kPlanVersionMajor = 1;
inline constexpr uint32_t kPlanVersionMinor = 15;
/// The first minor version whose plans carry Plan.content_checksum.
inline constexpr uint32_t kPlanChecksumMinor = 2;
/// The first minor version with bf16 activations and KV caches (mixed
/// precision) and the Convert op kind.
inline constexpr uint32_t kPlanBf16Minor = 10;
/// The minor version that added Plan.eos_token_ids.
inline constexpr uint32_t kPlanEosMinor = 11;
/// The minor version with pipeline stages: Plan.pipeline, Program.stage,
/// Param.stage and the transfer op kinds.
inline constexpr uint32_t kPlanPipelineMinor = 12;
/// The first minor version with cached embedding tables (Param.cache_rows,
/// the CacheMap and CacheRows inputs).
inline constexpr uint32_t kPlanEmbeddingCacheMinor = 14;
/// A cached table's inputs: its slot map and the rows a step updates.
inline bool isCacheInput(plan::InputKind kind) {
  return kind == plan::InputKind::CacheMap ||
         kind == plan::InputKind::CacheRows;
}
/// The minor version with stage cuts (stage rebalancing): Pipeline.cuts and
/// layer_seconds, Program.cuts, Param.cut_stages.
inline constexpr uint32_t kPlanStageCutsMinor = 13;
/// The minor version with dense feature inputs (InputKind Dense) and the
/// Relu, ReluGrad op kinds: the DLRM.
inline constexpr uint32_t kPlanDenseMinor = 15;

class PlanError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The pipeline stage holding `param` under stage cut `cut` (-1: every
/// rank).
int64_t paramStage(const plan::Param &param, int64_t cut);
/// Whether `program` serves stage cut `cut`.
bool servesCut(const plan::Program &program, int64_t cut);

/// Bytes per element of a plan dtype.
int64_t dtypeSize(plan::DType dtype);
const char *dtypeName(plan::DType dtype);
const char *opKindName(plan::OpKind kind);
/// A shape for messages: "[2,3,5]".
std::string shapeString(std::span<const int64_t> shape);
/// A step's integer attributes; an absent vector (legal where the op needs
/// none, e.g. the permutation of a scalar) is empty.
inline std::span<const int64_t> stepInts(const plan::Step &step) {
  if (!step.ints())
    return {};
  return {step.ints()->data(), step.ints()->size()};
}

/// Plans from version 1.2 carry Plan.content_checksum: XXH3-64 of the file
/// with the checksum's eight bytes zeroed, which the loader recomputes.
/// sealPlan writes that checksum into `bytes`, a plan that passes the
/// flatbuffers verifier and has the field; it returns false and leaves the
/// bytes alone otherwise. For programs that build or mutate plans (tests, the
/// plan fuzzer); the compiler's emitter computes the same with LLVM's xxh3.
bool sealPlan(std::span<uint8_t> bytes);

/// For LoadedPlan::load: a plan read to be shown, not run, on any number of
/// ranks.
inline constexpr int64_t kAnyWorldSize = 0;

class LoadedPlan {
public:
  /// Reads and checks `path` for a run on `worldSize` ranks (or
  /// kAnyWorldSize).
  static LoadedPlan load(const std::string &path, int64_t worldSize);
  /// Checks an in-memory plan (copied into aligned storage).
  static LoadedPlan fromBytes(const void *data, size_t size, int64_t worldSize,
                              const std::string &what);

  const plan::Plan &plan() const { return *root; }
  /// The program called `name`, or null; of a pipelined one, stage 0's.
  const plan::Program *program(const std::string &name) const;
  /// The program called `name` that stage `stage` runs (-1: no pipeline)
  /// under stage cut `cut`: its own for a pipelined name, else the one every
  /// rank runs; or null.
  const plan::Program *program(const std::string &name, int64_t stage,
                               int64_t cut = 0) const;
  /// The stage cuts the pipeline may switch between (1 without any).
  int64_t numCuts() const;
  /// The pipeline stage of the rank at grid coordinates `coords` (empty:
  /// the first rank), or -1 when the plan has no pipeline.
  int64_t stageOf(const std::vector<int64_t> &coords) const;
  /// The whole shape of program `name`'s input of `kind` (its declared
  /// block times the ranks of each dimension's split), or empty when the
  /// program or the input does not exist.
  std::vector<int64_t> wholeInputShape(const std::string &name,
                                       plan::InputKind kind) const;

  /// Why the pipeline's transfers cannot go over a transport that matches
  /// them by order per direction of each pair of stages rather than by tag
  /// (NCCL's point-to-point calls; docs/pipeline.md): some send would meet
  /// a receive expecting another tag or tensor. Empty when they can, or
  /// when the plan has none; such a plan's transfers then run staged over
  /// MPI.
  const std::string &inOrderTransferProblem() const { return inOrderProblem; }

  /// XXH3-64 of the plan file's bytes (ranks compare it at start-up).
  uint64_t contentChecksum() const;
  /// The vocabulary size: rows of the table the token ids index (the
  /// embedding's parameter, whole), or 0 if no program embeds tokens.
  int64_t vocabularySize() const;
  /// The classes a target may name: the whole last dimension of the logits
  /// of @train_step's (else @loss's) cross-entropy (a language model's
  /// vocabulary; 2 for a DLRM's click labels); vocabularySize() when
  /// neither program has one.
  int64_t targetClasses() const;
  /// The ids generation stops at: the plan's eos_token_ids (1.11, resolved
  /// by tpc-import as HuggingFace does), or for older plans the eos_token_id
  /// of the config.json it carries; only ids inside the vocabulary.
  std::vector<int32_t> endTokenIds() const;

  /// Writes the plan as JSON (stable key order) for tests and debugging.
  void printJson(std::ostream &os) const;

private:
  std::shared_ptr<std::vector<uint64_t>> storage; // 8-byte aligned bytes
  size_t size = 0;                                // bytes of the plan file
  const plan::Plan *root = nullptr;
  std::string inOrderProblem;
};

/// AdamW's settings, which the compiler fixes in the plan's AdamW steps
/// (tp-autodiff's beta1, beta2, epsilon, weight-decay), for run reports.
struct OptimizerSettings {
  double beta1 = 0, beta2 = 0, epsilon = 0;
  /// The decay of the parameters that decay (rank >= 2), and how many of
  /// the steps' parameters do.
  double weightDecay = 0;
  int64_t decayedParameters = 0, parameters = 0;
};
/// The settings of `program`'s AdamW steps (the first one's betas and
/// epsilon, which tp-autodiff gives every step), or nullopt without any.
std::optional<OptimizerSettings>
optimizerSettings(const plan::Program &program);

/// The parameter's shape in safetensors files (checkpoints, exports, HF
/// weights): `hf_shape` when the plan views it in another shape, else `shape`.
std::vector<int64_t> fileShape(const plan::Param &param);

/// Rebalance points (Plan.rebalance_points; docs/rebalancing.md): a rank
/// computes some number of each point's blocks, one entry per point in plan
/// order. The plan's own shapes are those at capacity; the even split is
/// blocks / (the axis's ranks) each.
std::vector<int64_t> capacityBlocks(const plan::Plan &plan);
std::vector<int64_t> evenBlocks(const plan::Plan &plan);
/// The first rebalance point whose blocks a dimension of `tensor` holds, or
/// -1 when it holds none.
int32_t rebalancePointOf(const plan::Tensor &tensor);
/// The local shape of `tensor` when the rank computes `active[p]` blocks of
/// each point p.
std::vector<int64_t> activeShape(const plan::Plan &plan,
                                 const plan::Tensor &tensor,
                                 std::span<const int64_t> active);
/// The local shape of one rank's share of `param` when it holds `blocks[p]`
/// blocks of each point p (dims split evenly: global / shards).
std::vector<int64_t> paramLocalShape(const plan::Plan &plan,
                                     const plan::Param &param,
                                     std::span<const int64_t> blocks);
/// Checks every tensor and step of `program` (of a loaded plan) again at the
/// shapes of `active`; a PlanError names the first kernel shape rule that
/// fails. Loading checked them at capacity.
void checkProgramAt(const plan::Plan &plan, const plan::Program &program,
                    std::span<const int64_t> active);

/// Element count of a shape; throws PlanError on negative dims or overflow.
int64_t checkedElementCount(const flatbuffers::Vector<int64_t> *shape,
                            const std::string &what);

} // namespace tpc::runtime
