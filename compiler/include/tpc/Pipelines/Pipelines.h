//===- Pipelines.h - tpc compilation pipelines ------------------*- C++ -*-===//

#ifndef TPC_PIPELINES_PIPELINES_H
#define TPC_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::tp {

/// How the training step is distributed. Later schemes add values here.
enum class ParallelMode { None, OneD };

struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  Option<ParallelMode> mode{
      *this, "mode", llvm::cl::desc("Tensor-parallel scheme"),
      llvm::cl::init(ParallelMode::None),
      llvm::cl::values(
          clEnumValN(ParallelMode::None, "none", "One rank, no distribution"),
          clEnumValN(ParallelMode::OneD, "1d",
                     "1D tensor parallelism (Megatron-LM) over grid=t"))};
  Option<std::string> grid{*this, "grid",
                           llvm::cl::desc("Grid shape for the scheme, e.g. 4"),
                           llvm::cl::init("1")};
  Option<bool> seqParallel{
      *this, "seq_parallel",
      llvm::cl::desc("Sequence parallelism: split layer-norm and residual "
                     "regions along the sequence (1d)"),
      llvm::cl::init(false)};
  Option<bool> train{*this, "train",
                     llvm::cl::desc("Differentiate @loss into @gradients and "
                                    "@train_step (tp-autodiff)"),
                     llvm::cl::init(true)};
  Option<std::string> remat{
      *this, "remat", llvm::cl::desc("Activation recomputation: none or layer"),
      llvm::cl::init("none")};
};

/// Global tp module -> per-rank program with planned memory, ready for the
/// plan emitter (tpc-opt writes the plan when its output ends in .tpplan).
void buildPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Registers `tp-pipeline`.
void registerPipelines();

} // namespace mlir::tp

#endif // TPC_PIPELINES_PIPELINES_H
