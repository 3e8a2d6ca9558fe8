//===- TPOps.cpp - tp dialect operations ----------------------------------===//
//
// Verifiers name the offending operand and print the shapes involved; every
// compute op builds its sharding rule from its types with ShardingRuleBuilder.
//
//===----------------------------------------------------------------------===//

#include "tpc/Dialect/TP/IR/TPOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include <cmath>

using namespace mlir;
using namespace mlir::tp;

#include "tpc/Dialect/TP/IR/TPInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorTypeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static ArrayRef<int64_t> shapeOf(Value value) {
  return tensorTypeOf(value).getShape();
}

namespace {
/// A named operand or result, for diagnostics.
struct Named {
  StringRef name;
  Value value;
};
} // namespace

/// All `values` have the element type of the first.
static LogicalResult verifySameElementType(Operation *op,
                                           ArrayRef<Named> values) {
  Type expected = tensorTypeOf(values.front().value).getElementType();
  for (const Named &named : values.drop_front()) {
    Type actual = tensorTypeOf(named.value).getElementType();
    if (actual != expected)
      return op->emitOpError()
             << named.name << " has element type " << actual << " but "
             << values.front().name << " has " << expected;
  }
  return success();
}

/// `named` is an f32 tensor (a statistic kept in full precision).
static LogicalResult verifyF32(Operation *op, const Named &named) {
  Type actual = tensorTypeOf(named.value).getElementType();
  if (actual.isF32())
    return success();
  return op->emitOpError() << named.name << " must be f32, got " << actual;
}

/// `named` has exactly `expected` as its shape.
static LogicalResult verifyShape(Operation *op, const Named &named,
                                 ArrayRef<int64_t> expected,
                                 StringRef because) {
  if (shapeOf(named.value) == expected)
    return success();
  auto diag = op->emitOpError() << named.name << " " << named.value.getType()
                                << " should have shape [";
  llvm::interleaveComma(expected, diag);
  return diag << "] " << because;
}

static LogicalResult verifyRankAtLeast(Operation *op, const Named &named,
                                       int64_t rank, StringRef because) {
  if (tensorTypeOf(named.value).getRank() >= rank)
    return success();
  return op->emitOpError() << named.name << " " << named.value.getType()
                           << " must have rank >= " << rank << " " << because;
}

static LogicalResult verifyPositive(Operation *op, StringRef name,
                                    FloatAttr value) {
  if (value.getValueAsDouble() > 0.0)
    return success();
  return op->emitOpError() << name << " must be positive, got "
                           << value.getValueAsDouble();
}

static SmallVector<int64_t> concat(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> result(a);
  llvm::append_range(result, b);
  return result;
}

std::optional<SmallVector<int64_t>>
mlir::tp::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    result[rank - 1 - i] = std::max(da, db);
  }
  return result;
}

/// Rule of an op whose operands and results all have `shape` and are
/// indexed the same way, except scalars (rank 0), which take no factor.
/// The last dimension gets `lastKind`.
static ShardingRule sameShapeRule(Operation *op, ArrayRef<int64_t> shape,
                                  FactorKind lastKind = FactorKind::Parallel) {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> factors;
  if (!shape.empty()) {
    factors = builder.addFactors(shape.drop_back());
    factors.push_back(builder.addFactor(shape.back(), lastKind));
  }
  auto forValue = [&](Value value) -> SmallVector<int64_t> {
    if (tensorTypeOf(value).getRank() == 0)
      return {};
    return factors;
  };
  for (Value operand : op->getOperands())
    builder.addOperand(forValue(operand));
  for (Value result : op->getResults())
    builder.addResult(forValue(result));
  return builder.build();
}

//===----------------------------------------------------------------------===//
// GridOp
//===----------------------------------------------------------------------===//

LogicalResult GridOp::verify() {
  if (getShape().empty())
    return emitOpError() << "grid @" << getSymName()
                         << " needs at least one axis";
  for (auto [axis, size] : llvm::enumerate(getShape()))
    if (size < 1)
      return emitOpError() << "grid @" << getSymName() << " axis " << axis
                           << " has size " << size << "; sizes must be >= 1";
  return success();
}

int64_t GridOp::getNumRanks() const {
  int64_t ranks = 1;
  for (int64_t size : const_cast<GridOp *>(this)->getShape())
    ranks *= size;
  return ranks;
}

//===----------------------------------------------------------------------===//
// RebalancePointOp
//===----------------------------------------------------------------------===//

LogicalResult
RebalancePointOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  auto grid =
      symbolTables.lookupNearestSymbolFrom<GridOp>(*this, getGridAttr());
  if (!grid)
    return emitOpError() << "names " << getGridAttr()
                         << ", which is no tp.grid";
  int64_t axis = getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(grid.getShape().size()))
    return emitOpError() << "axis " << axis << " is not an axis of grid "
                         << getGridAttr();
  int64_t ranks = grid.getShape()[axis];
  if (getBlocks() < 1 || getBlocks() % ranks != 0)
    return emitOpError() << getBlocks() << " blocks do not divide evenly over "
                         << ranks << " ranks";
  if (getCapacity() < getBlocks() / ranks || getCapacity() > getBlocks())
    return emitOpError() << "capacity " << getCapacity()
                         << " must lie between the blocks per rank ("
                         << getBlocks() / ranks << ") and all blocks ("
                         << getBlocks() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// A cached table's slot map: one entry per row of the rank's block.
static LogicalResult verifySlotMap(Operation *op, Value slotMap) {
  if (slotMap && tensorTypeOf(slotMap).getRank() != 1)
    return op->emitOpError() << "slot_map " << slotMap.getType()
                             << " must be [rows of the block]";
  return success();
}

/// A cached table's factors: the map is indexed by the block's rows, which
/// no split may cut (its entries are slots of this rank's cache).
static void addSlotMapOperand(ShardingRuleBuilder &builder, Value slotMap) {
  if (slotMap)
    builder.addOperand(builder.addFactors(shapeOf(slotMap)));
}

LogicalResult EmbeddingOp::verify() {
  Named result{"result", getResult()};
  if (tensorTypeOf(getTable()).getRank() != 2)
    return emitOpError() << "table " << getTable().getType()
                         << " must be [vocab, hidden]";
  if (failed(verifySlotMap(*this, getSlotMap())))
    return failure();
  return verifyShape(*this, result,
                     concat(shapeOf(getIds()), shapeOf(getTable()).back()),
                     "(ids shape followed by the table's hidden size)");
}

// The table is read as stored (an f32 master needs no bf16 copy) and the
// looked-up rows are rounded into the result's type.
bool EmbeddingOp::readsOperandAsStored(unsigned index) { return index == 0; }
bool EmbeddingOp::hasFreeResultType(unsigned) { return true; }

ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRuleBuilder builder;
  ArrayRef<int64_t> tableShape = shapeOf(getTable());
  SmallVector<int64_t> tokens = builder.addFactors(shapeOf(getIds()));
  int64_t vocab = builder.addFactor(tableShape[0]);
  int64_t hidden = builder.addFactor(tableShape[1]);
  builder.addOperand({vocab, hidden});
  builder.addOperand(tokens);
  addSlotMapOperand(builder, getSlotMap());
  builder.addResult(concat(tokens, hidden));
  return builder.build();
}

LogicalResult EmbeddingGradOp::verify() {
  Named resultGrad{"result_grad", getResultGrad()};
  if (tensorTypeOf(getTableGrad()).getRank() != 2)
    return emitOpError() << "table_grad " << getTableGrad().getType()
                         << " must be [vocab, hidden]";
  if (failed(verifySlotMap(*this, getSlotMap())))
    return failure();
  return verifyShape(*this, resultGrad,
                     concat(shapeOf(getIds()), shapeOf(getTableGrad()).back()),
                     "(ids shape followed by table_grad's hidden size)");
}

// Rows accumulate in f32 (an f32 table gradient from bf16 activations).
bool EmbeddingGradOp::hasFreeResultType(unsigned) { return true; }

ShardingRule EmbeddingGradOp::getShardingRule() {
  ShardingRuleBuilder builder;
  ArrayRef<int64_t> tableShape = shapeOf(getTableGrad());
  SmallVector<int64_t> tokens = builder.addFactors(shapeOf(getIds()));
  int64_t vocab = builder.addFactor(tableShape[0]);
  int64_t hidden = builder.addFactor(tableShape[1]);
  builder.addOperand(concat(tokens, hidden));
  builder.addOperand(tokens);
  addSlotMapOperand(builder, getSlotMap());
  builder.addResult({vocab, hidden});
  return builder.build();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

namespace {
/// The matmul's dimensions as [batch..., M, K] x [batch..., K, N].
struct MatmulDims {
  ArrayRef<int64_t> lhsBatch, rhsBatch;
  int64_t m, k, lhsK, n;
};
} // namespace

static MatmulDims matmulDims(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                             bool transposeLhs, bool transposeRhs) {
  MatmulDims dims;
  dims.lhsBatch = lhs.drop_back(2);
  dims.rhsBatch = rhs.drop_back(2);
  int64_t lhsRows = lhs[lhs.size() - 2], lhsCols = lhs.back();
  int64_t rhsRows = rhs[rhs.size() - 2], rhsCols = rhs.back();
  dims.m = transposeLhs ? lhsCols : lhsRows;
  dims.lhsK = transposeLhs ? lhsRows : lhsCols;
  dims.k = transposeRhs ? rhsCols : rhsRows;
  dims.n = transposeRhs ? rhsRows : rhsCols;
  return dims;
}

static MatmulDims getMatmulDims(MatmulOp op) {
  return matmulDims(shapeOf(op.getLhs()), shapeOf(op.getRhs()),
                    op.getTransposeLhs(), op.getTransposeRhs());
}

/// The result's batch dims: the batched side's, or the NumPy broadcast of
/// both; nothing if the batch dims are incompatible.
static std::optional<SmallVector<int64_t>>
matmulBatchShape(const MatmulDims &dims) {
  if (dims.lhsBatch.empty())
    return SmallVector<int64_t>(dims.rhsBatch);
  if (dims.rhsBatch.empty())
    return SmallVector<int64_t>(dims.lhsBatch);
  if (dims.lhsBatch.size() != dims.rhsBatch.size())
    return std::nullopt;
  return broadcastShapes(dims.lhsBatch, dims.rhsBatch);
}

std::optional<SmallVector<int64_t>>
mlir::tp::inferMatmulShape(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                           bool transposeLhs, bool transposeRhs) {
  if (lhs.size() < 2 || rhs.size() < 2)
    return std::nullopt;
  MatmulDims dims = matmulDims(lhs, rhs, transposeLhs, transposeRhs);
  std::optional<SmallVector<int64_t>> batch = matmulBatchShape(dims);
  if (dims.lhsK != dims.k || !batch)
    return std::nullopt;
  return concat(*batch, {dims.m, dims.n});
}

LogicalResult MatmulOp::verify() {
  Named lhs{"lhs", getLhs()}, rhs{"rhs", getRhs()},
      result{"result", getResult()};
  if (failed(verifyRankAtLeast(*this, lhs, 2, "(a matrix or batch of them)")) ||
      failed(verifyRankAtLeast(*this, rhs, 2, "(a matrix or batch of them)")) ||
      failed(verifySameElementType(*this, {lhs, rhs})))
    return failure();
  MatmulDims dims = getMatmulDims(*this);
  if (dims.lhsK != dims.k)
    return emitOpError() << "contraction sizes differ: lhs "
                         << getLhs().getType() << " has K = " << dims.lhsK
                         << " but rhs " << getRhs().getType()
                         << " has K = " << dims.k;
  if (!std::isfinite(getAlphaAttr().getValueAsDouble()))
    return emitOpError() << "alpha must be finite";
  std::optional<SmallVector<int64_t>> batch = matmulBatchShape(dims);
  if (!batch)
    return emitOpError() << "batch dimensions differ: lhs "
                         << getLhs().getType() << " vs rhs "
                         << getRhs().getType()
                         << " (need equal sizes or 1, or no batch on one side)";
  return verifyShape(*this, result, concat(*batch, {dims.m, dims.n}),
                     "(batch..., M, N)");
}

bool MatmulOp::hasFreeResultType(unsigned) { return true; }

ShardingRule MatmulOp::getShardingRule() {
  MatmulDims dims = getMatmulDims(*this);
  ShardingRuleBuilder builder;
  SmallVector<int64_t> batchShape = *matmulBatchShape(dims);
  SmallVector<int64_t> batch = builder.addFactors(batchShape);
  int64_t m = builder.addFactor(dims.m);
  int64_t n = builder.addFactor(dims.n);
  int64_t k = builder.addFactor(dims.k);
  // A side's batch dim of size 1 under a larger result dim is broadcast and
  // takes no factor.
  auto side = [&](ArrayRef<int64_t> sideBatch, int64_t rows, int64_t cols,
                  bool transposed) {
    SmallVector<int64_t> factors;
    for (auto [idx, size] : llvm::enumerate(sideBatch))
      factors.push_back(size == batchShape[idx] ? batch[idx] : -1);
    if (transposed)
      std::swap(rows, cols);
    factors.push_back(rows);
    factors.push_back(cols);
    return factors;
  };
  builder.addOperand(side(dims.lhsBatch, m, k, getTransposeLhs()));
  builder.addOperand(side(dims.rhsBatch, k, n, getTransposeRhs()));
  builder.addResult(concat(batch, {m, n}));
  return builder.build();
}

double MatmulOp::getProductFlops() {
  MatmulDims dims = getMatmulDims(*this);
  double batch = 1;
  SmallVector<int64_t> batchShape = *matmulBatchShape(dims);
  for (int64_t size : batchShape)
    batch *= double(size);
  return 2 * batch * double(dims.m) * double(dims.n) * double(dims.k);
}

//===----------------------------------------------------------------------===//
// Products fused with what follows them (tp-fuse-products)
//===----------------------------------------------------------------------===//

namespace {
/// The sizes of a product `lhs [b..., M, K] x rhs` with a 2-D `rhs`, `[K,
/// N]` or, transposed, `[N, K]`.
struct ProductDims {
  ArrayRef<int64_t> batch; // b...
  int64_t m, k, n;
};
} // namespace

/// `lhs` times a 2-D `rhs` (as tp.linear and the fused gradients take
/// them), or a diagnostic naming `lhsName` and `rhsName`.
static FailureOr<ProductDims> verifyProduct(Operation *op, Named lhs, Named rhs,
                                            bool transposeRhs) {
  if (failed(verifyRankAtLeast(op, lhs, 2, "([b..., M, K])")))
    return failure();
  if (tensorTypeOf(rhs.value).getRank() != 2)
    return op->emitOpError()
           << rhs.name << " " << rhs.value.getType() << " must be a matrix";
  ArrayRef<int64_t> l = shapeOf(lhs.value), r = shapeOf(rhs.value);
  ProductDims dims{l.drop_back(2), l[l.size() - 2], l.back(),
                   transposeRhs ? r[0] : r[1]};
  if ((transposeRhs ? r[1] : r[0]) != dims.k)
    return op->emitOpError() << "contraction sizes differ: " << lhs.name << " "
                             << lhs.value.getType() << " and " << rhs.name
                             << " " << rhs.value.getType();
  return dims;
}

/// The factors of a product with a 2-D right side: batch..., m, n, k (the
/// contraction, a reduction), and `lhs`'s and `rhs`'s operand factors.
struct ProductFactors {
  SmallVector<int64_t> batch;
  int64_t m, n, k;
  ProductFactors(ShardingRuleBuilder &builder, const ProductDims &dims)
      : batch(builder.addFactors(dims.batch)), m(builder.addFactor(dims.m)),
        n(builder.addFactor(dims.n)), k(builder.addFactor(dims.k)) {}
  SmallVector<int64_t> lhs() const { return concat(batch, {m, k}); }
  SmallVector<int64_t> rhs(bool transposed) const {
    return transposed ? SmallVector<int64_t>{n, k} : SmallVector<int64_t>{k, n};
  }
  SmallVector<int64_t> out() const { return concat(batch, {m, n}); }
};

static FailureOr<ProductDims> linearDims(LinearOp op) {
  return verifyProduct(op, {"input", op.getInput()}, {"weight", op.getWeight()},
                       op.getTransposeRhs());
}

LogicalResult LinearOp::verify() {
  FailureOr<ProductDims> dims = linearDims(*this);
  if (failed(dims))
    return failure();
  if (failed(verifyShape(*this, {"bias", getBias()}, {dims->n},
                         "(the output features)")) ||
      failed(verifyShape(*this, {"result", getResult()},
                         concat(dims->batch, {dims->m, dims->n}),
                         "(batch..., M, N)")) ||
      failed(verifySameElementType(
          *this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  if (getPreactivation() && !getGelu())
    return emitOpError() << "has a preactivation result only when it "
                            "applies gelu";
  if (Value pre = getPreactivation();
      pre && pre.getType() != getResult().getType())
    return emitOpError() << "preactivation " << pre.getType()
                         << " must have the type of result "
                         << getResult().getType();
  return success();
}

namespace {
/// A preactivation nothing reads is not stored: the GELU is applied in place.
struct DropUnusedPreactivation : public OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LinearOp op,
                                PatternRewriter &rewriter) const override {
    Value pre = op.getPreactivation();
    if (!pre || !pre.use_empty())
      return failure();
    auto linear = LinearOp::create(
        rewriter, op.getLoc(), TypeRange{op.getResult().getType()},
        op.getInput(), op.getWeight(), op.getBias(), op.getTransposeRhsAttr(),
        op.getGeluAttr(), op.getPrecisionAttr());
    // Discardable marks carry over; per-result rebalance dims lose the
    // preactivation's entry.
    StringRef rebalanceDims = TPDialect::RebalanceDimsAttrHelper::getNameStr();
    for (NamedAttribute attr : op->getDiscardableAttrs()) {
      Attribute value = attr.getValue();
      if (auto perResult = dyn_cast<ArrayAttr>(value);
          perResult && attr.getName() == rebalanceDims)
        value = rewriter.getArrayAttr(perResult.getValue().take_front());
      linear->setDiscardableAttr(attr.getName(), value);
    }
    rewriter.replaceAllUsesWith(op.getResult(), linear.getResult());
    rewriter.eraseOp(op);
    return success();
  }
};
} // namespace

void LinearOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<DropUnusedPreactivation>(context);
}

ShardingRule LinearOp::getShardingRule() {
  ShardingRuleBuilder builder;
  ProductFactors f(builder, *linearDims(*this));
  builder.addOperand(f.lhs());
  builder.addOperand(f.rhs(getTransposeRhs()));
  builder.addOperand({f.n});
  builder.addResult(f.out());
  if (getPreactivation())
    builder.addResult(f.out());
  return builder.build();
}

/// The bias and GELU follow the whole sum: the contraction cannot split.
bool LinearOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  return rule.getKind(factor) == FactorKind::Parallel;
}

