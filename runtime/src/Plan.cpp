#include "tpc/runtime/Plan.h"

#include "PipelineCheck.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/OpTable.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace tpc::runtime {

using PlanDType = plan::DType;
using plan::OpKind;
using plan::Storage;

// The plan schema numbers its dtypes as DType.h does.
static_assert(unsigned(PlanDType::F32) == unsigned(DType::F32) &&
              unsigned(PlanDType::F16) == unsigned(DType::F16) &&
              unsigned(PlanDType::BF16) == unsigned(DType::BF16) &&
              unsigned(PlanDType::I32) == unsigned(DType::I32) &&
              unsigned(PlanDType::I64) == unsigned(DType::I64));

int64_t dtypeSize(PlanDType dtype) {
  // An untrusted file may hold any value: 0 marks it unknown.
  std::optional<DType> known = dtypeFromValue(unsigned(dtype));
  return known ? int64_t(tpc::runtime::dtypeSize(*known)) : 0;
}

const char *dtypeName(PlanDType dtype) {
  const char *name = plan::EnumNameDType(dtype);
  return *name ? name : "unknown";
}

std::string shapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

const char *opKindName(OpKind kind) {
  const char *name = plan::EnumNameOpKind(kind);
  return *name ? name : "unknown";
}

namespace {
// Bounds that keep every size computation far from overflow.
constexpr int64_t kMaxElements = int64_t(1) << 40;
constexpr int64_t kMaxRank = 8;

[[noreturn]] void fail(const std::string &message) { throw PlanError(message); }

/// The ranks splitting each dimension of a tensor laid out as `split` on
/// `grid`; fails with "`subject` has invalid split axes" when an axis is out
/// of range or splits two dimensions.
std::vector<int64_t>
splitShards(const flatbuffers::Vector<flatbuffers::Offset<plan::Axes>> &split,
            const flatbuffers::Vector<int64_t> &grid,
            const std::string &subject) {
  std::vector<int64_t> shards;
  std::set<int64_t> used;
  for (const plan::Axes *axes : split) {
    shards.push_back(1);
    for (int64_t axis : *axes->axes()) {
      if (axis < 0 || axis >= int64_t(grid.size()) || !used.insert(axis).second)
        fail(subject + " has invalid split axes");
      shards.back() *= grid.Get(axis);
    }
  }
  return shards;
}

/// Checks a tensor's or parameter's `rebalance_dims` against its shape and
/// the plan's points (checked by checkRebalancePoints before): one entry per
/// dim, each -1 or a point whose capacity (tensors) or blocks (parameters,
/// `blocksOf`) divide the dim.
void checkRebalanceDims(const plan::Plan &plan,
                        const flatbuffers::Vector<int32_t> *dims,
                        const flatbuffers::Vector<int64_t> *shape,
                        const std::string &what, bool whole = false) {
  if (!dims)
    return;
  if (dims->size() != shape->size())
    fail(what + " has rebalance dims for " + std::to_string(dims->size()) +
         " of its " + std::to_string(shape->size()) + " dimensions");
  const size_t numPoints =
      plan.rebalance_points() ? plan.rebalance_points()->size() : 0;
  for (size_t d = 0; d < dims->size(); ++d) {
    int32_t point = dims->Get(d);
    if (point == -1)
      continue;
    if (point < 0 || size_t(point) >= numPoints)
      fail(what + " dimension " + std::to_string(d) +
           " names rebalance point " + std::to_string(point) +
           ", but the plan has " + std::to_string(numPoints));
    const plan::RebalancePoint &p = *plan.rebalance_points()->Get(point);
    int64_t per = whole ? p.blocks() : p.capacity();
    if (shape->Get(d) == 0 || shape->Get(d) % per != 0)
      fail(what + " dimension " + std::to_string(d) + " (" +
           std::to_string(shape->Get(d)) + ") is not a multiple of " +
           std::to_string(per) + (whole ? " blocks" : " (the capacity)") +
           " of rebalance point '" + p.name()->str() + "'");
  }
}

/// Checks one program; `where` prefixes every message.
class ProgramChecker {
public:
  /// `active`: the blocks of each rebalance point the rank computes; the
  /// plan's capacity when empty (loading).
  ProgramChecker(const plan::Plan &plan, const plan::Program &program,
                 std::span<const int64_t> active = {})
      : plan(plan), program(program),
        where("program '" + program.name()->str() + "'" +
              (program.stage() >= 0
                   ? " of stage " + std::to_string(program.stage())
                   : std::string())),
        active(active.empty()
                   ? capacityBlocks(plan)
                   : std::vector<int64_t>(active.begin(), active.end())) {}

  void check();

private:
  void checkTensors();
  void checkInputs();
  void checkStep(const plan::Step &step, size_t index);
  void checkArenaLiveRanges();

