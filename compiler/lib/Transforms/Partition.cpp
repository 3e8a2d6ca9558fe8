//===- Partition.cpp - global view -> per-rank program --------------------===//

#include "FunctionAttrs.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPPARTITION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
struct TPPartition : public tp::impl::TPPartitionBase<TPPartition> {
  void runOnOperation() override;
};

/// The local type of `type`, laid out by `dist` over a grid of `gridShape`:
/// each split dimension divided by its number of shards, the layout dropped.
RankedTensorType localType(RankedTensorType type, DistAttr dist,
                           ArrayRef<int64_t> gridShape) {
  SmallVector<int64_t> shape(type.getShape());
  for (auto [dim, size] : llvm::enumerate(shape))
    for (int64_t axis : dist.getSplitAxes(dim))
      size /= gridShape[axis];
  return RankedTensorType::get(shape, type.getElementType());
}

/// Uneven layouts have no per-rank program yet: reports the first.
LogicalResult checkEvenLayouts(ModuleOp module) {
  auto uneven = [](Type type) {
    DistAttr dist = getDistLayout(type);
    return dist && !dist.getSizes().empty();
  };
  auto report = [](Location loc, Type type) {
    return emitError(loc) << "tp-partition: " << type
                          << " is split unevenly, which the per-rank "
                             "program cannot express yet";
  };
  WalkResult walk = module.walk([&](Operation *op) -> WalkResult {
    for (Value result : op->getResults())
      if (uneven(result.getType()))
        return report(op->getLoc(), result.getType()), WalkResult::interrupt();
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          if (uneven(arg.getType()))
            return report(arg.getLoc(), arg.getType()), WalkResult::interrupt();
    if (auto func = dyn_cast<func::FuncOp>(op))
      for (Type type : func.getResultTypes())
        if (uneven(type))
          return report(func.getLoc(), type), WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Checks that every op can run on its local shards: every split dimension
/// splits a factor the op's kernel supports splitting
/// (ShardingRuleOpInterface::isSplittableFactor; vocabulary-parallel ops get
/// their axes), and pending partial sums only flow through linear ops into a
/// reduction.
LogicalResult checkShardedOps(ModuleOp module) {
  WalkResult walk = module.walk([&](Operation *op) -> WalkResult {
    if (isa<RedistributeOp>(op)) {
      op->emitOpError() << "tp-partition: lower layout changes to "
                           "collectives before partitioning";
      return WalkResult::interrupt();
    }
    auto ruled = dyn_cast<ShardingRuleOpInterface>(op);
    if (!ruled)
      return WalkResult::advance();
    if (auto vocabParallel = dyn_cast<VocabParallelOpInterface>(op))
      if (failed(vocabParallel.getVocabParallelAxes()))
        return WalkResult::interrupt();
    if (auto splitStats = dyn_cast<SplitStatisticsOpInterface>(op))
      if (failed(splitStats.getFeatureAxes()))
        return WalkResult::interrupt();
    ShardingRule rule = ruled.getShardingRule();
    auto checkSplits = [&](TypeRange types, ArrayRef<TensorFactors> factors,
                           StringRef what) -> bool {
      for (auto [index, entry] :
           llvm::enumerate(llvm::zip_equal(types, factors))) {
        auto [type, dims] = entry;
        DistAttr dist = getDistLayout(type);
        if (!dist)
          continue;
        for (auto [d, dimFactors] : llvm::enumerate(dims)) {
          if (dist.getSplitAxes(d).empty())
            continue;
          if (dimFactors.empty() ||
              !ruled.isSplittableFactor(rule, dimFactors.front())) {
            op->emitOpError()
                << "tp-partition: this op cannot run with dimension " << d
                << " of " << what << " #" << index << " split";
            return false;
          }
        }
      }
      return true;
    };
    if (!checkSplits(op->getOperandTypes(), rule.getOperandFactors(),
                     "operand") ||
        !checkSplits(op->getResultTypes(), rule.getResultFactors(), "result"))
      return WalkResult::interrupt();
    bool partialIn = llvm::any_of(op->getOperandTypes(), isPartialLayout);
    bool passes = op->hasTrait<OpTrait::tp::PassesPartialSums>();
    if (partialIn && !passes &&
        !op->hasTrait<OpTrait::tp::ReducesPartialSums>()) {
      op->emitOpError() << "tp-partition: consumes a pending partial sum but "
                           "is not linear; reduce it first";
      return WalkResult::interrupt();
    }
    auto partialOf = [](Type type) -> ArrayRef<int64_t> {
      DistAttr dist = getDistLayout(type);
      return dist ? dist.getPartial().asArrayRef() : ArrayRef<int64_t>();
    };
    if (partialIn && passes &&
        llvm::any_of(op->getOperandTypes(), [&](Type type) {
          return partialOf(type) != partialOf(op->getOperand(0).getType());
        })) {
      op->emitOpError() << "tp-partition: adds a partial sum to a value that "
                           "is not partial over the same axes";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}
} // namespace

void TPPartition::runOnOperation() {
  ModuleOp module = getOperation();
  SmallVector<GridOp> grids = llvm::to_vector(module.getOps<GridOp>());
  if (grids.size() > 1) {
    grids[1].emitOpError() << "tp-partition: a module holds one grid";
    return signalPassFailure();
  }
  SmallVector<int64_t> gridShape = {1};
  if (!grids.empty())
    gridShape.assign(grids.front().getShape().begin(),
                     grids.front().getShape().end());

  if (failed(checkShardedOps(module)))
    return signalPassFailure();
  // The layouts vanish below; vocabulary-parallel ops and normalisations of
  // split features keep their axes.
  module.walk([&](VocabParallelOpInterface op) {
    SmallVector<int64_t> vocab = *op.getVocabParallelAxes();
    if (!vocab.empty())
      op->setAttr(TPDialect::VocabAxesAttrHelper::getNameStr(),
                  DenseI64ArrayAttr::get(op->getContext(), vocab));
  });
  module.walk([&](SplitStatisticsOpInterface op) {
    SmallVector<int64_t> features = *op.getFeatureAxes();
    if (!features.empty())
      op->setAttr(TPDialect::FeatureAxesAttrHelper::getNameStr(),
                  DenseI64ArrayAttr::get(op->getContext(), features));
  });
  // A mean over split tokens: each shard's kernel averages its own tokens,
  // a 1/shards share of the whole mean.
  module.walk([&](TokenMeanOpInterface op) {
    if (int64_t shards = op.getTokenShards(gridShape); shards > 1) {
      OpBuilder builder(op);
      op.scaleTokenMean(builder, 1.0 / double(shards));
    }
  });
  // Parameters and inputs (a batch split) keep their layout for the plan:
  // the runtime loads, initialises or feeds each rank's block of them.
  for (auto func : module.getOps<func::FuncOp>()) {
    SmallVector<Attribute> layouts(func.getNumArguments());
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (DistAttr dist = getDistLayout(func.getArgumentTypes()[i]))
        if (func.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()) ||
            func.getArgAttr(i, TPDialect::InputAttrHelper::getNameStr()))
          layouts[i] = dist;
    setArgAttrsInBulk(func, TPDialect::LayoutAttrHelper::getNameStr(), layouts);
  }

  // Every type that carries a layout, wherever it appears (results, block
  // arguments, function signatures), becomes its local shard. The grid
  // stays: collectives and parameter layouts name it.
  if (failed(checkEvenLayouts(module)))
    return signalPassFailure();
  AttrTypeReplacer replacer;
  replacer.addReplacement([&](RankedTensorType type) -> std::optional<Type> {
    DistAttr dist = getDistLayout(type);
    if (!dist)
      return std::nullopt;
    return localType(type, dist, gridShape);
  });
  replacer.recursivelyReplaceElementsIn(module, /*replaceAttrs=*/true,
                                        /*replaceLocs=*/false,
                                        /*replaceTypes=*/true);
}
