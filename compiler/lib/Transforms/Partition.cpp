//===- Partition.cpp - global view -> per-rank program --------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
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

/// The local type of `type` on one rank of `grid`, or failure (with a
/// diagnostic at `loc`) if the layout needs communication or is uneven.
FailureOr<Type> localType(Type type, ArrayRef<int64_t> gridShape,
                          Location loc) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  DistAttr dist = getDistLayout(type);
  if (!dist)
    return type;
  if (!dist.getPartial().empty())
    return emitError(loc) << "tp-partition: " << type
                          << " is a pending partial sum; insert its "
                             "reduction before partitioning";
  SmallVector<int64_t> shape(tensor.getShape());
  for (auto [dim, size] : llvm::enumerate(shape)) {
    if (!dist.getDimSizes(dim).empty())
      return emitError(loc) << "tp-partition: " << type
                            << " is split unevenly, which the per-rank "
                               "program cannot express yet";
    int64_t shards = 1;
    for (int64_t axis : dist.getSplitAxes(dim))
      shards *= gridShape[axis];
    size /= shards;
  }
  return RankedTensorType::get(shape, tensor.getElementType());
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

  WalkResult walk = module.walk([&](Operation *op) -> WalkResult {
    if (isa<RedistributeOp>(op)) {
      op->emitOpError() << "tp-partition: lower layout changes to "
                           "collectives before partitioning";
      return WalkResult::interrupt();
    }
    for (Value result : op->getResults()) {
      FailureOr<Type> local =
          localType(result.getType(), gridShape, op->getLoc());
      if (failed(local))
        return WalkResult::interrupt();
      result.setType(*local);
    }
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments()) {
          FailureOr<Type> local =
              localType(arg.getType(), gridShape, arg.getLoc());
          if (failed(local))
            return WalkResult::interrupt();
          arg.setType(*local);
        }
    if (auto func = dyn_cast<func::FuncOp>(op)) {
      SmallVector<Type> inputs, results;
      for (Type type : func.getArgumentTypes()) {
        FailureOr<Type> local = localType(type, gridShape, func.getLoc());
        if (failed(local))
          return WalkResult::interrupt();
        inputs.push_back(*local);
      }
      for (Type type : func.getResultTypes()) {
        FailureOr<Type> local = localType(type, gridShape, func.getLoc());
        if (failed(local))
          return WalkResult::interrupt();
        results.push_back(*local);
      }
      func.setFunctionType(
          FunctionType::get(func.getContext(), inputs, results));
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return signalPassFailure();
  for (GridOp grid : grids)
    grid.erase();
  module->setAttr("tp.grid_shape",
                  Builder(module.getContext()).getDenseI64ArrayAttr(gridShape));
}