double LinearOp::getProductFlops() {
  ProductDims dims = *linearDims(*this);
  double batch = 1;
  for (int64_t size : dims.batch)
    batch *= double(size);
  return 2 * batch * double(dims.m) * double(dims.n) * double(dims.k);
}

static FailureOr<ProductDims> linearGeluGradDims(LinearGeluGradOp op) {
  return verifyProduct(op, {"lhs", op.getLhs()}, {"rhs", op.getRhs()},
                       op.getTransposeRhs());
}

LogicalResult LinearGeluGradOp::verify() {
  FailureOr<ProductDims> dims = linearGeluGradDims(*this);
  if (failed(dims))
    return failure();
  SmallVector<int64_t> out = concat(dims->batch, {dims->m, dims->n});
  if (failed(verifyShape(*this, {"preactivation", getPreactivation()}, out,
                         "(batch..., M, N)")) ||
      failed(verifyShape(*this, {"preactivation_grad", getPreactivationGrad()},
                         out, "(batch..., M, N)")) ||
      failed(verifyShape(*this, {"bias_grad", getBiasGrad()}, {dims->n},
                         "(the output features)")) ||
      failed(verifySameElementType(
          *this,
          {{"lhs", getLhs()}, {"preactivation_grad", getPreactivationGrad()}})))
    return failure();
  return success();
}

ShardingRule LinearGeluGradOp::getShardingRule() {
  ShardingRuleBuilder builder;
  ProductFactors f(builder, *linearGeluGradDims(*this));
  builder.addOperand(f.lhs());
  builder.addOperand(f.rhs(getTransposeRhs()));
  builder.addOperand(f.out());
  builder.addResult(f.out());
  builder.addResult({f.n});
  return builder.build();
}

/// The GELU gradient follows the whole product: the contraction cannot
/// split; the tokens may (the bias gradient is then a partial sum).
bool LinearGeluGradOp::isSplittableFactor(const ShardingRule &rule,
                                          int64_t factor) {
  return rule.indexesResult(factor, 0);
}
bool LinearGeluGradOp::readsOperandAsStored(unsigned) { return false; }
// The bias gradient accumulates in f32 from bf16 activations.
bool LinearGeluGradOp::hasFreeResultType(unsigned index) { return index == 1; }

double LinearGeluGradOp::getProductFlops() {
  ProductDims dims = *linearGeluGradDims(*this);
  double batch = 1;
  for (int64_t size : dims.batch)
    batch *= double(size);
  return 2 * batch * double(dims.m) * double(dims.n) * double(dims.k);
}

namespace {
/// A linear head's sizes: input [tokens..., H], weight [H, V] (or [V, H]).
struct HeadDims {
  ArrayRef<int64_t> tokens;
  int64_t hidden, vocab;
};
} // namespace

static FailureOr<HeadDims> verifyHead(Operation *op, Value input, Value weight,
                                      Value targets, bool transposeRhs,
                                      int64_t chunk) {
  Named in{"input", input};
  if (failed(verifyRankAtLeast(op, in, 1, "([tokens..., hidden])")))
    return failure();
  if (tensorTypeOf(weight).getRank() != 2)
    return op->emitOpError()
           << "weight " << weight.getType() << " must be a matrix";
  ArrayRef<int64_t> i = shapeOf(input), wt = shapeOf(weight);
  HeadDims dims{i.drop_back(), i.back(), transposeRhs ? wt[0] : wt[1]};
  if ((transposeRhs ? wt[1] : wt[0]) != dims.hidden)
    return op->emitOpError()
           << "input " << input.getType() << " and weight " << weight.getType()
           << " differ in the hidden size";
  if (failed(verifyShape(op, {"targets", targets}, dims.tokens,
                         "(input without the hidden dim)")))
    return failure();
  if (chunk < 1)
    return op->emitOpError() << "chunk must be positive, got " << chunk;
  return dims;
}

/// The head's rule: token factors index input and targets (and the input
/// gradient), the hidden factor input and weight, the vocabulary factor the
/// weight (`vocabKind`: statistics for the loss, a reduction for the input
/// gradient).
static ShardingRule headRule(Operation *op, const HeadDims &dims,
                             bool transposeRhs, FactorKind vocabKind,
                             bool gradient) {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> tokens = builder.addFactors(dims.tokens);
  int64_t hidden = builder.addFactor(dims.hidden);
  int64_t vocab = builder.addFactor(dims.vocab, vocabKind);
  SmallVector<int64_t> weight = transposeRhs
                                    ? SmallVector<int64_t>{vocab, hidden}
                                    : SmallVector<int64_t>{hidden, vocab};
  builder.addOperand(concat(tokens, hidden));
  builder.addOperand(weight);
  builder.addOperand(tokens);
  if (gradient) {
    builder.addOperand(ArrayRef<int64_t>{});
    builder.addResult(concat(tokens, hidden));
    builder.addResult(weight);
  } else {
    builder.addResult(ArrayRef<int64_t>{});
  }
  return builder.build();
}

static FailureOr<HeadDims> headDims(LinearCrossEntropyOp op) {
  return verifyHead(op, op.getInput(), op.getWeight(), op.getTargets(),
                    op.getTransposeRhs(), op.getChunk());
}
static FailureOr<HeadDims> headDims(LinearCrossEntropyGradOp op) {
  return verifyHead(op, op.getInput(), op.getWeight(), op.getTargets(),
                    op.getTransposeRhs(), op.getChunk());
}

LogicalResult LinearCrossEntropyOp::verify() {
  if (failed(headDims(*this)) ||
      failed(verifySameElementType(
          *this, {{"input", getInput()}, {"weight", getWeight()}})))
    return failure();
  return success();
}
ShardingRule LinearCrossEntropyOp::getShardingRule() {
  return headRule(*this, *headDims(*this), getTransposeRhs(), FactorKind::Stats,
                  /*gradient=*/false);
}
/// The tokens (a rescaled mean) and the vocabulary (per-rank statistics)
/// may split; the hidden size, contracted before the softmax, may not.
bool LinearCrossEntropyOp::isSplittableFactor(const ShardingRule &rule,
                                              int64_t factor) {
  if (rule.getKind(factor) == FactorKind::Stats)
    return true;
  int64_t tokenDims = tensorTypeOf(getTargets()).getRank();
  for (int64_t d = 0; d < tokenDims; ++d)
    if (rule.indexesOperandDim(2, d, factor))
      return true;
  return false;
}
double LinearCrossEntropyOp::getProductFlops() {
  HeadDims dims = *headDims(*this);
  double tokens = 1;
  for (int64_t size : dims.tokens)
    tokens *= double(size);
  return 2 * tokens * double(dims.hidden) * double(dims.vocab);
}

LogicalResult LinearCrossEntropyGradOp::verify() {
  if (failed(headDims(*this)) ||
      failed(verifySameElementType(
          *this, {{"input", getInput()}, {"weight", getWeight()}})))
    return failure();
  if (getInputGrad().getType() != getInput().getType() ||
      shapeOf(getWeightGrad()) != shapeOf(getWeight()))
    return emitOpError() << "input_grad must have the type of input and "
                            "weight_grad the shape of weight";
  return success();
}
ShardingRule LinearCrossEntropyGradOp::getShardingRule() {
  return headRule(*this, *headDims(*this), getTransposeRhs(),
                  FactorKind::Reduction, /*gradient=*/true);
}
bool LinearCrossEntropyGradOp::isSplittableFactor(const ShardingRule &rule,
                                                  int64_t factor) {
  // The hidden factor indexes both input_grad and weight_grad.
  return !(rule.indexesResult(factor, 0) && rule.indexesResult(factor, 1));
}
// The incoming loss gradient is an f32 scalar.
bool LinearCrossEntropyGradOp::readsOperandAsStored(unsigned index) {
  return index == 3;
}
bool LinearCrossEntropyGradOp::hasFreeResultType(unsigned index) {
  return index == 1;
}
double LinearCrossEntropyGradOp::getProductFlops() {
  HeadDims dims = *headDims(*this);
  double tokens = 1;
  for (int64_t size : dims.tokens)
    tokens *= double(size);
  // The logits again, then both gradients.
  return 6 * tokens * double(dims.hidden) * double(dims.vocab);
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops with broadcasting
//===----------------------------------------------------------------------===//

static LogicalResult verifyBroadcastBinary(Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1),
        result = op->getResult(0);
  if (failed(verifySameElementType(
          op, {{"lhs", lhs}, {"rhs", rhs}, {"result", result}})))
    return failure();
  std::optional<SmallVector<int64_t>> expected =
      broadcastShapes(shapeOf(lhs), shapeOf(rhs));
  if (!expected)
    return op->emitOpError() << "lhs " << lhs.getType() << " and rhs "
                             << rhs.getType() << " do not broadcast";
  return verifyShape(op, {"result", result}, *expected,
                     "(the broadcast of lhs and rhs)");
}

static ShardingRule broadcastRule(Operation *op) {
  ArrayRef<int64_t> resultShape = shapeOf(op->getResult(0));
  ShardingRuleBuilder builder;
  SmallVector<int64_t> factors = builder.addFactors(resultShape);
  for (Value operand : op->getOperands()) {
    ArrayRef<int64_t> shape = shapeOf(operand);
    size_t offset = resultShape.size() - shape.size();
    SmallVector<int64_t> perDim;
    for (auto [dim, size] : llvm::enumerate(shape))
      perDim.push_back(size == resultShape[offset + dim] ? factors[offset + dim]
                                                         : -1);
    builder.addOperand(perDim);
  }
  builder.addResult(factors);
  return builder.build();
}

#define TP_BROADCAST_BINARY_OP(OpT)                                            \
  LogicalResult OpT::verify() { return verifyBroadcastBinary(*this); }         \
  ShardingRule OpT::getShardingRule() { return broadcastRule(*this); }
TP_BROADCAST_BINARY_OP(AddOp)
TP_BROADCAST_BINARY_OP(SubOp)
TP_BROADCAST_BINARY_OP(MulOp)
TP_BROADCAST_BINARY_OP(DivOp)
#undef TP_BROADCAST_BINARY_OP

//===----------------------------------------------------------------------===//
// Elementwise unary ops and their gradients
//===----------------------------------------------------------------------===//

namespace {
/// scale(matmul(a, b), f) -> matmul(a, b){alpha * f} when the scale is the
/// product's only user: BLAS applies alpha for free, saving a pass over
/// memory (attention scores are the largest activations).
struct FoldScaleIntoMatmul : public OpRewritePattern<ScaleOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScaleOp op,
                                PatternRewriter &rewriter) const override {
    auto matmul = op.getInput().getDefiningOp<MatmulOp>();
    if (!matmul || !matmul->hasOneUse() || matmul.getType() != op.getType())
      return failure();
    double alpha = matmul.getAlphaAttr().getValueAsDouble() *
                   op.getFactorAttr().getValueAsDouble();
    rewriter.modifyOpInPlace(
        matmul, [&] { matmul.setAlphaAttr(rewriter.getF64FloatAttr(alpha)); });
    rewriter.replaceOp(op, matmul.getResult());
    return success();
  }
};

/// scale(scale(x, f), g) -> scale(x, f * g).
struct ComposeScales : public OpRewritePattern<ScaleOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScaleOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ScaleOp>();
    if (!inner)
      return failure();
    double factor = inner.getFactorAttr().getValueAsDouble() *
                    op.getFactorAttr().getValueAsDouble();
    rewriter.replaceOpWithNewOp<ScaleOp>(op, op.getType(), inner.getInput(),
                                         rewriter.getF64FloatAttr(factor));
    return success();
  }
};
} // namespace

void ScaleOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                          MLIRContext *context) {
  results.add<FoldScaleIntoMatmul, ComposeScales>(context);
}

//===----------------------------------------------------------------------===//
// ConvertOp
//===----------------------------------------------------------------------===//

LogicalResult ConvertOp::verify() {
  return verifyShape(*this, {"result", getResult()}, shapeOf(getInput()),
                     "(the shape of input)");
}

bool ConvertOp::hasFreeResultType(unsigned) { return true; }