  const plan::Plan &plan;
  const plan::Program &program;
  std::string where;
  std::vector<int64_t> active;
  std::vector<TensorType> tensors;
  std::vector<bool> written;
  /// Results of RingShiftStart and RecvStart steps whose wait has not come
  /// yet (with the start's kind), and operands of SendStart steps whose
  /// SendWait has not.
  std::map<uint32_t, plan::OpKind> inFlight;
  std::set<uint32_t> sending;
};

void ProgramChecker::check() {
  checkTensors();
  checkInputs();
  for (size_t i = 0; i < program.steps()->size(); ++i)
    checkStep(*program.steps()->Get(i), i);
  if (!inFlight.empty())
    fail(where + ": the transfer into tensor " +
         std::to_string(inFlight.begin()->first) + " is never waited for");
  if (!sending.empty())
    fail(where + ": the send of tensor " + std::to_string(*sending.begin()) +
         " is never waited for");
  if (program.stage() < -1)
    fail(where + ": stage " + std::to_string(program.stage()) + " is negative");
  if (program.result_names() &&
      program.result_names()->size() != program.results()->size())
    fail(where + ": " + std::to_string(program.result_names()->size()) +
         " result names for " + std::to_string(program.results()->size()) +
         " results");
  for (uint32_t result : *program.results()) {
    if (result >= tensors.size())
      fail(where + ": result tensor " + std::to_string(result) +
           " is out of range");
    if (!written[result])
      fail(where + ": result tensor " + std::to_string(result) +
           " is never computed");
  }
  checkArenaLiveRanges();
}

void ProgramChecker::checkTensors() {
  const uint64_t arena = program.arena_bytes();
  const auto &params = *plan.params();
  for (size_t i = 0; i < program.tensors()->size(); ++i) {
    const plan::Tensor &t = *program.tensors()->Get(i);
    std::string what = where + ": tensor " + std::to_string(i);
    if (t.shape()->size() > kMaxRank)
      fail(what + " has rank " + std::to_string(t.shape()->size()) +
           " (at most " + std::to_string(kMaxRank) + ")");
    checkedElementCount(t.shape(), what);
    checkRebalanceDims(plan, t.rebalance_dims(), t.shape(), what);
    std::vector<int64_t> shape = activeShape(plan, t, active);
    int64_t count = 1;
    for (int64_t d : shape)
      count *= d;
    if (dtypeSize(t.dtype()) == 0)
      fail(what + " has an unknown dtype");
    uint64_t bytes = uint64_t(count) * dtypeSize(t.dtype());
    bool isWritten = false;
    // An if-chain, not a switch: an untrusted file may hold any value.
    if (t.storage() == Storage::Arena) {
      // (1.12) A micro-batch's block of the token ids is an i32 activation.
      const bool integerBlock = t.dtype() == PlanDType::I32 &&
                                plan.version_minor() >= kPlanPipelineMinor;
      if (!isFloatDType(t.dtype(), plan.version_minor()) && !integerBlock)
        fail(what + " is an activation of type " + dtypeName(t.dtype()) +
             "; activations are f32" +
             (plan.version_minor() >= kPlanBf16Minor
                  ? " or bf16"
                  : " (bf16 from plan format 1." +
                        std::to_string(kPlanBf16Minor) + ")") +
             (plan.version_minor() >= kPlanPipelineMinor
                  ? ", or i32 token blocks"
                  : ""));
      // The arena is 64-byte aligned; kernels load whole elements.
      if (t.offset() % dtypeSize(t.dtype()) != 0)
        fail(what + " starts at byte " + std::to_string(t.offset()) +
             ", not a multiple of its element size");
      if (t.offset() > arena || bytes > arena - t.offset())
        fail(what + " occupies bytes [" + std::to_string(t.offset()) + ", " +
             std::to_string(t.offset() + bytes) + ") beyond the arena of " +
             std::to_string(arena) + " bytes");
    } else if (t.storage() == Storage::Param ||
               t.storage() == Storage::ExpAvg ||
               t.storage() == Storage::ExpAvgSq) {
      if (t.index() >= params.size())
        fail(what + " refers to parameter " + std::to_string(t.index()) +
             ", but the plan has " + std::to_string(params.size()));
      const plan::Param &p = *params.Get(t.index());
      // A view that holds a point's blocks sees the rank's blocks of it;
      // one that holds none (a program that runs only while they are
      // evenly spread) sees the even split.
      const bool holdsBlocks = rebalancePointOf(t) >= 0;
      std::vector<int64_t> localShape =
          paramLocalShape(plan, p, holdsBlocks ? active : evenBlocks(plan));
      // A cached table is viewed as its cache: some rows of the block.
      if (p.cache_rows() != 0 && !localShape.empty())
        localShape[0] = p.cache_rows();
      int64_t local = 1;
      for (int64_t d : localShape)
        local *= d;
      if (holdsBlocks && !p.rebalance_dims())
        fail(what + " holds rebalance blocks of parameter '" + p.name()->str() +
             "', which has none");
      if (local != count || p.dtype() != t.dtype())
        fail(what + " views parameter '" + p.name()->str() +
             "' (or its optimizer state) with a different size or dtype");
      isWritten = true;
    } else if (t.storage() == Storage::Input) {
      if (rebalancePointOf(t) >= 0)
        fail(what + " is a program input holding rebalance blocks");
      if (t.index() >= program.inputs()->size())
        fail(what + " refers to input " + std::to_string(t.index()) +
             ", but the program has " +
             std::to_string(program.inputs()->size()));
      // Another tensor of an input's storage is a view of it (a reshape in
      // a gradient program): the same bytes, so the same size and dtype.
      const uint32_t own = program.inputs()->Get(t.index())->tensor();
      if (own != i) {
        const plan::Tensor *input = own < program.tensors()->size()
                                        ? program.tensors()->Get(own)
                                        : nullptr;
        if (!input || input->storage() != Storage::Input ||
            input->index() != t.index() || input->dtype() != t.dtype() ||
            input->shape()->size() > kMaxRank ||
            checkedElementCount(input->shape(), what) != count)
          fail(what + " claims input " + std::to_string(t.index()) +
               ", which belongs to another tensor (of another size or "
               "dtype)");
      }
      isWritten = true;
    } else if (t.storage() == Storage::Cache) {
      const size_t caches = plan.caches() ? plan.caches()->size() : 0;
      if (t.index() >= caches)
        fail(what + " refers to KV cache " + std::to_string(t.index()) +
             ", but the plan has " + std::to_string(caches));
      const plan::Cache &cache = *plan.caches()->Get(t.index());
      if (rebalancePointOf(t) >= 0 ||
          !std::equal(t.shape()->begin(), t.shape()->end(),
                      cache.shape()->begin(), cache.shape()->end()) ||
          t.dtype() != cache.dtype())
        fail(what + " views KV cache '" + cache.name()->str() +
             "' with another shape or dtype");
      // Zeros until a step writes it, then what the last run left.
      isWritten = true;
    } else {
      fail(what + " has an unknown storage kind");
    }
    tensors.push_back({t.dtype(), std::move(shape)});
    written.push_back(isWritten);
  }
}

void ProgramChecker::checkInputs() {
  std::set<plan::InputKind> seen;
  std::set<std::pair<plan::InputKind, uint32_t>> seenCacheInputs;
  for (size_t i = 0; i < program.inputs()->size(); ++i) {
    const plan::Input &input = *program.inputs()->Get(i);
    std::string what = where + ": input " + std::to_string(i);
    if (input.kind() != plan::InputKind::Tokens &&
        input.kind() != plan::InputKind::Targets &&
        input.kind() != plan::InputKind::Step &&
        input.kind() != plan::InputKind::Hyperparameters &&
        input.kind() != plan::InputKind::Positions &&
        !(isCacheInput(input.kind()) &&
          plan.version_minor() >= kPlanEmbeddingCacheMinor) &&
        !(input.kind() == plan::InputKind::Dense &&
          plan.version_minor() >= kPlanDenseMinor))
      fail(what + " has an unknown kind");
    // Each table has its own cache inputs.
    if (isCacheInput(input.kind())) {
      if (!seenCacheInputs.insert({input.kind(), input.param()}).second)
        fail(what + " repeats input kind " +
             plan::EnumNameInputKind(input.kind()) + " for one table");
    } else if (!seen.insert(input.kind()).second) {
      fail(what + " repeats input kind " +
           plan::EnumNameInputKind(input.kind()));
    }
    if (input.tensor() >= tensors.size())
      fail(what + " refers to tensor " + std::to_string(input.tensor()) +
           " out of range");
    const plan::Tensor &t = *program.tensors()->Get(input.tensor());
    if (t.storage() != Storage::Input || t.index() != i)
      fail(what + " and its tensor " + std::to_string(input.tensor()) +
           " disagree on their storage");
    const std::vector<int64_t> &shape = tensors[input.tensor()].shape;
    if (input.split() && input.split()->size() != 0) {
      if (input.kind() != plan::InputKind::Tokens &&
          input.kind() != plan::InputKind::Targets &&
          input.kind() != plan::InputKind::Positions &&
          input.kind() != plan::InputKind::Dense)
        fail(what + " is split over the grid, which only tokens, targets, "
                    "positions and dense features may be");
      if (input.split()->size() != shape.size())
        fail(what + " has a split for " +
             std::to_string(input.split()->size()) + " of its " +
             std::to_string(shape.size()) + " dimensions");
      splitShards(*input.split(), *plan.grid(), what);
    }
    switch (input.kind()) {
    case plan::InputKind::Tokens:
    case plan::InputKind::Targets:
    case plan::InputKind::Positions:
      if (t.dtype() != PlanDType::I32 || shape.size() != 2)
        fail(what + " must be an i32 [batch, seq] tensor");
      break;
    case plan::InputKind::Dense:
      if (t.dtype() != PlanDType::F32 || shape.size() != 3 || shape[1] != 1)
        fail(what + " (dense) must be an f32 [batch, 1, features] tensor");
      break;
    case plan::InputKind::Step:
      if (t.dtype() != PlanDType::I64 || !shape.empty())
        fail(what + " (step) must be an i64 scalar");
      break;
    case plan::InputKind::Hyperparameters:
      if (t.dtype() != PlanDType::F32 || shape != std::vector<int64_t>{5})
        fail(what + " (hyperparameters) must be f32 [5]");
      break;
    case plan::InputKind::CacheMap:
    case plan::InputKind::CacheRows: {
      const auto &params = *plan.params();
      if (input.param() >= params.size() ||
          params.Get(input.param())->cache_rows() == 0)
        fail(what + " names parameter " + std::to_string(input.param()) +
             ", which is no cached table");
      const plan::Param &table = *params.Get(input.param());
      const std::vector<int64_t> block =
          paramLocalShape(plan, table, evenBlocks(plan));
      if (t.dtype() != PlanDType::I32 || shape.size() != 1 ||
          (input.kind() == plan::InputKind::CacheMap
               ? shape[0] != block[0]
               : shape[0] < 1 || shape[0] > block[0]))
        fail(what + " must be i32 [" +
             (input.kind() == plan::InputKind::CacheMap
                  ? std::to_string(block[0])
                  : "1.." + std::to_string(block[0])) +
             "], one entry per row of parameter '" + table.name()->str() +
             "''s block" +
             (input.kind() == plan::InputKind::CacheMap ? "" : " at most"));
      break;
    }
    }
  }
}

void ProgramChecker::checkStep(const plan::Step &step, size_t index) {
  std::string at = where + ": step " + std::to_string(index) + " (" +
                   opKindName(step.kind()) +
                   (step.location() && step.location()->size()
                        ? " at " + step.location()->str()
                        : std::string()) +
                   ")";
  const OpInfo *info = findOpInfo(step.kind());
  if (!info)
    fail(at + ": this runtime cannot execute op kind " +
         std::to_string(unsigned(step.kind())));
  if (plan.version_minor() < info->sinceMinor)
    fail(at + ": op kind " + opKindName(step.kind()) +
         " is not in plan format 1." + std::to_string(plan.version_minor()));
  const size_t fewestOperands = info->numOperands - info->optionalOperands,
               fewestResults = info->numResults - info->optionalResults;
  auto range = [](size_t fewest, size_t most) {
    return fewest == most
               ? std::to_string(most)
               : std::to_string(fewest) + " to " + std::to_string(most);
  };
  if (step.operands()->size() < fewestOperands ||
      step.operands()->size() > info->numOperands ||
      step.results()->size() < fewestResults ||
      step.results()->size() > info->numResults)
    fail(at + ": expected " + range(fewestOperands, info->numOperands) +
         " operands and " + range(fewestResults, info->numResults) +
         " results, got " + std::to_string(step.operands()->size()) + " and " +
         std::to_string(step.results()->size()));
  std::vector<TensorType> in, out;
  std::optional<PlanDType> activationDType; // of the first activation
  for (size_t i = 0; i < step.operands()->size(); ++i) {
    uint32_t id = step.operands()->Get(i);
    if (id >= tensors.size())
      fail(at + ": operand tensor " + std::to_string(id) + " is out of range");
    if (!written[id])
      fail(at + ": reads tensor " + std::to_string(id) +
           " before any step writes it");
    // A block in flight is read only by the wait that completes it.
    const bool waits = (step.kind() == plan::OpKind::RingShiftWait ||
                        step.kind() == plan::OpKind::RecvWait) &&
                       i == 0;
    const plan::OpKind starter = step.kind() == plan::OpKind::RecvWait
                                     ? plan::OpKind::RecvStart
                                     : plan::OpKind::RingShiftStart;
    if (waits && (!inFlight.count(id) || inFlight.at(id) != starter))
      fail(at + ": waits for tensor " + std::to_string(id) + ", which no " +
           (starter == plan::OpKind::RecvStart ? "receive" : "ring shift") +
           " is filling");
    if (!waits && inFlight.count(id))
      fail(at + ": reads tensor " + std::to_string(id) +
           " while a transfer is still filling it");
    if (step.kind() == plan::OpKind::SendWait && !sending.count(id))
      fail(at + ": waits for the send of tensor " + std::to_string(id) +
           ", which no send started");
    // A tensor being sent stays as it is until its send completes.
    if (sending.count(id) && step.kind() != plan::OpKind::SendWait &&
        info->placement != ResultPlacement::Arena)
      for (size_t r = 0; r < step.results()->size(); ++r)
        if ((info->placement == ResultPlacement::AliasOperand && i == 0) ||
            (info->placement == ResultPlacement::UpdateInPlace &&
             info->updatedOperand[r] == i))
          fail(at + ": writes tensor " + std::to_string(id) +
               " while it is being sent");
    if (step.kind() == plan::OpKind::SendStart && sending.count(id))
      fail(at + ": sends tensor " + std::to_string(id) +
           ", whose send has not completed");
    PlanDType expected = info->operandDTypes[i];
    const PlanDType actual = tensors[id].dtype;
    // A kind that moves elements may move a block of token ids (1.12).
    if (i == 0 && info->movesIntegers && actual == PlanDType::I32 &&
        plan.version_minor() >= kPlanPipelineMinor)
      expected = PlanDType::I32;
    if (expected == PlanDType::F32) {
      // A float: f32 or bf16 (OpInfo's precision rules).
      const bool mustBeF32 = info->f32Operands >> i & 1;
      if (mustBeF32 ? actual != PlanDType::F32
                    : !isFloatDType(actual, plan.version_minor()))
        fail(at + ": operand " + std::to_string(i) + " must be " +
             (mustBeF32 ? "f32" : "a float tensor") + ", got " +
             dtypeName(actual));
      if (!mustBeF32 && !(info->storedOperands >> i & 1)) {
        if (!activationDType)
          activationDType = actual;
        else if (actual != *activationDType)
          fail(at + ": operand " + std::to_string(i) + " is " +
               dtypeName(actual) + " but the step's other activations are " +
               dtypeName(*activationDType));
      }
    } else if (actual != expected) {
      fail(at + ": operand " + std::to_string(i) + " must be " +
           dtypeName(expected) + ", got " + dtypeName(actual));
    }
    // Integer operands are the program's inputs, or (1.12) i32 blocks of
    // them that element-moving steps made.
    const Storage storage = program.tensors()->Get(id)->storage();
    if (expected != PlanDType::F32 && storage != Storage::Input &&
        !(storage == Storage::Arena && actual == PlanDType::I32))
      fail(at + ": operand " + std::to_string(i) + " must be an input");
    in.push_back(tensors[id]);
  }
  for (size_t i = 0; i < step.results()->size(); ++i) {
    uint32_t id = step.results()->Get(i);
    if (id >= tensors.size())
      fail(at + ": result tensor " + std::to_string(id) + " is out of range");
    const PlanDType dtype = tensors[id].dtype;
    const bool movesIds = i == 0 && info->movesIntegers && !in.empty() &&
                          in[0].dtype == PlanDType::I32;
    if (!movesIds && (info->f32Results >> i & 1
                          ? dtype != PlanDType::F32
                          : !isFloatDType(dtype, plan.version_minor())))
      fail(at + ": result " + std::to_string(i) + " must be " +
           (info->f32Results >> i & 1 ? "f32" : "a float tensor") + ", got " +
           dtypeName(dtype));
    if (i == 0 && info->resultHasOperandDType && !in.empty() &&
        dtype != in[0].dtype)
      fail(at + ": result 0 is " + dtypeName(dtype) +
           " but this kind keeps its operand's " + dtypeName(in[0].dtype));
    const plan::Tensor &t = *program.tensors()->Get(id);
    if (t.storage() != Storage::Arena) {
      // Outside the arena a result may only be a view of its operand or
      // update its operand in place: the same storage slot, never another.
      auto sameSlot = [&](size_t operand) {
        const plan::Tensor &src =
            *program.tensors()->Get(step.operands()->Get(operand));
        return src.storage() == t.storage() && src.index() == t.index();
      };
      bool allowed =
          (info->placement == ResultPlacement::AliasOperand && sameSlot(0)) ||
          (info->placement == ResultPlacement::UpdateInPlace &&
           sameSlot(info->updatedOperand[i]));
      if (!allowed)
        fail(at + ": writes tensor " + std::to_string(id) +
             ", which is not in the arena" +
             (info->placement == ResultPlacement::Arena
                  ? ""
                  : " and not its operand's storage"));
    }
    written[id] = true;
    out.push_back(tensors[id]);
  }
  if (info->async == AsyncRole::Waits) {
    inFlight.erase(step.operands()->Get(0));
    sending.erase(step.operands()->Get(0));
  }
  if (step.kind() == plan::OpKind::RingShiftStart ||
      step.kind() == plan::OpKind::RecvStart)
    inFlight[step.results()->Get(0)] = step.kind();
  if (step.kind() == plan::OpKind::SendStart)
    sending.insert(step.operands()->Get(0));
  if (step.precision() != plan::Precision::F32 &&
      (!info->mixedPrecision || step.precision() > plan::Precision::MAX))
    fail(at + ": precision " +
         std::to_string(static_cast<int>(step.precision())) +
         " is not a matmul's or attention's f32, tf32 or bf16");
  info->check(StepCheck(plan, program, step, at, in, out));
}

/// No two arena tensors that are live at once may share a byte: a compiler
/// bug or a tampered plan (with a recomputed checksum) would otherwise run
/// silently wrong. A tensor is live from the step that writes it to the last
/// step that reads it, or to the end if the program returns it; a view or an
/// in-place update at its operand's offset shares that operand's storage
/// and extends its life. At a step, its operands and results are all live.
/// Sizes are the planned ones (a rebalance point's capacity).
void ProgramChecker::checkArenaLiveRanges() {
  struct Buffer {
    uint64_t begin, end; // bytes
    size_t firstStep, lastStep;
    uint32_t tensor; // the first tensor in it, for messages
  };
  const auto &tensorList = *program.tensors();
  auto arenaBytes = [&](uint32_t id) -> std::pair<uint64_t, uint64_t> {
    const plan::Tensor &t = *tensorList.Get(id);
    uint64_t bytes = dtypeSize(t.dtype());
    for (int64_t d : *t.shape())
      bytes *= uint64_t(d);
    return {t.offset(), t.offset() + bytes};
  };
  auto inArena = [&](uint32_t id) {
    return tensorList.Get(id)->storage() == Storage::Arena;
  };
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> bufferOf(tensorList.size(), kNone);
  std::vector<Buffer> buffers;
  const size_t numSteps = program.steps()->size();
  for (size_t s = 0; s < numSteps; ++s) {
    const plan::Step &step = *program.steps()->Get(s);
    for (uint32_t id : *step.operands())
      if (bufferOf[id] != kNone)
        buffers[bufferOf[id]].lastStep = s;
    const OpInfo *info = findOpInfo(step.kind());
    for (uint32_t id : *step.results()) {
      if (!inArena(id) || bufferOf[id] != kNone) {
        if (bufferOf[id] != kNone)
          buffers[bufferOf[id]].lastStep = s;
        continue;
      }
      auto [begin, end] = arenaBytes(id);
      // A view or in-place update placed at an operand's bytes is that
      // operand's storage.
      size_t shared = kNone;
      if (info->placement != ResultPlacement::Arena)
        for (uint32_t operand : *step.operands())
          if (bufferOf[operand] != kNone &&
              arenaBytes(operand).first == begin &&
              end <= buffers[bufferOf[operand]].end)
            shared = bufferOf[operand];
      if (shared != kNone) {
        bufferOf[id] = shared;
        buffers[shared].lastStep = s;
        continue;
      }
      bufferOf[id] = buffers.size();
      buffers.push_back({begin, end, s, s, id});
    }
  }
  for (uint32_t id : *program.results())
    if (bufferOf[id] != kNone)
      buffers[bufferOf[id]].lastStep = numSteps;

  // Sweep the steps with the live buffers ordered by offset: they are
  // disjoint, so a new one can only collide with its neighbours.
  std::vector<std::vector<size_t>> startsAt(numSteps), endsAt(numSteps + 1);
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (buffers[b].begin == buffers[b].end)
      continue; // no bytes (a rank left no block of a point)
    startsAt[buffers[b].firstStep].push_back(b);
    endsAt[buffers[b].lastStep].push_back(b);
  }
  std::map<uint64_t, size_t> live; // begin -> buffer
  auto collide = [&](size_t a, size_t b) {
    const Buffer &x = buffers[a], &y = buffers[b];
    fail(where + ": tensors " + std::to_string(x.tensor) + " and " +
         std::to_string(y.tensor) + " share arena bytes [" +
         std::to_string(std::max(x.begin, y.begin)) + ", " +
         std::to_string(std::min(x.end, y.end)) +
         ") while both are live (steps " + std::to_string(x.firstStep) + "-" +
         std::to_string(x.lastStep) + " and " + std::to_string(y.firstStep) +
         "-" + std::to_string(y.lastStep) + ")");
  };
  for (size_t s = 0; s <= numSteps; ++s) {
    if (s < numSteps)
      for (size_t b : startsAt[s]) {
        auto next = live.lower_bound(buffers[b].begin);
        if (next != live.end() && buffers[next->second].begin < buffers[b].end)
          collide(next->second, b);
        if (next != live.begin() &&
            buffers[std::prev(next)->second].end > buffers[b].begin)
          collide(std::prev(next)->second, b);
        live.emplace(buffers[b].begin, b);
      }
    for (size_t b : endsAt[s])
      live.erase(buffers[b].begin);
  }
}

