//===- Autodiff.cpp - reverse-mode differentiation and the train step -----===//
//
// @loss -> @gradients (forward, then one vector-Jacobian product per op in
// reverse order) -> @train_step (gradients, then clipping, the learning-rate
// schedule and AdamW, all as tp ops).
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/ADT/TypeSwitch.h"

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
ArrayRef<int64_t> shapeOf(Value v) { return tensorType(v).getShape(); }

/// Emits tp ops with result types inferred from their operands.
class OpEmitter {
public:
  OpEmitter(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  RankedTensorType like(Value v, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, tensorType(v).getElementType());
  }
  Value constant(double value, RankedTensorType type) {
    return ConstantOp::create(b, loc, type, b.getF64FloatAttr(value));
  }
  Value add(Value lhs, Value rhs) {
    return AddOp::create(b, loc, lhs.getType(), lhs, rhs);
  }
  Value mul(Value lhs, Value rhs, Type type) {
    return MulOp::create(b, loc, type, lhs, rhs);
  }
  Value div(Value lhs, Value rhs, Type type) {
    return DivOp::create(b, loc, type, lhs, rhs);
  }
  Value scale(Value v, double factor) {
    return ScaleOp::create(b, loc, v.getType(), v, b.getF64FloatAttr(factor));
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (shapeOf(v) == shape)
      return v;
    return ReshapeOp::create(b, loc, like(v, shape), v);
  }
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(shapeOf(v)[p]);
    return TransposeOp::create(b, loc, like(v, shape), v,
                               b.getDenseI64ArrayAttr(perm));
  }
  Value reduceSum(Value v, ArrayRef<int64_t> dims) {
    SmallVector<int64_t> shape;
    for (auto [d, size] : llvm::enumerate(shapeOf(v)))
      if (!llvm::is_contained(dims, int64_t(d)))
        shape.push_back(size);
    return ReduceSumOp::create(b, loc, like(v, shape), v,
                               b.getDenseI64ArrayAttr(dims));
  }
  /// lhs x rhs with tp.matmul's semantics; the result type is inferred.
  Value matmul(Value lhs, Value rhs, bool transposeLhs, bool transposeRhs,
               double alpha) {
    SmallVector<int64_t> shape = *inferMatmulShape(shapeOf(lhs), shapeOf(rhs),
                                                   transposeLhs, transposeRhs);
    return MatmulOp::create(b, loc, like(lhs, shape), lhs, rhs, transposeLhs,
                            transposeRhs, llvm::APFloat(alpha));
  }

  /// Sums `v` down to `shape` (the shape of an operand it was broadcast
  /// from): leading extra dims and dims of size 1 in `shape` are summed.
  Value sumTo(Value v, ArrayRef<int64_t> shape) {
    ArrayRef<int64_t> full = shapeOf(v);
    if (full == shape)
      return v;
    size_t offset = full.size() - shape.size();
    SmallVector<int64_t> dims;
    for (size_t d = 0; d < full.size(); ++d)
      if (d < offset || (shape[d - offset] == 1 && full[d] != 1))
        dims.push_back(d);
    Value reduced = dims.empty() ? v : reduceSum(v, dims);
    return reshape(reduced, shape);
  }

  OpBuilder &b;
  Location loc;
};

struct TPAutodiff : public tp::impl::TPAutodiffBase<TPAutodiff> {
  using TPAutodiffBase::TPAutodiffBase;
  void runOnOperation() override;

private:
  FailureOr<func::FuncOp> buildGradients(func::FuncOp loss);
  LogicalResult buildTrainStep(func::FuncOp gradients);
};

/// Reverse-mode differentiation of one function body, in place: appends the
/// backward before the terminator and returns the parameter cotangents.
class Differentiator {
public:
  Differentiator(func::FuncOp func, bool rematLayers)
      : func(func), rematLayers(rematLayers), builder(func.getContext()) {}

  FailureOr<SmallVector<Value>> run(Value loss, ArrayRef<Value> params);

private:
  Value primal(Value v) { return recomputed.lookupOrDefault(v); }
  void accumulate(Value value, Value cotangent);
  LogicalResult vjp(Operation *op, Value resultCotangent, OpEmitter &e);
  void recomputeLayer(int64_t layer, ArrayRef<Operation *> forward);

