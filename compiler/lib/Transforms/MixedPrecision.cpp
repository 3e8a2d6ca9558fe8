//===- MixedPrecision.cpp - bf16 activations, f32 masters -----------------===//
//
// Assigns storage types before differentiation, in the way PyTorch's
// autocast decides per op: an op whose activations include a bf16 value or
// a parameter runs on bf16 activations (parameters converted once per
// function); an accumulating op that reads none (an embedding lookup) also
// stores bf16; everything else keeps its types.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPMIXEDPRECISION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

RankedTensorType floatTensorType(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType()) ? type : nullptr;
}

RankedTensorType withElementType(RankedTensorType type, Type element) {
  return RankedTensorType::get(type.getShape(), element, type.getEncoding());
}

class FunctionRetyper {
public:
  FunctionRetyper(func::FuncOp func)
      : func(func), storage(BFloat16Type::get(func.getContext())) {}

  LogicalResult run();

private:
  /// A parameter, or a view of one (which stays in the parameter's type:
  /// its consumer converts only the elements it reads).
  bool isWeight(Value value) const { return weights.contains(value); }
  /// `value` in the storage type, converted before `user` (once per value).
  Value narrowed(Value value, Operation *user);
  LogicalResult retype(Operation *op);

  func::FuncOp func;
  Type storage;
  DenseSet<Value> weights;
  DenseMap<Value, Value> copies;
};

Value FunctionRetyper::narrowed(Value value, Operation *user) {
  auto [it, inserted] = copies.try_emplace(value);
  if (inserted) {
    OpBuilder builder(user);
    auto convert = ConvertOp::create(
        builder, value.getLoc(),
        withElementType(floatTensorType(value), storage), value);
    // Part of its first user's layer, so that layer recomputation makes the
    // copy again instead of keeping it from the forward to the backward.
    if (Attribute layer =
            user->getAttr(TPDialect::LayerAttrHelper::getNameStr()))
      convert->setAttr(TPDialect::LayerAttrHelper::getNameStr(), layer);
    it->second = convert;
  }
  return it->second;
}

LogicalResult FunctionRetyper::retype(Operation *op) {
  auto precision = dyn_cast<MixedPrecisionOpInterface>(op);
  if (!precision)
    return op->emitOpError()
           << "tp-mixed-precision: not a tp op with element type rules";
  // Activation operands: those sharing the op's storage type.
  SmallVector<OpOperand *> activations;
  bool lowPrecision = false, readsWeight = false;
  for (OpOperand &operand : op->getOpOperands()) {
    RankedTensorType type = floatTensorType(operand.get());
    if (!type || precision.readsOperandAsStored(operand.getOperandNumber()))
      continue;
    activations.push_back(&operand);
    lowPrecision |= type.getElementType() == storage;
    readsWeight |= isWeight(operand.get());
  }
  bool freeResult =
      llvm::any_of(llvm::seq<unsigned>(0, op->getNumResults()),
                   [&](unsigned i) { return precision.hasFreeResultType(i); });
  if (op->hasTrait<OpTrait::tp::IsView>()) {
    // A view of a weight is a weight; a view of an activation keeps its
    // type, which the result follows.
    if (llvm::any_of(activations, [&](OpOperand *operand) {
          return isWeight(operand->get());
        }))
      for (Value result : op->getResults())
        weights.insert(result);
    readsWeight = false;
  }
  bool toStorage =
      lowPrecision || readsWeight || (activations.empty() && freeResult);
  if (!toStorage)
    return success();
  for (OpOperand *operand : activations)
    if (floatTensorType(operand->get()).getElementType() != storage)
      operand->set(narrowed(operand->get(), op));

  // Results: free ones take the storage type, the rest what the op infers
  // from its retyped operands (statistics stay f32) or, for ops whose
  // results are written out, the activations' type.
  SmallVector<Type> inferred;
  if (auto infer = dyn_cast<InferTypeOpInterface>(op))
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), inferred)))
      return op->emitOpError() << "tp-mixed-precision: cannot infer the "
                                  "result types of the retyped op";
  for (OpResult result : op->getResults()) {
    RankedTensorType type = floatTensorType(result);
    if (!type)
      continue;
    Type element = storage;
    if (!precision.hasFreeResultType(result.getResultNumber()) &&
        !inferred.empty())
      element = cast<RankedTensorType>(inferred[result.getResultNumber()])
                    .getElementType();
    result.setType(withElementType(type, element));
  }
  return success();
}

LogicalResult FunctionRetyper::run() {
  Block &block = func.getBody().front();
  for (BlockArgument arg : block.getArguments()) {
    RankedTensorType type = floatTensorType(arg);
    if (!type)
      continue;
    if (func.getArgAttr(arg.getArgNumber(),
                        TPDialect::ParamAttrHelper::getNameStr()))
      weights.insert(arg);
    // KV caches hold activations (keys and values).
    if (func.getArgAttr(arg.getArgNumber(),
                        TPDialect::CacheAttrHelper::getNameStr()))
      arg.setType(withElementType(type, storage));
  }
  for (Operation &op : llvm::make_early_inc_range(block.without_terminator()))
    if (!isa<ConvertOp>(op) && failed(retype(&op)))
      return failure();
  func.setFunctionType(
      FunctionType::get(func.getContext(), block.getArgumentTypes(),
                        block.getTerminator()->getOperandTypes()));
  return success();
}

struct TPMixedPrecision
    : public tp::impl::TPMixedPrecisionBase<TPMixedPrecision> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && failed(FunctionRetyper(func).run()))
        return signalPassFailure();
  }
};

} // namespace
