//===- StepSimulator.cpp - a program's run time on a cluster --------------===//

#include "tpc/Simulate/StepSimulator.h"

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Simulate/Traffic.h"

#include <functional>

using namespace mlir;
using namespace mlir::tp;

namespace {
double bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return double(tensor.getNumElements()) *
         double((tensor.getElementTypeBitWidth() + 7) / 8);
}

/// The global ranks of `rank`'s group over `axes` of a row-major grid.
SmallVector<int64_t> groupRanks(ArrayRef<int64_t> gridShape, int64_t rank,
                                ArrayRef<int64_t> axes) {
  SmallVector<int64_t> coords(gridShape.size());
  for (size_t d = gridShape.size(), rest = size_t(rank); d-- > 0;) {
    coords[d] = int64_t(rest) % gridShape[d];
    rest /= size_t(gridShape[d]);
  }
  SmallVector<int64_t> ranks;
  std::function<void(size_t)> visit = [&](size_t i) {
    if (i == axes.size()) {
      int64_t r = 0;
      for (size_t d = 0; d < gridShape.size(); ++d)
        r = r * gridShape[d] + coords[d];
      ranks.push_back(r);
      return;
    }
    const int64_t axis = axes[i], saved = coords[axis];
    for (int64_t c = 0; c < gridShape[axis]; ++c) {
      coords[axis] = c;
      visit(i + 1);
    }
    coords[axis] = saved;
  };
  visit(0);
  return ranks;
}
} // namespace

KernelCost mlir::tp::kernelCost(Operation &op, const DeviceModel &device) {
  KernelCost cost;
  if (auto products = dyn_cast<MatrixProductOpInterface>(op)) {
    cost.productFlops = products.getProductFlops();
    cost.seconds = device.productSeconds(cost.productFlops,
                                         products.getOperandPrecision());
    return cost;
  }
  if (auto alias = dyn_cast<StorageAliasOpInterface>(op);
      alias && alias.alwaysSharesStorage())
    return cost; // a view of its operand: nothing runs
  // Any other kernel streams its operands and results once.
  double bytes = 0;
  for (Type type : op.getOperandTypes())
    bytes += bytesOf(type);
  for (Type type : op.getResultTypes())
    bytes += bytesOf(type);
  cost.seconds = device.streamSeconds(bytes);
  return cost;
}

FailureOr<double> mlir::tp::predictOpSeconds(Operation &op,
                                             ArrayRef<int64_t> gridShape,
                                             const ClusterModel &cluster,
                                             int64_t rank) {
  FailureOr<SmallVector<CollectiveTraffic>> traffic =
      collectiveTraffic(&op, gridShape);
  if (failed(traffic))
    return failure();
  double seconds = 0;
  for (const CollectiveTraffic &t : *traffic)
    seconds += cluster.exchangeSeconds(groupRanks(gridShape, rank, t.axes),
                                       t.ringSteps, t.bytes);
  int64_t worldRanks = 1;
  for (int64_t size : gridShape)
    worldRanks *= size;
  return seconds + kernelCost(op, cluster.deviceFor(worldRanks)).seconds;
}

FailureOr<StepPrediction> mlir::tp::simulateStep(func::FuncOp func,
                                                 ArrayRef<int64_t> gridShape,
                                                 const ClusterModel &cluster,
                                                 int64_t rank) {
  StepPrediction p;
  int64_t worldRanks = 1;
  for (int64_t size : gridShape)
    worldRanks *= size;
  const DeviceModel device = cluster.deviceFor(worldRanks);
  double now = 0;                  // the compute stream
  double channelFree = 0;          // the communication channel of ring shifts
  DenseMap<Value, double> arrives; // a ring shift's result: when it is in
  for (Operation &op : func.getBody().front().without_terminator()) {
    FailureOr<SmallVector<CollectiveTraffic>> traffic =
        collectiveTraffic(&op, gridShape);
    if (failed(traffic))
      return failure();
    double exchange = 0;
    for (const CollectiveTraffic &t : *traffic) {
      p.exchangeBytes += t.bytes;
      exchange += cluster.exchangeSeconds(groupRanks(gridShape, rank, t.axes),
                                          t.ringSteps, t.bytes);
    }
    p.exchangeSeconds += exchange;

    if (isa<RingShiftStartOp>(op)) {
      // Sent in the background from here; its wait blocks until it is in.
      const double start = std::max(now, channelFree);
      channelFree = start + exchange;
      arrives[op.getResult(0)] = channelFree;
      continue;
    }
    if (isa<RingShiftWaitOp>(op)) {
      const double in = arrives.lookup(op.getOperand(0));
      if (in > now) {
        p.exposedExchangeSeconds += in - now;
        now = in;
      }
      continue;
    }
    if (isa<MatrixProductOpInterface>(op)) {
      const KernelCost cost = kernelCost(op, device);
      p.productFlops += cost.productFlops;
      p.productSeconds += cost.seconds;
      now += cost.seconds;
      continue;
    }
    if (!traffic->empty() &&
        !isa<VocabParallelOpInterface, SplitStatisticsOpInterface>(op)) {
      // A collective: the exchange itself, blocking.
      p.exposedExchangeSeconds += exchange;
      now += device.opOverhead + exchange;
      continue;
    }
    // Any other kernel (a vocabulary-parallel loss or split norm also
    // exchanges statistics, blocking).
    const double seconds = kernelCost(op, device).seconds;
    p.otherSeconds += seconds;
    p.exposedExchangeSeconds += exchange;
    now += seconds + exchange;
  }
  p.seconds = now;
  if (auto arena = func->getAttrOfType<IntegerAttr>(
          TPDialect::ArenaBytesAttrHelper::getNameStr()))
    p.arenaBytes = double(arena.getInt());
  for (Type type : func.getArgumentTypes())
    p.argumentBytes += bytesOf(type);
  return p;
}
