//===- TPOps.td - tp dialect operations --------------------*- tablegen -*-===//

#ifndef TPC_DIALECT_TP_IR_TPOPS_TD
#define TPC_DIALECT_TP_IR_TPOPS_TD

include "tpc/Dialect/TP/IR/TPBase.td"
include "tpc/Dialect/TP/IR/TPAttrs.td"
include "tpc/Dialect/TP/IR/TPInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def TP_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def TP_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def TP_F32Scalar : 0DTensorOf<[F32]>;
def TP_StepScalar : 0DTensorOf<[I64]>;
def TP_HyperparameterVector : TensorRankOf<[F32], [1]>;
def TP_AnyTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

// The op's vector-Jacobian product (TPVJP.cpp).
defvar TP_HasVJP = DeclareOpInterfaceMethods<TP_DifferentiableOpInterface>;

// Made of matrix products: FLOPs and operand precision (TPOps.cpp).
defvar TP_HasMatrixProducts =
    DeclareOpInterfaceMethods<TP_MatrixProductOpInterface>;
// An attention's products, whose score matrices a materialising
// implementation stores.
defvar TP_HasAttentionProducts =
    DeclareOpInterfaceMethods<TP_MatrixProductOpInterface,
        ["getScoreElements", "getMaterializedProductFlops", "isScoreGradient"]>;

// With AllTypesMatch: the result type is the input's, layout included.
defvar TP_InferSameType = DeclareOpInterfaceMethods<InferTypeOpInterface>;

// Result types inferred from the operands' shapes, element types and the
// op's attributes: global shapes before tp-partition, local ones after. A
// result's #tp.dist layout is the sharding passes' choice, so it is not
// compared. Ops whose result shape is their own specification (reshape,
// slice, pad, constant, embedding_grad's vocabulary, collectives) keep
// written result types.
def TP_InferResultShapes : InferTypeOpAdaptorBase<[{
    static bool isCompatibleReturnTypes(::mlir::TypeRange l,
                                        ::mlir::TypeRange r) {
      return ::mlir::tp::haveSameShapesAndElementTypes(l, r);
    }
  }]>;

// As TP_InferResultShapes for an op whose results' element types are free
// (MixedPrecisionOpInterface): inference gives the operands' type, and a
// written result may have any float type of the inferred shape.
def TP_InferShapesFreeElementType : InferTypeOpAdaptorBase<[{
    static bool isCompatibleReturnTypes(::mlir::TypeRange l,
                                        ::mlir::TypeRange r) {
      return ::mlir::tp::haveSameShapesAndFloatTypes(l, r);
    }
  }]>;

// Every tensor a tp op reads or writes has positive sizes and at most
// kMaxTensorElements elements (TensorSizes.h).
def TP_TensorSizesChecked : NativeOpTrait<"TensorSizesChecked"> {
  let cppNamespace = "::mlir::tp";
}

class TP_Op<string mnemonic, list<Trait> traits = []>
    : Op<TP_Dialect, mnemonic, !listconcat(traits, [TP_TensorSizesChecked])>;

// A tensor op of the training step: pure, shape-checked, with a sharding rule,
// and with every #tp.dist layout of its types checked against its grid.
// `ruleMethods` and `precisionMethods` list the ShardingRuleOpInterface and
// MixedPrecisionOpInterface methods with a default that the op overrides.
// A collective (`pure` = 0) declares its memory effects instead (see
// TP_CollectiveOp).
class TP_ComputeOp<string mnemonic, list<Trait> traits = [],
                   list<string> ruleMethods = [],
                   list<string> precisionMethods = [], bit pure = 1>
    : TP_Op<mnemonic, !listconcat(traits, !if(pure, [Pure], []), [
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface, ruleMethods>,
        DeclareOpInterfaceMethods<TP_MixedPrecisionOpInterface,
                                  precisionMethods>,
        TP_PlanOpInterface,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  // The tpc.plan.OpKind enumerator that runs this op (see PlanOpInterface);
  // empty for an op that must be lowered before emission. An op that sets
  // its own extraClassDeclaration must keep getPlanOpKind (the build fails
  // otherwise).
  string planOpKind = "";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::llvm::StringRef getPlanOpKind() { return "}] # planOpKind # [{"; }
  }];
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verifySymbolUses(
        ::mlir::SymbolTableCollection &symbolTables) {
      // After every op verified: the rule may assume well-formed types.
      if (::mlir::failed(getShardingRule().verify(getOperation())))
        return ::mlir::failure();
      return ::mlir::tp::verifyDistLayouts(getOperation(), symbolTables);
    }
  }];
}

class TP_UnaryOp<string mnemonic, string desc>
    : TP_ComputeOp<mnemonic, [AllTypesMatch<["input", "result"]>,
                              TP_InferSameType, TP_HasVJP]> {
  let summary = desc;
  let arguments = (ins TP_FloatTensor:$input);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 0;
}

class TP_UnaryGradOp<string mnemonic, string desc>
    : TP_ComputeOp<mnemonic, [TP_InferResultShapes]> {
  let summary = desc;
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$input);
  let results = (outs TP_FloatTensor:$input_grad);
}

