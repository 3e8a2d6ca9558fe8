//===- ChooseScheme.cpp - tp-pipeline's mode=auto -------------------------===//
//
// Compiles the model under every scheme and grid that fits the rank count
// (and with and without recomputation, and 1D with and without sequence
// parallelism), predicts each compiled step on the cluster with the step
// simulator, drops those over the memory budget, and compiles the fastest.
//
//===----------------------------------------------------------------------===//

#include "tpc/Pipelines/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "tpc/Simulate/StepSimulator.h"
#include "tpc/Simulate/Traffic.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tp;

namespace {

/// One compilation tp-pipeline could make.
struct Candidate {
  Candidate(ParallelMode mode, GridShape grid, bool seqParallel = false)
      : mode(mode), grid(std::move(grid)), seqParallel(seqParallel) {}

  ParallelMode mode;
  GridShape grid;
  bool seqParallel;
  int64_t dataParallel = 1;
  bool shardOptimizer = false;
  RematMode remat = RematMode::None;

  std::optional<StepPrediction> prediction;
  std::string rejected; // why, when it was
  bool overBudget = false;

  std::string str() const {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "mode=" << stringifyParallelMode(mode);
    if (!grid.empty())
      os << " grid=" << grid.str();
    if (seqParallel)
      os << " seq-parallel=true";
    if (dataParallel > 1)
      os << " dp=" << dataParallel;
    if (shardOptimizer)
      os << " shard-optimizer=true";
    os << " remat=" << (remat == RematMode::Layer ? "layer" : "none");
    return text;
  }
};

/// Every scheme and grid for `ranks` ranks of tensor parallelism.
SmallVector<Candidate> tensorCandidatesFor(int64_t ranks) {
  SmallVector<Candidate> out;
  if (ranks == 1) {
    out.emplace_back(ParallelMode::None, GridShape());
    return out;
  }
  out.emplace_back(ParallelMode::OneD, GridShape{{ranks}});
  out.emplace_back(ParallelMode::OneD, GridShape{{ranks}},
                   /*seqParallel=*/true);
  for (int64_t q = 2; q * q <= ranks; ++q) {
    if (q * q == ranks)
      out.emplace_back(ParallelMode::TwoD, GridShape{{q, q}});
    if (ranks % (q * q) == 0 && ranks / (q * q) >= 2)
      out.emplace_back(ParallelMode::TwoHalfD,
                       GridShape{{q, q, ranks / (q * q)}});
    if (q * q * q == ranks)
      out.emplace_back(ParallelMode::ThreeD, GridShape{{q, q, q}});
  }
  return out;
}

/// Every split of `ranks` into dp replicas of a tensor-parallel scheme.
SmallVector<Candidate> candidatesFor(int64_t ranks) {
  SmallVector<Candidate> out;
  for (int64_t replicas = 1; replicas <= ranks; ++replicas) {
    if (ranks % replicas != 0)
      continue;
    for (Candidate c : tensorCandidatesFor(ranks / replicas)) {
      c.dataParallel = replicas;
      if (replicas > 1 && c.mode == ParallelMode::None) {
        // Data parallelism alone: 1D over one rank.
        c.mode = ParallelMode::OneD;
        c.grid = GridShape{{1}};
      }
      out.push_back(c);
    }
  }
  return out;
}

std::string bytesText(double bytes) {
  return llvm::formatv("{0:f0} bytes", bytes).str();
}

class ChooseScheme : public PassWrapper<ChooseScheme, OperationPass<ModuleOp>> {
public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ChooseScheme)

