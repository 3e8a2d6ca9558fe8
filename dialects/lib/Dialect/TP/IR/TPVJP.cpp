//===- TPVJP.cpp - vector-Jacobian products of tp ops ---------------------===//
//
// DifferentiableOpInterface: each op builds its operands' cotangents from its
// result's, reading primal values through the `operands` and `results` it is
// given (recomputed ones under rematerialisation).
//
//===----------------------------------------------------------------------===//

#include "tpc/Dialect/TP/IR/TPOps.h"

using namespace mlir;
using namespace mlir::tp;

namespace {
RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}
ArrayRef<int64_t> shapeOf(Value v) { return tensorType(v).getShape(); }

/// Emits the tp ops a VJP is made of. Most infer their result types; a
/// reshape's target shape is its own specification.
class VJPEmitter {
public:
  VJPEmitter(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  RankedTensorType like(Value v, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, tensorType(v).getElementType());
  }
  Value constant(double value, RankedTensorType type) {
    return ConstantOp::create(b, loc, type, b.getF64FloatAttr(value));
  }
  Value mul(Value lhs, Value rhs) { return MulOp::create(b, loc, lhs, rhs); }
  Value div(Value lhs, Value rhs) { return DivOp::create(b, loc, lhs, rhs); }
  Value scale(Value v, double factor) {
    return ScaleOp::create(b, loc, v, b.getF64FloatAttr(factor));
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (shapeOf(v) == shape)
      return v;
    return ReshapeOp::create(b, loc, like(v, shape), v);
  }
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    return TransposeOp::create(b, loc, v, b.getDenseI64ArrayAttr(perm));
  }
  Value reduceSum(Value v, ArrayRef<int64_t> dims) {
    return ReduceSumOp::create(b, loc, v, b.getDenseI64ArrayAttr(dims));
  }
  Value matmul(Value lhs, Value rhs, bool transposeLhs, bool transposeRhs,
               double alpha) {
    // Operands in their own precision: tp-matmul-precision, which runs after
    // differentiation, sets every product's rounding.
    return MatmulOp::create(b, loc, lhs, rhs, transposeLhs, transposeRhs,
                            llvm::APFloat(alpha), /*precision=*/nullptr);
  }
  /// `v` in `element` (itself when it already is).
  Value convert(Value v, Type element) {
    RankedTensorType type = tensorType(v);
    if (type.getElementType() == element)
      return v;
    return ConvertOp::create(b, loc, type.clone(element), v);
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

/// Broadcasts the cotangent of a sum or mean over `dims` back to the input
/// (scaled by 1/N for a mean): ct reshaped with those dims as 1, times a
/// constant of the input's shape.
Value reductionVJP(VJPEmitter &e, Value input, Value ct, ArrayRef<int64_t> dims,
                   bool mean) {
  ArrayRef<int64_t> in = shapeOf(input);
  SmallVector<int64_t> kept(in);
  int64_t count = 1;
  for (int64_t d : dims) {
    kept[d] = 1;
    count *= in[d];
  }
  // The cotangent broadcast over the reduced dims by a product with a fill
  // that has only those dims (from the first on; 1 elsewhere): no batch
  // dimension, so nothing of it is split or moved with the batch.
  const int64_t first =
      dims.empty() ? int64_t(in.size()) : *llvm::min_element(dims);
  SmallVector<int64_t> fillShape;
  for (int64_t d = first; d < int64_t(in.size()); ++d)
    fillShape.push_back(llvm::is_contained(dims, d) ? in[d] : 1);
  Type element = tensorType(input).getElementType();
  Value spread = e.convert(e.reshape(ct, kept), element);
  if (fillShape.empty())
    return spread;
  Value fill = e.constant(mean ? 1.0 / count : 1.0,
                          RankedTensorType::get(fillShape, element));
  return e.mul(spread, fill);
}
} // namespace

LogicalResult EmbeddingOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                    ValueRange, ValueRange resultCotangents,
                                    MutableArrayRef<Value> operandCotangents) {
  operandCotangents[0] =
      EmbeddingGradOp::create(builder, getLoc(), operands[0].getType(),
                              resultCotangents[0], operands[1], getSlotMap());
  return success();
}

