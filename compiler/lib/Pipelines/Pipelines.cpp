//===- Pipelines.cpp - tpc compilation pipelines --------------------------===//

#include "tpc/Pipelines/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "tpc/Transforms/Passes.h"
#include "tpc/Transforms/PipelineSchedule.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::tp;

LogicalResult
mlir::tp::buildPipeline(OpPassManager &pm, const PipelineOptions &options,
                        function_ref<LogicalResult(const Twine &)> emitError) {
  if (options.mode == ParallelMode::Auto) {
    if (options.grid.getValue().sizes.size() != 1)
      return emitError("tp-pipeline: mode=auto needs grid=N, the number of "
                       "ranks to choose a scheme and grid for");
    if (options.cluster.empty())
      return emitError("tp-pipeline: mode=auto needs cluster=FILE, the "
                       "cluster to choose for (docs/simulator.md)");
    if (options.seqParallel.hasValue())
      return emitError("tp-pipeline: mode=auto chooses seq-parallel itself");
    if (options.dataParallel.hasValue() || options.shardOptimizer.hasValue())
      return emitError("tp-pipeline: mode=auto chooses dp and "
                       "shard-optimizer itself");
    if (options.rebalance)
      return emitError("tp-pipeline: mode=auto does not choose rebalance "
                       "points yet; give a mode with rebalance=true");
    if (!options.stageLayers.empty())
      return emitError("tp-pipeline: mode=auto cuts the stages itself; give "
                       "a mode with pp=P for stages=");
    if (options.stageMoves.hasValue())
      return emitError("tp-pipeline: mode=auto does not compile stage moves; "
                       "give its choice's mode with pp=P for stage-moves=K");
    if (options.embeddingCache.hasValue())
      return emitError("tp-pipeline: mode=auto does not choose with an "
                       "embedding cache yet; give its choice's mode with "
                       "embedding-cache=RATIO");
    const bool pipelineGiven =
        options.pipelineStages.hasValue() || options.microbatches.hasValue() ||
        options.schedule.hasValue() || options.pipelineChunks.hasValue();
    if (pipelineGiven && !options.train)
      return emitError("tp-pipeline: pp and microbatches cut the training "
                       "step; they need train=true");
    if (std::string problem =
            pipelineOptionsProblem(options.pipelineStages, options.microbatches,
                                   options.schedule, options.pipelineChunks);
        !problem.empty())
      return emitError("tp-pipeline: " + problem);
    pm.addPass(createChooseScheme(options));
    return success();
  }
  // estimate-layers=true is the default: only turning it off says something.
  if (options.memoryBudget != 0 || options.explain || !options.estimateLayers ||
      !options.compileChoice)
    return emitError("tp-pipeline: memory-budget, explain, estimate-layers "
                     "and compile-choice are for mode=auto");
  // Options that would be silently ignored are errors.
  if (failed(verifyShardOptions("tp-pipeline", options.mode,
                                options.grid.getValue(), options.seqParallel,
                                options.dataParallel, options.shardOptimizer,
                                emitError)))
    return failure();
  // By value: mode=auto hands its candidates every option it was given.
  const bool pipelined = options.pipelineStages != 1 ||
                         options.microbatches != 1 ||
                         options.pipelineChunks != 1 ||
                         options.schedule != PipelineSchedule::OneFOneB ||
                         !options.stageLayers.empty();
  if (pipelined) {
    if (std::string problem =
            pipelineOptionsProblem(options.pipelineStages, options.microbatches,
                                   options.schedule, options.pipelineChunks);
        !problem.empty())
      return emitError("tp-pipeline: " + problem);
    if (options.mode == ParallelMode::None)
      return emitError("tp-pipeline: pp and microbatches need a mode, e.g. "
                       "mode=1d (grid=1 for pipeline parallelism alone)");
    if (!options.train)
      return emitError("tp-pipeline: pp and microbatches cut the training "
                       "step; they need train=true");
    if (options.rebalance)
      return emitError("tp-pipeline: rebalance=true does not work with pp "
                       "or microbatches yet");
  }
  if (options.stageMoves != 0 &&
      (options.pipelineStages < 2 || options.stageMoves < 0))
    return emitError("tp-pipeline: stage-moves=" + Twine(options.stageMoves) +
                     " needs a positive count and pp > 1");
  if (options.embeddingCache.hasValue()) {
    if (!(options.embeddingCache > 0 && options.embeddingCache <= 1))
      return emitError(llvm::formatv("tp-pipeline: embedding-cache={0} is "
                                     "not a share of a table's rows in (0, 1]",
                                     double(options.embeddingCache)));
    if (pipelined || options.rebalance || options.shardOptimizer)
      return emitError("tp-pipeline: embedding-cache does not work with "
                       "pipeline stages, micro-batches, rebalance=true or "
                       "shard-optimizer=true yet");
  }
  if (options.rebalance && options.mode == ParallelMode::None)
    return emitError("tp-pipeline: rebalance=true needs a mode, e.g. mode=1d");
  bool rebalanceTuned = options.rebalanceGranularity.hasValue() ||
                        options.rebalanceHeadroom.hasValue();
  if (rebalanceTuned && !options.rebalance)
    return emitError("tp-pipeline: rebalance-granularity and "
                     "rebalance-headroom need rebalance=true");
  bool optimizerTuned = options.beta1.hasValue() || options.beta2.hasValue() ||
                        options.epsilon.hasValue() ||
                        options.weightDecay.hasValue();
  if (optimizerTuned && !options.train)
    return emitError("tp-pipeline: beta1, beta2, epsilon and weight-decay "
                     "are AdamW's and need train=true");
  // Simplify the forward first, so that the backward is built from the
  // folded form (e.g. attention's scale already inside the matmul's alpha).
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.fuseAttention)
    pm.addPass(createTPFuseAttention());
  if (options.fuseElementwise) {
    // A pipeline cut between layers sends only the residual stream.
    TPFuseElementwiseOptions fuse;
    fuse.acrossLayers =
        options.pipelineStages == 1 && !options.timeOneMicrobatch;
    pm.addPass(createTPFuseElementwise(fuse));
  }
  // bf16 is mixed precision in Megatron-LM's sense: activations stored in
  // bf16 (their gradients follow through the VJPs), f32 masters.
  if (options.precision == MatmulPrecision::BF16)
    pm.addPass(createTPMixedPrecision());
  if (options.train) {
    TPAutodiffOptions autodiff;
    autodiff.remat = options.remat.getValue();
    autodiff.beta1 = options.beta1;
    autodiff.beta2 = options.beta2;
    autodiff.epsilon = options.epsilon;
    autodiff.weightDecay = options.weightDecay;
    autodiff.markBackward = pipelined;
    pm.addPass(createTPAutodiff(autodiff));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.mode != ParallelMode::None) {
    TPShardOptions shard;
    shard.mode = options.mode.getValue();
    shard.grid = options.grid.getValue();
    shard.seqParallel = options.seqParallel;
    shard.dataParallel = options.dataParallel;
    shard.shardOptimizer = options.shardOptimizer;
    // Rebalance blocks move along the tensor-parallel splits: ZeRO-1 then
    // keeps off them.
    shard.shardWholeDimsOnly = options.rebalance;
    if (pipelined)
      shard.microbatches = options.microbatches.getValue();
    pm.addPass(createTPShard(shard));
    pm.addPass(createTPLowerCollectives());
  }
  pm.addPass(createTPPartition());
  if (options.embeddingCache.hasValue()) {
    TPEmbeddingCacheOptions cache;
    cache.ratio = options.embeddingCache;
    pm.addPass(createTPEmbeddingCache(cache));
  }
  if (pipelined) {
    TPPipelineStagesOptions stages;
    stages.stages = options.pipelineStages;
    stages.chunks = options.pipelineChunks;
    stages.schedule = options.schedule.getValue();
    stages.layers.assign(options.stageLayers.begin(),
                         options.stageLayers.end());
    stages.clusterPath = options.cluster;
    stages.singleMicrobatch = options.timeOneMicrobatch;
    stages.stageMoves = options.stageMoves;
    pm.addPass(createTPPipelineStages(stages));
  }
  if (options.mode != ParallelMode::None) {
    if (options.collectiveMatmul)
      pm.addPass(createTPCollectiveMatmul());
    // The static volume per rank of the program that runs, as remarks;
    // tp-run counts the same.
    pm.addPass(createTPReportCommunication());
    if (options.rebalance) {
      TPInsertRebalanceOptions rebalance;
      rebalance.granularity = options.rebalanceGranularity;
      rebalance.headroom = options.rebalanceHeadroom;
      pm.addPass(createTPInsertRebalance(rebalance));
    }
  }
  if (options.fuseProducts) {
    TPFuseProductsOptions fuse;
    fuse.vocabChunk = options.vocabChunk;
    pm.addPass(createTPFuseProducts(fuse));
  }
  if (options.precision == MatmulPrecision::TF32) {
    TPMatmulPrecisionOptions precision;
    precision.precision = options.precision.getValue();
    pm.addPass(createTPMatmulPrecision(precision));
  }
  pm.addPass(createTPPlanMemory());
  if (!options.cluster.empty()) {
    TPSimulateOptions simulate;
    simulate.clusterPath = options.cluster;
    pm.addPass(createTPSimulate(simulate));
  }
  return success();
}

