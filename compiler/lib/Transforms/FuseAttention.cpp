//===- FuseAttention.cpp - form tp.attention from its parts ---------------===//

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPFUSEATTENTION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// probs = softmax_causal(matmul(q, k^T) * alpha); matmul(probs, v), where
/// nothing else reads the scores or the probabilities and q, k and v have
/// the shapes tp.attention takes.
struct FuseCausalAttention : public OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp context,
                                PatternRewriter &rewriter) const override {
    auto softmax = context.getLhs().getDefiningOp<SoftmaxOp>();
    if (!softmax || !softmax.getCausal() || !softmax->hasOneUse())
      return rewriter.notifyMatchFailure(context, "lhs is no causal softmax");
    auto scores = softmax.getInput().getDefiningOp<MatmulOp>();
    if (!scores || !scores->hasOneUse())
      return rewriter.notifyMatchFailure(context, "softmax of no matmul");
    if (scores.getTransposeLhs() || !scores.getTransposeRhs() ||
        context.getTransposeLhs() || context.getTransposeRhs() ||
        context.getAlphaAttr().getValueAsDouble() != 1.0 ||
        scores.getPrecisionAttr() || context.getPrecisionAttr())
      return rewriter.notifyMatchFailure(context, "not q k^T and probs v");
    Value query = scores.getLhs(), key = scores.getRhs(),
          value = context.getRhs();
    ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key), v = shapeOf(value);
    // Same rank; key and value agree and broadcast over query's batch.
    if (k.size() != q.size() || v.size() != q.size() ||
        k.drop_back() != v.drop_back())
      return rewriter.notifyMatchFailure(context, "operand ranks differ");
    for (size_t d = 0; d + 2 < q.size(); ++d)
      if (k[d] != q[d] && k[d] != 1)
        return rewriter.notifyMatchFailure(context, "key batch not q's or 1");

    auto attention = AttentionOp::create(
        rewriter,
        rewriter.getFusedLoc(
            {scores.getLoc(), softmax.getLoc(), context.getLoc()}),
        query, key, value, scores.getAlphaAttr(), rewriter.getUnitAttr(),
        /*precision=*/nullptr, /*positions=*/Value());
    // Keep marks such as the layer (for recomputation).
    for (NamedAttribute attr : context->getDiscardableAttrs())
      attention->setDiscardableAttr(attr.getName(), attr.getValue());
    rewriter.replaceOp(context, attention.getResult());
    return success();
  }
};

struct TPFuseAttention : public tp::impl::TPFuseAttentionBase<TPFuseAttention> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseCausalAttention>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
