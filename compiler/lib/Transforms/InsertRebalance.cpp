//===- InsertRebalance.cpp - mark dimensions whose blocks can move
//---------===//
//
// A rebalance point is a dimension split over one grid axis whose blocks can
// move between the ranks of that axis, or be left out on one of them, without
// changing any collective: in a Megatron pair, the column-parallel output
// features and the row-parallel reduction features they feed (attention
// heads; MLP features with their biases). The partial sums over those blocks
// already meet in the pair's all-reduce or reduce-scatter, so a rank may hold
// any number of them.
//
// Starting from each split parameter dimension, the pass follows the split
// through the ops' sharding rules: a block must stay the major part of every
// dimension it reaches, its factor must be one the op's kernel computes split,
// and it may not reach an op that exchanges blocks between ranks (whose
// shapes must agree). The finest block every op allows is the point's unit
// (one attention head); where the ops allow any split (MLP features) the
// `granularity` option sets it. Every dimension the point reaches is resized
// for `capacity` blocks, so tp-plan-memory plans each buffer for the most a
// rank may hold, and the runtime runs kernels on the blocks it has.
//
//===----------------------------------------------------------------------===//

#include "FunctionAttrs.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include <cmath>
#include <map>
#include <numeric>

namespace mlir::tp {
#define GEN_PASS_DEF_TPINSERTREBALANCE
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// A tensor dimension of a value.
using DimRef = std::pair<Value, int64_t>;

/// The dimensions one point reaches in one function, each with the extent of
/// one block in it (its size is blocks times that extent).
struct Reach {
  llvm::MapVector<DimRef, int64_t> blockExtent;
  /// Empty when the blocks can move; otherwise why not.
  std::string failure;
};

int64_t dimSize(Value value, int64_t dim) {
  return cast<RankedTensorType>(value.getType()).getDimSize(dim);
}

/// Whether a value of a per-rank program is the same on every rank of a grid
/// axis: moving a block to another rank is exact only if every operand that
/// does not carry the blocks is.
enum class Sameness {
  Uniform,   // equal on every rank
  RingBlock, // a ring step's block: over the ring, every rank sees each
  Shard,     // this rank's block of a uniform whole (sequence parallelism)
  // A shard a ring starts from: the ring's first block (its step 0 uses the
  // shard in place) to the ring's ops, a shard to the others.
  RingStartShard,
  Differs, // differs between ranks
};

/// Two values combined elementwise: a uniform one adds nothing.
Sameness join(Sameness a, Sameness b) {
  if (a == b || b == Sameness::Uniform)
    return a;
  if (a == Sameness::Uniform)
    return b;
  if (b == Sameness::RingStartShard)
    std::swap(a, b);
  if (a == Sameness::RingStartShard &&
      (b == Sameness::Shard || b == Sameness::RingBlock))
    return b;
  return Sameness::Differs;
}

/// Whether `op`'s kernel works on its rank's block of a dimension split over
/// `axis` (tp-partition records those axes on vocabulary-parallel and
/// split-statistics ops).
bool kernelSplitOver(Operation *op, int64_t axis) {
  for (StringRef name : {TPDialect::VocabAxesAttrHelper::getNameStr(),
                         TPDialect::FeatureAxesAttrHelper::getNameStr()})
    if (auto axes = op->getAttrOfType<DenseI64ArrayAttr>(name))
      if (llvm::is_contained(axes.asArrayRef(), axis))
        return true;
  return false;
}

/// Whether `op` leaves the result of a reduce-scatter over `axis` that
/// tp-collective-matmul decomposed into ring steps.
bool completesRingReduction(Operation *op, int64_t axis) {
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>(
      TPDialect::RingReducedAttrHelper::getNameStr());
  return axes && llvm::is_contained(axes.asArrayRef(), axis);
}

/// Sameness of every value of `func` over grid axis `axis`, in program order.
DenseMap<Value, Sameness> samenessOver(func::FuncOp func, int64_t axis) {
  DenseMap<Value, Sameness> sameness;
  auto overAxis = [&](Operation *op) {
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
    return !axes || llvm::is_contained(axes.asArrayRef(), axis);
  };
  for (BlockArgument arg : func.getArguments()) {
    auto layout = func.getArgAttrOfType<DistAttr>(
        arg.getArgNumber(), TPDialect::LayoutAttrHelper::getNameStr());
    bool split = false;
    for (int64_t d = 0; layout && d < int64_t(layout.getSplit().size()); ++d)
      split |= llvm::is_contained(layout.getSplitAxes(d), axis);
    sameness[arg] = split ? Sameness::Differs : Sameness::Uniform;
  }
  DenseSet<Value> ringStarts;
  func.walk(
      [&](RingShiftStartOp start) { ringStarts.insert(start.getInput()); });
  func.walk([&](Operation *op) {
    Sameness joined = Sameness::Uniform;
    for (Value operand : op->getOperands())
      joined = join(joined, sameness.lookup(operand));
    if (op->hasTrait<OpTrait::tp::UniformResult>() && overAxis(op))
      joined = Sameness::Uniform;
    else if (op->hasTrait<OpTrait::tp::RingStep>() && overAxis(op))
      joined = joined == Sameness::Differs ? joined : Sameness::RingBlock;
    else if ((isa<ReduceScatterOp>(op) && overAxis(op)) ||
             completesRingReduction(op, axis))
      joined = Sameness::Shard;
    else if (isa<LocalSplitOp>(op) && overAxis(op))
      joined = joined == Sameness::Uniform ? Sameness::Shard : joined;
    else if ((op->hasTrait<OpTrait::tp::NeedsUniformShards>() &&
              overAxis(op)) ||
             kernelSplitOver(op, axis))
      joined = Sameness::Differs;
    if (joined == Sameness::RingStartShard)
      joined = Sameness::Shard;
    for (Value result : op->getResults())
      sameness[result] =
          joined == Sameness::Shard && ringStarts.contains(result)
              ? Sameness::RingStartShard
              : joined;
  });
  return sameness;
}

/// Whether the exchange `op` leaves dimension `d` of its operands and result
/// as it is, and exchanges only between ranks of the other grid axes than
/// `axis`. Those ranks (data-parallel replicas, 2D's other axis) hold the
/// same blocks (the runtime takes one decision for all of them), so the
/// exchange pairs equal blocks; a gather, scatter or split over the group
/// changes the per-rank extent of the dimension it works on, which would
/// cut across the blocks.
bool exchangesEqualBlocks(Operation *op, int64_t axis, int64_t d) {
  auto axes = op->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
  // A ring shift's wait completes the exchange its start (operand 0) began.
  if (!axes && op->getNumOperands() > 0)
    if (Operation *start = op->getOperand(0).getDefiningOp())
      axes = start->getAttrOfType<DenseI64ArrayAttr>("grid_axes");
  if (!axes || llvm::is_contained(axes.asArrayRef(), axis) ||
      op->getNumResults() != 1)
    return false;
  int64_t extent = dimSize(op->getResult(0), d);
  return llvm::all_of(op->getOperands(), [&](Value operand) {
    return dimSize(operand, d) == extent;
  });
}

/// Follows `blocks` blocks of dimension `dim` of `seed`, spread over grid
/// axis `axis`, through every op that reads or writes a value it reaches.
Reach follow(Value seed, int64_t dim, int64_t blocks, int64_t axis,
             const DenseMap<Value, Sameness> &sameness) {
  Reach reach;
  SmallVector<DimRef> worklist;
  auto visit = [&](Value value, int64_t d, int64_t extent) {
    auto [it, inserted] = reach.blockExtent.insert({{value, d}, extent});
    if (inserted)
      worklist.push_back({value, d});
    else if (it->second != extent)
      reach.failure = "its blocks would have two different extents in one "
                      "dimension";
  };
  int64_t size = dimSize(seed, dim);
  visit(seed, dim, size / blocks);
  // Records why `op` stops the blocks.
  auto fail = [&](Operation *op, const Twine &why) {
    reach.failure = ("'" + op->getName().getStringRef() + "' " + why).str();
    return false;
  };
  // The extent of the factors of a dimension after its leading one.
  auto minorSize = [](const ShardingRule &rule, const DimFactors &factors) {
    int64_t minor = 1;
    for (int64_t f : ArrayRef<int64_t>(factors).drop_front())
      minor *= rule.getFactors()[f].size;
    return minor;
  };

  // Maps the member dimension `d` (block extent `extent`) of position
  // `tensorFactors` of `op` to every dimension its leading factor indexes.
  auto throughRule = [&](Operation *op, const ShardingRule &rule,
                         const TensorFactors &tensorFactors, int64_t d,
                         int64_t extent) -> bool {
    const DimFactors &factors = tensorFactors[d];
    if (factors.empty())
      return fail(op, "cannot split dimension " + Twine(d) + " of its operand");
    // The blocks are the major part of the first factor: what follows it
    // must fit inside one block.
    int64_t minor = minorSize(rule, factors);
    int64_t factor = factors.front();
    int64_t factorSize = rule.getFactors()[factor].size;
    if (extent % minor != 0 || factorSize % (extent / minor) != 0)
      return fail(op, "splits dimension " + Twine(d) + " inside a block");
    int64_t perBlock = extent / minor;
    auto iface = cast<ShardingRuleOpInterface>(op);
    if (!rule.hasSplittableKind(factor) ||
        !iface.isSplittableFactor(rule, factor))
      return fail(op, "cannot compute its dimension " + Twine(d) +
                          " split across ranks");
    auto mapInto = [&](Value value, const TensorFactors &dims) -> bool {
      for (auto [e, dimFactors] : llvm::enumerate(dims)) {
        auto pos = llvm::find(dimFactors, factor);
        if (pos == dimFactors.end())
          continue;
        if (pos != dimFactors.begin())
          return fail(op, "would place the blocks inside dimension " +
                              Twine(e) + " of a value");
        visit(value, e, perBlock * minorSize(rule, dimFactors));
      }
      return true;
    };
    for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
      const TensorFactors &dims = rule.getOperandFactors()[idx];
      bool carries = llvm::any_of(dims, [&](const DimFactors &f) {
        return llvm::is_contained(f, factor);
      });
      // Another rank computing a moved block would read its own copy:
      // exact only when that is the same data, whole or passed round a ring.
      Sameness other = sameness.lookup(operand);
      if (!carries && other != Sameness::Uniform &&
          other != Sameness::RingBlock && other != Sameness::RingStartShard)
        return fail(op, "combines the blocks with operand " + Twine(idx) +
                            ", which differs between ranks");
      if (!mapInto(operand, dims))
        return false;
    }
    for (auto [idx, result] : llvm::enumerate(op->getResults()))
      if (!mapInto(result, rule.getResultFactors()[idx]))
        return false;
    return true;
  };

