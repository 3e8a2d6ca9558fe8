//===- ReportCommunication.cpp - static communication volume --------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Simulate/Traffic.h"
#include "tpc/Transforms/Passes.h"
#include <cmath>
#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_TPREPORTCOMMUNICATION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
struct Volume {
  int64_t calls = 0;
  double bytes = 0;
};

struct TPReportCommunication
    : public tp::impl::TPReportCommunicationBase<TPReportCommunication> {
  void runOnOperation() override {
    SmallVector<int64_t> gridShape = gridShapeOf(getOperation());
    bool failedLayout = false;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      std::map<std::string, Volume> volumes;
      func.walk([&](Operation *op) {
        FailureOr<SmallVector<CollectiveTraffic>> traffic =
            collectiveTraffic(op, gridShape);
        if (failed(traffic)) {
          failedLayout = true;
          return;
        }
        for (const CollectiveTraffic &exchange : *traffic) {
          Volume &v = volumes[exchange.kind];
          v.calls += 1;
          v.bytes += exchange.bytes;
        }
      });
      std::string text;
      llvm::raw_string_ostream os(text);
      double total = 0;
      os << "communication per rank:";
      for (const auto &[kind, v] : volumes) {
        os << " " << kind << " " << std::llround(v.bytes) << " bytes ("
           << v.calls << " calls),";
        total += v.bytes;
      }
      // Whole bytes, as tp-run's metrics count them (the ring rule's
      // fractions round the same way on both sides).
      os << " total " << std::llround(total) << " bytes";
      // Named in the text; a location would print the whole function.
      mlir::emitRemark(UnknownLoc::get(func.getContext()))
          << "@" << func.getName() << " " << text;
    }
    // A layout no kernel runs was reported on its op.
    if (failedLayout)
      signalPassFailure();
  }
};
} // namespace