class TP_BinaryOp<string mnemonic, string desc, list<Trait> traits = []>
    : TP_ComputeOp<mnemonic, !listconcat(traits, [
        TP_InferResultShapes, TP_HasVJP])> {
  let summary = desc;
  let description = [{
    Elementwise with NumPy-style broadcasting: operands are aligned on their
    trailing dimensions, and a dimension of size 1 (or a missing leading one)
    is broadcast to the result's size.
  }];
  let arguments = (ins TP_FloatTensor:$lhs, TP_FloatTensor:$rhs);
  let results = (outs TP_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Grid
//===----------------------------------------------------------------------===//

def TP_GridOp : TP_Op<"grid", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A named device grid";
  let description = [{
    Declares the grid that `#tp.dist` layouts refer to. Ranks map to grid
    coordinates in row-major order.

    ```mlir
    tp.grid @g [2, 2, 2]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DenseI64ArrayAttr:$shape);
  let assemblyFormat = "$sym_name $shape attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumRanks() const;
  }];
}

def TP_RebalancePointOp : TP_Op<"rebalance_point", [Symbol,
    HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A dimension whose blocks can move between the ranks of an "
                "axis";
  let description = [{
    Declared by tp-insert-rebalance in a per-rank program: a dimension split
    over grid axis `axis` whose `blocks` blocks (one attention head, or a
    group of MLP features) can move between the ranks of that axis, or be
    left out on one of them, without changing any collective. Each rank
    starts with blocks / (axis size) of them in order and can hold up to
    `capacity`: every tensor dimension tagged with this point
    (`tp.rebalance_dims`) is sized for `capacity` blocks, and the runtime
    runs kernels on the blocks a rank holds.

    ```mlir
    tp.rebalance_point @transformer.h.0.mlp over @tp axis 0 blocks 4 capacity 3
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, FlatSymbolRefAttr:$grid,
                       I64Attr:$axis, I64Attr:$blocks, I64Attr:$capacity);
  let assemblyFormat = [{
    $sym_name `over` $grid `axis` $axis `blocks` $blocks `capacity` $capacity
    attr-dict
  }];
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

def TP_EmbeddingOp
    : TP_ComputeOp<"embedding", [TP_InferShapesFreeElementType, TP_HasVJP,
                                 DeclareOpInterfaceMethods<
                                     TP_VocabParallelOpInterface>], [],
                   ["readsOperandAsStored", "hasFreeResultType"]> {
  let planOpKind = "Embedding";
  let summary = "Embedding lookup: result[t..., :] = table[ids[t...], :]";
  let description = [{
    With `slot_map` (set by tp-embedding-cache on a per-rank program), the
    table is a cache holding some rows of the rank's block:
    `slot_map[row]` is the table row (cache slot) holding block row `row`,
    and the id of every looked-up row must be cached (the runtime fetches a
    batch's rows before it runs). The ids, the vocabulary split and the
    block are as without it; the map has the block's rows.
  }];
  let arguments = (ins TP_FloatTensor:$table, TP_IndexTensor:$ids,
                       Optional<TP_IndexTensor>:$slot_map);
  let results = (outs TP_FloatTensor:$result);
}

def TP_EmbeddingGradOp
    : TP_ComputeOp<"embedding_grad", [DeclareOpInterfaceMethods<
                                          TP_VocabParallelOpInterface>], [],
                   ["hasFreeResultType"]> {
  let planOpKind = "EmbeddingGrad";
  let summary = "Embedding gradient: scatter-add of result_grad rows by ids";
  let description = [{
    `table_grad[v, :] = sum over t with ids[t] == v of result_grad[t, :]`.
    The vocabulary size comes from the result type. With `slot_map` (a
    cached table, see tp.embedding), the sum for id v lands in row
    `slot_map[v]` of the cache-shaped result.
  }];
  let arguments = (ins TP_FloatTensor:$result_grad, TP_IndexTensor:$ids,
                       Optional<TP_IndexTensor>:$slot_map);
  let results = (outs TP_FloatTensor:$table_grad);
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def TP_MatmulOp : TP_ComputeOp<"matmul", [TP_InferShapesFreeElementType,
                                          TP_HasVJP, TP_HasMatrixProducts], [],
                              ["hasFreeResultType"]> {
  let planOpKind = "Matmul";
  let summary = "(Batched) matrix product with optional transposes";
  let description = [{
    `lhs` is `[b..., M, K]` (`[b..., K, M]` with `transpose_lhs`), `rhs` is
    `[b..., K, N]` (`[b..., N, K]` with `transpose_rhs`), the result is
    `[b..., M, N]`. Either side may have no batch dimensions (a weight shared
    by every batch); otherwise both have the same number and each pair is
    equal or 1, broadcast NumPy-style (grouped-query attention shares one
    key/value head across a group of query heads this way). The product is
    scaled by `alpha` (as in BLAS), which is where canonicalization folds a
    following `tp.scale`, such as attention's 1/sqrt(head_dim).

    The product accumulates in f32 and is rounded once into the result's
    element type, which may differ from the operands' (bf16 activations
    give an f32 weight gradient: MixedPrecisionOpInterface). `precision`
    (absent: the operands' own) is the type both operands are rounded to
    before the product: `bf16`, or `tf32`, the matrix units' float32 mode,
    on f32 tensors (tp-matmul-precision sets it).
  }];
  let arguments = (ins TP_FloatTensor:$lhs, TP_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_FloatTensor:$result);
}

// Products fused with what follows them, formed by tp-fuse-products on the
// per-rank program (where every collective is known: a product whose result
// is summed across ranks before its bias is never fused). The contraction
// cannot split: the epilogue needs the whole sum.

def TP_LinearOp : TP_ComputeOp<"linear", [TP_HasVJP, TP_HasMatrixProducts],
    ["isSplittableFactor"]> {
  let planOpKind = "Linear";
  let summary = "Matrix product plus bias, optionally then GELU";
  let description = [{
    `preactivation = input weight + bias` and `result = gelu(preactivation)`
    with `gelu`, else `result = preactivation`: cuBLASLt's bias and GELU
    epilogues. A GELU linear may return `preactivation` too, for the
    backward's GELU gradient (GELU_AUX_BIAS); without a use it is dropped. `input` is `[b..., M, K]`, `weight` `[K, N]`
    (`[N, K]` with `transpose_rhs`), `bias` `[N]`. The product accumulates
    in f32 and the epilogue computes in f32; each result is rounded once.
    `precision` rounds the product's operands as on tp.matmul.
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$weight,
                       TP_FloatTensor:$bias, UnitAttr:$transpose_rhs,
                       UnitAttr:$gelu,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_FloatTensor:$result,
                      Optional<TP_FloatTensor>:$preactivation);
  let hasCanonicalizer = 1;
}

def TP_LinearGeluGradOp : TP_ComputeOp<"linear_gelu_grad", [
    TP_InferShapesFreeElementType, TP_HasMatrixProducts], ["isSplittableFactor"],
    ["readsOperandAsStored", "hasFreeResultType"]> {
  let planOpKind = "LinearGeluGrad";
  let summary = "The gradient at a GELU's input and its bias, from a product";
  let description = [{
    `preactivation_grad = gelu'(preactivation) * (lhs rhs)` and `bias_grad`
    its sum over every dim but the last: the gradient reaching a linear +
    bias + GELU (tp.linear with `gelu`) through the product `lhs rhs` that
    computes the gradient at its output (the next linear's input
    gradient), as cuBLASLt's DGELU_BGRAD epilogue. `lhs` is `[b..., M, K]`,
    `rhs` `[K, N]` (`[N, K]` with `transpose_rhs`), `preactivation`
    `[b..., M, N]`; `bias_grad` `[N]` may be stored wider than the
    activations (an f32 gradient from bf16 ones).
  }];
  let arguments = (ins TP_FloatTensor:$lhs, TP_FloatTensor:$rhs,
                       TP_FloatTensor:$preactivation, UnitAttr:$transpose_rhs,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_FloatTensor:$preactivation_grad,
                      TP_FloatTensor:$bias_grad);
}

def TP_LinearCrossEntropyOp : TP_ComputeOp<"linear_cross_entropy", [
    TP_InferResultShapes, TP_HasVJP, TP_HasMatrixProducts,
    DeclareOpInterfaceMethods<TP_VocabParallelOpInterface, ["getKernelGathers"]>,
    DeclareOpInterfaceMethods<TP_TokenMeanOpInterface>],
    ["isSplittableFactor"]> {
  let planOpKind = "LinearCrossEntropy";
  let summary = "Mean cross-entropy of a linear head, never storing the logits";
  let description = [{
    `cross_entropy(input weight, targets)` (`weight^T` with `transpose_rhs`)
    computed over `chunk` vocabulary columns at a time with an online
    softmax, so the `[tokens, vocab]` logits are never stored: `input` is
    `[b..., H]`, `weight` `[H, V]` (`[V, H]`), `targets` `[b...]`. Split
    along the vocabulary (Megatron-LM's vocabulary-parallel head), each
    rank computes its columns' statistics and all-gathers them, as
    tp.cross_entropy does. The logits are rounded to the activations' type
    before the softmax, as a stored logits tensor would be.
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$weight,
                       TP_IndexTensor:$targets, UnitAttr:$transpose_rhs,
                       I64Attr:$chunk,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_F32Scalar:$loss);
}

def TP_LinearCrossEntropyGradOp : TP_ComputeOp<"linear_cross_entropy_grad", [
    TP_InferShapesFreeElementType, TP_HasMatrixProducts,
    DeclareOpInterfaceMethods<TP_VocabParallelOpInterface, ["getKernelGathers"]>,
    DeclareOpInterfaceMethods<TP_TokenMeanOpInterface>],
    ["isSplittableFactor"], ["readsOperandAsStored", "hasFreeResultType"]> {
  let planOpKind = "LinearCrossEntropyGrad";
  let summary = "Gradients of tp.linear_cross_entropy w.r.t. input and weight";
  let description = [{
    With `logits_grad = cross_entropy_grad(input weight, targets,
    loss_grad)` recomputed `chunk` columns at a time (never stored):
    `input_grad = logits_grad weight^T` and `weight_grad = input^T
    logits_grad` (both in `weight`'s layout), each accumulating in f32.
    `weight_grad` may be stored wider than the activations (an f32
    gradient of bf16 ones).
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$weight,
                       TP_IndexTensor:$targets, TP_F32Scalar:$loss_grad,
                       UnitAttr:$transpose_rhs, I64Attr:$chunk,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_FloatTensor:$input_grad, TP_FloatTensor:$weight_grad);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def TP_AddOp : TP_BinaryOp<"add", "Elementwise sum", [TP_PassesPartialSums]> {
  let planOpKind = "Add";
}
def TP_SubOp
    : TP_BinaryOp<"sub", "Elementwise difference", [TP_PassesPartialSums]> {
  let planOpKind = "Sub";
}
def TP_MulOp : TP_BinaryOp<"mul", "Elementwise product"> {
  let planOpKind = "Mul";
}
def TP_DivOp : TP_BinaryOp<"div", "Elementwise quotient"> {
  let planOpKind = "Div";
}

def TP_ScaleOp : TP_ComputeOp<"scale", [AllTypesMatch<["input", "result"]>,
                                        TP_InferSameType,
                                        TP_PassesPartialSums, TP_HasVJP]> {
  let planOpKind = "Scale";
  let summary = "Multiplication by a compile-time constant";
  let arguments = (ins TP_FloatTensor:$input, F64Attr:$factor);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = "$input `,` $factor attr-dict `:` type($input)";
  let hasVerifier = 0;
  let hasCanonicalizer = 1;
}

def TP_ConvertOp : TP_ComputeOp<"convert", [TP_PassesPartialSums, TP_IsView,
                                            TP_HasVJP],
                               [], ["hasFreeResultType"]> {
  let planOpKind = "Convert";
  let summary = "Element type conversion, rounding to nearest even";
  let description = [{
    The input's values in the result's float type (same shape), rounded to
    nearest even when the result is narrower. tp-mixed-precision inserts
    them (the bf16 copy of a weight a product reads); a conversion of an
    accumulating op's only result folds into that op's result type.

    ```mlir
    %w16 = tp.convert %w : tensor<64x256xf32> -> tensor<64x256xbf16>
    ```
  }];
  let arguments = (ins TP_FloatTensor:$input);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def TP_GeluOp
    : TP_UnaryOp<"gelu", "GELU, tanh approximation (GPT-2's gelu_new)"> {
  let planOpKind = "Gelu";
}
def TP_SiluOp : TP_UnaryOp<"silu", "SiLU: x * sigmoid(x)"> {
  let planOpKind = "Silu";
}
def TP_ReluOp : TP_UnaryOp<"relu", "ReLU: max(x, 0)"> {
  let planOpKind = "Relu";
}
def TP_GeluGradOp : TP_UnaryGradOp<"gelu_grad", "Gradient of tp.gelu"> {
  let planOpKind = "GeluGrad";
}
def TP_SiluGradOp : TP_UnaryGradOp<"silu_grad", "Gradient of tp.silu"> {
  let planOpKind = "SiluGrad";
}
def TP_ReluGradOp : TP_UnaryGradOp<"relu_grad",
    "Gradient of tp.relu: result_grad where input > 0, else 0"> {
  let planOpKind = "ReluGrad";
}

def TP_SwigluOp : TP_ComputeOp<"swiglu", [TP_InferResultShapes, TP_HasVJP]> {
  let planOpKind = "Swiglu";
  let summary = "SwiGLU gate: silu(gate) * up";
  let description = [{
    LLaMA's gated MLP activation, elementwise on two tensors of one shape.
    tp-fuse-elementwise forms it from `tp.mul(tp.silu(gate), up)`; its VJP,
    tp.swiglu_grad, recomputes silu(gate), so the [tokens, ffn] silu output
    is never kept for the backward.
  }];
  let arguments = (ins TP_FloatTensor:$gate, TP_FloatTensor:$up);
  let results = (outs TP_FloatTensor:$result);
}

def TP_SwigluGradOp : TP_ComputeOp<"swiglu_grad", [TP_InferResultShapes]> {
  let planOpKind = "SwigluGrad";
  let summary = "Gradients of tp.swiglu w.r.t. gate and up";
  let description = [{
    `gate_grad = result_grad * up * silu'(gate)`,
    `up_grad = result_grad * silu(gate)`.
  }];
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$gate,
                       TP_FloatTensor:$up);
  let results = (outs TP_FloatTensor:$gate_grad, TP_FloatTensor:$up_grad);
}

//===----------------------------------------------------------------------===//
// Normalisation and attention pieces
//===----------------------------------------------------------------------===//

def TP_LayerNormOp
    : TP_ComputeOp<"layer_norm", [TP_InferResultShapes, TP_HasVJP,
        DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "LayerNorm";
  let summary = "Layer normalisation over the last dimension";
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$gamma,
                       TP_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs TP_FloatTensor:$result);
}

def TP_LayerNormGradOp
    : TP_ComputeOp<"layer_norm_grad", [TP_InferResultShapes,
        DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "LayerNormGrad";
  let summary = "Gradients of tp.layer_norm w.r.t. input, gamma and beta";
  let description = [{
    With `residual_grad` (the gradient reaching the normalised input by
    the residual stream: tp.add_layer_norm's VJP), `input_grad` is the
    norm's input gradient plus it, in one pass.
  }];
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$input,
                       TP_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon,
                       Optional<TP_FloatTensor>:$residual_grad);
  let results = (outs TP_FloatTensor:$input_grad, TP_FloatTensor:$gamma_grad,
                      TP_FloatTensor:$beta_grad);
}

def TP_RmsNormOp : TP_ComputeOp<"rms_norm", [TP_InferResultShapes, TP_HasVJP,
        DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "RmsNorm";
  let summary = "RMS normalisation over the last dimension (LLaMA)";
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$epsilon);
  let results = (outs TP_FloatTensor:$result);
}

def TP_RmsNormGradOp : TP_ComputeOp<"rms_norm_grad", [TP_InferResultShapes,
        DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "RmsNormGrad";
  let summary = "Gradients of tp.rms_norm w.r.t. input and gamma";
  let description = [{
    With `residual_grad`, `input_grad` is the norm's input gradient plus
    it (tp.add_rms_norm's VJP).
  }];
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$input,
                       TP_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$epsilon,
                       Optional<TP_FloatTensor>:$residual_grad);
  let results = (outs TP_FloatTensor:$input_grad, TP_FloatTensor:$gamma_grad);
}

def TP_AddLayerNormOp : TP_ComputeOp<"add_layer_norm", [TP_InferResultShapes,
        TP_HasVJP, DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "AddLayerNorm";
  let summary = "Residual add, then layer normalisation of the sum";
  let description = [{
    `sum = input + residual` (same shape) and `result = layer_norm(sum,
    gamma, beta)`: the residual stream and the next sublayer's normalised
    input in one pass over the tokens. tp-fuse-elementwise forms it from a
    tp.add whose sum a tp.layer_norm reads; its VJP is one
    tp.layer_norm_grad that adds the residual stream's gradient.
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$residual,
                       TP_FloatTensor:$gamma, TP_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs TP_FloatTensor:$sum, TP_FloatTensor:$result);
}

def TP_AddRmsNormOp : TP_ComputeOp<"add_rms_norm", [TP_InferResultShapes,
        TP_HasVJP, DeclareOpInterfaceMethods<TP_SplitStatisticsOpInterface>],
        ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "AddRmsNorm";
  let summary = "Residual add, then RMS normalisation of the sum (LLaMA)";
  let description = [{
    `sum = input + residual` and `result = rms_norm(sum, gamma)`, as
    tp.add_layer_norm.
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_FloatTensor:$residual,
                       TP_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$epsilon);
  let results = (outs TP_FloatTensor:$sum, TP_FloatTensor:$result);
}

def TP_SoftmaxOp : TP_ComputeOp<"softmax", [AllTypesMatch<["input", "result"]>,
                                            TP_InferSameType, TP_HasVJP],
                                ["isSplittableFactor"]> {
  let planOpKind = "Softmax";
  let summary = "Softmax over the last dimension, optionally causally masked";
  let description = [{
    With `causal`, the last two dimensions are `[queries, keys]` (equal
    sizes) and key j is masked out for query i when j > i.
  }];
  let arguments = (ins TP_FloatTensor:$input, UnitAttr:$causal);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def TP_SoftmaxGradOp : TP_ComputeOp<"softmax_grad", [TP_InferResultShapes]> {
  let planOpKind = "SoftmaxGrad";
  let summary = "Gradient of tp.softmax from its result: y * (dy - sum(dy * y))";
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$result);
  let results = (outs TP_FloatTensor:$input_grad);
}

def TP_AttentionOp : TP_ComputeOp<"attention", [TP_InferResultShapes, TP_HasVJP,
                                                TP_HasAttentionProducts]> {
  let planOpKind = "Attention";
  let summary = "Fused scaled dot-product attention (flash-attention style)";
  let description = [{
    `softmax(alpha * query key^T) value` without the scores ever stored:
    `query` is `[b..., Sq, D]`, `key` `[b..., Sk, D]` and `value`
    `[b..., Sk, Dv]` with the same number of batch dims, each of key's and
    value's equal to query's or 1 (broadcast, for grouped-query heads; key
    and value agree). `result` is `[b..., Sq, Dv]` and `logsumexp`
    `[b..., Sq]` (f32 whatever the operands' type), the log of each softmax
    row's denominator (of the scaled scores), which tp.attention_grad reads
    instead of the probabilities. With bf16 operands the probabilities are
    rounded to bf16 before they multiply `value`, as flash attention's
    kernels do.
    With `causal`, Sq == Sk and query i sees keys 0..i. With `positions`
    (`[b0, Sq]`, b0 query's first dim; instead of `causal`), the keys are a
    KV cache and query i of batch row n sees keys 0..positions[n, i]: one
    generation step's tokens against everything before them (a position
    beyond Sk is a run-time error). `precision` rounds
    the operands of both products (query, key; probabilities, value), as on
    tp.matmul. tp-fuse-attention forms it from tp.matmul, tp.softmax and
    tp.matmul.
  }];
  let arguments = (ins TP_FloatTensor:$query, TP_FloatTensor:$key,
                       TP_FloatTensor:$value,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha,
                       UnitAttr:$causal,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision,
                       Optional<TP_IndexTensor>:$positions);
  let results = (outs TP_FloatTensor:$result, TP_FloatTensor:$logsumexp);
}

def TP_AttentionGradOp : TP_ComputeOp<"attention_grad", [TP_InferResultShapes,
                                                         TP_HasAttentionProducts],
                                      [], ["readsOperandAsStored"]> {
  let planOpKind = "AttentionGrad";
  let summary = "Gradients of tp.attention w.r.t. query, key and value";
  let description = [{
    Recomputes the probabilities from `logsumexp` block by block. A key or
    value broadcast over a batch dim of the query gets the sum over it.
  }];
  let arguments = (ins TP_FloatTensor:$result_grad, TP_FloatTensor:$query,
                       TP_FloatTensor:$key, TP_FloatTensor:$value,
                       TP_FloatTensor:$result, TP_FloatTensor:$logsumexp,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha,
                       UnitAttr:$causal,
                       OptionalAttr<TypeAttrOf<AnyTypeOf<[BF16, TF32]>>>:$precision);
  let results = (outs TP_FloatTensor:$query_grad, TP_FloatTensor:$key_grad,
                      TP_FloatTensor:$value_grad);
}

def TP_RotaryOp : TP_ComputeOp<"rotary", [AllTypesMatch<["input", "result"]>,
                                          TP_InferSameType, TP_HasVJP],
                               ["isSplittableFactor"]> {
  let planOpKind = "Rotary";
  let summary = "Rotary position embedding (rotate-half form, as in LLaMA)";
  let description = [{
    `input` is `[..., S, D]` with D even; position p = index along S rotates
    the pair (x[i], x[i + D/2]) by p * theta^(-2i/D). `inverse` rotates by the
    opposite angle, which is the gradient of the forward rotation. With
    `positions` (`[b0, S]`, b0 input's first dim), row s of batch row n is at
    position positions[n, s] instead: a generation step's tokens continue a
    KV cache.
  }];
  let arguments = (ins TP_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta,
                       UnitAttr:$inverse,
                       Optional<TP_IndexTensor>:$positions);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`at` $positions^ `:` type($positions))? attr-dict `:` type($input)
  }];
}

def TP_CacheWriteOp
    : TP_ComputeOp<"cache_write", [AllTypesMatch<["cache", "result"]>,
                                   TP_InferSameType,
                                   DeclareOpInterfaceMethods<
                                       TP_StorageAliasOpInterface>]> {
  let planOpKind = "CacheWrite";
  let summary = "Writes a generation step's keys or values into a KV cache";
  let description = [{
    `cache` is `[b0, h..., S, D]`, `update` `[b0, h..., T, D]` and `positions`
    `[b0, T]`: the result is `cache` with row `positions[n, t]` of every
    `[n, h...]` replaced by the update's row `t`. The result is the cache's
    own storage, which the runtime keeps between runs of the generation
    programs; a position outside [0, S) is a run-time error.

    ```mlir
    %k1 = tp.cache_write %cache, %k, %positions
        : (tensor<2x4x64x16xf32>, tensor<2x4x1x16xf32>, tensor<2x1xi32>)
          -> tensor<2x4x64x16xf32>
    ```
  }];
  let arguments = (ins TP_FloatTensor:$cache, TP_FloatTensor:$update,
                       TP_IndexTensor:$positions);
  let results = (outs TP_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Shape manipulation and reductions
//===----------------------------------------------------------------------===//

def TP_ReshapeOp
    : TP_ComputeOp<"reshape", [TP_PassesPartialSums, TP_IsView, TP_HasVJP,
                               DeclareOpInterfaceMethods<
                                   TP_StorageAliasOpInterface>]> {
  let planOpKind = "Reshape";
  let summary = "Reshape to a static shape with the same number of elements";
  let arguments = (ins TP_FloatTensor:$input);
  let results = (outs TP_FloatTensor:$result);
}

def TP_SliceOp
    : TP_ComputeOp<"slice", [TP_PassesPartialSums, TP_IsView, TP_HasVJP]> {
  let planOpKind = "Slice";
  let summary = "Static slice: result = input[offsets[d] : offsets[d] + size[d]]";
  let description = [{
    The slice sizes come from the result type. Used for GPT-2's fused QKV
    projection and for taking the first S rows of a position table.
  }];
  let arguments = (ins TP_AnyTensor:$input, DenseI64ArrayAttr:$offsets);
  let results = (outs TP_AnyTensor:$result);
}

def TP_TransposeOp
    : TP_ComputeOp<"transpose", [TP_InferResultShapes, TP_PassesPartialSums,
                                 TP_IsView, TP_HasVJP]> {
  let planOpKind = "Transpose";
  let summary = "Permute dimensions: result dim i is input dim permutation[i]";
  let arguments = (ins TP_FloatTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs TP_FloatTensor:$result);
}

def TP_ReduceSumOp
    : TP_ComputeOp<"reduce_sum", [TP_InferShapesFreeElementType,
                                  TP_PassesPartialSums, TP_HasVJP], [],
                   ["hasFreeResultType"]> {
  let planOpKind = "ReduceSum";
  let summary = "Sum over the listed dimensions (which are removed)";
  let arguments = (ins TP_FloatTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs TP_FloatTensor:$result);
}

def TP_ReduceMeanOp
    : TP_ComputeOp<"reduce_mean", [TP_InferResultShapes, TP_HasVJP],
                   ["isSplittableFactor"]> {
  let planOpKind = "ReduceMean";
  let summary = "Mean over the listed dimensions (which are removed)";
  let arguments = (ins TP_FloatTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs TP_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def TP_CrossEntropyOp
    : TP_ComputeOp<"cross_entropy", [TP_InferResultShapes, TP_HasVJP,
                                     DeclareOpInterfaceMethods<
                                         TP_VocabParallelOpInterface,
                                         ["getKernelGathers"]>,
                                     DeclareOpInterfaceMethods<
                                         TP_TokenMeanOpInterface>],
                   ["isSplittableFactor"]> {
  let planOpKind = "CrossEntropy";
  let summary = "Mean softmax cross-entropy over tokens with integer targets";
  let arguments = (ins TP_FloatTensor:$logits, TP_IndexTensor:$targets);
  let results = (outs TP_F32Scalar:$loss);
}

def TP_CrossEntropyGradOp
    : TP_ComputeOp<"cross_entropy_grad", [TP_InferResultShapes,
                                          DeclareOpInterfaceMethods<
                                              TP_VocabParallelOpInterface,
                                              ["getKernelGathers"]>,
                                          DeclareOpInterfaceMethods<
                                              TP_TokenMeanOpInterface>],
                   ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "CrossEntropyGrad";
  let summary = "Gradient of tp.cross_entropy w.r.t. logits";
  let description = [{
    `(softmax(logits) - onehot(targets)) * loss_grad / num_tokens`.
  }];
  let arguments = (ins TP_FloatTensor:$logits, TP_IndexTensor:$targets,
                       TP_F32Scalar:$loss_grad);
  let results = (outs TP_FloatTensor:$logits_grad);
}

//===----------------------------------------------------------------------===//
// Optimiser
//===----------------------------------------------------------------------===//

def TP_AdamWOp
    : TP_ComputeOp<"adamw", [TP_InferResultShapes,
                             DeclareOpInterfaceMethods<
                                 TP_StorageAliasOpInterface>], [],
                   ["readsOperandAsStored"]> {
  let planOpKind = "AdamW";
  let summary = "One AdamW update of a parameter and its moments";
  let description = [{
    With t = step (1-based) and g = grad * grad_scale (the clipping factor),
    m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2,
    param' = param - lr * (m' / (1 - b1^t) / (sqrt(v' / (1 - b2^t)) + eps)
                           + weight_decay * param),
    as torch.optim.AdamW. Elementwise, so the moments shard with the
    parameter and the update can happen in place.
  }];
  let arguments = (ins TP_FloatTensor:$param, TP_FloatTensor:$grad,
                       TP_FloatTensor:$exp_avg, TP_FloatTensor:$exp_avg_sq,
                       TP_F32Scalar:$lr, TP_StepScalar:$step,
                       TP_F32Scalar:$grad_scale,
                       DefaultValuedAttr<F64Attr, "0.9">:$beta1,
                       DefaultValuedAttr<F64Attr, "0.999">:$beta2,
                       DefaultValuedAttr<F64Attr, "1.0e-8">:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.01">:$weight_decay);
  let results = (outs TP_FloatTensor:$new_param, TP_FloatTensor:$new_exp_avg,
                      TP_FloatTensor:$new_exp_avg_sq);
}

def TP_AdamWRowsOp
    : TP_ComputeOp<"adamw_rows", [TP_InferResultShapes,
                                  DeclareOpInterfaceMethods<
                                      TP_StorageAliasOpInterface>],
                   ["isSplittableFactor"], ["readsOperandAsStored"]> {
  let planOpKind = "AdamWRows";
  let summary = "AdamW on the listed rows of a parameter only";
  let description = [{
    tp.adamw, elementwise as there, on the rows `rows` lists (`-1` entries
    are padding); every other row and its moments stay as they are. The
    row-sparse update of a cached embedding table (tp-embedding-cache):
    TorchRec's and Keras' lazy Adam with decoupled weight decay, so a row
    moves only in the steps whose batch uses it, and the step count is the
    global one.
  }];
  let arguments = (ins TP_FloatTensor:$param, TP_FloatTensor:$grad,
                       TP_FloatTensor:$exp_avg, TP_FloatTensor:$exp_avg_sq,
                       TP_IndexTensor:$rows,
                       TP_F32Scalar:$lr, TP_StepScalar:$step,
                       TP_F32Scalar:$grad_scale,
                       DefaultValuedAttr<F64Attr, "0.9">:$beta1,
                       DefaultValuedAttr<F64Attr, "0.999">:$beta2,
                       DefaultValuedAttr<F64Attr, "1.0e-8">:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.01">:$weight_decay);
  let results = (outs TP_FloatTensor:$new_param, TP_FloatTensor:$new_exp_avg,
                      TP_FloatTensor:$new_exp_avg_sq);
}

def TP_NormSquaredRowsOp
    : TP_ComputeOp<"norm_squared_rows", [TP_InferResultShapes],
                   ["isSplittableFactor"]> {
  let planOpKind = "NormSquaredRows";
  let summary = "Sum of squares of the listed rows, in list order";
  let description = [{
    The squares of row `rows[0]`, then `rows[1]`, ... (`-1` entries are
    padding), so that the sum does not depend on where each row lies: a
    cached table's gradient is cache-shaped, its rows listed by ascending
    id, and the global norm is then the same at every cache ratio.
  }];
  let arguments = (ins TP_FloatTensor:$input, TP_IndexTensor:$rows);
  let results = (outs TP_F32Scalar:$result);
}

def TP_NormSquaredOp : TP_ComputeOp<"norm_squared", [TP_InferResultShapes]> {
  let planOpKind = "NormSquared";
  let summary = "Sum of squares of all elements (for global-norm clipping)";
  let arguments = (ins TP_FloatTensor:$input);
  let results = (outs TP_F32Scalar:$result);
  let hasVerifier = 0;
}

def TP_LrScheduleOp : TP_ComputeOp<"lr_schedule", [TP_InferResultShapes]> {
  let planOpKind = "LrSchedule";
  let summary = "Learning rate: linear warmup, then cosine decay";
  let description = [{
    `hyperparameters` is `[peak_lr, min_lr, warmup_steps, decay_steps,
    max_grad_norm]` (a run-time input, so one compiled plan serves any
    schedule). For the 1-based `step`: `peak * step / warmup` during warmup,
    `min_lr` from `decay_steps` on, and in between
    `min + (peak - min) * (1 + cos(pi * p)) / 2` with
    `p = (step - warmup) / (decay_steps - warmup)`.
  }];
  let arguments = (ins TP_StepScalar:$step,
                       TP_HyperparameterVector:$hyperparameters);
  let results = (outs TP_F32Scalar:$result);
}

def TP_ClipScaleOp : TP_ComputeOp<"clip_scale", [TP_InferResultShapes]> {
  let planOpKind = "ClipScale";
  let summary = "Global-norm gradient clipping factor";
  let description = [{
    `min(1, max_grad_norm / (sqrt(sum_squares) + 1e-6))` with
    `max_grad_norm` element 4 of `hyperparameters`; 1 when it is <= 0, as
    torch.nn.utils.clip_grad_norm_.
  }];
  let arguments = (ins TP_F32Scalar:$sum_squares,
                       TP_HyperparameterVector:$hyperparameters);
  let results = (outs TP_F32Scalar:$result);
}

//===----------------------------------------------------------------------===//
// Constants and padding
//===----------------------------------------------------------------------===//

def TP_ConstantOp : TP_ComputeOp<"constant", [TP_HasVJP]> {
  let planOpKind = "Constant";
  let summary = "A tensor filled with one value";
  let arguments = (ins F64Attr:$value);
  let results = (outs TP_FloatTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 0;
}

def TP_PadOp : TP_ComputeOp<"pad", [TP_PassesPartialSums, TP_HasVJP]> {
  let planOpKind = "Pad";
  let summary = "Zero tensor of the result type with the input at `offsets`";
  let description = [{
    The gradient of `tp.slice`: `result[offsets + i] = input[i]`, zero
    elsewhere.
  }];
  let arguments = (ins TP_FloatTensor:$input, DenseI64ArrayAttr:$offsets);
  let results = (outs TP_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Layout change
//===----------------------------------------------------------------------===//

// A collective over the grid axes `grid_axes` of the grid `grid` names: the
// result's #tp.dist layout is the input's with exactly the change the op
// names, which the verifier checks. Global view: shapes are unchanged and
// the layouts are on `grid`. Per-rank view (after tp-partition, no layouts):
// the result shard follows from the input shard and the group size, which
// the grid's shape gives.
//
// Pure, except over the stage axis of a pipelined module (tp.pipeline with
// more than one stage): there each stage program must make the collective
// whether or not it uses the result, so a write on the stage-exchange
// resource keeps later passes from erasing or merging it on one stage only
// (addStageExchangeEffects).
class TP_CollectiveOp<string mnemonic, string desc, list<Trait> traits = []>
    : TP_ComputeOp<mnemonic, !listconcat(traits, [TP_NeedsUniformShards,
          AlwaysSpeculatable,
          DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]), [], [], 0> {
  let summary = desc;
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $input `over` $grid attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = [{
    ::llvm::StringRef getPlanOpKind() { return "}] # planOpKind # [{"; }
    /// The per-rank result shard for `input` over a group of `ranks`; empty
    /// when the group does not divide it.
    ::llvm::SmallVector<int64_t> localResultShape(
        ::llvm::ArrayRef<int64_t> input, int64_t ranks);
  }];
  let extraClassDefinition = [{
    void $cppClass::getEffects(
        ::llvm::SmallVectorImpl<::mlir::SideEffects::EffectInstance<
            ::mlir::MemoryEffects::Effect>> &effects) {
      ::mlir::tp::addStageExchangeEffects(getOperation(), getGridAxes(),
                                          effects);
    }
    ::llvm::LogicalResult $cppClass::verifySymbolUses(
        ::mlir::SymbolTableCollection &symbolTables) {
      // (No sharding-rule check: per-rank collectives change the shape the
      // global-view rule keeps; verifyCollectiveGrid checks them.)
      if (::mlir::failed(
              ::mlir::tp::verifyDistLayouts(getOperation(), symbolTables)))
        return ::mlir::failure();
      return ::mlir::tp::verifyCollectiveGrid(
          getOperation(), getGridAttr(), getGridAxes(), symbolTables,
          [&](::llvm::ArrayRef<int64_t> input, int64_t ranks) {
            return localResultShape(input, ranks);
          });
    }
  }];
}

def TP_AllReduceOp : TP_CollectiveOp<"all_reduce",
    "Sum a pending partial over grid axes", [TP_ReducesPartialSums,
                                             TP_UniformResult]> {
  let planOpKind = "AllReduce";
  let description = [{
    Removes `grid_axes` from the input's partial axes; every rank of each
    group ends with the full sum.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       DenseI64ArrayAttr:$grid_axes);
}

def TP_AllGatherOp : TP_CollectiveOp<"all_gather",
    "Gather the shards of one dimension", [TP_PassesPartialSums,
                                           TP_UniformResult]> {
  let planOpKind = "AllGather";
  let description = [{
    `grid_axes` must be the minor end of the axes splitting dimension `dim`;
    they are removed from it.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$dim,
                       DenseI64ArrayAttr:$grid_axes);
}

def TP_ReduceScatterOp : TP_CollectiveOp<"reduce_scatter",
    "Sum a pending partial and keep one shard of a dimension",
    [TP_ReducesPartialSums]> {
  let planOpKind = "ReduceScatter";
  let description = [{
    Removes `grid_axes` from the partial axes and appends them to the axes
    splitting `dim`: an all-reduce followed by a local slice, at the cost of
    half the all-reduce.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$dim,
                       DenseI64ArrayAttr:$grid_axes);
}

def TP_AllToAllOp : TP_CollectiveOp<"all_to_all",
    "Move a split from one dimension to another", [TP_PassesPartialSums]> {
  let planOpKind = "AllToAll";
  let description = [{
    `grid_axes` (the minor end of `source_dim`'s axes) move to the minor end
    of `target_dim`'s axes.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$source_dim,
                       I64Attr:$target_dim, DenseI64ArrayAttr:$grid_axes);
}

def TP_LocalSplitOp : TP_CollectiveOp<"local_split",
    "Keep one shard of a replicated dimension (no communication)",
    [TP_PassesPartialSums]> {
  let planOpKind = "LocalSplit";
  let description = [{
    Appends `grid_axes`, unused by the input's layout, to the axes splitting
    `dim`: each rank keeps its own slice of data it already holds. A slice
    is linear: a pending partial sum over other axes passes through.
    Canonicalization: a slice over the same axes of an all-reduce that has
    no other use is one reduce-scatter (half the all-reduce's volume).
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$dim,
                       DenseI64ArrayAttr:$grid_axes);
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Collective matmul: ring steps (per-rank view only, from tp-collective-matmul)
//===----------------------------------------------------------------------===//

// One step of a ring over the group of `grid_axes` of `grid`: group rank r
// sends to rank r+1 and receives from rank r-1 (mod n, the group size).
// After i shifts a rank holds the block that started on rank r-i, so
// `ring_step` i names block (r - i) mod n of a dimension cut into n blocks.
// These ops exist only in the per-rank program: their types carry no
// layouts.
class TP_RingOp<string mnemonic, string desc, list<Trait> traits = []>
    : TP_Op<mnemonic, !listconcat(traits, [TP_PlanOpInterface, TP_RingStep,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  string planOpKind = "";
  let summary = desc;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::llvm::StringRef getPlanOpKind() { return "}] # planOpKind # [{"; }
  }];
}

// Not Pure: the pair moves data between ranks, so neither may be removed,
// merged or reordered across the other.
def TP_RingShiftStartOp : TP_RingOp<"ring_shift_start",
    "Start sending a block to the next rank of a ring", [
        AllTypesMatch<["input", "result"]>, TP_NeedsUniformShards,
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface>]> {
  let planOpKind = "RingShiftStart";
  let description = [{
    Starts sending `input` to group rank r+1 and receiving the block of rank
    r-1 into `result`, without waiting: the ops up to the matching
    `tp.ring_shift_wait` (its only use) run while the block moves. `result`
    may not be read before that wait, nor `input` written.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       DenseI64ArrayAttr:$grid_axes);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $input `over` $grid attr-dict `:` type($input)
  }];
}

def TP_RingShiftWaitOp : TP_RingOp<"ring_shift_wait",
    "Wait for a ring shift; its result is the received block", [
        AllTypesMatch<["received", "sent", "result"]>, TP_NeedsUniformShards,
        DeclareOpInterfaceMethods<TP_StorageAliasOpInterface>,
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface>]> {
  let planOpKind = "RingShiftWait";
  let description = [{
    Completes the `tp.ring_shift_start` that defines `received` and sent
    `sent` (its input, named again so that its storage stays alive until the
    send is done). The result is `received`'s storage, now valid.
  }];
  let arguments = (ins TP_AnyTensor:$received, TP_AnyTensor:$sent);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $received `,` $sent attr-dict `:` type($result)
  }];
}

// Slice and insert are local: their sharding rules (the ring dimension
// replicated, the others shared) let per-rank analyses follow a dimension
// through them.
def TP_RingSliceOp : TP_RingOp<"ring_slice",
    "The block of a dimension a ring step works on", [Pure,
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface>]> {
  let planOpKind = "RingSlice";
  let description = [{
    Block (r - `ring_step`) mod n of dimension `dim`, cut into n equal blocks
    (n the group size, r this rank's index in the group).
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$dim, DenseI64ArrayAttr:$grid_axes,
                       I64Attr:$ring_step);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $input `over` $grid attr-dict `:` type($input) `->` type($result)
  }];
}

def TP_RingInsertOp : TP_RingOp<"ring_insert",
    "Write a ring step's block into its place, in place", [
        AllTypesMatch<["dest", "result"]>,
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface>,
        DeclareOpInterfaceMethods<TP_StorageAliasOpInterface>]> {
  let planOpKind = "RingInsert";
  let description = [{
    `dest` with block (r - `ring_step`) mod n of dimension `dim` replaced by
    `block`. The result is `dest`'s storage, updated in place, so `dest` may
    have no other use.
  }];
  let arguments = (ins TP_AnyTensor:$dest, TP_AnyTensor:$block,
                       FlatSymbolRefAttr:$grid, I64Attr:$dim,
                       DenseI64ArrayAttr:$grid_axes, I64Attr:$ring_step);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $block `into` $dest `over` $grid attr-dict `:` type($block) `->`
    type($dest)
  }];
}

//===----------------------------------------------------------------------===//
// Pipeline point-to-point transfers (per-rank view only, from
// tp-pipeline-stages)
//===----------------------------------------------------------------------===//

// A transfer between two pipeline stages: the rank at grid coordinates c
// exchanges with the rank whose coordinates are c with axis `grid_axis`
// set to `peer` (the other stage), so each rank of a tensor-parallel or
// data-parallel group sends or receives only its own shard. `tag` names the
// message among those between the two stages in one run; a start and its
// wait name the same peer and tag, and tp-pipeline-stages checks that every
// send has its receive on the peer's program, of the same type, and that
// no order of the waits deadlocks. Neither op may be removed, merged or
// moved across the other: they are not Pure.
class TP_TransferOp<string mnemonic, string desc, list<Trait> traits = []>
    : TP_Op<mnemonic, !listconcat(traits, [TP_PlanOpInterface,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>,
        DeclareOpInterfaceMethods<TP_ShardingRuleOpInterface>])> {
  string planOpKind = "";
  let summary = desc;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::llvm::StringRef getPlanOpKind() { return "}] # planOpKind # [{"; }
  }];
}

def TP_SendStartOp : TP_TransferOp<"send_start",
    "Start sending a value to another pipeline stage"> {
  let planOpKind = "SendStart";
  let description = [{
    Starts sending `input` to the rank of stage `peer` without waiting; the
    matching `tp.send_wait` (which names `input` again, so that its storage
    stays alive) completes it. `input` may not be written in between.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$grid_axis, I64Attr:$peer, I64Attr:$tag);
  let assemblyFormat = [{
    $input `over` $grid `to` $peer `tag` $tag attr-dict `:` type($input)
  }];
}

def TP_SendWaitOp : TP_TransferOp<"send_wait",
    "Wait until a value sent to another pipeline stage has left"> {
  let planOpKind = "SendWait";
  let description = [{
    Completes the `tp.send_start` of `input` to `peer` with `tag`; after it
    `input`'s storage may be reused.
  }];
  let arguments = (ins TP_AnyTensor:$input, FlatSymbolRefAttr:$grid,
                       I64Attr:$grid_axis, I64Attr:$peer, I64Attr:$tag);
  let assemblyFormat = [{
    $input `over` $grid `to` $peer `tag` $tag attr-dict `:` type($input)
  }];
}

def TP_RecvStartOp : TP_TransferOp<"recv_start",
    "Start receiving a value from another pipeline stage"> {
  let planOpKind = "RecvStart";
  let description = [{
    Starts receiving the value stage `peer` sends with `tag` into `result`,
    which only the `tp.recv_wait` that is its one use may read.
  }];
  let arguments = (ins FlatSymbolRefAttr:$grid, I64Attr:$grid_axis,
                       I64Attr:$peer, I64Attr:$tag);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    `over` $grid `from` $peer `tag` $tag attr-dict `:` type($result)
  }];
}

def TP_RecvWaitOp : TP_TransferOp<"recv_wait",
    "Wait for a value from another pipeline stage", [
        AllTypesMatch<["received", "result"]>,
        DeclareOpInterfaceMethods<TP_StorageAliasOpInterface>]> {
  let planOpKind = "RecvWait";
  let description = [{
    Completes the `tp.recv_start` that defines `received`; the result is its
    storage, now holding the value.
  }];
  let arguments = (ins TP_AnyTensor:$received);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = [{
    $received attr-dict `:` type($result)
  }];
}

def TP_RedistributeOp : TP_ComputeOp<"redistribute"> {
  let summary = "Change a value's distribution layout";
  let description = [{
    Same global shape and element type; only the `#tp.dist` encoding
    differs. A separate pass lowers it to the cheapest collectives.
  }];
  let arguments = (ins TP_AnyTensor:$input);
  let results = (outs TP_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

#endif // TPC_DIALECT_TP_IR_TPOPS_TD