void checkVersion(const plan::Plan &p, const std::string &what) {
  if (p.version_major() != kPlanVersionMajor ||
      p.version_minor() > kPlanVersionMinor)
    fail(what + ": plan format version " + std::to_string(p.version_major()) +
         "." + std::to_string(p.version_minor()) +
         " is not supported (this tp-run reads " +
         std::to_string(kPlanVersionMajor) + ".0 to " +
         std::to_string(kPlanVersionMajor) + "." +
         std::to_string(kPlanVersionMinor) + ")");
}

/// Where the content checksum lies in `bytes` (a verified plan), or npos.
size_t checksumOffset(const uint8_t *bytes) {
  const plan::Checksum *checksum = plan::GetPlan(bytes)->content_checksum();
  if (!checksum)
    return std::string::npos;
  return size_t(reinterpret_cast<const uint8_t *>(checksum) - bytes);
}

/// XXH3-64 of `bytes` with the eight at `offset` taken as zero; they are
/// zeroed while hashing and then restored.
uint64_t checksumWithFieldZeroed(std::span<uint8_t> bytes, size_t offset) {
  uint8_t saved[sizeof(uint64_t)];
  std::memcpy(saved, bytes.data() + offset, sizeof saved);
  std::memset(bytes.data() + offset, 0, sizeof saved);
  uint64_t sum = contentChecksum(std::as_bytes(bytes));
  std::memcpy(bytes.data() + offset, saved, sizeof saved);
  return sum;
}

