//===- TPDialect.h - tp dialect ---------------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPDIALECT_H
#define TPC_DIALECT_TP_IR_TPDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "tpc/Dialect/TP/IR/TPDialect.h.inc"

namespace mlir::tp {
/// Registers the tp dialect and its external interface models (layout checks
/// of func.func signatures).
void registerTPDialect(DialectRegistry &registry);
} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TPDIALECT_H
