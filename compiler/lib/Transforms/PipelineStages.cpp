//===- PipelineStages.cpp - cut the step into pipeline stages -------------===//
//
// One micro-batch's per-rank @train_step (grid axis 0: the micro-batches)
// -> one @train_step_stage<s> per pipeline stage (grid axis 0: the stages)
// that runs every micro-batch in its schedule's order, then the optimizer;
// the held-out @loss likewise, forward halves only.
// See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Simulate/StepSimulator.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/PipelineSchedule.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace mlir::tp {
#define GEN_PASS_DEF_TPPIPELINESTAGES
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The pipeline axis: the micro-batches' axis before this pass.
constexpr int64_t kPipelineAxis = kPipelineStageAxis;

/// When an op runs: once before the micro-batches (it reads only
/// parameters, moments and the step's scalars), once per micro-batch, or
/// once after them (it reads an accumulated sum).
enum class Phase { Invariant = 0, Micro = 1, Step = 2 };

/// Where a once-per-step value lives: on every stage alike, on one stage,
/// or as a sum of parts on the stages (each stage holding its part, or
/// nothing).
struct Home {
  enum Kind { Global, Stage, Partial } kind = Global;
  int64_t stage = -1;
};

/// A micro-batch value one stage sends another, per micro-batch (`base` +
/// micro-batch is the tag), or a parameter sent once a step (`base`).
struct Edge {
  Value value;
  int64_t from = 0, to = 0;
  int64_t base = 0;
};

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

bool isBackward(Operation *op) {
  return op->hasAttr(TPDialect::BackwardAttrHelper::getNameStr());
}

/// A default device for costing layers without a cluster description: only
/// the ratios between ops matter for a balanced cut.
ClusterModel referenceCluster() {
  ClusterModel cluster;
  cluster.name = "reference";
  cluster.device.name = "reference";
  cluster.device.peakF32 = cluster.device.peakTF32 = cluster.device.peakBF16 =
      1e12;
  cluster.device.memoryBandwidth = 1e11;
  cluster.device.memoryBytes = 1e12;
  cluster.device.opOverhead = 1e-6;
  NetworkLevel level;
  level.name = "network";
  level.bandwidth = 1e10;
  level.latency = 1e-5;
  cluster.levels.push_back(level);
  return cluster;
}

class StageSplitter {
public:
  StageSplitter(ModuleOp module, func::FuncOp step, GridOp grid, int64_t stages,
                int64_t chunks, PipelineSchedule schedule,
                ArrayRef<int64_t> layers, const ClusterModel &cluster,
                int64_t microbatches);

  /// Emit only micro-batch 0's slots, each op tagged with its micro-batch,
  /// layer and half, and each running sum's add as a later micro-batch
  /// makes it: a program to time one micro-batch by (one stage), not a step
  /// to run.
  void emitOneMicrobatch() { oneMicrobatch = true; }

  /// Builds @<step>_stage<s> for every stage (the step itself stays, for
  /// the caller to erase with the module's other unstaged functions).
  LogicalResult run();
  ArrayRef<func::FuncOp> stageFunctions() const { return stageFuncs; }
  /// Layers per virtual stage, as cut.
  ArrayRef<int64_t> layersPerGroup() const { return groupLayers; }
  /// Each layer's predicted seconds per micro-batch (forward and backward,
  /// the embedding with the first layer, the head and loss with the last),
  /// in layer order.
  ArrayRef<double> layerSeconds() const { return layerCosts; }

private:
  InFlightDiagnostic error(Operation *op) {
    return op->emitOpError() << "tp-pipeline-stages: ";
  }
  LogicalResult splitMicrobatchSums();
  LogicalResult classify();
  LogicalResult cutLayers();
  LogicalResult assignStages();
  void separateStageSums();
  LogicalResult placeOnceAfter();
  void planTransfers();
  LogicalResult buildStage(int64_t stage);
  LogicalResult verifyTransfers();

  Phase phaseOf(Value v) const;
  /// Calls `visit(def, op, operand)` for each micro-batch op reading
  /// another's result.
  void forEachMicroOperand(
      function_ref<void(Operation *, Operation *, Value)> visit);
  /// The parameter arguments an invariant value reads.
  SmallVector<unsigned> paramsReadBy(Value v);
  int64_t physical(int64_t virtualStage) const { return virtualStage % stages; }
  int64_t stageOfOp(Operation *op) const {
    return physical(virtualStage.lookup(op));
  }
  /// Whether `arg` is split by the batch (tokens, targets, dense features):
  /// each micro-batch reads its slice.
  bool isBatchInput(BlockArgument arg) const;
  /// The parameter argument a parameter or moment argument belongs to.
  std::optional<unsigned> paramOf(BlockArgument arg) const;
  /// The stage owning argument `arg` (a parameter or moment), if it is one.
  std::optional<int64_t> ownerOf(unsigned arg) const;
  /// Where a once-per-step op runs: its results' home.
  Home homeOf(Operation *op) const {
    return op->getNumResults() ? valueHome.lookup(op->getResult(0)) : Home{};
  }

  ModuleOp module;
  mutable func::FuncOp step;
  GridOp grid;
  int64_t stages, chunks;
  PipelineSchedule schedule;
  SmallVector<int64_t> explicitLayers;
  const ClusterModel &cluster;
  int64_t microbatches;
  bool oneMicrobatch = false;

  /// Each parameter or moment argument's parameter argument.
  DenseMap<unsigned, unsigned> paramOfArg;
  /// Program order of the original step's ops.
  SmallVector<Operation *> ops;
  DenseMap<Operation *, Phase> phase;
  /// The sums over the micro-batches: all-reduces over axis 0 alone.
  llvm::SetVector<Operation *> microbatchSums;
  /// The layer each micro-batch op is cut with.
  DenseMap<Operation *, int64_t> layer;
  DenseMap<Operation *, bool> backward;
  /// Layers per virtual stage (groups), and each layer's group.
  SmallVector<int64_t> groupLayers;
  SmallVector<double> layerCosts;
  std::map<int64_t, int64_t> groupOfLayer;
  DenseMap<Operation *, int64_t> virtualStage;
  /// Owner stage of each parameter argument.
  DenseMap<unsigned, int64_t> owner;
  DenseMap<Value, SmallVector<unsigned>> paramsRead;
  /// Once-per-step values each op needs on every stage (all-reduced over
  /// axis 0 right before it); the loss is needed at the end.
  DenseMap<Operation *, SmallVector<Value>> globalsBefore;
  SmallVector<Value> globalsAtEnd;
  DenseMap<Value, Home> valueHome;
  /// Stages that need each parameter argument.
  DenseMap<unsigned, llvm::SmallSetVector<int64_t, 4>> paramUsers;
  SmallVector<Edge> paramEdges;
  /// Micro-batch values sent between stages, by value and receiving stage.
  std::map<std::pair<void *, int64_t>, Edge> valueEdges;
  DenseMap<Value, SmallVector<int64_t>> sendsTo;
  std::map<std::pair<int64_t, int64_t>, int64_t> nextTag;
  SmallVector<SmallVector<PipelineSlot>> slots;
  SmallVector<func::FuncOp> stageFuncs;
};