void checkContentChecksum(std::span<uint8_t> bytes, const std::string &what) {
  size_t offset = checksumOffset(bytes.data());
  if (offset == std::string::npos)
    fail(what + ": the plan has no content checksum, which version 1." +
         std::to_string(kPlanChecksumMinor) + " and later require");
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + offset, sizeof stored);
  uint64_t computed = checksumWithFieldZeroed(bytes, offset);
  if (stored != computed)
    fail(what + ": the plan is corrupt: its content checksum is " +
         checksumHex(stored) + " but its bytes hash to " +
         checksumHex(computed));
}

void checkRebalancePoints(const plan::Plan &p, const std::string &what) {
  if (!p.rebalance_points())
    return;
  std::set<std::string> names;
  for (size_t i = 0; i < p.rebalance_points()->size(); ++i) {
    const plan::RebalancePoint &point = *p.rebalance_points()->Get(i);
    std::string subject =
        what + ": rebalance point '" + point.name()->str() + "'";
    if (point.name()->size() == 0 || !names.insert(point.name()->str()).second)
      fail(what + ": rebalance point " + std::to_string(i) +
           " has an empty or repeated name");
    if (point.axis() < 0 || point.axis() >= int64_t(p.grid()->size()))
      fail(subject + " is over axis " + std::to_string(point.axis()) +
           ", which the grid does not have");
    int64_t ranks = p.grid()->Get(point.axis());
    if (point.blocks() < 1 || point.blocks() > kMaxElements ||
        point.blocks() % ranks != 0)
      fail(subject + " has " + std::to_string(point.blocks()) +
           " blocks, not a positive multiple of the axis's " +
           std::to_string(ranks) + " ranks");
    if (point.capacity() < point.blocks() / ranks ||
        point.capacity() > point.blocks())
      fail(subject + " has capacity " + std::to_string(point.capacity()) +
           ", outside [" + std::to_string(point.blocks() / ranks) + ", " +
           std::to_string(point.blocks()) + "]");
  }
}

