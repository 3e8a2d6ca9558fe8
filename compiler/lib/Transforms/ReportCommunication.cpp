//===- ReportCommunication.cpp - static communication volume --------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/ADT/TypeSwitch.h"
#include <cmath>
#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_TPREPORTCOMMUNICATION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
/// Bytes one rank holds of `type` under its layout.
double localBytes(RankedTensorType type, ArrayRef<int64_t> gridShape) {
  double bytes =
      double(type.getNumElements()) * ((type.getElementTypeBitWidth() + 7) / 8);
  if (DistAttr dist = getDistLayout(type))
    for (int64_t d = 0; d < type.getRank(); ++d)
      for (int64_t axis : dist.getSplitAxes(d))
        bytes /= double(gridShape[axis]);
  return bytes;
}

struct Volume {
  int64_t calls = 0;
  double bytes = 0;
};

struct TPReportCommunication
    : public tp::impl::TPReportCommunicationBase<TPReportCommunication> {
  void runOnOperation() override {
    SmallVector<int64_t> gridShape = {1};
    auto grids = llvm::to_vector(getOperation().getOps<GridOp>());
    if (!grids.empty())
      gridShape.assign(grids.front().getShape().begin(),
                       grids.front().getShape().end());
    bool failedLayout = false;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      std::map<std::string, Volume> volumes;
      func.walk([&](Operation *op) {
        // Kernels that gather by themselves: a vocabulary-parallel
        // cross-entropy's per-token statistics, a normalisation's per-row
        // statistics of split features.
        FailureOr<SmallVector<int64_t>> kernelAxes = SmallVector<int64_t>();
        SmallVector<int64_t> gathers;
        if (auto vocabParallel = dyn_cast<VocabParallelOpInterface>(op)) {
          kernelAxes = vocabParallel.getVocabParallelAxes();
          gathers = vocabParallel.getKernelGathers();
        } else if (auto splitStats = dyn_cast<SplitStatisticsOpInterface>(op)) {
          kernelAxes = splitStats.getFeatureAxes();
          gathers = splitStats.getKernelGathers();
        }
        if (failed(kernelAxes)) {
          failedLayout = true;
          return;
        }
        // In the per-rank program the axes are attributes (tp-partition).
        bool perRank = false;
        for (StringRef name : {TPDialect::VocabAxesAttrHelper::getNameStr(),
                               TPDialect::FeatureAxesAttrHelper::getNameStr()})
          if (auto axes = op->getAttrOfType<DenseI64ArrayAttr>(name);
              axes && kernelAxes->empty()) {
            kernelAxes = SmallVector<int64_t>(axes.asArrayRef());
            perRank = true;
          }
        if (!gathers.empty() && !kernelAxes->empty()) {
          auto rows = cast<RankedTensorType>(op->getOperand(0).getType());
          double n = 1;
          for (int64_t axis : *kernelAxes)
            n *= double(gridShape[axis]);
          // Rows of this rank's operand: its elements over its features.
          double localFeatures = double(rows.getShape().back());
          if (!perRank)
            localFeatures /= n;
          double localRows = localBytes(rows, gridShape) /
                             (rows.getElementTypeBitWidth() / 8) /
                             localFeatures;
          Volume &v = volumes["all_gather"];
          for (int64_t floats : gathers) {
            v.calls += 1;
            v.bytes += (n - 1) * double(floats) * localRows * sizeof(float);
          }
          return;
        }
        auto axesAttr = op->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
        if (!axesAttr)
          return;
        double n = 1;
        for (int64_t axis : axesAttr.asArrayRef())
          n *= double(gridShape[axis]);
        auto in = cast<RankedTensorType>(op->getOperand(0).getType());
        auto out = cast<RankedTensorType>(op->getResult(0).getType());
        double fraction = (n - 1) / n;
        std::optional<std::pair<std::string, double>> entry =
            llvm::TypeSwitch<Operation *,
                             std::optional<std::pair<std::string, double>>>(op)
                .Case([&](AllReduceOp) {
                  return std::make_pair(std::string("all_reduce"),
                                        2 * fraction *
                                            localBytes(in, gridShape));
                })
                .Case([&](AllGatherOp) {
                  return std::make_pair(std::string("all_gather"),
                                        fraction * localBytes(out, gridShape));
                })
                .Case([&](ReduceScatterOp) {
                  return std::make_pair(std::string("reduce_scatter"),
                                        fraction * localBytes(in, gridShape));
                })
                .Case([&](RingShiftStartOp) {
                  // One block to the next rank (none over one rank).
                  return std::make_pair(std::string("ring_shift"),
                                        n > 1 ? localBytes(in, gridShape)
                                              : 0.0);
                })
                .Case([&](AllToAllOp) {
                  return std::make_pair(std::string("all_to_all"),
                                        fraction * localBytes(in, gridShape));
                })
                .Default([](Operation *) { return std::nullopt; });
        if (!entry)
          return;
        Volume &v = volumes[entry->first];
        v.calls += 1;
        v.bytes += entry->second;
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