bool StageSplitter::isBatchInput(BlockArgument arg) const {
  auto input = step.getArgAttrOfType<StringAttr>(
      arg.getArgNumber(), TPDialect::InputAttrHelper::getNameStr());
  return input &&
         (input.getValue() == "tokens" || input.getValue() == "targets" ||
          input.getValue() == "dense");
}

StageSplitter::StageSplitter(ModuleOp module, func::FuncOp step, GridOp grid,
                             int64_t stages, int64_t chunks,
                             PipelineSchedule schedule,
                             ArrayRef<int64_t> layers,
                             const ClusterModel &cluster, int64_t microbatches)
    : module(module), step(step), grid(grid), stages(stages), chunks(chunks),
      schedule(schedule), explicitLayers(layers), cluster(cluster),
      microbatches(microbatches) {
  // Moments name their parameter by its tp.param.
  llvm::StringMap<unsigned> paramByName;
  StringRef paramAttr = TPDialect::ParamAttrHelper::getNameStr();
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (auto name = step.getArgAttrOfType<StringAttr>(i, paramAttr);
        name && !step.getArgAttr(i, TPDialect::StateAttrHelper::getNameStr()))
      paramByName[name.getValue()] = i;
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (auto name = step.getArgAttrOfType<StringAttr>(i, paramAttr))
      if (auto it = paramByName.find(name.getValue()); it != paramByName.end())
        paramOfArg[i] = it->second;
}

std::optional<unsigned> StageSplitter::paramOf(BlockArgument arg) const {
  auto it = paramOfArg.find(arg.getArgNumber());
  if (it == paramOfArg.end())
    return std::nullopt;
  return it->second;
}

std::optional<int64_t> StageSplitter::ownerOf(unsigned arg) const {
  std::optional<unsigned> p = paramOf(step.getArgument(arg));
  if (!p)
    return std::nullopt;
  return owner.lookup(*p);
}

void StageSplitter::forEachMicroOperand(
    function_ref<void(Operation *, Operation *, Value)> visit) {
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Micro)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && phase.lookup(def) == Phase::Micro)
        visit(def, op, operand);
  }
}

Phase StageSplitter::phaseOf(Value v) const {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return isBatchInput(arg) ? Phase::Micro : Phase::Invariant;
  return phase.lookup(v.getDefiningOp());
}

/// Collectives over axis 0 and others become one over axis 0 alone (the
/// micro-batches' sum) followed by one over the others; anything else that
/// would exchange data between micro-batches is an error.
LogicalResult StageSplitter::splitMicrobatchSums() {
  SmallVector<Operation *> list;
  step.walk([&](Operation *op) { list.push_back(op); });
  for (Operation *op : list) {
    for (StringRef name : {TPDialect::VocabAxesAttrHelper::getNameStr(),
                           TPDialect::FeatureAxesAttrHelper::getNameStr()})
      if (auto axes = op->getAttrOfType<DenseI64ArrayAttr>(name))
        if (llvm::is_contained(axes.asArrayRef(), kPipelineAxis))
          return error(op) << "its kernel exchanges statistics over grid axis "
                              "0, the micro-batches";
    auto axesAttr = op->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
    if (!axesAttr || !llvm::is_contained(axesAttr.asArrayRef(), kPipelineAxis))
      continue;
    auto allReduce = dyn_cast<AllReduceOp>(op);
    if (!allReduce)
      return error(op) << "micro-batches (grid axis 0) may only be summed, "
                          "but this op exchanges data between them";
    SmallVector<int64_t> rest;
    for (int64_t axis : axesAttr.asArrayRef())
      if (axis != kPipelineAxis)
        rest.push_back(axis);
    if (rest.empty()) {
      // A sum of reduce-scattered gradients (ZeRO-1's) sums the gradients
      // first and reduce-scatters the sum once a step: the same sum, one
      // exchange a step instead of one a micro-batch (as Megatron-LM's
      // distributed optimizer reduce-scatters its accumulated main_grad).
      auto scatter = allReduce.getInput().getDefiningOp<ReduceScatterOp>();
      if (scatter && scatter->hasOneUse()) {
        OpBuilder b(op);
        auto sum = AllReduceOp::create(
            b, op->getLoc(), scatter.getInput().getType(), scatter.getInput(),
            allReduce.getGridAttr(), b.getDenseI64ArrayAttr({kPipelineAxis}));
        sum->setAttrs(op->getDiscardableAttrDictionary());
        IRMapping mapping;
        mapping.map(scatter.getInput(), sum.getResult());
        Operation *once = b.clone(*scatter, mapping);
        op->getResult(0).replaceAllUsesWith(once->getResult(0));
        op->erase();
        scatter->erase();
        microbatchSums.insert(sum);
        continue;
      }
      microbatchSums.insert(op);
      continue;
    }
    OpBuilder b(op);
    auto sum = AllReduceOp::create(
        b, op->getLoc(), op->getResultTypes()[0], allReduce.getInput(),
        allReduce.getGridAttr(), b.getDenseI64ArrayAttr({kPipelineAxis}));
    sum->setAttrs(op->getDiscardableAttrDictionary());
    auto others = AllReduceOp::create(b, op->getLoc(), op->getResultTypes()[0],
                                      sum.getResult(), allReduce.getGridAttr(),
                                      b.getDenseI64ArrayAttr(rest));
    op->getResult(0).replaceAllUsesWith(others.getResult());
    op->erase();
    microbatchSums.insert(sum);
  }
  return success();
}

LogicalResult StageSplitter::classify() {
  ops.clear();
  for (Operation &op : step.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops) {
    Phase p = Phase::Invariant;
    for (Value operand : op->getOperands())
      p = std::max(p, phaseOf(operand));
    if (microbatchSums.contains(op)) {
      if (p != Phase::Micro)
        return error(op) << "sums over the micro-batches a value that is not "
                            "computed per micro-batch";
      p = Phase::Step;
    }
    phase[op] = p;
    if (p != Phase::Micro)
      continue;
    bool back = isBackward(op);
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        back = back || backward.lookup(def);
    backward[op] = back;
  }
  auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
  for (Value result : ret.getOperands())
    if (phaseOf(result) == Phase::Micro)
      return error(step) << "returns a value computed per micro-batch; only "
                            "sums over grid axis 0 leave the micro-batches";
  return success();
}