LogicalResult MatmulOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                 ValueRange, ValueRange resultCotangents,
                                 MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  Value a = operands[0], b = operands[1];
  // A result stored in another type than the operands (its type is free):
  // the backward's products take the cotangent in the operands' type.
  Value ct = e.convert(resultCotangents[0], tensorType(a).getElementType());
  bool ta = getTransposeLhs(), tb = getTransposeRhs();
  double alpha = getAlphaAttr().getValueAsDouble();
  ArrayRef<int64_t> aShape = shapeOf(a), bShape = shapeOf(b);
  // dA = ct * op(B)^T, transposed back if A was.
  Value da = ta ? e.matmul(b, ct, tb, true, alpha)
                : e.matmul(ct, b, false, !tb, alpha);
  operandCotangents[0] = e.sumTo(da, aShape);
  // A weight shared across the batch: fold the batch into the rows so dW is
  // one product rather than a batch of them summed after.
  if (bShape.size() == 2 && aShape.size() > 2 && !ta) {
    int64_t rows = 1;
    for (int64_t d : aShape.drop_back())
      rows *= d;
    Value a2 = e.reshape(a, {rows, aShape.back()});
    Value ct2 = e.reshape(ct, {rows, shapeOf(ct).back()});
    operandCotangents[1] = tb ? e.matmul(ct2, a2, true, false, alpha)
                              : e.matmul(a2, ct2, true, false, alpha);
    return success();
  }
  // dB = op(A)^T * ct, transposed back if B was.
  Value db = tb ? e.matmul(ct, a, true, ta, alpha)
                : e.matmul(a, ct, !ta, false, alpha);
  operandCotangents[1] = e.sumTo(db, bShape);
  return success();
}

LogicalResult LinearOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                 ValueRange results,
                                 ValueRange resultCotangents,
                                 MutableArrayRef<Value> operandCotangents) {
  if (results.size() > 1 && resultCotangents[1])
    return emitOpError() << "tp-autodiff: the loss must not depend on "
                            "tp.linear's preactivation";
  VJPEmitter e(builder, getLoc());
  Value x = operands[0], w = operands[1], dz = resultCotangents[0];
  if (getGelu()) {
    // Without a stored preactivation, the backward recomputes it.
    Value pre = results.size() > 1
                    ? results[1]
                    : LinearOp::create(
                          builder, getLoc(), TypeRange{results[0].getType()},
                          operands[0], operands[1], operands[2],
                          getTransposeRhsAttr(), nullptr, getPrecisionAttr())
                          .getResult();
    dz = GeluGradOp::create(builder, getLoc(), dz, pre);
  }
  ArrayRef<int64_t> xShape = shapeOf(x);
  operandCotangents[2] = e.sumTo(dz, shapeOf(operands[2]));
  // As tp.matmul's VJP: dx = dz op(W)^T; dW from the rows folded.
  const bool tb = getTransposeRhs();
  operandCotangents[0] = e.matmul(dz, w, false, !tb, 1.0);
  int64_t rows = 1;
  for (int64_t d : xShape.drop_back())
    rows *= d;
  Value x2 = e.reshape(x, {rows, xShape.back()});
  Value dz2 = e.reshape(dz, {rows, shapeOf(dz).back()});
  operandCotangents[1] = tb ? e.matmul(dz2, x2, true, false, 1.0)
                            : e.matmul(x2, dz2, true, false, 1.0);
  return success();
}

LogicalResult
LinearCrossEntropyOp::buildVJP(OpBuilder &builder, ValueRange operands,
                               ValueRange, ValueRange resultCotangents,
                               MutableArrayRef<Value> operandCotangents) {
  auto grad = LinearCrossEntropyGradOp::create(
      builder, getLoc(), operands[0], operands[1], operands[2],
      resultCotangents[0], getTransposeRhsAttr(), getChunkAttr(),
      getPrecisionAttr());
  operandCotangents[0] = grad.getInputGrad();
  operandCotangents[1] = grad.getWeightGrad();
  return success();
}

LogicalResult AddOp::buildVJP(OpBuilder &builder, ValueRange operands,
                              ValueRange, ValueRange resultCotangents,
                              MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  Value ct = resultCotangents[0];
  operandCotangents[0] = e.sumTo(ct, shapeOf(operands[0]));
  operandCotangents[1] = e.sumTo(ct, shapeOf(operands[1]));
  return success();
}

LogicalResult SubOp::buildVJP(OpBuilder &builder, ValueRange operands,
                              ValueRange, ValueRange resultCotangents,
                              MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  Value ct = resultCotangents[0];
  operandCotangents[0] = e.sumTo(ct, shapeOf(operands[0]));
  operandCotangents[1] = e.sumTo(e.scale(ct, -1.0), shapeOf(operands[1]));
  return success();
}

LogicalResult MulOp::buildVJP(OpBuilder &builder, ValueRange operands,
                              ValueRange, ValueRange resultCotangents,
                              MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  Value a = operands[0], b = operands[1], ct = resultCotangents[0];
  operandCotangents[0] = e.sumTo(e.mul(ct, b), shapeOf(a));
  operandCotangents[1] = e.sumTo(e.mul(ct, a), shapeOf(b));
  return success();
}

