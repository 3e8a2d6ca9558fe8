//===- TPBase.td - tp dialect definition -------------------*- tablegen -*-===//
//
// The tp dialect describes a transformer training step at the global view:
// plain tensors with optional distribution layouts in their encoding.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DIALECT_TP_IR_TPBASE_TD
#define TPC_DIALECT_TP_IR_TPBASE_TD

include "mlir/IR/OpBase.td"

def TP_Dialect : Dialect {
  let name = "tp";
  let cppNamespace = "::mlir::tp";
  let summary = "Tensor-parallel transformer operations at the global view";
  let description = [{
    The `tp` dialect holds a transformer training step as operations on
    global (unsharded) tensors. A module-level `tp.grid` symbol names the
    device grid; a `#tp.dist` attribute in a tensor type's encoding says how
    that value is distributed over the grid (which grid axes split each
    dimension, which axes hold a pending partial sum). Every compute op
    declares its sharding rule once through `ShardingRuleOpInterface`; the
    sharding passes and the cost model read only that rule.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

#endif // TPC_DIALECT_TP_IR_TPBASE_TD