  explicit ChooseScheme(const PipelineOptions &given) {
    options.copyOptionValuesFrom(given);
  }
  ChooseScheme(const ChooseScheme &other) : PassWrapper(other) {
    options.copyOptionValuesFrom(other.options);
  }
  StringRef getArgument() const override { return "tp-choose-scheme"; }
  StringRef getDescription() const override {
    return "tp-pipeline mode=auto: compile every scheme, keep the fastest";
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::Expected<ClusterModel> cluster = loadCluster(options.cluster);
    if (!cluster) {
      emitError(UnknownLoc::get(&getContext()), "tp-pipeline: ")
          << llvm::toString(cluster.takeError());
      return signalPassFailure();
    }
    const int64_t ranks = options.grid.getValue().sizes.front();
    const double budget = options.memoryBudget > 0
                              ? double(options.memoryBudget)
                              : cluster->deviceFor(ranks).memoryBytes;

    // ZeRO-1 and recomputation only save memory (recomputation costs
    // time, ZeRO-1 moves the same bytes): each shape tries them, in that
    // order, only while it does not fit. A given remat is kept.
    SmallVector<Candidate> candidates;
    const bool chooseRemat = options.train && !options.remat.hasValue();
    for (const Candidate &shape : candidatesFor(ranks)) {
      SmallVector<std::pair<bool, RematMode>> variants = {
          {false, options.remat}};
      if (shape.dataParallel > 1 && options.train)
        variants.push_back({true, options.remat});
      if (chooseRemat)
        variants.push_back(
            {shape.dataParallel > 1 && options.train, RematMode::Layer});
      for (auto [shardOptimizer, remat] : variants) {
        Candidate c = shape;
        c.shardOptimizer = shardOptimizer;
        c.remat = remat;
        evaluate(c, *cluster, budget);
        candidates.push_back(std::move(c));
        if (!candidates.back().overBudget)
          break;
      }
    }

    // Fastest first; rejected ones after, in the order they were tried.
    SmallVector<Candidate *> ranked;
    for (Candidate &c : candidates)
      ranked.push_back(&c);
    auto before = [](const Candidate *a, const Candidate *b) {
      if (a->rejected.empty() != b->rejected.empty())
        return a->rejected.empty();
      if (a->rejected.empty() &&
          a->prediction->seconds != b->prediction->seconds)
        return a->prediction->seconds < b->prediction->seconds;
      return a < b; // tried first
    };
    llvm::sort(ranked, before);
    if (options.explain)
      for (auto [index, c] : llvm::enumerate(ranked)) {
        // Named in the text; the module's location would print all of it.
        InFlightDiagnostic remark = emitRemark(UnknownLoc::get(&getContext()))
                                    << "tp-pipeline mode=auto: ";
        if (!c->rejected.empty()) {
          remark << "rejected " << c->str() << ": " << c->rejected;
          continue;
        }
        const StepPrediction &p = *c->prediction;
        remark << llvm::formatv(
            "{0}. {1}: {2:f3} ms per step, {3} per rank, {4} sent per rank "
            "({5:f3} ms exchanging, {6:f3} ms exposed)",
            index + 1, c->str(), p.seconds * 1e3,
            bytesText(p.arenaBytes + p.argumentBytes),
            bytesText(p.exchangeBytes), p.exchangeSeconds * 1e3,
            p.exposedExchangeSeconds * 1e3);
      }
    Candidate &best = *ranked.front();
    if (!best.rejected.empty()) {
      InFlightDiagnostic error = emitError(UnknownLoc::get(&getContext()))
                                 << "tp-pipeline mode=auto: no scheme fits "
                                 << ranks << " ranks of " << cluster->name;
      for (const Candidate *c : ranked)
        error << "; " << c->str() << ": " << c->rejected;
      return signalPassFailure();
    }
    emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
        "tp-pipeline mode=auto: chose {0} for {1} ranks of "
        "{2}: {3:f3} ms per step, {4} per rank ({5} "
        "candidates, {6} rejected)",
        best.str(), ranks, cluster->name, best.prediction->seconds * 1e3,
        bytesText(best.prediction->arenaBytes + best.prediction->argumentBytes),
        candidates.size(), llvm::count_if(candidates, [](const Candidate &c) {
          return !c.rejected.empty();
        }));
    // The module becomes the chosen compilation.
    OpPassManager pm(ModuleOp::getOperationName());
    if (failed(buildCandidate(pm, best)) || failed(runPipeline(pm, module)))
      return signalPassFailure();
  }

private:
  LogicalResult buildCandidate(OpPassManager &pm, const Candidate &c,
                               std::string *error = nullptr) {
    PipelineOptions concrete;
    concrete.copyOptionValuesFrom(options);
    concrete.mode = c.mode;
    concrete.grid = c.grid;
    concrete.seqParallel = c.seqParallel;
    concrete.dataParallel = c.dataParallel;
    concrete.shardOptimizer = c.shardOptimizer;
    concrete.remat = c.remat;
    concrete.cluster = "";
    concrete.explain = false;
    concrete.memoryBudget = 0;
    return buildPipeline(pm, concrete, [&](const Twine &message) {
      if (error)
        *error = message.str();
      return failure();
    });
  }

  /// Compiles `c` on a copy of the module (nested in it while it runs, as a
  /// pass may only run pipelines below its op) and predicts its step.
  void evaluate(Candidate &c, const ClusterModel &cluster, double budget) {
    ModuleOp module = getOperation();
    OpPassManager pm(ModuleOp::getOperationName());
    if (failed(buildCandidate(pm, c, &c.rejected)))
      return;
    auto copy = cast<ModuleOp>(module->clone());
    module.getBody()->push_back(copy);
    {
      // Its diagnostics are the candidate's: the first error rejects it.
      ScopedDiagnosticHandler quiet(&getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && c.rejected.empty())
          c.rejected = d.str();
        return success();
      });
      if (failed(runPipeline(pm, copy)) && c.rejected.empty())
        c.rejected = "it does not compile";
    }
    if (c.rejected.empty()) {
      auto step = copy.lookupSymbol<func::FuncOp>(options.train ? "train_step"
                                                                : "loss");
      FailureOr<StepPrediction> p =
          step ? simulateStep(step, gridShapeOf(copy), cluster)
               : FailureOr<StepPrediction>(failure());
      if (failed(p)) {
        c.rejected = "the simulator cannot time it";
      } else {
        c.prediction = *p;
        const double bytes = p->arenaBytes + p->argumentBytes;
        if (bytes > budget) {
          c.overBudget = true;
          c.rejected = bytesText(bytes) + " per rank exceeds the budget of " +
                       bytesText(budget);
        }
      }
    }
    copy.erase();
  }

  PipelineOptions options;
};

} // namespace

std::unique_ptr<Pass>
mlir::tp::createChooseScheme(const PipelineOptions &options) {
  return std::make_unique<ChooseScheme>(options);
}
