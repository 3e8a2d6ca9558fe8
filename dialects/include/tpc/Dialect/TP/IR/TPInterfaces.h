//===- TPInterfaces.h - tp op interfaces ------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPINTERFACES_H
#define TPC_DIALECT_TP_IR_TPINTERFACES_H

#include "mlir/IR/OpDefinition.h"
#include "tpc/Dialect/TP/IR/ShardingRule.h"

namespace mlir::tp {
/// MixedPrecisionOpInterface's check: the op's activation operands (every
/// float tensor operand it does not read as stored) share one element type.
LogicalResult verifyActivationElementTypes(Operation *op);
} // namespace mlir::tp

#include "tpc/Dialect/TP/IR/TPInterfaces.h.inc"

#endif // TPC_DIALECT_TP_IR_TPINTERFACES_H
