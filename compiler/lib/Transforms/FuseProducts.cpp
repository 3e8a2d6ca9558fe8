//===- FuseProducts.cpp - products fused with their epilogues -------------===//
//
// On the per-rank program, after every collective is placed: a product
// whose result the same rank consumes at once (no sum across ranks between)
// is fused with what follows it, the forms cuBLASLt's epilogues and a
// chunked vocabulary head compute without storing the intermediate:
//
//   add(matmul(x, w), bias) [-> gelu]          -> tp.linear
//   gelu_grad(matmul(a, b), pre) -> reduce_sum -> tp.linear_gelu_grad
//   cross_entropy(matmul(h, w)) and its grad   -> tp.linear_cross_entropy
//                                                 (+ _grad): no logits
//
// Collectives are untouched, so every scheme's traffic stays as it was.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPFUSEPRODUCTS
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// `lhs op(rhs)` with a 2-D rhs, no transposed lhs and no scale: the
/// products the fused ops take.
bool isPlainProduct(MatmulOp matmul) {
  return matmul && !matmul.getTransposeLhs() &&
         matmul.getAlphaAttr().getValueAsDouble() == 1.0 &&
         tensorType(matmul.getRhs()).getRank() == 2 &&
         tensorType(matmul.getLhs()).getRank() >= 2;
}

/// The discardable marks of `from` worth keeping on the op fusing it (the
/// layer, recomputation); the per-result rebalance dims are rebuilt.
void keepMarks(Operation *from, Operation *to) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    if (attr.getName() != TPDialect::RebalanceDimsAttrHelper::getNameStr())
      to->setDiscardableAttr(attr.getName(), attr.getValue());
}

/// Sets `fused`'s per-result rebalance dims from the values it replaces,
/// result by result (none when none of them had any).
void keepRebalanceDims(Operation *fused, ArrayRef<Value> replaced) {
  StringRef name = TPDialect::RebalanceDimsAttrHelper::getNameStr();
  MLIRContext *ctx = fused->getContext();
  SmallVector<Attribute> perResult;
  bool any = false;
  for (Value value : replaced) {
    auto result = cast<OpResult>(value);
    auto dims = result.getOwner()->getAttrOfType<ArrayAttr>(name);
    any |= bool(dims);
    perResult.push_back(
        dims ? dims[result.getResultNumber()]
             : ArrayAttr::get(
                   ctx, SmallVector<Attribute>(tensorType(value).getRank(),
                                               UnitAttr::get(ctx))));
  }
  if (any)
    fused->setAttr(name, ArrayAttr::get(ctx, perResult));
}

/// add(matmul(x, w), bias) (either operand order), the product read by
/// nothing else and the bias a vector over its columns -> tp.linear; with a
/// tp.gelu of the sum, the GELU too (the sum, when anything else reads it,
/// is then the preactivation result).
struct FuseLinear : public OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    for (unsigned i : {0u, 1u}) {
      auto matmul = add->getOperand(i).getDefiningOp<MatmulOp>();
      Value bias = add->getOperand(1 - i);
      if (!isPlainProduct(matmul) || !matmul->hasOneUse() ||
          matmul.getType() != add.getType() ||
          tensorType(bias).getRank() != 1 ||
          tensorType(bias).getDimSize(0) != add.getType().getShape().back())
        continue;
      GeluOp gelu;
      for (Operation *user : add->getUsers())
        if (auto g = dyn_cast<GeluOp>(user); g && !gelu)
          gelu = g;
      // Forward-only programs read the sum only through the GELU.
      const bool keepSum = !gelu || !add->hasOneUse();
      SmallVector<Type> types = {add.getType()};
      SmallVector<Location> locs = {matmul.getLoc(), add.getLoc()};
      if (gelu)
        locs.push_back(gelu.getLoc());
      if (gelu && keepSum)
        types.push_back(add.getType());
      // At the add: every use of the sum, and of the GELU, follows it.
      rewriter.setInsertionPoint(add);
      auto linear = LinearOp::create(
          rewriter, rewriter.getFusedLoc(locs), types, matmul.getLhs(),
          matmul.getRhs(), bias, matmul.getTransposeRhsAttr(),
          gelu ? rewriter.getUnitAttr() : nullptr, matmul.getPrecisionAttr());
      keepMarks(matmul, linear);
      SmallVector<Value> replaced = {gelu ? gelu.getResult() : add.getResult()};
      if (gelu && keepSum)
        replaced.push_back(add.getResult());
      keepRebalanceDims(linear, replaced);
      if (gelu)
        rewriter.replaceOp(gelu, linear.getResult());
      if (keepSum)
        rewriter.replaceOp(add, gelu ? linear.getPreactivation()
                                     : linear.getResult());
      else
        rewriter.eraseOp(add);
      rewriter.eraseOp(matmul);
      return success();
    }
    return rewriter.notifyMatchFailure(add, "no product plus a bias");
  }
};