OpFoldResult ConvertOp::fold(FoldAdaptor) {
  Type to = getType().getElementType();
  if (tensorTypeOf(getInput()).getElementType() == to)
    return getInput();
  // Narrowing back what was widened is exact: bf16 -> f32 -> bf16.
  if (auto inner = getInput().getDefiningOp<ConvertOp>()) {
    Value source = inner.getInput();
    Type middle = inner.getType().getElementType();
    if (tensorTypeOf(source).getElementType() == to &&
        middle.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth() &&
        tensorTypeOf(source) == getType())
      return source;
  }
  return {};
}

namespace {
/// `type` with `element` as its element type, its layout kept.
RankedTensorType withElementType(RankedTensorType type, Type element) {
  return RankedTensorType::get(type.getShape(), element, type.getEncoding());
}

/// convert(y) -> y retyped, when y is the only use of a result whose element
/// type its op chooses (MixedPrecisionOpInterface::hasFreeResultType): the
/// op rounds its f32 accumulator once, into the converted type, instead of
/// rounding twice. A weight gradient's product then accumulates into f32.
struct FoldConvertIntoProducer : public OpRewritePattern<ConvertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvertOp op,
                                PatternRewriter &rewriter) const override {
    auto result = dyn_cast<OpResult>(op.getInput());
    if (!result || !result.hasOneUse())
      return failure();
    Operation *producer = result.getOwner();
    auto precision = dyn_cast<MixedPrecisionOpInterface>(producer);
    if (!precision || isa<ConvertOp>(producer) ||
        !precision.hasFreeResultType(result.getResultNumber()))
      return failure();
    auto type = cast<RankedTensorType>(result.getType());
    rewriter.modifyOpInPlace(producer, [&] {
      result.setType(withElementType(type, op.getType().getElementType()));
    });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// convert(reshape|transpose(y)) -> reshape|transpose(convert(y)) when the
/// view is y's only use and y's op chooses its result type, so that
/// FoldConvertIntoProducer applies (a bias gradient's sum reshaped to the
/// bias). Views move bytes without arithmetic, so this changes no value.
struct ConvertBeforeView : public OpRewritePattern<ConvertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvertOp op,
                                PatternRewriter &rewriter) const override {
    Operation *view = op.getInput().getDefiningOp();
    if (!view || !isa<ReshapeOp, TransposeOp>(view) || !view->hasOneUse())
      return failure();
    auto source = dyn_cast<OpResult>(view->getOperand(0));
    if (!source || !source.hasOneUse())
      return failure();
    auto precision = dyn_cast<MixedPrecisionOpInterface>(source.getOwner());
    if (!precision || isa<ConvertOp>(source.getOwner()) ||
        !precision.hasFreeResultType(source.getResultNumber()))
      return failure();
    Type element = op.getType().getElementType();
    auto sourceType = cast<RankedTensorType>(source.getType());
    rewriter.setInsertionPoint(view);
    Value converted = ConvertOp::create(
        rewriter, op.getLoc(), withElementType(sourceType, element), source);
    Operation *moved = rewriter.clone(*view);
    moved->setOperand(0, converted);
    moved->getResult(0).setType(withElementType(
        cast<RankedTensorType>(view->getResult(0).getType()), element));
    rewriter.replaceOp(op, moved->getResults());
    rewriter.eraseOp(view);
    return success();
  }
};

/// A single-use result of an op that chooses its result type: a conversion
/// of it folds away (FoldConvertIntoProducer).
static bool isFoldableIntoProducer(Value value) {
  auto result = dyn_cast<OpResult>(value);
  if (!result || !result.hasOneUse() || isa<ConvertOp>(result.getOwner()))
    return false;
  auto precision = dyn_cast<MixedPrecisionOpInterface>(result.getOwner());
  return precision && precision.hasFreeResultType(result.getResultNumber());
}

/// widening convert(add(a, b)) -> add(convert(a), convert(b)) when the add
/// has no other use and one of its operands comes from an op that chooses
/// its result type: two products into one weight's gradient (a weight used
/// twice) then accumulate in the wider type, and are summed there, instead
/// of being rounded and summed in the narrower one.
struct WidenSumOperands : public OpRewritePattern<ConvertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvertOp op,
                                PatternRewriter &rewriter) const override {
    auto add = op.getInput().getDefiningOp<AddOp>();
    Type wide = op.getType().getElementType();
    if (!add || !add->hasOneUse() ||
        wide.getIntOrFloatBitWidth() <= tensorTypeOf(add.getResult())
                                            .getElementType()
                                            .getIntOrFloatBitWidth() ||
        !llvm::any_of(add->getOperands(), isFoldableIntoProducer))
      return failure();
    auto widen = [&](Value v) -> Value {
      return ConvertOp::create(rewriter, op.getLoc(),
                               withElementType(tensorTypeOf(v), wide), v);
    };
    Value lhs = widen(add.getLhs()), rhs = widen(add.getRhs());
    rewriter.replaceOpWithNewOp<AddOp>(op, op.getType(), lhs, rhs);
    rewriter.eraseOp(add);
    return success();
  }
};

/// convert(constant) -> a constant of the converted type.
struct ConvertConstant : public OpRewritePattern<ConvertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvertOp op,
                                PatternRewriter &rewriter) const override {
    auto constant = op.getInput().getDefiningOp<ConstantOp>();
    if (!constant)
      return failure();
    rewriter.replaceOpWithNewOp<ConstantOp>(op, op.getType(),
                                            constant.getValueAttr());
    return success();
  }
};
} // namespace

void ConvertOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<FoldConvertIntoProducer, ConvertBeforeView, WidenSumOperands,
              ConvertConstant>(context);
}

ShardingRule ConvertOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}

ShardingRule ScaleOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule GeluOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule SiluOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule ReluOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}

/// result_grad, input and input_grad of an elementwise op's gradient.
static LogicalResult verifyUnaryGrad(Operation *op) {
  Named resultGrad{"result_grad", op->getOperand(0)},
      input{"input", op->getOperand(1)},
      inputGrad{"input_grad", op->getResult(0)};
  if (failed(verifySameElementType(op, {input, resultGrad, inputGrad})))
    return failure();
  if (failed(verifyShape(op, resultGrad, shapeOf(input.value),
                         "(the shape of input)")))
    return failure();
  return verifyShape(op, inputGrad, shapeOf(input.value),
                     "(the shape of input)");
}

LogicalResult GeluGradOp::verify() { return verifyUnaryGrad(*this); }
LogicalResult SiluGradOp::verify() { return verifyUnaryGrad(*this); }
LogicalResult ReluGradOp::verify() { return verifyUnaryGrad(*this); }
ShardingRule GeluGradOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule SiluGradOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule ReluGradOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}

/// Elementwise ops on tensors of one shape (no broadcasting): each named
/// value has the first one's shape.
static LogicalResult verifySameShapes(Operation *op, ArrayRef<Named> values) {
  for (const Named &named : values.drop_front())
    if (failed(verifyShape(op, named, shapeOf(values.front().value),
                           "(the shape of " + values.front().name.str() + ")")))
      return failure();
  return success();
}

LogicalResult SwigluOp::verify() {
  return verifySameShapes(
      *this, {{"gate", getGate()}, {"up", getUp()}, {"result", getResult()}});
}
ShardingRule SwigluOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getGate()));
}

LogicalResult SwigluGradOp::verify() {
  return verifySameShapes(*this, {{"gate", getGate()},
                                  {"result_grad", getResultGrad()},
                                  {"up", getUp()},
                                  {"gate_grad", getGateGrad()},
                                  {"up_grad", getUpGrad()}});
}
ShardingRule SwigluGradOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getGate()));
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// Checks a normalisation over the last dimension: `input` [..., H],
/// `sameShape` values shaped like input (and typed like it), `perFeature`
/// values shaped [H] (typed like the first of them: the gain, read as
/// stored, and the gradients of the per-feature parameters).
static LogicalResult verifyNormalization(Operation *op, Named input,
                                         ArrayRef<Named> sameShape,
                                         ArrayRef<Named> perFeature,
                                         FloatAttr epsilon) {
  if (failed(verifyRankAtLeast(op, input, 1, "(normalised over its last dim)")))
    return failure();
  SmallVector<Named> activations{input};
  llvm::append_range(activations, sameShape);
  if (failed(verifySameElementType(op, activations)) ||
      failed(verifySameElementType(op, perFeature)))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(input.value);
  for (const Named &named : sameShape)
    if (failed(verifyShape(op, named, shape, "(the shape of input)")))
      return failure();
  for (const Named &named : perFeature)
    if (failed(
            verifyShape(op, named, shape.back(), "(input's last dimension)")))
      return failure();
  return verifyPositive(op, "epsilon", epsilon);
}

/// Rule of a normalisation over the last dimension: token factors index
/// every input-shaped value, the feature factor (Stats) indexes all values.
static ShardingRule normalizationRule(Operation *op, ArrayRef<int64_t> shape) {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> tokens = builder.addFactors(shape.drop_back());
  int64_t features = builder.addFactor(shape.back(), FactorKind::Stats);
  SmallVector<int64_t> full = concat(tokens, features);
  auto forValue = [&](Value value) -> SmallVector<int64_t> {
    if (tensorTypeOf(value).getRank() == 1 && shape.size() != 1)
      return {features};
    return full;
  };
  for (Value operand : op->getOperands())
    builder.addOperand(forValue(operand));
  for (Value result : op->getResults())
    builder.addResult(forValue(result));
  return builder.build();
}

LogicalResult LayerNormOp::verify() {
  return verifyNormalization(
      *this, {"input", getInput()}, {{"result", getResult()}},
      {{"gamma", getGamma()}, {"beta", getBeta()}}, getEpsilonAttr());
}
// The gain and bias are read as stored (f32 masters under mixed precision).
bool LayerNormOp::readsOperandAsStored(unsigned index) { return index != 0; }
ShardingRule LayerNormOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

/// The row-shaped values of a normalisation's gradient: the incoming and
/// outgoing gradients, and the residual stream's gradient when it adds one.
static SmallVector<Named> normGradRows(Value resultGrad, Value inputGrad,
                                       Value residualGrad) {
  SmallVector<Named> rows = {{"result_grad", resultGrad},
                             {"input_grad", inputGrad}};
  if (residualGrad)
    rows.push_back({"residual_grad", residualGrad});
  return rows;
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormalization(
      *this, {"input", getInput()},
      normGradRows(getResultGrad(), getInputGrad(), getResidualGrad()),
      {{"gamma", getGamma()},
       {"gamma_grad", getGammaGrad()},
       {"beta_grad", getBetaGrad()}},
      getEpsilonAttr());
}
bool LayerNormGradOp::readsOperandAsStored(unsigned index) {
  return index == 2;
}
ShardingRule LayerNormGradOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

LogicalResult RmsNormOp::verify() {
  return verifyNormalization(*this, {"input", getInput()},
                             {{"result", getResult()}}, {{"gamma", getGamma()}},
                             getEpsilonAttr());
}
bool RmsNormOp::readsOperandAsStored(unsigned index) { return index != 0; }
ShardingRule RmsNormOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNormalization(
      *this, {"input", getInput()},
      normGradRows(getResultGrad(), getInputGrad(), getResidualGrad()),
      {{"gamma", getGamma()}, {"gamma_grad", getGammaGrad()}},
      getEpsilonAttr());
}
bool RmsNormGradOp::readsOperandAsStored(unsigned index) { return index == 2; }
ShardingRule RmsNormGradOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

LogicalResult AddLayerNormOp::verify() {
  return verifyNormalization(
      *this, {"input", getInput()},
      {{"residual", getResidual()}, {"sum", getSum()}, {"result", getResult()}},
      {{"gamma", getGamma()}, {"beta", getBeta()}}, getEpsilonAttr());
}
bool AddLayerNormOp::readsOperandAsStored(unsigned index) { return index >= 2; }
ShardingRule AddLayerNormOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

LogicalResult AddRmsNormOp::verify() {
  return verifyNormalization(
      *this, {"input", getInput()},
      {{"residual", getResidual()}, {"sum", getSum()}, {"result", getResult()}},
      {{"gamma", getGamma()}}, getEpsilonAttr());
}
bool AddRmsNormOp::readsOperandAsStored(unsigned index) { return index == 2; }
ShardingRule AddRmsNormOp::getShardingRule() {
  return normalizationRule(*this, shapeOf(getInput()));
}

//===----------------------------------------------------------------------===//
// Softmax and rotary embedding
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  Named input{"input", getInput()};
  if (failed(verifyRankAtLeast(*this, input, 1, "(softmax over its last dim)")))
    return failure();
  if (!getCausal())
    return success();
  if (failed(verifyRankAtLeast(*this, input, 2,
                               "with causal (its last two dims are [queries, "
                               "keys])")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  if (shape[shape.size() - 2] != shape.back())
    return emitOpError() << "causal softmax needs as many queries as keys, but "
                         << "input " << getInput().getType() << " has "
                         << shape[shape.size() - 2] << " queries and "
                         << shape.back() << " keys";
  return success();
}
ShardingRule SoftmaxOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()), FactorKind::Stats);
}

LogicalResult SoftmaxGradOp::verify() {
  Named resultGrad{"result_grad", getResultGrad()},
      result{"result", getResult()}, inputGrad{"input_grad", getInputGrad()};
  if (failed(
          verifyRankAtLeast(*this, result, 1, "(softmax over its last dim)")) ||
      failed(verifySameElementType(*this, {result, resultGrad, inputGrad})) ||
      failed(verifyShape(*this, resultGrad, shapeOf(getResult()),
                         "(the shape of result)")))
    return failure();
  return verifyShape(*this, inputGrad, shapeOf(getResult()),
                     "(the shape of result)");
}
ShardingRule SoftmaxGradOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getResult()), FactorKind::Stats);
}

//===----------------------------------------------------------------------===//
// Fused attention
//===----------------------------------------------------------------------===//

namespace {
/// The sizes of an attention: query [batch..., Sq, D], key [keyBatch...,
/// Sk, D], value [keyBatch..., Sk, Dv].
struct AttentionDims {
  SmallVector<int64_t> batch, keyBatch;
  int64_t queries, keys, headDim, valueDim;
};
} // namespace

static AttentionDims getAttentionDims(Value query, Value key, Value value) {
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key), v = shapeOf(value);
  return {SmallVector<int64_t>(q.drop_back(2)),
          SmallVector<int64_t>(k.drop_back(2)),
          q[q.size() - 2],
          k[k.size() - 2],
          q.back(),
          v.back()};
}

/// Checks query, key and value against each other and the scale (see
/// tp.attention).
static LogicalResult verifyAttentionOperands(Operation *op, Value query,
                                             Value key, Value value,
                                             bool causal, FloatAttr alpha) {
  if (!std::isfinite(alpha.getValueAsDouble()))
    return op->emitOpError() << "alpha must be finite";
  Named q{"query", query}, k{"key", key}, v{"value", value};
  for (const Named &named : {q, k, v})
    if (failed(verifyRankAtLeast(op, named, 2,
                                 "([batch..., sequence, features])")))
      return failure();
  if (failed(verifySameElementType(op, {q, k, v})))
    return failure();
  ArrayRef<int64_t> qs = shapeOf(query), ks = shapeOf(key), vs = shapeOf(value);
  if (qs.size() != ks.size() || ks.size() != vs.size())
    return op->emitOpError()
           << "query " << query.getType() << ", key " << key.getType()
           << " and value " << value.getType() << " need the same rank";
  AttentionDims dims = getAttentionDims(query, key, value);
  for (auto [idx, size] : llvm::enumerate(dims.keyBatch))
    if (size != dims.batch[idx] && size != 1)
      return op->emitOpError()
             << "key " << key.getType() << " batch dim " << idx
             << " must be query's (" << dims.batch[idx] << ") or 1";
  if (vs.drop_back(1) != ks.drop_back(1))
    return op->emitOpError()
           << "value " << value.getType() << " must have key's "
           << key.getType() << " batch and sequence dims";
  if (ks.back() != dims.headDim)
    return op->emitOpError() << "query " << query.getType() << " and key "
                             << key.getType() << " differ in the last dim";
  if (causal && dims.queries != dims.keys)
    return op->emitOpError()
           << "causal attention needs as many queries as keys, got "
           << dims.queries << " and " << dims.keys;
  return success();
}