std::string checkPlan(const plan::Plan &p, int64_t worldSize,
                      const std::string &what) {
  int64_t ranks = 1;
  if (p.grid()->size() == 0 || p.grid()->size() > kMaxRank)
    fail(what + ": the grid must have 1 to " + std::to_string(kMaxRank) +
         " axes");
  for (int64_t size : *p.grid()) {
    if (size < 1 || size > 65536)
      fail(what + ": grid axis of size " + std::to_string(size));
    ranks *= size;
  }
  if (worldSize != kAnyWorldSize && ranks != worldSize)
    fail(what + ": the plan's grid " + shapeString(toVector(p.grid())) +
         " has " + std::to_string(ranks) + " ranks, but " +
         std::to_string(worldSize) + (worldSize == 1 ? " is" : " are") +
         " running");
  checkRebalancePoints(p, what);
  std::set<std::string> names;
  for (size_t i = 0; i < p.params()->size(); ++i) {
    const plan::Param &param = *p.params()->Get(i);
    std::string name = param.name()->str();
    if (name.empty() || !names.insert(name).second)
      fail(what + ": parameter " + std::to_string(i) +
           " has an empty or repeated name '" + name + "'");
    int64_t count =
        checkedElementCount(param.shape(), what + ": parameter '" + name + "'");
    if (param.hf_shape() &&
        checkedElementCount(param.hf_shape(), what + ": parameter '" + name +
                                                  "' hf_shape") != count)
      fail(what + ": parameter '" + name + "' has an hf_shape of " +
           shapeString(toVector(param.hf_shape())) +
           " whose element count differs from its shape " +
           shapeString(toVector(param.shape())));
    if (param.split()) {
      if (param.split()->size() != param.shape()->size())
        fail(what + ": parameter '" + name + "' has a split for " +
             std::to_string(param.split()->size()) + " of its " +
             std::to_string(param.shape()->size()) + " dimensions");
      std::vector<int64_t> shards = splitShards(
          *param.split(), *p.grid(), what + ": parameter '" + name + "'");
      for (size_t d = 0; d < shards.size(); ++d)
        if (param.shape()->Get(d) % shards[d] != 0)
          fail(what + ": parameter '" + name + "' dimension " +
               std::to_string(d) + " does not divide into " +
               std::to_string(shards[d]) + " shards");
    }
    checkRebalanceDims(p, param.rebalance_dims(), param.shape(),
                       what + ": parameter '" + name + "'", /*whole=*/true);
    if (param.rebalance_dims()) {
      // The blocks of a point are the rank's share of exactly its axis, and
      // a parameter's storage holds one such dimension (its blocks are laid
      // out active first, then parked; Executor.h).
      int held = 0;
      for (size_t d = 0; d < param.rebalance_dims()->size(); ++d) {
        int32_t point = param.rebalance_dims()->Get(d);
        if (point < 0)
          continue;
        int64_t axis = p.rebalance_points()->Get(point)->axis();
        const plan::Axes *axes =
            param.split() ? param.split()->Get(d) : nullptr;
        if (++held > 1 || !axes || axes->axes()->size() != 1 ||
            axes->axes()->Get(0) != axis)
          fail(what + ": parameter '" + name + "' dimension " +
               std::to_string(d) +
               " holds rebalance blocks but is not split over exactly the "
               "point's axis " +
               std::to_string(axis) + ", or is its second such dimension");
      }
    }
    if (param.cache_rows() != 0 &&
        p.version_minor() >= kPlanEmbeddingCacheMinor) {
      // A cached table: a cache of some of each rank's rows.
      const int64_t blockRows =
          paramLocalShape(p, param, evenBlocks(p)).front();
      if (param.shape()->size() != 2 || param.rebalance_dims() ||
          param.stage() >= 0 || param.cache_rows() < 1 ||
          param.cache_rows() > blockRows ||
          !(param.cache_ratio() > 0 && param.cache_ratio() <= 1))
        fail(what + ": parameter '" + name + "' is a cached table of " +
             std::to_string(param.cache_rows()) + " rows (ratio " +
             std::to_string(param.cache_ratio()) +
             "); a cache holds 1 to the block's " + std::to_string(blockRows) +
             " rows of a [rows, features] table at a ratio in (0, 1], without "
             "rebalance blocks or pipeline stages");
    }
    if (param.dtype() != PlanDType::F32)
      fail(what + ": parameter '" + name + "' is " + dtypeName(param.dtype()) +
           "; parameters are f32 masters");
    if (param.init() != plan::Init::Normal &&
        param.init() != plan::Init::Zeros && param.init() != plan::Init::Ones)
      fail(what + ": parameter '" + name + "' has an unknown init");
    if (param.init() == plan::Init::Normal &&
        !(param.init_std() >= 0.0 && param.init_std() < 1e6))
      fail(what + ": parameter '" + name + "' has an invalid init_std");
  }
  std::set<std::string> cacheNames;
  for (size_t i = 0; p.caches() && i < p.caches()->size(); ++i) {
    const plan::Cache &cache = *p.caches()->Get(i);
    const std::string name = cache.name()->str();
    if (!cacheNames.insert(name).second)
      fail(what + ": KV cache '" + name + "' appears twice");
    if (!isFloatDType(cache.dtype(), p.version_minor()))
      fail(what + ": KV cache '" + name + "' is " + dtypeName(cache.dtype()) +
           "; KV caches are f32 or (from plan format 1." +
           std::to_string(kPlanBf16Minor) + ") bf16");
    if (cache.shape()->size() < 3 || cache.shape()->size() > kMaxRank)
      fail(what + ": KV cache '" + name + "' has rank " +
           std::to_string(cache.shape()->size()) + " (3 to " +
           std::to_string(kMaxRank) + ": [batch, ..., positions, features])");
    checkedElementCount(cache.shape(), what + ": KV cache '" + name + "'");
  }
  if (p.version_minor() < kPlanPipelineMinor &&
      (p.pipeline() || std::any_of(p.programs()->begin(), p.programs()->end(),
                                   [](const plan::Program *program) {
                                     return program->stage() != -1;
                                   })))
    fail(what + ": pipeline stages are not in plan format 1." +
         std::to_string(p.version_minor()));
  for (const plan::Program *program : *p.programs()) {
    try {
      ProgramChecker(p, *program).check();
    } catch (const PlanError &error) {
      fail(what + ": " + error.what());
    }
  }
  // Names, stages, parameter holders, and the stage programs' transfers
  // replayed together.
  return checkPipeline(p, what);
}
} // namespace

