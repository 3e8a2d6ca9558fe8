//===- Passes.td - tpc transformation passes ---------------*- tablegen -*-===//

#ifndef TPC_TRANSFORMS_PASSES_TD
#define TPC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TPPrintShardingRules : Pass<"tp-print-sharding-rules"> {
  let summary = "Report every tp op's sharding rule as a remark";
  let description = [{
    For each op implementing `ShardingRuleOpInterface`, checks the rule
    against the op's types and emits a remark with it, e.g.

    ```
    remark: sharding rule: ([i, k], [k, j]) -> ([i, j]) {i=8, j=32, k=16} reduction={k}
    ```

    Factors are named i, j, k, ... in the order the op declares them; a
    dimension written `_` cannot be split; compound dimensions list their
    factors major to minor (`[ij, k]`). Fails if a rule is inconsistent with
    the op's types.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

#endif // TPC_TRANSFORMS_PASSES_TD
