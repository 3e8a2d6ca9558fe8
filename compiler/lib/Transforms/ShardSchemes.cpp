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

/// The claim that reduce-scatters operand `index` of `op` along its
/// dimension `dim` (negative: from the end) over `axes`, when the op can
/// split that dimension's leading factor and the axes divide it; else none.
SmallVector<Claim> scatterClaim(Operation *op, const ShardingRule &rule,
                                unsigned index, int64_t dim, Axes axes,
                                const ShardQueries &engine) {
  RankedTensorType type = tensorType(op->getOperand(index));
  const DimFactors &factors =
      rule.getOperandFactors()[index][dim < 0 ? type.getRank() + dim : dim];
  if (factors.empty() ||
      !cast<ShardingRuleOpInterface>(op).isSplittableFactor(rule,
                                                            factors.front()) ||
      rule.getFactors()[factors.front()].size % engine.shardsOf(axes) != 0)
    return {};
  return {{factors.front(), std::move(axes)}};
}

/// Where operand `index` of `op`, an activation partial over
/// `layout.partial`, is reduce-scattered: along its dimension `dim` over
/// the partial axes (scatterClaim); nowhere for other values.
SmallVector<Claim>
scatterPartialActivation(Operation *op, const ShardingRule &rule,
                         unsigned index, const Layout &layout,
                         const ShardQueries &engine, int64_t dim) {
  if (!engine.isActivation(tensorType(op->getOperand(index))))
    return {};
  return scatterClaim(op, rule, index, dim, Axes(layout.partial), engine);
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
    // Norms see whole features: the column-parallel linear after one needs
    // its input gathered over the columns anyway, and gathering before the
    // norm keeps that linear column-parallel (3D splits them instead).
    if (isa<SplitStatisticsOpInterface>(op))
      claims.push_back({rule.getOperandFactors()[0].back().front(), {}});
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

/// 3D tensor parallelism (Bian et al.) on a q x q x q grid. Axis 0 is the
/// weight group: it splits every activation's batch and, with the axes the
/// layer uses, every weight matrix, which a linear layer all-gathers over
/// it. Axes 1 and 2 take turns as input and output groups: an activation is
/// [batch over axis 0 and one of them, ..., features over the other]. A
/// linear layer gathers its input over the batch's second axis (the input
/// group), multiplies with the contraction split over the features' axis
/// and the output features over the other, and reduce-scatters its partial
/// output over the features' axis onto the batch (the output group): its
/// output's features lie on the axis its input's batch did, so consecutive
/// linears swap the two groups and nothing is re-laid out between them.
/// Backward follows from the same claims: reduce-scatter dX, all-gather dY,
/// reduce-scatter dW over the weight group. Norms keep their features split
/// (statistics gathered over their axis); the embedding splits the
/// vocabulary over axis 1 and the features over axis 2, where the residual
/// stream keeps them. docs/schemes.md derives the traffic.
class ThreeDScheme : public ShardScheme {
public:
  explicit ThreeDScheme(ArrayRef<int64_t> grid) : q(grid[0]) {}

  LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const override {
    return checkHeadCounts(
        module, q, "the " + std::to_string(q) + " ranks of grid axis 1 or 2",
        "3d", error);
  }

  std::string whyTokensNeeded() const override {
    return "mode=3d needs a function with a tp.input = \"tokens\" argument "
           "to find the batch it splits";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq,
              function_ref<InFlightDiagnostic()> error) const override {
    if (batch % (q * q) != 0)
      return error() << "tp-shard: mode=3d splits the batch (size " << batch
                     << ") over grid axis 0 and one of axes 1 and 2 (" << q * q
                     << " ranks), which do not divide it";
    return success();
  }

  FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const override {
    SmallVector<Claim> claims;
    auto claim = [&](int64_t factor, int64_t axis, Value value,
                     StringRef what) -> LogicalResult {
      int64_t size = rule.getFactors()[factor].size;
      if (size % q != 0)
        return op->emitOpError()
               << "tp-shard: mode=3d cannot split the " << what << " (size "
               << size << ") of " << engine.describe(value) << " over the " << q
               << " ranks of grid axis " << axis;
      claims.push_back({factor, {axis}});
      return success();
    };
    auto leading = [](const DimFactors &factors) { return factors.front(); };

    // The embedding and its gradient: ids (operand 1) over axis 0, the
    // table's vocabulary over 1 and its features over 2.
    Value table;
    const TensorFactors *tableFactors = nullptr;
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      table = embedding.getTable();
      tableFactors = &rule.getOperandFactors()[0];
    } else if (auto embeddingGrad = dyn_cast<EmbeddingGradOp>(op)) {
      table = embeddingGrad.getResult();
      tableFactors = &rule.getResultFactors()[0];
    }
    if (table) {
      if (failed(claim(leading(rule.getOperandFactors()[1].front()),
                       kWeightAxis, op->getOperand(1), "batch")) ||
          failed(claim(leading((*tableFactors)[0]), 1, table, "vocabulary")) ||
          failed(claim(leading((*tableFactors)[1]), 2, table, "features")))
        return failure();
      return claims;
    }
    // A linear layer (its forward, dX or dW): a matmul with a matrix on the
    // right, not a batched one of attention.
    auto matmul = dyn_cast<MatmulOp>(op);
    if (!matmul || tensorType(matmul.getRhs()).getRank() != 2 ||
        tensorType(matmul.getLhs()).getRank() > 3)
      return claims;
    const TensorFactors &lhs = rule.getOperandFactors()[0];
    int64_t tokens = leading(lhs.front()), inFeatures = leading(lhs.back()),
            outFeatures = leading(rule.getResultFactors()[0].back());
    // The input's features keep their axis; without one, they take the axis
    // the input's batch leaves (axis 2 when nothing is decided).
    std::optional<int64_t> featureAxis, batchAxis;
    for (const Claim &c :
         operandClaims[0] ? *operandClaims[0] : SmallVector<Claim>()) {
      for (int64_t axis : c.axes) {
        if (axis == kWeightAxis)
          continue;
        if (c.factor == inFeatures)
          featureAxis = axis;
        else if (c.factor == tokens)
          batchAxis = axis;
      }
    }
    int64_t inAxis = featureAxis ? *featureAxis
                     : batchAxis ? 3 - *batchAxis
                                 : 2;
    if (failed(claim(tokens, kWeightAxis, matmul.getLhs(), "tokens")) ||
        failed(claim(inFeatures, inAxis, matmul.getLhs(), "input features")) ||
        failed(
            claim(outFeatures, 3 - inAxis, matmul.getRhs(), "output features")))
      return failure();
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    // A partial activation (or a view of one with the heads split out, as
    // LLaMA's rotary sees it) is reduce-scattered onto its batch, next to
    // the weight axis (the output group).
    if (!engine.isTokenMajor(tensorType(op->getOperand(index))))
      return {};
    Axes axes = layout.split.front();
    llvm::append_range(axes, layout.partial);
    return scatterClaim(op, rule, index, /*dim=*/0, std::move(axes), engine);
  }

  Layout storageLayout(Value param, const Layout &use,
                       const ShardQueries &engine) const override {
    // A matrix is also split over the weight axis: along a dimension the
    // use leaves whole if one divides, else after the use's axes. Vectors
    // (biases, norm weights, however the program views them) stay as used:
    // gathering them over the weight axis at every use costs more than
    // reducing their gradients over it saves.
    RankedTensorType type = tensorType(param);
    if (type.getRank() < 2 ||
        engine.getModelRank(cast<BlockArgument>(param)) < 2 ||
        llvm::any_of(use.split, [](const Axes &axes) {
          return llvm::is_contained(axes, kWeightAxis);
        }))
      return use;
    for (bool whole : {true, false})
      for (auto [d, axes] : llvm::enumerate(use.split)) {
        if (axes.empty() != whole ||
            type.getDimSize(d) % (engine.shardsOf(axes) * q) != 0)
          continue;
        Layout stored = use;
        stored.split[d].push_back(kWeightAxis);
        return stored;
      }
    return use;
  }

  double parameterCostFactor() const override { return 1.0; }

private:
  static constexpr int64_t kWeightAxis = 0;
  int64_t q;
};

} // namespace

std::unique_ptr<ShardScheme> mlir::tp::makeShardScheme(ParallelMode mode,
                                                       ArrayRef<int64_t> grid,
                                                       bool seqParallel) {
  switch (mode) {
  case ParallelMode::OneD:
    return std::make_unique<OneDScheme>(grid, seqParallel);
  case ParallelMode::TwoD:
  case ParallelMode::TwoHalfD:
    return std::make_unique<TwoDScheme>(grid, stringifyParallelMode(mode));
  case ParallelMode::ThreeD:
    return std::make_unique<ThreeDScheme>(grid);
  case ParallelMode::None:
  case ParallelMode::Auto:
    break;
  }
  llvm_unreachable("tp-shard has no scheme for mode=none or mode=auto");
}
