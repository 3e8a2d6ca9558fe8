//===- CollectiveMatmul.cpp - overlap gathers and scatters with GEMMs -----===//
//
// Decomposes an all-gather feeding matmuls, and a matmul feeding a
// reduce-scatter, into the n steps of a ring over the collective's group
// (SUMMA panels, the "collective matmul" of windowed einsums): each step
// starts the shift of one block to the next rank, multiplies the block it
// holds, then waits, so the transfer runs behind the GEMM. The bytes moved
// are the collective's: n-1 shifts of one block.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPCOLLECTIVEMATMUL
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

/// The matrix dimensions of one matmul operand (batch dimensions lead).
struct OperandDims {
  int64_t free;        // M of the lhs, N of the rhs
  int64_t contraction; // K
};

OperandDims operandDims(MatmulOp matmul, unsigned operand) {
  int64_t rank =
      cast<RankedTensorType>(matmul->getOperand(operand).getType()).getRank();
  bool transposed =
      operand == 0 ? matmul.getTransposeLhs() : matmul.getTransposeRhs();
  // lhs [.., M, K] or [.., K, M]; rhs [.., K, N] or [.., N, K].
  bool freeLast = (operand == 1) != transposed;
  return freeLast ? OperandDims{rank - 1, rank - 2}
                  : OperandDims{rank - 2, rank - 1};
}

int64_t elementCount(Value value) {
  return cast<RankedTensorType>(value.getType()).getNumElements();
}

int64_t rankOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getRank();
}

RankedTensorType withDimDivided(Type type, int64_t dim, int64_t parts) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] /= parts;
  return RankedTensorType::get(shape, tensor.getElementType());
}

/// How one ring step of a gathered operand enters a matmul.
struct GatheredUse {
  MatmulOp matmul;
  unsigned operand;       // which operand is the gathered value
  bool contraction;       // the gathered dimension is K: sum the steps
  int64_t resultDim = -1; // otherwise the result dimension of the block
  // The other operand's dimension cut alike at each step (K; or a batch
  // dimension both operands share), -1 for none.
  int64_t otherDim = -1;
};

/// How `matmul` uses operand `operand` gathered along `dim`, if a ring
/// decomposition can express it.
std::optional<GatheredUse> classifyGatheredUse(MatmulOp matmul,
                                               unsigned operand, int64_t dim) {
  Value other = matmul->getOperand(1 - operand);
  if (other == matmul->getOperand(operand))
    return std::nullopt;
  OperandDims dims = operandDims(matmul, operand);
  GatheredUse use{matmul, operand, false};
  if (dim == dims.contraction) {
    use.contraction = true;
    use.otherDim = operandDims(matmul, 1 - operand).contraction;
    return use;
  }
  int64_t resultRank = rankOf(matmul.getResult());
  if (dim == dims.free) {
    use.resultDim = operand == 0 ? resultRank - 2 : resultRank - 1;
    return use;
  }
  // A batch dimension: the result has it at the same index; the other
  // operand is cut alike unless it broadcasts there.
  use.resultDim = dim;
  if (rankOf(other) > 2 &&
      cast<RankedTensorType>(other.getType()).getDimSize(dim) != 1)
    use.otherDim = dim;
  return use;
}

/// Moves the view ops computing `value` (slices, reshapes and transposes of
/// weights, a few deep) before `point`, so that a ring step there can use
/// it; false if `value` cannot be had there.
bool hoistViewsBefore(Value value, Operation *point, int depth = 4) {
  Operation *def = value.getDefiningOp();
  if (!def || def->isBeforeInBlock(point))
    return true;
  if (depth == 0 || !def->hasTrait<OpTrait::tp::IsView>() ||
      !isMemoryEffectFree(def))
    return false;
  for (Value operand : def->getOperands())
    if (!hoistViewsBefore(operand, point, depth - 1))
      return false;
  def->moveBefore(point);
  return true;
}

