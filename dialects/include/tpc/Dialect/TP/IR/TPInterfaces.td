//===- TPInterfaces.td - tp op interfaces ------------------*- tablegen -*-===//

#ifndef TPC_DIALECT_TP_IR_TPINTERFACES_TD
#define TPC_DIALECT_TP_IR_TPINTERFACES_TD

include "mlir/IR/OpBase.td"

def TP_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op's sharding rule in einsum style: the factors of its iteration
    space, which factors index each operand and result dimension, and how
    each factor may be split (see `ShardingRule`). Every scheme and the cost
    model derive what an op needs from this rule alone.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Returns this op's sharding rule for its current types.",
      /*retTy=*/"::mlir::tp::ShardingRule",
      /*methodName=*/"getShardingRule",
      /*args=*/(ins)>,
    InterfaceMethod<
      /*desc=*/[{
        Whether this op's kernel computes its shard correctly when `factor`
        of its rule `rule` is split across ranks (each result then partial
        over the split reduction factors it lacks). By default a parallel or
        reduction factor is, a statistics or replicated one is not. Ops
        override it where the kernel depends on global positions or counts
        (a causal softmax's last two dims, rotary positions, a mean, a
        cross-entropy's tokens) or combines per-rank statistics itself (a
        cross-entropy's vocabulary). Sharding passes assign only such splits;
        tp-partition rejects others.
      }],
      /*retTy=*/"bool",
      /*methodName=*/"isSplittableFactor",
      /*args=*/(ins "const ::mlir::tp::ShardingRule &":$rule,
                   "int64_t":$factor),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{
        return rule.hasSplittableKind(factor);
      }]>,
  ];
}

def TP_PlanOpInterface : OpInterface<"PlanOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    The runtime kernel that executes this op in a plan. The dialect does not
    depend on the runtime's plan schema: the kind is the name of a
    `tpc.plan.OpKind` enumerator (runtime/schema), which the plan emitter
    maps 1:1 by name, so a misspelt kind is an emission error, not a
    silently wrong kernel. An empty kind means the op has no kernel and must
    be lowered before emission (tp.redistribute).
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Returns the plan op kind's name, or an empty string.",
      /*retTy=*/"::llvm::StringRef",
      /*methodName=*/"getPlanOpKind",
      /*args=*/(ins)>,
  ];
}

def TP_VocabParallelOpInterface : OpInterface<"VocabParallelOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op whose kernel can run with its vocabulary dimension split over grid
    axes (Megatron-LM's vocabulary-parallel embedding and cross-entropy and
    their gradients). tp-partition records the axes on the per-rank op
    (`tp.vocab_axes`) so that each rank's kernel knows its block, and the
    communication report counts what the kernel gathers by itself.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        The grid axes that split the vocabulary in the op's current layouts
        (empty when none do), or failure, with a diagnostic on the op, when
        the layouts describe no vocabulary-parallel form the kernel runs.
      }],
      /*retTy=*/"::mlir::FailureOr<::llvm::SmallVector<int64_t>>",
      /*methodName=*/"getVocabParallelAxes",
      /*args=*/(ins)>,
    InterfaceMethod<
      /*desc=*/[{
        The all-gathers the kernel itself issues over its vocabulary group
        (outside any collective op) per run: for each, the floats it
        gathers from each rank per row of operand 0 (per token).
      }],
      /*retTy=*/"::llvm::SmallVector<int64_t>",
      /*methodName=*/"getKernelGathers",
      /*args=*/(ins),
      /*methodBody=*/"",
      /*defaultImplementation=*/"return {};">,
  ];
}

def TP_SplitStatisticsOpInterface : OpInterface<"SplitStatisticsOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    A normalisation over the last dimension (or its gradient) whose kernel
    can run with that dimension split over grid axes, as the layer norms of
    Optimus (2D) and of the 3D scheme do: each rank reduces its features to
    per-row partial statistics, and all-gathers of those (in block order, so
    every rank combines them alike) give every rank the whole row's. The
    features' factor is a statistics factor that these ops declare
    splittable; tp-partition records the axes on the per-rank op
    (`tp.feature_axes`), and the communication report counts the gathers.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        The grid axes that split the features (the last dimension) in the
        op's current layouts (empty when none do), or failure, with a
        diagnostic on the op, when row-shaped values or gamma-shaped values
        are split differently.
      }],
      /*retTy=*/"::mlir::FailureOr<::llvm::SmallVector<int64_t>>",
      /*methodName=*/"getFeatureAxes",
      /*args=*/(ins)>,
    InterfaceMethod<
      /*desc=*/[{
        The all-gathers the kernel issues per run when its features are
        split: for each, the floats it gathers from each rank per row.
      }],
      /*retTy=*/"::llvm::SmallVector<int64_t>",
      /*methodName=*/"getKernelGathers",
      /*args=*/(ins)>,
  ];
}

def TP_TokenMeanOpInterface : OpInterface<"TokenMeanOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op that averages over tokens (a mean loss, or its gradient) whose
    kernel divides by the tokens it holds. With the tokens split over S
    ranks each rank's shard must contribute 1/S of its local mean, so
    tp-partition asks the op to rescale itself before the layouts vanish.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        Ranks splitting the tokens in the op's current layouts (1 when whole)
        on a grid of shape `gridShape`.
      }],
      /*retTy=*/"int64_t",
      /*methodName=*/"getTokenShards",
      /*args=*/(ins "::llvm::ArrayRef<int64_t>":$gridShape)>,
    InterfaceMethod<
      /*desc=*/[{
        Makes the op compute `factor` times its current result, with ops
        inserted through `builder` (a tp.scale of the loss, or of the
        incoming loss gradient).
      }],
      /*retTy=*/"void",
      /*methodName=*/"scaleTokenMean",
      /*args=*/(ins "::mlir::OpBuilder &":$builder, "double":$factor)>,
  ];
}

def TP_StorageAliasOpInterface : OpInterface<"StorageAliasOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op some of whose results may live in an operand's storage instead of
    new memory: a reshape's result is a view of its input's bytes (always);
    AdamW may write the parameter and moments it reads (when tp-plan-memory
    finds the old values dead). tp-plan-memory and the plan emitter ask this
    interface, and the runtime's op table states the same rule.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"The operand whose storage result `result` may reuse.",
      /*retTy=*/"::std::optional<unsigned>",
      /*methodName=*/"getStorageOperand",
      /*args=*/(ins "unsigned":$result)>,
    InterfaceMethod<
      /*desc=*/[{
        True if the results always share their operands' storage (a view),
        false if sharing is the memory planner's choice (an in-place
        update).
      }],
      /*retTy=*/"bool",
      /*methodName=*/"alwaysSharesStorage",
      /*args=*/(ins)>,
  ];
}

def TP_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    The op's vector-Jacobian product, which tp-autodiff applies to each op
    of the forward in reverse order. The implementations live in TPVJP.cpp.
    An op without this interface cannot be differentiated.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        Builds, at `builder`'s insertion point, the cotangents of this op's
        operands from `resultCotangents` (one per result).
        `operands` and `results` are the primal values to read: this op's
        own, or their recomputations when the backward rematerialises the
        forward. `operandCotangents` comes with one null entry per operand;
        the method sets the entries of the operands that get a cotangent.
        A result that does not reach the loss has a null cotangent.
      }],
      /*retTy=*/"::llvm::LogicalResult",
      /*methodName=*/"buildVJP",
      /*args=*/(ins "::mlir::OpBuilder &":$builder,
                   "::mlir::ValueRange":$operands,
                   "::mlir::ValueRange":$results,
                   "::mlir::ValueRange":$resultCotangents,
                   "::llvm::MutableArrayRef<::mlir::Value>":$operandCotangents)>,
  ];
}

