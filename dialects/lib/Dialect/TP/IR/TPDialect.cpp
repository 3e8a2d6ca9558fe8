//===- TPDialect.cpp - tp dialect -----------------------------------------===//

#include "tpc/Dialect/TP/IR/TPDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "tpc/Dialect/TP/IR/TPOps.h"

using namespace mlir;
using namespace mlir::tp;

#include "tpc/Dialect/TP/IR/TPDialect.cpp.inc"

void TPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "tpc/Dialect/TP/IR/TPOps.cpp.inc"
      >();
  registerAttributes();
}

namespace {
/// func.func signatures may carry #tp.dist layouts too; check them against
/// their grids like any tp op's types.
struct FuncDistLayoutChecker
    : public SymbolUserOpInterface::ExternalModel<FuncDistLayoutChecker,
                                                  func::FuncOp> {
  LogicalResult verifySymbolUses(Operation *op,
                                 SymbolTableCollection &symbolTables) const {
    return verifyDistLayouts(op, symbolTables);
  }
};
} // namespace

void mlir::tp::registerTPDialect(DialectRegistry &registry) {
  registry.insert<TPDialect, func::FuncDialect>();
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::FuncOp::attachInterface<FuncDistLayoutChecker>(*ctx);
  });
}