namespace {
/// Registers a pipeline that reads PipelineOptions: `prepare` may check and
/// complete them before buildPipeline. (PassPipelineRegistration's builder
/// cannot fail; these validate the options they are given.)
void registerWithPipelineOptions(
    StringRef argument, StringRef description,
    LogicalResult (*prepare)(PipelineOptions &,
                             function_ref<LogicalResult(const Twine &)>)) {
  registerPassPipeline(
      argument, description,
      [prepare](OpPassManager &pm, StringRef text,
                function_ref<LogicalResult(const Twine &)> emitError) {
        PipelineOptions options;
        if (failed(options.parseFromString(text)) ||
            failed(prepare(options, emitError)))
          return failure();
        return buildPipeline(pm, options, emitError);
      },
      [](function_ref<void(const detail::PassOptions &)> optionHandler) {
        optionHandler(PipelineOptions());
      });
}
} // namespace

void mlir::tp::registerPipelines() {
  registerWithPipelineOptions(
      "tp-pipeline",
      "Compile a global tp module into a per-rank program with planned "
      "memory; tpc-opt writes a plan when -o names a .tpplan file",
      [](PipelineOptions &, function_ref<LogicalResult(const Twine &)>) {
        return success();
      });
  // tp-pipeline="mode=auto explain=true ..." under the name a user looks
  // for: the ranked candidates, then the choice compiled.
  registerWithPipelineOptions(
      "tp-explain",
      "Rank every scheme, grid and dp for grid=N ranks on cluster=FILE "
      "(tp-pipeline mode=auto explain=true) and compile the fastest",
      [](PipelineOptions &options,
         function_ref<LogicalResult(const Twine &)> emitError) {
        if (options.mode.hasValue() && options.mode != ParallelMode::Auto)
          return emitError("tp-explain: ranks the schemes itself; give no "
                           "mode (tp-pipeline compiles a given one)");
        if (options.explain.hasValue() && !options.explain)
          return emitError("tp-explain: explain=false leaves nothing to "
                           "explain; use tp-pipeline mode=auto");
        options.mode = ParallelMode::Auto;
        options.explain = true;
        return success();
      });
}
