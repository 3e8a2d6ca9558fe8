//===- TPInterfaces.h - tp op interfaces ------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPINTERFACES_H
#define TPC_DIALECT_TP_IR_TPINTERFACES_H

#include "mlir/IR/OpDefinition.h"
#include "tpc/Dialect/TP/IR/ShardingRule.h"

#include "tpc/Dialect/TP/IR/TPInterfaces.h.inc"

#endif // TPC_DIALECT_TP_IR_TPINTERFACES_H
