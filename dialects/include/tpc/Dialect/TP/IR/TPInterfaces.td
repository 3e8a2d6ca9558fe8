//===- TPInterfaces.td - tp op interfaces ------------------*- tablegen -*-===//

#ifndef TPC_DIALECT_TP_IR_TPINTERFACES_TD
#define TPC_DIALECT_TP_IR_TPINTERFACES_TD

include "mlir/IR/OpBase.td"

def TP_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op's sharding rule in einsum style: the factors of its iteration
    space, which factors index each operand and result dimension, and how
    each factor may be split (see `ShardingRule`). Every scheme and the cost
    model derive what an op needs from this rule alone.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Returns this op's sharding rule for its current types.",
      /*retTy=*/"::mlir::tp::ShardingRule",
      /*methodName=*/"getShardingRule",
      /*args=*/(ins)>,
  ];
}

#endif // TPC_DIALECT_TP_IR_TPINTERFACES_TD
