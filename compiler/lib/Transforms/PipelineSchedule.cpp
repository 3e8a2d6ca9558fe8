//===- PipelineSchedule.cpp - pipeline schedules as slot orders -----------===//

#include "tpc/Transforms/PipelineSchedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

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

SmallVector<int64_t> mlir::tp::balanceLayers(ArrayRef<double> costs,
                                             int64_t groups) {
  const int64_t numLayers = costs.size();
  // best[g][l]: the least largest group cost with layers [0, l) in the
  // first g groups, each group at least one layer.
  const double inf = std::numeric_limits<double>::infinity();
  SmallVector<double> prefix(numLayers + 1, 0);
  for (int64_t l = 0; l < numLayers; ++l)
    prefix[l + 1] = prefix[l] + costs[l];
  SmallVector<SmallVector<double>> best(
      groups + 1, SmallVector<double>(numLayers + 1, inf));
  SmallVector<SmallVector<int64_t>> cut(groups + 1,
                                        SmallVector<int64_t>(numLayers + 1, 0));
  best[0][0] = 0;
  for (int64_t g = 1; g <= groups; ++g)
    for (int64_t l = g; l <= numLayers - (groups - g); ++l)
      for (int64_t k = g - 1; k < l; ++k) {
        if (best[g - 1][k] == inf)
          continue;
        double c = std::max(best[g - 1][k], prefix[l] - prefix[k]);
        if (c < best[g][l]) {
          best[g][l] = c;
          cut[g][l] = k;
        }
      }
  SmallVector<int64_t> layers(groups, 0);
  for (int64_t g = groups, l = numLayers; g > 0; --g) {
    int64_t k = cut[g][l];
    layers[g - 1] = l - k;
    l = k;
  }
  return layers;
}

SmallVector<double> mlir::tp::replaySlots(PipelineSchedule schedule,
                                          int64_t stages, int64_t microbatches,
                                          int64_t chunks,
                                          const SlotCosts &costs) {
  SmallVector<SmallVector<PipelineSlot>> order =
      pipelineSlots(schedule, stages, microbatches, chunks);
  const int64_t v = schedule == PipelineSchedule::Interleaved ? chunks : 1;
  const int64_t groups = stages * v;
  // When each (backward, micro-batch, group) half is done.
  std::map<std::tuple<bool, int64_t, int64_t>, double> done;
  SmallVector<size_t> next(stages, 0);
  SmallVector<double> clock(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < stages; ++s) {
      for (; next[s] < order[s].size(); ++next[s]) {
        const PipelineSlot &slot = order[s][next[s]];
        const int64_t g = slot.chunk * stages + s;
        // The half this one reads, and the transfer it comes over.
        std::optional<std::tuple<bool, int64_t, int64_t>> input;
        double transfer = 0;
        if (!slot.backward && g > 0) {
          input = {false, slot.microbatch, g - 1};
          transfer = costs.forwardTransfer[g - 1];
        } else if (slot.backward && g + 1 < groups) {
          input = {true, slot.microbatch, g + 1};
          transfer = costs.backwardTransfer[g];
        } else if (slot.backward) {
          input = {false, slot.microbatch, g};
        }
        double ready = 0;
        if (input) {
          auto it = done.find(*input);
          if (it == done.end())
            break;
          ready = it->second + transfer;
        }
        clock[s] = std::max(clock[s], ready) +
                   (slot.backward ? costs.backward[g] : costs.forward[g]);
        done[{slot.backward, slot.microbatch, g}] = clock[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < stages; ++s)
    if (next[s] != order[s].size())
      return {};
  return clock;
}

SmallVector<SmallVector<int64_t>>
mlir::tp::neighbourCuts(ArrayRef<int64_t> balanced, int64_t moves) {
  SmallVector<SmallVector<int64_t>> cuts;
  const int64_t stages = balanced.size();
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t left = 0; left <= (s > 0 ? moves : 0); ++left)
      for (int64_t right = 0; right <= (s + 1 < stages ? moves : 0); ++right) {
        if (left + right == 0 || balanced[s] - left - right < 1)
          continue;
        SmallVector<int64_t> cut(balanced);
        cut[s] -= left + right;
        if (left)
          cut[s - 1] += left;
        if (right)
          cut[s + 1] += right;
        if (!llvm::is_contained(cuts, cut))
          cuts.push_back(std::move(cut));
      }
  return cuts;
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

std::string mlir::tp::pipelineOptionsProblem(int64_t stages,
                                             int64_t microbatches,
                                             PipelineSchedule schedule,
                                             int64_t chunks) {
  if (stages < 1)
    return "pp=" + std::to_string(stages) +
           " is not a positive number of stages";
  if (microbatches < 1)
    return "microbatches=" + std::to_string(microbatches) +
           " is not a positive number of micro-batches";
  if (chunks < 1)
    return "pp-chunks=" + std::to_string(chunks) +
           " is not a positive number of chunks";
  if (schedule == PipelineSchedule::Interleaved && chunks < 2)
    return "schedule=interleaved needs pp-chunks=V with V > 1";
  if (schedule != PipelineSchedule::Interleaved && chunks > 1)
    return "pp-chunks=" + std::to_string(chunks) +
           " needs schedule=interleaved";
  return "";
}
