//===- FuseElementwise.cpp - fused elementwise ops before autodiff --------===//
//
// Chains of elementwise ops whose intermediate a GPU kernel need not write
// become one tp op; their VJPs then give fused gradients too (as
// tp-fuse-attention does for attention). Each fused op's sharding rule is
// the union of its parts', so every scheme lays it out as before.
//
//===----------------------------------------------------------------------===//

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPFUSEELEMENTWISE
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// Keeps `from`'s marks (the transformer layer, for recomputation) on `to`.
void keepMarks(Operation *from, Operation *to) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    to->setDiscardableAttr(attr.getName(), attr.getValue());
}

/// mul(silu(gate), up), in either operand order, where nothing else reads
/// silu(gate) -> swiglu(gate, up).
struct FuseSwiglu : public OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (unsigned i : {0u, 1u}) {
      auto silu = op->getOperand(i).getDefiningOp<SiluOp>();
      Value up = op->getOperand(1 - i);
      if (!silu || !silu->hasOneUse() || up.getType() != silu.getType() ||
          op.getType() != silu.getType())
        continue;
      auto swiglu = SwigluOp::create(
          rewriter, rewriter.getFusedLoc({silu.getLoc(), op.getLoc()}),
          silu.getInput(), up);
      keepMarks(op, swiglu);
      rewriter.replaceOp(op, swiglu.getResult());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no silu(gate) * up");
  }
};

/// norm(add(input, residual), ...) where the sum is not broadcast ->
/// add_norm(input, residual, ...): the sum's other uses (the residual
/// stream) read the fused op's sum.
template <typename NormOp, typename AddNormOp>
struct FuseAddNorm : public OpRewritePattern<NormOp> {
  FuseAddNorm(MLIRContext *context, bool acrossLayers)
      : OpRewritePattern<NormOp>(context), acrossLayers(acrossLayers) {}
  LogicalResult matchAndRewrite(NormOp norm,
                                PatternRewriter &rewriter) const override {
    auto add = norm.getInput().template getDefiningOp<AddOp>();
    if (!add || add.getLhs().getType() != add.getType() ||
        add.getRhs().getType() != add.getType())
      return rewriter.notifyMatchFailure(norm, "no residual add");
    StringRef layer = TPDialect::LayerAttrHelper::getNameStr();
    if (!acrossLayers && add->getAttr(layer) != norm->getAttr(layer))
      return rewriter.notifyMatchFailure(norm, "the add ends another layer");
    SmallVector<Value> operands = {add.getLhs(), add.getRhs()};
    llvm::append_range(operands, norm->getOperands().drop_front());
    Operation *fused = rewriter.create(
        rewriter.getFusedLoc({add.getLoc(), norm.getLoc()}),
        rewriter.getStringAttr(AddNormOp::getOperationName()), operands,
        {add.getType(), norm.getType()}, norm->getAttrs());
    // The norm's layer: the op computes its input.
    keepMarks(norm, fused);
    rewriter.replaceOp(norm, fused->getResult(1));
    rewriter.replaceOp(add, fused->getResult(0));
    return success();
  }

private:
  bool acrossLayers;
};

struct TPFuseElementwise
    : public tp::impl::TPFuseElementwiseBase<TPFuseElementwise> {
  using TPFuseElementwiseBase::TPFuseElementwiseBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSwiglu>(&getContext());
    patterns.add<FuseAddNorm<LayerNormOp, AddLayerNormOp>,
                 FuseAddNorm<RmsNormOp, AddRmsNormOp>>(&getContext(),
                                                       acrossLayers);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
