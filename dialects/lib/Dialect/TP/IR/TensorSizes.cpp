//===- TensorSizes.cpp - size limits of tp tensors ------------------------===//

#include "tpc/Dialect/TP/IR/TensorSizes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

FailureOr<int64_t> mlir::tp::checkedNumElements(ArrayRef<int64_t> shape) {
  int64_t elements = 1;
  for (int64_t size : shape) {
    if (size < 1 || size > kMaxTensorElements / elements)
      return failure();
    elements *= size;
  }
  return elements;
}

LogicalResult mlir::tp::verifyTensorSizes(Operation *op) {
  auto check = [&](Type type, StringRef kind, unsigned index) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || succeeded(checkedNumElements(tensor.getShape())))
      return success();
    InFlightDiagnostic diag = op->emitOpError()
                              << kind << " #" << index << " of type " << type;
    if (llvm::any_of(tensor.getShape(), [](int64_t size) { return size < 1; }))
      return diag << " has a size that is not positive";
    return diag << " has more than 2^40 = " << kMaxTensorElements
                << " elements, the limit of one tensor";
  };
  for (auto [index, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(check(type, "operand", index)))
      return failure();
  for (auto [index, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(check(type, "result", index)))
      return failure();
  return success();
}