std::vector<int64_t> capacityBlocks(const plan::Plan &plan) {
  std::vector<int64_t> blocks;
  if (plan.rebalance_points())
    for (const plan::RebalancePoint *point : *plan.rebalance_points())
      blocks.push_back(point->capacity());
  return blocks;
}

std::vector<int64_t> evenBlocks(const plan::Plan &plan) {
  std::vector<int64_t> blocks;
  if (plan.rebalance_points())
    for (const plan::RebalancePoint *point : *plan.rebalance_points())
      blocks.push_back(point->blocks() / plan.grid()->Get(point->axis()));
  return blocks;
}

int32_t rebalancePointOf(const plan::Tensor &tensor) {
  if (const auto *dims = tensor.rebalance_dims())
    for (int32_t point : *dims)
      if (point >= 0)
        return point;
  return -1;
}

std::vector<int64_t> activeShape(const plan::Plan &plan,
                                 const plan::Tensor &tensor,
                                 std::span<const int64_t> active) {
  std::vector<int64_t> shape = toVector(tensor.shape());
  if (const auto *dims = tensor.rebalance_dims())
    for (size_t d = 0; d < dims->size(); ++d)
      if (int32_t point = dims->Get(d); point >= 0)
        shape[d] = shape[d] / plan.rebalance_points()->Get(point)->capacity() *
                   active[point];
  return shape;
}

std::vector<int64_t> paramLocalShape(const plan::Plan &plan,
                                     const plan::Param &param,
                                     std::span<const int64_t> blocks) {
  std::vector<int64_t> shape = toVector(param.shape());
  for (size_t d = 0; d < shape.size(); ++d) {
    int32_t point =
        param.rebalance_dims() ? param.rebalance_dims()->Get(d) : -1;
    if (point >= 0) {
      shape[d] = shape[d] / plan.rebalance_points()->Get(point)->blocks() *
                 blocks[point];
      continue;
    }
    if (param.split())
      for (int64_t axis : *param.split()->Get(d)->axes())
        shape[d] /= plan.grid()->Get(axis);
  }
  return shape;
}

void checkProgramAt(const plan::Plan &plan, const plan::Program &program,
                    std::span<const int64_t> active) {
  ProgramChecker(plan, program, active).check();
}

std::vector<int64_t> fileShape(const plan::Param &param) {
  const auto *shape = param.hf_shape() ? param.hf_shape() : param.shape();
  return {shape->begin(), shape->end()};
}

int64_t checkedElementCount(const flatbuffers::Vector<int64_t> *shape,
                            const std::string &what) {
  int64_t count = 1;
  for (int64_t d : *shape) {
    if (d < 0)
      fail(what + " has a negative dimension " + std::to_string(d));
    if (d != 0 && count > kMaxElements / d)
      fail(what + " has more than 2^40 elements");
    count *= d;
  }
  return count;
}

namespace {
/// The flatbuffers Verifier checks a vector's 4-byte length prefix but not
/// that 8-byte elements are 8-byte aligned: a crafted plan could turn every
/// later read of its shapes into a misaligned load (undefined behaviour).
template <typename T>
void checkAligned(const flatbuffers::Vector<T> *vector,
                  const std::string &what) {
  if (vector && vector->size() > 0 && // nothing to load from an empty one
      reinterpret_cast<uintptr_t>(vector->data()) % alignof(T) != 0)
    fail(what + " is not 8-byte aligned (corrupt plan)");
}

void checkAlignment(const plan::Plan &p, const std::string &what) {
  checkAligned(p.grid(), what + ": the grid");
  if (p.params())
    for (const plan::Param *param : *p.params()) {
      checkAligned(param->shape(), what + ": a parameter shape");
      checkAligned(param->hf_shape(), what + ": a parameter hf_shape");
      checkAligned(param->rebalance_dims(),
                   what + ": a parameter's rebalance dims");
      if (param->split())
        for (const plan::Axes *axes : *param->split())
          checkAligned(axes->axes(), what + ": a parameter split");
    }
  if (p.programs())
    for (const plan::Program *program : *p.programs()) {
      if (program->tensors())
        for (const plan::Tensor *tensor : *program->tensors()) {
          checkAligned(tensor->shape(), what + ": a tensor shape");
          checkAligned(tensor->rebalance_dims(),
                       what + ": a tensor's rebalance dims");
        }
      if (program->steps())
        for (const plan::Step *step : *program->steps())
          checkAligned(step->ints(), what + ": a step's integers");
      if (program->inputs())
        for (const plan::Input *input : *program->inputs())
          if (input->split())
            for (const plan::Axes *axes : *input->split())
              checkAligned(axes->axes(), what + ": an input split");
    }
}
} // namespace

bool sealPlan(std::span<uint8_t> bytes) {
  if (bytes.size() < 8 || !plan::PlanBufferHasIdentifier(bytes.data()))
    return false;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  // The generated accessors read scalars in place: they need the alignment
  // the builder gave the buffer.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) != 0 ||
      !plan::VerifyPlanBuffer(verifier))
    return false;
  size_t offset = checksumOffset(bytes.data());
  if (offset == std::string::npos)
    return false;
  uint64_t sum = checksumWithFieldZeroed(bytes, offset);
  std::memcpy(bytes.data() + offset, &sum, sizeof sum); // little-endian, as
                                                        // flatbuffers

  return true;
}