  func::FuncOp func;
  bool rematLayers;
  OpBuilder builder;
  DenseMap<Value, Value> cotangents;
  IRMapping recomputed;
  llvm::DenseSet<int64_t> recomputedLayers;
};

void Differentiator::accumulate(Value value, Value cotangent) {
  if (!isa<FloatType>(tensorType(value).getElementType()))
    return;
  auto [it, inserted] = cotangents.try_emplace(value, cotangent);
  if (!inserted) {
    OpEmitter e(builder, cotangent.getLoc());
    it->second = e.add(it->second, cotangent);
  }
}

static std::optional<int64_t> layerOf(Operation *op) {
  if (auto attr = op->getAttrOfType<IntegerAttr>("tp.layer"))
    return attr.getInt();
  return std::nullopt;
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
      clone->setAttr("tp.recomputed", builder.getUnitAttr());
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

  OpEmitter seed(builder, loss.getLoc());
  cotangents[loss] = seed.constant(1.0, tensorType(loss));
  for (Operation *op : llvm::reverse(forward)) {
    if (op->getNumResults() != 1)
      return op->emitOpError() << "tp-autodiff: no VJP for an op with "
                               << op->getNumResults() << " results";
    auto it = cotangents.find(op->getResult(0));
    if (it == cotangents.end())
      continue; // does not reach the loss
    std::optional<int64_t> layer = layerOf(op);
    if (rematLayers && layer && !recomputedLayers.contains(*layer))
      recomputeLayer(*layer, forward);
    OpEmitter e(builder, op->getLoc());
    if (failed(vjp(op, it->second, e)))
      return failure();
  }

  SmallVector<Value> grads;
  for (Value param : params) {
    auto it = cotangents.find(param);
    if (it != cotangents.end()) {
      grads.push_back(it->second);
      continue;
    }
    OpEmitter e(builder, param.getLoc());
    grads.push_back(e.constant(0.0, tensorType(param)));
  }
  return grads;
}

