//===- Traffic.cpp - what each collective of a program moves --------------===//

#include "tpc/Simulate/Traffic.h"

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tp;

double mlir::tp::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return double(tensor.getNumElements()) *
         double((tensor.getElementTypeBitWidth() + 7) / 8);
}

namespace {
/// Bytes one rank holds of `type` under its layout.
double localBytes(RankedTensorType type, ArrayRef<int64_t> gridShape) {
  double bytes = tensorBytes(type);
  if (DistAttr dist = getDistLayout(type))
    for (int64_t d = 0; d < type.getRank(); ++d)
      for (int64_t axis : dist.getSplitAxes(d))
        bytes /= double(gridShape[axis]);
  return bytes;
}

int64_t groupSizeOf(ArrayRef<int64_t> axes, ArrayRef<int64_t> gridShape) {
  int64_t n = 1;
  for (int64_t axis : axes)
    n *= gridShape[axis];
  return n;
}
} // namespace

SmallVector<int64_t> mlir::tp::gridShapeOf(Operation *module) {
  SmallVector<int64_t> shape = {1};
  module->walk([&](GridOp grid) {
    shape.assign(grid.getShape().begin(), grid.getShape().end());
    return WalkResult::interrupt();
  });
  return shape;
}

FailureOr<SmallVector<CollectiveTraffic>>
mlir::tp::collectiveTraffic(Operation *op, ArrayRef<int64_t> gridShape) {
  SmallVector<CollectiveTraffic> traffic;
  // Kernels that gather by themselves: a vocabulary-parallel cross-entropy's
  // per-token statistics, a normalisation's per-row statistics of split
  // features.
  FailureOr<SmallVector<int64_t>> kernelAxes = SmallVector<int64_t>();
  SmallVector<int64_t> gathers;
  if (auto vocabParallel = dyn_cast<VocabParallelOpInterface>(op)) {
    kernelAxes = vocabParallel.getVocabParallelAxes();
    gathers = vocabParallel.getKernelGathers();
  } else if (auto splitStats = dyn_cast<SplitStatisticsOpInterface>(op)) {
    kernelAxes = splitStats.getFeatureAxes();
    gathers = splitStats.getKernelGathers();
  }
  if (failed(kernelAxes))
    return failure();
  // In the per-rank program the axes are attributes (tp-partition).
  bool perRank = false;
  for (StringRef name : {TPDialect::VocabAxesAttrHelper::getNameStr(),
                         TPDialect::FeatureAxesAttrHelper::getNameStr()})
    if (auto axes = op->getAttrOfType<DenseI64ArrayAttr>(name);
        axes && kernelAxes->empty()) {
      kernelAxes = SmallVector<int64_t>(axes.asArrayRef());
      perRank = true;
    }
  if (!gathers.empty() && !kernelAxes->empty()) {
    auto rows = cast<RankedTensorType>(op->getOperand(0).getType());
    const int64_t n = groupSizeOf(*kernelAxes, gridShape);
    // Rows of this rank's operand: its elements over its features.
    double localFeatures = double(rows.getShape().back());
    if (!perRank)
      localFeatures /= double(n);
    const double localRows = localBytes(rows, gridShape) /
                             (rows.getElementTypeBitWidth() / 8) /
                             localFeatures;
    for (int64_t floats : gathers)
      traffic.push_back(
          {"all_gather", *kernelAxes, n,
           double(n - 1) * double(floats) * localRows * sizeof(float), n - 1});
    return traffic;
  }
  if (auto send = dyn_cast<SendStartOp>(op)) {
    // A pipeline transfer: this rank's shard, to one rank of another stage.
    traffic.push_back(
        {"send",
         {int64_t(send.getGridAxis())},
         2,
         localBytes(cast<RankedTensorType>(send.getInput().getType()),
                    gridShape),
         1});
    return traffic;
  }
  auto axesAttr = op->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
  if (!axesAttr)
    return traffic;
  SmallVector<int64_t> axes(axesAttr.asArrayRef());
  const int64_t n = groupSizeOf(axes, gridShape);
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  const double fraction = double(n - 1) / double(n);
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](AllReduceOp) {
        traffic.push_back({"all_reduce", axes, n,
                           2 * fraction * localBytes(in, gridShape),
                           2 * (n - 1)});
      })
      .Case([&](AllGatherOp) {
        traffic.push_back({"all_gather", axes, n,
                           fraction * localBytes(out, gridShape), n - 1});
      })
      .Case([&](ReduceScatterOp) {
        traffic.push_back({"reduce_scatter", axes, n,
                           fraction * localBytes(in, gridShape), n - 1});
      })
      .Case([&](RingShiftStartOp) {
        // One block to the next rank (none over one rank).
        traffic.push_back({"ring_shift", axes, n,
                           n > 1 ? localBytes(in, gridShape) : 0.0,
                           n > 1 ? 1 : 0});
      })
      .Case([&](AllToAllOp) {
        traffic.push_back({"all_to_all", axes, n,
                           fraction * localBytes(in, gridShape), n - 1});
      });
  return traffic;
}