LogicalResult DivOp::buildVJP(OpBuilder &builder, ValueRange operands,
                              ValueRange results, ValueRange resultCotangents,
                              MutableArrayRef<Value> operandCotangents) {
  // y = a / b: da = ct / b, db = -ct * y / b.
  VJPEmitter e(builder, getLoc());
  Value b = operands[1], y = results[0], ct = resultCotangents[0];
  operandCotangents[0] = e.sumTo(e.div(ct, b), shapeOf(operands[0]));
  Value db = e.scale(e.div(e.mul(ct, y), b), -1.0);
  operandCotangents[1] = e.sumTo(db, shapeOf(b));
  return success();
}

LogicalResult ScaleOp::buildVJP(OpBuilder &builder, ValueRange, ValueRange,
                                ValueRange resultCotangents,
                                MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  operandCotangents[0] =
      e.scale(resultCotangents[0], getFactorAttr().getValueAsDouble());
  return success();
}

LogicalResult ConvertOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                  ValueRange, ValueRange resultCotangents,
                                  MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  operandCotangents[0] =
      e.convert(resultCotangents[0], tensorType(operands[0]).getElementType());
  return success();
}

LogicalResult GeluOp::buildVJP(OpBuilder &builder, ValueRange operands,
                               ValueRange, ValueRange resultCotangents,
                               MutableArrayRef<Value> operandCotangents) {
  Value ct = resultCotangents[0];
  operandCotangents[0] = GeluGradOp::create(builder, getLoc(), ct, operands[0]);
  return success();
}

LogicalResult SiluOp::buildVJP(OpBuilder &builder, ValueRange operands,
                               ValueRange, ValueRange resultCotangents,
                               MutableArrayRef<Value> operandCotangents) {
  Value ct = resultCotangents[0];
  operandCotangents[0] = SiluGradOp::create(builder, getLoc(), ct, operands[0]);
  return success();
}

LogicalResult ReluOp::buildVJP(OpBuilder &builder, ValueRange operands,
                               ValueRange, ValueRange resultCotangents,
                               MutableArrayRef<Value> operandCotangents) {
  Value ct = resultCotangents[0];
  operandCotangents[0] = ReluGradOp::create(builder, getLoc(), ct, operands[0]);
  return success();
}

LogicalResult SwigluOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                 ValueRange, ValueRange resultCotangents,
                                 MutableArrayRef<Value> operandCotangents) {
  auto grad = SwigluGradOp::create(builder, getLoc(), resultCotangents[0],
                                   operands[0], operands[1]);
  operandCotangents[0] = grad.getGateGrad();
  operandCotangents[1] = grad.getUpGrad();
  return success();
}

/// The VJP of a residual add then a norm: the residual stream's gradient
/// (`sumCotangent`, the sum's own uses) and the norm's input gradient add
/// in the norm's gradient kernel; input and residual both get the total.
template <typename GradOp>
static void addNormVJP(OpBuilder &builder, Location loc, Value sum, Value gamma,
                       FloatAttr epsilon, Value sumCotangent,
                       Value resultCotangent,
                       MutableArrayRef<Value> operandCotangents,
                       MutableArrayRef<Value> gainCotangents) {
  Value total = sumCotangent;
  if (resultCotangent) {
    auto grad = GradOp::create(builder, loc, resultCotangent, sum, gamma,
                               epsilon, sumCotangent);
    total = grad.getInputGrad();
    for (auto [i, cotangent] : llvm::enumerate(gainCotangents))
      cotangent = grad->getResult(i + 1);
  }
  operandCotangents[0] = operandCotangents[1] = total;
}

LogicalResult
AddLayerNormOp::buildVJP(OpBuilder &builder, ValueRange operands,
                         ValueRange results, ValueRange resultCotangents,
                         MutableArrayRef<Value> operandCotangents) {
  addNormVJP<LayerNormGradOp>(builder, getLoc(), results[0], operands[2],
                              getEpsilonAttr(), resultCotangents[0],
                              resultCotangents[1], operandCotangents,
                              operandCotangents.slice(2, 2));
  return success();
}

LogicalResult AddRmsNormOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                     ValueRange results,
                                     ValueRange resultCotangents,
                                     MutableArrayRef<Value> operandCotangents) {
  addNormVJP<RmsNormGradOp>(builder, getLoc(), results[0], operands[2],
                            getEpsilonAttr(), resultCotangents[0],
                            resultCotangents[1], operandCotangents,
                            operandCotangents.slice(2, 1));
  return success();
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                    ValueRange, ValueRange resultCotangents,
                                    MutableArrayRef<Value> operandCotangents) {
  auto grad = LayerNormGradOp::create(builder, getLoc(), resultCotangents[0],
                                      operands[0], operands[1],
                                      getEpsilonAttr(), /*residual_grad=*/
                                      Value());
  operandCotangents[0] = grad.getInputGrad();
  operandCotangents[1] = grad.getGammaGrad();
  operandCotangents[2] = grad.getBetaGrad();
  return success();
}

