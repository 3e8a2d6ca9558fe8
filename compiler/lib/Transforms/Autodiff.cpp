//===- Autodiff.cpp - reverse-mode differentiation and the train step -----===//
//
// @loss -> @gradients (forward, then one vector-Jacobian product per op in
// reverse order) -> @train_step (gradients, then clipping, the learning-rate
// schedule and AdamW, all as tp ops).
//
//===----------------------------------------------------------------------===//

#include "FunctionAttrs.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPAUTODIFF
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct TPAutodiff : public tp::impl::TPAutodiffBase<TPAutodiff> {
  using TPAutodiffBase::TPAutodiffBase;
  void runOnOperation() override;

private:
  FailureOr<func::FuncOp> buildGradients(func::FuncOp loss);
  LogicalResult buildTrainStep(func::FuncOp gradients);
};

/// Marks every op the backward creates with `tp.backward` and, while an
/// op's VJP is built, with that op's `tp.layer`: tp-pipeline-stages reads
/// them to put each backward op with its layer's stage and in the backward
/// half of a micro-batch's schedule.
class BackwardMarker : public OpBuilder::Listener {
public:
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    op->setAttr(TPDialect::BackwardAttrHelper::getNameStr(),
                UnitAttr::get(op->getContext()));
    if (layer && !op->hasAttr(TPDialect::LayerAttrHelper::getNameStr()))
      op->setAttr(TPDialect::LayerAttrHelper::getNameStr(), layer);
  }
  /// The layer of the op being differentiated (null: none).
  IntegerAttr layer;
};

/// Reverse-mode differentiation of one function body, in place: appends the
/// backward before the terminator and returns the parameter cotangents.
class Differentiator {
public:
  Differentiator(func::FuncOp func, bool rematLayers, bool markBackward)
      : func(func), rematLayers(rematLayers), builder(func.getContext()) {
    if (markBackward)
      builder.setListener(&marker);
  }

  FailureOr<SmallVector<Value>> run(Value loss, ArrayRef<Value> params);

private:
  Value primal(Value v) { return recomputed.lookupOrDefault(v); }
  void accumulate(Value value, Value cotangent);
  LogicalResult vjp(Operation *op, ArrayRef<Value> resultCotangents);
  void recomputeLayer(int64_t layer, ArrayRef<Operation *> forward);

  func::FuncOp func;
  bool rematLayers;
  BackwardMarker marker;
  OpBuilder builder;
  DenseMap<Value, Value> cotangents;
  IRMapping recomputed;
  llvm::DenseSet<int64_t> recomputedLayers;
};

void Differentiator::accumulate(Value value, Value cotangent) {
  if (!isa<FloatType>(tensorType(value).getElementType()))
    return;
  auto [it, inserted] = cotangents.try_emplace(value, cotangent);
  if (!inserted)
    it->second =
        AddOp::create(builder, cotangent.getLoc(), it->second, cotangent);
}

/// Clones layer `layer`'s forward ops at the insertion point, so that its
/// backward reads recomputed activations instead of keeping the originals
/// alive from the forward pass.
void Differentiator::recomputeLayer(int64_t layer,
                                    ArrayRef<Operation *> forward) {
  recomputedLayers.insert(layer);
  for (Operation *op : forward)
    if (layerOf(op) == layer) {
      // The mark keeps CSE from merging a recomputation with its original,
      // which would undo the memory saving.
      Operation *clone = builder.clone(*op, recomputed);
      clone->setAttr(TPDialect::RecomputedAttrHelper::getNameStr(),
                     builder.getUnitAttr());
    }
}

FailureOr<SmallVector<Value>> Differentiator::run(Value loss,
                                                  ArrayRef<Value> params) {
  Block &block = func.getBody().front();
  Operation *terminator = block.getTerminator();
  SmallVector<Operation *> forward;
  for (Operation &op : block.without_terminator())
    forward.push_back(&op);
  builder.setInsertionPoint(terminator);

  cotangents[loss] = ConstantOp::create(
      builder, loss.getLoc(), tensorType(loss), builder.getF64FloatAttr(1.0));
  for (Operation *op : llvm::reverse(forward)) {
    // A result that does not reach the loss has a null cotangent.
    SmallVector<Value> resultCotangents;
    for (Value result : op->getResults())
      resultCotangents.push_back(cotangents.lookup(result));
    if (llvm::all_of(resultCotangents, [](Value ct) { return !ct; }))
      continue; // does not reach the loss
    std::optional<int64_t> layer = layerOf(op);
    marker.layer = op->getAttrOfType<IntegerAttr>(
        TPDialect::LayerAttrHelper::getNameStr());
    if (rematLayers && layer && !recomputedLayers.contains(*layer))
      recomputeLayer(*layer, forward);
    if (failed(vjp(op, resultCotangents)))
      return failure();
  }

  marker.layer = nullptr;
  SmallVector<Value> grads;
  for (Value param : params) {
    auto it = cotangents.find(param);
    if (it != cotangents.end()) {
      grads.push_back(it->second);
      continue;
    }
    grads.push_back(ConstantOp::create(builder, param.getLoc(),
                                       tensorType(param),
                                       builder.getF64FloatAttr(0.0)));
  }
  return grads;
}

