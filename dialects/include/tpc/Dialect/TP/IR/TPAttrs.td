//===- TPAttrs.td - tp dialect attributes ------------------*- tablegen -*-===//

#ifndef TPC_DIALECT_TP_IR_TPATTRS_TD
#define TPC_DIALECT_TP_IR_TPATTRS_TD

include "tpc/Dialect/TP/IR/TPBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/TensorEncoding.td"

def TP_DistAttr : AttrDef<TP_Dialect, "Dist",
    [DeclareAttrInterfaceMethods<VerifiableTensorEncoding>]> {
  let mnemonic = "dist";
  let summary = "Distribution of a tensor over a tp.grid";
  let description = [{
    Carried in a ranked tensor type's encoding. For every tensor dimension it
    lists the grid axes that split it (major to minor); `partial` lists the
    grid axes over which the value is a pending sum. A value with neither is
    replicated. `sizes`, when present, gives for every dimension either no
    sizes (an even split) or one size per shard, in shard order, which must add
    up to the dimension: uneven splits are what run-time migration produces.

    ```mlir
    tensor<8x16xf32, #tp.dist<@g, [[0], []]>>                  // rows split over axis 0
    tensor<8x16xf32, #tp.dist<@g, [[], [1]], partial = [0]>>   // partial sum over axis 0
    tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[3, 5], []]>>
    ```

    Checks that need the grid (axis range, divisibility, number of sizes) run
    when a tp op using the type verifies its symbol uses.
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    ArrayRefParameter<"::mlir::DenseI64ArrayAttr", "grid axes splitting each dim">:$split,
    "::mlir::DenseI64ArrayAttr":$partial,
    ArrayRefParameter<"::mlir::DenseI64ArrayAttr", "per-dim shard sizes (empty: even)">:$sizes
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Grid axes that split dimension `dim`, major to minor.
    ::llvm::ArrayRef<int64_t> getSplitAxes(unsigned dim) const {
      return getSplit()[dim].asArrayRef();
    }
    /// Shard sizes of dimension `dim`; empty when the split is even.
    ::llvm::ArrayRef<int64_t> getDimSizes(unsigned dim) const {
      return getSizes().empty() ? ::llvm::ArrayRef<int64_t>()
                                : getSizes()[dim].asArrayRef();
    }
    bool isReplicated() const;
  }];
}

#endif // TPC_DIALECT_TP_IR_TPATTRS_TD