/// Balances the layers' predicted cost over stages x chunks groups.
LogicalResult StageSplitter::cutLayers() {
  // Each micro-batch op's layer: its own tp.layer, else (collectives the
  // sharding inserted, the embedding, the head) the latest layer among its
  // operands' in the forward, the earliest in the backward, else that of
  // its first user: the embedding goes with the first layer, the head and
  // loss with the last, and so they are costed.
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Micro)
      continue;
    if (std::optional<int64_t> own = layerOf(op)) {
      layer[op] = *own;
      continue;
    }
    std::optional<int64_t> inherited;
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || !layer.count(def))
        continue;
      int64_t l = layer.lookup(def);
      inherited = !inherited            ? l
                  : backward.lookup(op) ? std::min(*inherited, l)
                                        : std::max(*inherited, l);
    }
    if (inherited)
      layer[op] = *inherited;
  }
  for (Operation *op : llvm::reverse(ops)) {
    if (phase.lookup(op) != Phase::Micro || layer.count(op))
      continue;
    std::optional<int64_t> first;
    for (Operation *user : op->getUsers())
      if (layer.count(user))
        first =
            first ? std::min(*first, layer.lookup(user)) : layer.lookup(user);
    if (!first)
      return error(op) << "belongs to no layer (nothing of the model uses it)";
    layer[op] = *first;
  }
  std::map<int64_t, double> layerCost;
  SmallVector<int64_t> gridShape(grid.getShape());
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Micro)
      continue;
    FailureOr<double> seconds = predictOpSeconds(*op, gridShape, cluster);
    if (failed(seconds))
      return failure();
    layerCost[layer.lookup(op)] += *seconds;
  }
  SmallVector<int64_t> layerIds;
  SmallVector<double> costs;
  for (auto [layer, cost] : layerCost) {
    layerIds.push_back(layer);
    costs.push_back(cost);
  }
  layerCosts = costs;
  const int64_t groups = stages * chunks;
  const int64_t numLayers = layerIds.size();
  if (!explicitLayers.empty()) {
    if (int64_t(explicitLayers.size()) != groups)
      return step.emitError()
             << "tp-pipeline-stages: layers= gives " << explicitLayers.size()
             << " groups, but pp x pp-chunks is " << groups;
    int64_t total = 0;
    for (int64_t n : explicitLayers) {
      if (n < 0)
        return step.emitError()
               << "tp-pipeline-stages: layers= has a negative count";
      total += n;
    }
    if (total != numLayers)
      return step.emitError()
             << "tp-pipeline-stages: layers= adds up to " << total
             << " layers, but the model has " << numLayers;
    groupLayers.assign(explicitLayers.begin(), explicitLayers.end());
  } else {
    if (numLayers < groups)
      return step.emitError()
             << "tp-pipeline-stages: " << groups << " pipeline groups (pp x "
             << "pp-chunks) need at least as many layers; the model has "
             << numLayers;
    groupLayers = balanceLayers(costs, groups);
  }
  for (int64_t g = 0, next = 0; g < groups; ++g)
    for (int64_t i = 0; i < groupLayers[g]; ++i)
      groupOfLayer[layerIds[next++]] = g;
  return success();
}

LogicalResult StageSplitter::assignStages() {
  for (Operation *op : ops)
    if (phase.lookup(op) == Phase::Micro)
      virtualStage[op] = groupOfLayer.at(layer.lookup(op));
  // Forward values flow to later virtual stages, gradients to earlier ones.
  LogicalResult ordered = success();
  forEachMicroOperand([&](Operation *def, Operation *op, Value) {
    int64_t from = virtualStage.lookup(def), to = virtualStage.lookup(op);
    if (succeeded(ordered) && !backward.lookup(def) && from > to)
      ordered = error(op) << "reads a forward value of a later pipeline stage";
    if (succeeded(ordered) && backward.lookup(def) && backward.lookup(op) &&
        from < to)
      ordered = error(op) << "reads a gradient of an earlier pipeline stage";
  });
  if (failed(ordered))
    return failure();
  // Owners: the first stage that uses a parameter.
  for (unsigned i = 0, e = step.getNumArguments(); i < e; ++i)
    if (step.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()) &&
        !step.getArgAttr(i, TPDialect::StateAttrHelper::getNameStr()))
      owner[i] = stages;
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Micro)
      continue;
    for (Value operand : op->getOperands())
      if (phaseOf(operand) == Phase::Invariant)
        for (unsigned p : paramsReadBy(operand)) {
          owner[p] = std::min(owner[p], stageOfOp(op));
          paramUsers[p].insert(stageOfOp(op));
        }
  }
  for (auto &entry : owner)
    if (entry.second == stages)
      entry.second = 0; // no micro-batch op uses it: updated on stage 0
  return success();
}

SmallVector<unsigned> StageSplitter::paramsReadBy(Value v) {
  auto it = paramsRead.find(v);
  if (it != paramsRead.end())
    return it->second;
  SmallVector<unsigned> reads;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (std::optional<unsigned> p = paramOf(arg))
      reads.push_back(*p);
  } else {
    for (Value operand : v.getDefiningOp()->getOperands())
      if (phaseOf(operand) == Phase::Invariant)
        for (unsigned p : paramsReadBy(operand))
          if (!llvm::is_contained(reads, p))
            reads.push_back(p);
  }
  paramsRead[v] = reads;
  return reads;
}

/// A sum over the micro-batches of a sum of parts from different stages (a
/// tied embedding's gradient: the lookup's part and the head's) becomes the
/// sum of the parts' sums, so each stage accumulates its own part and only
/// the accumulated parts meet, once a step.
void StageSplitter::separateStageSums() {
  SmallVector<Operation *> worklist(microbatchSums.begin(),
                                    microbatchSums.end());
  while (!worklist.empty()) {
    auto sum = cast<AllReduceOp>(worklist.pop_back_val());
    auto add = sum.getInput().getDefiningOp<AddOp>();
    if (!add || !add->hasOneUse() ||
        tensorType(add.getLhs()) != tensorType(add.getRhs()) ||
        tensorType(add.getLhs()) != tensorType(add.getResult()))
      continue;
    Operation *lhs = add.getLhs().getDefiningOp();
    Operation *rhs = add.getRhs().getDefiningOp();
    if (!lhs || !rhs || phase.lookup(lhs) != Phase::Micro ||
        phase.lookup(rhs) != Phase::Micro || stageOfOp(lhs) == stageOfOp(rhs))
      continue;
    OpBuilder b(sum);
    SmallVector<Value> parts;
    for (Value part : {add.getLhs(), add.getRhs()}) {
      auto partSum =
          AllReduceOp::create(b, sum.getLoc(), part.getType(), part,
                              sum.getGridAttr(), sum.getGridAxesAttr());
      phase[partSum] = Phase::Step;
      microbatchSums.insert(partSum);
      worklist.push_back(partSum);
      parts.push_back(partSum);
    }
    auto total = AddOp::create(b, add.getLoc(), parts[0], parts[1]);
    phase[total] = Phase::Step;
    sum.getResult().replaceAllUsesWith(total.getResult());
    microbatchSums.remove(sum);
    phase.erase(sum);
    phase.erase(add);
    virtualStage.erase(add);
    sum->erase();
    add->erase();
  }
  ops.clear();
  for (Operation &op : step.getBody().front().without_terminator())
    ops.push_back(&op);
}

