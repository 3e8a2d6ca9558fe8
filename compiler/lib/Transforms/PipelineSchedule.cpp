//===- PipelineSchedule.cpp - pipeline schedules as slot orders -----------===//

#include "tpc/Transforms/PipelineSchedule.h"

#include <algorithm>

using namespace llvm;
using namespace mlir;
using namespace mlir::tp;

SmallVector<SmallVector<PipelineSlot>>
mlir::tp::pipelineSlots(PipelineSchedule schedule, int64_t stages,
                        int64_t microbatches, int64_t chunks) {
  SmallVector<SmallVector<PipelineSlot>> order(stages);
  for (int64_t s = 0; s < stages; ++s) {
    SmallVector<PipelineSlot> &slots = order[s];
    if (schedule == PipelineSchedule::GPipe) {
      for (bool backward : {false, true})
        for (int64_t m = 0; m < microbatches; ++m)
          slots.push_back({backward, m, 0});
      continue;
    }
    const int64_t v = schedule == PipelineSchedule::Interleaved ? chunks : 1;
    const int64_t total = microbatches * v;
    // Virtual micro-batch k: groups of `stages` micro-batches per chunk
    // (Megatron-LM's get_model_chunk_id); backwards visit chunks in reverse.
    auto slotOf = [&](int64_t k, bool backward) {
      const int64_t group = k / (stages * v);
      const int64_t inGroup = k % (stages * v);
      int64_t chunk = inGroup / stages;
      if (backward)
        chunk = v - 1 - chunk;
      return PipelineSlot{backward, group * stages + inGroup % stages, chunk};
    };
    int64_t warmup;
    if (v == 1)
      warmup = std::min(stages - s - 1, microbatches);
    else if (microbatches == stages)
      warmup = total;
    else
      warmup = std::min((stages - s - 1) * 2 + (v - 1) * stages, total);
    for (int64_t k = 0; k < warmup; ++k)
      slots.push_back(slotOf(k, false));
    for (int64_t k = 0; k < total - warmup; ++k) {
      slots.push_back(slotOf(warmup + k, false));
      slots.push_back(slotOf(k, true));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      slots.push_back(slotOf(k, true));
  }
  return order;
}

std::string mlir::tp::describeSlots(ArrayRef<PipelineSlot> slots,
                                    bool withChunks) {
  std::string text;
  for (const PipelineSlot &slot : slots) {
    if (!text.empty())
      text += ' ';
    text += slot.backward ? 'B' : 'F';
    text += std::to_string(slot.microbatch);
    if (withChunks)
      text += "." + std::to_string(slot.chunk);
  }
  return text;
}

StringRef mlir::tp::pipelineScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
  case PipelineSchedule::GPipe:
    return "gpipe";
  case PipelineSchedule::OneFOneB:
    return "1f1b";
  case PipelineSchedule::Interleaved:
    return "interleaved";
  }
  llvm_unreachable("unknown pipeline schedule");
}