  // Checks that `op` may see a member dimension and follows it through.
  auto throughOp = [&](Operation *op, bool isResult, unsigned idx, int64_t d,
                       int64_t extent) -> bool {
    if (op->hasTrait<OpTrait::ReturnLike>())
      return true;
    if (op->hasTrait<OpTrait::tp::NeedsUniformShards>() &&
        !exchangesEqualBlocks(op, axis, d))
      return fail(op,
                  "exchanges blocks between ranks, whose shapes must agree");
    // These kernels gather statistics over their split dimension.
    if (isa<VocabParallelOpInterface, SplitStatisticsOpInterface>(op))
      return fail(op, "exchanges statistics between ranks over its split "
                      "dimensions");
    auto iface = dyn_cast<ShardingRuleOpInterface>(op);
    if (!iface)
      return fail(op, "has no sharding rule");
    ShardingRule rule = iface.getShardingRule();
    const TensorFactors &factors =
        isResult ? rule.getResultFactors()[idx] : rule.getOperandFactors()[idx];
    return throughRule(op, rule, factors, d, extent);
  };

  while (!worklist.empty() && reach.failure.empty()) {
    auto [value, d] = worklist.pop_back_val();
    int64_t extent = reach.blockExtent.lookup({value, d});
    if (auto result = dyn_cast<OpResult>(value))
      if (!throughOp(result.getOwner(), true, result.getResultNumber(), d,
                     extent))
        break;
    for (OpOperand &use : value.getUses())
      if (!throughOp(use.getOwner(), false, use.getOperandNumber(), d, extent))
        break;
  }
  return reach;
}