LogicalResult Differentiator::vjp(Operation *op,
                                  ArrayRef<Value> resultCotangents) {
  auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
  if (!differentiable)
    return op->emitOpError()
           << "tp-autodiff: no vector-Jacobian product for this op";
  SmallVector<Value> operands, results;
  for (Value operand : op->getOperands())
    operands.push_back(primal(operand));
  for (Value result : op->getResults())
    results.push_back(primal(result));
  SmallVector<Value> operandCotangents(op->getNumOperands());
  if (failed(differentiable.buildVJP(builder, operands, results,
                                     resultCotangents, operandCotangents)))
    return failure();
  for (auto [operand, cotangent] :
       llvm::zip_equal(op->getOperands(), operandCotangents))
    if (cotangent)
      accumulate(operand, cotangent);
  return success();
}

} // namespace

/// Parameters of a loss function: the arguments carrying tp.param.
static SmallVector<unsigned> paramIndices(func::FuncOp func) {
  SmallVector<unsigned> indices;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()))
      indices.push_back(i);
  return indices;
}

FailureOr<func::FuncOp> TPAutodiff::buildGradients(func::FuncOp loss) {
  auto terminator =
      cast<func::ReturnOp>(loss.getBody().front().getTerminator());
  if (terminator.getNumOperands() != 1 ||
      tensorType(terminator.getOperand(0)).getRank() != 0)
    return loss.emitOpError()
           << "tp-autodiff: @loss must return one scalar loss";
  func::FuncOp grads = loss.clone();
  grads.setName("gradients");
  SymbolTable(getOperation()).insert(grads);
  Block &block = grads.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  Value lossValue = ret.getOperand(0);

  SmallVector<unsigned> indices = paramIndices(grads);
  SmallVector<Value> params;
  for (unsigned i : indices)
    params.push_back(block.getArgument(i));
  Differentiator differentiator(grads, remat == RematMode::Layer, markBackward);
  FailureOr<SmallVector<Value>> paramGrads =
      differentiator.run(lossValue, params);
  if (failed(paramGrads))
    return failure();

  SmallVector<Value> results = {lossValue};
  llvm::append_range(results, *paramGrads);
  OpBuilder b(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  grads.setFunctionType(FunctionType::get(
      &getContext(), block.getArgumentTypes(), ValueRange(results).getTypes()));
  // @loss's result attributes describe one result; start afresh.
  grads.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
  SmallVector<Attribute> outputs(results.size()), gradOf(results.size());
  outputs[0] = b.getStringAttr("loss");
  for (auto [n, i] : llvm::enumerate(indices))
    gradOf[n + 1] =
        grads.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr());
  setResultAttrsInBulk(grads, TPDialect::OutputAttrHelper::getNameStr(),
                       outputs);
  setResultAttrsInBulk(grads, TPDialect::GradOfAttrHelper::getNameStr(),
                       gradOf);
  return grads;
}

