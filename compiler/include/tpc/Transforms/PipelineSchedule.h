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

/// "F0 F1 B0 ..." (with chunks: "F0.1" is micro-batch 0 on chunk 1).
std::string describeSlots(llvm::ArrayRef<PipelineSlot> slots, bool withChunks);

/// The schedule's name in tp-pipeline's options ("gpipe", "1f1b",
/// "interleaved").
llvm::StringRef pipelineScheduleName(PipelineSchedule schedule);

} // namespace mlir::tp

#endif // TPC_TRANSFORMS_PIPELINESCHEDULE_H
