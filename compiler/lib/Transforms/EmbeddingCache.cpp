//===- EmbeddingCache.cpp - host-resident embedding tables ----------------===//
//
// Rewrites each untied input embedding table of the per-rank program into a
// cache of some of the rank's rows (docs/embedding-cache.md): the programs
// index it through a slot map the runtime feeds, and the update is
// row-sparse (lazy Adam) over the rows the batch uses, listed by ascending
// row so that no sum depends on where a row is cached.
//
//===----------------------------------------------------------------------===//

#include "FunctionAttrs.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

#include <cmath>

namespace mlir::tp {
#define GEN_PASS_DEF_TPEMBEDDINGCACHE
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `value` retyped to `rows` rows: the cache's shape of a table-shaped
/// value.
void setRows(Value value, int64_t rows) {
  auto type = tensorType(value);
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = rows;
  value.setType(type.clone(shape));
}

/// The arguments of one cached table in one function.
struct CachedTable {
  StringAttr name;
  BlockArgument value;
  SmallVector<BlockArgument, 2> moments;
  int64_t blockRows = 0, slots = 0;
};

/// An op a gradient may pass through on its way to the update: it keeps
/// the type (a sum of cotangents, an all-reduce over replicas).
bool keepsType(Operation *op) {
  return op->getNumResults() == 1 && op->getNumOperands() >= 1 &&
         llvm::all_of(op->getOperandTypes(), [&](Type type) {
           return type == op->getResult(0).getType();
         });
}

/// Whether `lookup` reads the function's token ids, the ids the runtime
/// caches the rows of.
bool readsTokens(func::FuncOp func, EmbeddingOp lookup) {
  auto ids = dyn_cast<BlockArgument>(lookup.getIds());
  if (!ids || ids.getOwner() != &func.getBody().front())
    return false;
  auto role = func.getArgAttrOfType<StringAttr>(
      ids.getArgNumber(), TPDialect::InputAttrHelper::getNameStr());
  return role && role.getValue() == "tokens";
}

struct TPEmbeddingCache
    : public tp::impl::TPEmbeddingCacheBase<TPEmbeddingCache> {
  using TPEmbeddingCacheBase::TPEmbeddingCacheBase;
  void runOnOperation() override;

private:
  LogicalResult rewrite(func::FuncOp func);
  /// Appends an i32 input argument of `shape` for `table`.
  BlockArgument addInput(func::FuncOp func, StringRef kind,
                         const CachedTable &table, int64_t size);
  /// The tokens a step's batch holds on all ranks, from the embedding's
  /// ids when they are an input (its layout gives the whole batch).
  std::optional<int64_t> wholeTokens(func::FuncOp func, Value ids);
};

BlockArgument TPEmbeddingCache::addInput(func::FuncOp func, StringRef kind,
                                         const CachedTable &table,
                                         int64_t size) {
  Builder b(&getContext());
  unsigned at = func.getNumArguments();
  DictionaryAttr attrs = b.getDictionaryAttr(
      {b.getNamedAttr(TPDialect::InputAttrHelper::getNameStr(),
                      b.getStringAttr(kind)),
       b.getNamedAttr(TPDialect::CacheOfAttrHelper::getNameStr(), table.name)});
  (void)func.insertArgument(at, RankedTensorType::get({size}, b.getI32Type()),
                            attrs, func.getLoc());
  return func.getArgument(at);
}

std::optional<int64_t> TPEmbeddingCache::wholeTokens(func::FuncOp func,
                                                     Value ids) {
  auto arg = dyn_cast<BlockArgument>(ids);
  if (!arg || arg.getOwner() != &func.getBody().front())
    return std::nullopt;
  int64_t tokens = tensorType(ids).getNumElements();
  auto layout = func.getArgAttrOfType<DistAttr>(
      arg.getArgNumber(), TPDialect::LayoutAttrHelper::getNameStr());
  if (!layout)
    return tokens;
  auto grid =
      SymbolTable::lookupNearestSymbolFrom<GridOp>(func, layout.getGrid());
  if (!grid)
    return std::nullopt;
  for (int64_t d = 0; d < int64_t(layout.getSplit().size()); ++d)
    for (int64_t axis : layout.getSplitAxes(d))
      tokens *= grid.getShape()[axis];
  return tokens;
}

LogicalResult TPEmbeddingCache::rewrite(func::FuncOp func) {
  Block &block = func.getBody().front();
  // The tables: parameters some embedding reads as its table.
  SmallVector<CachedTable> tables;
  for (BlockArgument arg : block.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), TPDialect::ParamAttrHelper::getNameStr());
    if (!name || func.getArgAttr(arg.getArgNumber(),
                                 TPDialect::StateAttrHelper::getNameStr()))
      continue;
    // A table looked up by the step's token ids (a position table is read
    // densely: every position every step).
    bool looksUpTokens = llvm::any_of(arg.getUsers(), [&](Operation *user) {
      auto lookup = dyn_cast<EmbeddingOp>(user);
      return lookup && lookup.getTable() == arg && readsTokens(func, lookup);
    });
    if (!looksUpTokens)
      continue;
    for (OpOperand &use : arg.getUses()) {
      auto lookup = dyn_cast<EmbeddingOp>(use.getOwner());
      auto update = dyn_cast<AdamWOp>(use.getOwner());
      if ((lookup && use.getOperandNumber() == 0) ||
          (update && use.getOperandNumber() == 0))
        continue;
      return use.getOwner()->emitOpError()
             << "tp-embedding-cache: '" << name.getValue()
             << "' is an embedding table that this op reads too (a tied "
                "table, read whole every step); only an untied input "
                "embedding can be cached";
    }
    CachedTable table;
    table.name = name;
    table.value = arg;
    table.blockRows = tensorType(arg).getDimSize(0);
    table.slots = std::clamp<int64_t>(
        int64_t(std::ceil(double(ratio) * double(table.blockRows))), 1,
        table.blockRows);
    for (BlockArgument other : block.getArguments())
      if (other != arg &&
          func.getArgAttr(other.getArgNumber(),
                          TPDialect::ParamAttrHelper::getNameStr()) == name)
        table.moments.push_back(other);
    tables.push_back(table);
  }

  Builder b(&getContext());
  for (CachedTable &table : tables) {
    // The cache and its moments: `slots` rows of the block.
    auto shrink = [&](BlockArgument arg) {
      setRows(arg, table.slots);
      func.setArgAttr(
          arg.getArgNumber(), TPDialect::EmbeddingCacheAttrHelper::getNameStr(),
          b.getDictionaryAttr(
              {b.getNamedAttr("rows", b.getI64IntegerAttr(table.blockRows)),
               b.getNamedAttr("ratio", b.getF64FloatAttr(double(ratio)))}));
    };
    shrink(table.value);
    for (BlockArgument moment : table.moments)
      shrink(moment);
    BlockArgument map = addInput(func, "cache_map", table, table.blockRows);

    // Lookups index the cache through the map; so do their gradients,
    // found from the update's gradient back through sums and all-reduces.
    SmallVector<AdamWOp> updates;
    for (Operation *user : table.value.getUsers()) {
      if (auto lookup = dyn_cast<EmbeddingOp>(user)) {
        if (!readsTokens(func, lookup))
          return lookup.emitOpError()
                 << "tp-embedding-cache: '" << table.name.getValue()
                 << "' is looked up by other ids than the step's tokens";
        lookup.getSlotMapMutable().assign(map);
      } else if (auto update = dyn_cast<AdamWOp>(user))
        updates.push_back(update);
    }
    if (updates.empty())
      continue;
    if (updates.size() != 1)
      return updates[1].emitOpError()
             << "tp-embedding-cache: '" << table.name.getValue()
             << "' is updated twice";
    AdamWOp update = updates.front();
    // The embeddings' gradients: back from the update's gradient through
    // sums and all-reduces.
    SmallVector<EmbeddingGradOp> scatters;
    SmallVector<Value> pending = {update.getGrad()};
    llvm::DenseSet<Value> visited;
    std::optional<int64_t> tokens;
    while (!pending.empty()) {
      Value value = pending.pop_back_val();
      if (!visited.insert(value).second)
        continue;
      Operation *producer = value.getDefiningOp();
      if (auto scatter = dyn_cast_or_null<EmbeddingGradOp>(producer)) {
        scatters.push_back(scatter);
        std::optional<int64_t> whole = wholeTokens(func, scatter.getIds());
        tokens = whole ? std::max(tokens.value_or(0), *whole)
                       : std::optional<int64_t>(table.blockRows);
        continue;
      }
      if (!producer || !keepsType(producer))
        return update.emitOpError()
               << "tp-embedding-cache: the gradient of '"
               << table.name.getValue()
               << "' must come from its embeddings' gradients through sums "
                  "and all-reduces";
      llvm::append_range(pending, producer->getOperands());
    }
    // Everything the gradients flow into is cache-shaped too: sums and
    // collectives on the way to the clipping norms and the update, which
    // become row-sparse.
    llvm::DenseSet<Operation *> cacheShaped;
    SmallVector<Operation *> norms;
    SmallVector<Value> flowing;
    for (EmbeddingGradOp scatter : scatters) {
      scatter.getSlotMapMutable().assign(map);
      cacheShaped.insert(scatter);
      flowing.push_back(scatter.getResult());
    }
    while (!flowing.empty()) {
      Value value = flowing.pop_back_val();
      for (OpOperand &use : value.getUses()) {
        Operation *user = use.getOwner();
        if (user == update && use.getOperandNumber() == 1)
          continue;
        if (isa<NormSquaredOp>(user)) {
          norms.push_back(user);
          continue;
        }
        if (!keepsType(user))
          return user->emitOpError()
                 << "tp-embedding-cache: the gradient of '"
                 << table.name.getValue()
                 << "' may only be summed, all-reduced, clipped and "
                    "applied, not read here";
        if (cacheShaped.insert(user).second)
          flowing.push_back(user->getResult(0));
      }
    }
    for (Operation *op : cacheShaped)
      for (Value operand : op->getOperands())
        if (!isa<EmbeddingGradOp>(op) &&
            !cacheShaped.contains(operand.getDefiningOp()))
          return op->emitOpError()
                 << "tp-embedding-cache: the gradient of '"
                 << table.name.getValue()
                 << "' is summed with a value that is not its own";
    for (Operation *op : cacheShaped)
      setRows(op->getResult(0), table.slots);
    Value grad = update.getGrad();

    // The rows the batch updates, and the row-sparse norm and update.
    const int64_t listed =
        std::min(table.blockRows, tokens.value_or(table.blockRows));
    BlockArgument rows = addInput(func, "cache_rows", table, listed);
    for (Operation *user : norms) {
      auto norm = cast<NormSquaredOp>(user);
      OpBuilder builder(norm);
      auto sparse = NormSquaredRowsOp::create(builder, norm.getLoc(),
                                              norm.getInput(), rows);
      sparse->setDiscardableAttrs(norm->getDiscardableAttrDictionary());
      norm.replaceAllUsesWith(sparse.getResult());
      norm.erase();
    }
    OpBuilder builder(update);
    auto sparse = AdamWRowsOp::create(
        builder, update.getLoc(), update.getParam(), grad, update.getExpAvg(),
        update.getExpAvgSq(), rows, update.getLr(), update.getStep(),
        update.getGradScale(), update.getBeta1Attr(), update.getBeta2Attr(),
        update.getEpsilonAttr(), update.getWeightDecayAttr());
    sparse->setDiscardableAttrs(update->getDiscardableAttrDictionary());
    update.replaceAllUsesWith(sparse.getResults());
    update.erase();
  }
  // Results that pass a cache on (the updates) take its type.
  if (!tables.empty())
    func.setFunctionType(
        FunctionType::get(&getContext(), block.getArgumentTypes(),
                          block.getTerminator()->getOperandTypes()));
  return success();
}

void TPEmbeddingCache::runOnOperation() {
  if (!(ratio > 0 && ratio <= 1)) {
    getOperation().emitError() << "tp-embedding-cache: ratio must be in (0, "
                                  "1], got "
                               << double(ratio);
    return signalPassFailure();
  }
  for (auto func : getOperation().getOps<func::FuncOp>())
    if (failed(rewrite(func)))
      return signalPassFailure();
}

} // namespace