/// Where each once-per-step op runs (Home), and which of its operands must
/// first be all-reduced over the stages so that it can.
LogicalResult StageSplitter::placeOnceAfter() {
  auto addGlobal = [](SmallVector<Value> &list, Value v) {
    if (!llvm::is_contained(list, v))
      list.push_back(v);
  };
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Step)
      continue;
    Home h;
    if (microbatchSums.contains(op)) {
      h = {Home::Stage, stageOfOp(op->getOperand(0).getDefiningOp())};
    } else {
      // An op that reads a parameter or moment itself (AdamW) runs on the
      // parameter's stage.
      std::optional<int64_t> pinned;
      for (Value operand : op->getOperands())
        if (auto arg = dyn_cast<BlockArgument>(operand))
          if (std::optional<int64_t> stage = ownerOf(arg.getArgNumber())) {
            if (pinned && *pinned != *stage)
              return error(op) << "reads parameters of different stages";
            pinned = stage;
          }
      if (pinned) {
        h = {Home::Stage, *pinned};
      } else {
        bool partial = false, several = false;
        int64_t stage = -1;
        for (Value operand : op->getOperands()) {
          if (phaseOf(operand) != Phase::Step)
            continue;
          Home oh = valueHome.lookup(operand);
          if (oh.kind == Home::Global)
            continue;
          if (oh.kind == Home::Partial)
            partial = true;
          else if (stage < 0)
            stage = oh.stage;
          else if (stage != oh.stage)
            several = true;
        }
        if (!partial && !several)
          h = stage < 0 ? Home{} : Home{Home::Stage, stage};
        else if (isa<AddOp>(op) &&
                 tensorType(op->getOperand(0)) == tensorType(op->getOperand(1)))
          h = {Home::Partial, -1}; // each stage adds the parts it holds
        else
          h = {}; // all-reduced operands, computed on every stage
      }
    }
    for (Value result : op->getResults())
      valueHome[result] = h;
    if (h.kind != Home::Partial && !microbatchSums.contains(op))
      for (Value operand : op->getOperands()) {
        if (phaseOf(operand) != Phase::Step)
          continue;
        Home oh = valueHome.lookup(operand);
        if (oh.kind == Home::Global ||
            (h.kind == Home::Stage && oh.kind == Home::Stage &&
             oh.stage == h.stage))
          continue;
        addGlobal(globalsBefore[op], operand);
      }
    // The stages that compute it need the parameters its invariants read
    // (a part's invariant addend joins the sum on stage 0).
    for (Value operand : op->getOperands()) {
      if (phaseOf(operand) != Phase::Invariant)
        continue;
      for (unsigned p : paramsReadBy(operand)) {
        if (h.kind == Home::Stage)
          paramUsers[p].insert(h.stage);
        else if (h.kind == Home::Partial)
          paramUsers[p].insert(0);
        else
          for (int64_t s = 0; s < stages; ++s)
            paramUsers[p].insert(s);
      }
    }
  }
  auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
  for (auto [j, v] : llvm::enumerate(ret.getOperands())) {
    auto updates = step.getResultAttrOfType<IntegerAttr>(
        j, TPDialect::UpdatesAttrHelper::getNameStr());
    if (updates) {
      std::optional<int64_t> stage = ownerOf(unsigned(updates.getInt()));
      Home h = valueHome.lookup(v);
      if (!stage || h.kind != Home::Stage || h.stage != *stage)
        return error(step) << "result #" << j
                           << " updates a parameter away from its stage";
      continue;
    }
    if (phaseOf(v) == Phase::Step && valueHome.lookup(v).kind != Home::Global)
      addGlobal(globalsAtEnd, v);
  }
  return success();
}

/// Tags: one counter per ordered pair of stages; a micro-batch value takes
/// one tag per micro-batch.
void StageSplitter::planTransfers() {
  for (unsigned p = 0, e = step.getNumArguments(); p < e; ++p) {
    auto it = paramUsers.find(p);
    if (it == paramUsers.end())
      continue;
    for (int64_t s : it->second)
      if (s != owner.lookup(p))
        paramEdges.push_back({step.getArgument(p), owner.lookup(p), s,
                              nextTag[{owner.lookup(p), s}]++});
  }
  forEachMicroOperand([&](Operation *def, Operation *op, Value operand) {
    int64_t from = stageOfOp(def), to = stageOfOp(op);
    if (from == to || valueEdges.count({operand.getAsOpaquePointer(), to}))
      return;
    int64_t &tag = nextTag[{from, to}];
    valueEdges[{operand.getAsOpaquePointer(), to}] = {operand, from, to, tag};
    tag += microbatches;
    sendsTo[operand].push_back(to);
  });
}

