//===- Shard.cpp - distribution layouts from sharding rules ---------------===//
//
// tp-shard: every value gets a #tp.dist layout, chosen op by op in program
// order from the op's sharding rule (see Passes.td). This file is the engine;
// what a scheme decides (which grid axes split which factors of weights,
// activations and batch) is its ShardScheme policy (ShardSchemes.cpp).
//
//===----------------------------------------------------------------------===//

#include "ShardScheme.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>
#include <optional>

namespace mlir::tp {
#define GEN_PASS_DEF_TPSHARD
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {
/// Grid axes per factor of a rule; empty: the factor is not split.
using Assignment = SmallVector<Axes>;

constexpr double kInfiniteCost = std::numeric_limits<double>::infinity();

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

double bytesOf(RankedTensorType type) {
  return double(type.getNumElements()) *
         double(std::max<unsigned>(1, type.getElementTypeBitWidth() / 8));
}

class Sharder : public ShardQueries {
public:
  Sharder(ModuleOp module, SmallVector<int64_t> gridShape,
          const ShardScheme &scheme)
      : module(module), gridShape(std::move(gridShape)), scheme(scheme),
        reservedAxes(scheme.getReservedAxes()),
        sumOnlyAxes(scheme.getSumOnlyAxes()) {}

  LogicalResult run();

  // ShardQueries, for the scheme.
  ArrayRef<int64_t> getGridShape() const override { return gridShape; }
  int64_t shardsOf(ArrayRef<int64_t> axes) const override {
    int64_t shards = 1;
    for (int64_t axis : axes)
      shards *= gridShape[axis];
    return shards;
  }
  bool isUndecided(Value value) const override { return isFree(value); }
  std::string describe(Value value) const override;
  bool isActivation(RankedTensorType type) const override {
    return type.getRank() >= 3 && batch >= 0 && type.getDimSize(0) == batch &&
           isPositions(type.getDimSize(1));
  }
  bool isTokenMajor(RankedTensorType type) const override {
    return type.getRank() >= 3 && batch >= 0 && type.getDimSize(0) == batch &&
           llvm::is_contained(type.getShape().drop_front(), seq);
  }
  bool isTokenIds(RankedTensorType type) const override {
    return type.getRank() == 2 && isa<IntegerType>(type.getElementType()) &&
           batch >= 0 && type.getDimSize(0) == batch &&
           isPositions(type.getDimSize(1));
  }
  /// A sample's positions: its sequence, or one for a value per sample (a
  /// DLRM's features, activations and label; a pooled representation).
  bool isPositions(int64_t size) const { return size == seq || size == 1; }

  int64_t getModelRank(BlockArgument param) const override;

private:
  LogicalResult shardFunction(func::FuncOp func);
  void reduceScalarSumsOnce(func::FuncOp func);
  LogicalResult shardOp(Operation *op);
  /// Gives the undecided value `value` the layout `layout` (or as close as
  /// its deferred view ops can produce).
  LogicalResult decide(Value value, const Layout &layout);

  /// The claims a value's splits make on the factors of `dims`; fails with
  /// a diagnostic when a split dimension does not divide.
  FailureOr<SmallVector<Claim>>
  claimsOf(Operation *op, const ShardingRule &rule, const TensorFactors &dims,
           const Layout &layout, StringRef what, unsigned index);
  /// The layout a tensor indexed by `dims` takes under `assignment`, or
  /// nullopt when a split factor is a minor part of a dimension.
  std::optional<Layout> layoutUnder(const TensorFactors &dims,
                                    const Assignment &assignment) const;
  double redistributionCost(Value value, const Layout &from,
                            const Layout &to) const;
  Value redistribute(Value value, const Layout &to, Operation *before);
  /// The layout the input of view op `view` needs for its result to have
  /// `layout`, or nullopt when the view's rule cannot carry it back.
  std::optional<Layout> viewInputLayout(Operation *view,
                                        const Layout &layout) const;
  /// Whether an earlier redistribution yields `value` in layout `to`: of
  /// `value` itself, or of the input of the view op that defines it (the
  /// view then applies to the redistributed input).
  bool isRedistributed(Value value, const Layout &to) const;
  /// That earlier redistribution, usable at `before` (the view op cloned
  /// onto it when needed); null when there is none.
  Value reuseRedistribution(Value value, const Layout &to, Operation *before);
  std::optional<Layout> hintFor(Value value);
  /// An error about the whole program, named in its text: the source line
  /// of the module or a function (all attributes, all parameters) would
  /// make it thousands of characters long.
  InFlightDiagnostic moduleError() {
    return mlir::emitError(UnknownLoc::get(module.getContext()));
  }

  bool isFree(Value value) const { return undecided.contains(value); }
  /// An argument (a parameter, a moment, an input), or an argument seen
  /// through view ops (a parameter's bf16 copy, a slice of it): moving it
  /// costs what moving the argument would.
  bool isArgument(Value value) const {
    while (Operation *def = value.getDefiningOp()) {
      if (!def->hasTrait<OpTrait::tp::IsView>())
        return false;
      value = def->getOperand(0);
    }
    return true;
  }

  ModuleOp module;
  SmallVector<int64_t> gridShape;
  const ShardScheme &scheme;
  Axes reservedAxes;
  // Axes whose shards may only be summed (the micro-batches).
  Axes sumOnlyAxes;
  FlatSymbolRefAttr gridRef;
  int64_t batch = -1, seq = -1;

  /// Layouts of parameters (and moments) and of token inputs, by
  /// argumentKey, shared by all functions.
  llvm::StringMap<Layout> argumentLayouts;
  /// Parameters, token inputs and the results of deferred view ops of
  /// parameters whose layout is not decided yet.
  llvm::DenseSet<Value> undecided;
  llvm::DenseSet<Operation *> deferred;
  /// Redistributions made so far: (value, layout type) -> result.
  DenseMap<std::pair<Value, Type>, Value> redistributed;
  DenseMap<Value, std::optional<Layout>> hints;
};

/// The name under which argument `index` of `func` has one layout in every
/// function: "name" or "name#state" for a parameter or its moment,
/// "input#tokens", "input#targets" or "input#positions" for the token
/// inputs, "cache#name" for a KV cache (laid out as its first use needs);
/// none for other arguments (the step, hyperparameters), which stay whole.
static std::optional<std::string> argumentKey(func::FuncOp func,
                                              unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(
          index, TPDialect::ParamAttrHelper::getNameStr())) {
    std::string key = name.str();
    if (auto state = func.getArgAttrOfType<StringAttr>(
            index, TPDialect::StateAttrHelper::getNameStr()))
      key += "#" + state.str();
    return key;
  }
  if (auto input = func.getArgAttrOfType<StringAttr>(
          index, TPDialect::InputAttrHelper::getNameStr());
      input && (input.getValue() == "tokens" || input.getValue() == "targets" ||
                input.getValue() == "positions" || input.getValue() == "dense"))
    return ("input#" + input.getValue()).str();
  if (auto cache = func.getArgAttrOfType<StringAttr>(
          index, TPDialect::CacheAttrHelper::getNameStr()))
    return ("cache#" + cache.getValue()).str();
  return std::nullopt;
}

/// The tp.param name of the parameter (or moment) `value` is or views.
static StringAttr parameterName(Value value) {
  Value root = value;
  while (Operation *def = root.getDefiningOp()) {
    if (!def->hasTrait<OpTrait::tp::IsView>())
      break;
    root = def->getOperand(0);
  }
  if (auto arg = dyn_cast<BlockArgument>(root))
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      return func.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), TPDialect::ParamAttrHelper::getNameStr());
  return nullptr;
}