/// gelu_grad(matmul(a, b), pre) whose sum over all but the last dim is
/// taken (a bias gradient) -> tp.linear_gelu_grad.
struct FuseLinearGeluGrad : public OpRewritePattern<GeluGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GeluGradOp grad,
                                PatternRewriter &rewriter) const override {
    auto matmul = grad.getResultGrad().getDefiningOp<MatmulOp>();
    if (!isPlainProduct(matmul) || !matmul->hasOneUse() ||
        matmul.getType() != grad.getType())
      return rewriter.notifyMatchFailure(grad, "not the gradient of a product");
    const int64_t rank = grad.getType().getRank();
    ReduceSumOp biasGrad;
    for (Operation *user : grad->getUsers())
      if (auto sum = dyn_cast<ReduceSumOp>(user);
          sum && !biasGrad &&
          llvm::equal(sum.getDims(), llvm::seq<int64_t>(0, rank - 1)))
        biasGrad = sum;
    if (!biasGrad)
      return rewriter.notifyMatchFailure(grad, "no bias gradient");
    rewriter.setInsertionPoint(grad);
    auto fused = LinearGeluGradOp::create(
        rewriter,
        rewriter.getFusedLoc(
            {matmul.getLoc(), grad.getLoc(), biasGrad.getLoc()}),
        TypeRange{grad.getType(), biasGrad.getType()}, matmul.getLhs(),
        matmul.getRhs(), grad.getInput(), matmul.getTransposeRhsAttr(),
        matmul.getPrecisionAttr());
    keepMarks(matmul, fused);
    keepRebalanceDims(fused, {grad.getResult(), biasGrad.getResult()});
    // The bias gradient is now computed before its old place.
    rewriter.replaceOp(biasGrad, fused.getBiasGrad());
    rewriter.replaceOp(grad, fused.getPreactivationGrad());
    rewriter.eraseOp(matmul);
    return success();
  }
};

/// The value `value` is, seen through reshapes with one use.
Value throughReshapes(Value value) {
  while (auto reshape = value.getDefiningOp<ReshapeOp>()) {
    if (!reshape->hasOneUse())
      break;
    value = reshape.getInput();
  }
  return value;
}

/// cross_entropy(matmul(h, w), targets) and, when the logits have one,
/// their gradient with its two products (the input's and the weight's, as
/// tp.matmul's VJP builds them) -> tp.linear_cross_entropy and
/// tp.linear_cross_entropy_grad, which recompute the logits chunk by chunk.
struct FuseLinearCrossEntropy : public OpRewritePattern<CrossEntropyOp> {
  FuseLinearCrossEntropy(MLIRContext *context, int64_t chunk)
      : OpRewritePattern(context), chunk(chunk) {}

