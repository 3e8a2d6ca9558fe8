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
#include "tpc/Transforms/PipelineSchedule.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <set>

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
  /// Pipeline stages around [dp, scheme...], and the micro-batches they
  /// pipeline (1 and 1: no pipeline).
  int64_t stages = 1, microbatches = 1;
  /// A pipeline's layers per virtual stage and predicted idle share.
  std::vector<int64_t> stageLayers;
  double bubble = 0;

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
    if (stages > 1)
      os << " pp=" << stages << " microbatches=" << microbatches;
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

/// The step's batch: the rows of the token input (0 if no function has
/// one).
int64_t batchOf(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (auto input = func.getArgAttrOfType<StringAttr>(
              i, TPDialect::InputAttrHelper::getNameStr());
          input && input.getValue() == "tokens")
        return cast<RankedTensorType>(func.getArgument(i).getType())
            .getDimSize(0);
  return 0;
}

/// The bytes of the model's parameters (the function that takes the most).
double parameterBytesOf(ModuleOp module) {
  double most = 0;
  for (auto func : module.getOps<func::FuncOp>()) {
    double bytes = 0;
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      if (!func.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()) ||
          func.getArgAttr(i, TPDialect::StateAttrHelper::getNameStr()))
        continue;
      bytes += tensorBytes(func.getArgument(i).getType());
    }
    most = std::max(most, bytes);
  }
  return most;
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

/// One micro-batch of a pipeline candidate, timed on its one-micro-batch
/// program (tp-pipeline-stages single-microbatch=true) of a cut module:
/// per layer of the cut, the seconds of its forward and backward halves
/// (the embedding counted with the first layer, the head and loss with the
/// last, as the stage cut counts them), the bytes a micro-batch sends over
/// each cut between layers each way, and what runs once a step (AdamW,
/// the data-parallel exchange) with the bytes held.
struct MicrobatchTiming {
  SmallVector<double> forward, backward;
  SmallVector<double> forwardBytes, backwardBytes;
  /// Per layer, the bytes of its forward values its backward reads: what a
  /// stage holds for each micro-batch in flight.
  SmallVector<double> savedBytes;
  double onceSeconds = 0;
  double arenaBytes = 0, argumentBytes = 0;
};

