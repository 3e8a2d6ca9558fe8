//===- Simulate.cpp - predicted run time per rank on a cluster ------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Simulate/StepSimulator.h"
#include "tpc/Simulate/Traffic.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_TPSIMULATE
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
struct TPSimulate : public tp::impl::TPSimulateBase<TPSimulate> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (clusterPath.empty()) {
      module.emitError("tp-simulate: needs cluster=FILE, a cluster "
                       "description (docs/simulator.md)");
      return signalPassFailure();
    }
    llvm::Expected<ClusterModel> cluster = loadCluster(clusterPath);
    if (!cluster) {
      module.emitError("tp-simulate: ") << llvm::toString(cluster.takeError());
      return signalPassFailure();
    }
    SmallVector<int64_t> gridShape = gridShapeOf(module);
    if (llvm::Error error =
            cluster->checkWorld(llvm::product_of(gridShape), clusterPath)) {
      module.emitError("tp-simulate: ") << llvm::toString(std::move(error));
      return signalPassFailure();
    }
    auto ms = [](double seconds) { return seconds * 1e3; };
    auto describe = [&](StringRef name, const StepPrediction &p) {
      // Named in the text; a location would print the whole function.
      emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
          "@{0} on {1}: {2:f3} ms per run (products {3:f3} ms, "
          "{4:e3} flops; other kernels {5:f3} ms; exchanges {6:f3} "
          "ms, {7:f3} ms exposed); {8:f0} bytes per rank (arena {9:f0}"
          " + arguments {10:f0})",
          name, cluster->name, ms(p.seconds), ms(p.productSeconds),
          p.productFlops, ms(p.otherSeconds), ms(p.exchangeSeconds),
          ms(p.exposedExchangeSeconds), p.arenaBytes + p.argumentBytes,
          p.arenaBytes, p.argumentBytes);
    };
    // A pipelined program is one function per stage (`@<name>_stage<s>`,
    // tp-pipeline-stages), replayed together.
    std::map<std::string, SmallVector<func::FuncOp>> pipelines;
    for (auto func : module.getOps<func::FuncOp>()) {
      auto [base, stage] = func.getName().rsplit("_stage");
      unsigned index;
      if (!stage.empty() && !stage.getAsInteger(10, index) &&
          gridShape.front() > 1 && index < gridShape.front()) {
        SmallVector<func::FuncOp> &stages = pipelines[base.str()];
        stages.resize(gridShape.front());
        stages[index] = func;
        continue;
      }
      FailureOr<StepPrediction> p = simulateStep(func, gridShape, *cluster);
      if (failed(p))
        return signalPassFailure();
      describe(func.getName(), *p);
    }
    for (auto &[name, stages] : pipelines) {
      if (llvm::is_contained(stages, func::FuncOp())) {
        module.emitError("tp-simulate: @")
            << name << " lacks a stage of the " << gridShape.front()
            << " the grid's axis 0 has";
        return signalPassFailure();
      }
      FailureOr<PipelinePrediction> p =
          simulatePipeline(stages, gridShape, *cluster);
      if (failed(p))
        return signalPassFailure();
      std::string perStage;
      llvm::raw_string_ostream os(perStage);
      for (auto [s, stage] : llvm::enumerate(p->stages))
        os << llvm::formatv("{0}stage {1}: done at {2:f3} ms, idle {3:f1} %",
                            s ? "; " : "", s, ms(stage.seconds),
                            100 * p->idleSeconds[s] / p->seconds);
      emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
          "@{0} on {1}: {2:f3} ms per run (pipeline of {3} stages; {4})", name,
          cluster->name, ms(p->seconds), stages.size(), perStage);
      for (auto [func, stage] : llvm::zip(stages, p->stages))
        describe(func.getName(), stage);
    }
  }
};
} // namespace
