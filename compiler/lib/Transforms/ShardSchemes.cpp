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

/// Fails, naming it, if a head count of the model (tpc-import records them
/// as tp.head_counts) does not divide by the `shards` ranks `over` which
/// `mode` splits heads: clearer than the view op whose split would stop.
LogicalResult checkHeadCounts(ModuleOp module, int64_t shards, StringRef over,
                              StringRef mode,
                              function_ref<InFlightDiagnostic()> error) {
  auto headCounts = module->getAttrOfType<DictionaryAttr>(
      TPDialect::HeadCountsAttrHelper::getNameStr());
  if (!headCounts)
    return success();
  for (NamedAttribute count : headCounts)
    if (auto value = dyn_cast<IntegerAttr>(count.getValue());
        value && value.getInt() % shards != 0)
      return error() << "tp-shard: " << count.getName().getValue() << " ("
                     << value.getInt() << ") is not divisible by " << over
                     << ", over which " << mode << " splits the heads";
  return success();
}

/// Megatron-LM's claims for an undecided weight of `op` over the grid axes
/// `axes` (`shards` ranks, named `over` in errors), appended to `claims`: a
/// matmul weight whose input is not split along the contraction is split
/// along its output features (column-parallel), otherwise it follows the
/// input's split (row-parallel, no claim); an embedding table is split
/// along the vocabulary (VocabParallelEmbedding).
LogicalResult
claimMegatronWeights(Operation *op, const ShardingRule &rule,
                     ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
                     const ShardQueries &engine, const Axes &axes,
                     int64_t shards, StringRef over,
                     SmallVector<Claim> &claims) {
  auto claim = [&](Value weight, const DimFactors &factors,
                   StringRef what) -> LogicalResult {
    if (factors.empty())
      return success();
    int64_t size = rule.getFactors()[factors.front()].size;
    if (size % shards != 0)
      return op->emitOpError()
             << "tp-shard: cannot split the " << what << " (size " << size
             << ") of " << engine.describe(weight) << " over " << over;
    claims.push_back({factors.front(), axes});
    return success();
  };
  if (auto matmul = dyn_cast<MatmulOp>(op)) {
    Value rhs = matmul.getRhs();
    if (!engine.isUndecided(rhs) || tensorType(rhs).getRank() != 2 ||
        !operandClaims[0])
      return success();
    bool contractionSplit =
        llvm::any_of(*operandClaims[0], [&](const Claim &c) {
          return rule.getKind(c.factor) == FactorKind::Reduction;
        });
    if (contractionSplit)
      return success();
    return claim(rhs, rule.getResultFactors()[0].back(), "output features");
  }
  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    if (!engine.isUndecided(embedding.getTable()))
      return success();
    return claim(embedding.getTable(), rule.getOperandFactors()[0].front(),
                 "vocabulary");
  }
  return success();
}

/// Where operand `index` of `op`, an activation partial over
/// `layout.partial`, is reduce-scattered: along its dimension `dim`
/// (negative: from the end) over the partial axes, when the op can split
/// that dimension's leading factor and they divide it; else nowhere.
SmallVector<Claim>
scatterPartialActivation(Operation *op, const ShardingRule &rule,
                         unsigned index, const Layout &layout,
                         const ShardQueries &engine, int64_t dim) {
  RankedTensorType type = tensorType(op->getOperand(index));
  if (!engine.isActivation(type))
    return {};
  const DimFactors &factors =
      rule.getOperandFactors()[index][dim < 0 ? type.getRank() + dim : dim];
  if (factors.empty() ||
      !cast<ShardingRuleOpInterface>(op).isSplittableFactor(rule,
                                                            factors.front()) ||
      rule.getFactors()[factors.front()].size %
              engine.shardsOf(layout.partial) !=
          0)
    return {};
  return {{factors.front(), Axes(layout.partial)}};
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
    return checkHeadCounts(
        module, ranks, "the " + std::to_string(ranks) + " ranks of the grid",
        "1d", error);
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
    if (failed(claimMegatronWeights(op, rule, operandClaims, engine, allAxes,
                                    ranks, std::to_string(ranks) + " ranks",
                                    claims)))
      return failure();
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    // Sequence parallelism: a partial activation is reduce-scattered along
    // the sequence.
    if (!seqParallel)
      return {};
    return scatterPartialActivation(op, rule, index, layout, engine,
                                    /*dim=*/1);
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
    return checkHeadCounts(module, columns,
                           "the " + std::to_string(columns) +
                               " columns of the grid (axis 1)",
                           name, error);
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
    // Megatron on the columns.
    if (failed(claimMegatronWeights(
            op, rule, operandClaims, engine, {kColumnAxis}, columns,
            "the " + std::to_string(columns) + " columns of the grid (axis 1)",
            claims)))
      return failure();
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    // A partial activation lands split along its hidden (last) dimension
    // over the axes it was partial on.
    return scatterPartialActivation(op, rule, index, layout, engine,
                                    /*dim=*/-1);
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