LogicalResult StageSplitter::buildStage(int64_t s) {
  MLIRContext *ctx = module.getContext();
  Block &oldBlock = step.getBody().front();
  auto ret = cast<func::ReturnOp>(oldBlock.getTerminator());
  Location loc = step.getLoc();
  auto gridRef = FlatSymbolRefAttr::get(grid.getSymNameAttr());
  StringRef gridName = grid.getSymName();

  // Signature: the parameters and moments this stage owns, every input
  // (token ids for all micro-batches).
  SmallVector<unsigned> argFrom;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : oldBlock.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (step.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()) &&
        ownerOf(i) != s)
      continue;
    Type type = arg.getType();
    NamedAttrList attrs(step.getArgAttrDict(i));
    if (isBatchInput(arg)) {
      auto tokens = tensorType(arg);
      SmallVector<int64_t> shape(tokens.getShape());
      shape[0] *= microbatches;
      type = tokens.clone(shape);
      // The layout loses the micro-batches' axis: the rank's block holds
      // every micro-batch.
      if (auto layout = attrs.get(TPDialect::LayoutAttrHelper::getNameStr())) {
        auto dist = cast<DistAttr>(layout);
        SmallVector<DenseI64ArrayAttr> split;
        for (unsigned d = 0; d < dist.getSplit().size(); ++d) {
          SmallVector<int64_t> axes;
          for (int64_t axis : dist.getSplitAxes(d))
            if (axis != kPipelineAxis)
              axes.push_back(axis);
          split.push_back(DenseI64ArrayAttr::get(ctx, axes));
        }
        attrs.set(TPDialect::LayoutAttrHelper::getNameStr(),
                  DistAttr::get(ctx, dist.getGrid(), split, dist.getPartial(),
                                dist.getSizes()));
      }
    }
    argFrom.push_back(i);
    argTypes.push_back(type);
    argAttrs.push_back(attrs.getDictionary(ctx));
  }
  SmallVector<unsigned> resultFrom;
  SmallVector<Type> resultTypes;
  for (auto [j, v] : llvm::enumerate(ret.getOperands())) {
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            j, TPDialect::UpdatesAttrHelper::getNameStr());
        updates && ownerOf(unsigned(updates.getInt())) != s)
      continue;
    resultFrom.push_back(j);
    resultTypes.push_back(v.getType());
  }
  auto func =
      func::FuncOp::create(loc, (step.getName() + "_stage" + Twine(s)).str(),
                           FunctionType::get(ctx, argTypes, resultTypes));
  func.setAllArgAttrs(argAttrs);
  for (auto [n, j] : llvm::enumerate(resultFrom)) {
    NamedAttrList attrs(step.getResultAttrDict(j));
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            j, TPDialect::UpdatesAttrHelper::getNameStr())) {
      unsigned at =
          llvm::find(argFrom, unsigned(updates.getInt())) - argFrom.begin();
      attrs.set(TPDialect::UpdatesAttrHelper::getNameStr(),
                IntegerAttr::get(IntegerType::get(ctx, 64), at));
    }
    func.setResultAttrs(n, attrs.getDictionary(ctx));
  }
  func->setAttr(TPDialect::StageAttrHelper::getNameStr(),
                IntegerAttr::get(IntegerType::get(ctx, 64), s));
  func->setAttr(TPDialect::ScheduleAttrHelper::getNameStr(),
                StringAttr::get(ctx, describeSlots(slots[s], chunks > 1)));
  module.push_back(func);
  stageFuncs.push_back(func);
  Block *block = func.addEntryBlock();
  OpBuilder b = OpBuilder::atBlockEnd(block);

  IRMapping invariant;
  for (auto [n, i] : llvm::enumerate(argFrom))
    invariant.map(oldBlock.getArgument(i), block->getArgument(n));

  // Parameters to and from other stages, once a step: every send starts
  // before any receive is waited for.
  SmallVector<std::tuple<Value, int64_t, int64_t>> paramSends;
  for (const Edge &e : paramEdges)
    if (e.from == s) {
      Value value = invariant.lookup(e.value);
      SendStartOp::create(b, loc, value, gridName, kPipelineAxis, e.to, e.base);
      paramSends.push_back({value, e.to, e.base});
    }
  SmallVector<std::pair<Value, Value>> paramRecvs;
  for (const Edge &e : paramEdges)
    if (e.to == s)
      paramRecvs.push_back(
          {e.value, RecvStartOp::create(b, loc, e.value.getType(), gridName,
                                        kPipelineAxis, e.from, e.base)});
  for (auto [value, started] : paramRecvs)
    invariant.map(value, RecvWaitOp::create(b, loc, value.getType(), started));

  // Which ops this stage runs, and the invariants they read.
  auto runsHere = [&](Operation *op) {
    Phase p = phase.lookup(op);
    if (p == Phase::Micro)
      return stageOfOp(op) == s;
    if (p != Phase::Step)
      return false;
    Home h = homeOf(op);
    return h.kind != Home::Stage || h.stage == s;
  };
  llvm::DenseSet<Operation *> neededInvariants;
  std::function<void(Value)> need = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || phase.lookup(def) != Phase::Invariant ||
        !neededInvariants.insert(def).second)
      return;
    for (Value operand : def->getOperands())
      need(operand);
  };
  for (Operation *op : ops)
    if (runsHere(op))
      for (Value operand : op->getOperands())
        need(operand);
  for (Operation *op : ops)
    if (neededInvariants.contains(op)) {
      for (Value operand : op->getOperands())
        if (!invariant.contains(operand))
          return error(op) << "needs a value stage " << s << " does not have";
      b.clone(*op, invariant);
    }

  // The micro-batches, slot by slot.
  SmallVector<IRMapping> micro(microbatches);
  DenseMap<Operation *, Value> accumulated;
  std::map<std::pair<void *, int64_t>, Value> posted, tokenBlocks;
  // Ops per (chunk, backward), in program order.
  std::map<std::pair<int64_t, bool>, SmallVector<Operation *>> slotOps;
  for (Operation *op : ops)
    if (phase.lookup(op) == Phase::Micro && stageOfOp(op) == s)
      slotOps[{virtualStage.lookup(op) / stages, backward.lookup(op)}]
          .push_back(op);
  ArrayRef<PipelineSlot> order = slots[s];
  // Each receive is posted at the start of the slot before the first one
  // that reads it.
  std::map<int64_t, SmallVector<std::pair<const Edge *, int64_t>>> postAt;
  for (auto &[key, e] : valueEdges) {
    if (e.to != s)
      continue;
    std::set<std::pair<int64_t, bool>> readers;
    for (Operation *user : e.value.getUsers())
      if (phase.lookup(user) == Phase::Micro && stageOfOp(user) == s)
        readers.insert(
            {virtualStage.lookup(user) / stages, backward.lookup(user)});
    for (int64_t m = 0; m < microbatches; ++m)
      for (auto [k, slot] : llvm::enumerate(order))
        if (slot.microbatch == m &&
            readers.count({slot.chunk, slot.backward})) {
          postAt[std::max<int64_t>(int64_t(k) - 1, 0)].push_back({&e, m});
          break;
        }
  }
  auto resolve = [&](Value v, int64_t m) -> FailureOr<Value> {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (!isBatchInput(arg))
        return invariant.lookup(v);
      Value &block = tokenBlocks[{v.getAsOpaquePointer(), m}];
      if (!block) {
        auto type = tensorType(v);
        SmallVector<int64_t> offsets(type.getRank(), 0);
        offsets[0] = m * type.getDimSize(0);
        block = SliceOp::create(b, loc, type, invariant.lookup(v),
                                b.getDenseI64ArrayAttr(offsets));
      }
      return block;
    }
    if (phase.lookup(v.getDefiningOp()) == Phase::Invariant)
      return invariant.lookup(v);
    if (Value mapped = micro[m].lookupOrNull(v))
      return mapped;
    auto it = posted.find({v.getAsOpaquePointer(), m});
    if (it == posted.end())
      return failure();
    Value received = RecvWaitOp::create(b, loc, v.getType(), it->second);
    micro[m].map(v, received);
    return received;
  };
  SmallVector<SmallVector<std::tuple<Value, int64_t, int64_t>>> sent(
      order.size());
  auto waitForSends = [&](ArrayRef<std::tuple<Value, int64_t, int64_t>> list) {
    for (auto [value, peer, tag] : list)
      SendWaitOp::create(b, loc, value, gridName, kPipelineAxis, peer, tag);
  };
  for (auto [k, slot] : llvm::enumerate(order)) {
    for (auto [e, m] : postAt[k])
      posted[{e->value.getAsOpaquePointer(), m}] =
          RecvStartOp::create(b, loc, e->value.getType(), gridName,
                              kPipelineAxis, e->from, e->base + m);
    const int64_t m = slot.microbatch;
    for (Operation *op : slotOps[{slot.chunk, slot.backward}]) {
      IRMapping operands;
      for (Value operand : op->getOperands()) {
        FailureOr<Value> value = resolve(operand, m);
        if (failed(value))
          return error(op) << "on stage " << s << " reads a value of another "
                           << "stage that no transfer brings";
        operands.map(operand, *value);
      }
      Operation *clone = b.clone(*op, operands);
      if (oneMicrobatch) {
        clone->setAttr(TPDialect::MicrobatchAttrHelper::getNameStr(),
                       b.getI64IntegerAttr(m));
        clone->setAttr(TPDialect::LayerAttrHelper::getNameStr(),
                       b.getI64IntegerAttr(layer.lookup(op)));
        if (slot.backward)
          clone->setAttr(TPDialect::BackwardAttrHelper::getNameStr(),
                         b.getUnitAttr());
      }
      for (auto [result, copy] :
           llvm::zip_equal(op->getResults(), clone->getResults())) {
        micro[m].map(result, copy);
        for (int64_t to : sendsTo.lookup(result)) {
          const Edge &e = valueEdges.at({result.getAsOpaquePointer(), to});
          SendStartOp::create(b, loc, copy, gridName, kPipelineAxis, to,
                              e.base + m);
          sent[k].push_back({copy, to, e.base + m});
        }
        for (Operation *user : result.getUsers())
          if (microbatchSums.contains(user)) {
            Value &sum = accumulated[user];
            if (oneMicrobatch) {
              // Timed as a later micro-batch's running sum: an add (of
              // itself; the program is not run).
              auto add = AddOp::create(b, loc, copy, copy);
              for (StringRef tag :
                   {TPDialect::MicrobatchAttrHelper::getNameStr(),
                    TPDialect::LayerAttrHelper::getNameStr(),
                    TPDialect::BackwardAttrHelper::getNameStr()})
                if (Attribute value = clone->getAttr(tag))
                  add->setAttr(tag, value);
              sum = add;
              continue;
            }
            sum = sum ? Value(AddOp::create(b, loc, sum, copy)) : Value(copy);
          }
      }
    }
    if (k > 0)
      waitForSends(sent[k - 1]);
  }
  if (!order.empty())
    waitForSends(sent.back());
  waitForSends(paramSends);

  // Once a step, after the micro-batches.
  DenseMap<Value, Value> here, global;
  auto part = [&](Value v) -> Value {
    if (phaseOf(v) == Phase::Invariant)
      return s == 0 ? invariant.lookup(v) : Value();
    Home h = valueHome.lookup(v);
    if (h.kind == Home::Global)
      return s == 0 ? here.lookup(v) : Value();
    if (h.kind == Home::Stage)
      return h.stage == s ? here.lookup(v) : Value();
    return here.lookup(v);
  };
  auto makeGlobal = [&](Value v) -> LogicalResult {
    if (global.count(v))
      return success();
    Value mine = part(v);
    if (!mine) {
      auto type = tensorType(v);
      if (!isa<FloatType>(type.getElementType()))
        return error(step) << "would all-reduce an integer value over the "
                              "pipeline stages";
      mine = ConstantOp::create(b, loc, type, b.getF64FloatAttr(0.0));
    }
    global[v] = AllReduceOp::create(b, loc, v.getType(), mine, gridRef,
                                    b.getDenseI64ArrayAttr({kPipelineAxis}));
    return success();
  };
  auto onThisStage = [&](Value v) -> Value {
    if (phaseOf(v) == Phase::Invariant)
      return invariant.lookup(v);
    if (Value g = global.lookup(v))
      return g;
    return here.lookup(v);
  };
  for (Operation *op : ops) {
    if (phase.lookup(op) != Phase::Step)
      continue;
    for (Value v : globalsBefore.lookup(op))
      if (failed(makeGlobal(v)))
        return failure();
    Home h = homeOf(op);
    if (microbatchSums.contains(op)) {
      if (h.stage == s)
        here[op->getResult(0)] = accumulated.lookup(op);
      continue;
    }
    if (h.kind == Home::Partial) {
      Value lhs = part(op->getOperand(0)), rhs = part(op->getOperand(1));
      if (lhs && rhs)
        here[op->getResult(0)] = AddOp::create(b, op->getLoc(), lhs, rhs);
      else if (lhs || rhs)
        here[op->getResult(0)] = lhs ? lhs : rhs;
      continue;
    }
    if (h.kind == Home::Stage && h.stage != s)
      continue;
    IRMapping operands;
    for (Value operand : op->getOperands()) {
      Value value = onThisStage(operand);
      if (!value)
        return error(op) << "on stage " << s << " lacks an operand";
      operands.map(operand, value);
    }
    Operation *clone = b.clone(*op, operands);
    for (auto [result, copy] :
         llvm::zip_equal(op->getResults(), clone->getResults()))
      here[result] = copy;
  }
  for (Value v : globalsAtEnd)
    if (failed(makeGlobal(v)))
      return failure();
  SmallVector<Value> results;
  for (unsigned j : resultFrom) {
    Value value = onThisStage(ret.getOperand(j));
    if (!value)
      return error(step) << "stage " << s << " lacks result #" << j;
    results.push_back(value);
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  return success();
}