LogicalResult RmsNormOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                  ValueRange, ValueRange resultCotangents,
                                  MutableArrayRef<Value> operandCotangents) {
  auto grad = RmsNormGradOp::create(builder, getLoc(), resultCotangents[0],
                                    operands[0], operands[1], getEpsilonAttr(),
                                    /*residual_grad=*/Value());
  operandCotangents[0] = grad.getInputGrad();
  operandCotangents[1] = grad.getGammaGrad();
  return success();
}

LogicalResult SoftmaxOp::buildVJP(OpBuilder &builder, ValueRange,
                                  ValueRange results,
                                  ValueRange resultCotangents,
                                  MutableArrayRef<Value> operandCotangents) {
  // Masked entries of a causal softmax are 0 in y, so their gradient is 0
  // too: the backward needs no mask of its own.
  Value ct = resultCotangents[0];
  operandCotangents[0] =
      SoftmaxGradOp::create(builder, getLoc(), ct, results[0]);
  return success();
}

LogicalResult AttentionOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                    ValueRange results,
                                    ValueRange resultCotangents,
                                    MutableArrayRef<Value> operandCotangents) {
  if (resultCotangents[1])
    return emitOpError() << "tp-autodiff: the loss must not depend on "
                            "tp.attention's logsumexp";
  if (getPositions())
    return emitOpError() << "tp-autodiff: attention over a KV cache "
                            "(positions) is for generation, not training";
  auto grad = AttentionGradOp::create(
      builder, getLoc(), resultCotangents[0], operands[0], operands[1],
      operands[2], results[0], results[1], getAlphaAttr(), getCausalAttr(),
      /*precision=*/nullptr);
  operandCotangents[0] = grad.getQueryGrad();
  operandCotangents[1] = grad.getKeyGrad();
  operandCotangents[2] = grad.getValueGrad();
  return success();
}

LogicalResult RotaryOp::buildVJP(OpBuilder &builder, ValueRange, ValueRange,
                                 ValueRange resultCotangents,
                                 MutableArrayRef<Value> operandCotangents) {
  // A rotation's transpose is the opposite rotation.
  Value ct = resultCotangents[0];
  auto back = RotaryOp::create(builder, getLoc(), ct, getThetaAttr(),
                               getInverse() ? nullptr : builder.getUnitAttr(),
                               getPositions());
  operandCotangents[0] = back;
  return success();
}

LogicalResult ReshapeOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                  ValueRange, ValueRange resultCotangents,
                                  MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  operandCotangents[0] = e.reshape(resultCotangents[0], shapeOf(operands[0]));
  return success();
}

LogicalResult TransposeOp::buildVJP(OpBuilder &builder, ValueRange, ValueRange,
                                    ValueRange resultCotangents,
                                    MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  operandCotangents[0] = e.transpose(resultCotangents[0], inverse);
  return success();
}

LogicalResult SliceOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                ValueRange, ValueRange resultCotangents,
                                MutableArrayRef<Value> operandCotangents) {
  operandCotangents[0] = PadOp::create(builder, getLoc(), operands[0].getType(),
                                       resultCotangents[0], getOffsetsAttr());
  return success();
}

LogicalResult PadOp::buildVJP(OpBuilder &builder, ValueRange operands,
                              ValueRange, ValueRange resultCotangents,
                              MutableArrayRef<Value> operandCotangents) {
  operandCotangents[0] =
      SliceOp::create(builder, getLoc(), operands[0].getType(),
                      resultCotangents[0], getOffsetsAttr());
  return success();
}

LogicalResult ReduceSumOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                    ValueRange, ValueRange resultCotangents,
                                    MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  operandCotangents[0] = reductionVJP(e, operands[0], resultCotangents[0],
                                      getDims(), /*mean=*/false);
  return success();
}

LogicalResult ReduceMeanOp::buildVJP(OpBuilder &builder, ValueRange operands,
                                     ValueRange, ValueRange resultCotangents,
                                     MutableArrayRef<Value> operandCotangents) {
  VJPEmitter e(builder, getLoc());
  operandCotangents[0] = reductionVJP(e, operands[0], resultCotangents[0],
                                      getDims(), /*mean=*/true);
  return success();
}

LogicalResult
CrossEntropyOp::buildVJP(OpBuilder &builder, ValueRange operands, ValueRange,
                         ValueRange resultCotangents,
                         MutableArrayRef<Value> operandCotangents) {
  operandCotangents[0] = CrossEntropyGradOp::create(
      builder, getLoc(), operands[0], operands[1], resultCotangents[0]);
  return success();
}

LogicalResult ConstantOp::buildVJP(OpBuilder &, ValueRange, ValueRange,
                                   ValueRange, MutableArrayRef<Value>) {
  return success();
}
