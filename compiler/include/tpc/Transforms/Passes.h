//===- Passes.h - tpc transformation passes ---------------------*- C++ -*-===//

#ifndef TPC_TRANSFORMS_PASSES_H
#define TPC_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Transforms/PassOptions.h"

namespace mlir::tp {

#define GEN_PASS_DECL
#include "tpc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "tpc/Transforms/Passes.h.inc"

} // namespace mlir::tp

#endif // TPC_TRANSFORMS_PASSES_H