std::string Sharder::describe(Value value) const {
  if (StringAttr name = parameterName(value))
    return ("parameter '" + name.getValue() + "'").str();
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value.getType();
  return text;
}

int64_t Sharder::getModelRank(BlockArgument param) const {
  auto func = cast<func::FuncOp>(param.getOwner()->getParentOp());
  auto name = func.getArgAttrOfType<StringAttr>(
      param.getArgNumber(), TPDialect::ParamAttrHelper::getNameStr());
  // A moment has no tp.hf_shape of its own: its parameter's counts.
  for (unsigned i = 0, e = func.getNumArguments(); name && i < e; ++i)
    if (func.getArgAttr(i, TPDialect::ParamAttrHelper::getNameStr()) == name)
      if (auto shape = func.getArgAttrOfType<DenseI64ArrayAttr>(
              i, TPDialect::HfShapeAttrHelper::getNameStr()))
        return shape.size();
  return tensorType(param).getRank();
}

FailureOr<SmallVector<Claim>>
Sharder::claimsOf(Operation *op, const ShardingRule &rule,
                  const TensorFactors &dims, const Layout &layout,
                  StringRef what, unsigned index) {
  SmallVector<Claim> claims;
  for (auto [d, axes] : llvm::enumerate(layout.split)) {
    if (axes.empty() || dims[d].empty())
      continue;
    int64_t factor = dims[d].front();
    if (!cast<ShardingRuleOpInterface>(op).isSplittableFactor(rule, factor))
      continue;
    int64_t size = rule.getFactors()[factor].size, shards = shardsOf(axes);
    if (size % shards != 0)
      return op->emitOpError()
             << "tp-shard: cannot split dimension " << d << " of " << what
             << " #" << index << " further: its leading factor has size "
             << size << ", which " << shards << " ranks do not divide";
    claims.push_back({factor, Axes(axes)});
  }
  return claims;
}

