//===- tpc-opt.cpp - tpc's mlir-opt-style driver --------------------------===//
//
// Runs any tp pass (or pipeline) alone on .mlir text, so that every stage of
// the compiler is lit-testable.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  mlir::tp::registerTPCPasses();

  mlir::DialectRegistry registry;
  mlir::tp::registerTPDialect(registry);
  registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::scf::SCFDialect, mlir::tensor::TensorDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "tpc optimizer driver: tp dialect passes and pipelines\n",
      registry));
}
