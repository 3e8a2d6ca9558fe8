//===- PlanEmitter.h - tp module -> flatbuffers plan ------------*- C++ -*-===//

#ifndef TPC_TARGET_PLAN_PLANEMITTER_H
#define TPC_TARGET_PLAN_PLANEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::tp {

/// Plan format version written by this compiler (runtime/schema/plan.fbs).
inline constexpr uint32_t kPlanVersionMajor = 1;
inline constexpr uint32_t kPlanVersionMinor = 15;

/// Serialises every function of `module` (after tp-plan-memory) into one
/// plan: parameters shared by name, one program per function. Emits an error
/// on the offending op and fails if something cannot be represented.
LogicalResult translateModuleToPlan(ModuleOp module, llvm::raw_ostream &os);

} // namespace mlir::tp

#endif // TPC_TARGET_PLAN_PLANEMITTER_H