std::optional<Layout> Sharder::layoutUnder(const TensorFactors &dims,
                                           const Assignment &assignment) const {
  Layout layout = Layout::replicated(dims.size());
  for (auto [d, factors] : llvm::enumerate(dims)) {
    for (auto [i, factor] : llvm::enumerate(factors)) {
      if (assignment[factor].empty())
        continue;
      if (i != 0)
        return std::nullopt;
      layout.split[d] = assignment[factor];
    }
  }
  return layout;
}

double Sharder::redistributionCost(Value value, const Layout &from,
                                   const Layout &to) const {
  if (from == to)
    return 0.0;
  for (int64_t axis : to.partial)
    if (!llvm::is_contained(from.partial, axis))
      return kInfiniteCost;
  RankedTensorType type = tensorType(value);
  // Token ids and targets stay as they are: collectives move floats.
  if (!isa<FloatType>(type.getElementType()))
    return kInfiniteCost;
  if (isRedistributed(value, to))
    return 0.0;
  double bytes = bytesOf(type), cost = 0.0;
  Axes reduced;
  for (int64_t axis : from.partial)
    if (!llvm::is_contained(to.partial, axis))
      reduced.push_back(axis);
  if (!reduced.empty()) {
    double n = double(shardsOf(reduced));
    // A reduce-scatter where the target splits a dimension on the reduced
    // axes, half an all-reduce.
    bool scatters = llvm::any_of(to.split, [&](const auto &axes) {
      return llvm::any_of(
          axes, [&](int64_t a) { return llvm::is_contained(reduced, a); });
    });
    cost += (scatters ? 1.0 : 2.0) * (n - 1) / n * bytes;
  }
  for (auto [have, want] : llvm::zip_equal(from.split, to.split))
    for (int64_t axis : have)
      if (!llvm::is_contained(want, axis)) {
        if (llvm::is_contained(sumOnlyAxes, axis))
          return kInfiniteCost;
        double n = double(gridShape[axis]);
        cost += (n - 1) / n * bytes;
      }
  if (isArgument(value))
    cost *= scheme.parameterCostFactor();
  return cost;
}

std::optional<Layout> Sharder::viewInputLayout(Operation *view,
                                               const Layout &layout) const {
  ShardingRule rule = cast<ShardingRuleOpInterface>(view).getShardingRule();
  Assignment assignment(rule.getFactors().size());
  for (auto [d, axes] : llvm::enumerate(layout.split)) {
    if (axes.empty())
      continue;
    ArrayRef<int64_t> factors = rule.getResultFactors()[0][d];
    if (factors.empty() ||
        rule.getFactors()[factors.front()].size % shardsOf(axes) != 0)
      return std::nullopt;
    assignment[factors.front()] = axes;
  }
  // Only a layout the rule carries both ways: the view of the input's
  // layout must be `layout` again.
  std::optional<Layout> input =
      layoutUnder(rule.getOperandFactors()[0], assignment);
  std::optional<Layout> result =
      layoutUnder(rule.getResultFactors()[0], assignment);
  if (!input || !result || result->split != layout.split)
    return std::nullopt;
  input->partial = layout.partial;
  return input;
}

bool Sharder::isRedistributed(Value value, const Layout &to) const {
  if (redistributed.count({value, withLayout(tensorType(value), gridRef, to)}))
    return true;
  Operation *view = value.getDefiningOp();
  if (!view || !view->hasTrait<OpTrait::tp::IsView>())
    return false;
  std::optional<Layout> input = viewInputLayout(view, to);
  return input && isRedistributed(view->getOperand(0), *input);
}

