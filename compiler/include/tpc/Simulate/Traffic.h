//===- Traffic.h - what each collective of a program moves ------*- C++ -*-===//
//
// The bytes one rank moves in each collective of a tp program, by the ring
// rule tp-run counts with (docs/communication.md): over a group of n ranks
// an all-gather or reduce-scatter moves (n-1)/n of the full tensor, an
// all-reduce 2(n-1)/n, an all-to-all (n-1)/n of the local tensor, a ring
// shift its block, and a vocabulary-parallel loss or feature-split norm
// the all-gathers of statistics its kernel makes. tp-report-communication
// sums them; the step simulator times them.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_SIMULATE_TRAFFIC_H
#define TPC_SIMULATE_TRAFFIC_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::tp {

/// One exchange one rank takes part in.
struct CollectiveTraffic {
  /// "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
  /// "ring_shift" or "send" (a pipeline transfer to one rank of another
  /// stage; `axes` is the pipeline axis).
  std::string kind;
  /// The grid axes its group spans, and the group's size.
  SmallVector<int64_t> axes;
  int64_t groupSize = 1;
  /// Bytes this rank sends, by the ring rule.
  double bytes = 0;
  /// Sequential ring steps (each pays a link's latency): 2(n-1) for an
  /// all-reduce, n-1 for the others, 1 for a ring shift, 0 over one rank.
  int64_t ringSteps = 0;
};

/// The exchanges `op` performs in a program on a grid of `gridShape` (the
/// tp.grid's; {1} without one), in order; none for an op that exchanges
/// nothing. Fails, after a diagnostic on `op`, for a layout no kernel runs.
FailureOr<SmallVector<CollectiveTraffic>>
collectiveTraffic(Operation *op, ArrayRef<int64_t> gridShape);

/// The shape of the module's tp.grid, or {1} when it has none.
SmallVector<int64_t> gridShapeOf(Operation *module);

/// The bytes of a whole tensor of `type` (0 for anything else).
double tensorBytes(Type type);

} // namespace mlir::tp

#endif // TPC_SIMULATE_TRAFFIC_H
