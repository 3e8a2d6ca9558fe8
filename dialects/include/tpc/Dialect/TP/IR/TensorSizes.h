//===- TensorSizes.h - size limits of tp tensors ----------------*- C++ -*-===//
//
// One size check for every tensor of a tp program, applied where sizes enter
// (tpc-import, the op verifiers), so that the passes, the sharding rules and
// the runtime can multiply sizes without overflow or zero-size special cases.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DIALECT_TP_IR_TENSORSIZES_H
#define TPC_DIALECT_TP_IR_TENSORSIZES_H

#include "mlir/IR/OpDefinition.h"
#include "mlir/Support/LLVM.h"

namespace mlir::tp {

/// The most elements one tensor may have: 2^40 (4 TiB of f32). Byte counts
/// of such tensors, and products of a few of their sizes, fit in int64_t.
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// The element count of `shape`, or failure when a size is not positive or
/// the count exceeds kMaxTensorElements (checked before each multiplication,
/// so it cannot overflow).
FailureOr<int64_t> checkedNumElements(ArrayRef<int64_t> shape);

/// Checks every ranked tensor operand and result type of `op` with
/// checkedNumElements; the error names the value and its type.
LogicalResult verifyTensorSizes(Operation *op);

/// Op trait of every tp op: verifyTensorSizes before the op's own verifier.
template <typename ConcreteType>
class TensorSizesChecked
    : public OpTrait::TraitBase<ConcreteType, TensorSizesChecked> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyTensorSizes(op);
  }
};

} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TENSORSIZES_H
