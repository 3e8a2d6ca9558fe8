//===- StepSimulator.cpp - a program's run time on a cluster --------------===//

#include "tpc/Simulate/StepSimulator.h"

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Simulate/Traffic.h"

#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

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

namespace {
/// A pipeline transfer, by (sending stage, receiving stage, tag): when each
/// side posted its start, and how long the data takes once both have.
struct Transfer {
  std::optional<double> sent, received;
  double seconds = 0;
  /// When the data is in: both sides posted, then the wire time.
  std::optional<double> done() const {
    if (!sent || !received)
      return std::nullopt;
    return std::max(*sent, *received) + seconds;
  }
};
using TransferKey = std::tuple<int64_t, int64_t, int64_t>;

/// One rank running a program op by op on one compute stream, with ring
/// shifts on a communication channel of their own.
class RankTimeline {
public:
  RankTimeline(ArrayRef<int64_t> gridShape, const ClusterModel &cluster,
               int64_t rank)
      : gridShape(gridShape), cluster(cluster), rank(rank),
        device(cluster.deviceFor(llvm::product_of(gridShape))) {}

  /// What `op` exchanges, and in how many seconds over its level.
  FailureOr<double> exchangeOf(Operation &op,
                               SmallVector<CollectiveTraffic> &traffic) {
    FailureOr<SmallVector<CollectiveTraffic>> found =
        collectiveTraffic(&op, gridShape);
    if (failed(found))
      return failure();
    traffic = std::move(*found);
    double seconds = 0;
    for (const CollectiveTraffic &t : traffic)
      seconds += cluster.exchangeSeconds(groupRanks(gridShape, rank, t.axes),
                                         t.ringSteps, t.bytes);
    return seconds;
  }

  /// Runs `op`. A pipeline transfer is matched in `transfers` (its stage
  /// is `stage`): returns false, leaving the clock, when `op` waits for a
  /// side another stage has not posted yet. Without `transfers` (one
  /// program alone) the other side is taken to be ready.
  FailureOr<bool> run(Operation &op, int64_t stage,
                      std::map<TransferKey, Transfer> *transfers) {
    if (auto send = dyn_cast<SendStartOp>(op)) {
      SmallVector<CollectiveTraffic> traffic;
      if (failed(exchangeOf(op, traffic)))
        return failure();
      // Between this rank and its peer alone.
      SmallVector<int64_t> pair = {rank, peerRank(send.getPeer())};
      const double seconds =
          cluster.exchangeSeconds(pair, 1, traffic.front().bytes);
      p.exchangeBytes += traffic.front().bytes;
      p.exchangeSeconds += seconds;
      Transfer &t = lookup(transfers, {stage, send.getPeer(), send.getTag()});
      t.sent = now;
      t.seconds = seconds;
      return true;
    }
    if (auto recv = dyn_cast<RecvStartOp>(op)) {
      lookup(transfers, {recv.getPeer(), stage, recv.getTag()}).received = now;
      return true;
    }
    if (auto wait = dyn_cast<SendWaitOp>(op))
      return waitFor(lookup(transfers, {stage, wait.getPeer(), wait.getTag()}),
                     transfers);
    if (auto wait = dyn_cast<RecvWaitOp>(op)) {
      auto start = wait.getReceived().getDefiningOp<RecvStartOp>();
      return waitFor(
          lookup(transfers, {start.getPeer(), stage, start.getTag()}),
          transfers);
    }

    SmallVector<CollectiveTraffic> traffic;
    FailureOr<double> exchange = exchangeOf(op, traffic);
    if (failed(exchange))
      return failure();
    for (const CollectiveTraffic &t : traffic)
      p.exchangeBytes += t.bytes;
    p.exchangeSeconds += *exchange;

    if (isa<RingShiftStartOp>(op)) {
      // Sent in the background from here; its wait blocks until it is in.
      const double start = std::max(now, channelFree);
      channelFree = start + *exchange;
      arrives[op.getResult(0)] = channelFree;
      return true;
    }
    if (isa<RingShiftWaitOp>(op)) {
      const double in = arrives.lookup(op.getOperand(0));
      if (in > now) {
        p.exposedExchangeSeconds += in - now;
        now = in;
      }
      return true;
    }
    if (isa<MatrixProductOpInterface>(op)) {
      const KernelCost cost = kernelCost(op, device);
      p.productFlops += cost.productFlops;
      p.productSeconds += cost.seconds;
      now += cost.seconds;
      return true;
    }
    if (!traffic.empty() &&
        !isa<VocabParallelOpInterface, SplitStatisticsOpInterface>(op)) {
      // A collective: the exchange itself, blocking.
      p.exposedExchangeSeconds += *exchange;
      now += device.opOverhead + *exchange;
      return true;
    }
    // Any other kernel (a vocabulary-parallel loss or split norm also
    // exchanges statistics, blocking).
    const double seconds = kernelCost(op, device).seconds;
    p.otherSeconds += seconds;
    p.exposedExchangeSeconds += *exchange;
    now += seconds + *exchange;
    return true;
  }