  LogicalResult matchAndRewrite(CrossEntropyOp loss,
                                PatternRewriter &rewriter) const override {
    auto matmul = loss.getLogits().getDefiningOp<MatmulOp>();
    if (!isPlainProduct(matmul))
      return rewriter.notifyMatchFailure(loss, "logits of no plain product");
    Value input = matmul.getLhs(), weight = matmul.getRhs();
    const bool transposed = matmul.getTransposeRhs();
    Attribute vocabAxes =
        loss->getAttr(TPDialect::VocabAxesAttrHelper::getNameStr());
    CrossEntropyGradOp grad;
    for (Operation *user : matmul->getUsers()) {
      if (user == loss)
        continue;
      auto g = dyn_cast<CrossEntropyGradOp>(user);
      if (!g || grad || g.getTargets() != loss.getTargets() ||
          g->getAttr(TPDialect::VocabAxesAttrHelper::getNameStr()) != vocabAxes)
        return rewriter.notifyMatchFailure(loss, "the logits have other uses");
      grad = g;
    }
    // The logits gradient's uses: the input's product (dl op(w)^T) and the
    // weight's (through reshapes folding the tokens into rows).
    MatmulOp inputProduct, weightProduct;
    if (grad) {
      for (Operation *user : grad->getUsers()) {
        Operation *product = user;
        if (auto reshape = dyn_cast<ReshapeOp>(user);
            reshape && reshape->hasOneUse())
          product = *reshape->user_begin();
        auto m = dyn_cast<MatmulOp>(product);
        if (!m)
          return rewriter.notifyMatchFailure(loss, "a logits gradient use");
        if (m.getLhs() == grad.getResult() && m.getRhs() == weight &&
            !m.getTransposeLhs() && m.getTransposeRhs() == !transposed &&
            m.getType() == input.getType() && !inputProduct)
          inputProduct = m;
        else if (m.getTransposeLhs() && !m.getTransposeRhs() &&
                 m.getType().getShape() == tensorType(weight).getShape() &&
                 !weightProduct &&
                 throughReshapes(transposed ? m.getLhs() : m.getRhs()) ==
                     grad.getResult() &&
                 throughReshapes(transposed ? m.getRhs() : m.getLhs()) == input)
          weightProduct = m;
        else
          return rewriter.notifyMatchFailure(loss, "a logits gradient use");
      }
      if (!inputProduct || !weightProduct)
        return rewriter.notifyMatchFailure(loss, "not the products' VJP");
    }
    const int64_t vocab = tensorType(weight).getDimSize(transposed ? 0 : 1);
    IntegerAttr chunkAttr = rewriter.getI64IntegerAttr(std::min(chunk, vocab));
    rewriter.setInsertionPoint(loss);
    auto fused = LinearCrossEntropyOp::create(
        rewriter, rewriter.getFusedLoc({matmul.getLoc(), loss.getLoc()}), input,
        weight, loss.getTargets(), matmul.getTransposeRhsAttr(), chunkAttr,
        matmul.getPrecisionAttr());
    keepMarks(loss, fused);
    rewriter.replaceOp(loss, fused.getResult());
    if (grad) {
      // At the logits gradient: both products follow it.
      rewriter.setInsertionPoint(grad);
      // The weight gradient keeps its product's type (f32 under bf16
      // storage).
      auto fusedGrad = LinearCrossEntropyGradOp::create(
          rewriter,
          rewriter.getFusedLoc(
              {grad.getLoc(), inputProduct.getLoc(), weightProduct.getLoc()}),
          TypeRange{inputProduct.getType(), weightProduct.getType()}, input,
          weight, grad.getTargets(), grad.getLossGrad(),
          matmul.getTransposeRhsAttr(), chunkAttr, matmul.getPrecisionAttr());
      keepMarks(grad, fusedGrad);
      rewriter.replaceOp(inputProduct, fusedGrad.getInputGrad());
      Value weightLhs = weightProduct.getLhs(),
            weightRhs = weightProduct.getRhs();
      rewriter.replaceOp(weightProduct, fusedGrad.getWeightGrad());
      for (Value folded : {weightLhs, weightRhs})
        if (auto reshape = folded.getDefiningOp<ReshapeOp>();
            reshape && reshape->use_empty())
          rewriter.eraseOp(reshape);
      rewriter.eraseOp(grad);
    }
    rewriter.eraseOp(matmul);
    return success();
  }

  int64_t chunk;
};

struct TPFuseProducts : public tp::impl::TPFuseProductsBase<TPFuseProducts> {
  using Base::Base;
  void runOnOperation() override {
    if (vocabChunk < 1) {
      getOperation().emitError()
          << "tp-fuse-products: vocab-chunk must be positive, got "
          << static_cast<int64_t>(vocabChunk);
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseLinear, FuseLinearGeluGrad>(&getContext());
    patterns.add<FuseLinearCrossEntropy>(&getContext(), vocabChunk);
    // In program order, without moving ops: the fused ops stand where
    // their first part stood.
    GreedyRewriteConfig config;
    config.setUseTopDownTraversal(true);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace
