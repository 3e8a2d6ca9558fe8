//===- Passes.td - tpc transformation passes ---------------*- tablegen -*-===//

#ifndef TPC_TRANSFORMS_PASSES_TD
#define TPC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TPPrintShardingRules : Pass<"tp-print-sharding-rules"> {
  let summary = "Report every tp op's sharding rule as a remark";
  let description = [{
    For each op implementing `ShardingRuleOpInterface`, checks the rule
    against the op's types and emits a remark with it, e.g.

    ```
    remark: sharding rule: ([i, k], [k, j]) -> ([i, j]) {i=8, j=32, k=16} reduction={k}
    ```

    Factors are named i, j, k, ... in the order the op declares them; a
    dimension written `_` cannot be split; compound dimensions list their
    factors major to minor (`[ij, k]`). Fails if a rule is inconsistent with
    the op's types.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPAutodiff : Pass<"tp-autodiff", "::mlir::ModuleOp"> {
  let summary = "Build @gradients and @train_step from @loss";
  let description = [{
    Reverse-mode differentiation of `@loss(params..., tokens, targets)`:
    each forward op builds its vector-Jacobian product through
    `DifferentiableOpInterface` (TPVJP.cpp); an op without it is an error.
    Cotangents of values with several users are summed.

    Adds `@gradients(params..., tokens, targets) -> (loss, grads...)` and
    `@train_step(params..., exp_avg..., exp_avg_sq..., tokens, targets,
    step, hyperparameters) -> (loss, params'..., exp_avg'..., exp_avg_sq'...)`
    whose optimizer is in tp ops: global-norm clipping (tp.norm_squared,
    tp.clip_scale), warmup + cosine schedule (tp.lr_schedule) and AdamW
    (weight decay on matrices only). Each updated result carries
    `tp.updates = <argument index>` so the update can happen in place.

    With `remat=layer`, each transformer layer's forward (ops tagged
    `tp.layer`) is recomputed right before its backward, so only the layer
    inputs stay alive between forward and backward.
  }];
  let options = [
    Option<"remat", "remat", "::mlir::tp::RematMode",
           "::mlir::tp::RematMode::None", "Activation recomputation",
           "::mlir::tp::rematModeValues()">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "AdamW weight decay, applied to parameters of rank >= 2">,
    Option<"markBackward", "mark-backward", "bool", "false",
           "Mark every op the backward builds with tp.backward and the "
           "layer it differentiates (tp.layer), for tp-pipeline-stages "
           "(tp-pipeline sets it with pp or microbatches)">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect", "::mlir::func::FuncDialect"];
}

def TPShard : Pass<"tp-shard", "::mlir::ModuleOp"> {
  let summary = "Give every value a distribution layout from the sharding rules";
  let description = [{
    Adds `tp.grid @tp` and walks each function in program order (@train_step
    first, so that every function gets the same parameter layouts). For each
    op it assigns grid axes to the factors of the op's sharding rule: the
    splits its operands already carry, the scheme's choices, and for a
    pending partial sum either keeping it (`PassesPartialSums` ops) or
    resolving it. Among
    the candidate assignments it keeps the one whose operand
    redistributions move the fewest bytes (ring rule; a redistribution
    already made for the same value and layout is free), inserts
    `tp.redistribute` where an operand's layout differs, and derives the
    results' layouts: split where a split factor indexes them, partial over
    split reduction factors they lack. Only splits the op's kernel supports
    are assigned (`ShardingRuleOpInterface::isSplittableFactor`).

    Parameters (and their AdamW moments) start undecided; the first op that
    uses one decides its layout, back through the view ops (`IsView`:
    slices, reshapes, transposes) between them. The 1D scheme (Megatron-LM): a weight used by a
    matmul whose input has an unsplit contraction is split along its output
    features (column-parallel); one whose input arrives split along the
    contraction follows that split (row-parallel, the result a partial sum);
    an embedding table is split along the vocabulary. Partial sums are
    resolved right before the first op that is not linear in them, to a
    replicated value (all-reduce) or, with `seq-parallel`, split along the
    sequence (reduce-scatter); the sequence-split activations are gathered
    where a column-parallel matmul needs them whole. A gradient consumed by
    AdamW is steered to its parameter's layout. Function results keep the
    layout of the argument they update (`tp.updates`) and are replicated
    otherwise.

    What each mode decides is a small policy (ShardSchemes.cpp;
    docs/schemes.md): `1d` as above over all ranks; `2d` (grid QxQ) and
    `2.5d` (QxQxD) split the batch over the rows (and depth), heads,
    features and vocabulary over the columns as 1D does, and store weight
    matrices in QxQ blocks gathered over the rows where used; `3d` (QxQxQ)
    gathers each linear's input over one of axes 1 and 2, its weight over
    axis 0, and reduce-scatters its output over the other onto the batch, so
    consecutive linears swap the two groups. An op that updates an argument
    in place (AdamW) works on the argument's own shard.

    With `dp=N` (N > 1) the module's grid is [N, grid...]: axis 0 is data
    parallelism around any mode. It splits the batch (as the major part of
    the batch's split), so weight gradients are partial sums over it,
    all-reduced before AdamW; with `shard-optimizer=true` (ZeRO-1)
    parameters and moments are stored split over it too, gradients are
    reduce-scattered onto them and parameters all-gathered where used (once
    a step: the backward reuses the forward's gather). The mode's axes keep
    their meaning, one place further on.

    A dimension the grid cannot split evenly (heads, features, vocabulary,
    batch) is an error naming it.
  }];
  let options = [
    Option<"mode", "mode", "::mlir::tp::ParallelMode",
           "::mlir::tp::ParallelMode::OneD", "Tensor-parallel scheme",
           "::mlir::tp::parallelModeValues()">,
    Option<"grid", "grid", "::mlir::tp::GridShape", "::mlir::tp::GridShape{}",
           "Grid shape: T (1d; default 1), QxQ (2d), QxQxD (2.5d), QxQxQ (3d)">,
    Option<"seqParallel", "seq-parallel", "bool", "false",
           "Split layer-norm and residual regions along the sequence "
           "(Megatron's sequence parallelism)">,
    Option<"dataParallel", "dp", "int64_t", "1",
           "Data-parallel replicas: the module's grid becomes [dp, grid...] "
           "and grid axis 0 splits the batch">,
    Option<"shardOptimizer", "shard-optimizer", "bool", "false",
           "Store parameters and their optimizer state split over the "
           "data-parallel axis (ZeRO-1): gradients are reduce-scattered "
           "onto them and parameters all-gathered where used">,
    Option<"shardWholeDimsOnly", "shard-whole-dims-only", "bool", "false",
           "With shard-optimizer: split only dimensions the tensor-parallel "
           "scheme keeps whole (a parameter with none stays whole over the "
           "replicas), so that blocks of its split dimensions can move "
           "between ranks (tp-pipeline sets it with rebalance=true)">,
    Option<"microbatches", "microbatches", "int64_t", "0",
           "With N > 0, grid axis 0 (in front of dp) is the step's N "
           "micro-batches: it splits the batch like a data-parallel axis, "
           "in time, and tp-pipeline-stages turns the sums over it into "
           "gradient accumulation">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPLowerCollectives : Pass<"tp-lower-collectives", "::mlir::ModuleOp"> {
  let summary = "Lower tp.redistribute to the cheapest collectives";
  let description = [{
    A pure layout-diff: pending partial sums are resolved first, with a
    reduce-scatter wherever the target also splits a dimension on those grid
    axes (an all-reduce followed by a slice, at half the cost) and an
    all-reduce otherwise; splits the target does not want move to another
    dimension with an all-to-all when the target splits that one on the same
    axis, and are gathered otherwise; splits the target adds on unused axes
    are taken locally, without communication. Redistributes that create a
    partial sum are rejected. The lowering is a rewrite pattern run by the
    greedy driver together with `tp.local_split`'s canonicalization, so
    that an explicit `tp.all_reduce` whose only use is a `tp.local_split`
    over the same axes becomes one `tp.reduce_scatter`.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPPipelineStages : Pass<"tp-pipeline-stages", "::mlir::ModuleOp"> {
  let summary = "Cut the per-rank step into pipeline stages with a schedule";
  let description = [{
    Per-rank programs only (after tp-partition), sharded with tp-shard's
    `microbatches=M`: grid axis 0 is then the step's M micro-batches, and
    @train_step is one micro-batch's step whose sums over axis 0 (weight
    gradients, the loss) are its gradient accumulation. This pass turns axis
    0 into the pipeline axis of `pp` stages and @train_step into one
    function per stage, `@train_step_stage<s>` (`tp.stage = s`), that runs
    all M micro-batches in the order of `schedule` and then the optimizer:

    - Each op is a step invariant (it reads only parameters, moments and the
      step's scalars: computed once, before the micro-batches), a
      micro-batch op (forward, or backward as tp-autodiff marks it), or a
      once-per-step op after the accumulated sums (clipping, AdamW).
    - Layers (`tp.layer`) are cut into `pp` x `pp-chunks` contiguous groups
      whose predicted time (the step simulator's per-op cost, on `cluster`
      when given) is balanced; `layers` gives the cut instead. Chunk c of
      stage s holds group c * pp + s. An op without a layer (a collective
      the sharding inserted, the embedding, the head and loss) goes with the
      latest layer it reads in the forward, the earliest in the backward,
      else its first user's: the embedding with the first layer, the head
      and loss with the last, and they are costed there.
    - A micro-batch value one stage makes and another uses travels as a
      `tp.send_start`/`tp.send_wait` and `tp.recv_start`/`tp.recv_wait`
      pair over axis 0: the receive is posted one slot before the slot that
      needs it and waited for at its first use, the send waited for at the
      end of the next slot, so transfers overlap compute. Under a tensor
      scheme each rank sends only its shard.
    - Each parameter (and its moments) lives on one stage, the first that
      uses it; a stage that also uses it (a tied embedding) receives it at
      the start of each step, and the sums of its gradient's parts meet in
      the optimizer.
    - A sum over axis 0 becomes a running sum over the micro-batches, in
      micro-batch order; the remaining axes of the collective stay, after
      the sum. A once-per-step value several stages contribute to (the
      global gradient norm, the loss) is all-reduced over axis 0, every
      stage taking part.

    The held-out @loss, when the module has it, is cut at the same layers
    into `@loss_stage<s>`, which runs the schedule's forward halves in
    their order; its loss is summed over the stages as the step's is.

    With `stage-moves=K` (pp > 1), the pass also cuts the step (and @loss)
    at every alternative that moves l <= K layers from one group (a stage,
    or a virtual stage when interleaved) to the group before it and r <= K
    to the one after it, keeping a layer on it: cut 0 is the balanced one, the others follow in stage
    order. A stage program equal to an earlier cut's is shared; each
    function lists the cuts it serves (`tp.cuts`) and alternatives are named
    `@<step>_stage<s>_cut<c>`. `tp.pipeline` records the cuts and each
    layer's predicted seconds, from which the runtime picks the cut a
    straggling stage needs and moves the layers' parameters and moments.

    The micro-batches' tokens are the rows of the rank's token block, M
    blocks of the micro-batch's size. Every stage's program checks that
    each send has its receive, of the same type, and that no order of the
    waits can deadlock. The module attribute `tp.pipeline` records the
    schedule, and each function its slots (`tp.schedule`).
  }];
  let options = [
    Option<"stages", "pp", "int64_t", "1", "Pipeline stages">,
    Option<"chunks", "pp-chunks", "int64_t", "1",
           "Model chunks per stage (schedule=interleaved)">,
    Option<"schedule", "schedule", "::mlir::tp::PipelineSchedule",
           "::mlir::tp::PipelineSchedule::OneFOneB", "Pipeline schedule",
           "::mlir::tp::pipelineScheduleValues()">,
    ListOption<"layers", "layers", "int64_t",
               "Layers per stage (per chunk, in virtual-stage order), "
               "instead of the balanced cut">,
    Option<"clusterPath", "cluster", "std::string", "",
           "A cluster description whose device costs the layers (default: "
           "FLOPs and bytes at fixed rates)">,
    Option<"stageMoves", "stage-moves", "int64_t", "0",
           "Also emit the stage programs of every cut that moves up to this "
           "many layers off one stage to each neighbour (stage rebalancing)">,
    Option<"singleMicrobatch", "single-microbatch", "bool", "false",
           "Emit micro-batch 0 only, each op tagged with tp.microbatch, "
           "tp.layer and tp.backward, its running sums added as a later "
           "micro-batch's are: the program mode=auto times a pipeline's "
           "micro-batch by, not a step to run (needs pp=1)">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect", "::mlir::func::FuncDialect"];
}

def TPCollectiveMatmul : Pass<"tp-collective-matmul", "::mlir::ModuleOp"> {
  let summary = "Overlap gathers and reduce-scatters with their matmuls";
  let description = [{
    Per-rank programs only (after tp-partition). A collective over a group
    of n ranks next to a matmul becomes the n steps of a ring (SUMMA panels,
    the collective matmul of windowed einsums), each starting the shift of
    one block to the next rank (`tp.ring_shift_start`), multiplying the
    block it holds, and waiting for the shift (`tp.ring_shift_wait`), so the
    transfer runs behind the GEMM. The bytes moved are the collective's
    (n-1 shifts of one block).

    - `tp.all_gather` feeding `tp.matmul`s: step i multiplies the block that
      started on group rank r-i. Gathered along a free dimension (M, N or a
      batch dimension) the product is that block of the result
      (`tp.ring_insert`, in place); along the contraction the products are
      summed, the other operand cut alike (`tp.ring_slice`). Every matmul
      use whose other operand exists at the first one (views of weights are
      moved up) shares the ring; other uses get the gathered value rebuilt
      from the same blocks, and so the full operand stays in memory only
      when some use needs it. A matmul whose product block would be larger
      than the gathered operand (a vocabulary-sized head) keeps the gather:
      the ring would add that block to the product's memory.
    - `tp.matmul` whose only use is a `tp.reduce_scatter`: step i computes
      the partial block r-i-1 from a slice of the operand that produces the
      scattered dimension, adds the running sum received from rank r-1 and
      passes it on; after n steps each rank holds its own reduced block.

    tp-plan-memory then keeps only the live blocks: the one held, the one
    arriving, and the destination.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPInsertRebalance : Pass<"tp-insert-rebalance", "::mlir::ModuleOp"> {
  let summary = "Mark the dimensions whose blocks can move between ranks";
  let description = [{
    Per-rank programs only (after tp-partition). A rebalance point is a
    dimension split over one grid axis whose blocks can move between the
    ranks of that axis, or be left out on one, without changing any
    collective: in a Megatron pair, the column-parallel output features and
    the row-parallel reduction features they feed (attention heads; MLP
    features with their biases), whose partial sums already meet in the
    pair's all-reduce or reduce-scatter.

    From every parameter dimension split over one axis, the pass follows the
    split through the ops' sharding rules, forward and backward, to the
    gradients and AdamW moments: the blocks must stay the major part of each
    dimension they reach, each op must compute the dimension split, and no
    op that exchanges blocks between ranks (a collective, a ring shift, a
    vocabulary-parallel or split-statistics kernel) may see it. The finest
    block every op allows is the point's unit (one attention head, one key/
    value head with its query heads); where any split suits the ops (MLP
    features) `granularity` sets it.

    Each point becomes a `tp.rebalance_point` (blocks, grid axis, capacity
    per rank = the even share times 1 + `headroom`, at most all blocks), and
    every dimension it reaches is resized for `capacity` blocks and tagged
    (`tp.rebalance_dims`), so tp-plan-memory plans every buffer for the most
    a rank may hold. A parameter dimension that cannot move is reported with
    the op that stops it, as a remark.
  }];
  let options = [
    Option<"granularity", "granularity", "int64_t", "64",
           "Elements per block of a dimension any split suits (MLP "
           "features); the gcd with the per-rank size when it does not "
           "divide it">,
    Option<"headroom", "headroom", "double", "0.5",
           "Blocks a rank may hold beyond its even share, as a fraction of "
           "that share">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPFuseAttention : Pass<"tp-fuse-attention", "::mlir::ModuleOp"> {
  let summary = "Fuse causal attention into tp.attention";
  let description = [{
    Rewrites `tp.matmul(q, k, transpose_rhs, alpha)` -> causal `tp.softmax`
    -> `tp.matmul(probs, v)`, each feeding only the next, into one
    `tp.attention(q, k, v)` (FlashAttention's fusion): the [.., S, S] scores
    and probabilities are never stored, and tp-autodiff then builds one
    `tp.attention_grad`, which recomputes the probabilities block by block
    from the saved log-sum-exp instead of keeping them for the backward. Runs
    on the global program, before differentiation.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPFuseElementwise : Pass<"tp-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "Fuse elementwise chains: the SwiGLU gate, residual add + norm";
  let description = [{
    Before differentiation, on the global program: `tp.mul(tp.silu(gate),
    up)` becomes `tp.swiglu(gate, up)` (its VJP recomputes silu(gate), so
    the [tokens, ffn] silu output is not kept for the backward), and a
    `tp.layer_norm` or `tp.rms_norm` of a `tp.add` of two tensors of one
    shape (the residual stream) becomes `tp.add_layer_norm` /
    `tp.add_rms_norm` with the sum and the normalised sum as results (its
    VJP is one norm gradient that adds the residual stream's gradient). A
    fused op's sharding rule is the union of its parts', so every scheme
    and its communication stay as they were. With `across-layers=false` an
    add that ends one layer (`tp.layer`) stays apart from the next layer's
    norm, so that a pipeline cut between them sends only the residual
    stream.
  }];
  let options = [
    Option<"acrossLayers", "across-layers", "bool", "true",
           "Fuse a layer's last residual add with the next layer's norm">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPFuseProducts : Pass<"tp-fuse-products", "::mlir::ModuleOp"> {
  let summary = "Fuse products with their epilogues on the per-rank program";
  let description = [{
    After tp-partition, where every collective is placed: `add(matmul(x, w),
    bias)` (optionally then `gelu`) becomes `tp.linear` (cuBLASLt's bias and
    GELU epilogues); `gelu_grad(matmul(a, b), pre)` with its bias gradient
    (`reduce_sum` over all but the last dim) becomes `tp.linear_gelu_grad`
    (DGELU_BGRAD); `cross_entropy(matmul(h, w))` with its gradient and the
    gradient's two products becomes `tp.linear_cross_entropy` and
    `tp.linear_cross_entropy_grad`, which recompute the logits `vocab-chunk`
    columns at a time and never store the [tokens, vocab] logits. Only a
    product the rank consumes itself fuses (a partial sum is all-reduced
    first), so the communication is unchanged.
  }];
  let options = [
    Option<"vocabChunk", "vocab-chunk", "int64_t", "4096",
           "Vocabulary columns per chunk of a fused head">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPMixedPrecision : Pass<"tp-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "Store activations in bf16 (Megatron-LM / autocast mixed "
                "precision)";
  let description = [{
    Runs before tp-autodiff on the forward functions (@forward, @loss and the
    generation programs). Activations, and through the vector-Jacobian
    products their gradients, are stored in bf16; parameters stay f32
    masters. A non-view op that reads a parameter (or a view of one) as an
    activation reads a bf16 copy (`tp.convert`, one per parameter and
    function); norms and embeddings read their gains and tables as stored
    (MixedPrecisionOpInterface). Ops whose float operands are all f32 values
    other than parameters (the loss arithmetic) stay f32, as do statistics
    (the loss, attention's log-sum-exp). KV caches are stored in bf16.
    After differentiation the conversions of weight gradients fold into
    their products and sums, which then accumulate in f32 (canonicalization
    of tp.convert): f32 gradients, AdamW moments and update.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect",
                           "::mlir::func::FuncDialect"];
}

def TPMatmulPrecision : Pass<"tp-matmul-precision", "::mlir::ModuleOp"> {
  let summary = "Set the operand precision of every matrix product";
  let description = [{
    Mixed precision: every `tp.matmul` (and fused `tp.attention` and its
    gradient) gets `precision = bf16` (or `tf32`): its operands are rounded to that type before the product, which
    accumulates in f32. Everything else, the weights and AdamW's moments
    included, stays f32. `precision=f32` removes the attribute. The plan
    records it per step; a backend computes the product in that type (the
    CPU rounds the operands and runs SGEMM, so it is the reference for the
    GPU's bf16 and TF32 GEMMs).
  }];
  let options = [
    Option<"precision", "precision", "::mlir::tp::MatmulPrecision",
           "::mlir::tp::MatmulPrecision::F32", "Operand precision",
           "::mlir::tp::matmulPrecisionValues()">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPReportCommunication
    : Pass<"tp-report-communication", "::mlir::ModuleOp"> {
  let summary = "Report each function's communication volume per rank";
  let description = [{
    Sums the bytes each rank moves in every collective, by the ring rule the
    runtime also counts with: over a group of n ranks, an all-gather or a
    reduce-scatter moves (n-1)/n of the full (unsharded over the group)
    tensor, an all-reduce 2(n-1)/n of it, an all-to-all (n-1)/n of the local
    tensor, a local split nothing. A `tp.cross_entropy` or `tp.cross_entropy_grad` with
    logits split along the vocabulary counts as the all-gather of 3 floats
    per token that its step performs. Emits one remark per function with the
    bytes and calls per collective kind and the total.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPSimulate : Pass<"tp-simulate", "::mlir::ModuleOp"> {
  let summary = "Predict each function's run time per rank on a cluster";
  let description = [{
    Runs the step simulator (compiler/include/tpc/Simulate/StepSimulator.h)
    on every function of a per-rank program (after tp-partition; with
    tp-plan-memory's arena when it ran) for the cluster described in the
    JSON file `cluster` (docs/simulator.md), and emits one remark per
    function: the predicted time of one run, split into matrix products,
    other kernels and exchanges (and how much of those no compute hides),
    the products' FLOPs, and the bytes one rank holds.
  }];
  let options = [
    Option<"clusterPath", "cluster", "std::string", "",
           "The cluster description (JSON)">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPEmbeddingCache : Pass<"tp-embedding-cache", "::mlir::ModuleOp"> {
  let summary = "Keep input embedding tables in host memory, cached by rows";
  let description = [{
    On the per-rank program (after tp-partition): every parameter a
    `tp.embedding` reads as its table, and nothing but the embedding and its
    AdamW update reads, becomes a cache of `ratio` of the rank's block of
    rows (docs/embedding-cache.md). The argument and its moments shrink to
    the cache's rows and carry `tp.embedding_cache = {rows, ratio}`; each
    function that reads the table takes its slot map (`tp.input =
    "cache_map"`, one slot or -1 per row of the block), which the embedding
    and its gradient index the cache with; @train_step also takes the slots
    of the rows its batch uses (`"cache_rows"`, by ascending row, -1 after):
    the gradient's squared norm sums those rows in that order
    (`tp.norm_squared_rows`) and AdamW updates only them
    (`tp.adamw_rows`, lazy Adam), so that every ratio computes the same
    values in the same order as ratio 1, the table resident.

    A table that anything else reads (GPT-2's `wte`, tied to the head) is
    an error, as is a table whose gradient reaches its update through
    anything but sums and all-reduces. A gradient a function returns
    (@gradients) stays whole: the embedding's gradient without a map is the
    block's.
  }];
  let options = [
    Option<"ratio", "ratio", "double", "1.0",
           "The share of each rank's rows of a table its cache holds, in "
           "(0, 1]">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPPartition : Pass<"tp-partition", "::mlir::ModuleOp"> {
  let summary = "Lower the global view to the per-rank (SPMD) program";
  let description = [{
    Rewrites every tensor type carrying a `#tp.dist` layout to the local
    shape one rank holds (each split dimension divided by its number of
    shards) and drops the layouts, so that the result is one program every
    rank runs. The `tp.grid` stays: collectives name it
    (`over @grid`) and size their groups from it, and parameters keep their
    layout on it as `tp.layout` (a module without a `tp.grid` runs on one
    rank). Types are rewritten with MLIR's AttrTypeReplacer, so every place a
    type appears (results, block arguments, signatures) changes at once.

    Communication must already be explicit: a remaining `tp.redistribute`
    or a pending partial sum is an error (collectives are inserted by the
    sharding passes). Uneven splits are not supported yet.

    A `tp.embedding` whose table is split along the vocabulary (its result
    partial over the same axes, as in Megatron's VocabParallelEmbedding)
    keeps those axes as `tp.vocab_axes`: each rank looks up only the ids in
    its block of rows and writes zeros for the rest. So does a
    `tp.cross_entropy` whose logits are split along the vocabulary (and
    nowhere else): each rank reduces its block of columns to per-token
    statistics that one all-gather inside the step combines into the loss.
  }];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

def TPPlanMemory : Pass<"tp-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Assign activation buffers with liveness-based reuse";
  let description = [{
    For each function, places every op result in one per-rank arena: a
    buffer lives from its defining op to its last use (function results to
    the end), and buffers whose lifetimes overlap never share bytes. Placement
    is greedy by size, each buffer at the lowest aligned offset that fits
    (as in TFLite's arena planner). A `tp.reshape` result aliases its input's
    buffer instead of taking a new one.

    Each op gets `tp.buffer_offsets` (one byte offset per result; -1 for a reshape
    of a function argument, which aliases the argument's storage); each
    function gets `tp.arena_bytes`, the peak activation memory.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "64",
           "Byte alignment of every buffer">,
    Option<"reuse", "reuse", "bool", "true",
           "Share bytes between buffers whose lifetimes do not overlap "
           "(false: every buffer gets its own bytes, for debugging)">,
  ];
  let dependentDialects = ["::mlir::tp::TPDialect"];
}

#endif // TPC_TRANSFORMS_PASSES_TD
