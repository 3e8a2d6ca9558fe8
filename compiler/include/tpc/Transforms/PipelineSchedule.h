//===- PipelineSchedule.h - pipeline schedules as slot orders ---*- C++ -*-===//
//
// A pipeline schedule is, for each stage, the order in which it runs the
// forward and backward halves of each micro-batch on each of its model
// chunks. tp-pipeline-stages compiles that order into each stage's program;
// the step simulator replays it.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_TRANSFORMS_PIPELINESCHEDULE_H
#define TPC_TRANSFORMS_PIPELINESCHEDULE_H

#include "tpc/Transforms/PassOptions.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace mlir::tp {

/// Why pp=`stages`, microbatches=`microbatches`, `schedule` and
/// pp-chunks=`chunks` cannot cut a training step, or "" when they can: the
/// rules tp-pipeline-stages checks, and tp-pipeline's mode=auto before it
/// searches (a multiple of pp micro-batches for the interleaved schedule is
/// the pass's own check, since mode=auto chooses the micro-batches).
std::string pipelineOptionsProblem(int64_t stages, int64_t microbatches,
                                   PipelineSchedule schedule, int64_t chunks);

/// One forward or backward half of one micro-batch on one model chunk of a
/// stage (chunk c of stage s holds virtual stage c * stages + s).
struct PipelineSlot {
  bool backward = false;
  int64_t microbatch = 0;
  int64_t chunk = 0;

  bool operator==(const PipelineSlot &other) const {
    return backward == other.backward && microbatch == other.microbatch &&
           chunk == other.chunk;
  }
};

/// Each stage's slots, in order. GPipe: every forward, then every backward.
/// 1F1B: stage s runs min(stages - s - 1, microbatches) forwards, then
/// alternates one forward and one backward, then the remaining backwards.
/// Interleaved (Megatron-LM): the same over `chunks` model chunks per
/// stage, micro-batches taken in groups of `stages` per chunk. The caller
/// checks the sizes (interleaved needs microbatches % stages == 0).
llvm::SmallVector<llvm::SmallVector<PipelineSlot>>
pipelineSlots(PipelineSchedule schedule, int64_t stages, int64_t microbatches,
              int64_t chunks);

/// Layers per group for `groups` contiguous groups of layers costing
/// `costs`, each at least one layer, minimising the largest group's cost
/// (the balanced pipeline cut). Needs costs.size() >= groups.
llvm::SmallVector<int64_t> balanceLayers(llvm::ArrayRef<double> costs,
                                         int64_t groups);

/// The cuts stage rebalancing may switch to from `balanced` (layers per
/// group: stage, or virtual stage in layer order): for each group, every
/// way of moving l <= `moves` layers to the group before it and r <=
/// `moves` to the one after it that leaves it a layer, in group order, then
/// l, then r; `balanced` itself not included, nor a cut twice.
llvm::SmallVector<llvm::SmallVector<int64_t>>
neighbourCuts(llvm::ArrayRef<int64_t> balanced, int64_t moves);

/// A schedule's slots costed per virtual stage (group g = chunk * stages +
/// stage): one micro-batch's forward and backward half on group g, and the
/// seconds a micro-batch's activation takes from group g to g + 1
/// (`forwardTransfer[g]`) and its gradient back (`backwardTransfer[g]`).
struct SlotCosts {
  llvm::SmallVector<double> forward, backward;
  llvm::SmallVector<double> forwardTransfer, backwardTransfer;
};

/// When each stage is done with its slots, replaying the schedule: a stage
/// runs its slots in order, each once its input has arrived (the previous
/// group's forward, the next group's backward, plus the transfer; the last
/// group's backward after its own forward). Empty when the slots wait for
/// each other forever (no schedule above does).
llvm::SmallVector<double> replaySlots(PipelineSchedule schedule, int64_t stages,
                                      int64_t microbatches, int64_t chunks,
                                      const SlotCosts &costs);

/// "F0 F1 B0 ..." (with chunks: "F0.1" is micro-batch 0 on chunk 1).
std::string describeSlots(llvm::ArrayRef<PipelineSlot> slots, bool withChunks);

/// The schedule's name in tp-pipeline's options ("gpipe", "1f1b",
/// "interleaved").
llvm::StringRef pipelineScheduleName(PipelineSchedule schedule);

} // namespace mlir::tp

#endif // TPC_TRANSFORMS_PIPELINESCHEDULE_H
