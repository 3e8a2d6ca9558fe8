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
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Simulate/StepSimulator.h"
#include "tpc/Simulate/Traffic.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/ScopeExit.h"
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

/// The number of transformer layers of `module`'s functions (0 when no op
/// says, or when functions disagree).
int64_t layerCount(ModuleOp module) {
  int64_t count = -1;
  for (auto func : module.getOps<func::FuncOp>()) {
    int64_t layers = 0;
    func.walk([&](Operation *op) {
      if (std::optional<int64_t> layer = layerOf(op))
        layers = std::max(layers, *layer + 1);
    });
    if (count >= 0 && layers != count)
      return 0;
    count = layers;
  }
  return std::max<int64_t>(count, 0);
}

/// Cuts `module` (a clone the caller owns) down to its first `keep`
/// transformer layers: what the ops after the layers took from the last
/// layer they now take from layer keep - 1, and the parameters only the
/// dropped layers used go. Fails where the layers are not alike (then the
/// step is not the same per layer and cannot be extrapolated).
LogicalResult keepLayers(ModuleOp module, int64_t keep) {
  for (auto func : module.getOps<func::FuncOp>()) {
    SmallVector<SmallVector<Operation *>> layers;
    for (Operation &op : func.getBody().front()) {
      std::optional<int64_t> layer = layerOf(&op);
      if (!layer)
        continue;
      if (*layer >= int64_t(layers.size()))
        layers.resize(*layer + 1);
      layers[*layer].push_back(&op);
    }
    if (int64_t(layers.size()) <= keep)
      continue;
    ArrayRef<Operation *> last = layers.back(), kept = layers[keep - 1];
    if (last.size() != kept.size())
      return failure();
    auto dropped = [&](Operation *op) {
      std::optional<int64_t> layer = layerOf(op);
      return layer && *layer >= keep;
    };
    for (auto [from, to] : llvm::zip(last, kept)) {
      if (from->getName() != to->getName() ||
          from->getNumResults() != to->getNumResults())
        return failure();
      for (auto [fromValue, toValue] :
           llvm::zip(from->getResults(), to->getResults())) {
        if (fromValue.getType() != toValue.getType())
          return failure();
        fromValue.replaceUsesWithIf(
            toValue, [&](OpOperand &use) { return !dropped(use.getOwner()); });
      }
    }
    for (ArrayRef<Operation *> layer : llvm::drop_begin(layers, keep))
      for (Operation *op : layer)
        for (Value result : op->getResults())
          for (Operation *user : result.getUsers())
            if (!dropped(user))
              return failure(); // an earlier dropped layer feeds the rest
    for (ArrayRef<Operation *> layer :
         llvm::reverse(llvm::drop_begin(layers, keep)))
      for (Operation *op : llvm::reverse(layer))
        op->erase();
    llvm::BitVector unused(func.getNumArguments());
    for (BlockArgument argument : func.getArguments())
      if (argument.use_empty() &&
          func.getArgAttr(argument.getArgNumber(),
                          TPDialect::ParamAttrHelper::getNameStr()))
        unused.set(argument.getArgNumber());
    if (failed(func.eraseArguments(unused)))
      return failure();
  }
  return success();
}

