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

/// Whether `func` is a generation program: one with KV cache arguments
/// (tp.cache), which @prefill and @decode share.
bool isGenerationFunction(func::FuncOp func);
} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TPDIALECT_H