/// The most blocks `dim` of `seed` can be cut into (each block at least
/// `granularity` elements when any cut suits the ops), or failure.
Reach finestReach(Value seed, int64_t dim, int64_t granularity, int64_t axis,
                  const DenseMap<Value, Sameness> &sameness, int64_t &blocks) {
  int64_t size = dimSize(seed, dim);
  Reach coarsest;
  for (int64_t candidate = size; candidate >= 1; --candidate) {
    if (size % candidate != 0)
      continue;
    Reach reach = follow(seed, dim, candidate, axis, sameness);
    if (!reach.failure.empty()) {
      if (candidate == 1)
        coarsest = std::move(reach);
      continue;
    }
    blocks = candidate;
    if (candidate != size)
      return reach;
    // Every element may be its own block: take blocks of `granularity`.
    blocks = size / std::gcd(size, granularity);
    return blocks == size ? reach : follow(seed, dim, blocks, axis, sameness);
  }
  return coarsest;
}

/// One point being built: its dimensions in every function.
struct Candidate {
  SmallVector<std::pair<std::string, int64_t>> params; // (name, dim)
  FlatSymbolRefAttr grid;
  int64_t axis = 0;
  int64_t blocksPerRank = 0;
  SmallVector<std::pair<func::FuncOp, Reach>> reaches;
  std::string failure;
};