LogicalResult TPAutodiff::buildTrainStep(func::FuncOp gradients) {
  MLIRContext *ctx = &getContext();
  func::FuncOp step = gradients.clone();
  step.setName("train_step");
  SymbolTable(getOperation()).insert(step);
  Block &block = step.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  SmallVector<unsigned> indices = paramIndices(step);
  unsigned numParams = indices.size();
  if (indices != llvm::to_vector(llvm::seq<unsigned>(0, numParams)))
    return step.emitOpError()
           << "tp-autodiff: parameters must be the leading arguments";

  // Moments after the parameters; the step and hyperparameters at the end.
  SmallVector<unsigned> at;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  SmallVector<Location> locs;
  Builder attrBuilder(ctx);
  for (StringRef kind : {"exp_avg", "exp_avg_sq"})
    for (unsigned i = 0; i < numParams; ++i) {
      at.push_back(numParams);
      types.push_back(step.getArgumentTypes()[i]);
      attrs.push_back(attrBuilder.getDictionaryAttr(
          {attrBuilder.getNamedAttr(
               TPDialect::ParamAttrHelper::getNameStr(),
               step.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr())),
           attrBuilder.getNamedAttr(TPDialect::StateAttrHelper::getNameStr(),
                                    attrBuilder.getStringAttr(kind))}));
      locs.push_back(block.getArgument(i).getLoc());
    }
  unsigned end = step.getNumArguments();
  at.append({end, end});
  types.push_back(RankedTensorType::get({}, attrBuilder.getI64Type()));
  types.push_back(RankedTensorType::get({5}, attrBuilder.getF32Type()));
  attrs.push_back(attrBuilder.getDictionaryAttr(
      {attrBuilder.getNamedAttr(TPDialect::InputAttrHelper::getNameStr(),
                                attrBuilder.getStringAttr("step"))}));
  attrs.push_back(attrBuilder.getDictionaryAttr({attrBuilder.getNamedAttr(
      TPDialect::InputAttrHelper::getNameStr(),
      attrBuilder.getStringAttr("hyperparameters"))}));
  locs.append(2, step.getLoc());
  if (failed(step.insertArguments(at, types, attrs, locs)))
    return failure();

  Value stepArg = block.getArgument(step.getNumArguments() - 2);
  Value hyper = block.getArgument(step.getNumArguments() - 1);
  auto expAvg = [&](unsigned i) { return block.getArgument(numParams + i); };
  auto expAvgSq = [&](unsigned i) {
    return block.getArgument(2 * numParams + i);
  };

  OpBuilder b(ret);
  Location loc = NameLoc::get(b.getStringAttr("optimizer"));
  Value loss = ret.getOperand(0);
  SmallVector<Value> grads(ret.getOperands().drop_front());
  // Global norm over every gradient, in parameter order.
  Value sumSquares;
  for (Value g : grads) {
    Value s = NormSquaredOp::create(b, loc, g);
    sumSquares = sumSquares ? AddOp::create(b, loc, sumSquares, s) : s;
  }
  Value clip = ClipScaleOp::create(b, loc, sumSquares, hyper);
  Value lr = LrScheduleOp::create(b, loc, stepArg, hyper);

  SmallVector<Value> newParams, newExpAvg, newExpAvgSq;
  for (unsigned i = 0; i < numParams; ++i) {
    Value p = block.getArgument(i);
    // Matrices decay, biases and norm weights do not, by the parameter's
    // HF shape: GPT-2's fused QKV bias is [3 * h] there, viewed as [3, h].
    int64_t rank = tensorType(p).getRank();
    if (auto hfShape = step.getArgAttrOfType<DenseI64ArrayAttr>(
            i, TPDialect::HfShapeAttrHelper::getNameStr()))
      rank = hfShape.size();
    double decay = rank >= 2 ? double(weightDecay) : 0.0;
    auto update = AdamWOp::create(
        b, loc, p, grads[i], expAvg(i), expAvgSq(i), lr, stepArg, clip,
        llvm::APFloat(double(beta1)), llvm::APFloat(double(beta2)),
        llvm::APFloat(double(epsilon)), llvm::APFloat(decay));
    newParams.push_back(update.getNewParam());
    newExpAvg.push_back(update.getNewExpAvg());
    newExpAvgSq.push_back(update.getNewExpAvgSq());
  }
  SmallVector<Value> results = {loss};
  llvm::append_range(results, newParams);
  llvm::append_range(results, newExpAvg);
  llvm::append_range(results, newExpAvgSq);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  step.setFunctionType(FunctionType::get(ctx, block.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
  step.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
  SmallVector<Attribute> outputs(results.size()), updates(results.size());
  outputs[0] = b.getStringAttr("loss");
  for (unsigned i = 0; i < 3 * numParams; ++i)
    updates[1 + i] = b.getI64IntegerAttr(i);
  setResultAttrsInBulk(step, TPDialect::OutputAttrHelper::getNameStr(),
                       outputs);
  setResultAttrsInBulk(step, TPDialect::UpdatesAttrHelper::getNameStr(),
                       updates);
  return success();
}

void TPAutodiff::runOnOperation() {
  // AdamW diverges or never moves outside these ranges.
  auto outside = [&](StringRef name, double value, StringRef range) {
    getOperation().emitError()
        << "tp-autodiff: " << name << " must be " << range << ", got " << value;
    signalPassFailure();
  };
  if (!(beta1 >= 0 && beta1 < 1))
    return outside("beta1", beta1, "in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1))
    return outside("beta2", beta2, "in [0, 1)");
  if (!(epsilon > 0 && epsilon < 1))
    return outside("epsilon", epsilon, "in (0, 1)");
  if (!(weightDecay >= 0 && weightDecay < 1))
    return outside("weight-decay", weightDecay, "in [0, 1)");
  auto loss = getOperation().lookupSymbol<func::FuncOp>("loss");
  if (!loss) {
    getOperation().emitError() << "tp-autodiff: the module has no @loss";
    return signalPassFailure();
  }
  FailureOr<func::FuncOp> gradients = buildGradients(loss);
  if (failed(gradients) || failed(buildTrainStep(*gradients)))
    return signalPassFailure();
}
