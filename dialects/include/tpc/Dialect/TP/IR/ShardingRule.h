//===- ShardingRule.h - einsum-style sharding rules -------------*- C++ -*-===//
//
// A sharding rule describes an op's iteration space as a list of factors and
// says which factors index each dimension of each operand and result, in the
// spirit of Shardy's OpShardingRule:
//
//   tp.matmul  ([i, k], [k, j]) -> ([i, j]) {i=8, j=32, k=16} reduction={k}
//
// Splitting a factor over grid axes splits every dimension it indexes. What a
// split costs follows from the factor's kind alone, so every scheme and the
// cost model read the same declaration.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DIALECT_TP_IR_SHARDINGRULE_H
#define TPC_DIALECT_TP_IR_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"
#include <string>

namespace mlir::tp {

enum class FactorKind {
  /// Splitting it splits the work; no communication inside the op.
  Parallel,
  /// Indexes an operand but not every result: a split leaves each result that
  /// lacks it a pending partial sum over the split axes.
  Reduction,
  /// The op normalises over it (layer/RMS norm, softmax, cross-entropy): a
  /// split is legal, but the op's kernel must all-reduce a small statistic
  /// over the split axes. Results stay complete.
  Stats,
  /// Must not be split (e.g. rotary pairs element i with i + D/2).
  Replicated,
};

StringRef stringifyFactorKind(FactorKind kind);

struct ShardingFactor {
  int64_t size;
  FactorKind kind;
};

/// Factors indexing one tensor dimension, major to minor. Empty when the
/// dimension cannot be split: a broadcast size-1 dimension, or a reshape
/// group without a common factorisation.
using DimFactors = SmallVector<int64_t, 2>;
/// One `DimFactors` per dimension of a tensor.
using TensorFactors = SmallVector<DimFactors, 4>;

class ShardingRule {
public:
  ArrayRef<ShardingFactor> getFactors() const { return factors; }
  ArrayRef<TensorFactors> getOperandFactors() const { return operands; }
  ArrayRef<TensorFactors> getResultFactors() const { return results; }
  FactorKind getKind(int64_t factor) const { return factors[factor].kind; }

  /// True if `factor` indexes some dimension of result `resultIdx`; a split
  /// factor that does not makes that result a pending partial sum.
  bool indexesResult(int64_t factor, unsigned resultIdx) const;

  /// True if `factor` indexes dimension `dim` (negative: from the end) of
  /// operand `operandIdx`.
  bool indexesOperandDim(unsigned operandIdx, int64_t dim,
                         int64_t factor) const;

  /// True if the factor's kind allows a split without help from the kernel:
  /// a parallel or reduction factor. What an op's kernel allows is
  /// ShardingRuleOpInterface::isSplittableFactor.
  bool hasSplittableKind(int64_t factor) const {
    FactorKind kind = getKind(factor);
    return kind == FactorKind::Parallel || kind == FactorKind::Reduction;
  }

  /// Checks the rule against `op`'s types: one entry per operand, result and
  /// dimension, factor indices in range, factor sizes positive, and each
  /// non-empty dimension's factors multiplying (without overflow) to its
  /// size. Every tp op's verification runs it, so a rule that disagrees with
  /// its op's shapes is an error on the op, not a wrong sharding.
  LogicalResult verify(Operation *op) const;

  /// Prints `([i, k], [k, j]) -> ([i, j]) {i=8, j=32, k=16} reduction={k}`.
  void print(raw_ostream &os) const;
  std::string str() const;

private:
  friend class ShardingRuleBuilder;
  SmallVector<ShardingFactor> factors;
  SmallVector<TensorFactors> operands;
  SmallVector<TensorFactors> results;
};

inline raw_ostream &operator<<(raw_ostream &os, const ShardingRule &rule) {
  rule.print(os);
  return os;
}

/// Builds a rule operand by operand, then result by result. `build()` marks
/// every parallel factor that indexes an operand but not all results as a
/// reduction factor.
class ShardingRuleBuilder {
public:
  int64_t addFactor(int64_t size, FactorKind kind = FactorKind::Parallel);
  /// A factor per dimension of `shape`, all of `kind`.
  SmallVector<int64_t> addFactors(ArrayRef<int64_t> shape,
                                  FactorKind kind = FactorKind::Parallel);

  void addOperand(TensorFactors dims) {
    rule.operands.push_back(std::move(dims));
  }
  void addResult(TensorFactors dims) {
    rule.results.push_back(std::move(dims));
  }
  /// Operand or result whose dimension i is indexed by factor `perDim[i]`
  /// alone (a negative entry: the dimension cannot be split).
  void addOperand(ArrayRef<int64_t> perDim) {
    addOperand(oneFactorPerDim(perDim));
  }
  void addResult(ArrayRef<int64_t> perDim) {
    addResult(oneFactorPerDim(perDim));
  }

  ShardingRule build();

private:
  static TensorFactors oneFactorPerDim(ArrayRef<int64_t> perDim);
  ShardingRule rule;
};

} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_SHARDINGRULE_H
