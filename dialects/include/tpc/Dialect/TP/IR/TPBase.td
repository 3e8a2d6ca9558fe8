//===- TPBase.td - tp dialect definition -------------------*- tablegen -*-===//
//
// The tp dialect describes a transformer training step at the global view:
// plain tensors with optional distribution layouts in their encoding.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DIALECT_TP_IR_TPBASE_TD
#define TPC_DIALECT_TP_IR_TPBASE_TD

include "mlir/IR/OpBase.td"

def TP_Dialect : Dialect {
  let name = "tp";
  let cppNamespace = "::mlir::tp";
  let summary = "Tensor-parallel transformer operations at the global view";
  let description = [{
    The `tp` dialect holds a transformer training step as operations on
    global (unsharded) tensors. A module-level `tp.grid` symbol names the
    device grid; a `#tp.dist` attribute in a tensor type's encoding says how
    that value is distributed over the grid (which grid axes split each
    dimension, which axes hold a pending partial sum). Every compute op
    declares its sharding rule once through `ShardingRuleOpInterface`; the
    sharding passes and the cost model read only that rule.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
  // The discardable attributes the importer and the passes put on functions,
  // their arguments and results, ops and the module. Passes name them only
  // through the generated helpers (TPDialect::ParamAttrHelper, ...); the
  // dialect verifies where each may appear and its kind.
  let discardableAttrs = (ins
    // Function arguments.
    "::mlir::StringAttr":$param,          // a parameter, by its HF name
    "::mlir::StringAttr":$init,           // "normal" | "zeros" | "ones"
    "::mlir::FloatAttr":$init_std,        // the normal init's stddev
    "::mlir::DenseI64ArrayAttr":$hf_shape,// its shape in safetensors files
    "::mlir::StringAttr":$state,          // AdamW moment: "exp_avg" | ...
    "::mlir::StringAttr":$input,          // "tokens" | "targets" | ...
    "::mlir::StringAttr":$cache,          // a KV cache the runtime keeps
                                          // between generation steps, by
                                          // name ("<layer>.key" | ...)
    "::mlir::Attribute":$layout,          // a #tp.dist parameter layout,
                                          // kept after tp-partition
    // Set by tp-embedding-cache on a cached table and its moments: the
    // argument holds `slots` rows of the rank's `rows`-row block
    // ({rows, ratio}), which the runtime keeps whole in host memory.
    "::mlir::DictionaryAttr":$embedding_cache,
    "::mlir::StringAttr":$cache_of,       // a cache_map/cache_rows input:
                                          // the cached table's HF name
    // Function results.
    "::mlir::StringAttr":$output,         // "loss", "logits", ...
    "::mlir::StringAttr":$grad_of,        // the gradient of this parameter
    "::mlir::IntegerAttr":$updates,       // the new value of this argument
    // Ops and functions.
    "::mlir::IntegerAttr":$layer,         // the transformer layer of an op
    "::mlir::UnitAttr":$recomputed,       // a forward op recomputed
    "::mlir::UnitAttr":$backward,         // built by the backward pass
                                          // (tp-autodiff): a VJP, a sum of
                                          // cotangents or a recomputation
    // Set by tp-pipeline-stages on each stage's function: the pipeline
    // stage (coordinate on grid axis 0) whose ranks run it, and its order of
    // forward and backward micro-batch slots ("F0 F1 B0 ...").
    "::mlir::IntegerAttr":$stage,
    "::mlir::StringAttr":$schedule,
    // With stage-moves=K: the stage cuts (indices into tp.pipeline's cuts)
    // whose stage `stage` runs this function.
    "::mlir::DenseI64ArrayAttr":$cuts,
    // Set by tp-pipeline-stages single-microbatch=true on each op of the one
    // micro-batch it emits (with its tp.layer, and tp.backward in the
    // backward): what mode=auto times per layer and micro-batch.
    "::mlir::IntegerAttr":$microbatch,
    // Set by tp-partition on a per-rank tp.embedding whose table is split
    // along the vocabulary, or a tp.cross_entropy whose logits are: the
    // grid axes that split it. Each rank looks up only the ids in its block
    // of rows (zeros for the rest), or reduces only its block of columns.
    "::mlir::DenseI64ArrayAttr":$vocab_axes,
    // Set by tp-partition on a per-rank normalisation (or its gradient)
    // whose features are split: the grid axes that split them. The kernel
    // gathers per-row statistics over them.
    "::mlir::DenseI64ArrayAttr":$feature_axes,
    // Set by tp-collective-matmul on the add that completes a reduce-scatter
    // it decomposed into ring steps: the grid axes of the ring. Its result is
    // this rank's block of the sum, as the reduce-scatter's was.
    "::mlir::DenseI64ArrayAttr":$ring_reduced,
    "::mlir::DenseI64ArrayAttr":$buffer_offsets, // arena offsets (results)
    // Set by tp-insert-rebalance on function arguments (one entry per
    // dimension) and ops (one such array per result): per dimension the
    // tp.rebalance_point whose blocks it holds, or unit. The dimension's
    // size is the point's capacity times the extent of one block.
    "::mlir::ArrayAttr":$rebalance_dims,
    "::mlir::IntegerAttr":$arena_bytes,   // a function's arena size
    // The module.
    "::mlir::StringAttr":$model_type,     // "gpt2" | "llama"
    "::mlir::StringAttr":$hf_config,      // the config.json, verbatim
    // The ids generation stops at (HF's resolution of eos_token_id).
    "::mlir::DenseI64ArrayAttr":$eos_token_ids,
    "::mlir::DictionaryAttr":$head_counts, // heads a grid must divide
    // Set by tp-pipeline-stages: the schedule, stages, micro-batches, model
    // chunks per stage and each stage's layers.
    "::mlir::DictionaryAttr":$pipeline
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

#endif // TPC_DIALECT_TP_IR_TPBASE_TD