  StepPrediction p;
  /// The compute stream's clock, and the part of it spent waiting for
  /// other stages.
  double now = 0, waited = 0;

private:
  int64_t peerRank(int64_t peerStage) const {
    SmallVector<int64_t> coords(gridShape.size());
    for (size_t d = gridShape.size(), rest = size_t(rank); d-- > 0;) {
      coords[d] = int64_t(rest) % gridShape[d];
      rest /= size_t(gridShape[d]);
    }
    coords[kPipelineStageAxis] = peerStage;
    int64_t r = 0;
    for (size_t d = 0; d < gridShape.size(); ++d)
      r = r * gridShape[d] + coords[d];
    return r;
  }

  Transfer &lookup(std::map<TransferKey, Transfer> *transfers,
                   TransferKey key) {
    return transfers ? (*transfers)[key] : alone;
  }

  /// A send or receive wait: the clock moves to when the data is in.
  bool waitFor(Transfer &t, std::map<TransferKey, Transfer> *transfers) {
    if (!transfers) { // the peer is ready at once
      alone = Transfer{};
      return true;
    }
    std::optional<double> done = t.done();
    if (!done)
      return false;
    if (*done > now) {
      p.exposedExchangeSeconds += *done - now;
      waited += *done - now;
      now = *done;
    }
    return true;
  }

  ArrayRef<int64_t> gridShape;
  const ClusterModel &cluster;
  int64_t rank;
  DeviceModel device;
  double channelFree = 0;          // the channel of ring shifts
  DenseMap<Value, double> arrives; // a ring shift's result: when it is in
  Transfer alone;                  // a transfer without its other side
};

void finish(StepPrediction &p, func::FuncOp func, double seconds) {
  p.seconds = seconds;
  if (auto arena = func->getAttrOfType<IntegerAttr>(
          TPDialect::ArenaBytesAttrHelper::getNameStr()))
    p.arenaBytes = double(arena.getInt());
  for (Type type : func.getArgumentTypes())
    p.argumentBytes += bytesOf(type);
}

/// Whether `op` exchanges over the pipeline's stages (every stage takes
/// part at once).
bool overStages(Operation &op) {
  auto axes = op.getAttrOfType<DenseI64ArrayAttr>("grid_axes");
  return axes && llvm::is_contained(axes.asArrayRef(), kPipelineStageAxis);
}
} // namespace

FailureOr<StepPrediction> mlir::tp::simulateStep(func::FuncOp func,
                                                 ArrayRef<int64_t> gridShape,
                                                 const ClusterModel &cluster,
                                                 int64_t rank) {
  RankTimeline timeline(gridShape, cluster, rank);
  for (Operation &op : func.getBody().front().without_terminator())
    if (failed(timeline.run(op, 0, nullptr)))
      return failure();
  finish(timeline.p, func, timeline.now);
  return timeline.p;
}

FailureOr<PipelinePrediction>
mlir::tp::simulatePipeline(ArrayRef<func::FuncOp> stages,
                           ArrayRef<int64_t> gridShape,
                           const ClusterModel &cluster) {
  const int64_t perStage = llvm::product_of(gridShape) / gridShape.front();
  std::vector<RankTimeline> timelines;
  timelines.reserve(stages.size());
  SmallVector<SmallVector<Operation *>> programs;
  for (auto [s, stage] : llvm::enumerate(stages)) {
    timelines.emplace_back(gridShape, cluster, int64_t(s) * perStage);
    programs.emplace_back();
    func::FuncOp func = stage;
    for (Operation &op : func.getBody().front().without_terminator())
      programs.back().push_back(&op);
  }
  std::map<TransferKey, Transfer> transfers;
  SmallVector<size_t> next(stages.size(), 0);
  while (true) {
    bool progress = false;
    for (size_t s = 0; s < stages.size(); ++s)
      while (next[s] < programs[s].size() &&
             !overStages(*programs[s][next[s]])) {
        FailureOr<bool> ran =
            timelines[s].run(*programs[s][next[s]], int64_t(s), &transfers);
        if (failed(ran))
          return failure();
        if (!*ran)
          break;
        ++next[s];
        progress = true;
      }
    // An exchange over the stages starts when the last stage reaches it.
    bool allThere = true;
    double start = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      allThere = allThere && next[s] < programs[s].size() &&
                 overStages(*programs[s][next[s]]);
      if (allThere)
        start = std::max(start, timelines[s].now);
    }
    if (allThere) {
      for (size_t s = 0; s < stages.size(); ++s) {
        RankTimeline &t = timelines[s];
        t.waited += start - t.now;
        t.p.exposedExchangeSeconds += start - t.now;
        t.now = start;
        if (failed(t.run(*programs[s][next[s]], int64_t(s), &transfers)))
          return failure();
        ++next[s];
      }
      progress = true;
    }
    bool done = true;
    for (size_t s = 0; s < stages.size(); ++s)
      done = done && next[s] == programs[s].size();
    if (done)
      break;
    if (!progress)
      return func::FuncOp(stages.front())
          .emitError(
              "tp-simulate: the stages' programs wait for each other forever");
  }
  PipelinePrediction prediction;
  for (auto [s, timeline] : llvm::enumerate(timelines)) {
    finish(timeline.p, stages[s], timeline.now);
    prediction.seconds = std::max(prediction.seconds, timeline.now);
  }
  for (RankTimeline &timeline : timelines) {
    // Every stage ends the step when the last does.
    prediction.idleSeconds.push_back(timeline.waited + prediction.seconds -
                                     timeline.now);
    prediction.stages.push_back(timeline.p);
  }
  return prediction;
}