/// Every send has one receive of the same type on its peer, and replaying
/// the stages' programs, with starts that never block, receives that wait
/// for their send and sends that wait for their receive to be posted, and
/// all-reduces over the stages that wait for every stage, finishes.
LogicalResult StageSplitter::verifyTransfers() {
  struct Event {
    Operation *op;
    enum Kind { SendStart, SendWait, RecvStart, RecvWait, Collective } kind;
    int64_t peer = 0, tag = 0;
  };
  SmallVector<SmallVector<Event>> events(stageFuncs.size());
  std::map<std::tuple<int64_t, int64_t, int64_t>, Type> sends, recvs;
  for (auto [s, func] : llvm::enumerate(stageFuncs)) {
    for (Operation &op : func.getBody().front()) {
      Event e{&op, Event::Collective};
      if (auto send = dyn_cast<SendStartOp>(op)) {
        e = {&op, Event::SendStart, int64_t(send.getPeer()),
             int64_t(send.getTag())};
        auto key = std::make_tuple(int64_t(s), int64_t(send.getPeer()),
                                   int64_t(send.getTag()));
        if (!sends.emplace(key, send.getInput().getType()).second)
          return error(&op) << "sends tag " << send.getTag() << " to stage "
                            << send.getPeer() << " twice";
      } else if (auto wait = dyn_cast<SendWaitOp>(op)) {
        e = {&op, Event::SendWait, int64_t(wait.getPeer()),
             int64_t(wait.getTag())};
      } else if (auto recv = dyn_cast<RecvStartOp>(op)) {
        e = {&op, Event::RecvStart, int64_t(recv.getPeer()),
             int64_t(recv.getTag())};
        auto key = std::make_tuple(int64_t(recv.getPeer()), int64_t(s),
                                   int64_t(recv.getTag()));
        if (!recvs.emplace(key, recv.getResult().getType()).second)
          return error(&op) << "receives tag " << recv.getTag()
                            << " from stage " << recv.getPeer() << " twice";
      } else if (auto wait = dyn_cast<RecvWaitOp>(op)) {
        auto start = wait.getReceived().getDefiningOp<RecvStartOp>();
        e = {&op, Event::RecvWait, int64_t(start.getPeer()),
             int64_t(start.getTag())};
      } else if (auto axes = op.getAttrOfType<DenseI64ArrayAttr>("grid_axes");
                 !axes ||
                 !llvm::is_contained(axes.asArrayRef(), kPipelineAxis)) {
        continue;
      }
      events[s].push_back(e);
    }
  }
  for (auto &[key, type] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end())
      return step.emitError()
             << "tp-pipeline-stages: stage " << std::get<0>(key)
             << " sends tag " << std::get<2>(key) << " to stage "
             << std::get<1>(key) << ", which never receives it";
    if (it->second != type)
      return step.emitError()
             << "tp-pipeline-stages: tag " << std::get<2>(key) << " from stage "
             << std::get<0>(key) << " is sent as " << type
             << " but received as " << it->second;
  }
  for (auto &[key, type] : recvs)
    if (!sends.count(key))
      return step.emitError()
             << "tp-pipeline-stages: stage " << std::get<1>(key)
             << " receives tag " << std::get<2>(key) << " from stage "
             << std::get<0>(key) << ", which never sends it";
  const size_t n = events.size();
  SmallVector<size_t> pos(n, 0);
  std::set<std::tuple<int64_t, int64_t, int64_t>> started, postedRecvs;
  while (true) {
    bool progress = false, done = true;
    for (size_t s = 0; s < n; ++s) {
      while (pos[s] < events[s].size()) {
        const Event &e = events[s][pos[s]];
        const int64_t me = int64_t(s);
        if (e.kind == Event::SendStart)
          started.insert({me, e.peer, e.tag});
        else if (e.kind == Event::RecvStart)
          postedRecvs.insert({e.peer, me, e.tag});
        else if (e.kind == Event::RecvWait &&
                 !started.count({e.peer, me, e.tag}))
          break;
        else if (e.kind == Event::SendWait &&
                 !postedRecvs.count({me, e.peer, e.tag}))
          break;
        else if (e.kind == Event::Collective)
          break;
        ++pos[s];
        progress = true;
      }
    }
    // All-reduces over the stages: when every stage waits at one, they
    // run together and must agree on the type.
    bool allAtCollective = true;
    for (size_t s = 0; s < n; ++s)
      if (pos[s] >= events[s].size() ||
          events[s][pos[s]].kind != Event::Collective)
        allAtCollective = false;
    if (allAtCollective) {
      Type type = events[0][pos[0]].op->getResult(0).getType();
      for (size_t s = 0; s < n; ++s) {
        if (events[s][pos[s]].op->getResult(0).getType() != type)
          return error(events[s][pos[s]].op)
                 << "all-reduces over the stages a " << type
                 << " on stage 0 but this on stage " << s;
        ++pos[s];
      }
      progress = true;
    }
    for (size_t s = 0; s < n; ++s)
      done = done && pos[s] == events[s].size();
    if (done)
      return success();
    if (!progress) {
      for (size_t s = 0; s < n; ++s)
        if (pos[s] < events[s].size())
          return error(events[s][pos[s]].op)
                 << "stage " << s << " would wait here forever (deadlock)";
    }
  }
}

