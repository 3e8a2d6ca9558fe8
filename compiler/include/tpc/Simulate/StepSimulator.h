//===- StepSimulator.h - a program's run time on a cluster ------*- C++ -*-===//
//
// Predicts how long one rank takes to run a per-rank tp program (after
// tp-partition; tp-plan-memory's arena when present) on a described
// cluster: matrix products from their FLOPs at the device's peak for their
// precision and a size-dependent efficiency, other kernels from the bytes
// they stream, exchanges by the alpha-beta rule over the network level
// their group spans, one message per ring step. Ops run in program order on
// one compute stream; a ring shift runs on a communication channel from its
// start to its wait, overlapping whatever is computed in between, as the
// runtime overlaps it; every other exchange blocks.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_SIMULATE_STEPSIMULATOR_H
#define TPC_SIMULATE_STEPSIMULATOR_H

#include "tpc/Simulate/Cluster.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::tp {

struct StepPrediction {
  /// Wall time of one run of the function.
  double seconds = 0;
  /// Time in matrix products, in the other kernels, in exchanges (their
  /// own time) and the part of it that no compute hides.
  double productSeconds = 0, otherSeconds = 0, exchangeSeconds = 0,
         exposedExchangeSeconds = 0;
  double productFlops = 0;
  /// Bytes this rank sends in all its exchanges.
  double exchangeBytes = 0;
  /// Bytes one rank holds: the planned arena (0 before tp-plan-memory) and
  /// the function's arguments (parameters, moments, inputs).
  double arenaBytes = 0, argumentBytes = 0;
};

/// One kernel's predicted time on a device (0 for a view), and the FLOPs
/// of its matrix products.
struct KernelCost {
  double seconds = 0, productFlops = 0;
};
KernelCost kernelCost(Operation &op, const DeviceModel &device);

/// `op`'s kernel and exchanges, run alone by rank `rank` (no overlap): the
/// cost tp-pipeline-stages balances stages by.
FailureOr<double> predictOpSeconds(Operation &op, ArrayRef<int64_t> gridShape,
                                   const ClusterModel &cluster,
                                   int64_t rank = 0);

/// The prediction for rank `rank` of a grid of `gridShape` (row-major rank
/// order; the grid's rank 0 by default). Fails, after a diagnostic, on a
/// layout no kernel runs. `opFinished`, when given, receives when each op
/// of the body (terminator aside) was done: the step's time op by op.
FailureOr<StepPrediction>
simulateStep(func::FuncOp func, ArrayRef<int64_t> gridShape,
             const ClusterModel &cluster, int64_t rank = 0,
             SmallVectorImpl<double> *opFinished = nullptr);

/// A pipelined step: the stages' programs replayed together on one rank of
/// each stage (its first), a receive waiting for its send to be posted and
/// the data to cross, a send for its receive, an exchange over the stages
/// for the last stage to reach it.
struct PipelinePrediction {
  /// The step: until the last stage is done.
  double seconds = 0;
  /// Each stage's own prediction (its `seconds`: when it is done).
  SmallVector<StepPrediction> stages;
  /// Seconds each stage waits for the others in the step: for transfers,
  /// for exchanges over the stages, and after it is done until the last
  /// is (the bubble, with the transfers' exposed time).
  SmallVector<double> idleSeconds;
};

/// `stages` are the programs of stages 0, 1, ... of a grid whose axis 0 is
/// the pipeline's. Fails after a diagnostic on a layout no kernel runs or
/// programs that would wait for each other forever.
FailureOr<PipelinePrediction> simulatePipeline(ArrayRef<func::FuncOp> stages,
                                               ArrayRef<int64_t> gridShape,
                                               const ClusterModel &cluster);

} // namespace mlir::tp

#endif // TPC_SIMULATE_STEPSIMULATOR_H
