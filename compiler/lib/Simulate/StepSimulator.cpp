//===- StepSimulator.cpp - a program's run time on a cluster --------------===//

#include "tpc/Simulate/StepSimulator.h"

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Simulate/Traffic.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

using namespace mlir;
using namespace mlir::tp;

namespace {
/// `rank`'s coordinates on a row-major grid, and back.
SmallVector<int64_t> coordsOf(ArrayRef<int64_t> gridShape, int64_t rank) {
  SmallVector<int64_t> coords(gridShape.size());
  for (size_t d = gridShape.size(), rest = size_t(rank); d-- > 0;) {
    coords[d] = int64_t(rest) % gridShape[d];
    rest /= size_t(gridShape[d]);
  }
  return coords;
}
int64_t rankOf(ArrayRef<int64_t> gridShape, ArrayRef<int64_t> coords) {
  int64_t r = 0;
  for (size_t d = 0; d < gridShape.size(); ++d)
    r = r * gridShape[d] + coords[d];
  return r;
}

/// The global ranks of `rank`'s group over `axes` of a row-major grid.
SmallVector<int64_t> groupRanks(ArrayRef<int64_t> gridShape, int64_t rank,
                                ArrayRef<int64_t> axes) {
  SmallVector<int64_t> coords = coordsOf(gridShape, rank);
  SmallVector<int64_t> ranks;
  std::function<void(size_t)> visit = [&](size_t i) {
    if (i == axes.size()) {
      ranks.push_back(rankOf(gridShape, coords));
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
    // Rounded to a precision (tp-matmul-precision), else read as stored:
    // under mixed precision the activations a product multiplies are bf16
    // (its statistics, biases and the like may be f32).
    TypeAttr precision = products.getOperandPrecision();
    if (!precision) {
      auto mixed = dyn_cast<MixedPrecisionOpInterface>(op);
      SmallVector<Type> floats;
      for (auto [index, type] : llvm::enumerate(op.getOperandTypes()))
        if (auto tensor = dyn_cast<RankedTensorType>(type);
            tensor && isa<FloatType>(tensor.getElementType()) &&
            !(mixed && mixed.readsOperandAsStored(index)))
          floats.push_back(tensor.getElementType());
      if (!floats.empty() && llvm::all_of(floats, [&](Type t) {
            return t == floats.front() && !t.isF32();
          }))
        precision = TypeAttr::get(floats.front());
    }
    // A materialising attention also runs every score and moves the score
    // matrices through memory between its kernels.
    if (const double scores = products.getScoreElements();
        scores > 0 && device.scoreBytesForward > 0) {
      cost.productFlops = products.getMaterializedProductFlops();
      cost.seconds =
          device.productSeconds(cost.productFlops, precision) +
          device.streamSeconds(scores * (products.isScoreGradient()
                                             ? device.scoreBytesBackward
                                             : device.scoreBytesForward));
      return cost;
    }
    cost.seconds = device.productSeconds(cost.productFlops, precision);
    return cost;
  }
  if (auto alias = dyn_cast<StorageAliasOpInterface>(op);
      alias && alias.alwaysSharesStorage())
    return cost; // a view of its operand: nothing runs
  // Any other kernel streams its operands and results once.
  double bytes = 0;
  for (Type type : op.getOperandTypes())
    bytes += tensorBytes(type);
  for (Type type : op.getResultTypes())
    bytes += tensorBytes(type);
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

/// Whether `op` exchanges over the pipeline's stages (every stage takes
/// part at once).
bool overStages(Operation &op) {
  auto axes = op.getAttrOfType<DenseI64ArrayAttr>("grid_axes");
  return axes && llvm::is_contained(axes.asArrayRef(), kPipelineStageAxis);
}

/// Runs programs on one rank each (one per pipeline stage, or one alone)
/// against a global clock. A kernel is a fixed part (its overhead, its
/// exchanges) and work: seconds on the whole device, done at the share of
/// it the rank gets. Ranks on one device (`devices` fewer than ranks) share
/// it: alone, every rank is taken to be as busy as the others (the busiest
/// device's share, all the time); in a pipeline, only the ranks computing
/// at the moment share it, each getting at most 1 / min(cores, ranks per
/// device) of it, so a stage in its bubble lends its share to the others.
class Replay {
public:
  Replay(ArrayRef<func::FuncOp> programs, ArrayRef<int64_t> gridShape,
         const ClusterModel &cluster, ArrayRef<int64_t> ranks, bool pipeline)
      : gridShape(gridShape), cluster(cluster), pipeline(pipeline) {
    const int64_t world = llvm::product_of(gridShape);
    perDevice = cluster.ranksPerDevice(world);
    const int64_t perStage = pipeline ? world / gridShape.front() : 1;
    for (auto [func, rank] : llvm::zip(programs, ranks)) {
      Lane &lane = lanes.emplace_back();
      lane.func = func;
      lane.rank = rank;
      lane.device = rank / perDevice;
      for (int64_t r = rank; r < rank + perStage; ++r)
        if (r / perDevice == lane.device)
          ++lane.onDevice;
      for (Operation &op : lane.func.getBody().front().without_terminator())
        lane.ops.push_back(&op);
    }
  }

  /// Runs every lane to its end; fails after a diagnostic on a layout no
  /// kernel runs or programs that wait for each other forever.
  LogicalResult run() {
    while (true) {
      if (failed(settle()))
        return failure();
      if (llvm::all_of(lanes, [](const Lane &l) { return l.phase == Done; }))
        return success();
      // Each computing lane's share of its device, and the next event.
      DenseMap<int64_t, int64_t> busy;
      for (const Lane &lane : lanes)
        if (lane.phase == Work)
          busy[lane.device] += lane.onDevice;
      const double cap =
          1.0 / double(std::min(std::max<int64_t>(cluster.device.cores, 1),
                                perDevice));
      double next = std::numeric_limits<double>::infinity();
      for (Lane &lane : lanes) {
        if (lane.phase == Work) {
          lane.rate = pipeline ? std::min(cap, 1.0 / double(busy[lane.device]))
                               : 1.0 / double(perDevice);
          next = std::min(next, now + lane.remaining / lane.rate);
        } else if (lane.phase == Fixed || lane.phase == Waiting) {
          next = std::min(next, lane.until);
        }
      }
      if (!std::isfinite(next))
        return stuck();
      for (Lane &lane : lanes) {
        if (lane.phase == Work) {
          lane.remaining -= lane.rate * (next - now);
          if (lane.remaining <= 1e-15 * std::max(1.0, next))
            finishOp(lane, next);
        } else if ((lane.phase == Fixed || lane.phase == Waiting) &&
                   lane.until <= next) {
          if (lane.phase == Fixed && lane.pendingWork > 0) {
            lane.phase = Work;
            lane.remaining = lane.pendingWork;
            lane.pendingWork = 0;
          } else {
            finishOp(lane, next);
          }
        }
      }
      now = next;
    }
  }

  /// Each lane's prediction, its `seconds` when it was done.
  SmallVector<StepPrediction> predictions() const {
    SmallVector<StepPrediction> all;
    for (const Lane &lane : lanes) {
      StepPrediction p = lane.p;
      p.seconds = lane.finished;
      if (auto arena = lane.func->getAttrOfType<IntegerAttr>(
              TPDialect::ArenaBytesAttrHelper::getNameStr()))
        p.arenaBytes = double(arena.getInt());
      for (Type type : func::FuncOp(lane.func).getArgumentTypes())
        p.argumentBytes += tensorBytes(type);
      all.push_back(p);
    }
    return all;
  }
  /// When each op of the first lane's program was done.
  ArrayRef<double> opFinished() const { return lanes.front().opFinished; }
  /// Seconds each lane waited for another stage.
  SmallVector<double> waits() const {
    SmallVector<double> all;
    for (const Lane &lane : lanes)
      all.push_back(lane.waited);
    return all;
  }

private:
  enum Phase {
    Ready,     // issues its next op now
    Fixed,     // until `until`, then `pendingWork` if any
    Work,      // `remaining` device-seconds at `rate`
    Waiting,   // for data known to arrive at `until`
    Blocked,   // for a side of a transfer another stage has not posted
    AtBarrier, // at an exchange over the stages
    Done
  };
  enum Category { Product, Other, Collective, None };
  struct Lane {
    func::FuncOp func;
    SmallVector<Operation *> ops;
    size_t next = 0;
    int64_t rank = 0, device = 0, onDevice = 0;
    Phase phase = Ready;
    double until = 0, remaining = 0, pendingWork = 0, rate = 1;
    double opStart = 0, finished = 0, waited = 0;
    Category category = None;
    StepPrediction p;
    double channelFree = 0;          // the channel of ring shifts
    DenseMap<Value, double> arrives; // a ring shift's result: when it is in
    SmallVector<double> opFinished;  // when each op of `ops` was done
  };

  LogicalResult stuck() {
    for (Lane &lane : lanes)
      if (lane.phase == Blocked || lane.phase == AtBarrier)
        return lane.ops[lane.next]->emitError(
            "tp-simulate: the stages' programs wait for each other forever");
    return lanes.front().func.emitError(
        "tp-simulate: the stages' programs wait for each other forever");
  }

  /// What `op` exchanges on `lane`'s rank: whether it exchanges at all (a
  /// collective over a group of one rank does, moving nothing), and in how
  /// many seconds over its level.
  struct Exchange {
    bool any = false;
    double seconds = 0;
  };
  FailureOr<Exchange> exchangeOf(Lane &lane, Operation &op) {
    FailureOr<SmallVector<CollectiveTraffic>> traffic =
        collectiveTraffic(&op, gridShape);
    if (failed(traffic))
      return failure();
    Exchange exchange{!traffic->empty(), 0};
    for (const CollectiveTraffic &t : *traffic) {
      lane.p.exchangeBytes += t.bytes;
      exchange.seconds += cluster.exchangeSeconds(
          groupRanks(gridShape, lane.rank, t.axes), t.ringSteps, t.bytes);
    }
    lane.p.exchangeSeconds += exchange.seconds;
    return exchange;
  }

  /// The rank of stage `peerStage` with `rank`'s other coordinates.
  int64_t peerRank(int64_t rank, int64_t peerStage) const {
    SmallVector<int64_t> coords = coordsOf(gridShape, rank);
    coords[kPipelineStageAxis] = peerStage;
    return rankOf(gridShape, coords);
  }

  /// The transfer a send or receive wait of stage `stage` completes.
  Transfer &transferOf(Operation &wait, int64_t stage) {
    if (auto send = dyn_cast<SendWaitOp>(wait))
      return transfers[{stage, send.getPeer(), send.getTag()}];
    auto start =
        cast<RecvWaitOp>(wait).getReceived().getDefiningOp<RecvStartOp>();
    return transfers[{start.getPeer(), stage, start.getTag()}];
  }

  /// `lane` is done with its op at `at`.
  static void advance(Lane &lane, double at) {
    lane.opFinished.push_back(at);
    ++lane.next;
  }

  /// The op `lane` is at is over: its time goes to its category.
  void finishOp(Lane &lane, double at) {
    const double took = at - lane.opStart;
    if (lane.category == Product)
      lane.p.productSeconds += took;
    else if (lane.category == Other)
      lane.p.otherSeconds += took;
    lane.category = None;
    lane.phase = Ready;
    advance(lane, at);
  }

  /// Starts a kernel: `fixed` seconds, then `work` device-seconds.
  void startKernel(Lane &lane, Category category, double fixed, double work) {
    lane.opStart = now;
    lane.category = category;
    lane.phase = Fixed;
    lane.until = now + fixed;
    lane.pendingWork = work;
  }

  /// A transfer's wait: done, waiting for the data, or blocked.
  void waitFor(Lane &lane, const Transfer &t) {
    std::optional<double> done = pipeline ? t.done() : std::optional(now);
    if (!done) {
      lane.phase = Blocked;
      lane.opStart = now;
      return;
    }
    if (*done <= now) {
      advance(lane, now);
      return;
    }
    lane.p.exposedExchangeSeconds += *done - now;
    lane.waited += *done - now;
    lane.phase = Waiting;
    lane.until = *done;
  }

  /// Issues `lane`'s ops from `now` until one takes time or blocks.
  LogicalResult issue(Lane &lane, int64_t stage) {
    const DeviceModel &device = cluster.device;
    while (lane.phase == Ready) {
      if (lane.next == lane.ops.size()) {
        lane.phase = Done;
        lane.finished = now;
        return success();
      }
      Operation &op = *lane.ops[lane.next];
      if (auto send = dyn_cast<SendStartOp>(op)) {
        FailureOr<SmallVector<CollectiveTraffic>> traffic =
            collectiveTraffic(&op, gridShape);
        if (failed(traffic))
          return failure();
        // Between this rank and its peer alone.
        const double bytes = traffic->front().bytes;
        SmallVector<int64_t> pair = {lane.rank,
                                     peerRank(lane.rank, send.getPeer())};
        Transfer &t = transfers[{stage, send.getPeer(), send.getTag()}];
        t.sent = now;
        t.seconds = cluster.exchangeSeconds(pair, 1, bytes);
        lane.p.exchangeBytes += bytes;
        lane.p.exchangeSeconds += t.seconds;
        advance(lane, now);
      } else if (auto recv = dyn_cast<RecvStartOp>(op)) {
        transfers[{recv.getPeer(), stage, recv.getTag()}].received = now;
        advance(lane, now);
      } else if (isa<SendWaitOp, RecvWaitOp>(op)) {
        waitFor(lane, transferOf(op, stage));
      } else if (pipeline && overStages(op)) {
        lane.phase = AtBarrier;
        lane.opStart = now;
      } else {
        FailureOr<Exchange> exchange = exchangeOf(lane, op);
        if (failed(exchange))
          return failure();
        if (isa<RingShiftStartOp>(op)) {
          // Sent in the background from here; its wait blocks until it is
          // in.
          const double start = std::max(now, lane.channelFree);
          lane.channelFree = start + exchange->seconds;
          lane.arrives[op.getResult(0)] = lane.channelFree;
          advance(lane, now);
        } else if (isa<RingShiftWaitOp>(op)) {
          const double in = lane.arrives.lookup(op.getOperand(0));
          if (in > now) {
            lane.p.exposedExchangeSeconds += in - now;
            lane.phase = Waiting;
            lane.until = in;
          } else {
            advance(lane, now);
          }
        } else if (isa<MatrixProductOpInterface>(op)) {
          const KernelCost cost = kernelCost(op, device);
          lane.p.productFlops += cost.productFlops;
          startKernel(lane, Product, device.opOverhead,
                      cost.seconds - device.opOverhead);
        } else if (exchange->any &&
                   !isa<VocabParallelOpInterface, SplitStatisticsOpInterface>(
                       op)) {
          // A collective: the exchange itself, blocking.
          lane.p.exposedExchangeSeconds += exchange->seconds;
          startKernel(lane, Collective, device.opOverhead + exchange->seconds,
                      0);
        } else {
          // Any other kernel (a vocabulary-parallel loss or split norm also
          // exchanges statistics, blocking); a view runs nothing.
          const double seconds = kernelCost(op, device).seconds;
          lane.p.exposedExchangeSeconds += exchange->seconds;
          if (seconds == 0 && !exchange->any) {
            advance(lane, now);
            continue;
          }
          startKernel(lane, Other, device.opOverhead + exchange->seconds,
                      seconds - device.opOverhead);
        }
      }
    }
    return success();
  }

  /// Issues and unblocks at `now` until nothing changes; an exchange over
  /// the stages starts once every stage is at it.
  LogicalResult settle() {
    for (bool changed = true; changed;) {
      changed = false;
      for (auto [stage, lane] : llvm::enumerate(lanes)) {
        if (lane.phase == Blocked) {
          const double since = lane.opStart;
          lane.phase = Ready;
          waitFor(lane, transferOf(*lane.ops[lane.next], int64_t(stage)));
          if (lane.phase == Blocked) {
            lane.opStart = since;
            continue;
          }
          // Waiting for the other side to post counts as waiting too.
          lane.p.exposedExchangeSeconds += now - since;
          lane.waited += now - since;
          changed = true;
        }
        if (lane.phase == Ready) {
          if (failed(issue(lane, int64_t(stage))))
            return failure();
          changed = true;
        }
      }
      if (!lanes.empty() && llvm::all_of(lanes, [](const Lane &l) {
            return l.phase == AtBarrier;
          })) {
        for (Lane &lane : lanes) {
          FailureOr<Exchange> exchange = exchangeOf(lane, *lane.ops[lane.next]);
          if (failed(exchange))
            return failure();
          // Waiting for the last stage, then the exchange itself.
          lane.waited += now - lane.opStart;
          lane.p.exposedExchangeSeconds +=
              now - lane.opStart + exchange->seconds;
          startKernel(lane, Collective,
                      cluster.device.opOverhead + exchange->seconds, 0);
        }
        changed = true;
      }
    }
    return success();
  }

  ArrayRef<int64_t> gridShape;
  const ClusterModel &cluster;
  bool pipeline;
  int64_t perDevice = 1;
  std::vector<Lane> lanes;
  std::map<TransferKey, Transfer> transfers;
  double now = 0;
};
} // namespace

FailureOr<StepPrediction>
mlir::tp::simulateStep(func::FuncOp func, ArrayRef<int64_t> gridShape,
                       const ClusterModel &cluster, int64_t rank,
                       SmallVectorImpl<double> *opFinished) {
  Replay replay(func, gridShape, cluster, rank, /*pipeline=*/false);
  if (failed(replay.run()))
    return failure();
  if (opFinished)
    opFinished->assign(replay.opFinished().begin(), replay.opFinished().end());
  return replay.predictions().front();
}

FailureOr<PipelinePrediction>
mlir::tp::simulatePipeline(ArrayRef<func::FuncOp> stages,
                           ArrayRef<int64_t> gridShape,
                           const ClusterModel &cluster) {
  const int64_t perStage = llvm::product_of(gridShape) / gridShape.front();
  SmallVector<int64_t> ranks;
  for (size_t s = 0; s < stages.size(); ++s)
    ranks.push_back(int64_t(s) * perStage);
  Replay replay(stages, gridShape, cluster, ranks, /*pipeline=*/true);
  if (failed(replay.run()))
    return failure();
  PipelinePrediction prediction;
  prediction.stages = replay.predictions();
  for (const StepPrediction &stage : prediction.stages)
    prediction.seconds = std::max(prediction.seconds, stage.seconds);
  for (auto [stage, waited] : llvm::zip(prediction.stages, replay.waits()))
    // Every stage ends the step when the last does.
    prediction.idleSeconds.push_back(waited + prediction.seconds -
                                     stage.seconds);
  return prediction;
}