/// The result shapes of an attention: [batch..., Sq, Dv] and [batch..., Sq].
static SmallVector<int64_t> attentionResultShape(const AttentionDims &dims) {
  return concat(dims.batch, {dims.queries, dims.valueDim});
}
static SmallVector<int64_t> attentionLogSumExpShape(const AttentionDims &dims) {
  return concat(dims.batch, {dims.queries});
}

namespace {
/// The factors of an attention. Only the batch dims split freely: the
/// kernel normalises over whole key rows, contracts whole features, and a
/// causal mask compares global positions, so the sequence and feature
/// factors are replicated (the query factor splits without a mask).
struct AttentionFactors {
  AttentionFactors(ShardingRuleBuilder &builder, const AttentionDims &dims,
                   bool causal) {
    batch = builder.addFactors(dims.batch);
    queries = builder.addFactor(dims.queries, causal ? FactorKind::Replicated
                                                     : FactorKind::Parallel);
    keys = builder.addFactor(dims.keys, FactorKind::Replicated);
    headDim = builder.addFactor(dims.headDim, FactorKind::Replicated);
    valueDim = builder.addFactor(dims.valueDim, FactorKind::Replicated);
    for (auto [idx, size] : llvm::enumerate(dims.keyBatch))
      keyBatch.push_back(size == dims.batch[idx] ? batch[idx] : -1);
  }
  SmallVector<int64_t> query() const {
    return concat(batch, {queries, headDim});
  }
  SmallVector<int64_t> key() const { return concat(keyBatch, {keys, headDim}); }
  SmallVector<int64_t> value() const {
    return concat(keyBatch, {keys, valueDim});
  }
  SmallVector<int64_t> result() const {
    return concat(batch, {queries, valueDim});
  }
  SmallVector<int64_t> logSumExp() const { return concat(batch, {queries}); }
  /// A generation step's positions, [b0, Sq]: they travel with the queries,
  /// so a split of either keeps each query's global position.
  SmallVector<int64_t> positions() const { return {batch.front(), queries}; }

  SmallVector<int64_t> batch, keyBatch;
  int64_t queries, keys, headDim, valueDim;
};
} // namespace

/// Checks a generation step's `positions` against `input` ([b0, ..., S,
/// D]): it must be [b0, S].
static LogicalResult verifyPositions(Operation *op, Value positions,
                                     const Named &input) {
  if (failed(verifyRankAtLeast(op, input, 3,
                               "([batch, ..., sequence, features]) to take "
                               "positions")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(input.value);
  return verifyShape(op, {"positions", positions},
                     {shape.front(), shape[shape.size() - 2]},
                     "(first dim, sequence)");
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQuery(), getKey(), getValue(),
                                     getCausal(), getAlphaAttr())))
    return failure();
  if (Value positions = getPositions()) {
    if (getCausal())
      return emitOpError() << "takes either causal or positions, not both";
    if (failed(verifyPositions(*this, positions, {"query", getQuery()})))
      return failure();
  }
  AttentionDims dims = getAttentionDims(getQuery(), getKey(), getValue());
  if (failed(verifySameElementType(
          *this, {{"query", getQuery()}, {"result", getResult()}})) ||
      failed(verifyF32(*this, {"logsumexp", getLogsumexp()})) ||
      failed(verifyShape(*this, {"result", getResult()},
                         attentionResultShape(dims),
                         "(batch..., queries, value features)")))
    return failure();
  return verifyShape(*this, {"logsumexp", getLogsumexp()},
                     attentionLogSumExpShape(dims), "(batch..., queries)");
}

ShardingRule AttentionOp::getShardingRule() {
  ShardingRuleBuilder builder;
  AttentionFactors f(
      builder, getAttentionDims(getQuery(), getKey(), getValue()), getCausal());
  builder.addOperand(f.query());
  builder.addOperand(f.key());
  builder.addOperand(f.value());
  if (getPositions())
    builder.addOperand(f.positions());
  builder.addResult(f.result());
  builder.addResult(f.logSumExp());
  return builder.build();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOperands(*this, getQuery(), getKey(), getValue(),
                                     getCausal(), getAlphaAttr())))
    return failure();
  AttentionDims dims = getAttentionDims(getQuery(), getKey(), getValue());
  SmallVector<int64_t> resultShape = attentionResultShape(dims);
  const char *resultDims = "(the shape of tp.attention's result)";
  if (failed(verifySameElementType(*this, {{"query", getQuery()},
                                           {"result_grad", getResultGrad()},
                                           {"result", getResult()},
                                           {"query_grad", getQueryGrad()},
                                           {"key_grad", getKeyGrad()},
                                           {"value_grad", getValueGrad()}})) ||
      failed(verifyF32(*this, {"logsumexp", getLogsumexp()})) ||
      failed(verifyShape(*this, {"result_grad", getResultGrad()}, resultShape,
                         resultDims)) ||
      failed(verifyShape(*this, {"result", getResult()}, resultShape,
                         resultDims)) ||
      failed(verifyShape(*this, {"logsumexp", getLogsumexp()},
                         attentionLogSumExpShape(dims),
                         "(batch..., queries)")) ||
      failed(verifyShape(*this, {"query_grad", getQueryGrad()},
                         shapeOf(getQuery()), "(the shape of query)")) ||
      failed(verifyShape(*this, {"key_grad", getKeyGrad()}, shapeOf(getKey()),
                         "(the shape of key)")))
    return failure();
  return verifyShape(*this, {"value_grad", getValueGrad()}, shapeOf(getValue()),
                     "(the shape of value)");
}

// The log-sum-exp is an f32 statistic, whatever the activations' type.
bool AttentionGradOp::readsOperandAsStored(unsigned index) {
  return index == 5;
}

ShardingRule AttentionGradOp::getShardingRule() {
  ShardingRuleBuilder builder;
  AttentionFactors f(
      builder, getAttentionDims(getQuery(), getKey(), getValue()), getCausal());
  builder.addOperand(f.result());
  builder.addOperand(f.query());
  builder.addOperand(f.key());
  builder.addOperand(f.value());
  builder.addOperand(f.result());
  builder.addOperand(f.logSumExp());
  builder.addResult(f.query());
  // A broadcast key or value sums over the query heads sharing it, so
  // build() makes those batch factors reductions: split, the gradients are
  // partial sums.
  builder.addResult(f.key());
  builder.addResult(f.value());
  return builder.build();
}

/// 2 flops per multiply-add of the score products (query-key, D) and the
/// value products (Dv) over every (query, key) pair a head sees: about half
/// of them under a causal mask, whose kernels skip the masked blocks.
static double attentionProductFlops(const AttentionDims &dims, bool causal,
                                    double keyProducts, double valueProducts) {
  double heads = 1;
  for (int64_t size : dims.batch)
    heads *= double(size);
  double pairs = double(dims.queries) * double(dims.keys);
  if (causal)
    pairs = double(dims.queries) * double(dims.queries + 1) / 2;
  return 2 * heads * pairs *
         (keyProducts * double(dims.headDim) +
          valueProducts * double(dims.valueDim));
}

double AttentionOp::getProductFlops() {
  // scores = q k^T; result = p v.
  return attentionProductFlops(
      getAttentionDims(getQuery(), getKey(), getValue()), getCausal(), 1, 1);
}

double AttentionGradOp::getProductFlops() {
  // The scores again, dq = ds k and dk = ds^T q (three over D); dp = dy v^T
  // and dv = p^T dy (two over Dv).
  return attentionProductFlops(
      getAttentionDims(getQuery(), getKey(), getValue()), getCausal(), 3, 2);
}

/// Score matrix elements: queries x keys for every head and sequence.
static double scoreElements(const AttentionDims &dims) {
  double heads = 1;
  for (int64_t size : dims.batch)
    heads *= double(size);
  return heads * double(dims.queries) * double(dims.keys);
}

double AttentionOp::getScoreElements() {
  return scoreElements(getAttentionDims(getQuery(), getKey(), getValue()));
}

double AttentionOp::getMaterializedProductFlops() {
  return attentionProductFlops(
      getAttentionDims(getQuery(), getKey(), getValue()), false, 1, 1);
}

bool AttentionOp::isScoreGradient() { return false; }

double AttentionGradOp::getScoreElements() {
  return scoreElements(getAttentionDims(getQuery(), getKey(), getValue()));
}

double AttentionGradOp::getMaterializedProductFlops() {
  // dq, dk over D and dp, dv over Dv, from the stored probabilities.
  return attentionProductFlops(
      getAttentionDims(getQuery(), getKey(), getValue()), false, 2, 2);
}

bool AttentionGradOp::isScoreGradient() { return true; }

LogicalResult RotaryOp::verify() {
  if (failed(verifyRankAtLeast(*this, {"input", getInput()}, 2,
                               "(its last two dims are [seq, head_dim])")))
    return failure();
  if (shapeOf(getInput()).back() % 2 != 0)
    return emitOpError() << "input " << getInput().getType()
                         << " needs an even head dimension to rotate pairs";
  if (Value positions = getPositions())
    if (failed(verifyPositions(*this, positions, {"input", getInput()})))
      return failure();
  return verifyPositive(*this, "theta", getThetaAttr());
}
ShardingRule RotaryOp::getShardingRule() {
  if (!getPositions())
    return sameShapeRule(*this, shapeOf(getInput()), FactorKind::Replicated);
  // Positions [b0, S] travel with the input's first and sequence dims.
  ShardingRuleBuilder builder;
  ArrayRef<int64_t> shape = shapeOf(getInput());
  SmallVector<int64_t> factors = builder.addFactors(shape.drop_back());
  factors.push_back(builder.addFactor(shape.back(), FactorKind::Replicated));
  builder.addOperand(factors);
  builder.addOperand({factors.front(), factors[factors.size() - 2]});
  builder.addResult(factors);
  return builder.build();
}

//===----------------------------------------------------------------------===//
// KV cache
//===----------------------------------------------------------------------===//

LogicalResult CacheWriteOp::verify() {
  Named cache{"cache", getCache()}, update{"update", getUpdate()};
  if (failed(verifyRankAtLeast(*this, cache, 3,
                               "([batch, ..., cache length, features])")) ||
      failed(verifySameElementType(*this, {cache, update})))
    return failure();
  SmallVector<int64_t> expected(shapeOf(getCache()));
  expected[expected.size() - 2] =
      shapeOf(getUpdate()).size() >= 2 ? shapeOf(getUpdate()).end()[-2] : -1;
  if (failed(verifyShape(*this, update, expected,
                         "(the cache's but for the sequence dim)")))
    return failure();
  return verifyPositions(*this, getPositions(), update);
}

