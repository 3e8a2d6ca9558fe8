//===- Pipelines.cpp - tpc compilation pipelines --------------------------===//

#include "tpc/Pipelines/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "tpc/Transforms/Passes.h"

using namespace mlir;

void mlir::tp::buildPipeline(OpPassManager &pm,
                             const PipelineOptions &options) {
  // Simplify the forward first, so that the backward is built from the
  // folded form (e.g. attention's scale already inside the matmul's alpha).
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.train) {
    TPAutodiffOptions autodiff;
    autodiff.remat = options.remat;
    pm.addPass(createTPAutodiff(autodiff));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (options.mode != ParallelMode::None) {
    TPShardOptions shard;
    shard.mode = "1d";
    shard.grid = options.grid;
    shard.seqParallel = options.seqParallel;
    pm.addPass(createTPShard(shard));
    pm.addPass(createTPLowerCollectives());
    // The static volume per rank, as remarks; tp-run counts the same.
    pm.addPass(createTPReportCommunication());
  }
  pm.addPass(createTPPartition());
  pm.addPass(createTPPlanMemory());
}

void mlir::tp::registerPipelines() {
  PassPipelineRegistration<PipelineOptions>(
      "tp-pipeline",
      "Compile a global tp module into a per-rank program with planned "
      "memory; tpc-opt writes a plan when -o names a .tpplan file",
      buildPipeline);
}
