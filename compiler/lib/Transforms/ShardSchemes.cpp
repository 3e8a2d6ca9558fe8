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
/// input's split (row-parallel, no claim); a weight with one output feature
/// (a classifier's logit) has nothing to split and stays whole; an embedding
/// table is split along the vocabulary (VocabParallelEmbedding).
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
    const DimFactors &outputs = rule.getResultFactors()[0].back();
    if (contractionSplit ||
        (!outputs.empty() && rule.getFactors()[outputs.front()].size == 1))
      return success();
    return claim(rhs, outputs, "output features");
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

/// The leading factor of operand `index` of `op` when the operand is token
/// ids or an activation and the rule lets that factor split: the batch,
/// which schemes split over their batch axes.
std::optional<int64_t> splittableBatchFactor(Operation *op,
                                             const ShardingRule &rule,
                                             unsigned index,
                                             const ShardQueries &engine) {
  RankedTensorType type = tensorType(op->getOperand(index));
  if (!engine.isTokenIds(type) && !engine.isActivation(type))
    return std::nullopt;
  const DimFactors &factors = rule.getOperandFactors()[index].front();
  if (factors.empty() || !cast<ShardingRuleOpInterface>(op).isSplittableFactor(
                             rule, factors.front()))
    return std::nullopt;
  return factors.front();
}

