//===- PrintShardingRules.cpp - report each op's sharding rule ------------===//

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPPRINTSHARDINGRULES
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
struct TPPrintShardingRules
    : public tp::impl::TPPrintShardingRulesBase<TPPrintShardingRules> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([](ShardingRuleOpInterface op) {
      ShardingRule rule = op.getShardingRule();
      if (failed(rule.verify(op)))
        return WalkResult::interrupt();
      op->emitRemark() << "sharding rule: " << rule.str();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
