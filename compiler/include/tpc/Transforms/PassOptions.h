//===- PassOptions.h - typed options of the tpc passes ----------*- C++ -*-===//
//
// Option types shared by the tp passes (Passes.td) and tp-pipeline, so that
// each option has one spelling, one parser and one list of values.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_TRANSFORMS_PASSOPTIONS_H
#define TPC_TRANSFORMS_PASSOPTIONS_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/LogicalResult.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::tp {

/// How the training step is distributed (docs/schemes.md).
/// `Auto` is tp-pipeline's: it compiles each scheme that fits the rank
/// count and keeps the one the step simulator predicts fastest.
enum class ParallelMode { None, OneD, TwoD, TwoHalfD, ThreeD, Auto };

/// `mode` as written on the command line ("1d", "2.5d", ...).
llvm::StringRef stringifyParallelMode(ParallelMode mode);

/// The `mode` values as written on the command line.
inline auto parallelModeValues() {
  return llvm::cl::values(
      clEnumValN(ParallelMode::None, "none", "One rank, no distribution"),
      clEnumValN(ParallelMode::OneD, "1d",
                 "1D tensor parallelism (Megatron-LM) over grid=t"),
      clEnumValN(ParallelMode::TwoD, "2d",
                 "2D tensor parallelism (Optimus) over grid=qxq: batch over "
                 "rows, heads and features over columns"),
      clEnumValN(ParallelMode::TwoHalfD, "2.5d",
                 "2.5D tensor parallelism (Tesseract) over grid=qxqxd: 2D "
                 "on each of d depth layers, the batch also split over "
                 "depth"),
      clEnumValN(ParallelMode::ThreeD, "3d",
                 "3D tensor parallelism (Bian et al.) over grid=qxqxq: "
                 "weights gathered over axis 0, inputs and outputs over "
                 "axes 1 and 2, swapped by consecutive linears"),
      clEnumValN(ParallelMode::Auto, "auto",
                 "tp-pipeline only: grid=N ranks; compile every scheme and "
                 "grid for them and keep the fastest on cluster=FILE"));
}

/// The order in which a pipeline stage runs its micro-batches' forward and
/// backward halves (tp-pipeline-stages).
enum class PipelineSchedule { GPipe, OneFOneB, Interleaved };

inline auto pipelineScheduleValues() {
  return llvm::cl::values(
      clEnumValN(PipelineSchedule::GPipe, "gpipe",
                 "Every micro-batch's forward, then every backward"),
      clEnumValN(PipelineSchedule::OneFOneB, "1f1b",
                 "One forward, one backward (PipeDream-Flush): at most as "
                 "many micro-batches in flight as stages after this one"),
      clEnumValN(PipelineSchedule::Interleaved, "interleaved",
                 "1F1B over pp-chunks model chunks per stage (Megatron-LM's "
                 "interleaved schedule): the bubble divided by the chunks"));
}

/// Activation recomputation in tp-autodiff.
enum class RematMode { None, Layer };

inline auto rematModeValues() {
  return llvm::cl::values(
      clEnumValN(RematMode::None, "none", "Keep every forward activation"),
      clEnumValN(RematMode::Layer, "layer",
                 "Recompute each layer's forward before its backward"));
}

/// The operand precision of matrix products (tp-matmul-precision).
enum class MatmulPrecision { F32, TF32, BF16 };

inline auto matmulPrecisionValues() {
  return llvm::cl::values(
      clEnumValN(MatmulPrecision::F32, "f32", "float32 operands"),
      clEnumValN(MatmulPrecision::TF32, "tf32",
                 "operands rounded to tf32 (10-bit mantissa), as the "
                 "matrix units' float32 mode"),
      clEnumValN(MatmulPrecision::BF16, "bf16",
                 "operands rounded to bfloat16; f32 accumulation, f32 "
                 "master weights and optimizer state"));
}

/// A device grid's shape, written "4", "2x2" or "2x2x2". Empty: not given.
struct GridShape {
  /// Most axes a scheme uses (2.5D and 3D grids have three).
  static constexpr size_t kMaxAxes = 3;
  /// Most ranks a grid may have; larger sizes are rejected when parsed.
  static constexpr int64_t kMaxRanks = int64_t(1) << 20;

  llvm::SmallVector<int64_t, kMaxAxes> sizes;

  bool empty() const { return sizes.empty(); }
  int64_t numRanks() const;
  /// As written on the command line, e.g. "2x2".
  std::string str() const;
  bool operator==(const GridShape &other) const { return sizes == other.sizes; }
};

llvm::raw_ostream &operator<<(llvm::raw_ostream &os, const GridShape &shape);

/// Checks that the sharding options fit together (a grid or sequence
/// parallelism needs a mode; the grid has the mode's number of axes),
/// reporting the first problem through `emitError`, prefixed by `passName`.
llvm::LogicalResult verifyShardOptions(
    llvm::StringRef passName, ParallelMode mode, const GridShape &grid,
    bool seqParallel, int64_t dataParallel, bool shardOptimizer,
    llvm::function_ref<llvm::LogicalResult(const llvm::Twine &)> emitError);

} // namespace mlir::tp

namespace llvm::cl {
/// Parses a GridShape option value; rejected text is a one-line error.
template <>
class parser<mlir::tp::GridShape> : public basic_parser<mlir::tp::GridShape> {
public:
  parser(Option &option) : basic_parser(option) {}

  /// Returns true (with an error reported through `option`) when `arg` is
  /// not a shape.
  bool parse(Option &option, StringRef argName, StringRef arg,
             mlir::tp::GridShape &value);
  StringRef getValueName() const override { return "shape"; }
  void printOptionDiff(const Option &option, const mlir::tp::GridShape &value,
                       const OptionValue<mlir::tp::GridShape> &defaultValue,
                       size_t globalWidth) const;
  void anchor() override;
};
} // namespace llvm::cl

#endif // TPC_TRANSFORMS_PASSOPTIONS_H