LogicalResult Differentiator::vjp(Operation *op, Value ct, OpEmitter &e) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](EmbeddingOp o) {
        accumulate(o.getTable(),
                   EmbeddingGradOp::create(e.b, e.loc, o.getTable().getType(),
                                           ct, o.getIds()));
        return success();
      })
      .Case([&](MatmulOp o) {
        Value a = primal(o.getLhs()), b = primal(o.getRhs());
        bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
        double alpha = o.getAlphaAttr().getValueAsDouble();
        ArrayRef<int64_t> aShape = shapeOf(a), bShape = shapeOf(b);
        // dA = ct * op(B)^T, transposed back if A was.
        Value da = ta ? e.matmul(b, ct, tb, true, alpha)
                      : e.matmul(ct, b, false, !tb, alpha);
        accumulate(o.getLhs(), e.sumTo(da, aShape));
        // A weight shared across the batch: fold the batch into the rows
        // so dW is one product rather than a batch of them summed after.
        if (bShape.size() == 2 && aShape.size() > 2 && !ta) {
          int64_t rows = 1;
          for (int64_t d : aShape.drop_back())
            rows *= d;
          Value a2 = e.reshape(a, {rows, aShape.back()});
          Value ct2 = e.reshape(ct, {rows, shapeOf(ct).back()});
          Value db = tb ? e.matmul(ct2, a2, true, false, alpha)
                        : e.matmul(a2, ct2, true, false, alpha);
          accumulate(o.getRhs(), db);
          return success();
        }
        // dB = op(A)^T * ct, transposed back if B was.
        Value db = tb ? e.matmul(ct, a, true, ta, alpha)
                      : e.matmul(a, ct, !ta, false, alpha);
        accumulate(o.getRhs(), e.sumTo(db, bShape));
        return success();
      })
      .Case([&](AddOp o) {
        accumulate(o.getLhs(), e.sumTo(ct, shapeOf(o.getLhs())));
        accumulate(o.getRhs(), e.sumTo(ct, shapeOf(o.getRhs())));
        return success();
      })
      .Case([&](SubOp o) {
        accumulate(o.getLhs(), e.sumTo(ct, shapeOf(o.getLhs())));
        accumulate(o.getRhs(), e.sumTo(e.scale(ct, -1.0), shapeOf(o.getRhs())));
        return success();
      })
      .Case([&](MulOp o) {
        Value a = primal(o.getLhs()), b = primal(o.getRhs());
        accumulate(o.getLhs(), e.sumTo(e.mul(ct, b, ct.getType()), shapeOf(a)));
        accumulate(o.getRhs(), e.sumTo(e.mul(ct, a, ct.getType()), shapeOf(b)));
        return success();
      })
      .Case([&](DivOp o) {
        // y = a / b: da = ct / b, db = -ct * y / b.
        Value b = primal(o.getRhs()), y = primal(o.getResult());
        accumulate(o.getLhs(),
                   e.sumTo(e.div(ct, b, ct.getType()), shapeOf(o.getLhs())));
        Value db =
            e.scale(e.div(e.mul(ct, y, ct.getType()), b, ct.getType()), -1.0);
        accumulate(o.getRhs(), e.sumTo(db, shapeOf(b)));
        return success();
      })
      .Case([&](ScaleOp o) {
        accumulate(o.getInput(),
                   e.scale(ct, o.getFactorAttr().getValueAsDouble()));
        return success();
      })
      .Case([&](GeluOp o) {
        accumulate(o.getInput(), GeluGradOp::create(e.b, e.loc, ct.getType(),
                                                    ct, primal(o.getInput())));
        return success();
      })
      .Case([&](SiluOp o) {
        accumulate(o.getInput(), SiluGradOp::create(e.b, e.loc, ct.getType(),
                                                    ct, primal(o.getInput())));
        return success();
      })
      .Case([&](LayerNormOp o) {
        auto grad = LayerNormGradOp::create(
            e.b, e.loc, o.getInput().getType(), o.getGamma().getType(),
            o.getBeta().getType(), ct, primal(o.getInput()),
            primal(o.getGamma()), o.getEpsilonAttr());
        accumulate(o.getInput(), grad.getInputGrad());
        accumulate(o.getGamma(), grad.getGammaGrad());
        accumulate(o.getBeta(), grad.getBetaGrad());
        return success();
      })
      .Case([&](RmsNormOp o) {
        auto grad = RmsNormGradOp::create(
            e.b, e.loc, o.getInput().getType(), o.getGamma().getType(), ct,
            primal(o.getInput()), primal(o.getGamma()), o.getEpsilonAttr());
        accumulate(o.getInput(), grad.getInputGrad());
        accumulate(o.getGamma(), grad.getGammaGrad());
        return success();
      })
      .Case([&](SoftmaxOp o) {
        // Masked entries of a causal softmax are 0 in y, so their gradient
        // is 0 too: the backward needs no mask of its own.
        accumulate(o.getInput(),
                   SoftmaxGradOp::create(e.b, e.loc, ct.getType(), ct,
                                         primal(o.getResult())));
        return success();
      })
      .Case([&](RotaryOp o) {
        // A rotation's transpose is the opposite rotation.
        auto back = RotaryOp::create(e.b, e.loc, ct.getType(), ct);
        back.setThetaAttr(o.getThetaAttr());
        back.setInverse(!o.getInverse());
        accumulate(o.getInput(), back);
        return success();
      })
      .Case([&](ReshapeOp o) {
        accumulate(o.getInput(), e.reshape(ct, shapeOf(o.getInput())));
        return success();
      })
      .Case([&](TransposeOp o) {
        ArrayRef<int64_t> perm = o.getPermutation();
        SmallVector<int64_t> inverse(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          inverse[p] = i;
        accumulate(o.getInput(), e.transpose(ct, inverse));
        return success();
      })
      .Case([&](SliceOp o) {
        accumulate(o.getInput(),
                   PadOp::create(e.b, e.loc, o.getInput().getType(), ct,
                                 o.getOffsetsAttr()));
        return success();
      })
      .Case([&](PadOp o) {
        accumulate(o.getInput(),
                   SliceOp::create(e.b, e.loc, o.getInput().getType(), ct,
                                   o.getOffsetsAttr()));
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto o) {
        // Broadcast the cotangent back over the reduced dims (scaled by
        // 1/N for a mean): ct reshaped with those dims as 1, times a
        // constant of the input's shape.
        ArrayRef<int64_t> in = shapeOf(o.getInput());
        SmallVector<int64_t> kept(in);
        int64_t count = 1;
        for (int64_t d : o.getDims()) {
          kept[d] = 1;
          count *= in[d];
        }
        double factor = isa<ReduceMeanOp>(o.getOperation()) ? 1.0 / count : 1.0;
        Value fill = e.constant(factor, tensorType(o.getInput()));
        accumulate(o.getInput(),
                   e.mul(fill, e.reshape(ct, kept), o.getInput().getType()));
        return success();
      })
      .Case([&](CrossEntropyOp o) {
        accumulate(o.getLogits(),
                   CrossEntropyGradOp::create(
                       e.b, e.loc, o.getLogits().getType(),
                       primal(o.getLogits()), o.getTargets(), ct));
        return success();
      })
      .Case([&](ConstantOp) { return success(); })
      .Default([](Operation *op) {
        return op->emitOpError()
               << "tp-autodiff: no vector-Jacobian product for this op";
      });
}

} // namespace