LoadedPlan LoadedPlan::fromBytes(const void *data, size_t size,
                                 int64_t worldSize, const std::string &what) {
  LoadedPlan result;
  result.storage =
      std::make_shared<std::vector<uint64_t>>((size + 7) / 8, uint64_t(0));
  result.size = size;
  if (size > 0) // an empty input may come with a null pointer
    std::memcpy(result.storage->data(), data, size);
  const auto *bytes = reinterpret_cast<const uint8_t *>(result.storage->data());
  if (size < 8 || !plan::PlanBufferHasIdentifier(bytes))
    fail(what + ": not a tpc plan (missing the TPPL file identifier)");
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/64,
                                 /*max_tables=*/10000000);
  if (!plan::VerifyPlanBuffer(verifier))
    fail(what + ": corrupt plan (flatbuffers verification failed)");
  result.root = plan::GetPlan(bytes);
  checkVersion(*result.root, what);
  if (result.root->version_minor() >= kPlanChecksumMinor)
    checkContentChecksum(
        {reinterpret_cast<uint8_t *>(result.storage->data()), result.size},
        what);
  checkAlignment(*result.root, what);
  result.inOrderProblem = checkPlan(*result.root, worldSize, what);
  if (const auto *ids = result.root->eos_token_ids()) {
    if (result.root->version_minor() < kPlanEosMinor)
      fail(what + ": eos_token_ids is not in plan format 1." +
           std::to_string(result.root->version_minor()));
    const int64_t vocab = result.vocabularySize();
    for (int64_t id : *ids)
      if (id < 0 || id >= vocab)
        fail(what + ": end-of-sequence id " + std::to_string(id) +
             " is outside the vocabulary of " + std::to_string(vocab));
  }
  return result;
}

LoadedPlan LoadedPlan::load(const std::string &path, int64_t worldSize) {
  const std::string bytes =
      readRegularFile(path, uint64_t(1) << 31, "plan file");
  return fromBytes(bytes.data(), bytes.size(), worldSize, path);
}

uint64_t LoadedPlan::contentChecksum() const {
  return tpc::runtime::contentChecksum(
      {reinterpret_cast<const std::byte *>(storage->data()), size});
}

int64_t LoadedPlan::targetClasses() const {
  for (const char *name : {"train_step", "loss"}) {
    const plan::Program *p = program(name);
    if (!p)
      continue;
    for (const plan::Step *step : *p->steps()) {
      // The loader checked the operands and the vocabulary axes.
      int64_t local;
      if (step->kind() == OpKind::CrossEntropy) {
        const auto &logits =
            *p->tensors()->Get(step->operands()->Get(0))->shape();
        local = logits.Get(logits.size() - 1);
      } else if (step->kind() == OpKind::LinearCrossEntropy) {
        const auto &weight =
            *p->tensors()->Get(step->operands()->Get(1))->shape();
        local = weight.Get(step->transpose_rhs() ? 0 : 1);
      } else {
        continue;
      }
      if (step->ints())
        for (int64_t axis : *step->ints())
          local *= root->grid()->Get(axis);
      return local;
    }
  }
  return vocabularySize();
}

int64_t LoadedPlan::vocabularySize() const {
  for (const plan::Program *program : *root->programs()) {
    // The table may reach the lookup through steps of its own (2D gathers
    // it, bf16 converts it): follow first operands back to the parameter.
    std::vector<const plan::Step *> producer(program->tensors()->size());
    for (const plan::Step *step : *program->steps())
      for (uint32_t result : *step->results())
        producer[result] = step;
    for (const plan::Step *step : *program->steps()) {
      if (step->kind() != OpKind::Embedding)
        continue;
      // The loader checked every operand, storage and index.
      uint32_t id = step->operands()->Get(0);
      for (size_t hops = 0; hops < producer.size(); ++hops) {
        const plan::Tensor &table = *program->tensors()->Get(id);
        if (table.storage() == Storage::Param)
          return root->params()->Get(table.index())->shape()->Get(0);
        const plan::Step *from = producer[id];
        if (!from || from->operands()->size() == 0)
          break;
        id = from->operands()->Get(0);
      }
    }
  }
  return 0;
}

std::optional<OptimizerSettings>
optimizerSettings(const plan::Program &program) {
  std::optional<OptimizerSettings> settings;
  for (const plan::Step *step : *program.steps()) {
    if (step->kind() != OpKind::AdamW)
      continue;
    if (!settings) {
      settings.emplace();
      settings->beta1 = step->beta1();
      settings->beta2 = step->beta2();
      settings->epsilon = step->epsilon();
    }
    ++settings->parameters;
    if (step->weight_decay() > 0) {
      ++settings->decayedParameters;
      settings->weightDecay = step->weight_decay();
    }
  }
  return settings;
}

std::vector<int32_t> LoadedPlan::endTokenIds() const {
  std::vector<int32_t> ids;
  const int64_t vocab = vocabularySize();
  auto add = [&](int64_t id) {
    if (id >= 0 && id < vocab)
      ids.push_back(int32_t(id));
  };
  if (const auto *resolved = root->eos_token_ids()) {
    for (int64_t id : *resolved)
      add(id);
    return ids;
  }
  const auto *text = root->hf_config();
  if (!text || text->size() == 0)
    return ids;
  const auto config = nlohmann::json::parse(text->str(), nullptr,
                                            /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("eos_token_id"))
    return ids;
  const auto &eos = config["eos_token_id"];
  for (const auto &id : eos.is_array() ? eos : nlohmann::json::array({eos}))
    if (id.is_number_integer())
      add(id.get<int64_t>());
  return ids;
}

const plan::Program *LoadedPlan::program(const std::string &name) const {
  return program(name, root->pipeline() ? 0 : -1);
}

const plan::Program *LoadedPlan::program(const std::string &name, int64_t stage,
                                         int64_t cut) const {
  const plan::Program *everyRank = nullptr;
  for (const plan::Program *p : *root->programs()) {
    if (p->name()->str() != name)
      continue;
    if (p->stage() == -1)
      everyRank = p;
    else if (p->stage() == stage && servesCut(*p, cut))
      return p;
  }
  return everyRank;
}

int64_t LoadedPlan::numCuts() const {
  const plan::Pipeline *pipeline = root->pipeline();
  return pipeline && pipeline->cuts() ? int64_t(pipeline->cuts()->size()) : 1;
}

int64_t paramStage(const plan::Param &param, int64_t cut) {
  if (param.cut_stages() && cut >= 0 &&
      size_t(cut) < param.cut_stages()->size())
    return param.cut_stages()->Get(size_t(cut));
  return param.stage();
}

bool servesCut(const plan::Program &program, int64_t cut) {
  if (!program.cuts())
    return cut == 0;
  return std::find(program.cuts()->begin(), program.cuts()->end(),
                   uint32_t(cut)) != program.cuts()->end();
}

int64_t LoadedPlan::stageOf(const std::vector<int64_t> &coords) const {
  const plan::Pipeline *pipeline = root->pipeline();
  if (!pipeline)
    return -1;
  // The loader checked the axis against the grid.
  return coords.empty() ? 0 : coords[size_t(pipeline->axis())];
}