/// Attributes `step`'s simulated time op by op: an op tagged
/// tp.microbatch to its layer's half; an op a later pass made between them
/// (a ring step, a fused product: it reads the micro-batch) to the half of
/// the tagged op before it; the rest once a step.
MicrobatchTiming attributeMicrobatch(func::FuncOp step,
                                     ArrayRef<double> opFinished,
                                     const StepPrediction &p) {
  MicrobatchTiming t;
  SmallVector<Operation *> ops;
  for (Operation &op : step.getBody().front().without_terminator())
    ops.push_back(&op);
  auto tagged = [](Operation *op) {
    return op->hasAttr(TPDialect::MicrobatchAttrHelper::getNameStr());
  };
  auto lastTagged = llvm::find_if(llvm::reverse(ops), tagged);
  const size_t end =
      lastTagged == ops.rend() ? 0 : size_t(ops.rend() - lastTagged);
  std::optional<std::pair<int64_t, bool>> half; // (layer, backward)
  DenseMap<Operation *, std::pair<int64_t, bool>> halfOf;
  for (auto [i, op] : llvm::enumerate(ops)) {
    const double took = opFinished[i] - (i ? opFinished[i - 1] : 0.0);
    if (tagged(op))
      half = {*layerOf(op),
              op->hasAttr(TPDialect::BackwardAttrHelper::getNameStr())};
    // An untagged op among the micro-batch's is a later pass's (a ring
    // step, a fused product) when it reads the micro-batch; one that does
    // not is a step invariant emitted where first needed (ZeRO-1's
    // parameter gathers): once a step, and never saved per micro-batch.
    const bool readsMicrobatch =
        tagged(op) || llvm::any_of(op->getOperands(), [&](Value v) {
          return halfOf.count(v.getDefiningOp());
        });
    if (!half || i >= end || !readsMicrobatch) {
      t.onceSeconds += took;
      continue;
    }
    auto [layer, backward] = *half;
    SmallVector<double> &seconds = backward ? t.backward : t.forward;
    if (int64_t(seconds.size()) <= layer)
      seconds.resize(layer + 1, 0);
    seconds[layer] += took;
    halfOf[op] = *half;
  }
  const size_t layers = std::max(t.forward.size(), t.backward.size());
  t.forward.resize(layers, 0);
  t.backward.resize(layers, 0);
  t.forwardBytes.assign(layers ? layers - 1 : 0, 0);
  t.backwardBytes.assign(layers ? layers - 1 : 0, 0);
  t.savedBytes.assign(layers, 0);
  // A value of layer a read by a half of layer b in the same direction
  // crosses every cut between them, once however many ops read it.
  DenseSet<std::pair<Value, int64_t>> counted;
  for (Operation *op : ops) {
    auto to = halfOf.find(op);
    if (to == halfOf.end())
      continue;
    for (Value operand : op->getOperands()) {
      auto from = halfOf.find(operand.getDefiningOp());
      if (from == halfOf.end() || from->second.second != to->second.second)
        continue;
      const int64_t a = from->second.first, b = to->second.first;
      const double bytes = tensorBytes(operand.getType());
      for (int64_t cut = std::min(a, b); cut < std::max(a, b); ++cut)
        if (counted.insert({operand, cut}).second)
          (to->second.second ? t.backwardBytes : t.forwardBytes)[cut] += bytes;
    }
  }
  for (auto [op, half] : halfOf) {
    if (half.second)
      continue;
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            auto it = halfOf.find(user);
            return it != halfOf.end() && it->second.second;
          }))
        t.savedBytes[half.first] += tensorBytes(result.getType());
  }
  t.arenaBytes = p.arenaBytes;
  t.argumentBytes = p.argumentBytes;
  return t;
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
    // A pipeline candidate is timed per micro-batch on the same cuts, so
    // needs them however deep the model (from 3 layers: one alike layer
    // between the first and the last).
    modelLayers = layerCount(module);
    layers = options.estimateLayers && modelLayers > kHighLayers + 1
                 ? modelLayers
                 : 0;
    const bool considerPipelines = options.train && modelLayers >= kHighLayers;
    if (layers || considerPipelines) {
      for (auto [keep, cut] : {std::pair{kLowLayers, &lowModule},
                               std::pair{kHighLayers, &highModule}}) {
        *cut = cast<ModuleOp>(module->clone());
        if (failed(keepLayers(*cut, keep))) {
          // Not alike: compile every candidate whole, and no pipelines.
          layers = modelLayers = 0;
          break;
        }
      }
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
    const int64_t batch = batchOf(module);
    SmallVector<Candidate> shapes;
    for (int64_t stages = 1; stages <= ranks; ++stages) {
      if (ranks % stages != 0 || (options.pipelineStages.hasValue() &&
                                  stages != options.pipelineStages))
        continue;
      if (stages > 1 && (!considerPipelines || !modelLayers ||
                         stages * options.pipelineChunks > modelLayers))
        continue;
      for (Candidate c : candidatesFor(ranks / stages)) {
        c.stages = stages;
        if (stages == 1) {
          shapes.push_back(c);
          continue;
        }
        if (c.mode == ParallelMode::None) {
          // Pipeline parallelism alone: 1D over one rank.
          c.mode = ParallelMode::OneD;
          c.grid = GridShape{{1}};
        }
        for (int64_t m : microbatchCounts(batch / c.dataParallel, stages)) {
          c.microbatches = m;
          shapes.push_back(c);
        }
      }
    }
    if (shapes.empty()) {
      const int64_t stages = options.pipelineStages;
      InFlightDiagnostic error = emitError(UnknownLoc::get(&getContext()))
                                 << "tp-pipeline mode=auto: ";
      if (ranks % stages != 0)
        error << "pp=" << stages << " does not divide the " << ranks
              << " ranks";
      else
        error << "no candidate for " << ranks << " ranks with pp=" << stages
              << " (pipelines need train=true and at least pp x pp-chunks "
                 "alike layers; the model has "
              << modelLayers << ")";
      return signalPassFailure();
    }
    // Compiles are the search's cost: a candidate whose parameters and
    // moments alone cannot fit is rejected without one, and a pipeline
    // whose micro-batches of fewer sequences fit in no variant is not tried
    // with larger ones (which hold more).
    parameterBytes = parameterBytesOf(module);
    std::set<std::string> unfitPipelines, slowerPipelines;
    std::map<std::string, double> fastestPipeline;
    auto pipelineKey = [](Candidate c) {
      c.microbatches = 0;
      return c.str();
    };
    // A scheme and grid that cannot split a micro-batch of some size (heads
    // a grid does not divide, rows it cannot split) fails alike whatever
    // the stages and replicas around it: such failures are kept by scheme,
    // grid and sequences per micro-batch, not compiled again.
    std::map<std::string, std::string> shapeFailures;
    auto shapeKey = [&](const Candidate &c) {
      Candidate key(c.mode, c.grid, c.seqParallel);
      return key.str() + " with " +
             std::to_string(batch / c.dataParallel / c.microbatches) +
             " sequences";
    };
    for (const Candidate &shape : shapes) {
      // (A batch the replicas and micro-batches do not divide is the
      // compiler's to report, and not a scheme's failure.)
      const bool divides =
          batch % (shape.dataParallel * shape.microbatches) == 0;
      std::string skipped;
      if (auto failed = divides ? shapeFailures.find(shapeKey(shape))
                                : shapeFailures.end();
          failed != shapeFailures.end())
        skipped = failed->second;
      else if (shape.stages > 1 && unfitPipelines.count(pipelineKey(shape)))
        skipped = "fits with no fewer micro-batches either (larger ones hold "
                  "more)";
      else if (shape.stages > 1 && slowerPipelines.count(pipelineKey(shape)))
        skipped = "not tried: fewer micro-batches were already slower than "
                  "more";
      if (!skipped.empty()) {
        Candidate c = shape;
        c.rejected = std::move(skipped);
        candidates.push_back(std::move(c));
        continue;
      }
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
        if (const double floor = parameterFloor(c); floor > budget) {
          c.overBudget = true;
          c.rejected = "its parameters" +
                       std::string(options.train ? " and AdamW moments" : "") +
                       " alone hold at least " + bytesText(floor) +
                       " per rank, over the budget of " + bytesText(budget);
        } else {
          evaluate(c, *cluster, budget);
        }
        if (divides && !c.rejected.empty() && !c.overBudget)
          shapeFailures[shapeKey(c)] = c.rejected;
        candidates.push_back(std::move(c));
        if (!candidates.back().overBudget)
          break;
      }
      if (shape.stages > 1 && candidates.back().overBudget)
        unfitPipelines.insert(pipelineKey(shape));
      // The bubble grows as the micro-batches get fewer: once that costs
      // more than larger kernels save, fewer still will not be faster.
      if (shape.stages > 1 && candidates.back().rejected.empty()) {
        const double seconds = candidates.back().prediction->seconds;
        auto [previous, first] =
            fastestPipeline.try_emplace(pipelineKey(shape), seconds);
        if (!first && seconds >= previous->second)
          slowerPipelines.insert(pipelineKey(shape));
        previous->second = std::min(previous->second, seconds);
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
        if (c->stages > 1) {
          remark << llvm::formatv(
              "{0}. {1}: {2:f3} ms per step, {3} per rank on its fullest "
              "stage, layers per stage {4}, {5:f1} % idle",
              index + 1, c->str(), p.seconds * 1e3,
              bytesText(p.arenaBytes + p.argumentBytes),
              llvm::join(
                  llvm::map_range(c->stageLayers,
                                  [](int64_t n) { return std::to_string(n); }),
                  ","),
              c->bubble * 100);
          continue;
        }
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
    const size_t rejectedCount = llvm::count_if(
        candidates, [](const Candidate &c) { return !c.rejected.empty(); });
    if (!options.compileChoice) {
      emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
          "tp-pipeline mode=auto: would choose {0} for {1} ranks of {2}: "
          "{3:f3} ms per step, {4} per rank, estimated ({5} candidates, {6} "
          "rejected); compile-choice=false leaves the module as it was",
          best.str(), ranks, cluster->name, best.prediction->seconds * 1e3,
          bytesText(best.prediction->arenaBytes +
                    best.prediction->argumentBytes),
          candidates.size(), rejectedCount);
      return;
    }
    // The module becomes the chosen compilation; the remark gives its own
    // prediction (with estimated candidates, the check of the estimate).
    // An estimate of the bytes may miss (the planner's packing is not
    // exactly linear in the layers, a pipeline's held activations are
    // estimated): a choice over the budget compiled whole gives way to the
    // next fastest, a few times.
    constexpr size_t kWholeTries = 3;
    SmallVector<std::string> missed;
    for (Candidate *c : ranked) {
      if (!c->rejected.empty() || missed.size() == kWholeTries)
        break;
      auto copy = cast<ModuleOp>(module->clone());
      llvm::scope_exit erase([&] { copy->erase(); });
      PassManager pm(&getContext(), ModuleOp::getOperationName());
      if (failed(buildCandidate(pm, *c)) || failed(pm.run(copy)))
        return signalPassFailure();
      FailureOr<StepPrediction> chosen = simulateChoice(copy, *cluster);
      if (failed(chosen)) {
        emitError(UnknownLoc::get(&getContext()))
            << "tp-pipeline mode=auto: the simulator cannot time the choice";
        return signalPassFailure();
      }
      const double estimated =
          c->prediction->arenaBytes + c->prediction->argumentBytes;
      if (const double bytes = chosen->arenaBytes + chosen->argumentBytes;
          bytes > budget) {
        missed.push_back(llvm::formatv("{0} holds {1} per rank compiled "
                                       "whole (estimated {2})",
                                       c->str(), bytesText(bytes),
                                       bytesText(estimated)));
        continue;
      }
      Block *body = module.getBody();
      body->getOperations().clear();
      body->getOperations().splice(body->end(),
                                   copy.getBody()->getOperations());
      module->setAttrs(copy->getAttrDictionary());
      reportChoice(*c, *chosen, ranks, cluster->name, candidates.size(),
                   rejectedCount, missed);
      return;
    }
    InFlightDiagnostic error =
        emitError(UnknownLoc::get(&getContext()))
        << "tp-pipeline mode=auto: no choice fits the budget of "
        << bytesText(budget) << " compiled whole";
    for (const std::string &text : missed)
      error << "; " << text;
    error << "; estimate-layers=false compiles every plain candidate whole";
    return signalPassFailure();
  }

