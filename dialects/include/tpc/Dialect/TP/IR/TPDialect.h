//===- TPDialect.h - tp dialect ---------------------------------*- C++ -*-===//

#ifndef TPC_DIALECT_TP_IR_TPDIALECT_H
#define TPC_DIALECT_TP_IR_TPDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

#include "tpc/Dialect/TP/IR/TPDialect.h.inc"

namespace mlir::tp {
/// Registers the tp dialect and its external interface models (layout checks
/// of func.func signatures).
void registerTPDialect(DialectRegistry &registry);

/// Whether `func` is a generation program: one with KV cache arguments
/// (tp.cache), which @prefill and @decode share.
bool isGenerationFunction(func::FuncOp func);

/// The transformer layer an op belongs to (tp.layer: the importer's, kept by
/// the fusions, and with tp-autodiff's mark-backward its VJP's), if any.
std::optional<int64_t> layerOf(Operation *op);

/// The grid axis of a pipelined module's stages (tp-pipeline-stages).
inline constexpr int64_t kPipelineStageAxis = 0;
/// A collective's effects: none, except over the stage axis of a module
/// pipelined into several stages (tp.pipeline), where it writes the
/// stage-exchange resource. Every stage program must make such a
/// collective even where its result goes unused, so no pass may erase or
/// merge it on one stage alone.
void addStageExchangeEffects(
    Operation *op, ArrayRef<int64_t> gridAxes,
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects);
} // namespace mlir::tp

#endif // TPC_DIALECT_TP_IR_TPDIALECT_H
