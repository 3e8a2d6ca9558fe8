//===- TPTraits.h - tp op traits --------------------------------*- C++ -*-===//
//
// Marker traits that say how an op treats distributed values; the sharding
// passes query them instead of listing ops (see TPInterfaces.td for the
// ODS side).
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DIALECT_TP_IR_TPTRAITS_H
#define TPC_DIALECT_TP_IR_TPTRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace mlir::OpTrait::tp {

/// The op is linear in its operands jointly: run on pending partial sums
/// over the same grid axes, its per-rank results add up to the op's result,
/// so that result is a pending partial sum over those axes as well.
template <typename ConcreteType>
class PassesPartialSums : public TraitBase<ConcreteType, PassesPartialSums> {};

/// The op is a collective that sums a pending partial of its operand.
template <typename ConcreteType>
class ReducesPartialSums : public TraitBase<ConcreteType, ReducesPartialSums> {
};

/// The op's result is operand 0's elements rearranged or a subset of them,
/// nothing computed: a value seen through it is still that operand's data
/// (a parameter viewed in another shape keeps its name and layout choice).
template <typename ConcreteType>
class IsView : public TraitBase<ConcreteType, IsView> {};

} // namespace mlir::OpTrait::tp

#endif // TPC_DIALECT_TP_IR_TPTRAITS_H