/// Every dim but the cache's sequence is shared with the update; the
/// positions index the cache globally, so neither sequence dim may split.
ShardingRule CacheWriteOp::getShardingRule() {
  ShardingRuleBuilder builder;
  ArrayRef<int64_t> cacheShape = shapeOf(getCache());
  const size_t seqDim = cacheShape.size() - 2;
  SmallVector<int64_t> cache =
      builder.addFactors(cacheShape.take_front(seqDim));
  cache.push_back(
      builder.addFactor(cacheShape[seqDim], FactorKind::Replicated));
  cache.push_back(builder.addFactor(cacheShape.back()));
  SmallVector<int64_t> update = cache;
  update[seqDim] =
      builder.addFactor(shapeOf(getUpdate())[seqDim], FactorKind::Replicated);
  builder.addOperand(cache);
  builder.addOperand(update);
  builder.addOperand({cache.front(), update[seqDim]});
  builder.addResult(cache);
  return builder.build();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  RankedTensorType input = tensorTypeOf(getInput()),
                   result = tensorTypeOf(getResult());
  if (failed(verifySameElementType(
          *this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  if (input.getNumElements() != result.getNumElements())
    return emitOpError() << "input " << input << " has "
                         << input.getNumElements() << " elements but result "
                         << result << " has " << result.getNumElements();
  return success();
}

/// Factors shared by a reshape's input and result. Dimensions are grouped
/// into the smallest runs with equal products; a run refines into common
/// factors when its prefix products on both sides form a divisor chain
/// ([B, S, H] -> [B*S, H] gives factors b, s, h with b and s compound in the
/// result); otherwise its dimensions cannot be split.
ShardingRule ReshapeOp::getShardingRule() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  ShardingRuleBuilder builder;
  TensorFactors inDims(in.size()), outDims(out.size());
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    // Size-1 dimensions carry no factor.
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (j < out.size() && out[j] == 1) {
      ++j;
      continue;
    }
    // Grow the shorter side until both runs have the same product.
    size_t iEnd = i + 1, jEnd = j + 1;
    int64_t inProd = in[i], outProd = out[j];
    while (inProd != outProd) {
      if (inProd < outProd)
        inProd *= in[iEnd++];
      else
        outProd *= out[jEnd++];
    }
    // Prefix products of both runs, merged: consecutive ratios are the
    // candidate factors.
    SmallVector<int64_t> cuts;
    for (int64_t p = 1, d = i; d < static_cast<int64_t>(iEnd); ++d)
      cuts.push_back(p *= in[d]);
    for (int64_t p = 1, d = j; d < static_cast<int64_t>(jEnd); ++d)
      cuts.push_back(p *= out[d]);
    llvm::sort(cuts);
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    bool chain = llvm::all_of(llvm::seq<size_t>(1, cuts.size()), [&](size_t c) {
      return cuts[c] % cuts[c - 1] == 0;
    });
    if (chain) {
      SmallVector<int64_t> factorAtCut;
      for (auto [c, cut] : llvm::enumerate(cuts))
        factorAtCut.push_back(
            builder.addFactor(c == 0 ? cut : cut / cuts[c - 1]));
      auto assign = [&](ArrayRef<int64_t> shape, size_t begin, size_t end,
                        TensorFactors &dims) {
        int64_t prefix = 1;
        for (size_t d = begin; d < end; ++d) {
          int64_t lo = prefix;
          prefix *= shape[d];
          for (auto [c, cut] : llvm::enumerate(cuts))
            if (cut > lo && cut <= prefix)
              dims[d].push_back(factorAtCut[c]);
        }
      };
      assign(in, i, iEnd, inDims);
      assign(out, j, jEnd, outDims);
    }
    i = iEnd;
    j = jEnd;
  }
  builder.addOperand(std::move(inDims));
  builder.addResult(std::move(outDims));
  return builder.build();
}

/// A slice of `big` shaped like `small` at `offsets` (slice: input is big;
/// pad: result is big).
static LogicalResult verifyWindow(Operation *op, Value big, Value small,
                                  ArrayRef<int64_t> offsets) {
  ArrayRef<int64_t> in = shapeOf(big), out = shapeOf(small);
  if (failed(verifySameElementType(
          op, {{"input", op->getOperand(0)}, {"result", op->getResult(0)}})))
    return failure();
  if (in.size() != out.size() || offsets.size() != in.size())
    return op->emitOpError()
           << "input " << op->getOperand(0).getType() << ", result "
           << op->getResult(0).getType() << " and " << offsets.size()
           << " offsets must have the same rank";
  for (auto [dim, offset] : llvm::enumerate(offsets))
    if (offset < 0 || offset + out[dim] > in[dim])
      return op->emitOpError()
             << "window [" << offset << ", " << offset + out[dim]
             << ") of dimension " << dim << " is outside " << big.getType();
  return success();
}

/// Whole dimensions share a factor; a windowed dimension cannot be split
/// (shards would hold different parts of the two sides).
static ShardingRule windowRule(Value input, Value result) {
  ArrayRef<int64_t> in = shapeOf(input), out = shapeOf(result);
  ShardingRuleBuilder builder;
  SmallVector<int64_t> inFactors, outFactors;
  for (auto [inSize, outSize] : llvm::zip_equal(in, out)) {
    if (inSize == outSize) {
      inFactors.push_back(builder.addFactor(inSize));
      outFactors.push_back(inFactors.back());
      continue;
    }
    inFactors.push_back(builder.addFactor(inSize, FactorKind::Replicated));
    outFactors.push_back(builder.addFactor(outSize, FactorKind::Replicated));
  }
  builder.addOperand(inFactors);
  builder.addResult(outFactors);
  return builder.build();
}

LogicalResult SliceOp::verify() {
  return verifyWindow(*this, getInput(), getResult(), getOffsets());
}
ShardingRule SliceOp::getShardingRule() {
  return windowRule(getInput(), getResult());
}
LogicalResult PadOp::verify() {
  return verifyWindow(*this, getResult(), getInput(), getOffsets());
}
ShardingRule PadOp::getShardingRule() {
  return windowRule(getInput(), getResult());
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> perm = getPermutation(), shape = shapeOf(getInput());
  if (failed(verifySameElementType(
          *this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  if (perm.size() != shape.size())
    return emitOpError() << "permutation has " << perm.size()
                         << " entries but input " << getInput().getType()
                         << " has rank " << shape.size();
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
      return emitOpError() << "permutation is not a permutation of [0, "
                           << perm.size() << ")";
    seen[p] = true;
    expected.push_back(shape[p]);
  }
  return verifyShape(*this, {"result", getResult()}, expected,
                     "(input dims in permutation order)");
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> factors = builder.addFactors(shapeOf(getInput()));
  builder.addOperand(factors);
  builder.addResult(llvm::map_to_vector(getPermutation(),
                                        [&](int64_t p) { return factors[p]; }));
  return builder.build();
}

/// Reductions remove `dims` (strictly increasing) from the input's shape; a
/// mean keeps its input's element type, a sum may round into another
/// (MixedPrecisionOpInterface).
static LogicalResult verifyReduction(Operation *op, Value input, Value result,
                                     ArrayRef<int64_t> dims) {
  ArrayRef<int64_t> shape = shapeOf(input);
  auto precision = cast<MixedPrecisionOpInterface>(op);
  if (!precision.hasFreeResultType(0) &&
      failed(verifySameElementType(op, {{"input", input}, {"result", result}})))
    return failure();
  for (auto [idx, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
      return op->emitOpError()
             << "reduced dimension " << dim << " is out of range for input "
             << input.getType();
    if (idx > 0 && dim <= dims[idx - 1])
      return op->emitOpError() << "reduced dimensions must be strictly "
                               << "increasing";
  }
  SmallVector<int64_t> expected;
  for (auto [dim, size] : llvm::enumerate(shape))
    if (!llvm::is_contained(dims, static_cast<int64_t>(dim)))
      expected.push_back(size);
  return verifyShape(op, {"result", result}, expected,
                     "(input without the reduced dims)");
}

static ShardingRule reductionRule(Value input, ArrayRef<int64_t> dims) {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> factors = builder.addFactors(shapeOf(input));
  builder.addOperand(factors);
  SmallVector<int64_t> kept;
  for (auto [dim, factor] : llvm::enumerate(factors))
    if (!llvm::is_contained(dims, static_cast<int64_t>(dim)))
      kept.push_back(factor);
  builder.addResult(kept);
  return builder.build();
}

LogicalResult ReduceSumOp::verify() {
  return verifyReduction(*this, getInput(), getResult(), getDims());
}
bool ReduceSumOp::hasFreeResultType(unsigned) { return true; }

ShardingRule ReduceSumOp::getShardingRule() {
  return reductionRule(getInput(), getDims());
}
LogicalResult ReduceMeanOp::verify() {
  return verifyReduction(*this, getInput(), getResult(), getDims());
}
ShardingRule ReduceMeanOp::getShardingRule() {
  return reductionRule(getInput(), getDims());
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

static LogicalResult verifyLogitsAndTargets(Operation *op, Value logits,
                                            Value targets) {
  if (failed(verifyRankAtLeast(op, {"logits", logits}, 1,
                               "(its last dim is the vocabulary)")))
    return failure();
  return verifyShape(op, {"targets", targets}, shapeOf(logits).drop_back(),
                     "(logits without the vocabulary dim)");
}

/// Token factors index logits and targets; the vocabulary factor (Stats)
/// indexes logits only.
static ShardingRule crossEntropyRule(Operation *op, Value logits) {
  ArrayRef<int64_t> shape = shapeOf(logits);
  ShardingRuleBuilder builder;
  SmallVector<int64_t> tokens = builder.addFactors(shape.drop_back());
  int64_t vocab = builder.addFactor(shape.back(), FactorKind::Stats);
  SmallVector<int64_t> full = concat(tokens, vocab);
  builder.addOperand(full);
  builder.addOperand(tokens);
  if (op->getNumOperands() == 3)
    builder.addOperand(ArrayRef<int64_t>{});
  builder.addResult(op->getNumOperands() == 3 ? full : SmallVector<int64_t>());
  return builder.build();
}

LogicalResult CrossEntropyOp::verify() {
  return verifyLogitsAndTargets(*this, getLogits(), getTargets());
}
ShardingRule CrossEntropyOp::getShardingRule() {
  return crossEntropyRule(*this, getLogits());
}

LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyLogitsAndTargets(*this, getLogits(), getTargets())))
    return failure();
  if (getLogitsGrad().getType() != getLogits().getType())
    return emitOpError() << "logits_grad " << getLogitsGrad().getType()
                         << " must have the type of logits "
                         << getLogits().getType();
  return success();
}
// The incoming loss gradient is an f32 scalar.
bool CrossEntropyGradOp::readsOperandAsStored(unsigned index) {
  return index == 2;
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  return crossEntropyRule(*this, getLogits());
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

/// What tp.adamw and tp.adamw_rows share: the gradient and moments shaped
/// as the parameter, each result typed as what it updates, the settings in
/// their ranges.
template <typename OpT> static LogicalResult verifyAdamW(OpT op) {
  Named param{"param", op.getParam()};
  ArrayRef<int64_t> shape = shapeOf(op.getParam());
  for (Named named :
       {Named{"grad", op.getGrad()}, Named{"exp_avg", op.getExpAvg()},
        Named{"exp_avg_sq", op.getExpAvgSq()}})
    if (failed(verifyShape(op, named, shape, "(the shape of param)")))
      return failure();
  if (failed(verifySameElementType(op, {param, {"grad", op.getGrad()}})))
    return failure();
  for (auto [name, in, out] :
       {std::tuple<StringRef, Value, Value>{"new_param", op.getParam(),
                                            op.getNewParam()},
        {"new_exp_avg", op.getExpAvg(), op.getNewExpAvg()},
        {"new_exp_avg_sq", op.getExpAvgSq(), op.getNewExpAvgSq()}})
    if (in.getType() != out.getType())
      return op.emitOpError()
             << name << " " << out.getType()
             << " must have the type of its input " << in.getType();
  for (auto [name, attr] :
       {std::pair<StringRef, FloatAttr>{"beta1", op.getBeta1Attr()},
        {"beta2", op.getBeta2Attr()}}) {
    double beta = attr.getValueAsDouble();
    if (beta < 0.0 || beta >= 1.0)
      return op.emitOpError() << name << " must be in [0, 1), got " << beta;
  }
  if (op.getWeightDecayAttr().getValueAsDouble() < 0.0)
    return op.emitOpError() << "weight_decay must be >= 0, got "
                            << op.getWeightDecayAttr().getValueAsDouble();
  return verifyPositive(op, "epsilon", op.getEpsilonAttr());
}

LogicalResult AdamWOp::verify() { return verifyAdamW(*this); }

ShardingRule AdamWOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getParam()));
}

/// A rows list: rank 1, its entries rows of the first dim of `of`.
static LogicalResult verifyRowsList(Operation *op, Value rows) {
  if (tensorTypeOf(rows).getRank() != 1)
    return op->emitOpError()
           << "rows " << rows.getType() << " must be a list [count]";
  return success();
}

LogicalResult AdamWRowsOp::verify() {
  if (shapeOf(getParam()).empty())
    return emitOpError() << "param " << getParam().getType()
                         << " must have rows";
  if (failed(verifyRowsList(*this, getRows())))
    return failure();
  return verifyAdamW(*this);
}

/// Elementwise along the features; the rows are this rank's, by position.
ShardingRule AdamWRowsOp::getShardingRule() {
  ShardingRuleBuilder builder;
  SmallVector<int64_t> factors = builder.addFactors(shapeOf(getParam()));
  for (int i = 0; i < 4; ++i)
    builder.addOperand(factors);
  builder.addOperand(builder.addFactors(shapeOf(getRows())));
  for (int i = 0; i < 3; ++i)
    builder.addOperand(ArrayRef<int64_t>{});
  for (int i = 0; i < 3; ++i)
    builder.addResult(factors);
  return builder.build();
}

bool AdamWRowsOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  return rule.hasSplittableKind(factor) &&
         !rule.indexesOperandDim(0, 0, factor);
}

LogicalResult NormSquaredRowsOp::verify() {
  if (tensorTypeOf(getInput()).getRank() < 1)
    return emitOpError() << "input " << getInput().getType()
                         << " must have rows";
  return verifyRowsList(*this, getRows());
}

/// As tp.norm_squared, but the rows are listed: only the features split.
ShardingRule NormSquaredRowsOp::getShardingRule() {
  ShardingRuleBuilder builder;
  builder.addOperand(builder.addFactors(shapeOf(getInput())));
  builder.addOperand(builder.addFactors(shapeOf(getRows())));
  builder.addResult(ArrayRef<int64_t>{});
  return builder.build();
}

bool NormSquaredRowsOp::isSplittableFactor(const ShardingRule &rule,
                                           int64_t factor) {
  return rule.hasSplittableKind(factor) &&
         !rule.indexesOperandDim(0, 0, factor);
}

//===----------------------------------------------------------------------===//
// Optimizer scalars, constants
//===----------------------------------------------------------------------===//

/// Every factor is summed away: a split leaves a partial sum (the global
/// norm of sharded gradients needs an all-reduce).
ShardingRule NormSquaredOp::getShardingRule() {
  ShardingRuleBuilder builder;
  builder.addOperand(builder.addFactors(shapeOf(getInput())));
  builder.addResult(ArrayRef<int64_t>{});
  return builder.build();
}

/// The hyperparameter vector is read whole.
static ShardingRule scalarOfHyperparametersRule(Value hyperparameters) {
  ShardingRuleBuilder builder;
  builder.addOperand(ArrayRef<int64_t>{});
  builder.addOperand(
      {builder.addFactor(shapeOf(hyperparameters)[0], FactorKind::Replicated)});
  builder.addResult(ArrayRef<int64_t>{});
  return builder.build();
}

static LogicalResult verifyHyperparameters(Operation *op, Value vector) {
  if (shapeOf(vector)[0] != 5)
    return op->emitOpError()
           << "hyperparameters " << vector.getType()
           << " must be [peak_lr, min_lr, warmup_steps, decay_steps, "
              "max_grad_norm]";
  return success();
}

LogicalResult LrScheduleOp::verify() {
  return verifyHyperparameters(*this, getHyperparameters());
}
ShardingRule LrScheduleOp::getShardingRule() {
  return scalarOfHyperparametersRule(getHyperparameters());
}
LogicalResult ClipScaleOp::verify() {
  return verifyHyperparameters(*this, getHyperparameters());
}
ShardingRule ClipScaleOp::getShardingRule() {
  return scalarOfHyperparametersRule(getHyperparameters());
}

ShardingRule ConstantOp::getShardingRule() {
  ShardingRuleBuilder builder;
  builder.addResult(builder.addFactors(shapeOf(getResult())));
  return builder.build();
}

//===----------------------------------------------------------------------===//
// RedistributeOp
//===----------------------------------------------------------------------===//