std::vector<int64_t> LoadedPlan::wholeInputShape(const std::string &name,
                                                 plan::InputKind kind) const {
  const plan::Program *p = program(name);
  if (!p)
    return {};
  for (const plan::Input *input : *p->inputs()) {
    if (input->kind() != kind)
      continue;
    const plan::Tensor &t = *p->tensors()->Get(input->tensor());
    std::vector<int64_t> whole(t.shape()->begin(), t.shape()->end());
    // The loader checked the split against the input's rank.
    for (size_t d = 0; input->split() && d < input->split()->size(); ++d)
      for (int64_t axis : *input->split()->Get(d)->axes())
        whole[d] *= root->grid()->Get(axis);
    return whole;
  }
  return {};
}

void LoadedPlan::printJson(std::ostream &os) const {
  using Json = nlohmann::ordered_json;
  auto array = [](const auto *vector) {
    Json json = Json::array();
    if (vector)
      for (auto value : *vector)
        json.push_back(value);
    return json;
  };
  const plan::Plan &p = *root;
  Json json;
  json["version"] = std::to_string(p.version_major()) + "." +
                    std::to_string(p.version_minor());
  if (p.content_checksum())
    json["content_checksum"] = checksumHex(p.content_checksum()->xxh3());
  json["grid"] = array(p.grid());
  json["model_type"] = p.model_type() ? p.model_type()->str() : "";
  if (p.eos_token_ids())
    json["eos_token_ids"] = array(p.eos_token_ids());
  json["params"] = Json::array();
  for (const plan::Param *param : *p.params()) {
    Json entry = {{"name", param->name()->str()},
                  {"dtype", dtypeName(param->dtype())},
                  {"shape", array(param->shape())}};
    if (param->hf_shape())
      entry["hf_shape"] = array(param->hf_shape());
    if (param->split()) {
      entry["split"] = Json::array();
      for (const plan::Axes *axes : *param->split())
        entry["split"].push_back(array(axes->axes()));
    }
    if (param->rebalance_dims())
      entry["rebalance_dims"] = array(param->rebalance_dims());
    if (param->stage() >= 0)
      entry["stage"] = param->stage();
    if (param->cut_stages())
      entry["cut_stages"] = array(param->cut_stages());
    if (param->cache_rows() != 0) {
      entry["cache_rows"] = param->cache_rows();
      entry["cache_ratio"] = param->cache_ratio();
    }
    entry["init"] = plan::EnumNameInit(param->init());
    if (param->init() == plan::Init::Normal)
      entry["init_std"] = param->init_std();
    json["params"].push_back(std::move(entry));
  }
  if (p.rebalance_points()) {
    json["rebalance_points"] = Json::array();
    for (const plan::RebalancePoint *point : *p.rebalance_points())
      json["rebalance_points"].push_back({{"name", point->name()->str()},
                                          {"axis", point->axis()},
                                          {"blocks", point->blocks()},
                                          {"capacity", point->capacity()}});
  }
  if (p.caches()) {
    json["caches"] = Json::array();
    for (const plan::Cache *cache : *p.caches())
      json["caches"].push_back({{"name", cache->name()->str()},
                                {"dtype", dtypeName(cache->dtype())},
                                {"shape", array(cache->shape())}});
  }
  if (const plan::Pipeline *pipeline = p.pipeline()) {
    json["pipeline"] = {{"axis", pipeline->axis()},
                        {"stages", pipeline->stages()},
                        {"microbatches", pipeline->microbatches()},
                        {"chunks", pipeline->chunks()},
                        {"schedule", pipeline->schedule()->str()},
                        {"layers", array(pipeline->layers())}};
    if (pipeline->layer_seconds())
      json["pipeline"]["layer_seconds"] = array(pipeline->layer_seconds());
    if (pipeline->cuts()) {
      Json cuts = Json::array();
      for (const plan::StageCut *cut : *pipeline->cuts())
        cuts.push_back(array(cut->layers()));
      json["pipeline"]["cuts"] = std::move(cuts);
    }
  }
  json["programs"] = Json::array();
  for (const plan::Program *program : *p.programs()) {
    Json entry = {{"name", program->name()->str()},
                  {"arena_bytes", program->arena_bytes()}};
    if (program->stage() >= 0)
      entry["stage"] = program->stage();
    if (program->cuts())
      entry["cuts"] = array(program->cuts());
    entry["inputs"] = Json::array();
    for (const plan::Input *input : *program->inputs()) {
      Json item = {{"kind", plan::EnumNameInputKind(input->kind())},
                   {"tensor", input->tensor()}};
      if (isCacheInput(input->kind()))
        item["param"] = input->param();
      entry["inputs"].push_back(std::move(item));
    }
    entry["results"] = array(program->results());
    if (program->result_names()) {
      entry["result_names"] = Json::array();
      for (const flatbuffers::String *name : *program->result_names())
        entry["result_names"].push_back(name->str());
    }
    entry["tensors"] = Json::array();
    for (size_t i = 0; i < program->tensors()->size(); ++i) {
      const plan::Tensor &t = *program->tensors()->Get(i);
      Json tensor = {{"id", i},
                     {"dtype", dtypeName(t.dtype())},
                     {"shape", array(t.shape())},
                     {"storage", plan::EnumNameStorage(t.storage())}};
      if (t.rebalance_dims())
        tensor["rebalance_dims"] = array(t.rebalance_dims());
      if (t.storage() == Storage::Arena)
        tensor["offset"] = t.offset();
      else
        tensor["index"] = t.index();
      entry["tensors"].push_back(std::move(tensor));
    }
    entry["steps"] = Json::array();
    for (const plan::Step *s : *program->steps()) {
      Json step = {{"op", opKindName(s->kind())},
                   {"operands", array(s->operands())},
                   {"results", array(s->results())}};
      if (s->transpose_lhs())
        step["transpose_lhs"] = true;
      if (s->transpose_rhs())
        step["transpose_rhs"] = true;
      if (s->causal())
        step["causal"] = true;
      if (s->inverse())
        step["inverse"] = true;
      if (s->epsilon() != 0.0)
        step["epsilon"] = s->epsilon();
      if (s->alpha() != 1.0)
        step["alpha"] = s->alpha();
      if (s->precision() != plan::Precision::F32)
        step["precision"] = plan::EnumNamePrecision(s->precision());
      if (s->gelu())
        step["gelu"] = true;
      if (s->chunk() != 0)
        step["chunk"] = s->chunk();
      if (s->kind() == OpKind::AllGather ||
          s->kind() == OpKind::ReduceScatter ||
          s->kind() == OpKind::LocalSplit || s->kind() == OpKind::AllToAll)
        step["dim"] = s->dim();
      if (s->kind() == OpKind::AllToAll)
        step["target_dim"] = s->target_dim();
      if (s->kind() == OpKind::Scale)
        step["factor"] = s->factor();
      if (s->kind() == OpKind::Rotary)
        step["theta"] = s->theta();
      if (s->kind() == OpKind::SendStart || s->kind() == OpKind::SendWait ||
          s->kind() == OpKind::RecvStart) {
        step["peer"] = s->peer();
        step["tag"] = s->tag();
      }
      if (s->ints() && s->ints()->size())
        step["ints"] = array(s->ints());
      if (s->location() && s->location()->size())
        step["location"] = s->location()->str();
      entry["steps"].push_back(std::move(step));
    }
    json["programs"].push_back(std::move(entry));
  }
  os << json.dump(2) << "\n";
}

} // namespace tpc::runtime
