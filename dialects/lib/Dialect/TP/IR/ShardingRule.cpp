//===- ShardingRule.cpp - einsum-style sharding rules ---------------------===//

#include "tpc/Dialect/TP/IR/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace mlir::tp;

StringRef mlir::tp::stringifyFactorKind(FactorKind kind) {
  switch (kind) {
  case FactorKind::Parallel:
    return "parallel";
  case FactorKind::Reduction:
    return "reduction";
  case FactorKind::Stats:
    return "stats";
  case FactorKind::Replicated:
    return "replicated";
  }
  llvm_unreachable("unknown factor kind");
}

bool ShardingRule::indexesResult(int64_t factor, unsigned resultIdx) const {
  return llvm::any_of(results[resultIdx], [&](const DimFactors &dim) {
    return llvm::is_contained(dim, factor);
  });
}

bool ShardingRule::indexesOperandDim(unsigned operandIdx, int64_t dim,
                                     int64_t factor) const {
  const TensorFactors &dims = operands[operandIdx];
  if (dim < 0)
    dim += static_cast<int64_t>(dims.size());
  return dim >= 0 && dim < static_cast<int64_t>(dims.size()) &&
         llvm::is_contained(dims[dim], factor);
}

static LogicalResult verifyTensorFactors(Operation *op, StringRef what,
                                         unsigned idx, Type type,
                                         const TensorFactors &dims,
                                         ArrayRef<ShardingFactor> factors) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return op->emitOpError() << "sharding rule: " << what << " #" << idx
                             << " is not a ranked tensor";
  if (tensorType.getRank() != static_cast<int64_t>(dims.size()))
    return op->emitOpError()
           << "sharding rule: " << what << " #" << idx << " has " << dims.size()
           << " dimension entries for " << tensorType;
  for (auto [dim, dimFactors] : llvm::enumerate(dims)) {
    if (dimFactors.empty())
      continue;
    int64_t product = 1;
    for (int64_t factor : dimFactors) {
      if (factor < 0 || factor >= static_cast<int64_t>(factors.size()))
        return op->emitOpError() << "sharding rule: " << what << " #" << idx
                                 << " names unknown factor " << factor;
      int64_t size = factors[factor].size;
      if (size < 1)
        return op->emitOpError()
               << "sharding rule: factor " << factor << " has size " << size;
      std::optional<int64_t> next = llvm::checkedMul(product, size);
      if (!next)
        return op->emitOpError()
               << "sharding rule: the factors of " << what << " #" << idx
               << " dimension " << dim << " overflow";
      product = *next;
    }
    if (product != tensorType.getDimSize(dim))
      return op->emitOpError()
             << "sharding rule: factors of " << what << " #" << idx
             << " dimension " << dim << " multiply to " << product << ", but "
             << tensorType << " has size " << tensorType.getDimSize(dim);
  }
  return success();
}

LogicalResult ShardingRule::verify(Operation *op) const {
  if (operands.size() != op->getNumOperands() ||
      results.size() != op->getNumResults())
    return op->emitOpError()
           << "sharding rule describes " << operands.size() << " operands and "
           << results.size() << " results";
  for (auto [idx, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(verifyTensorFactors(op, "operand", idx, type, operands[idx],
                                   factors)))
      return failure();
  for (auto [idx, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(verifyTensorFactors(op, "result", idx, type, results[idx],
                                   factors)))
      return failure();
  return success();
}

/// Factor names i, j, k, ... z, a, ... h, then f26, f27, ...
static std::string factorName(int64_t factor) {
  static constexpr StringLiteral letters = "ijklmnopqrstuvwxyzabcdefgh";
  if (factor < static_cast<int64_t>(letters.size()))
    return std::string(1, letters[factor]);
  return "f" + std::to_string(factor);
}

static void printTensorFactors(raw_ostream &os, const TensorFactors &dims) {
  os << '[';
  llvm::interleaveComma(dims, os, [&](const DimFactors &dim) {
    if (dim.empty()) {
      os << '_';
      return;
    }
    for (int64_t factor : dim)
      os << factorName(factor);
  });
  os << ']';
}

void ShardingRule::print(raw_ostream &os) const {
  os << '(';
  llvm::interleaveComma(
      operands, os, [&](const TensorFactors &t) { printTensorFactors(os, t); });
  os << ") -> (";
  llvm::interleaveComma(
      results, os, [&](const TensorFactors &t) { printTensorFactors(os, t); });
  os << ") {";
  llvm::interleaveComma(
      llvm::seq<int64_t>(0, factors.size()), os, [&](int64_t factor) {
        os << factorName(factor) << '=' << factors[factor].size;
      });
  os << '}';
  for (FactorKind kind :
       {FactorKind::Reduction, FactorKind::Stats, FactorKind::Replicated}) {
    SmallVector<int64_t> ofKind;
    for (auto [idx, factor] : llvm::enumerate(factors))
      if (factor.kind == kind)
        ofKind.push_back(idx);
    if (ofKind.empty())
      continue;
    os << ' ' << stringifyFactorKind(kind) << "={";
    llvm::interleaveComma(ofKind, os,
                          [&](int64_t factor) { os << factorName(factor); });
    os << '}';
  }
}

std::string ShardingRule::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  print(os);
  return s;
}

int64_t ShardingRuleBuilder::addFactor(int64_t size, FactorKind kind) {
  rule.factors.push_back({size, kind});
  return rule.factors.size() - 1;
}

SmallVector<int64_t> ShardingRuleBuilder::addFactors(ArrayRef<int64_t> shape,
                                                     FactorKind kind) {
  return llvm::map_to_vector(
      shape, [&](int64_t size) { return addFactor(size, kind); });
}

TensorFactors ShardingRuleBuilder::oneFactorPerDim(ArrayRef<int64_t> perDim) {
  TensorFactors dims;
  for (int64_t factor : perDim) {
    dims.emplace_back();
    if (factor >= 0)
      dims.back().push_back(factor);
  }
  return dims;
}

ShardingRule ShardingRuleBuilder::build() {
  auto indexes = [](const TensorFactors &dims, int64_t factor) {
    return llvm::any_of(dims, [&](const DimFactors &dim) {
      return llvm::is_contained(dim, factor);
    });
  };
  for (int64_t idx = 0, e = rule.factors.size(); idx < e; ++idx) {
    ShardingFactor &factor = rule.factors[idx];
    if (factor.kind != FactorKind::Parallel)
      continue;
    bool inOperand = llvm::any_of(
        rule.operands, [&](const TensorFactors &t) { return indexes(t, idx); });
    bool inAllResults = llvm::all_of(
        rule.results, [&](const TensorFactors &t) { return indexes(t, idx); });
    if (inOperand && !inAllResults)
      factor.kind = FactorKind::Reduction;
  }
  return std::move(rule);
}
