//===- ShardSchemes.cpp - the claims of each distribution scheme ----------===//
//
// One policy per tp-shard mode (ShardScheme.h). Each states which grid axes
// split weights, activations and the batch; the engine in Shard.cpp derives
// everything else from the ops' sharding rules.
//
//===----------------------------------------------------------------------===//

#include "ShardScheme.h"

#include "tpc/Dialect/TP/IR/TPOps.h"

using namespace mlir;
using namespace mlir::tp;

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Megatron-LM's 1D tensor parallelism over every axis of the grid, with
/// optional sequence parallelism.
class OneDScheme : public ShardScheme {
public:
  OneDScheme(ArrayRef<int64_t> grid, bool seqParallel)
      : seqParallel(seqParallel) {
    for (int64_t axis = 0; axis < int64_t(grid.size()); ++axis)
      allAxes.push_back(axis);
    for (int64_t size : grid)
      ranks *= size;
  }

  LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const override {
    // Heads split over all ranks: name the head count the grid does not
    // divide rather than the view op whose split it would stop at.
    if (auto headCounts = module->getAttrOfType<DictionaryAttr>(
            TPDialect::HeadCountsAttrHelper::getNameStr()))
      for (NamedAttribute count : headCounts)
        if (auto value = dyn_cast<IntegerAttr>(count.getValue());
            value && value.getInt() % ranks != 0)
          return error() << "tp-shard: " << count.getName().getValue() << " ("
                         << value.getInt() << ") is not divisible by the "
                         << ranks
                         << " ranks of the grid, over which 1d splits the "
                            "heads";
    return success();
  }

  std::string whyTokensNeeded() const override {
    if (!seqParallel)
      return "";
    return "seq-parallel=true needs a function with a tp.input = \"tokens\" "
           "argument to find the sequence";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq,
              function_ref<InFlightDiagnostic()> error) const override {
    // Sequence parallelism that cannot apply is an error, not a no-op.
    if (seqParallel && seq % ranks != 0)
      return error() << "tp-shard: seq-parallel=true cannot split the "
                        "sequence (length "
                     << seq << ") over " << ranks << " ranks";
    return success();
  }

  FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const override {
    SmallVector<Claim> claims;
    auto claimAll = [&](Value weight, int64_t factor,
                        StringRef what) -> LogicalResult {
      int64_t size = rule.getFactors()[factor].size;
      if (size % ranks != 0)
        return op->emitOpError()
               << "tp-shard: cannot split the " << what << " (size " << size
               << ") of " << engine.describe(weight) << " over " << ranks
               << " ranks";
      claims.push_back({factor, allAxes});
      return success();
    };
    if (auto matmul = dyn_cast<MatmulOp>(op)) {
      // A weight whose input is not split along the contraction is split
      // along its output features (column-parallel); otherwise it follows
      // the input's split (row-parallel).
      Value rhs = matmul.getRhs();
      if (!engine.isUndecided(rhs) || tensorType(rhs).getRank() != 2 ||
          !operandClaims[0])
        return claims;
      bool contractionSplit =
          llvm::any_of(*operandClaims[0], [&](const Claim &c) {
            return rule.getKind(c.factor) == FactorKind::Reduction;
          });
      if (contractionSplit)
        return claims;
      const DimFactors &out = rule.getResultFactors()[0].back();
      if (!out.empty() && failed(claimAll(rhs, out.front(), "output features")))
        return failure();
      return claims;
    }
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      // Megatron's VocabParallelEmbedding.
      if (!engine.isUndecided(embedding.getTable()))
        return claims;
      const DimFactors &vocab = rule.getOperandFactors()[0].front();
      if (!vocab.empty() &&
          failed(claimAll(embedding.getTable(), vocab.front(), "vocabulary")))
        return failure();
    }
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    // Sequence parallelism: a partial activation is reduce-scattered along
    // the sequence.
    if (!seqParallel || !engine.isActivation(tensorType(op->getOperand(index))))
      return {};
    const DimFactors &seqFactors = rule.getOperandFactors()[index][1];
    if (seqFactors.empty() ||
        !cast<ShardingRuleOpInterface>(op).isSplittableFactor(
            rule, seqFactors.front()) ||
        rule.getFactors()[seqFactors.front()].size %
                engine.shardsOf(layout.partial) !=
            0)
      return {};
    return {{seqFactors.front(), Axes(layout.partial)}};
  }

  double parameterCostFactor() const override {
    // Megatron keeps weights in place and moves activations.
    return 1000.0;
  }

private:
  bool seqParallel;
  Axes allAxes;
  int64_t ranks = 1;
};

/// 2D (Optimus) on a q x q grid, and 2.5D (Tesseract) on q x q x d: grid
/// axis 0 (rows) splits the batch, axis 1 (columns) the heads, features and
/// vocabulary, axis 2 (depth, 2.5D) the batch once more. Activations are
/// [batch over rows (and depth), ..., hidden over columns]; a weight matrix
/// is split into q x q blocks, over columns as Megatron splits it over its
/// one axis and over rows along its other dimension, and replicated over
/// depth. Each matmul all-gathers its weight over the rows (SUMMA's
/// broadcast of B panels) and works like a Megatron layer on the columns:
/// column-parallel with its input gathered over the columns, or
/// row-parallel with its partial output reduce-scattered over them. Weight
/// gradients are reduce-scattered over the rows and all-reduced over depth.
/// docs/schemes.md derives its traffic.
class TwoDScheme : public ShardScheme {
public:
  TwoDScheme(ArrayRef<int64_t> grid, StringRef name)
      : name(name.str()), rows(grid[0]), columns(grid[1]) {
    if (grid.size() > 2) {
      depth = grid[2];
      batchAxes = {kDepthAxis, kRowAxis};
    } else {
      batchAxes = {kRowAxis};
    }
  }

  LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const override {
    if (auto headCounts = module->getAttrOfType<DictionaryAttr>(
            TPDialect::HeadCountsAttrHelper::getNameStr()))
      for (NamedAttribute count : headCounts)
        if (auto value = dyn_cast<IntegerAttr>(count.getValue());
            value && value.getInt() % columns != 0)
          return error() << "tp-shard: " << count.getName().getValue() << " ("
                         << value.getInt() << ") is not divisible by the "
                         << columns << " columns of the grid (axis 1), over "
                         << "which " << name << " splits the heads";
    return success();
  }

  std::string whyTokensNeeded() const override {
    return "mode=" + name +
           " needs a function with a tp.input = \"tokens\" argument to "
           "find the batch it splits";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq,
              function_ref<InFlightDiagnostic()> error) const override {
    int64_t shards = rows * depth;
    if (batch % shards != 0)
      return error() << "tp-shard: mode=" << name << " splits the batch (size "
                     << batch << ") over "
                     << (depth > 1 ? "the rows and depth of the grid (axes 0 "
                                     "and 2, "
                                   : "the rows of the grid (axis 0, ")
                     << shards << " ranks), which do not divide it";
    return success();
  }

  FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const override {
    SmallVector<Claim> claims;
    // The batch stays split over the rows (and depth) through every op:
    // token ids and targets where they enter, activations everywhere
    // (including where a weight gradient contracts it).
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      RankedTensorType type = tensorType(operand);
      if (!engine.isTokenIds(type) && !engine.isActivation(type))
        continue;
      const DimFactors &factors = rule.getOperandFactors()[i].front();
      if (factors.empty() ||
          !cast<ShardingRuleOpInterface>(op).isSplittableFactor(
              rule, factors.front()) ||
          llvm::any_of(claims, [&](const Claim &claim) {
            return claim.factor == factors.front();
          }))
        continue;
      claims.push_back({factors.front(), batchAxes});
    }
    auto claimColumns = [&](Value weight, int64_t factor,
                            StringRef what) -> LogicalResult {
      int64_t size = rule.getFactors()[factor].size;
      if (size % columns != 0)
        return op->emitOpError()
               << "tp-shard: cannot split the " << what << " (size " << size
               << ") of " << engine.describe(weight) << " over the " << columns
               << " columns of the grid (axis 1)";
      claims.push_back({factor, {kColumnAxis}});
      return success();
    };
    if (auto matmul = dyn_cast<MatmulOp>(op)) {
      // Megatron on the columns: column-parallel unless the input arrives
      // split along the contraction.
      Value rhs = matmul.getRhs();
      if (!engine.isUndecided(rhs) || tensorType(rhs).getRank() != 2 ||
          !operandClaims[0])
        return claims;
      bool contractionSplit =
          llvm::any_of(*operandClaims[0], [&](const Claim &c) {
            return rule.getKind(c.factor) == FactorKind::Reduction;
          });
      if (contractionSplit)
        return claims;
      const DimFactors &out = rule.getResultFactors()[0].back();
      if (!out.empty() &&
          failed(claimColumns(rhs, out.front(), "output features")))
        return failure();
      return claims;
    }
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      if (!engine.isUndecided(embedding.getTable()))
        return claims;
      const DimFactors &vocab = rule.getOperandFactors()[0].front();
      if (!vocab.empty() && failed(claimColumns(embedding.getTable(),
                                                vocab.front(), "vocabulary")))
        return failure();
    }
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    // A partial activation lands split along its hidden (last) dimension
    // over the axes it was partial on.
    if (!engine.isActivation(tensorType(op->getOperand(index))))
      return {};
    const DimFactors &hidden = rule.getOperandFactors()[index].back();
    if (hidden.empty() ||
        !cast<ShardingRuleOpInterface>(op).isSplittableFactor(rule,
                                                              hidden.front()) ||
        rule.getFactors()[hidden.front()].size %
                engine.shardsOf(layout.partial) !=
            0)
      return {};
    return {{hidden.front(), Axes(layout.partial)}};
  }

  Layout storageLayout(Value param, const Layout &use,
                       const ShardQueries &engine) const override {
    // A matrix is also split over the rows, along its first dimension the
    // use leaves whole.
    RankedTensorType type = tensorType(param);
    if (type.getRank() < 2 || rows == 1)
      return use;
    for (const Axes &axes : use.split)
      if (llvm::is_contained(axes, kRowAxis))
        return use;
    Layout stored = use;
    for (auto [d, axes] : llvm::enumerate(stored.split))
      if (axes.empty() && type.getDimSize(d) % rows == 0) {
        axes.push_back(kRowAxis);
        break;
      }
    return stored;
  }

  double parameterCostFactor() const override {
    // Weights move by design (gathered over the rows); their bytes count as
    // any other.
    return 1.0;
  }

private:
  static constexpr int64_t kRowAxis = 0, kColumnAxis = 1, kDepthAxis = 2;
  std::string name;
  int64_t rows, columns, depth = 1;
  Axes batchAxes;
};

} // namespace

std::unique_ptr<ShardScheme> mlir::tp::makeShardScheme(ParallelMode mode,
                                                       ArrayRef<int64_t> grid,
                                                       bool seqParallel) {
  switch (mode) {
  case ParallelMode::OneD:
    return std::make_unique<OneDScheme>(grid, seqParallel);
  case ParallelMode::TwoD:
    return std::make_unique<TwoDScheme>(grid, "2d");
  case ParallelMode::TwoHalfD:
    return std::make_unique<TwoDScheme>(grid, "2.5d");
  case ParallelMode::None:
    break;
  }
  llvm_unreachable("tp-shard has no scheme for mode=none");
}