LogicalResult RedistributeOp::verify() {
  RankedTensorType input = tensorTypeOf(getInput()),
                   result = tensorTypeOf(getResult());
  if (input.getShape() != result.getShape() ||
      input.getElementType() != result.getElementType())
    return emitOpError() << "changes only the layout: input " << input
                         << " and result " << result
                         << " must have the same shape and element type";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {
/// A layout as plain lists: per dim the splitting grid axes, and the
/// partial axes. A type without #tp.dist is all empty (replicated).
struct LayoutParts {
  SmallVector<SmallVector<int64_t>> split;
  SmallVector<int64_t> partial;
  bool operator==(const LayoutParts &other) const {
    return split == other.split && partial == other.partial;
  }
};

LayoutParts partsOf(RankedTensorType type) {
  LayoutParts parts;
  parts.split.resize(type.getRank());
  if (DistAttr dist = getDistLayout(type)) {
    for (int64_t d = 0; d < type.getRank(); ++d)
      parts.split[d].assign(dist.getSplitAxes(d).begin(),
                            dist.getSplitAxes(d).end());
    parts.partial.assign(dist.getPartial().asArrayRef().begin(),
                         dist.getPartial().asArrayRef().end());
  }
  return parts;
}

/// Removes `axes` from the end of `list`, or fails if they are not its end.
LogicalResult dropSuffix(SmallVector<int64_t> &list, ArrayRef<int64_t> axes) {
  if (axes.size() > list.size() ||
      ArrayRef<int64_t>(list).take_back(axes.size()) != axes)
    return failure();
  list.resize(list.size() - axes.size());
  return success();
}
} // namespace

/// Checks a collective. In the global view the layouts are even and on the
/// op's grid, and the result layout is the input's transformed by `apply`,
/// which returns an empty string or why the op cannot apply. In the
/// per-rank view (after tp-partition) the types are local shards without
/// layouts; verifyCollectiveGrid checks them against the grid's shape.
static LogicalResult
verifyCollective(Operation *op, ArrayRef<int64_t> dims,
                 function_ref<std::string(LayoutParts &)> apply) {
  auto input = tensorTypeOf(op->getOperand(0));
  auto result = tensorTypeOf(op->getResult(0));
  for (int64_t dim : dims)
    if (dim < 0 || dim >= input.getRank())
      return op->emitOpError()
             << "dimension " << dim << " is out of range for " << input;
  DistAttr in = getDistLayout(input), out = getDistLayout(result);
  if (!in && !out)
    return success();
  if (input.getShape() != result.getShape() ||
      input.getElementType() != result.getElementType())
    return op->emitOpError()
           << "changes only the layout: input " << input << " and result "
           << result << " must have the same shape and element type";
  auto grid = op->getAttrOfType<FlatSymbolRefAttr>("grid");
  for (DistAttr dist : {in, out})
    if (dist && dist.getGrid() != grid)
      return op->emitOpError() << "runs over " << grid << " but a layout is on "
                               << dist.getGrid();
  for (DistAttr dist : {in, out})
    if (dist && !dist.getSizes().empty())
      return op->emitOpError() << "collectives need even splits";
  LayoutParts expected = partsOf(input);
  std::string why = apply(expected);
  if (!why.empty())
    return op->emitOpError() << why;
  if (!(expected == partsOf(result)))
    return op->emitOpError()
           << "result layout of " << result
           << " is not what this collective makes of " << input;
  return success();
}

LogicalResult mlir::tp::verifyCollectiveGrid(
    Operation *op, FlatSymbolRefAttr gridName, ArrayRef<int64_t> gridAxes,
    SymbolTableCollection &symbolTables,
    function_ref<SmallVector<int64_t>(ArrayRef<int64_t>, int64_t)>
        localResultShape) {
  auto grid = symbolTables.lookupNearestSymbolFrom<GridOp>(op, gridName);
  if (!grid)
    return op->emitOpError() << gridName << " does not name a tp.grid";
  ArrayRef<int64_t> shape = grid.getShape();
  int64_t groupSize = 1;
  SmallVector<int64_t> seen;
  for (int64_t axis : gridAxes) {
    if (axis < 0 || axis >= int64_t(shape.size()) ||
        llvm::is_contained(seen, axis))
      return op->emitOpError()
             << "grid axis " << axis << " is out of range or repeated for "
             << gridName << " of rank " << shape.size();
    seen.push_back(axis);
    groupSize *= shape[axis];
  }
  auto input = tensorTypeOf(op->getOperand(0));
  auto result = tensorTypeOf(op->getResult(0));
  if (getDistLayout(input) || getDistLayout(result))
    return success(); // the global view, checked by verifyCollective
  SmallVector<int64_t> expected = localResultShape(input.getShape(), groupSize);
  if (expected.size() != size_t(input.getRank()) ||
      ArrayRef<int64_t>(expected) != result.getShape() ||
      input.getElementType() != result.getElementType())
    return op->emitOpError()
           << "local result " << result << " does not match the local input "
           << input << " over " << groupSize << " ranks";
  return success();
}

static std::string axesString(ArrayRef<int64_t> axes) {
  std::string s = "[";
  for (auto [i, a] : llvm::enumerate(axes))
    s += (i ? ", " : "") + std::to_string(a);
  return s + "]";
}

/// Local shard shapes: `dim` multiplied (gathered) or divided (scattered,
/// split) by the group size; empty when it does not divide.
static SmallVector<int64_t> scaleDim(ArrayRef<int64_t> shape, int64_t dim,
                                     int64_t times) {
  SmallVector<int64_t> out(shape);
  out[dim] *= times;
  return out;
}
static SmallVector<int64_t> divideDim(ArrayRef<int64_t> shape, int64_t dim,
                                      int64_t by) {
  if (shape[dim] % by != 0)
    return {};
  SmallVector<int64_t> out(shape);
  out[dim] /= by;
  return out;
}

static std::string removePartial(LayoutParts &parts, ArrayRef<int64_t> axes) {
  for (int64_t axis : axes) {
    auto it = llvm::find(parts.partial, axis);
    if (it == parts.partial.end())
      return "input is not a partial sum over grid axis " +
             std::to_string(axis);
    parts.partial.erase(it);
  }
  return std::string();
}

LogicalResult AllReduceOp::verify() {
  return verifyCollective(*this, {}, [&](LayoutParts &parts) {
    return removePartial(parts, getGridAxes());
  });
}
SmallVector<int64_t> AllReduceOp::localResultShape(ArrayRef<int64_t> input,
                                                   int64_t) {
  return SmallVector<int64_t>(input);
}

LogicalResult AllGatherOp::verify() {
  int64_t dim = getDim();
  return verifyCollective(*this, {dim}, [&](LayoutParts &parts) -> std::string {
    if (failed(dropSuffix(parts.split[dim], getGridAxes())))
      return "grid axes " + axesString(getGridAxes()) +
             " are not the minor end of the axes splitting dimension " +
             std::to_string(dim);
    return "";
  });
}
SmallVector<int64_t> AllGatherOp::localResultShape(ArrayRef<int64_t> input,
                                                   int64_t ranks) {
  return scaleDim(input, getDim(), ranks);
}

LogicalResult ReduceScatterOp::verify() {
  int64_t dim = getDim();
  return verifyCollective(*this, {dim}, [&](LayoutParts &parts) {
    std::string why = removePartial(parts, getGridAxes());
    llvm::append_range(parts.split[dim], getGridAxes());
    return why;
  });
}
SmallVector<int64_t> ReduceScatterOp::localResultShape(ArrayRef<int64_t> input,
                                                       int64_t ranks) {
  return divideDim(input, getDim(), ranks);
}

LogicalResult AllToAllOp::verify() {
  int64_t source = getSourceDim(), target = getTargetDim();
  return verifyCollective(
      *this, {source, target}, [&](LayoutParts &parts) -> std::string {
        if (source == target)
          return "source and target dimensions are the same";
        if (failed(dropSuffix(parts.split[source], getGridAxes())))
          return "grid axes " + axesString(getGridAxes()) +
                 " are not the minor end of the axes splitting dimension " +
                 std::to_string(source);
        llvm::append_range(parts.split[target], getGridAxes());
        return "";
      });
}
SmallVector<int64_t> AllToAllOp::localResultShape(ArrayRef<int64_t> input,
                                                  int64_t ranks) {
  int64_t source = getSourceDim(), target = getTargetDim();
  if (source == target)
    return {};
  SmallVector<int64_t> out = divideDim(input, target, ranks);
  return out.empty() ? out : scaleDim(out, source, ranks);
}

// (A grid axis the input already uses cannot appear twice in the result's
// layout: the #tp.dist verifier rejects that.)
LogicalResult LocalSplitOp::verify() {
  int64_t dim = getDim();
  return verifyCollective(*this, {dim}, [&](LayoutParts &parts) {
    llvm::append_range(parts.split[dim], getGridAxes());
    return std::string();
  });
}
SmallVector<int64_t> LocalSplitOp::localResultShape(ArrayRef<int64_t> input,
                                                    int64_t ranks) {
  return divideDim(input, getDim(), ranks);
}

// Collectives change layouts, not values: every factor passes through.
ShardingRule AllReduceOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule AllGatherOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule ReduceScatterOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule AllToAllOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule LocalSplitOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}

ShardingRule RedistributeOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}

OpFoldResult RedistributeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

namespace {
/// redistribute(redistribute(x)) -> redistribute(x): only the final layout
/// matters.
struct ComposeRedistributes : public OpRewritePattern<RedistributeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RedistributeOp op,
                                PatternRewriter &rewriter) const override {
    auto producer = op.getInput().getDefiningOp<RedistributeOp>();
    if (!producer)
      return failure();
    rewriter.modifyOpInPlace(
        op, [&] { op.getInputMutable().assign(producer.getInput()); });
    return success();
  }
};
} // namespace

void RedistributeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                 MLIRContext *context) {
  results.add<ComposeRedistributes>(context);
}

namespace {
/// local_split(all_reduce(x)) over the same grid axes, the all-reduce used
/// only there -> reduce_scatter(x): each rank needs only its slice of the
/// sum.
struct FuseAllReduceThenSplit : public OpRewritePattern<LocalSplitOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LocalSplitOp op,
                                PatternRewriter &rewriter) const override {
    auto allReduce = op.getInput().getDefiningOp<AllReduceOp>();
    if (!allReduce || !allReduce->hasOneUse() ||
        allReduce.getGrid() != op.getGrid() ||
        allReduce.getGridAxes() != op.getGridAxes())
      return failure();
    rewriter.replaceOpWithNewOp<ReduceScatterOp>(
        op, op.getType(), allReduce.getInput(), op.getGridAttr(),
        op.getDimAttr(), op.getGridAxesAttr());
    rewriter.eraseOp(allReduce);
    return success();
  }
};
} // namespace

void LocalSplitOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                               MLIRContext *context) {
  results.add<FuseAllReduceThenSplit>(context);
}

//===----------------------------------------------------------------------===//
// Results in operand storage (StorageAliasOpInterface)
//===----------------------------------------------------------------------===//

std::optional<unsigned> ReshapeOp::getStorageOperand(unsigned) { return 0; }
bool ReshapeOp::alwaysSharesStorage() { return true; }

// (param, grad, exp_avg, exp_avg_sq, ...) -> (param, exp_avg, exp_avg_sq).
// The optimizer reads the f32 masters, gradients and moments as stored.
bool AdamWOp::readsOperandAsStored(unsigned) { return true; }

std::optional<unsigned> AdamWOp::getStorageOperand(unsigned result) {
  static constexpr unsigned kUpdated[] = {0, 2, 3};
  return kUpdated[result];
}
bool AdamWOp::alwaysSharesStorage() { return false; }
bool AdamWRowsOp::readsOperandAsStored(unsigned) { return true; }
// The listed rows are written in place; the others stay (they must).
std::optional<unsigned> AdamWRowsOp::getStorageOperand(unsigned result) {
  static constexpr unsigned kUpdated[] = {0, 2, 3};
  return kUpdated[result];
}
bool AdamWRowsOp::alwaysSharesStorage() { return true; }
// The cache is state the runtime keeps between runs: written in place.
std::optional<unsigned> CacheWriteOp::getStorageOperand(unsigned) { return 0; }
bool CacheWriteOp::alwaysSharesStorage() { return true; }

// A ring wait's result is the block its start received; a ring insert
// updates its destination in place.
std::optional<unsigned> RingShiftWaitOp::getStorageOperand(unsigned) {
  return 0;
}
bool RingShiftWaitOp::alwaysSharesStorage() { return true; }
std::optional<unsigned> RingInsertOp::getStorageOperand(unsigned) { return 0; }
bool RingInsertOp::alwaysSharesStorage() { return true; }

//===----------------------------------------------------------------------===//
// Ring steps of collective matmuls
//===----------------------------------------------------------------------===//

/// Ring ops exist only in the per-rank program (tp-collective-matmul runs
/// after tp-partition).
static LogicalResult verifyPerRank(Operation *op) {
  for (Type type :
       llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
    if (getDistLayout(type))
      return op->emitOpError() << "belongs to the per-rank program; " << type
                               << " carries a distribution layout";
  return success();
}

LogicalResult RingShiftStartOp::verify() {
  if (failed(verifyPerRank(*this)))
    return failure();
  Value result = getResult();
  auto wait = result.hasOneUse()
                  ? dyn_cast<RingShiftWaitOp>(*result.getUsers().begin())
                  : RingShiftWaitOp();
  if (!wait || wait.getReceived() != result)
    return emitOpError() << "must have exactly one use, as the received "
                            "block of a tp.ring_shift_wait";
  return success();
}

LogicalResult
RingShiftStartOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return verifyCollectiveGrid(*this, getGridAttr(), getGridAxes(), symbolTables,
                              [](ArrayRef<int64_t> input, int64_t) {
                                return SmallVector<int64_t>(input);
                              });
}

LogicalResult RingShiftWaitOp::verify() {
  if (failed(verifyPerRank(*this)))
    return failure();
  auto start = getReceived().getDefiningOp<RingShiftStartOp>();
  if (!start || start.getInput() != getSent())
    return emitOpError() << "must wait for a tp.ring_shift_start of its "
                            "second operand";
  return success();
}

LogicalResult RingShiftWaitOp::verifySymbolUses(SymbolTableCollection &) {
  return success();
}

/// `dim` in range of `shape`.
static LogicalResult verifyRingDim(Operation *op, int64_t dim,
                                   RankedTensorType type) {
  if (dim < 0 || dim >= type.getRank())
    return op->emitOpError()
           << "dimension " << dim << " is out of range for " << type;
  return success();
}

LogicalResult RingSliceOp::verify() {
  if (failed(verifyPerRank(*this)))
    return failure();
  return verifyRingDim(*this, getDim(), tensorTypeOf(getInput()));
}

LogicalResult
RingSliceOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return verifyCollectiveGrid(*this, getGridAttr(), getGridAxes(), symbolTables,
                              [&](ArrayRef<int64_t> input, int64_t ranks) {
                                return divideDim(input, getDim(), ranks);
                              });
}

// A shift moves a whole block between ranks and keeps its shape: every
// factor passes through (per-rank analyses, such as tp-insert-rebalance's,
// follow a dimension through the ring; NeedsUniformShards still marks the
// exchange).
ShardingRule RingShiftStartOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule RingShiftWaitOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getResult()));
}

/// Dimensions other than the ring's are shared; the ring dimension holds a
/// different block on each side, so it cannot be split.
ShardingRule RingSliceOp::getShardingRule() {
  return windowRule(getInput(), getResult());
}

LogicalResult RingInsertOp::verify() {
  if (failed(verifyPerRank(*this)))
    return failure();
  if (!getDest().hasOneUse())
    return emitOpError() << "updates its destination in place, which may "
                            "have no other use";
  return verifyRingDim(*this, getDim(), tensorTypeOf(getDest()));
}

LogicalResult
RingInsertOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  // dest -> result keeps the shape; the block is dest's dimension over n.
  SmallVector<int64_t> expected;
  if (failed(verifyCollectiveGrid(*this, getGridAttr(), getGridAxes(),
                                  symbolTables,
                                  [&](ArrayRef<int64_t> dest, int64_t ranks) {
                                    expected = divideDim(dest, getDim(), ranks);
                                    return SmallVector<int64_t>(dest);
                                  })))
    return failure();
  RankedTensorType block = tensorTypeOf(getBlock());
  if (expected.empty() || ArrayRef<int64_t>(expected) != block.getShape() ||
      block.getElementType() != tensorTypeOf(getDest()).getElementType())
    return emitOpError() << "block " << block
                         << " is not one of the equal blocks of dimension "
                         << getDim() << " of " << getDest().getType();
  return success();
}

ShardingRule RingInsertOp::getShardingRule() {
  ArrayRef<int64_t> dest = shapeOf(getDest());
  ShardingRuleBuilder builder;
  SmallVector<int64_t> destFactors, blockFactors;
  for (int64_t d = 0, e = dest.size(); d < e; ++d) {
    if (d != static_cast<int64_t>(getDim())) {
      destFactors.push_back(builder.addFactor(dest[d]));
      blockFactors.push_back(destFactors.back());
      continue;
    }
    destFactors.push_back(builder.addFactor(dest[d], FactorKind::Replicated));
    blockFactors.push_back(
        builder.addFactor(shapeOf(getBlock())[d], FactorKind::Replicated));
  }
  builder.addOperand(destFactors);
  builder.addOperand(blockFactors);
  builder.addResult(destFactors);
  return builder.build();
}

//===----------------------------------------------------------------------===//
// Pipeline transfers
//===----------------------------------------------------------------------===//

/// A transfer's grid axis names an axis of its grid and its peer a
/// coordinate along it.
static LogicalResult verifyTransferGrid(Operation *op,
                                        FlatSymbolRefAttr gridName,
                                        int64_t axis, int64_t peer,
                                        SymbolTableCollection &symbolTables) {
  auto grid = symbolTables.lookupNearestSymbolFrom<GridOp>(op, gridName);
  if (!grid)
    return op->emitOpError() << gridName << " does not name a tp.grid";
  ArrayRef<int64_t> shape = grid.getShape();
  if (axis < 0 || axis >= int64_t(shape.size()))
    return op->emitOpError() << "grid axis " << axis << " is out of range for "
                             << gridName << " of rank " << shape.size();
  if (peer < 0 || peer >= shape[axis])
    return op->emitOpError() << "peer " << peer << " is out of range for grid "
                             << "axis " << axis << " of size " << shape[axis];
  return success();
}

