//===- TPOps.h - tp dialect operations --------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPOPS_H
#define TPC_DIALECT_TP_IR_TPOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "tpc/Dialect/TP/IR/TPAttrs.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Dialect/TP/IR/TPInterfaces.h"
#include "tpc/Dialect/TP/IR/TPTraits.h"
#include "tpc/Dialect/TP/IR/TensorSizes.h"

namespace mlir::tp {
class GridOp;

/// Checks every #tp.dist layout in `op`'s operand and result types against
/// the tp.grid it names: the grid exists, axes are in range, and each split
/// dimension divides evenly or carries one size per shard.
LogicalResult verifyDistLayouts(Operation *op,
                                SymbolTableCollection &symbolTables);

/// Checks a collective's grid: `grid` names a tp.grid, `gridAxes` are
/// distinct axes of it, and in the per-rank view (no layouts) the result
/// shard is `localResultShape(input shard, group size)`.
LogicalResult verifyCollectiveGrid(
    Operation *op, FlatSymbolRefAttr grid, ArrayRef<int64_t> gridAxes,
    SymbolTableCollection &symbolTables,
    function_ref<SmallVector<int64_t>(ArrayRef<int64_t>, int64_t)>
        localResultShape);

/// Checks one tensor type's layout against `grid`; diagnostics go through
/// `emitError` and name `what` (e.g. "operand #1").
LogicalResult verifyDistLayout(RankedTensorType type, GridOp grid,
                               function_ref<InFlightDiagnostic()> emitError,
                               StringRef what);
/// True if `l` and `r` pair up with equal shapes and element types; their
/// #tp.dist encodings may differ (see TP_InferResultShapes in TPOps.td).
bool haveSameShapesAndElementTypes(TypeRange l, TypeRange r);
/// True if `l` and `r` pair up with equal shapes and float element types,
/// which may differ (see TP_InferShapesFreeElementType in TPOps.td).
bool haveSameShapesAndFloatTypes(TypeRange l, TypeRange r);

/// NumPy broadcast of two shapes (aligned on trailing dims; 1 broadcasts), or
/// nothing if they are incompatible. The result shape of tp.add and friends.
std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                    ArrayRef<int64_t> b);

/// The result shape of tp.matmul on operands of these shapes, or nothing if
/// they do not fit (see tp.matmul's description).
std::optional<SmallVector<int64_t>> inferMatmulShape(ArrayRef<int64_t> lhs,
                                                     ArrayRef<int64_t> rhs,
                                                     bool transposeLhs,
                                                     bool transposeRhs);
} // namespace mlir::tp

#define GET_OP_CLASSES
#include "tpc/Dialect/TP/IR/TPOps.h.inc"

#endif // TPC_DIALECT_TP_IR_TPOPS_H