LogicalResult StageSplitter::run() {
  if (failed(splitMicrobatchSums()) || failed(classify()) ||
      failed(cutLayers()) || failed(assignStages()))
    return failure();
  separateStageSums();
  if (failed(placeOnceAfter()))
    return failure();
  planTransfers();
  slots = pipelineSlots(schedule, stages, microbatches, chunks);
  if (oneMicrobatch)
    for (SmallVector<PipelineSlot> &order : slots)
      llvm::erase_if(order,
                     [](const PipelineSlot &slot) { return slot.microbatch; });
  // A forward-only program (@loss) runs the schedule's forward halves in
  // their order.
  if (llvm::none_of(ops, [&](Operation *op) { return backward.lookup(op); }))
    for (SmallVector<PipelineSlot> &order : slots)
      llvm::erase_if(order,
                     [](const PipelineSlot &slot) { return slot.backward; });
  for (int64_t s = 0; s < stages; ++s)
    if (failed(buildStage(s)))
      return failure();
  return verifyTransfers();
}

/// A stage function's program as text, without its name and the cuts it
/// serves: two stage functions run the same program when these are equal.
std::string programText(func::FuncOp func) {
  func::FuncOp copy = func.clone();
  copy.setName("stage");
  copy->removeAttr(TPDialect::CutsAttrHelper::getNameStr());
  std::string printed;
  llvm::raw_string_ostream os(printed);
  copy->print(os, OpPrintingFlags().printGenericOpForm());
  copy.erase();
  return printed;
}