Value Sharder::reuseRedistribution(Value value, const Layout &to,
                                   Operation *before) {
  RankedTensorType type = withLayout(tensorType(value), gridRef, to);
  auto it = redistributed.find({value, type});
  if (it != redistributed.end()) {
    Operation *def = it->second.getDefiningOp();
    if (def->getBlock() == before->getBlock() && def->isBeforeInBlock(before))
      return it->second;
  }
  Operation *view = value.getDefiningOp();
  if (!view || !view->hasTrait<OpTrait::tp::IsView>())
    return {};
  std::optional<Layout> input = viewInputLayout(view, to);
  if (!input)
    return {};
  Value source = reuseRedistribution(view->getOperand(0), *input, before);
  if (!source)
    return {};
  OpBuilder builder(before);
  Operation *copy = builder.clone(*view);
  copy->setOperand(0, source);
  copy->getResult(0).setType(type);
  redistributed[{value, type}] = copy->getResult(0);
  return copy->getResult(0);
}

Value Sharder::redistribute(Value value, const Layout &to, Operation *before) {
  RankedTensorType type = withLayout(tensorType(value), gridRef, to);
  if (type == value.getType())
    return value;
  if (Value reused = reuseRedistribution(value, to, before))
    return reused;
  OpBuilder builder(before);
  Value result = RedistributeOp::create(builder, before->getLoc(), type, value);
  redistributed[{value, type}] = result;
  return result;
}

/// The layout a gradient should arrive in: its parameter's, when AdamW (or a
/// same-typed linear op feeding it: a sum of gradients) consumes it.
std::optional<Layout> Sharder::hintFor(Value value) {
  auto it = hints.find(value);
  if (it != hints.end())
    return it->second;
  hints[value] = std::nullopt; // cuts cycles; there are none in SSA
  std::optional<Layout> hint;
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (auto adamw = dyn_cast<AdamWOp>(user)) {
      if (use.getOperandNumber() == 1 && !isFree(adamw.getParam()))
        hint = getLayout(tensorType(adamw.getParam()));
    } else if (user->hasTrait<OpTrait::tp::PassesPartialSums>() &&
               user->getResult(0).getType() == value.getType()) {
      // A linear op that keeps the type (a gradient summed or scaled on
      // its way to the optimizer) wants what its result wants.
      hint = hintFor(user->getResult(0));
    }
    if (hint)
      break;
  }
  hints[value] = hint;
  return hint;
}

/// Whether `op` passes a pending partial sum in operand `index` through to
/// its results, given the operands' layouts: the op is linear in its operands
/// jointly (PassesPartialSums) and all of them are partial over the same axes.
bool keepsPartial(Operation *op, unsigned index,
                  ArrayRef<std::optional<Layout>> layouts) {
  if (!layouts[index] || layouts[index]->partial.empty() ||
      !op->hasTrait<OpTrait::tp::PassesPartialSums>())
    return false;
  Axes partial = layouts[index]->partial;
  llvm::sort(partial);
  return llvm::all_of(layouts, [&](const std::optional<Layout> &layout) {
    if (!layout)
      return false;
    Axes other = layout->partial;
    llvm::sort(other);
    return other == partial;
  });
}