struct TPCollectiveMatmul
    : public tp::impl::TPCollectiveMatmulBase<TPCollectiveMatmul> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grids = llvm::to_vector(module.getOps<GridOp>());
    if (grids.empty())
      return;
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<AllGatherOp> gathers;
      SmallVector<ReduceScatterOp> scatters;
      func.walk([&](Operation *op) {
        if (auto gather = dyn_cast<AllGatherOp>(op))
          gathers.push_back(gather);
        else if (auto scatter = dyn_cast<ReduceScatterOp>(op))
          scatters.push_back(scatter);
      });
      for (AllGatherOp gather : gathers)
        decomposeGather(gather);
      for (ReduceScatterOp scatter : scatters)
        decomposeScatter(scatter);
    }
  }

  int64_t groupSize(Operation *op, FlatSymbolRefAttr gridName,
                    ArrayRef<int64_t> axes) {
    auto grid = SymbolTable::lookupNearestSymbolFrom<GridOp>(op, gridName);
    int64_t size = 1;
    for (int64_t axis : axes)
      size *= grid.getShape()[axis];
    return size;
  }

  void decomposeGather(AllGatherOp gather);
  void decomposeScatter(ReduceScatterOp scatter);
};

} // namespace

/// all_gather(x) -> matmuls: n ring steps; step i multiplies the block held
/// (rank r-i's), placing or summing its product, while the next block moves.
/// Uses that are not decomposed get the gathered value rebuilt from the
/// same blocks (no extra traffic).
void TPCollectiveMatmul::decomposeGather(AllGatherOp gather) {
  const int64_t n =
      groupSize(gather, gather.getGridAttr(), gather.getGridAxes());
  if (n < 2)
    return;
  const int64_t dim = gather.getDim();
  Value gathered = gather.getResult();

  // The matmul users a ring can express, from the first one on; each later
  // one needs its other operand at the first (weights' views are moved).
  SmallVector<GatheredUse> uses;
  Operation *point = nullptr;
  SmallVector<Operation *> users(gathered.getUsers());
  llvm::sort(users,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  users.erase(llvm::unique(users), users.end());
  for (Operation *user : users) {
    auto matmul = dyn_cast<MatmulOp>(user);
    if (!matmul)
      continue;
    for (unsigned operand : {0u, 1u}) {
      if (matmul->getOperand(operand) != gathered)
        continue;
      std::optional<GatheredUse> use =
          classifyGatheredUse(matmul, operand, dim);
      // A block of the product lives next to the whole product: worth it
      // only when that block is no larger than the gathered operand the
      // ring saves (not so for a vocabulary-sized head).
      if (!use || (!use->contraction && elementCount(matmul.getResult()) / n >
                                            elementCount(gathered)))
        continue;
      if (point && !hoistViewsBefore(matmul->getOperand(1 - operand), point))
        continue;
      if (!point)
        point = matmul;
      uses.push_back(*use);
    }
  }
  if (uses.empty())
    return;
  bool rebuild = llvm::any_of(gathered.getUses(), [&](OpOperand &operand) {
    return !llvm::any_of(uses, [&](const GatheredUse &use) {
      return use.matmul == operand.getOwner() &&
             use.operand == operand.getOperandNumber();
    });
  });
  // The rebuilt value would come too late for a use before the first step.
  if (rebuild && users.front()->isBeforeInBlock(point))
    return;

  OpBuilder builder(point);
  Location loc = gather.getLoc();
  FlatSymbolRefAttr grid = gather.getGridAttr();
  DenseI64ArrayAttr axes = gather.getGridAxesAttr();
  auto zeros = [&](Type type) {
    return ConstantOp::create(builder, loc, type, builder.getF64FloatAttr(0.0))
        .getResult();
  };
  // Destinations (placed blocks) or running sums, one per use.
  SmallVector<Value> results(uses.size());
  for (auto [use, result] : llvm::zip(uses, results))
    if (!use.contraction)
      result = zeros(use.matmul.getResult().getType());
  Value whole = rebuild ? zeros(gathered.getType()) : Value();

  Value block = gather.getInput();
  for (int64_t step = 0; step < n; ++step) {
    Value received;
    if (step + 1 < n)
      received = RingShiftStartOp::create(builder, loc, block.getType(), block,
                                          grid, axes)
                     .getResult();
    for (auto [use, result] : llvm::zip(uses, results)) {
      unsigned otherIndex = 1 - use.operand;
      Value other = use.matmul->getOperand(otherIndex);
      if (use.otherDim >= 0)
        other = RingSliceOp::create(
            builder, loc, withDimDivided(other.getType(), use.otherDim, n),
            other, grid, builder.getI64IntegerAttr(use.otherDim), axes,
            builder.getI64IntegerAttr(step));
      Operation *panel = builder.clone(*use.matmul);
      panel->setOperand(use.operand, block);
      panel->setOperand(otherIndex, other);
      Type resultType = use.matmul.getResult().getType();
      if (use.contraction) {
        panel->getResult(0).setType(resultType);
        Value product = panel->getResult(0);
        result = result
                     ? AddOp::create(builder, loc, resultType, result, product)
                           .getResult()
                     : product;
      } else {
        panel->getResult(0).setType(
            withDimDivided(resultType, use.resultDim, n));
        result = RingInsertOp::create(builder, loc, resultType, result,
                                      panel->getResult(0), grid,
                                      builder.getI64IntegerAttr(use.resultDim),
                                      axes, builder.getI64IntegerAttr(step))
                     .getResult();
      }
    }
    if (whole)
      whole = RingInsertOp::create(builder, loc, whole.getType(), whole, block,
                                   grid, builder.getI64IntegerAttr(dim), axes,
                                   builder.getI64IntegerAttr(step))
                  .getResult();
    if (received)
      block = RingShiftWaitOp::create(builder, loc, block.getType(), received,
                                      block)
                  .getResult();
  }
  for (auto [use, result] : llvm::zip(uses, results)) {
    use.matmul.getResult().replaceAllUsesWith(result);
    use.matmul->erase();
  }
  if (whole)
    gathered.replaceAllUsesWith(whole);
  gather->erase();
}

/// matmul -> reduce_scatter: step i multiplies the operand block that makes
/// the partial sum of output block r-i-1, adds the running sum received from
/// rank r-1 and passes it on; after n steps a rank holds its own block.
void TPCollectiveMatmul::decomposeScatter(ReduceScatterOp scatter) {
  const int64_t n =
      groupSize(scatter, scatter.getGridAttr(), scatter.getGridAxes());
  auto matmul = scatter.getInput().getDefiningOp<MatmulOp>();
  if (n < 2 || !matmul || !matmul.getResult().hasOneUse())
    return;
  const int64_t dim = scatter.getDim();
  const int64_t resultRank = rankOf(matmul.getResult());
  // Operand dimensions producing result dimension `dim`.
  SmallVector<std::pair<unsigned, int64_t>> cuts;
  if (dim == resultRank - 2)
    cuts.push_back({0, operandDims(matmul, 0).free});
  else if (dim == resultRank - 1)
    cuts.push_back({1, operandDims(matmul, 1).free});
  else
    for (unsigned operand : {0u, 1u}) {
      Value value = matmul->getOperand(operand);
      if (rankOf(value) > 2 &&
          cast<RankedTensorType>(value.getType()).getDimSize(dim) != 1)
        cuts.push_back({operand, dim});
    }

  OpBuilder builder(matmul);
  Location loc = scatter.getLoc();
  FlatSymbolRefAttr grid = scatter.getGridAttr();
  DenseI64ArrayAttr axes = scatter.getGridAxesAttr();
  Type blockType = scatter.getResult().getType();
  Value sum, received;
  for (int64_t step = 0; step < n; ++step) {
    SmallVector<Value> operands(matmul->getOperands());
    for (auto [operand, operandDim] : cuts)
      operands[operand] = RingSliceOp::create(
          builder, loc,
          withDimDivided(operands[operand].getType(), operandDim, n),
          operands[operand], grid, builder.getI64IntegerAttr(operandDim), axes,
          builder.getI64IntegerAttr((step + 1) % n));
    Operation *panel = builder.clone(*matmul);
    panel->setOperands(operands);
    panel->getResult(0).setType(blockType);
    sum = panel->getResult(0);
    if (received) {
      Value arrived =
          RingShiftWaitOp::create(builder, loc, blockType, received,
                                  received.getDefiningOp()->getOperand(0));
      sum = AddOp::create(builder, loc, blockType, sum, arrived);
    }
    if (step + 1 < n)
      received =
          RingShiftStartOp::create(builder, loc, blockType, sum, grid, axes)
              .getResult();
  }
  // Later passes (tp-insert-rebalance) see the reduce-scatter's result here.
  sum.getDefiningOp()->setAttr(TPDialect::RingReducedAttrHelper::getNameStr(),
                               axes);
  scatter.getResult().replaceAllUsesWith(sum);
  scatter->erase();
  matmul->erase();
}