/// Parameters of a loss function: the arguments carrying tp.param.
static SmallVector<unsigned> paramIndices(func::FuncOp func) {
  SmallVector<unsigned> indices;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, "tp.param"))
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
  Differentiator differentiator(grads, remat == RematMode::Layer);
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
  grads.setResultAttr(0, "tp.output", b.getStringAttr("loss"));
  for (auto [n, i] : llvm::enumerate(indices))
    grads.setResultAttr(n + 1, "tp.grad_of", grads.getArgAttr(i, "tp.param"));
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
          {attrBuilder.getNamedAttr("tp.param", step.getArgAttr(i, "tp.param")),
           attrBuilder.getNamedAttr("tp.state",
                                    attrBuilder.getStringAttr(kind))}));
      locs.push_back(block.getArgument(i).getLoc());
    }
  unsigned end = step.getNumArguments();
  at.append({end, end});
  types.push_back(RankedTensorType::get({}, attrBuilder.getI64Type()));
  types.push_back(RankedTensorType::get({5}, attrBuilder.getF32Type()));
  attrs.push_back(attrBuilder.getDictionaryAttr({attrBuilder.getNamedAttr(
      "tp.input", attrBuilder.getStringAttr("step"))}));
  attrs.push_back(attrBuilder.getDictionaryAttr({attrBuilder.getNamedAttr(
      "tp.input", attrBuilder.getStringAttr("hyperparameters"))}));
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
  OpEmitter e(b, loc);
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  Value loss = ret.getOperand(0);
  SmallVector<Value> grads(ret.getOperands().drop_front());
  // Global norm over every gradient, in parameter order.
  Value sumSquares;
  for (Value g : grads) {
    Value s = NormSquaredOp::create(b, loc, scalar, g);
    sumSquares = sumSquares ? e.add(sumSquares, s) : s;
  }
  Value clip = ClipScaleOp::create(b, loc, scalar, sumSquares, hyper);
  Value lr = LrScheduleOp::create(b, loc, scalar, stepArg, hyper);

  SmallVector<Value> newParams, newExpAvg, newExpAvgSq;
  for (unsigned i = 0; i < numParams; ++i) {
    Value p = block.getArgument(i);
    double decay = tensorType(p).getRank() >= 2 ? double(weightDecay) : 0.0;
    auto update = AdamWOp::create(
        b, loc, p.getType(), expAvg(i).getType(), expAvgSq(i).getType(), p,
        grads[i], expAvg(i), expAvgSq(i), lr, stepArg, clip,
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
  step.setResultAttr(0, "tp.output", b.getStringAttr("loss"));
  for (unsigned i = 0; i < 3 * numParams; ++i)
    step.setResultAttr(1 + i, "tp.updates", b.getI64IntegerAttr(i));
  return success();
}

void TPAutodiff::runOnOperation() {
  auto loss = getOperation().lookupSymbol<func::FuncOp>("loss");
  if (!loss) {
    getOperation().emitError() << "tp-autodiff: the module has no @loss";
    return signalPassFailure();
  }
  FailureOr<func::FuncOp> gradients = buildGradients(loss);
  if (failed(gradients) || failed(buildTrainStep(*gradients)))
    return signalPassFailure();
}