/// `stored`, a parameter's layout, split further over grid axis `axis`
/// (`size` ranks): along a dimension it leaves whole if one divides, else
/// (unless `wholeOnly`) after a dimension's own axes; unchanged when no
/// dimension divides.
Layout splitStorageFurther(Layout stored, RankedTensorType type, int64_t axis,
                           int64_t size, const ShardQueries &engine,
                           bool wholeOnly = false) {
  for (bool whole : {true, false})
    for (auto [d, axes] : llvm::enumerate(stored.split)) {
      if (axes.empty() != whole || (wholeOnly && !whole) ||
          type.getDimSize(d) % (engine.shardsOf(axes) * size) != 0)
        continue;
      axes.push_back(axis);
      return stored;
    }
  return stored;
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
  checkTokens(int64_t batch, int64_t seq, bool generation,
              function_ref<InFlightDiagnostic()> error) const override {
    // Sequence parallelism that cannot apply is an error, not a no-op.
    if (seqParallel && seq % ranks != 0 && !generation)
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
  TwoDScheme(ArrayRef<int64_t> grid, StringRef name, int64_t firstAxis)
      : name(name.str()), rows(grid[0]), columns(grid[1]),
        firstAxis(firstAxis) {
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
                               " columns of the grid (axis " +
                               std::to_string(firstAxis + kColumnAxis) + ")",
                           name, error);
  }

  std::string whyTokensNeeded() const override {
    return "mode=" + name +
           " needs a function with a tp.input = \"tokens\" argument to "
           "find the batch it splits";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq, bool generation,
              function_ref<InFlightDiagnostic()> error) const override {
    int64_t shards = rows * depth;
    if (batch % shards == 0)
      return success();
    InFlightDiagnostic diag = error();
    diag << "tp-shard: mode=" << name << " splits the batch (size " << batch
         << ") over "
         << (depth > 1 ? "the rows and depth of the grid (axes "
                       : "the rows of the grid (axis ")
         << firstAxis + kRowAxis;
    if (depth > 1)
      diag << " and " << firstAxis + kDepthAxis;
    return diag << ", " << shards << " ranks), which do not divide it";
  }

  FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const override {
    SmallVector<Claim> claims;
    // The batch stays split over the rows (and depth) through every op:
    // token ids and targets where they enter, activations everywhere
    // (including where a weight gradient contracts it).
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      std::optional<int64_t> batch = splittableBatchFactor(op, rule, i, engine);
      if (!batch || llvm::any_of(claims, [&](const Claim &claim) {
            return claim.factor == *batch;
          }))
        continue;
      claims.push_back({*batch, batchAxes});
    }
    // Norms see whole features: the column-parallel linear after one needs
    // its input gathered over the columns anyway, and gathering before the
    // norm keeps that linear column-parallel (3D splits them instead).
    if (isa<SplitStatisticsOpInterface>(op))
      claims.push_back({rule.getOperandFactors()[0].back().front(), {}});
    // Megatron on the columns.
    if (failed(claimMegatronWeights(
            op, rule, operandClaims, engine, {kColumnAxis}, columns,
            "the " + std::to_string(columns) + " columns of the grid (axis " +
                std::to_string(firstAxis + kColumnAxis) + ")",
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
  /// The module grid's number of this scheme's axis 0, for messages.
  int64_t firstAxis;
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
  ThreeDScheme(ArrayRef<int64_t> grid, int64_t firstAxis)
      : q(grid[0]), firstAxis(firstAxis) {}

  LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const override {
    return checkHeadCounts(module, q,
                           "the " + std::to_string(q) + " ranks of grid axis " +
                               std::to_string(firstAxis + 1) + " or " +
                               std::to_string(firstAxis + 2),
                           "3d", error);
  }

  std::string whyTokensNeeded() const override {
    return "mode=3d needs a function with a tp.input = \"tokens\" argument "
           "to find the batch it splits";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq, bool generation,
              function_ref<InFlightDiagnostic()> error) const override {
    if (batch % (q * q) != 0)
      return error() << "tp-shard: mode=3d splits the batch (size " << batch
                     << ") over grid axis " << firstAxis << " and one of axes "
                     << firstAxis + 1 << " and " << firstAxis + 2 << " ("
                     << q * q << " ranks), which do not divide it";
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
               << " ranks of grid axis " << firstAxis + axis;
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
    return splitStorageFurther(use, type, kWeightAxis, q, engine);
  }

  double parameterCostFactor() const override { return 1.0; }

private:
  static constexpr int64_t kWeightAxis = 0;
  int64_t q;
  /// The module grid's number of this scheme's axis 0, for messages.
  int64_t firstAxis;
};

/// Data parallelism on grid axis 0 around a tensor-parallel scheme on the
/// axes after it. The data axis splits the batch of every activation and of
/// the token ids, before (as the major part of) whatever the scheme splits it
/// over; nothing else. Weight gradients, contracting the batch, are then
/// pending sums over it, which the engine reduces into the parameter's
/// layout where AdamW consumes them: an all-reduce, or with the optimizer
/// state sharded (ZeRO-1) a reduce-scatter onto parameters stored split over
/// the data axis, which are all-gathered where used. Axis 0 is the slowest
/// of the row-major rank order, so each replica's tensor-parallel group is
/// a block of consecutive ranks (one node, where it fits).
///
/// The wrapped scheme sees its own grid: this policy renumbers axes both
/// ways and hides the data axis from it.
class DataParallelScheme : public ShardScheme {
public:
  /// `inTime`: the replicas are micro-batches run one after another.
  DataParallelScheme(std::unique_ptr<ShardScheme> tensorScheme,
                     ArrayRef<int64_t> tensorGrid, int64_t replicas,
                     bool shardOptimizer, bool shardWholeDimsOnly,
                     bool inTime = false)
      : tensorScheme(std::move(tensorScheme)), tensorGrid(tensorGrid),
        replicas(replicas), shardOptimizer(shardOptimizer),
        shardWholeDimsOnly(shardWholeDimsOnly), inTime(inTime) {}

  LogicalResult
  checkModel(ModuleOp module,
             function_ref<InFlightDiagnostic()> error) const override {
    return tensorScheme->checkModel(module, error);
  }

  std::string whyTokensNeeded() const override {
    std::string why = tensorScheme->whyTokensNeeded();
    if (!why.empty())
      return why;
    return "dp=" + std::to_string(replicas) +
           " needs a function with a tp.input = \"tokens\" argument to find "
           "the batch it splits";
  }

  LogicalResult
  checkTokens(int64_t batch, int64_t seq, bool generation,
              function_ref<InFlightDiagnostic()> error) const override {
    if (batch % replicas != 0)
      return error() << "tp-shard: " << (inTime ? "microbatches=" : "dp=")
                     << replicas << " splits the batch (size " << batch
                     << ") over grid axis 0, which does not divide it";
    // The tensor-parallel scheme splits each replica's share.
    return tensorScheme->checkTokens(batch / replicas, seq, generation, error);
  }

  FailureOr<SmallVector<Claim>>
  claims(Operation *op, const ShardingRule &rule,
         ArrayRef<std::optional<SmallVector<Claim>>> operandClaims,
         const ShardQueries &engine) const override {
    SmallVector<std::optional<SmallVector<Claim>>> tensorOperandClaims;
    for (const std::optional<SmallVector<Claim>> &claims : operandClaims) {
      if (!claims) {
        tensorOperandClaims.push_back(std::nullopt);
        continue;
      }
      SmallVector<Claim> inner;
      for (const Claim &claim : *claims)
        if (Axes axes = toTensorAxes(claim.axes); !axes.empty())
          inner.push_back({claim.factor, std::move(axes)});
      tensorOperandClaims.push_back(std::move(inner));
    }
    TensorQueries queries(engine, tensorGrid);
    FailureOr<SmallVector<Claim>> claims =
        tensorScheme->claims(op, rule, tensorOperandClaims, queries);
    if (failed(claims))
      return failure();
    // The batch the data axis splits stays split by it: a claim on a factor
    // an operand splits over the data axis keeps it first (the scheme's
    // claims overrule the operands'). Parameters stored split over it
    // (ZeRO-1) make no such claim: the engine drops reserved axes from them.
    auto operandAxes = [&](int64_t factor) -> std::optional<Axes> {
      for (const std::optional<SmallVector<Claim>> &claims : operandClaims)
        if (claims)
          for (const Claim &claim : *claims)
            if (claim.factor == factor &&
                llvm::is_contained(claim.axes, kDataAxis))
              return claim.axes;
      return std::nullopt;
    };
    for (Claim &claim : *claims) {
      claim.axes = toGridAxes(claim.axes);
      if (operandAxes(claim.factor))
        claim.axes.insert(claim.axes.begin(), kDataAxis);
    }
    // The batch of token ids and activations over the data axis, unless the
    // scheme claims it (above) or an operand splits it over more axes than
    // the data axis, as 3D does between linears: that split then stands.
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      std::optional<int64_t> batch = splittableBatchFactor(op, rule, i, engine);
      if (!batch)
        continue;
      std::optional<Axes> split = operandAxes(*batch);
      if (split && split->size() > 1)
        continue;
      prependDataAxis(*claims, *batch);
    }
    return claims;
  }

  SmallVector<Claim>
  resolutionClaims(Operation *op, const ShardingRule &rule, unsigned index,
                   const Layout &layout,
                   const ShardQueries &engine) const override {
    TensorQueries queries(engine, tensorGrid);
    SmallVector<Claim> claims = tensorScheme->resolutionClaims(
        op, rule, index, renumbered(layout, toTensorAxes), queries);
    for (Claim &claim : claims)
      claim.axes = toGridAxes(claim.axes);
    // A value whose batch the data axis splits keeps it so.
    const DimFactors &leading = rule.getOperandFactors()[index].front();
    if (!claims.empty() && !layout.split.empty() &&
        llvm::is_contained(layout.split.front(), kDataAxis) && !leading.empty())
      for (Claim &claim : claims)
        if (claim.factor == leading.front())
          claim.axes.insert(claim.axes.begin(), kDataAxis);
    return claims;
  }

  Layout storageLayout(Value param, const Layout &use,
                       const ShardQueries &engine) const override {
    // Already a stored layout (an optimizer moment takes its parameter's).
    if (llvm::is_contained(use.usedAxes(), kDataAxis))
      return use;
    TensorQueries queries(engine, tensorGrid);
    Layout stored =
        renumbered(tensorScheme->storageLayout(
                       param, renumbered(use, toTensorAxes), queries),
                   toGridAxes);
    if (!shardOptimizer)
      return stored;
    // ZeRO-1: also split over the data axis.
    return splitStorageFurther(stored, tensorType(param), kDataAxis, replicas,
                               engine, shardWholeDimsOnly);
  }

  Axes getSumOnlyAxes() const override {
    Axes axes = toGridAxes(tensorScheme->getSumOnlyAxes());
    if (inTime)
      axes.insert(axes.begin(), kDataAxis);
    return axes;
  }

  Axes getReservedAxes() const override {
    Axes reserved = toGridAxes(tensorScheme->getReservedAxes());
    reserved.insert(reserved.begin(), kDataAxis);
    return reserved;
  }

  double parameterCostFactor() const override {
    return tensorScheme->parameterCostFactor();
  }

private:
  static constexpr int64_t kDataAxis = 0;

  /// The engine's answers in the wrapped scheme's axis numbers.
  class TensorQueries : public ShardQueries {
  public:
    TensorQueries(const ShardQueries &engine, ArrayRef<int64_t> tensorGrid)
        : engine(engine), tensorGrid(tensorGrid) {}
    ArrayRef<int64_t> getGridShape() const override { return tensorGrid; }
    int64_t shardsOf(ArrayRef<int64_t> axes) const override {
      return engine.shardsOf(toGridAxes(axes));
    }
    bool isUndecided(Value value) const override {
      return engine.isUndecided(value);
    }
    std::string describe(Value value) const override {
      return engine.describe(value);
    }
    bool isActivation(RankedTensorType type) const override {
      return engine.isActivation(type);
    }
    bool isTokenMajor(RankedTensorType type) const override {
      return engine.isTokenMajor(type);
    }
    bool isTokenIds(RankedTensorType type) const override {
      return engine.isTokenIds(type);
    }
    int64_t getModelRank(BlockArgument param) const override {
      return engine.getModelRank(param);
    }

  private:
    const ShardQueries &engine;
    ArrayRef<int64_t> tensorGrid;
  };

  static Axes toGridAxes(ArrayRef<int64_t> axes) {
    Axes grid;
    for (int64_t axis : axes)
      grid.push_back(axis + 1);
    return grid;
  }
  static Axes toTensorAxes(ArrayRef<int64_t> axes) {
    Axes tensor;
    for (int64_t axis : axes)
      if (axis != kDataAxis)
        tensor.push_back(axis - 1);
    return tensor;
  }
  /// `layout` with every axis list renumbered by `renumber`.
  static Layout renumbered(const Layout &layout,
                           Axes (*renumber)(ArrayRef<int64_t>)) {
    Layout result;
    for (const auto &axes : layout.split)
      result.split.push_back(renumber(axes));
    result.partial = renumber(layout.partial);
    return result;
  }
  /// Makes the data axis the major part of `factor`'s split in `claims`.
  static void prependDataAxis(SmallVector<Claim> &claims, int64_t factor) {
    for (Claim &claim : claims)
      if (claim.factor == factor) {
        if (!llvm::is_contained(claim.axes, kDataAxis))
          claim.axes.insert(claim.axes.begin(), kDataAxis);
        return;
      }
    claims.push_back({factor, {kDataAxis}});
  }

  std::unique_ptr<ShardScheme> tensorScheme;
  SmallVector<int64_t> tensorGrid;
  int64_t replicas;
  bool shardOptimizer, shardWholeDimsOnly, inTime;
};

/// The scheme for `mode` on its own axes, numbered from `firstAxis` in the
/// module's grid (in messages).
std::unique_ptr<ShardScheme> makeTensorScheme(ParallelMode mode,
                                              ArrayRef<int64_t> grid,
                                              bool seqParallel,
                                              int64_t firstAxis) {
  switch (mode) {
  case ParallelMode::OneD:
    return std::make_unique<OneDScheme>(grid, seqParallel);
  case ParallelMode::TwoD:
  case ParallelMode::TwoHalfD:
    return std::make_unique<TwoDScheme>(grid, stringifyParallelMode(mode),
                                        firstAxis);
  case ParallelMode::ThreeD:
    return std::make_unique<ThreeDScheme>(grid, firstAxis);
  case ParallelMode::None:
  case ParallelMode::Auto:
    break;
  }
  llvm_unreachable("tp-shard has no scheme for mode=none or mode=auto");
}

} // namespace

std::unique_ptr<ShardScheme>
mlir::tp::makeShardScheme(ParallelMode mode, ArrayRef<int64_t> tensorGrid,
                          bool seqParallel, int64_t dataReplicas,
                          bool shardOptimizer, bool shardWholeDimsOnly,
                          int64_t microbatches) {
  const int64_t leadingAxes =
      (dataReplicas > 1 ? 1 : 0) + (microbatches > 0 ? 1 : 0);
  std::unique_ptr<ShardScheme> scheme =
      makeTensorScheme(mode, tensorGrid, seqParallel, leadingAxes);
  SmallVector<int64_t> innerGrid(tensorGrid);
  if (dataReplicas > 1) {
    scheme = std::make_unique<DataParallelScheme>(std::move(scheme), innerGrid,
                                                  dataReplicas, shardOptimizer,
                                                  shardWholeDimsOnly);
    innerGrid.insert(innerGrid.begin(), dataReplicas);
  }
  // Micro-batches are data parallelism in time: the same policy on an axis
  // in front of the others, with no optimizer state split over it.
  if (microbatches > 0)
    scheme = std::make_unique<DataParallelScheme>(
        std::move(scheme), innerGrid, microbatches, /*shardOptimizer=*/false,
        shardWholeDimsOnly, /*inTime=*/true);
  return scheme;
}