LogicalResult Sharder::shardOp(Operation *op) {
  auto ruled = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruled)
    return op->emitOpError() << "tp-shard: has no sharding rule";
  ShardingRule rule = ruled.getShardingRule();
  unsigned numOperands = op->getNumOperands();
  int64_t numFactors = rule.getFactors().size();

  SmallVector<std::optional<Layout>> layouts;
  for (Value operand : op->getOperands())
    layouts.push_back(isFree(operand)
                          ? std::nullopt
                          : std::optional(getLayout(tensorType(operand))));
  SmallVector<bool> keep;
  Axes keptPartial;
  for (unsigned i = 0; i < numOperands; ++i) {
    keep.push_back(keepsPartial(op, i, layouts));
    if (keep.back())
      keptPartial = layouts[i]->partial;
  }

  // Each decided operand's claims (from its splits, not its partial sum).
  SmallVector<std::optional<SmallVector<Claim>>> operandClaims;
  for (unsigned i = 0; i < numOperands; ++i) {
    if (!layouts[i]) {
      operandClaims.push_back(std::nullopt);
      continue;
    }
    FailureOr<SmallVector<Claim>> claims = claimsOf(
        op, rule, rule.getOperandFactors()[i], *layouts[i], "operand", i);
    if (failed(claims))
      return failure();
    // A parameter's splits over axes only the scheme assigns (ZeRO-1's data
    // axis) are storage, gathered where it is used: they propose nothing.
    if (!reservedAxes.empty() && parameterName(op->getOperand(i))) {
      for (Claim &claim : *claims)
        llvm::erase_if(claim.axes, [&](int64_t axis) {
          return llvm::is_contained(reservedAxes, axis);
        });
      llvm::erase_if(*claims,
                     [](const Claim &claim) { return claim.axes.empty(); });
    }
    operandClaims.push_back(std::move(*claims));
  }
  FailureOr<SmallVector<Claim>> schemeClaims =
      scheme.claims(op, rule, operandClaims, *this);
  if (failed(schemeClaims))
    return failure();

  // Seeds, in order of preference on equal cost: parameters' splits, other
  // operands', a resolved partial sum scattered along the sequence
  // (sequence parallelism), a gradient's wanted layout, nothing.
  SmallVector<SmallVector<Claim>> seeds;
  SmallVector<unsigned> claimOrder; // decided operands, parameters first
  for (bool arguments : {true, false})
    for (unsigned i = 0; i < numOperands; ++i)
      if (operandClaims[i] && isArgument(op->getOperand(i)) == arguments)
        claimOrder.push_back(i);
  for (unsigned i : claimOrder)
    seeds.push_back(*operandClaims[i]);
  for (unsigned i = 0; i < numOperands; ++i) {
    if (!layouts[i] || layouts[i]->partial.empty() || keep[i])
      continue;
    SmallVector<Claim> claims =
        scheme.resolutionClaims(op, rule, i, *layouts[i], *this);
    if (!claims.empty())
      seeds.push_back(std::move(claims));
    // Resolved straight into the layout the value is wanted in later (a
    // weight gradient whose norm is taken before AdamW consumes it): a
    // reduce-scatter here, and the later redistribution is free.
    if (std::optional<Layout> hint = hintFor(op->getOperand(i))) {
      FailureOr<SmallVector<Claim>> wanted =
          claimsOf(op, rule, rule.getOperandFactors()[i], *hint, "operand", i);
      if (failed(wanted))
        return failure();
      seeds.push_back(std::move(*wanted));
    }
  }
  SmallVector<std::optional<Layout>> resultHints;
  for (auto [r, result] : llvm::enumerate(op->getResults())) {
    resultHints.push_back(hintFor(result));
    if (!resultHints.back())
      continue;
    FailureOr<SmallVector<Claim>> claims = claimsOf(
        op, rule, rule.getResultFactors()[r], *resultHints.back(), "result", r);
    if (failed(claims))
      return failure();
    seeds.push_back(std::move(*claims));
  }
  // Last, nothing but the scheme's claims (and no merging): always
  // expressible, whatever the operands hold.
  seeds.push_back({});
  const size_t bareSeed = seeds.size() - 1;

  struct Candidate {
    Assignment assignment;
    SmallVector<Layout> operands, results;
    double cost = kInfiniteCost;
    int64_t splitWork = 0;
  };
  std::optional<Candidate> best;
  for (auto [seedIndex, seed] : llvm::enumerate(seeds)) {
    Candidate candidate;
    candidate.assignment.assign(numFactors, Axes());
    DenseSet<int64_t> used(keptPartial.begin(), keptPartial.end());
    DenseSet<int64_t> whole; // factors claimed unsplit
    auto apply = [&](const Claim &claim) {
      if (!candidate.assignment[claim.factor].empty() ||
          whole.contains(claim.factor) ||
          llvm::any_of(claim.axes, [&](int64_t a) { return used.contains(a); }))
        return;
      if (claim.axes.empty()) {
        whole.insert(claim.factor);
        return;
      }
      candidate.assignment[claim.factor] = claim.axes;
      used.insert(claim.axes.begin(), claim.axes.end());
    };
    llvm::for_each(*schemeClaims, apply);
    llvm::for_each(seed, apply);
    if (seedIndex != bareSeed)
      for (unsigned i : claimOrder)
        llvm::for_each(*operandClaims[i], apply);

    bool valid = true;
    candidate.cost = 0.0;
    for (unsigned i = 0; i < numOperands && valid; ++i) {
      std::optional<Layout> layout =
          layoutUnder(rule.getOperandFactors()[i], candidate.assignment);
      if (!layout) {
        valid = false;
        break;
      }
      if (keep[i])
        layout->partial = layouts[i]->partial;
      if (layouts[i])
        candidate.cost +=
            redistributionCost(op->getOperand(i), *layouts[i], *layout);
      candidate.operands.push_back(std::move(*layout));
    }
    for (unsigned r = 0; r < op->getNumResults() && valid; ++r) {
      std::optional<Layout> layout =
          layoutUnder(rule.getResultFactors()[r], candidate.assignment);
      if (!layout) {
        valid = false;
        break;
      }
      layout->partial = keptPartial;
      for (int64_t f = 0; f < numFactors; ++f)
        if (!candidate.assignment[f].empty() &&
            rule.getKind(f) == FactorKind::Reduction &&
            !rule.indexesResult(f, r))
          llvm::append_range(layout->partial, candidate.assignment[f]);
      // Partial axes are a set: one order, so equal sets compare equal.
      llvm::sort(layout->partial);
      if (resultHints[r])
        candidate.cost +=
            redistributionCost(op->getResult(r), *layout, *resultHints[r]);
      candidate.results.push_back(std::move(*layout));
    }
    // An op that updates an argument in place (AdamW, a KV cache write)
    // works on the argument's own shard: the runtime keeps updates in the
    // argument's storage, the optimizer state stays split as the weights
    // are, and a cache as every program reading it laid it out.
    if (auto alias = dyn_cast<StorageAliasOpInterface>(op);
        valid && alias && !op->hasTrait<OpTrait::tp::IsView>())
      for (unsigned r = 0; r < op->getNumResults() && valid; ++r)
        if (std::optional<unsigned> i = alias.getStorageOperand(r);
            i && layouts[*i] && isArgument(op->getOperand(*i)))
          valid = candidate.operands[*i] == *layouts[*i];
    if (!valid)
      continue;
    candidate.splitWork = 1;
    for (const Axes &axes : candidate.assignment)
      candidate.splitWork *= shardsOf(axes);
    if (!best || candidate.cost < best->cost ||
        (candidate.cost == best->cost && candidate.splitWork > best->splitWork))
      best = std::move(candidate);
  }
  if (!best || best->cost == kInfiniteCost)
    return op->emitOpError()
           << "tp-shard: found no layout assignment for this op";

  for (unsigned i = 0; i < numOperands; ++i) {
    Value operand = op->getOperand(i);
    if (isFree(operand) && failed(decide(operand, best->operands[i])))
      return failure();
    op->setOperand(i, redistribute(op->getOperand(i), best->operands[i], op));
  }
  for (auto [result, layout] : llvm::zip_equal(op->getResults(), best->results))
    result.setType(withLayout(tensorType(result), gridRef, layout));
  return success();
}

