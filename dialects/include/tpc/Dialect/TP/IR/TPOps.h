//===- TPOps.h - tp dialect operations --------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPOPS_H
#define TPC_DIALECT_TP_IR_TPOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "tpc/Dialect/TP/IR/TPAttrs.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Dialect/TP/IR/TPInterfaces.h"

namespace mlir::tp {
class GridOp;

/// Checks every #tp.dist layout in `op`'s operand and result types against
/// the tp.grid it names: the grid exists, axes are in range, and each split
/// dimension divides evenly or carries one size per shard.
LogicalResult verifyDistLayouts(Operation *op,
                                SymbolTableCollection &symbolTables);

/// Checks one tensor type's layout against `grid`; diagnostics go through
/// `emitError` and name `what` (e.g. "operand #1").
LogicalResult verifyDistLayout(RankedTensorType type, GridOp grid,
                               function_ref<InFlightDiagnostic()> emitError,
                               StringRef what);
} // namespace mlir::tp

#define GET_OP_CLASSES
#include "tpc/Dialect/TP/IR/TPOps.h.inc"

#endif // TPC_DIALECT_TP_IR_TPOPS_H
