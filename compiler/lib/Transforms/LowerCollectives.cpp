//===- LowerCollectives.cpp - tp.redistribute -> collectives --------------===//

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPLOWERCOLLECTIVES
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
bool isPrefix(ArrayRef<int64_t> prefix, ArrayRef<int64_t> list) {
  return prefix.size() <= list.size() &&
         list.take_front(prefix.size()) == prefix;
}

/// Rejects, with an error, the layout changes collectives cannot make.
LogicalResult checkLowerable(RedistributeOp op) {
  auto srcType = cast<RankedTensorType>(op.getInput().getType());
  auto dstType = cast<RankedTensorType>(op.getResult().getType());
  DistAttr srcDist = getDistLayout(srcType), dstDist = getDistLayout(dstType);
  if ((srcDist && !srcDist.getSizes().empty()) ||
      (dstDist && !dstDist.getSizes().empty()))
    return op.emitOpError()
           << "tp-lower-collectives: uneven splits are not supported yet";
  Layout current = getLayout(srcType), target = getLayout(dstType);
  for (int64_t axis : target.partial)
    if (!llvm::is_contained(current.partial, axis))
      return op.emitOpError()
             << "tp-lower-collectives: cannot create a partial sum over "
                "grid axis "
             << axis;
  return success();
}

/// tp.redistribute -> collectives, for a layout change checkLowerable
/// accepts.
struct LowerRedistribute : public OpRewritePattern<RedistributeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RedistributeOp op,
                                PatternRewriter &rewriter) const override {
    auto srcType = cast<RankedTensorType>(op.getInput().getType());
    auto dstType = cast<RankedTensorType>(op.getResult().getType());
    if (srcType == dstType) {
      rewriter.replaceOp(op, op.getInput());
      return success();
    }
    DistAttr srcDist = getDistLayout(srcType), dstDist = getDistLayout(dstType);
    FlatSymbolRefAttr grid =
        srcDist ? srcDist.getGrid() : (dstDist ? dstDist.getGrid() : nullptr);
    Layout current = getLayout(srcType), target = getLayout(dstType);
    Location loc = op.getLoc();
    Value value = op.getInput();
    auto step = [&](auto build) {
      RankedTensorType type = withLayout(srcType, grid, current);
      value = build(type);
    };

    // 1. Pending partial sums the target does not keep.
    SmallVector<int64_t> reduce;
    for (int64_t axis : current.partial)
      if (!llvm::is_contained(target.partial, axis))
        reduce.push_back(axis);
    for (size_t d = 0; d < current.split.size() && !reduce.empty(); ++d) {
      ArrayRef<int64_t> have = current.split[d], want = target.split[d];
      if (!isPrefix(have, want) || have.size() == want.size())
        continue;
      SmallVector<int64_t> extra(want.drop_front(have.size()));
      // Leading axes the value is replicated over are split locally first,
      // when the rest can then be reduce-scattered: a partial sum's slice
      // is the slice's partial sum, and the reduction moves less.
      auto isFree = [&](int64_t a) {
        return !llvm::is_contained(current.partial, a) &&
               llvm::none_of(current.split, [&](const auto &axes) {
                 return llvm::is_contained(axes, a);
               });
      };
      size_t lead = 0;
      while (lead < extra.size() && isFree(extra[lead]))
        ++lead;
      if (lead > 0 && lead < extra.size() &&
          llvm::all_of(
              ArrayRef<int64_t>(extra).drop_front(lead),
              [&](int64_t a) { return llvm::is_contained(reduce, a); })) {
        SmallVector<int64_t> local(ArrayRef<int64_t>(extra).take_front(lead));
        llvm::append_range(current.split[d], local);
        step([&](RankedTensorType type) {
          return LocalSplitOp::create(rewriter, loc, type, value, grid,
                                      rewriter.getI64IntegerAttr(d),
                                      rewriter.getDenseI64ArrayAttr(local));
        });
        extra.erase(extra.begin(), extra.begin() + lead);
      }
      if (!llvm::all_of(
              extra, [&](int64_t a) { return llvm::is_contained(reduce, a); }))
        continue;
      for (int64_t a : extra) {
        llvm::erase(reduce, a);
        llvm::erase(current.partial, a);
      }
      llvm::append_range(current.split[d], extra);
      step([&](RankedTensorType type) {
        return ReduceScatterOp::create(rewriter, loc, type, value, grid,
                                       rewriter.getI64IntegerAttr(d),
                                       rewriter.getDenseI64ArrayAttr(extra));
      });
    }
    if (!reduce.empty()) {
      for (int64_t a : reduce)
        llvm::erase(current.partial, a);
      step([&](RankedTensorType type) {
        return AllReduceOp::create(rewriter, loc, type, value, grid,
                                   rewriter.getDenseI64ArrayAttr(reduce));
      });
    }

    // 2. Splits the target does not have: move them to the dimension that
    // wants the axis next (all-to-all), else gather them; minor axes first.
    for (size_t d = 0; d < current.split.size(); ++d) {
      while (!isPrefix(current.split[d], target.split[d])) {
        int64_t axis = current.split[d].back();
        current.split[d].pop_back();
        std::optional<size_t> to;
        for (size_t e = 0; e < target.split.size(); ++e)
          if (e != d && isPrefix(current.split[e], target.split[e]) &&
              current.split[e].size() < target.split[e].size() &&
              target.split[e][current.split[e].size()] == axis)
            to = e;
        if (to) {
          current.split[*to].push_back(axis);
          step([&](RankedTensorType type) {
            return AllToAllOp::create(rewriter, loc, type, value, grid,
                                      rewriter.getI64IntegerAttr(d),
                                      rewriter.getI64IntegerAttr(*to),
                                      rewriter.getDenseI64ArrayAttr({axis}));
          });
        } else {
          step([&](RankedTensorType type) {
            return AllGatherOp::create(rewriter, loc, type, value, grid,
                                       rewriter.getI64IntegerAttr(d),
                                       rewriter.getDenseI64ArrayAttr({axis}));
          });
        }
      }
    }

    // 3. Splits the target adds on axes the value is replicated over.
    for (size_t d = 0; d < current.split.size(); ++d) {
      if (current.split[d].size() == target.split[d].size())
        continue;
      SmallVector<int64_t> extra(ArrayRef<int64_t>(target.split[d])
                                     .drop_front(current.split[d].size()));
      llvm::append_range(current.split[d], extra);
      step([&](RankedTensorType type) {
        return LocalSplitOp::create(rewriter, loc, type, value, grid,
                                    rewriter.getI64IntegerAttr(d),
                                    rewriter.getDenseI64ArrayAttr(extra));
      });
    }
    // Left for the pass to report (an error here would repeat on every
    // visit of the driver).
    if (value.getType() != dstType)
      return rewriter.notifyMatchFailure(op, "reached another layout");
    rewriter.replaceOp(op, value);
    return success();
  }
};