static LogicalResult verifyTag(Operation *op, int64_t tag) {
  if (tag < 0)
    return op->emitOpError() << "tag must be non-negative, got " << tag;
  return success();
}

LogicalResult SendStartOp::verify() {
  if (failed(verifyPerRank(*this)) || failed(verifyTag(*this, getTag())))
    return failure();
  for (Operation *user : getInput().getUsers())
    if (auto wait = dyn_cast<SendWaitOp>(user))
      if (wait.getPeer() == getPeer() && wait.getTag() == getTag() &&
          wait.getGridAxis() == getGridAxis() &&
          wait->getBlock() == (*this)->getBlock() &&
          (*this)->isBeforeInBlock(wait))
        return success();
  return emitOpError() << "needs a later tp.send_wait of the same value, peer "
                          "and tag";
}

LogicalResult
SendStartOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return verifyTransferGrid(*this, getGridAttr(), getGridAxis(), getPeer(),
                            symbolTables);
}

LogicalResult SendWaitOp::verify() {
  if (failed(verifyPerRank(*this)) || failed(verifyTag(*this, getTag())))
    return failure();
  for (Operation *user : getInput().getUsers())
    if (auto start = dyn_cast<SendStartOp>(user))
      if (start.getPeer() == getPeer() && start.getTag() == getTag() &&
          start.getGridAxis() == getGridAxis())
        return success();
  return emitOpError() << "must wait for a tp.send_start of the same value, "
                          "peer and tag";
}

LogicalResult
SendWaitOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return verifyTransferGrid(*this, getGridAttr(), getGridAxis(), getPeer(),
                            symbolTables);
}

LogicalResult RecvStartOp::verify() {
  if (failed(verifyPerRank(*this)) || failed(verifyTag(*this, getTag())))
    return failure();
  Value result = getResult();
  if (!result.hasOneUse() || !isa<RecvWaitOp>(*result.getUsers().begin()))
    return emitOpError() << "must have exactly one use, a tp.recv_wait";
  return success();
}

LogicalResult
RecvStartOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return verifyTransferGrid(*this, getGridAttr(), getGridAxis(), getPeer(),
                            symbolTables);
}

LogicalResult RecvWaitOp::verify() {
  if (failed(verifyPerRank(*this)))
    return failure();
  if (!getReceived().getDefiningOp<RecvStartOp>())
    return emitOpError() << "must wait for a tp.recv_start";
  return success();
}

LogicalResult RecvWaitOp::verifySymbolUses(SymbolTableCollection &) {
  return success();
}

// A transfer moves a rank's shard whole: every factor passes through, so
// per-rank analyses follow a dimension across stages.
ShardingRule SendStartOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule SendWaitOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getInput()));
}
ShardingRule RecvStartOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getResult()));
}
ShardingRule RecvWaitOp::getShardingRule() {
  return sameShapeRule(*this, shapeOf(getResult()));
}

// The received value is the storage its start filled.
std::optional<unsigned> RecvWaitOp::getStorageOperand(unsigned) { return 0; }
bool RecvWaitOp::alwaysSharesStorage() { return true; }

//===----------------------------------------------------------------------===//
// Vocabulary-parallel forms (VocabParallelOpInterface)
//===----------------------------------------------------------------------===//

/// Megatron's VocabParallelEmbedding: the table's rows are split over some
/// grid axes and each rank looks up only the ids in its block, leaving zeros
/// elsewhere, so the result is a partial sum over exactly those axes.
FailureOr<SmallVector<int64_t>> EmbeddingOp::getVocabParallelAxes() {
  Type table = getTable().getType(), result = getResult().getType();
  SmallVector<int64_t> vocab = splitAxesOf(table, 0);
  if (vocab.empty())
    return vocab;
  DistAttr resultDist = getDistLayout(result);
  SmallVector<int64_t> partial =
      resultDist ? SmallVector<int64_t>(resultDist.getPartial().asArrayRef())
                 : SmallVector<int64_t>();
  SmallVector<int64_t> sortedVocab = vocab;
  llvm::sort(sortedVocab);
  llvm::sort(partial);
  int64_t resultRank = cast<RankedTensorType>(result).getRank();
  // The ids may be split along the tokens (a batch split), the result
  // alike; each rank then looks up its tokens in its block.
  bool tokensAsIds = true;
  for (int64_t d = 0; d + 1 < resultRank; ++d)
    tokensAsIds &= splitAxesOf(result, d) == splitAxesOf(getIds().getType(), d);
  if (partial != sortedVocab || isPartialLayout(getIds().getType()) ||
      !tokensAsIds ||
      splitAxesOf(table, 1) != splitAxesOf(result, resultRank - 1))
    return emitOpError() << "tp-partition: a vocabulary-split embedding needs "
                            "a result split along the tokens as the ids are "
                            "and partial over exactly the table's vocabulary "
                            "axes";
  return vocab;
}

/// The table gradient's rows are split and each rank scatters only the ids
/// in its block.
FailureOr<SmallVector<int64_t>> EmbeddingGradOp::getVocabParallelAxes() {
  Type result = getResult().getType();
  SmallVector<int64_t> vocab = splitAxesOf(result, 0);
  if (vocab.empty())
    return vocab;
  // Ids and output gradient may be split alike along the tokens (each
  // rank's table gradient then a partial sum over those axes).
  Type resultGrad = getResultGrad().getType();
  int64_t gradRank = cast<RankedTensorType>(resultGrad).getRank();
  bool tokensAsIds = true;
  for (int64_t d = 0; d + 1 < gradRank; ++d)
    tokensAsIds &=
        splitAxesOf(resultGrad, d) == splitAxesOf(getIds().getType(), d);
  if (!tokensAsIds || isPartialLayout(resultGrad) ||
      isPartialLayout(getIds().getType()) ||
      splitAxesOf(resultGrad, gradRank - 1) != splitAxesOf(result, 1))
    return emitOpError() << "tp-partition: a vocabulary-split embedding_grad "
                            "needs ids and output gradient split alike along "
                            "the tokens and the gradient's features split as "
                            "the table's";
  return vocab;
}

/// Megatron's vocab_parallel_cross_entropy, or its gradient: the logits'
/// last dim is split over some grid axes; each rank reduces its columns to
/// per-token statistics and one all-gather of them gives every rank the
/// whole loss (or the softmax of its own columns). `wholeResult` says
/// whether the result is laid out as expected (a whole loss, or the logits'
/// layout for the gradient).
static FailureOr<SmallVector<int64_t>> crossEntropyVocabAxes(Operation *op,
                                                             Value logits,
                                                             Value targets,
                                                             bool wholeResult) {
  int64_t rank = cast<RankedTensorType>(logits.getType()).getRank();
  SmallVector<int64_t> vocab = splitAxesOf(logits.getType(), rank - 1);
  if (vocab.empty())
    return vocab;
  // The tokens may be split (a batch split) as the targets are.
  bool tokensAsTargets = true;
  for (int64_t d = 0; d + 1 < rank; ++d)
    tokensAsTargets &=
        splitAxesOf(logits.getType(), d) == splitAxesOf(targets.getType(), d);
  if (!tokensAsTargets || isPartialLayout(logits.getType()) ||
      isPartialLayout(targets.getType()) || !wholeResult)
    return op->emitOpError()
           << "tp-partition: a vocabulary-split " << op->getName()
           << " needs logits split along the tokens as the targets are, and "
              "a result laid out like the loss or the logits";
  return vocab;
}

/// The grid axes splitting the logits' token dims.
static SmallVector<int64_t> tokenAxesOf(Value logits) {
  int64_t rank = cast<RankedTensorType>(logits.getType()).getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d + 1 < rank; ++d)
    llvm::append_range(axes, splitAxesOf(logits.getType(), d));
  return axes;
}

FailureOr<SmallVector<int64_t>> CrossEntropyOp::getVocabParallelAxes() {
  // The loss is whole, or partial over the axes splitting the tokens.
  DistAttr loss = getDistLayout(getResult().getType());
  SmallVector<int64_t> partial =
      loss ? SmallVector<int64_t>(loss.getPartial().asArrayRef())
           : SmallVector<int64_t>();
  SmallVector<int64_t> tokens = tokenAxesOf(getLogits());
  llvm::sort(partial);
  llvm::sort(tokens);
  return crossEntropyVocabAxes(*this, getLogits(), getTargets(),
                               partial == tokens);
}

FailureOr<SmallVector<int64_t>> CrossEntropyGradOp::getVocabParallelAxes() {
  return crossEntropyVocabAxes(*this, getLogits(), getTargets(),
                               getResult().getType() == getLogits().getType());
}

/// The per-token statistics: max, sum of exponentials, target logit.
static constexpr int64_t kCrossEntropyStatsPerToken = 3;

//===----------------------------------------------------------------------===//
// Means over split tokens (TokenMeanOpInterface)
//===----------------------------------------------------------------------===//

static int64_t tokenShardsOf(Value logits, ArrayRef<int64_t> gridShape) {
  int64_t shards = 1;
  for (int64_t axis : tokenAxesOf(logits))
    shards *= gridShape[axis];
  return shards;
}

int64_t CrossEntropyOp::getTokenShards(ArrayRef<int64_t> gridShape) {
  return tokenShardsOf(getLogits(), gridShape);
}

void CrossEntropyOp::scaleTokenMean(OpBuilder &builder, double factor) {
  builder.setInsertionPointAfter(*this);
  auto scale = ScaleOp::create(builder, getLoc(), getResult(),
                               builder.getF64FloatAttr(factor));
  getResult().replaceAllUsesExcept(scale.getResult(), scale);
}

int64_t CrossEntropyGradOp::getTokenShards(ArrayRef<int64_t> gridShape) {
  return tokenShardsOf(getLogits(), gridShape);
}

void CrossEntropyGradOp::scaleTokenMean(OpBuilder &builder, double factor) {
  builder.setInsertionPoint(*this);
  auto scale = ScaleOp::create(builder, getLoc(), getLossGrad(),
                               builder.getF64FloatAttr(factor));
  getLossGradMutable().assign(scale.getResult());
}

/// A fused head's vocabulary axes: those splitting the weight's vocabulary
/// dim (the per-rank columns whose statistics the kernel gathers).
static FailureOr<SmallVector<int64_t>>
headVocabAxes(Operation *op, Value weight, bool transposeRhs) {
  if (isPartialLayout(weight.getType()))
    return op->emitOpError() << "tp-partition: a partial weight";
  return splitAxesOf(weight.getType(), transposeRhs ? 0 : 1);
}
FailureOr<SmallVector<int64_t>> LinearCrossEntropyOp::getVocabParallelAxes() {
  return headVocabAxes(*this, getWeight(), getTransposeRhs());
}
FailureOr<SmallVector<int64_t>>
LinearCrossEntropyGradOp::getVocabParallelAxes() {
  return headVocabAxes(*this, getWeight(), getTransposeRhs());
}
SmallVector<int64_t> LinearCrossEntropyOp::getKernelGathers() {
  return {kCrossEntropyStatsPerToken};
}
SmallVector<int64_t> LinearCrossEntropyGradOp::getKernelGathers() {
  return {kCrossEntropyStatsPerToken};
}

/// The grid axes splitting a head input's token dims.
static int64_t headTokenShards(Value input, ArrayRef<int64_t> gridShape) {
  int64_t rank = cast<RankedTensorType>(input.getType()).getRank(), shards = 1;
  for (int64_t d = 0; d + 1 < rank; ++d)
    for (int64_t axis : splitAxesOf(input.getType(), d))
      shards *= gridShape[axis];
  return shards;
}
int64_t LinearCrossEntropyOp::getTokenShards(ArrayRef<int64_t> gridShape) {
  return headTokenShards(getInput(), gridShape);
}
void LinearCrossEntropyOp::scaleTokenMean(OpBuilder &builder, double factor) {
  builder.setInsertionPointAfter(*this);
  auto scale = ScaleOp::create(builder, getLoc(), getResult(),
                               builder.getF64FloatAttr(factor));
  getResult().replaceAllUsesExcept(scale.getResult(), scale);
}
int64_t LinearCrossEntropyGradOp::getTokenShards(ArrayRef<int64_t> gridShape) {
  return headTokenShards(getInput(), gridShape);
}
void LinearCrossEntropyGradOp::scaleTokenMean(OpBuilder &builder,
                                              double factor) {
  builder.setInsertionPoint(*this);
  auto scale = ScaleOp::create(builder, getLoc(), getLossGrad(),
                               builder.getF64FloatAttr(factor));
  getLossGradMutable().assign(scale.getResult());
}

SmallVector<int64_t> CrossEntropyOp::getKernelGathers() {
  return {kCrossEntropyStatsPerToken};
}

SmallVector<int64_t> CrossEntropyGradOp::getKernelGathers() {
  return {kCrossEntropyStatsPerToken};
}

//===----------------------------------------------------------------------===//
// Normalisations with split features (SplitStatisticsOpInterface)
//===----------------------------------------------------------------------===//

/// The axes splitting the features of a normalisation with row-shaped
/// values `rows` and gamma-shaped operands `gammas` and results
/// `gammaGrads`: the rows split alike on every dim and none partial, the
/// gamma-shaped values split along the features as the rows are (gamma
/// gradients may be partial over the axes splitting the rows).
static FailureOr<SmallVector<int64_t>>
normFeatureAxes(Operation *op, ArrayRef<Value> rows, ArrayRef<Value> gammas,
                ArrayRef<Value> gammaGrads) {
  Type first = rows.front().getType();
  int64_t rank = cast<RankedTensorType>(first).getRank();
  SmallVector<int64_t> axes = splitAxesOf(first, rank - 1);
  if (axes.empty())
    return axes;
  bool alike = true;
  for (Value row : rows) {
    alike &= !isPartialLayout(row.getType());
    for (int64_t d = 0; d < rank; ++d)
      alike &= splitAxesOf(row.getType(), d) == splitAxesOf(first, d);
  }
  for (Value gamma : gammas)
    alike &= !isPartialLayout(gamma.getType()) &&
             splitAxesOf(gamma.getType(), 0) == axes;
  for (Value grad : gammaGrads)
    alike &= splitAxesOf(grad.getType(), 0) == axes;
  if (!alike)
    return op->emitOpError()
           << "tp-partition: a feature-split " << op->getName()
           << " needs its row-shaped values split alike (none partial) and "
              "its gamma-shaped values split along the features as the rows "
              "are";
  return axes;
}

FailureOr<SmallVector<int64_t>> LayerNormOp::getFeatureAxes() {
  return normFeatureAxes(*this, {getInput(), getResult()},
                         {getGamma(), getBeta()}, {});
}
FailureOr<SmallVector<int64_t>> LayerNormGradOp::getFeatureAxes() {
  return normFeatureAxes(*this, {getResultGrad(), getInput(), getInputGrad()},
                         {getGamma()}, {getGammaGrad(), getBetaGrad()});
}
FailureOr<SmallVector<int64_t>> RmsNormOp::getFeatureAxes() {
  return normFeatureAxes(*this, {getInput(), getResult()}, {getGamma()}, {});
}
FailureOr<SmallVector<int64_t>> RmsNormGradOp::getFeatureAxes() {
  return normFeatureAxes(*this, {getResultGrad(), getInput(), getInputGrad()},
                         {getGamma()}, {getGammaGrad()});
}

FailureOr<SmallVector<int64_t>> AddLayerNormOp::getFeatureAxes() {
  return normFeatureAxes(*this,
                         {getInput(), getResidual(), getSum(), getResult()},
                         {getGamma(), getBeta()}, {});
}
FailureOr<SmallVector<int64_t>> AddRmsNormOp::getFeatureAxes() {
  return normFeatureAxes(*this,
                         {getInput(), getResidual(), getSum(), getResult()},
                         {getGamma()}, {});
}

