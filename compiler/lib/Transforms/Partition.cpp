//===- Partition.cpp - global view -> per-rank program --------------------===//

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

bool isSplit(Type type) {
  DistAttr dist = getDistLayout(type);
  return dist && llvm::any_of(dist.getSplit(), [](DenseI64ArrayAttr axes) {
           return !axes.empty();
         });
}

bool isPartial(Type type) {
  DistAttr dist = getDistLayout(type);
  return dist && !dist.getPartial().empty();
}

SmallVector<int64_t> splitAxesOf(Type type, int64_t dim) {
  DistAttr dist = getDistLayout(type);
  return dist ? SmallVector<int64_t>(dist.getSplitAxes(dim))
              : SmallVector<int64_t>();
}

/// A vocabulary-parallel embedding (Megatron's VocabParallelEmbedding): the
/// table's rows are split over some grid axes and each rank looks up only the
/// ids in its block, leaving zeros elsewhere, so the result is a partial sum
/// over exactly those axes. Returns the vocabulary axes (empty when the table
/// is not split along the vocabulary) or failure with a diagnostic when the
/// layouts do not describe that.
FailureOr<SmallVector<int64_t>> vocabParallelAxes(EmbeddingOp op) {
  Type table = op.getTable().getType(), result = op.getResult().getType();
  SmallVector<int64_t> vocab = splitAxesOf(table, 0);
  if (vocab.empty())
    return vocab;
  DistAttr resultDist = getDistLayout(result);
  SmallVector<int64_t> partial =
      resultDist ? SmallVector<int64_t>(resultDist.getPartial().asArrayRef())
                 : SmallVector<int64_t>();
  SmallVector<int64_t> sortedVocab = vocab;
  llvm::sort(sortedVocab);
  llvm::sort(partial);
  int64_t resultRank = cast<RankedTensorType>(result).getRank();
  bool resultSplitBeforeHidden = false;
  for (int64_t d = 0; d + 1 < resultRank; ++d)
    resultSplitBeforeHidden |= !splitAxesOf(result, d).empty();
  if (partial != sortedVocab || isSplit(op.getIds().getType()) ||
      resultSplitBeforeHidden ||
      splitAxesOf(table, 1) != splitAxesOf(result, resultRank - 1)) {
    op.emitOpError() << "tp-partition: a vocabulary-split embedding needs "
                        "replicated ids and a result that is partial over "
                        "exactly the table's vocabulary axes";
    return failure();
  }
  return vocab;
}

/// A vocabulary-parallel cross-entropy (Megatron's
/// vocab_parallel_cross_entropy) or its gradient: the logits' last dim is
/// split over some grid axes; each rank reduces its columns to per-token
/// statistics and one all-gather of them gives every rank the whole loss
/// (or the softmax of its own columns). Returns the vocabulary axes (empty
/// when the logits are not split along the vocabulary) or failure with a
/// diagnostic.
FailureOr<SmallVector<int64_t>>
crossEntropyVocabAxes(Operation *op, Value logits, Value targets) {
  int64_t rank = cast<RankedTensorType>(logits.getType()).getRank();
  SmallVector<int64_t> vocab = splitAxesOf(logits.getType(), rank - 1);
  if (vocab.empty())
    return vocab;
  bool tokensSplit = false;
  for (int64_t d = 0; d + 1 < rank; ++d)
    tokensSplit |= !splitAxesOf(logits.getType(), d).empty();
  Type result = op->getResult(0).getType();
  bool resultMatches = isa<CrossEntropyOp>(op) ? !getDistLayout(result)
                                               : result == logits.getType();
  if (tokensSplit || isPartial(logits.getType()) ||
      isSplit(targets.getType()) || !resultMatches) {
    op->emitOpError() << "tp-partition: a vocabulary-split " << op->getName()
                      << " needs logits split only along the vocabulary, "
                         "replicated targets and a result laid out like a "
                         "whole loss or the logits";
    return failure();
  }
  return vocab;
}

/// A vocabulary-parallel embedding gradient: the table gradient's rows are
/// split and each rank scatters only the ids in its block.
FailureOr<SmallVector<int64_t>> vocabParallelAxes(EmbeddingGradOp op) {
  Type result = op.getResult().getType();
  SmallVector<int64_t> vocab = splitAxesOf(result, 0);
  if (vocab.empty())
    return vocab;
  if (isSplit(op.getIds().getType()) || isPartial(result) ||
      isSplit(op.getResultGrad().getType()) ||
      isPartial(op.getResultGrad().getType())) {
    op.emitOpError() << "tp-partition: a vocabulary-split embedding_grad "
                        "needs replicated ids and output gradient";
    return failure();
  }
  return vocab;
}

/// The vocabulary axes of a vocabulary-parallel op (empty for any other op
/// or layout), or failure with a diagnostic.
FailureOr<SmallVector<int64_t>> vocabParallelAxes(Operation *op) {
  if (auto embedding = dyn_cast<EmbeddingOp>(op))
    return vocabParallelAxes(embedding);
  if (auto embeddingGrad = dyn_cast<EmbeddingGradOp>(op))
    return vocabParallelAxes(embeddingGrad);
  if (auto crossEntropy = dyn_cast<CrossEntropyOp>(op))
    return crossEntropyVocabAxes(op, crossEntropy.getLogits(),
                                 crossEntropy.getTargets());
  if (auto crossEntropyGrad = dyn_cast<CrossEntropyGradOp>(op))
    return crossEntropyVocabAxes(op, crossEntropyGrad.getLogits(),
                                 crossEntropyGrad.getTargets());
  return SmallVector<int64_t>();
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
    if (failed(vocabParallelAxes(op)))
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
    bool partialIn = llvm::any_of(op->getOperandTypes(), isPartial);
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
  // The layouts vanish below; vocabulary-parallel ops keep their axes.
  module.walk([&](Operation *op) {
    SmallVector<int64_t> vocab = *vocabParallelAxes(op);
    if (!vocab.empty())
      op->setAttr(TPDialect::VocabAxesAttrHelper::getNameStr(),
                  DenseI64ArrayAttr::get(op->getContext(), vocab));
  });
  // Parameters keep their layout for the plan: the runtime loads and
  // initialises each rank's block of them.
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (DistAttr dist = getDistLayout(func.getArgumentTypes()[i]))
        if (func.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()))
          func.setArgAttr(i, TPDialect::LayoutAttrHelper::getNameStr(), dist);

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
