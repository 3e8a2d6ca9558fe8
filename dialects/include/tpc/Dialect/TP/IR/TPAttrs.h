//===- TPAttrs.h - tp dialect attributes ------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPATTRS_H
#define TPC_DIALECT_TP_IR_TPATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TensorEncoding.h"

#define GET_ATTRDEF_CLASSES
#include "tpc/Dialect/TP/IR/TPAttrs.h.inc"

namespace mlir::tp {
/// The #tp.dist layout of `type`, or null when it has none.
DistAttr getDistLayout(Type type);
} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TPATTRS_H