def TP_MatrixProductOpInterface : OpInterface<"MatrixProductOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    An op made of matrix products (a matmul, a fused attention and its
    gradient): what it costs in floating-point operations, and the
    precision its products' operands may be rounded to (its optional
    `precision` attribute: bf16, or tf32) while they accumulate in f32
    (tp-matmul-precision sets it on every such op).
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Sets the operands' precision (null: f32).",
      /*retTy=*/"void",
      /*methodName=*/"setOperandPrecision",
      /*args=*/(ins "::mlir::TypeAttr":$precision),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ $_op.setPrecisionAttr(precision); }]>,
    InterfaceMethod<
      /*desc=*/[{
        The floating-point operations of its products for its current
        (global or per-rank) types: 2 per multiply-add, causally masked
        products counted for the half they compute.
      }],
      /*retTy=*/"double",
      /*methodName=*/"getProductFlops",
      /*args=*/(ins)>,
    InterfaceMethod<
      /*desc=*/[{
        The elements of the score matrices (queries x keys per head and
        sequence) an attention's products make; 0 for other products. An
        implementation that materialises them (Megatron-LM before flash
        attention) writes and reads them in memory: the step simulator's
        `materialized_attention` costs that traffic.
      }],
      /*retTy=*/"double",
      /*methodName=*/"getScoreElements",
      /*args=*/(ins),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return 0; }]>,
    InterfaceMethod<
      /*desc=*/[{
        The floating-point operations of an implementation that materialises
        the scores: every score computed (none causally skipped), and a
        backward that reads the stored probabilities instead of recomputing
        them.
      }],
      /*retTy=*/"double",
      /*methodName=*/"getMaterializedProductFlops",
      /*args=*/(ins),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return $_op.getProductFlops(); }]>,
    InterfaceMethod<
      /*desc=*/[{
        Whether its score matrices are those of an attention's backward
        (gradients of the probabilities and scores) rather than its forward.
      }],
      /*retTy=*/"bool",
      /*methodName=*/"isScoreGradient",
      /*args=*/(ins),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return false; }]>,
    InterfaceMethod<
      /*desc=*/"The precision of its products' operands (null: f32).",
      /*retTy=*/"::mlir::TypeAttr",
      /*methodName=*/"getOperandPrecision",
      /*args=*/(ins),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return $_op.getPrecisionAttr(); }]>,
  ];
}

def TP_MixedPrecisionOpInterface : OpInterface<"MixedPrecisionOpInterface"> {
  let cppNamespace = "::mlir::tp";
  let description = [{
    Element types under mixed precision. Every kernel computes in f32 and
    rounds each result once, to nearest even, into its result's element
    type. An op's float operands are activations, which share one element
    type (the op's storage type), or values it reads at whatever precision
    they are stored in (a norm's gain and bias, an embedding table, a loss
    gradient, a log-sum-exp), so f32 master weights feed those without a
    bf16 copy. A result's type follows the activations, is fixed by the op
    (a loss, a log-sum-exp: f32), or is free: an op that accumulates in f32
    (a product, a sum, an embedding lookup or its gradient) stores its
    accumulator in whatever float type its result has, which is how a
    weight's gradient accumulates in f32 from bf16 activations
    (Megatron-LM's main_grad). tp-mixed-precision, the canonicalization of
    tp.convert and the verifiers read it.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        Whether float operand `index` is read at its own precision instead of
        sharing the activations' element type.
      }],
      /*retTy=*/"bool",
      /*methodName=*/"readsOperandAsStored",
      /*args=*/(ins "unsigned":$index),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return false; }]>,
    InterfaceMethod<
      /*desc=*/[{
        Whether result `index` may have any float element type (the op
        rounds its f32 accumulator into it).
      }],
      /*retTy=*/"bool",
      /*methodName=*/"hasFreeResultType",
      /*args=*/(ins "unsigned":$index),
      /*methodBody=*/[{}],
      /*defaultImplementation=*/[{ return false; }]>,
  ];
  let verify = [{
    return ::mlir::tp::verifyActivationElementTypes($_op);
  }];
}

//===----------------------------------------------------------------------===//
// Traits (C++ side in TPTraits.h)
//===----------------------------------------------------------------------===//

class TP_OpTrait<string name> : NativeOpTrait<name> {
  let cppNamespace = "::mlir::OpTrait::tp";
}

// Linear in the operands jointly: pending partial sums over the same grid
// axes pass through to the result.
def TP_PassesPartialSums : TP_OpTrait<"PassesPartialSums">;

// A collective that sums a pending partial of its operand.
def TP_ReducesPartialSums : TP_OpTrait<"ReducesPartialSums">;

// The result is operand 0's elements rearranged, a subset of them, or the
// same elements in another precision.
def TP_IsView : TP_OpTrait<"IsView">;

// Exchanges blocks between the ranks of a group: their shapes must agree.
def TP_NeedsUniformShards : TP_OpTrait<"NeedsUniformShards">;

// Every rank of the group gets the same result.
def TP_UniformResult : TP_OpTrait<"UniformResult">;

// A ring step: each rank handles one rank-dependent block of the same data.
def TP_RingStep : TP_OpTrait<"RingStep">;

#endif // TPC_DIALECT_TP_IR_TPINTERFACES_TD
