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
/// Whether `type`'s layout splits some dimension.
bool isSplitLayout(Type type);
/// Whether `type`'s layout holds a pending partial sum.
bool isPartialLayout(Type type);
/// The grid axes splitting dimension `dim` of `type` (none without a layout).
SmallVector<int64_t> splitAxesOf(Type type, int64_t dim);

/// An even #tp.dist layout as plain lists, for passes that edit layouts: per
/// dimension the grid axes splitting it (major to minor), and the axes of a
/// pending partial sum. Empty lists everywhere: replicated.
struct Layout {
  SmallVector<SmallVector<int64_t, 2>> split;
  SmallVector<int64_t, 2> partial;

  /// A replicated layout of a tensor of rank `rank`.
  static Layout replicated(int64_t rank);
  bool isReplicated() const;
  /// Every grid axis the layout uses, in splits or in the partial sum.
  SmallVector<int64_t> usedAxes() const;
  bool operator==(const Layout &other) const {
    return split == other.split && partial == other.partial;
  }
  bool operator!=(const Layout &other) const { return !(*this == other); }
};

/// The layout of a ranked tensor type (replicated without an encoding).
Layout getLayout(RankedTensorType type);
/// `type` with `layout` on `grid`; without an encoding when replicated.
RankedTensorType withLayout(RankedTensorType type, FlatSymbolRefAttr grid,
                            const Layout &layout);
} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TPATTRS_H
