//===- PlanMemory.cpp - liveness-based activation buffer reuse ------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPPLANMEMORY
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
struct Buffer {
  int64_t bytes;
  int64_t firstUse; // index of the defining op
  int64_t lastUse;  // index of the last op reading it (or the end)
  int64_t offset = -1;
};

int64_t alignTo(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

int64_t byteSize(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

struct TPPlanMemory : public tp::impl::TPPlanMemoryBase<TPPlanMemory> {
  using TPPlanMemoryBase::TPPlanMemoryBase;

  void runOnOperation() override {
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      getOperation()->emitError()
          << "tp-plan-memory: alignment must be a power of two, got "
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && failed(planFunction(func)))
        return signalPassFailure();
  }

  LogicalResult planFunction(func::FuncOp func);
};
} // namespace

LogicalResult TPPlanMemory::planFunction(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return func.emitOpError() << "tp-plan-memory expects a single block";
  Block &block = func.getBody().front();

  // Values -> buffers; reshapes alias their input's buffer (or argument).
  SmallVector<Buffer> buffers;
  DenseMap<Value, int64_t> bufferOf;
  int64_t end = 0;
  for (auto [index, op] : llvm::enumerate(block)) {
    end = index;
    for (Value operand : op.getOperands())
      if (auto it = bufferOf.find(operand); it != bufferOf.end())
        buffers[it->second].lastUse = index;
    // Views (a reshape) live in their operand's buffer.
    if (auto alias = dyn_cast<StorageAliasOpInterface>(op);
        alias && alias.alwaysSharesStorage()) {
      for (OpResult result : op.getResults())
        if (auto it = bufferOf.find(op.getOperand(
                *alias.getStorageOperand(result.getResultNumber())));
            it != bufferOf.end())
          bufferOf[result] = it->second;
      continue;
    }
    for (Value result : op.getResults()) {
      if (!isa<RankedTensorType>(result.getType()))
        return op.emitOpError() << "tp-plan-memory: result of type "
                                << result.getType() << " is not a tensor";
      bufferOf[result] = buffers.size();
      buffers.push_back({byteSize(result), int64_t(index), int64_t(index)});
    }
  }
  // Function results stay live to the end.
  for (Value result : block.getTerminator()->getOperands())
    if (auto it = bufferOf.find(result); it != bufferOf.end())
      buffers[it->second].lastUse = end + 1;

  // A result returned as the update of the argument whose storage it may
  // reuse (tp.updates; AdamW's parameter and moments) is written in place:
  // no buffer. Safe because such updates are elementwise and, checked here,
  // nothing after the op reads the old value.
  for (auto [idx, result] :
       llvm::enumerate(block.getTerminator()->getOperands())) {
    auto updates = func.getResultAttrOfType<IntegerAttr>(
        idx, TPDialect::UpdatesAttrHelper::getNameStr());
    if (!updates)
      continue;
    // The runtime keeps no copy of an update: it must be written in place
    // (AdamW's, where the planner allows it; a KV cache write's, always).
    auto update = result.getDefiningOp<StorageAliasOpInterface>();
    std::optional<unsigned> operand;
    if (update)
      operand =
          update.getStorageOperand(cast<OpResult>(result).getResultNumber());
    if (!operand)
      return func.emitOpError()
             << "tp-plan-memory: result #" << idx << " updates argument #"
             << updates.getInt()
             << " but is not an in-place update of it (the runtime updates "
                "arguments in their own storage)";
    unsigned which = cast<OpResult>(result).getResultNumber();
    Value source = update->getOperand(*operand);
    auto arg = dyn_cast<BlockArgument>(source);
    if (!arg || arg.getArgNumber() != updates.getInt())
      return update.emitOpError()
             << "tp-plan-memory: result #" << which << " updates argument #"
             << updates.getInt()
             << " but does not read it in the same position";
    for (Operation *user : arg.getUsers())
      if (user != update && update->isBeforeInBlock(user) &&
          !isa<func::ReturnOp>(user))
        return user->emitOpError()
               << "tp-plan-memory: reads argument #" << arg.getArgNumber()
               << " after its in-place update";
    if (auto it = bufferOf.find(result); it != bufferOf.end()) {
      buffers[it->second].bytes = 0;
      bufferOf.erase(it);
    }
  }

  // Greedy by size: largest first, each at the lowest aligned offset that
  // no already placed, lifetime-overlapping buffer occupies.
  SmallVector<int64_t> order(buffers.size());
  for (auto [idx, slot] : llvm::enumerate(order))
    slot = idx;
  llvm::sort(order, [&](int64_t a, int64_t b) {
    return std::make_pair(-buffers[a].bytes, a) <
           std::make_pair(-buffers[b].bytes, b);
  });
  SmallVector<int64_t> placed;
  int64_t arenaBytes = 0;
  SmallVector<std::pair<int64_t, int64_t>> busy; // [offset, offset + bytes)
  for (int64_t idx : order) {
    Buffer &buffer = buffers[idx];
    if (buffer.bytes == 0) {
      buffer.offset = 0; // empty (the rest are too: largest first)
      continue;
    }
    busy.clear();
    for (int64_t other : placed) {
      const Buffer &o = buffers[other];
      if (!reuse ||
          (o.firstUse <= buffer.lastUse && buffer.firstUse <= o.lastUse))
        busy.push_back({o.offset, o.offset + o.bytes});
    }
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [begin, finish] : busy) {
      if (offset + buffer.bytes <= begin)
        break;
      offset = std::max(offset, alignTo(finish, alignment));
    }
    buffer.offset = offset;
    placed.push_back(idx);
    arenaBytes = std::max(arenaBytes, offset + buffer.bytes);
  }

  Builder builder(func.getContext());
  for (Operation &op : block.without_terminator()) {
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults()) {
      auto it = bufferOf.find(result);
      offsets.push_back(it == bufferOf.end() ? -1 : buffers[it->second].offset);
    }
    op.setAttr(TPDialect::BufferOffsetsAttrHelper::getNameStr(),
               builder.getDenseI64ArrayAttr(offsets));
  }
  func->setAttr(TPDialect::ArenaBytesAttrHelper::getNameStr(),
                builder.getI64IntegerAttr(arenaBytes));
  return success();
}