struct TPPipelineStages
    : public tp::impl::TPPipelineStagesBase<TPPipelineStages> {
  using TPPipelineStagesBase::TPPipelineStagesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError() << "tp-pipeline-stages: " << message;
      signalPassFailure();
    };
    // The micro-batches are the grid's axis 0: checked once it is found.
    if (std::string problem = pipelineOptionsProblem(stages, /*microbatches=*/1,
                                                     schedule, chunks);
        !problem.empty())
      return fail(problem);
    GridOp grid;
    module.walk([&](GridOp g) { grid = g; });
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!grid || !step)
      return fail("needs a per-rank @train_step sharded with tp-shard's "
                  "microbatches=M (grid axis 0: the micro-batches)");
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (isGenerationFunction(func))
        return fail("generation programs (@" + func.getName().str() +
                    ") cannot run on pipeline stages yet; compile them "
                    "without pp");
    const int64_t microbatches = grid.getShape()[kPipelineAxis];
    if (schedule == PipelineSchedule::Interleaved && microbatches % stages != 0)
      return fail("schedule=interleaved needs the micro-batches (" +
                  Twine(microbatches) +
                  ") to be a multiple of pp=" + Twine(stages));
    ClusterModel cluster = referenceCluster();
    if (!clusterPath.empty()) {
      llvm::Expected<ClusterModel> loaded = loadCluster(clusterPath);
      if (!loaded)
        return fail(llvm::toString(loaded.takeError()));
      cluster = std::move(*loaded);
    }
    // The step, then the held-out loss (forward only) cut the same way.
    if (singleMicrobatch && stages != 1)
      return fail("single-microbatch=true times one stage; it needs pp=1");
    if (stageMoves < 0)
      return fail("stage-moves=" + Twine(stageMoves) + " is negative");
    if (stageMoves > 0 && (stages < 2 || singleMicrobatch))
      return fail("stage-moves=K moves layers between the stages of pp > 1");
    auto loss = module.lookupSymbol<func::FuncOp>("loss");
    // The alternative cuts start from the functions as they are now (the
    // splitters rewrite the sums in place).
    SmallVector<func::FuncOp> pristine;
    if (stageMoves > 0)
      for (func::FuncOp func : {step, loss})
        if (func)
          pristine.push_back(func.clone());
    llvm::scope_exit cleanup([&] {
      for (func::FuncOp func : pristine)
        func.erase();
    });
    SmallVector<func::FuncOp> staged;
    SmallVector<double> layerSeconds;
    SmallVector<int64_t> balanced;
    auto cut = [&](ArrayRef<func::FuncOp> funcs,
                   ArrayRef<int64_t> given) -> LogicalResult {
      SmallVector<int64_t> groups(given);
      for (func::FuncOp func : funcs) {
        StageSplitter splitter(module, func, grid, stages, chunks, schedule,
                               groups, cluster, microbatches);
        if (singleMicrobatch)
          splitter.emitOneMicrobatch();
        if (failed(splitter.run()))
          return failure();
        if (groups.empty())
          groups.assign(splitter.layersPerGroup().begin(),
                        splitter.layersPerGroup().end());
        if (layerSeconds.empty())
          layerSeconds.assign(splitter.layerSeconds().begin(),
                              splitter.layerSeconds().end());
        llvm::append_range(staged, splitter.stageFunctions());
      }
      if (balanced.empty())
        balanced = groups;
      return success();
    };
    SmallVector<func::FuncOp> originals = {step};
    if (loss)
      originals.push_back(loss);
    if (failed(cut(originals, layers)))
      return signalPassFailure();
    SmallVector<SmallVector<int64_t>> cuts = {balanced};
    if (stageMoves > 0) {
      llvm::append_range(cuts, neighbourCuts(balanced, stageMoves));
      for (func::FuncOp func : staged)
        func->setAttr(TPDialect::CutsAttrHelper::getNameStr(),
                      DenseI64ArrayAttr::get(&getContext(), {0}));
    }
    // Each kept stage function's text, printed once (not once per function
    // compared with it); kept functions are not erased while this lives.
    llvm::DenseMap<Operation *, std::string> keptText;
    for (auto [c, groups] : llvm::drop_begin(llvm::enumerate(cuts))) {
      // Each cut from fresh copies, under names of their own; its stage
      // functions are then named for the cut, or share an earlier cut's
      // equal function.
      SmallVector<func::FuncOp> copies;
      for (func::FuncOp func : pristine) {
        func::FuncOp copy = func.clone();
        copy.setName((func.getName() + "_cut" + Twine(c)).str());
        module.push_back(copy);
        copies.push_back(copy);
      }
      const size_t first = staged.size();
      if (failed(cut(copies, groups)))
        return signalPassFailure();
      for (func::FuncOp copy : copies)
        copy.erase();
      SmallVector<func::FuncOp> added(llvm::drop_begin(staged, first));
      staged.truncate(first);
      for (func::FuncOp func : added) {
        auto stage = func->getAttrOfType<IntegerAttr>(
            TPDialect::StageAttrHelper::getNameStr());
        StringRef base = func.getName().drop_back(
            ("_cut" + Twine(c) + "_stage" + Twine(stage.getInt()))
                .str()
                .size());
        std::string name = (base + "_stage" + Twine(stage.getInt())).str();
        func::FuncOp same;
        std::string text = programText(func);
        for (func::FuncOp kept : staged) {
          if (kept->getAttr(TPDialect::StageAttrHelper::getNameStr()) !=
                  stage ||
              !kept.getName().starts_with(name))
            continue;
          auto [known, added] = keptText.try_emplace(kept.getOperation());
          if (added)
            known->second = programText(kept);
          if (known->second == text)
            same = kept;
        }
        if (same) {
          SmallVector<int64_t> list(
              same->getAttrOfType<DenseI64ArrayAttr>(
                      TPDialect::CutsAttrHelper::getNameStr())
                  .asArrayRef());
          list.push_back(c);
          same->setAttr(TPDialect::CutsAttrHelper::getNameStr(),
                        DenseI64ArrayAttr::get(&getContext(), list));
          func.erase();
          continue;
        }
        func.setName(name + "_cut" + std::to_string(c));
        func->setAttr(TPDialect::CutsAttrHelper::getNameStr(),
                      DenseI64ArrayAttr::get(&getContext(), {int64_t(c)}));
        keptText[func.getOperation()] = std::move(text);
        staged.push_back(func);
      }
    }
    // The pipeline axis takes the micro-batches' place; the functions
    // sharded for one micro-batch go.
    SmallVector<int64_t> shape(grid.getShape());
    shape[kPipelineAxis] = stages;
    OpBuilder b(grid);
    grid.setShapeAttr(b.getDenseI64ArrayAttr(shape));
    for (func::FuncOp func : llvm::to_vector(module.getOps<func::FuncOp>()))
      if (!llvm::is_contained(staged, func))
        func.erase();
    SmallVector<NamedAttribute> record = {
        b.getNamedAttr("schedule",
                       b.getStringAttr(pipelineScheduleName(schedule))),
        b.getNamedAttr("stages", b.getI64IntegerAttr(stages)),
        b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatches)),
        b.getNamedAttr("chunks", b.getI64IntegerAttr(chunks)),
        b.getNamedAttr("layers", b.getDenseI64ArrayAttr(balanced)),
        b.getNamedAttr("layer_seconds", b.getDenseF64ArrayAttr(layerSeconds))};
    if (cuts.size() > 1) {
      SmallVector<Attribute> list;
      for (ArrayRef<int64_t> groups : cuts)
        list.push_back(b.getDenseI64ArrayAttr(groups));
      record.push_back(b.getNamedAttr("cuts", b.getArrayAttr(list)));
    }
    module->setAttr(TPDialect::PipelineAttrHelper::getNameStr(),
                    b.getDictionaryAttr(record));
  }
};

} // namespace