private:
  void reportChoice(const Candidate &best, const StepPrediction &chosen,
                    int64_t ranks, StringRef clusterName, size_t candidateCount,
                    size_t rejectedCount, ArrayRef<std::string> missed) {
    emitRemark(UnknownLoc::get(&getContext())) << llvm::formatv(
        "tp-pipeline mode=auto: chose {0} for {1} ranks of "
        "{2}: {3:f3} ms per step, {4} per rank ({5} "
        "candidates, {6} rejected{7}{8}{9})",
        best.str(), ranks, clusterName, chosen.seconds * 1e3,
        bytesText(chosen.arenaBytes + chosen.argumentBytes), candidateCount,
        rejectedCount,
        layers ? llvm::formatv("; each predicted from {0} and {1} of its {2} "
                               "layers",
                               kLowLayers, kHighLayers, layers)
                     .str()
               : std::string(),
        best.stages > 1
            ? llvm::formatv("; estimated {0:f3} ms from one micro-batch's "
                            "layers, the stages replayed here",
                            best.prediction->seconds * 1e3)
                  .str()
            : std::string(),
        llvm::join(llvm::map_range(missed,
                                   [](const std::string &text) {
                                     return "; passed over: " + text;
                                   }),
                   ""));
  }

  /// The micro-batch counts tried for a pipeline of `stages` stages whose
  /// replicas each take `batch` sequences: the one given, else micro-batches
  /// of 1, 2, 4 and 8 sequences where that makes at least as many
  /// micro-batches as stages (fewer leave most of the step idle), else
  /// micro-batches of one sequence. Smaller ones shrink the bubble and the
  /// activations held; larger ones run each kernel on more rows.
  SmallVector<int64_t> microbatchCounts(int64_t batch, int64_t stages) const {
    if (options.microbatches.hasValue())
      return {options.microbatches};
    SmallVector<int64_t> counts;
    for (int64_t size : {1, 2, 4, 8})
      if (batch % size == 0 && batch / size >= stages)
        counts.push_back(batch / size);
    if (counts.empty())
      counts.push_back(std::max<int64_t>(batch, 1));
    return counts;
  }

  /// `timing`: the one-micro-batch program a pipeline candidate is timed
  /// by (pp=1, the candidate's micro-batches, micro-batch 0 emitted).
  LogicalResult buildCandidate(OpPassManager &pm, const Candidate &c,
                               std::string *error = nullptr,
                               bool timing = false) {
    PipelineOptions concrete;
    concrete.copyOptionValuesFrom(options);
    const bool pipeline = c.stages > 1 && !timing;
    concrete.pipelineStages = pipeline ? c.stages : 1;
    concrete.microbatches = c.microbatches;
    concrete.schedule =
        pipeline ? options.schedule.getValue() : PipelineSchedule::OneFOneB;
    concrete.pipelineChunks = pipeline ? int64_t(options.pipelineChunks) : 1;
    concrete.timeOneMicrobatch = timing;
    // The cut the candidate was estimated with (its costs are of the
    // compiled micro-batch, the cluster's), not the pass's own.
    concrete.stageLayers.clear();
    if (pipeline)
      concrete.stageLayers = ArrayRef<int64_t>(c.stageLayers);
    concrete.compileChoice = true;
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

  /// The chosen compilation's step as the simulator replays it: a
  /// pipeline's stage programs together, each stage's bytes its own (the
  /// fullest stage's reported).
  FailureOr<StepPrediction> simulateChoice(ModuleOp module,
                                           const ClusterModel &cluster) {
    StringRef name = options.train ? "train_step" : "loss";
    if (auto step = module.lookupSymbol<func::FuncOp>(name))
      return simulateStep(step, gridShapeOf(module), cluster);
    SmallVector<func::FuncOp> stageFuncs;
    while (auto stage = module.lookupSymbol<func::FuncOp>(
               (name + "_stage" + Twine(stageFuncs.size())).str()))
      stageFuncs.push_back(stage);
    if (stageFuncs.empty())
      return failure();
    FailureOr<PipelinePrediction> pipeline =
        simulatePipeline(stageFuncs, gridShapeOf(module), cluster);
    if (failed(pipeline))
      return failure();
    StepPrediction fullest = pipeline->stages.front();
    for (const StepPrediction &stage : pipeline->stages)
      if (stage.arenaBytes + stage.argumentBytes >
          fullest.arenaBytes + fullest.argumentBytes)
        fullest = stage;
    fullest.seconds = pipeline->seconds;
    return fullest;
  }

  /// Compiles `c` on a detached copy of `source` and predicts its step; sets
  /// `c.rejected` when it does not compile or cannot be timed. `timing`: `c`'s
  /// one-micro-batch program instead, its time op by op attributed to the
  /// layers (`timingOut`).
  std::optional<StepPrediction> predict(Candidate &c, ModuleOp source,
                                        const ClusterModel &cluster,
                                        MicrobatchTiming *timingOut = nullptr) {
    // A pass manager of its own on a detached copy: the candidate is only
    // timed, so the IR is not verified after every pass (half the search's
    // time on GPT-3-175B); the choice is compiled within this pass's, with
    // the verifier as given.
    PassManager pm(&getContext(), ModuleOp::getOperationName());
    pm.enableVerifier(false);
    if (failed(buildCandidate(pm, c, &c.rejected, timingOut != nullptr)))
      return std::nullopt;
    auto copy = cast<ModuleOp>(source->clone());
    llvm::scope_exit erase([&] { copy->erase(); });
    {
      // Its diagnostics are the candidate's: the first error rejects it.
      ScopedDiagnosticHandler quiet(&getContext(), [&](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error && c.rejected.empty())
          c.rejected = d.str();
        return success();
      });
      if (failed(pm.run(copy))) {
        if (c.rejected.empty())
          c.rejected = "it does not compile";
        return std::nullopt;
      }
    }
    auto step = copy.lookupSymbol<func::FuncOp>(
        timingOut ? "train_step_stage0"
                  : (options.train ? "train_step" : "loss"));
    // A micro-batch runs on the pipeline's grid: axis 0 is the stages.
    SmallVector<int64_t> shape = gridShapeOf(copy);
    if (timingOut && !shape.empty())
      shape.front() = c.stages;
    SmallVector<double> opFinished;
    FailureOr<StepPrediction> p =
        step ? simulateStep(step, shape, cluster, 0,
                            timingOut ? &opFinished : nullptr)
             : FailureOr<StepPrediction>(failure());
    if (failed(p)) {
      c.rejected = "the simulator cannot time it";
      return std::nullopt;
    }
    if (timingOut)
      *timingOut = attributeMicrobatch(step, opFinished, *p);
    return *p;
  }

  /// A pipeline candidate, from its micro-batch timed on the 2- and
  /// 3-layer cuts: the model's layers (the first with the embedding, alike
  /// ones, the last with the head) cut into balanced groups as
  /// tp-pipeline-stages cuts them, the schedule replayed over the groups'
  /// halves and the transfers between them, then each stage's once-a-step
  /// part (its layers' share of it; the rest on stage 0). Bytes per stage:
  /// its parameters and state, and the activations of the micro-batches
  /// its slot order holds at once.
  void evaluatePipeline(Candidate &c, const ClusterModel &cluster,
                        double budget) {
    const int64_t stages = c.stages, chunks = options.pipelineChunks;
    const int64_t groups = stages * chunks;
    if (options.schedule == PipelineSchedule::Interleaved &&
        c.microbatches % stages != 0) {
      c.rejected = llvm::formatv("schedule=interleaved needs the "
                                 "micro-batches ({0}) a multiple of pp={1}",
                                 c.microbatches, stages);
      return;
    }
    // The 3-layer cut times the layers; the 2-layer one only gives what a
    // layer adds once a step and to the bytes, so a candidate already over
    // the budget without those is not compiled twice.
    MicrobatchTiming low, high;
    if (!predict(c, highModule, cluster, &high))
      return;
    if (high.forward.size() != size_t(kHighLayers)) {
      c.rejected = "its micro-batch's layers cannot be told apart";
      return;
    }
    // The model's layers: the first (with the embedding), alike ones, the
    // last (with the head and loss).
    auto spread = [&](ArrayRef<double> cut) {
      SmallVector<double> all(modelLayers, cut[1]);
      all.front() = cut.front();
      all.back() = cut.back();
      return all;
    };
    SmallVector<double> forward = spread(high.forward),
                        backward = spread(high.backward),
                        saved = spread(high.savedBytes), cost(modelLayers);
    for (int64_t l = 0; l < modelLayers; ++l)
      cost[l] = forward[l] + backward[l];
    SmallVector<int64_t> balanced = balanceLayers(cost, groups);
    c.stageLayers.assign(balanced.begin(), balanced.end());

    SlotCosts slots;
    SmallVector<int64_t> stageLayerCount(stages, 0);
    SmallVector<double> groupSaved;
    for (int64_t g = 0, l = 0; g < groups; ++g) {
      double f = 0, b = 0, held = 0;
      for (int64_t i = 0; i < c.stageLayers[g]; ++i, ++l) {
        f += forward[l];
        b += backward[l];
        held += saved[l];
      }
      slots.forward.push_back(f);
      slots.backward.push_back(b);
      groupSaved.push_back(held);
      stageLayerCount[g % stages] += c.stageLayers[g];
    }
    // Between alike layers a micro-batch sends its residual stream shard.
    const double forwardBytes = *llvm::max_element(high.forwardBytes);
    const double backwardBytes = *llvm::max_element(high.backwardBytes);
    const int64_t ranksPerStage =
        options.grid.getValue().sizes.front() / stages;
    for (int64_t g = 0; g + 1 < groups; ++g) {
      SmallVector<int64_t> pair = {(g % stages) * ranksPerStage,
                                   ((g + 1) % stages) * ranksPerStage};
      slots.forwardTransfer.push_back(
          cluster.exchangeSeconds(pair, 1, forwardBytes));
      slots.backwardTransfer.push_back(
          cluster.exchangeSeconds(pair, 1, backwardBytes));
    }
    SmallVector<double> done =
        replaySlots(options.schedule, stages, c.microbatches, chunks, slots);
    if (done.empty()) {
      c.rejected = "its schedule waits forever";
      return;
    }
    // The activations each stage holds at most: of the forwards not yet
    // backward.
    SmallVector<SmallVector<PipelineSlot>> order =
        pipelineSlots(options.schedule, stages, c.microbatches, chunks);
    SmallVector<double> mostHeld(stages, 0), busy(stages, 0);
    for (int64_t s = 0; s < stages; ++s) {
      double held = 0;
      for (const PipelineSlot &slot : order[s]) {
        const int64_t g = slot.chunk * stages + s;
        busy[s] += slot.backward ? slots.backward[g] : slots.forward[g];
        held += slot.backward ? -groupSaved[g] : groupSaved[g];
        mostHeld[s] = std::max(mostHeld[s], held);
      }
    }
    if (const double floor = parameterFloor(c) + *llvm::max_element(mostHeld);
        floor > budget) {
      c.overBudget = true;
      c.rejected = "its parameters, moments and the activations its "
                   "schedule holds take at least " +
                   bytesText(floor) + " per rank, over the budget of " +
                   bytesText(budget);
      return;
    }
    if (!predict(c, lowModule, cluster, &low))
      return;
    if (low.forward.size() != size_t(kLowLayers)) {
      c.rejected = "its micro-batch's layers cannot be told apart";
      return;
    }

    // Once a step, and bytes: a layer's share from the two cuts' difference.
    auto perLayer = [&](double atLow, double atHigh) {
      const double layer = atHigh - atLow;
      return std::pair{layer, std::max(0.0, atLow - kLowLayers * layer)};
    };
    auto [onceLayer, onceRest] = perLayer(low.onceSeconds, high.onceSeconds);
    auto [argsLayer, argsRest] =
        perLayer(low.argumentBytes, high.argumentBytes);
    // The arena past the saved activations (working buffers, once-a-step
    // buffers) as the cuts have it; the saved ones per micro-batch held.
    auto [arenaLayer, arenaRest] = perLayer(
        std::max(0.0, low.arenaBytes - llvm::sum_of(low.savedBytes)),
        std::max(0.0, high.arenaBytes - llvm::sum_of(high.savedBytes)));
    StepPrediction p;
    double idle = 0;
    SmallVector<double> finish(stages, 0);
    for (int64_t s = 0; s < stages; ++s) {
      const double once =
          onceLayer * stageLayerCount[s] + (s == 0 ? onceRest : 0);
      finish[s] = done[s] + once;
      busy[s] += once;
      const double args =
          argsLayer * stageLayerCount[s] + (s == 0 ? argsRest : 0);
      const double arena =
          arenaRest + arenaLayer * stageLayerCount[s] + mostHeld[s];
      if (args + arena >= p.arenaBytes + p.argumentBytes) {
        p.argumentBytes = args;
        p.arenaBytes = arena;
      }
    }
    p.seconds = *llvm::max_element(finish);
    for (double b : busy)
      idle += (p.seconds - b) / p.seconds / double(stages);
    c.bubble = idle;
    c.prediction = p;
    const double bytes = p.arenaBytes + p.argumentBytes;
    if (bytes > budget) {
      c.overBudget = true;
      c.rejected = bytesText(bytes) +
                   " per rank on its fullest stage "
                   "exceeds the budget of " +
                   bytesText(budget);
    }
  }

  /// Predicts `c`'s step (from two cut modules when `layers` is set) and
  /// rejects it when it does not compile or fit the budget.
  void evaluate(Candidate &c, const ClusterModel &cluster, double budget) {
    if (c.stages > 1)
      return evaluatePipeline(c, cluster, budget);
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
  int64_t layers = 0, modelLayers = 0;
  double parameterBytes = 0;

  /// The least bytes `c` holds per rank: its share of the parameters (and
  /// AdamW moments). Tensor and pipeline ranks split them at most; ZeRO-1
  /// splits them over the replicas too.
  double parameterFloor(const Candidate &c) const {
    return parameterBytes * (options.train ? 3 : 1) /
           double(llvm::product_of(c.grid.sizes) * c.stages *
                  (c.shardOptimizer ? c.dataParallel : 1));
  }
  ModuleOp lowModule, highModule;

  PipelineOptions options;
};

} // namespace

std::unique_ptr<Pass>
mlir::tp::createChooseScheme(const PipelineOptions &options) {
  return std::make_unique<ChooseScheme>(options);
}
