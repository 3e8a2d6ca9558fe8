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

/// The op's result is operand 0's elements rearranged, a subset of them, or
/// the same elements in another precision (tp.convert), nothing computed
/// across elements: a value seen through it is still that operand's data (a
/// parameter viewed in another shape or as its bf16 copy keeps its name and
/// layout choice).
template <typename ConcreteType>
class IsView : public TraitBase<ConcreteType, IsView> {};

/// The op pairs up or exchanges the blocks of the ranks of a grid group (a
/// collective, a ring shift), so every rank of the group must hold operands
/// of the same shape: a dimension whose extent differs between ranks (a
/// rebalance point, tp-insert-rebalance) may not reach it.
template <typename ConcreteType>
class NeedsUniformShards : public TraitBase<ConcreteType, NeedsUniformShards> {
};

/// Every rank of the op's group gets the same result, whatever each
/// contributed (an all-reduce, an all-gather).
template <typename ConcreteType>
class UniformResult : public TraitBase<ConcreteType, UniformResult> {};

/// A step of a ring over the op's group: on every rank the op handles the
/// same data, one rank-dependent block at a time, so a value seen only
/// through such steps is still the same value on every rank.
template <typename ConcreteType>
class RingStep : public TraitBase<ConcreteType, RingStep> {};

} // namespace mlir::OpTrait::tp

#endif // TPC_DIALECT_TP_IR_TPTRAITS_H