// Per row: the forward gathers each block's {mean, sum of squared
// deviations} (layer norm) or {sum of squares} (RMS norm); the layer norm's
// gradient gathers those statistics again, then {sum of g, sum of g (x -
// mean)}; the RMS norm's gradient gathers {sum of squares, sum of g x} once.
SmallVector<int64_t> LayerNormOp::getKernelGathers() { return {2}; }
SmallVector<int64_t> LayerNormGradOp::getKernelGathers() { return {2, 2}; }
SmallVector<int64_t> RmsNormOp::getKernelGathers() { return {1}; }
SmallVector<int64_t> RmsNormGradOp::getKernelGathers() { return {2}; }
// The residual add is local: the norm's gathers.
SmallVector<int64_t> AddLayerNormOp::getKernelGathers() { return {2}; }
SmallVector<int64_t> AddRmsNormOp::getKernelGathers() { return {1}; }

#define GET_OP_CLASSES
#include "tpc/Dialect/TP/IR/TPOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Which factors kernels can split
//===----------------------------------------------------------------------===//

/// A cross-entropy's kernel combines per-rank softmax statistics over the
/// vocabulary (logits' last dim), and a normalisation's those of its split
/// features (SplitStatisticsOpInterface); split tokens of a cross-entropy
/// are rescaled to the global mean by tp-partition (TokenMeanOpInterface).
/// Only replicated factors stay whole.
static bool isSplittableUnlessReplicated(const ShardingRule &rule,
                                         int64_t factor) {
  return rule.getKind(factor) != FactorKind::Replicated;
}

bool CrossEntropyOp::isSplittableFactor(const ShardingRule &rule,
                                        int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool CrossEntropyGradOp::isSplittableFactor(const ShardingRule &rule,
                                            int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool LayerNormOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool LayerNormGradOp::isSplittableFactor(const ShardingRule &rule,
                                         int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool RmsNormOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool RmsNormGradOp::isSplittableFactor(const ShardingRule &rule,
                                       int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool AddLayerNormOp::isSplittableFactor(const ShardingRule &rule,
                                        int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}
bool AddRmsNormOp::isSplittableFactor(const ShardingRule &rule,
                                      int64_t factor) {
  return isSplittableUnlessReplicated(rule, factor);
}

/// A causal mask compares global query and key positions.
bool SoftmaxOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  if (!rule.hasSplittableKind(factor))
    return false;
  return !getCausal() || (!rule.indexesOperandDim(0, -1, factor) &&
                          !rule.indexesOperandDim(0, -2, factor));
}

/// The rotation angle depends on the global position along dim -2, unless
/// positions say it.
bool RotaryOp::isSplittableFactor(const ShardingRule &rule, int64_t factor) {
  return rule.hasSplittableKind(factor) &&
         (getPositions() || !rule.indexesOperandDim(0, -2, factor));
}

/// The kernel divides by its local count, not the global one.
bool ReduceMeanOp::isSplittableFactor(const ShardingRule &, int64_t) {
  return false;
}

//===----------------------------------------------------------------------===//
// Result type inference
//===----------------------------------------------------------------------===//

bool mlir::tp::haveSameShapesAndFloatTypes(TypeRange l, TypeRange r) {
  if (l.size() != r.size())
    return false;
  for (auto [a, b] : llvm::zip_equal(l, r)) {
    auto ta = dyn_cast<RankedTensorType>(a), tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getShape() != tb.getShape() ||
        !isa<FloatType>(ta.getElementType()) ||
        !isa<FloatType>(tb.getElementType()))
      return false;
  }
  return true;
}

LogicalResult mlir::tp::verifyActivationElementTypes(Operation *op) {
  auto precision = cast<MixedPrecisionOpInterface>(op);
  Type storage;
  unsigned first = 0;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type || !isa<FloatType>(type.getElementType()) ||
        precision.readsOperandAsStored(operand.getOperandNumber()))
      continue;
    if (!storage) {
      storage = type.getElementType();
      first = operand.getOperandNumber();
      continue;
    }
    if (type.getElementType() != storage)
      return op->emitOpError()
             << "operand #" << operand.getOperandNumber()
             << " has element type " << type.getElementType()
             << " but operand #" << first << " has " << storage
             << " (activations share one element type; tp.convert changes "
                "it)";
  }
  return success();
}

bool mlir::tp::haveSameShapesAndElementTypes(TypeRange l, TypeRange r) {
  if (l.size() != r.size())
    return false;
  for (auto [a, b] : llvm::zip_equal(l, r)) {
    auto ta = dyn_cast<RankedTensorType>(a), tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getShape() != tb.getShape() ||
        ta.getElementType() != tb.getElementType())
      return false;
  }
  return true;
}

namespace {
/// Collects inferred result types; `fail` reports why inference cannot
/// apply when the caller asked for diagnostics (a builder given operands
/// that do not fit; the verifiers give the precise message).
class ResultTypes {
public:
  ResultTypes(std::optional<Location> location, SmallVectorImpl<Type> &types,
              StringRef opName)
      : location(location), types(types), opName(opName) {}

  /// The operand's ranked type, or null after a diagnostic.
  RankedTensorType operand(Value value, StringRef name) {
    auto type =
        dyn_cast_or_null<RankedTensorType>(value ? value.getType() : Type());
    if (!type)
      (void)emitOptionalError(location, opName, ": ", name,
                              " is not a ranked tensor");
    return type;
  }
  LogicalResult add(ArrayRef<int64_t> shape, Type elementType) {
    types.push_back(RankedTensorType::get(shape, elementType));
    return success();
  }
  /// A result shaped and typed like `type`, without its layout.
  LogicalResult addLike(RankedTensorType type) {
    return add(type.getShape(), type.getElementType());
  }
  LogicalResult addF32Scalar(MLIRContext *context) {
    return add({}, Float32Type::get(context));
  }
  LogicalResult fail(const Twine &why) {
    return emitOptionalError(location, opName,
                             ": cannot infer the result: ", why);
  }

private:
  std::optional<Location> location;
  SmallVectorImpl<Type> &types;
  StringRef opName;
};
} // namespace

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  RankedTensorType table = results.operand(adaptor.getTable(), "table");
  RankedTensorType ids = results.operand(adaptor.getIds(), "ids");
  if (!table || !ids)
    return failure();
  if (table.getRank() != 2)
    return results.fail("the table must be [vocab, hidden]");
  return results.add(concat(ids.getShape(), table.getShape().back()),
                     table.getElementType());
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  RankedTensorType lhs = results.operand(adaptor.getLhs(), "lhs");
  RankedTensorType rhs = results.operand(adaptor.getRhs(), "rhs");
  if (!lhs || !rhs)
    return failure();
  std::optional<SmallVector<int64_t>> shape =
      inferMatmulShape(lhs.getShape(), rhs.getShape(),
                       adaptor.getTransposeLhs(), adaptor.getTransposeRhs());
  if (!shape)
    return results.fail("the operand shapes do not fit a matrix product");
  return results.add(*shape, lhs.getElementType());
}

/// Attention's operands as AttentionDims, or a diagnostic when they do not
/// have the ranks it needs.
static std::optional<AttentionDims>
inferAttentionDims(ResultTypes &results, Value query, Value key, Value value) {
  RankedTensorType q = results.operand(query, "query");
  RankedTensorType k = results.operand(key, "key");
  RankedTensorType v = results.operand(value, "value");
  if (!q || !k || !v)
    return std::nullopt;
  if (q.getRank() < 2 || k.getRank() != q.getRank() ||
      v.getRank() != q.getRank()) {
    (void)results.fail("query, key and value need one rank of at least 2");
    return std::nullopt;
  }
  return getAttentionDims(query, key, value);
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  std::optional<AttentionDims> dims = inferAttentionDims(
      results, adaptor.getQuery(), adaptor.getKey(), adaptor.getValue());
  if (!dims)
    return failure();
  Type element = tensorTypeOf(adaptor.getQuery()).getElementType();
  (void)results.add(attentionResultShape(*dims), element);
  return results.add(attentionLogSumExpShape(*dims),
                     Float32Type::get(element.getContext()));
}

LogicalResult AttentionGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  if (!inferAttentionDims(results, adaptor.getQuery(), adaptor.getKey(),
                          adaptor.getValue()))
    return failure();
  (void)results.addLike(tensorTypeOf(adaptor.getQuery()));
  (void)results.addLike(tensorTypeOf(adaptor.getKey()));
  return results.addLike(tensorTypeOf(adaptor.getValue()));
}

template <typename OpT>
static LogicalResult inferBroadcastBinary(std::optional<Location> location,
                                          typename OpT::Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, OpT::getOperationName());
  RankedTensorType lhs = results.operand(adaptor.getLhs(), "lhs");
  RankedTensorType rhs = results.operand(adaptor.getRhs(), "rhs");
  if (!lhs || !rhs)
    return failure();
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(lhs.getShape(), rhs.getShape());
  if (!shape)
    return results.fail("the operand shapes do not broadcast");
  return results.add(*shape, lhs.getElementType());
}

#define TP_INFER_BROADCAST_BINARY(OpT)                                         \
  LogicalResult OpT::inferReturnTypes(                                         \
      MLIRContext *, std::optional<Location> location, Adaptor adaptor,        \
      SmallVectorImpl<Type> &types) {                                          \
    return inferBroadcastBinary<OpT>(location, adaptor, types);                \
  }
TP_INFER_BROADCAST_BINARY(AddOp)
TP_INFER_BROADCAST_BINARY(SubOp)
TP_INFER_BROADCAST_BINARY(MulOp)
TP_INFER_BROADCAST_BINARY(DivOp)
#undef TP_INFER_BROADCAST_BINARY

/// Results shaped like the given operands, in order (an elementwise op's
/// gradient is its input's shape; a normalisation's gradients are input-
/// and gamma-shaped).
template <typename OpT>
static LogicalResult inferLike(std::optional<Location> location,
                               SmallVectorImpl<Type> &types,
                               ArrayRef<std::pair<Value, StringRef>> likes) {
  ResultTypes results(location, types, OpT::getOperationName());
  for (auto [value, name] : likes) {
    RankedTensorType type = results.operand(value, name);
    if (!type)
      return failure();
    (void)results.addLike(type);
  }
  return success();
}

LogicalResult GeluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  return inferLike<GeluGradOp>(location, types,
                               {{adaptor.getInput(), "input"}});
}

LogicalResult SiluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  return inferLike<SiluGradOp>(location, types,
                               {{adaptor.getInput(), "input"}});
}

LogicalResult ReluGradOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  return inferLike<ReluGradOp>(location, types,
                               {{adaptor.getInput(), "input"}});
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferLike<LayerNormOp>(location, types,
                                {{adaptor.getInput(), "input"}});
}

LogicalResult LayerNormGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferLike<LayerNormGradOp>(location, types,
                                    {{adaptor.getInput(), "input"},
                                     {adaptor.getGamma(), "gamma"},
                                     {adaptor.getGamma(), "gamma"}});
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferLike<RmsNormOp>(location, types, {{adaptor.getInput(), "input"}});
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> location,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferLike<RmsNormGradOp>(
      location, types,
      {{adaptor.getInput(), "input"}, {adaptor.getGamma(), "gamma"}});
}

LogicalResult LinearGeluGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  RankedTensorType pre =
      results.operand(adaptor.getPreactivation(), "preactivation");
  if (!pre)
    return failure();
  (void)results.addLike(pre);
  return results.add(pre.getShape().back(), pre.getElementType());
}

LogicalResult
LinearCrossEntropyOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location> location,
                                       Adaptor, SmallVectorImpl<Type> &types) {
  return ResultTypes(location, types, getOperationName()).addF32Scalar(context);
}

LogicalResult LinearCrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferLike<LinearCrossEntropyGradOp>(
      location, types,
      {{adaptor.getInput(), "input"}, {adaptor.getWeight(), "weight"}});
}

LogicalResult SwigluOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferLike<SwigluOp>(location, types, {{adaptor.getGate(), "gate"}});
}

LogicalResult SwigluGradOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferLike<SwigluGradOp>(
      location, types, {{adaptor.getGate(), "gate"}, {adaptor.getUp(), "up"}});
}

LogicalResult AddLayerNormOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> location,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  return inferLike<AddLayerNormOp>(
      location, types,
      {{adaptor.getInput(), "input"}, {adaptor.getInput(), "input"}});
}

LogicalResult AddRmsNormOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferLike<AddRmsNormOp>(
      location, types,
      {{adaptor.getInput(), "input"}, {adaptor.getInput(), "input"}});
}

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> location,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferLike<SoftmaxGradOp>(location, types,
                                  {{adaptor.getResult(), "result"}});
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferLike<CrossEntropyGradOp>(location, types,
                                       {{adaptor.getLogits(), "logits"}});
}

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  return inferLike<AdamWOp>(location, types,
                            {{adaptor.getParam(), "param"},
                             {adaptor.getExpAvg(), "exp_avg"},
                             {adaptor.getExpAvgSq(), "exp_avg_sq"}});
}

LogicalResult AdamWRowsOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferLike<AdamWRowsOp>(location, types,
                                {{adaptor.getParam(), "param"},
                                 {adaptor.getExpAvg(), "exp_avg"},
                                 {adaptor.getExpAvgSq(), "exp_avg_sq"}});
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, getOperationName());
  RankedTensorType input = results.operand(adaptor.getInput(), "input");
  if (!input)
    return failure();
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  SmallVector<int64_t> shape;
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (perm.size() != size_t(input.getRank()) || p < 0 ||
        p >= input.getRank() || seen[p])
      return results.fail("the permutation does not permute the input dims");
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  return results.add(shape, input.getElementType());
}

/// The input's shape without `dims`.
template <typename OpT>
static LogicalResult inferReduction(std::optional<Location> location,
                                    typename OpT::Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  ResultTypes results(location, types, OpT::getOperationName());
  RankedTensorType input = results.operand(adaptor.getInput(), "input");
  if (!input)
    return failure();
  ArrayRef<int64_t> dims = adaptor.getDims();
  if (llvm::any_of(dims,
                   [&](int64_t d) { return d < 0 || d >= input.getRank(); }))
    return results.fail("a reduced dimension is out of range");
  SmallVector<int64_t> shape;
  for (auto [dim, size] : llvm::enumerate(input.getShape()))
    if (!llvm::is_contained(dims, static_cast<int64_t>(dim)))
      shape.push_back(size);
  return results.add(shape, input.getElementType());
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferReduction<ReduceSumOp>(location, adaptor, types);
}

LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferReduction<ReduceMeanOp>(location, adaptor, types);
}

/// Ops whose result is an f32 scalar whatever their operands.
#define TP_INFER_F32_SCALAR(OpT)                                               \
  LogicalResult OpT::inferReturnTypes(MLIRContext *context,                    \
                                      std::optional<Location> location,        \
                                      Adaptor, SmallVectorImpl<Type> &types) { \
    return ResultTypes(location, types, getOperationName())                    \
        .addF32Scalar(context);                                                \
  }
TP_INFER_F32_SCALAR(CrossEntropyOp)
TP_INFER_F32_SCALAR(NormSquaredOp)
TP_INFER_F32_SCALAR(NormSquaredRowsOp)
TP_INFER_F32_SCALAR(LrScheduleOp)
TP_INFER_F32_SCALAR(ClipScaleOp)
#undef TP_INFER_F32_SCALAR