LogicalResult Sharder::decide(Value value, const Layout &layout) {
  if (!undecided.erase(value))
    return success();
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    std::optional<std::string> key = argumentKey(func, arg.getArgNumber());
    // Parameters are stored as the scheme says; inputs as first used.
    Layout stored = func.getArgAttr(arg.getArgNumber(),
                                    TPDialect::ParamAttrHelper::getNameStr())
                        ? scheme.storageLayout(arg, layout, *this)
                        : layout;
    arg.setType(withLayout(tensorType(arg), gridRef, stored));
    argumentLayouts[*key] = stored;
    return success();
  }
  // A deferred view op: pull the layout back through its rule, decide its
  // input, then shard it in its place.
  Operation *view = value.getDefiningOp();
  auto ruled = cast<ShardingRuleOpInterface>(view);
  ShardingRule rule = ruled.getShardingRule();
  FailureOr<SmallVector<Claim>> claims =
      claimsOf(view, rule, rule.getResultFactors()[0], layout, "result", 0);
  if (failed(claims))
    return failure();
  Assignment assignment(rule.getFactors().size());
  for (const Claim &claim : *claims)
    assignment[claim.factor] = claim.axes;
  std::optional<Layout> input =
      layoutUnder(rule.getOperandFactors()[0], assignment);
  if (failed(decide(view->getOperand(0),
                    input ? *input
                          : Layout::replicated(
                                tensorType(view->getOperand(0)).getRank()))))
    return failure();
  deferred.erase(view);
  return shardOp(view);
}

