//===- Pipelines.h - tpc compilation pipelines ------------------*- C++ -*-===//

#ifndef TPC_PIPELINES_PIPELINES_H
#define TPC_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "tpc/Transforms/PassOptions.h"

namespace mlir::tp {

struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  Option<ParallelMode> mode{
      *this, "mode", llvm::cl::desc("Tensor-parallel scheme"),
      llvm::cl::init(ParallelMode::None), parallelModeValues()};
  Option<GridShape> grid{
      *this, "grid",
      llvm::cl::desc("Grid shape for the scheme, e.g. 4 (needs a mode)")};
  Option<bool> seqParallel{
      *this, "seq-parallel",
      llvm::cl::desc("Sequence parallelism: split layer-norm and residual "
                     "regions along the sequence (needs a mode)"),
      llvm::cl::init(false)};
  Option<int64_t> dataParallel{
      *this, "dp",
      llvm::cl::desc("Data-parallel replicas around the scheme: the grid "
                     "becomes [dp, grid...] and axis 0 splits the batch "
                     "(needs a mode)"),
      llvm::cl::init(1)};
  Option<int64_t> pipelineStages{
      *this, "pp",
      llvm::cl::desc("Pipeline stages: the grid becomes [pp, dp?, grid...] "
                     "and each stage runs a contiguous group of layers "
                     "(tp-pipeline-stages; needs a mode and train=true)"),
      llvm::cl::init(1)};
  Option<int64_t> microbatches{
      *this, "microbatches",
      llvm::cl::desc("Micro-batches per step: the batch is cut into this "
                     "many, their gradients accumulated in the step (with "
                     "pp > 1, what the schedule pipelines)"),
      llvm::cl::init(1)};
  Option<PipelineSchedule> schedule{
      *this, "schedule", llvm::cl::desc("Pipeline schedule"),
      llvm::cl::init(PipelineSchedule::OneFOneB), pipelineScheduleValues()};
  Option<int64_t> pipelineChunks{
      *this, "pp-chunks",
      llvm::cl::desc("Model chunks per stage (schedule=interleaved)"),
      llvm::cl::init(1)};
  ListOption<int64_t> stageLayers{
      *this, "stages",
      llvm::cl::desc("Layers per stage (per chunk with pp-chunks), instead "
                     "of the cut balanced by predicted cost")};
  Option<int64_t> stageMoves{
      *this, "stage-moves",
      llvm::cl::desc("Also compile the stage cuts that move up to this many "
                     "layers off any one stage to each neighbour, for the "
                     "runtime to switch to when a stage straggles (stage "
                     "rebalancing; pp > 1; interleaved: off one virtual "
                     "stage to its neighbours)"),
      llvm::cl::init(0)};
  Option<bool> shardOptimizer{
      *this, "shard-optimizer",
      llvm::cl::desc("ZeRO-1: parameters and optimizer state stored split "
                     "over the data-parallel axis (needs dp=N, N > 1)"),
      llvm::cl::init(false)};
  Option<bool> collectiveMatmul{
      *this, "collective-matmul",
      llvm::cl::desc("Decompose all-gathers feeding matmuls and matmuls "
                     "feeding reduce-scatters into ring steps that overlap "
                     "the transfers with the GEMMs (tp-collective-matmul; "
                     "with a mode)"),
      llvm::cl::init(true)};
  Option<bool> rebalance{
      *this, "rebalance",
      llvm::cl::desc("Mark the dimensions whose blocks the runtime may move "
                     "between ranks or leave out on a slow one, and plan "
                     "their buffers for the most a rank may hold "
                     "(tp-insert-rebalance; with a mode)"),
      llvm::cl::init(false)};
  Option<int64_t> rebalanceGranularity{
      *this, "rebalance-granularity",
      llvm::cl::desc("tp-insert-rebalance's granularity: elements per block "
                     "of a dimension any split suits (MLP features)"),
      llvm::cl::init(64)};
  Option<double> rebalanceHeadroom{
      *this, "rebalance-headroom",
      llvm::cl::desc("tp-insert-rebalance's headroom: blocks a rank may hold "
                     "beyond its even share, as a fraction of it"),
      llvm::cl::init(0.5)};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("Fuse causal attention into tp.attention, which never "
                     "stores the scores (tp-fuse-attention)"),
      llvm::cl::init(true)};
  Option<bool> fuseElementwise{
      *this, "fuse-elementwise",
      llvm::cl::desc("Fuse the SwiGLU gate and residual add + norm, whose "
                     "VJPs fuse the gradients too (tp-fuse-elementwise)"),
      llvm::cl::init(true)};
  Option<bool> fuseProducts{
      *this, "fuse-products",
      llvm::cl::desc("Fuse products with their bias, GELU and GELU gradient, "
                     "and the vocabulary head with its cross-entropy "
                     "(tp-fuse-products)"),
      llvm::cl::init(true)};
  Option<int64_t> vocabChunk{
      *this, "vocab-chunk",
      llvm::cl::desc("Vocabulary columns per chunk of a fused head (its "
                     "logits are never stored whole)"),
      llvm::cl::init(4096)};
  Option<double> embeddingCache{
      *this, "embedding-cache",
      llvm::cl::desc("Keep every untied input embedding table in host "
                     "memory with a cache of this share of each rank's "
                     "rows, updated row-sparsely (tp-embedding-cache; 0: "
                     "no cache)"),
      llvm::cl::init(0.0)};
  Option<bool> train{*this, "train",
                     llvm::cl::desc("Differentiate @loss into @gradients and "
                                    "@train_step (tp-autodiff)"),
                     llvm::cl::init(true)};
  // AdamW's settings, fixed in the plan's steps (tp-autodiff's options);
  // the learning-rate schedule and clipping are tp-run's.
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(0.999)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("AdamW epsilon"),
                         llvm::cl::init(1e-8)};
  Option<double> weightDecay{
      *this, "weight-decay",
      llvm::cl::desc("AdamW weight decay, applied to parameters of rank >= 2"),
      llvm::cl::init(0.01)};
  Option<RematMode> remat{*this, "remat",
                          llvm::cl::desc("Activation recomputation"),
                          llvm::cl::init(RematMode::None), rematModeValues()};
  Option<std::string> cluster{
      *this, "cluster",
      llvm::cl::desc("A cluster description (docs/simulator.md): mode=auto "
                     "chooses for it; with another mode, tp-simulate "
                     "reports the predicted step on it")};
  Option<int64_t> memoryBudget{
      *this, "memory-budget",
      llvm::cl::desc("mode=auto: the most bytes a rank may hold (0: the "
                     "cluster's device memory)"),
      llvm::cl::init(0)};
  Option<bool> explain{
      *this, "explain",
      llvm::cl::desc("mode=auto: report every candidate, ranked, with its "
                     "predicted step, memory and traffic, or why it was "
                     "rejected"),
      llvm::cl::init(false)};
  Option<bool> estimateLayers{
      *this, "estimate-layers",
      llvm::cl::desc("mode=auto: predict each candidate from compiles of 2 "
                     "and 3 of the model's layers, on a straight line to all "
                     "of them (the layers are alike), and compile only the "
                     "choice whole; false compiles every candidate whole"),
      llvm::cl::init(true)};
  Option<bool> compileChoice{
      *this, "compile-choice",
      llvm::cl::desc("mode=auto: compile the choice into the module (false: "
                     "only rank the candidates and leave the module as it "
                     "was)"),
      llvm::cl::init(true)};
  Option<MatmulPrecision> precision{
      *this, "precision",
      llvm::cl::desc("Training precision: f32; bf16, mixed precision with "
                     "activations and their gradients stored in bf16 and "
                     "f32 masters (tp-mixed-precision); or tf32, f32 "
                     "tensors with TF32 products (tp-matmul-precision)"),
      llvm::cl::init(MatmulPrecision::F32), matmulPrecisionValues()};

  /// Not an option: mode=auto's timing compile of a pipeline candidate,
  /// with pp=1 and microbatches=M, emits one micro-batch's program
  /// (tp-pipeline-stages single-microbatch=true) cut between layers as the
  /// pipeline's would be.
  bool timeOneMicrobatch = false;
};

/// Global tp module -> per-rank program with planned memory, ready for the
/// plan emitter (tpc-opt writes the plan when its output ends in .tpplan).
/// Fails, reporting through `emitError`, when the options contradict each
/// other (a grid or sequence parallelism without a mode).
LogicalResult
buildPipeline(OpPassManager &pm, const PipelineOptions &options,
              function_ref<LogicalResult(const Twine &)> emitError);

/// tp-pipeline's mode=auto (ChooseScheme.cpp): for the rank count in
/// `options.grid`, compiles every scheme, grid (and recomputation, unless
/// given) on a copy of the module, predicts each step on
/// `options.cluster`, drops those over the memory budget, reports the
/// choice (every candidate with `explain`), and compiles the module as the
/// fastest.
std::unique_ptr<Pass> createChooseScheme(const PipelineOptions &options);

/// Registers `tp-pipeline`.
void registerPipelines();

} // namespace mlir::tp

#endif // TPC_PIPELINES_PIPELINES_H