struct TPLowerCollectives
    : public tp::impl::TPLowerCollectivesBase<TPLowerCollectives> {
  void runOnOperation() override {
    // The redistributes, and the local splits that may fuse with the
    // all-reduce before them (new ones are visited as they are created).
    SmallVector<Operation *> ops;
    bool lowerable = true;
    getOperation().walk([&](Operation *op) {
      if (auto redistribute = dyn_cast<RedistributeOp>(op)) {
        lowerable &= succeeded(checkLowerable(redistribute));
        ops.push_back(op);
      } else if (isa<LocalSplitOp>(op)) {
        ops.push_back(op);
      }
    });
    if (!lowerable)
      return signalPassFailure();

    RewritePatternSet patterns(&getContext());
    patterns.add<LowerRedistribute>(&getContext());
    LocalSplitOp::getCanonicalizationPatterns(patterns, &getContext());
    // Only these patterns, only on these ops: no folding of the others.
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingAndNewOps)
        .enableFolding(false)
        .enableConstantCSE(false);
    if (failed(applyOpPatternsGreedily(ops, std::move(patterns), config))) {
      getOperation().emitError()
          << "tp-lower-collectives: the rewrites did not converge";
      return signalPassFailure();
    }
    WalkResult left = getOperation().walk([](RedistributeOp op) {
      op.emitOpError() << "tp-lower-collectives: no sequence of collectives "
                          "found for this layout change";
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