LogicalResult Sharder::shardFunction(func::FuncOp func) {
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (auto input = func.getArgAttrOfType<StringAttr>(
            i, TPDialect::InputAttrHelper::getNameStr());
        input && input.getValue() == "tokens") {
      batch = tensorType(arg).getDimSize(0);
      seq = tensorType(arg).getDimSize(1);
      if (failed(scheme.checkTokens(batch, seq, isGenerationFunction(func),
                                    [&] { return moduleError(); })))
        return failure();
    }
    std::optional<std::string> key = argumentKey(func, i);
    if (!key)
      continue;
    auto it = argumentLayouts.find(*key);
    if (it != argumentLayouts.end())
      arg.setType(withLayout(tensorType(arg), gridRef, it->second));
    else
      undecided.insert(arg);
  }

  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isa<func::ReturnOp, RedistributeOp>(op))
      continue;
    if (deferred.contains(&op))
      continue;
    if (op.hasTrait<OpTrait::tp::IsView>() && isFree(op.getOperand(0))) {
      deferred.insert(&op);
      undecided.insert(op.getResult(0));
      continue;
    }
    if (failed(shardOp(&op)))
      return failure();
  }
  // Parameters nothing decided stay replicated; then views left over.
  for (BlockArgument arg : body.getArguments())
    if (isFree(arg) &&
        failed(decide(arg, Layout::replicated(tensorType(arg).getRank()))))
      return failure();
  for (Operation &op : body)
    if (deferred.contains(&op)) {
      deferred.erase(&op);
      undecided.erase(op.getResult(0));
      if (failed(shardOp(&op)))
        return failure();
    }

  reduceScalarSumsOnce(func);
  redistributed.clear(); // it may name redistributes erased just now

  // Results: an update keeps its argument's layout; the rest are whole.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (unsigned r = 0; r < ret.getNumOperands(); ++r) {
    Value value = ret.getOperand(r);
    Layout target = Layout::replicated(tensorType(value).getRank());
    if (auto updates = func.getResultAttrOfType<IntegerAttr>(
            r, TPDialect::UpdatesAttrHelper::getNameStr()))
      target = getLayout(tensorType(body.getArgument(updates.getInt())));
    ret.setOperand(r, redistribute(value, target, ret));
  }
  func.setFunctionType(FunctionType::get(
      func.getContext(), body.getArgumentTypes(), ret.getOperandTypes()));
  return success();
}

/// A sum of scalars some of which are partial sums (the global gradient
/// norm: one squared norm per parameter, those of split parameters partial)
/// gets one all-reduce per partial term when shardOp meets the adds in
/// order. Regroup it: add the partial terms first, reduce that once, then
/// add the whole terms (Megatron-LM likewise reduces the local norms once).
void Sharder::reduceScalarSumsOnce(func::FuncOp func) {
  auto isScalarAdd = [](Operation *op) {
    auto add = dyn_cast_or_null<AddOp>(op);
    return add && tensorType(add.getResult()).getRank() == 0 &&
           tensorType(add.getLhs()).getRank() == 0 &&
           tensorType(add.getRhs()).getRank() == 0;
  };
  SmallVector<AddOp> roots;
  func.walk([&](AddOp add) {
    // A root: a scalar add not feeding another scalar add of its chain.
    if (!isScalarAdd(add))
      return;
    if (add->hasOneUse() && isScalarAdd(*add->user_begin()))
      return;
    roots.push_back(add);
  });
  for (AddOp root : roots) {
    // Leaves of the chain of single-use scalar adds ending at `root`.
    SmallVector<Value> leaves;
    SmallVector<Operation *> adds;
    SmallVector<Value> work = {root.getResult()};
    while (!work.empty()) {
      Value value = work.pop_back_val();
      Operation *def = value.getDefiningOp();
      if (isScalarAdd(def) && (def == root || def->hasOneUse())) {
        adds.push_back(def);
        work.push_back(def->getOperand(1));
        work.push_back(def->getOperand(0));
        continue;
      }
      leaves.push_back(value);
    }
    // Partial terms, reduced one by one: redistributes of a partial scalar
    // to a whole one, used only here. Grouped by the axes they are partial
    // over (split weights, biases split on fewer axes, ...).
    SmallVector<std::pair<Axes, SmallVector<Value>>> partial;
    SmallVector<Value> whole;
    for (Value leaf : leaves) {
      auto reduce = leaf.getDefiningOp<RedistributeOp>();
      if (reduce && reduce->hasOneUse() &&
          getLayout(tensorType(reduce.getResult())).isReplicated()) {
        Layout from = getLayout(tensorType(reduce.getInput()));
        if (llvm::all_of(from.split, [](const auto &a) { return a.empty(); })) {
          auto *group = llvm::find_if(
              partial, [&](const auto &g) { return g.first == from.partial; });
          if (group == partial.end()) {
            partial.push_back({from.partial, {}});
            group = std::prev(partial.end());
          }
          group->second.push_back(reduce.getInput());
          continue;
        }
      }
      whole.push_back(leaf);
    }
    if (llvm::none_of(
            partial, [](const auto &group) { return group.second.size() > 1; }))
      continue;
    OpBuilder builder(root);
    Location loc = root.getLoc();
    auto add = [&](Value lhs, Value rhs) -> Value {
      return AddOp::create(builder, loc, lhs.getType(), lhs, rhs);
    };
    Value sum;
    for (auto &[axes, terms] : partial) {
      Value group = terms.front();
      for (Value term : ArrayRef<Value>(terms).drop_front())
        group = add(group, term);
      group = RedistributeOp::create(
          builder, loc, withLayout(tensorType(group), gridRef, Layout()),
          group);
      sum = sum ? add(sum, group) : group;
    }
    for (Value term : whole)
      sum = add(term, sum);
    root.getResult().replaceAllUsesWith(sum);
    // The old adds (root first, then its operands' adds), then the
    // per-term reductions.
    for (Operation *op : adds)
      op->erase();
    for (Value leaf : leaves)
      if (auto reduce = leaf.getDefiningOp<RedistributeOp>();
          reduce && reduce->use_empty())
        reduce->erase();
  }
}