/// The dotted prefix the names share, without their last component.
std::string commonPrefix(ArrayRef<std::pair<std::string, int64_t>> params) {
  SmallVector<StringRef> common;
  StringRef(params.front().first).split(common, '.');
  common.pop_back();
  for (const auto &param : params) {
    SmallVector<StringRef> parts;
    StringRef(param.first).split(parts, '.');
    size_t n = 0;
    while (n < common.size() && n + 1 < parts.size() && parts[n] == common[n])
      ++n;
    common.resize(n);
  }
  return common.empty() ? std::string("rebalance") : llvm::join(common, ".");
}

struct TPInsertRebalance
    : public tp::impl::TPInsertRebalanceBase<TPInsertRebalance> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (granularity < 1 || !(headroom >= 0.0)) {
      module.emitError() << "tp-insert-rebalance: granularity must be >= 1 "
                            "and headroom >= 0";
      return signalPassFailure();
    }
    std::vector<Candidate> candidates;
    struct SeedFailure {
      std::string func, reason;
    };
    std::map<std::pair<std::string, int64_t>, std::vector<SeedFailure>>
        failures;
    std::map<std::pair<std::string, int64_t>, size_t> candidateOf;
    // The parameter an argument is (not one of its AdamW moments).
    auto paramName = [](func::FuncOp func, unsigned arg) -> std::string {
      auto name = func.getArgAttrOfType<StringAttr>(
          arg, TPDialect::ParamAttrHelper::getNameStr());
      if (!name ||
          func.getArgAttr(arg, TPDialect::StateAttrHelper::getNameStr()))
        return std::string();
      return name.str();
    };

    for (auto func : module.getOps<func::FuncOp>()) {
      // Generation keeps KV caches laid out at the even split, and runs in
      // a process of its own (no training steps): its programs use the
      // parameters at the even split, like any program that cannot move
      // blocks.
      if (func.isExternal() || isGenerationFunction(func))
        continue;
      // (value, dim) already in a point of this function.
      DenseSet<DimRef> reached;
      std::map<int64_t, DenseMap<Value, Sameness>> samenessByAxis;
      for (unsigned arg = 0; arg < func.getNumArguments(); ++arg) {
        std::string name = paramName(func, arg);
        auto layout = func.getArgAttrOfType<DistAttr>(
            arg, TPDialect::LayoutAttrHelper::getNameStr());
        if (name.empty() || !layout)
          continue;
        Value seed = func.getArgument(arg);
        int64_t rank = cast<RankedTensorType>(seed.getType()).getRank();
        for (int64_t dim = 0; dim < rank; ++dim) {
          ArrayRef<int64_t> axes = layout.getSplitAxes(dim);
          if (axes.size() != 1 || reached.contains({seed, dim}))
            continue;
          auto [it, fresh] = samenessByAxis.try_emplace(axes.front());
          if (fresh)
            it->second = samenessOver(func, axes.front());
          int64_t blocks = 0;
          Reach reach = finestReach(seed, dim, granularity, axes.front(),
                                    it->second, blocks);
          for (auto &[ref, extent] : reach.blockExtent)
            reached.insert(ref);
          if (!reach.failure.empty()) {
            failures[{name, dim}].push_back(
                {func.getSymName().str(), reach.failure});
            continue;
          }
          // The parameter dimensions this point reaches.
          SmallVector<std::pair<std::string, int64_t>> params;
          for (auto &[ref, extent] : reach.blockExtent) {
            auto argument = dyn_cast<BlockArgument>(ref.first);
            if (argument && argument.getOwner() == &func.front()) {
              std::string argName = paramName(func, argument.getArgNumber());
              if (!argName.empty())
                params.push_back({argName, ref.second});
            }
          }
          llvm::sort(params);
          // One point per set of parameter dimensions across functions.
          size_t index = candidates.size();
          for (const auto &param : params)
            if (auto it = candidateOf.find(param); it != candidateOf.end())
              index = it->second;
          if (index == candidates.size()) {
            candidates.emplace_back();
            candidates.back().params = params;
            candidates.back().grid = layout.getGrid();
            candidates.back().axis = axes.front();
            candidates.back().blocksPerRank = blocks;
          }
          Candidate &candidate = candidates[index];
          for (const auto &param : params)
            candidateOf[param] = index;
          // The first reason a candidate fails is the one reported.
          if (candidate.failure.empty() && candidate.params != params)
            candidate.failure = "its parameters form different groups in "
                                "different functions";
          if (candidate.failure.empty() && blocks != candidate.blocksPerRank)
            candidate.failure = "functions allow different block sizes";
          candidate.reaches.push_back({func, std::move(reach)});
        }
      }
    }

    // A function where the blocks cannot move uses the parameters at their
    // even split only; the runtime runs it only while no block has moved.
    for (auto func : module.getOps<func::FuncOp>()) {
      for (const Candidate &candidate : candidates) {
        if (!candidate.failure.empty() ||
            llvm::any_of(candidate.reaches,
                         [&](const auto &r) { return r.first == func; }))
          continue;
        for (const auto &param : candidate.params) {
          auto it = failures.find(param);
          if (it == failures.end())
            continue;
          auto failure = llvm::find_if(it->second, [&](const SeedFailure &f) {
            return f.func == func.getSymName();
          });
          if (failure == it->second.end())
            continue;
          func.emitRemark()
              << "@" << func.getSymName() << " moves no blocks of parameter '"
              << param.first << "' dimension " << param.second
              << " (it runs only while they are evenly "
                 "spread): "
              << failure->reason;
          break;
        }
      }
    }
    for (const auto &[param, list] : failures)
      if (!candidateOf.count(param))
        module.emitRemark()
            << "parameter '" << param.first << "' dimension " << param.second
            << " is no rebalance point: '@" << list.front().func
            << "': " << list.front().reason;

    OpBuilder builder(module.getBodyRegion());
    SymbolTable symbols(module);
    for (Candidate &candidate : candidates) {
      std::string where = "parameter '" + candidate.params.front().first +
                          "' dimension " +
                          std::to_string(candidate.params.front().second);
      if (!candidate.failure.empty()) {
        module.emitRemark()
            << where << " is no rebalance point: " << candidate.failure;
        continue;
      }
      auto grid = symbols.lookup<GridOp>(candidate.grid.getValue());
      if (!grid) {
        module.emitError() << where << " is split over " << candidate.grid
                           << ", which is no tp.grid";
        return signalPassFailure();
      }
      int64_t ranks = grid.getShape()[candidate.axis];
      int64_t perRank = candidate.blocksPerRank;
      int64_t blocks = perRank * ranks;
      int64_t capacity = std::min<int64_t>(
          blocks, static_cast<int64_t>(
                      std::ceil(double(perRank) * (1.0 + headroom) - 1e-9)));
      // Points follow their grid and each other, in parameter order.
      Operation *after = grid;
      for (Operation &op : module.getBody()->getOperations())
        if (isa<RebalancePointOp>(op))
          after = &op;
      builder.setInsertionPointAfter(after);
      auto point = RebalancePointOp::create(
          builder, grid.getLoc(),
          builder.getStringAttr(commonPrefix(candidate.params)), candidate.grid,
          builder.getI64IntegerAttr(candidate.axis),
          builder.getI64IntegerAttr(blocks),
          builder.getI64IntegerAttr(capacity));
      symbols.insert(point); // renames on a clash
      auto pointRef = FlatSymbolRefAttr::get(point.getSymNameAttr());
      int64_t dims = 0;
      for (auto &[func, reach] : candidate.reaches) {
        for (auto &[ref, extent] : reach.blockExtent) {
          resize(ref.first, ref.second, capacity * extent);
          tag(ref.first, ref.second, pointRef);
          ++dims;
        }
      }
      module.emitRemark() << "rebalance point @" << point.getSymName() << ": "
                          << blocks << " blocks over axis " << candidate.axis
                          << " (" << perRank << " per rank, capacity "
                          << capacity << "), " << candidate.params.size()
                          << " parameter dimensions, " << dims
                          << " tensor dimensions";
    }
    // Function types follow their arguments and returned values; argument
    // tags are set in one rewrite per function.
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (auto it = argumentTags.find(func); it != argumentTags.end()) {
        SmallVector<Attribute> tags(func.getNumArguments());
        for (auto &[idx, dims] : it->second)
          tags[idx] = ArrayAttr::get(&getContext(), dims);
        setArgAttrsInBulk(
            func, TPDialect::RebalanceDimsAttrHelper::getNameStr(), tags);
      }
      Operation *terminator = func.front().getTerminator();
      func.setType(FunctionType::get(&getContext(),
                                     func.front().getArgumentTypes(),
                                     terminator->getOperandTypes()));
    }
  }

  static void resize(Value value, int64_t dim, int64_t size) {
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = size;
    value.setType(RankedTensorType::get(shape, type.getElementType()));
  }

  /// Records `point` on dimension `dim` of `value`: on its function argument
  /// or on its defining op, one array per result.
  void tag(Value value, int64_t dim, FlatSymbolRefAttr point) {
    MLIRContext *ctx = &getContext();
    auto unitDims = [&](Value v) {
      return SmallVector<Attribute>(
          cast<RankedTensorType>(v.getType()).getRank(), UnitAttr::get(ctx));
    };
    StringRef name = TPDialect::RebalanceDimsAttrHelper::getNameStr();
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      auto func = cast<func::FuncOp>(argument.getOwner()->getParentOp());
      unsigned idx = argument.getArgNumber();
      auto [it, inserted] = argumentTags[func].try_emplace(idx);
      SmallVector<Attribute> &dims = it->second;
      if (inserted) {
        dims = unitDims(value);
        if (auto old = func.getArgAttrOfType<ArrayAttr>(idx, name))
          dims.assign(old.begin(), old.end());
      }
      dims[dim] = point;
      return;
    }
    auto result = cast<OpResult>(value);
    Operation *op = result.getOwner();
    SmallVector<Attribute> perResult;
    if (auto old = op->getAttrOfType<ArrayAttr>(name))
      perResult.assign(old.begin(), old.end());
    else
      for (Value r : op->getResults())
        perResult.push_back(ArrayAttr::get(ctx, unitDims(r)));
    SmallVector<Attribute> dims(
        cast<ArrayAttr>(perResult[result.getResultNumber()]).getValue());
    dims[dim] = point;
    perResult[result.getResultNumber()] = ArrayAttr::get(ctx, dims);
    op->setAttr(name, ArrayAttr::get(ctx, perResult));
  }

  /// Argument tags, set once per function at the end (FunctionAttrs.h).
  DenseMap<func::FuncOp, std::map<unsigned, SmallVector<Attribute>>>
      argumentTags;
};

} // namespace