/// `low` and `high` are predictions of the same compilation with `lowLayers`
/// and `highLayers` transformer layers; the result is the straight line
/// through them at `layers`.
StepPrediction extrapolate(const StepPrediction &low, int64_t lowLayers,
                           const StepPrediction &high, int64_t highLayers,
                           int64_t layers) {
  const double t = double(layers - lowLayers) / double(highLayers - lowLayers);
  auto line = [&](double a, double b) { return a + t * (b - a); };
  StepPrediction p;
  p.seconds = line(low.seconds, high.seconds);
  p.productSeconds = line(low.productSeconds, high.productSeconds);
  p.otherSeconds = line(low.otherSeconds, high.otherSeconds);
  p.exchangeSeconds = line(low.exchangeSeconds, high.exchangeSeconds);
  p.exposedExchangeSeconds =
      line(low.exposedExchangeSeconds, high.exposedExchangeSeconds);
  p.productFlops = line(low.productFlops, high.productFlops);
  p.exchangeBytes = line(low.exchangeBytes, high.exchangeBytes);
  p.arenaBytes = line(low.arenaBytes, high.arenaBytes);
  p.argumentBytes = line(low.argumentBytes, high.argumentBytes);
  return p;
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
    if (llvm::Error error = cluster->checkWorld(ranks, options.cluster)) {
      emitError(UnknownLoc::get(&getContext()), "tp-pipeline: ")
          << llvm::toString(std::move(error));
      return signalPassFailure();
    }
    const double budget = options.memoryBudget > 0
                              ? double(options.memoryBudget)
                              : cluster->deviceFor(ranks).memoryBytes;

    // The layers are alike, so a deep model's candidates are predicted from
    // compiles of kLowLayers and kHighLayers of its layers (a few percent of
    // the whole compile each), on a straight line to all of them; only the
    // choice is compiled whole.
    layers = options.estimateLayers ? layerCount(module) : 0;
    if (layers > kHighLayers + 1) {
      for (auto [keep, cut] : {std::pair{kLowLayers, &lowModule},
                               std::pair{kHighLayers, &highModule}}) {
        *cut = cast<ModuleOp>(module->clone());
        if (failed(keepLayers(*cut, keep))) {
          layers = 0; // not alike: compile every candidate whole
          break;
        }
      }
    } else {
      layers = 0;
    }
    llvm::scope_exit dropCuts([&] {
      for (ModuleOp *cut : {&lowModule, &highModule})
        if (*cut)
          (*cut)->erase();
    });

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
    // The module becomes the chosen compilation; the remark gives its own
    // prediction (with estimated candidates, the check of the estimate).
    OpPassManager pm(ModuleOp::getOperationName());
    if (failed(buildCandidate(pm, best)) || failed(runPipeline(pm, module)))
      return signalPassFailure();
    auto step = module.lookupSymbol<func::FuncOp>(options.train ? "train_step"
                                                                : "loss");
    FailureOr<StepPrediction> chosen =
        step ? simulateStep(step, gridShapeOf(module), *cluster)
             : FailureOr<StepPrediction>(failure());
    if (failed(chosen)) {
      emitError(UnknownLoc::get(&getContext()))
          << "tp-pipeline mode=auto: the simulator cannot time the choice";
      return signalPassFailure();
    }
    // The planner's packing is not exactly linear in the layers (estimates
    // came within 0.1 % in the tests): a choice at the edge of the budget may
    // still miss it whole.
    if (const double bytes = chosen->arenaBytes + chosen->argumentBytes;
        bytes > budget) {
      emitError(UnknownLoc::get(&getContext())) << llvm::formatv(
          "tp-pipeline mode=auto: the choice, {0}, holds {1} per rank "
          "compiled whole, over the budget of {2} (estimated {3}); "
          "estimate-layers=false compiles every candidate whole",
          best.str(), bytesText(bytes), bytesText(budget),
          bytesText(best.prediction->arenaBytes +
                    best.prediction->argumentBytes));
      return signalPassFailure();
    }
    emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
        "tp-pipeline mode=auto: chose {0} for {1} ranks of "
        "{2}: {3:f3} ms per step, {4} per rank ({5} "
        "candidates, {6} rejected{7})",
        best.str(), ranks, cluster->name, chosen->seconds * 1e3,
        bytesText(chosen->arenaBytes + chosen->argumentBytes),
        candidates.size(),
        llvm::count_if(candidates,
                       [](const Candidate &c) { return !c.rejected.empty(); }),
        layers ? llvm::formatv("; each predicted from {0} and {1} of its {2} "
                               "layers",
                               kLowLayers, kHighLayers, layers)
                     .str()
               : std::string());
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
    concrete.estimateLayers = true; // the default, which other modes take
    return buildPipeline(pm, concrete, [&](const Twine &message) {
      if (error)
        *error = message.str();
      return failure();
    });
  }

  /// Compiles `c` on a copy of `source` (nested in the pass's module while
  /// it runs, as a pass may only run pipelines below its op) and predicts
  /// its step; sets `c.rejected` when it does not compile or cannot be timed.
  std::optional<StepPrediction> predict(Candidate &c, ModuleOp source,
                                        const ClusterModel &cluster) {
    OpPassManager pm(ModuleOp::getOperationName());
    if (failed(buildCandidate(pm, c, &c.rejected)))
      return std::nullopt;
    auto copy = cast<ModuleOp>(source->clone());
    getOperation().getBody()->push_back(copy);
    llvm::scope_exit erase([&] { copy.erase(); });
    {
      // Its diagnostics are the candidate's: the first error rejects it.
      ScopedDiagnosticHandler quiet(&getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && c.rejected.empty())
          c.rejected = d.str();
        return success();
      });
      if (failed(runPipeline(pm, copy))) {
        if (c.rejected.empty())
          c.rejected = "it does not compile";
        return std::nullopt;
      }
    }
    auto step =
        copy.lookupSymbol<func::FuncOp>(options.train ? "train_step" : "loss");
    FailureOr<StepPrediction> p =
        step ? simulateStep(step, gridShapeOf(copy), cluster)
             : FailureOr<StepPrediction>(failure());
    if (failed(p)) {
      c.rejected = "the simulator cannot time it";
      return std::nullopt;
    }
    return *p;
  }

  /// Predicts `c`'s step (from two cut modules when `layers` is set) and
  /// rejects it when it does not compile or fit the budget.
  void evaluate(Candidate &c, const ClusterModel &cluster, double budget) {
    if (layers) {
      std::optional<StepPrediction> low = predict(c, lowModule, cluster);
      std::optional<StepPrediction> high =
          low ? predict(c, highModule, cluster) : std::nullopt;
      if (!high)
        return;
      c.prediction = extrapolate(*low, kLowLayers, *high, kHighLayers, layers);
    } else {
      c.prediction = predict(c, getOperation(), cluster);
      if (!c.prediction)
        return;
    }
    const double bytes = c.prediction->arenaBytes + c.prediction->argumentBytes;
    if (bytes > budget) {
      c.overBudget = true;
      c.rejected = bytesText(bytes) + " per rank exceeds the budget of " +
                   bytesText(budget);
    }
  }

  // Estimates from cut modules (runOnOperation): layer counts, the model's
  // layers (0: every candidate compiled whole) and the cut modules.
  static constexpr int64_t kLowLayers = 2, kHighLayers = 3;
  int64_t layers = 0;
  ModuleOp lowModule, highModule;

  PipelineOptions options;
};

} // namespace

std::unique_ptr<Pass>
mlir::tp::createChooseScheme(const PipelineOptions &options) {
  return std::make_unique<ChooseScheme>(options);
}
