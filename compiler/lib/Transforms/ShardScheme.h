//===- ShardScheme.h - what a distribution scheme decides -------*- C++ -*-===//
//
// tp-shard is one propagation engine (Shard.cpp: sharding rules, partial-sum
// tracking, costing, redistribution) and one small policy per scheme (this
// interface, ShardSchemes.cpp). A policy only states claims: which grid axes
// split which factor of weights, activations and batch, where a resolved
// partial sum lands, and how a parameter is stored. Everything an op's
// sharding rule already describes stays in the engine.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_TRANSFORMS_SHARDSCHEME_H
#define TPC_TRANSFORMS_SHARDSCHEME_H

#include "tpc/Dialect/TP/IR/ShardingRule.h"
#include "tpc/Dialect/TP/IR/TPAttrs.h"
#include "tpc/Transforms/PassOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"

#include <memory>
#include <optional>
#include <string>

namespace mlir::tp {

using Axes = SmallVector<int64_t, 2>;

/// "Factor `factor` split over grid axes `axes`", proposed by an operand's
/// layout, the scheme or a wanted result layout. A scheme's claim with no
/// axes keeps the factor whole.
struct Claim {
  int64_t factor;
  Axes axes;
};

/// What a scheme may ask the engine while it decides.
class ShardQueries {
public:
  virtual ~ShardQueries() = default;
  virtual ArrayRef<int64_t> getGridShape() const = 0;
  /// Ranks splitting a value over `axes`.
  virtual int64_t shardsOf(ArrayRef<int64_t> axes) const = 0;
  /// A parameter (or a view of one) whose layout is not decided yet.
  virtual bool isUndecided(Value value) const = 0;
  /// A parameter, or its type, for error messages.
  virtual std::string describe(Value value) const = 0;
  /// Whether `type` is an activation: [batch, sequence, ...] of the step's
  /// tokens (known once a function's tokens argument has been seen).
  virtual bool isActivation(RankedTensorType type) const = 0;
  /// Whether `type` is an activation or a view of one with the heads split
  /// out: [batch, ..., sequence, ...] of the step's tokens.
  virtual bool isTokenMajor(RankedTensorType type) const = 0;
  /// Whether `type` is the step's token ids or targets: integers [batch,
  /// sequence].
  virtual bool isTokenIds(RankedTensorType type) const = 0;
  /// The rank parameter `param` (or its optimizer moment) has in the
  /// model's own files (tp.hf_shape): GPT-2's fused QKV bias is a vector
  /// there although the program views it as [3, h].
  virtual int64_t getModelRank(BlockArgument param) const = 0;
};

class ShardScheme {
public:
  virtual ~ShardScheme() = default;

  /// One-line errors, before any op is sharded, for a model the grid cannot
  /// split as the scheme wants (head counts the tp.head_counts module
  /// attribute records). `error` starts a module-level diagnostic.
  virtual LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const = 0;

  /// Why the scheme needs to know the step's tokens (a function with a
  /// tp.input = "tokens" argument) to split activations, as the error when
  /// no function has them; empty when it does not need them.
  virtual std::string whyTokensNeeded() const = 0;

  /// Checks a function's token batch and sequence length against the grid.
  /// A generation function (one that reads KV caches) may keep a sequence
  /// the grid cannot split whole: a decode step's one token runs without
  /// sequence parallelism, as Megatron-LM's inference does.
  virtual LogicalResult
  checkTokens(int64_t batch, int64_t seq, bool generation,
              function_ref<InFlightDiagnostic()> error) const = 0;

  /// The scheme's claims for `op`'s factors, given the claims its decided
  /// operands make (nullopt: undecided). They win over the operands'.
  virtual FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const = 0;

  /// Where operand `index` of `op`, a pending partial sum over
  /// `layout.partial` that `op` cannot pass through, may be resolved to
  /// besides a whole value: a reduce-scatter onto the returned claims (for
  /// instance the sequence, in Megatron's sequence parallelism). Empty:
  /// nowhere.
  virtual SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout, const ShardQueries &engine) const {
    return {};
  }

  /// How parameter `param` is stored, given the layout its first use wants
  /// (`use`). Stored more finely than used, it is gathered where used and
  /// its gradient reduce-scattered to it.
  virtual Layout storageLayout(Value param, const Layout &use,
                               const ShardQueries &engine) const {
    return use;
  }

  /// Grid axes that split only what the scheme claims (the data-parallel
  /// axis: the batch). A parameter stored split over one is gathered where
  /// used; its split there proposes nothing.
  virtual Axes getReservedAxes() const { return {}; }

  /// Grid axes whose shards of a value can only be summed, never gathered
  /// or moved (the micro-batches, which run one after another).
  virtual Axes getSumOnlyAxes() const { return {}; }

  /// Moving a parameter costs this many times its bytes in the engine's
  /// choices: large where the scheme keeps weights in place and moves
  /// activations (1D), 1 where weights move by design.
  virtual double parameterCostFactor() const = 0;
};

/// The policy for `mode` on a tensor-parallel grid of shape `tensorGrid` (at
/// least one axis); `mode` is not ParallelMode::None or Auto. With
/// `dataReplicas` > 1 the module's grid is [dataReplicas, tensorGrid...]: the
/// batch is also split over axis 0, and with `shardOptimizer` parameters and
/// their optimizer state are stored split over it (ZeRO-1); with
/// `shardWholeDimsOnly` only along dimensions the tensor scheme keeps whole
/// (a parameter without one stays whole over the replicas). With
/// `microbatches` > 0 one more axis of that size comes first, [microbatches,
/// dataReplicas?, tensorGrid...]: the step's micro-batches, splitting the
/// batch as the major part of its split, whose sums tp-pipeline-stages
/// turns into accumulation over time.
std::unique_ptr<ShardScheme>
makeShardScheme(ParallelMode mode, ArrayRef<int64_t> tensorGrid,
                bool seqParallel, int64_t dataReplicas, bool shardOptimizer,
                bool shardWholeDimsOnly = false, int64_t microbatches = 0);

} // namespace mlir::tp

#endif // TPC_TRANSFORMS_SHARDSCHEME_H