LogicalResult Sharder::run() {
  if (!module.getOps<GridOp>().empty())
    return module.emitError() << "tp-shard: the module already has a tp.grid";
  if (failed(scheme.checkModel(module, [&] { return moduleError(); })))
    return failure();
  OpBuilder builder(module.getBodyRegion());
  builder.setInsertionPointToStart(module.getBody());
  auto grid = GridOp::create(builder, module.getLoc(), "tp",
                             builder.getDenseI64ArrayAttr(gridShape));
  gridRef = FlatSymbolRefAttr::get(grid.getSymNameAttr());

  SmallVector<func::FuncOp> funcs;
  if (auto step = module.lookupSymbol<func::FuncOp>("train_step"))
    funcs.push_back(step);
  for (auto func : module.getOps<func::FuncOp>())
    if (func.getName() != "train_step")
      funcs.push_back(func);
  for (func::FuncOp func : funcs) {
    hints.clear();
    redistributed.clear();
    if (failed(shardFunction(func)))
      return failure();
  }
  if (std::string why = scheme.whyTokensNeeded(); !why.empty() && seq < 0)
    return moduleError() << "tp-shard: " << why;
  return success();
}

struct TPShard : public tp::impl::TPShardBase<TPShard> {
  using TPShardBase::TPShardBase;

  /// Option errors are reported while the pipeline is built, as one line,
  /// rather than as a diagnostic on the whole module.
  LogicalResult initializeOptions(
      StringRef options,
      function_ref<LogicalResult(const Twine &)> errorHandler) override {
    if (failed(TPShardBase::initializeOptions(options, errorHandler)))
      return failure();
    if (mode == ParallelMode::None)
      return errorHandler("tp-shard: mode=none distributes nothing; use "
                          "mode=1d");
    return verifyShardOptions("tp-shard", mode, grid.getValue(), seqParallel,
                              dataParallel, shardOptimizer, errorHandler);
  }

  void runOnOperation() override {
    // Options set in C++ skip initializeOptions.
    auto optionError = [&](const Twine &message) {
      mlir::emitError(UnknownLoc::get(&getContext())) << message;
      return failure();
    };
    if (mode == ParallelMode::None ||
        failed(verifyShardOptions("tp-shard", mode, grid.getValue(),
                                  seqParallel, dataParallel, shardOptimizer,
                                  optionError)))
      return signalPassFailure();
    SmallVector<int64_t> tensorShape(ArrayRef<int64_t>(grid.getValue().sizes));
    if (tensorShape.empty())
      tensorShape.push_back(1);
    if (microbatches < 0) {
      (void)optionError("tp-shard: microbatches=" + Twine(microbatches) +
                        " is negative");
      return signalPassFailure();
    }
    std::unique_ptr<ShardScheme> scheme =
        makeShardScheme(mode, tensorShape, seqParallel, dataParallel,
                        shardOptimizer, shardWholeDimsOnly, microbatches);
    SmallVector<int64_t> shape;
    if (microbatches > 0)
      shape.push_back(microbatches);
    if (dataParallel > 1)
      shape.push_back(dataParallel);
    llvm::append_range(shape, tensorShape);
    if (failed(Sharder(getOperation(), shape, *scheme).run()))
      return signalPassFailure();
  }
};
} // namespace
