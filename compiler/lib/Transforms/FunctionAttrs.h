//===- FunctionAttrs.h - argument and result attributes in bulk -*- C++ -*-===//
//
// func::FuncOp::setArgAttr rebuilds the array of every argument's attribute
// dictionary, and the context keeps each array it builds: one call per
// argument grows memory with the square of the arguments (a 256-layer model
// has thousands). These set one attribute on many of them in one rewrite.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_TRANSFORMS_FUNCTIONATTRS_H
#define TPC_TRANSFORMS_FUNCTIONATTRS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::tp {

/// Sets attribute `name` to `values[i]` on argument i wherever `values[i]`
/// is non-null (`values` has one entry per argument).
inline void setArgAttrsInBulk(func::FuncOp func, StringRef name,
                              ArrayRef<Attribute> values) {
  SmallVector<DictionaryAttr> dicts;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    NamedAttrList attrs(func.getArgAttrDict(i));
    if (values[i])
      attrs.set(name, values[i]);
    dicts.push_back(attrs.getDictionary(func.getContext()));
  }
  func.setAllArgAttrs(dicts);
}

/// The same for results (`values` has one entry per result).
inline void setResultAttrsInBulk(func::FuncOp func, StringRef name,
                                 ArrayRef<Attribute> values) {
  SmallVector<DictionaryAttr> dicts;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    NamedAttrList attrs(func.getResultAttrDict(i));
    if (values[i])
      attrs.set(name, values[i]);
    dicts.push_back(attrs.getDictionary(func.getContext()));
  }
  func.setAllResultAttrs(dicts);
}

} // namespace mlir::tp

#endif // TPC_TRANSFORMS_FUNCTIONATTRS_H
