// RUN: tpc-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// #tp.dist layouts
//===----------------------------------------------------------------------===//

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist grid axis -1 is negative}}
func.func @negative_axis(%a: tensor<8x16xf32, #tp.dist<@g, [[-1], []]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist uses grid axis 0 twice}}
func.func @axis_twice(%a: tensor<8x16xf32, #tp.dist<@g, [[0], [0]]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist uses grid axis 1 twice}}
func.func @axis_split_and_partial(%a: tensor<8x16xf32, #tp.dist<@g, [[1], []], partial = [1]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist has sizes for 1 dimensions but splits 2}}
func.func @sizes_rank(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[3, 5]]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist gives sizes for dimension 1, which no grid axis splits}}
func.func @sizes_unsplit(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[], [8, 8]]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist has a negative size in dimension 0}}
func.func @negative_size(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[9, -1], []]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist describes 1 dimensions but the tensor has rank 2}}
func.func @layout_rank(%a: tensor<8x16xf32, #tp.dist<@g, [[0]]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{#tp.dist sizes of dimension 0 add up to 7, not 8}}
func.func @sizes_sum(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[3, 4], []]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{expected 'partial' or 'sizes' (once each), got 'halo'}}
func.func @unknown_keyword(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], halo = [1]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{'func.func' op argument #0 'tensor<8x16xf32, #tp.dist<@g, [[2], []]>>' names grid axis 2, but grid @g has 2 axes}}
func.func private @axis_out_of_range(%a: tensor<8x16xf32, #tp.dist<@g, [[2], []]>>)

// -----

tp.grid @g [2, 4]
func.func @partial_axis_out_of_range(%a: tensor<8x16xf32>) {
  // expected-error @+1 {{'tp.redistribute' op result #0 'tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [3]>>' names grid axis 3, but grid @g has 2 axes}}
  %0 = tp.redistribute %a : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [3]>>
  return
}

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{'func.func' op result #0 'tensor<8x6xf32, #tp.dist<@g, [[], [1]]>>': dimension 1 of size 6 cannot be split evenly into 4 shards (give sizes for an uneven split)}}
func.func private @not_divisible() -> tensor<8x6xf32, #tp.dist<@g, [[], [1]]>>

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{dimension 0 of size 12 cannot be split evenly into 8 shards}}
func.func private @not_divisible_two_axes(%a: tensor<12x16xf32, #tp.dist<@g, [[0, 1], []]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{gives 2 sizes for dimension 1, which is split into 4 shards}}
func.func private @sizes_count(%a: tensor<8x16xf32, #tp.dist<@g, [[], [1]], sizes = [[], [8, 8]]>>)

// -----

tp.grid @g [2, 4]
// expected-error @+1 {{argument #0 'tensor<8x16xf32, #tp.dist<@nope, [[0], []]>>' refers to @nope, which is not a tp.grid}}
func.func private @unknown_grid(%a: tensor<8x16xf32, #tp.dist<@nope, [[0], []]>>)

// -----

func.func @not_a_grid(%a: tensor<8x16xf32>) {
  // expected-error @+1 {{'tp.redistribute' op result #0 'tensor<8x16xf32, #tp.dist<@not_a_grid, [[0], []]>>' refers to @not_a_grid, which is not a tp.grid}}
  %0 = tp.redistribute %a : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@not_a_grid, [[0], []]>>
  return
}

//===----------------------------------------------------------------------===//
// tp.grid
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{grid @g needs at least one axis}}
tp.grid @g []

// -----

// expected-error @+1 {{grid @g axis 1 has size 0; sizes must be >= 1}}
tp.grid @g [2, 0]

// -----

func.func @grid_not_in_module() {
  // expected-error @+1 {{expects parent op 'builtin.module'}}
  tp.grid @g [2]
  return
}

//===----------------------------------------------------------------------===//
// Types accepted by every op
//===----------------------------------------------------------------------===//

// -----

func.func @dynamic_shape(%x: tensor<?x16xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of}}
  %0 = tp.gelu %x : tensor<?x16xf32>
  return
}

// -----

func.func @integer_operand(%x: tensor<8xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = tp.silu %x : tensor<8xi32>
  return
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

// -----

func.func @embedding_table_rank(%t: tensor<50x16x2xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{table 'tensor<50x16x2xf32>' must be [vocab, hidden]}}
  %0 = tp.embedding %t, %ids : (tensor<50x16x2xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @matmul_activation_types(%dy: tensor<2x8x16xf32>, %x: tensor<2x8x16xbf16>, %g: tensor<16xf32>) {
  // Activations share one type even where the result's is free.
  // expected-error @+1 {{operand #1 has element type 'bf16' but operand #0 has 'f32'}}
  %0 = tp.matmul %dy, %x {transpose_lhs} : (tensor<2x8x16xf32>, tensor<2x8x16xbf16>) -> tensor<2x16x16xf32>
  return
}

// -----

func.func @embedding_result_shape(%t: tensor<50x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result 'tensor<2x8x32xf32>' should have shape [2, 8, 16] (ids shape followed by the table's hidden size)}}
  %0 = tp.embedding %t, %ids : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @embedding_grad_table_rank(%dy: tensor<2x8x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{table_grad 'tensor<800xf32>' must be [vocab, hidden]}}
  %0 = tp.embedding_grad %dy, %ids : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<800xf32>
  return
}

// -----

func.func @embedding_grad_shape(%dy: tensor<2x4x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result_grad 'tensor<2x4x16xf32>' should have shape [2, 8, 16] (ids shape followed by table_grad's hidden size)}}
  %0 = tp.embedding_grad %dy, %ids : (tensor<2x4x16xf32>, tensor<2x8xi32>) -> tensor<50x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_rank(%a: tensor<16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{lhs 'tensor<16xf32>' must have rank >= 2 (a matrix or batch of them)}}
  %0 = tp.matmul %a, %b : (tensor<16xf32>, tensor<16x32xf32>) -> tensor<32xf32>
  return
}

// -----

func.func @matmul_precision(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{attribute 'precision' failed to satisfy constraint: type attribute of bfloat16 type or tf32 type}}
  %0 = tp.matmul %a, %b {precision = f16} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>) {
  // expected-error @+1 {{contraction sizes differ: lhs 'tensor<8x16xf32>' has K = 16 but rhs 'tensor<32x16xf32>' has K = 32}}
  %0 = tp.matmul %a, %b : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @matmul_transposed_contraction(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{contraction sizes differ: lhs 'tensor<8x16xf32>' has K = 8 but rhs 'tensor<16x32xf32>' has K = 16}}
  %0 = tp.matmul %a, %b {transpose_lhs} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x8x16xf32>, %b: tensor<3x16x32xf32>) {
  // expected-error @+1 {{batch dimensions differ: lhs 'tensor<2x8x16xf32>' vs rhs 'tensor<3x16x32xf32>'}}
  %0 = tp.matmul %a, %b : (tensor<2x8x16xf32>, tensor<3x16x32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @matmul_batch_rank(%a: tensor<2x3x8x16xf32>, %b: tensor<3x16x32xf32>) {
  // expected-error @+1 {{batch dimensions differ: lhs 'tensor<2x3x8x16xf32>' vs rhs 'tensor<3x16x32xf32>' (need equal sizes or 1, or no batch on one side)}}
  %0 = tp.matmul %a, %b : (tensor<2x3x8x16xf32>, tensor<3x16x32xf32>) -> tensor<2x3x8x32xf32>
  return
}

// -----

func.func @matmul_alpha(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{alpha must be finite}}
  %0 = tp.matmul %a, %b {alpha = 0x7FF0000000000000 : f64} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<2x8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{result 'tensor<8x32xf32>' should have shape [2, 8, 32] (batch..., M, N)}}
  %0 = tp.matmul %a, %b : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @matmul_element_type(%a: tensor<8x16xf32>, %b: tensor<16x32xf16>) {
  // expected-error @+1 {{operand #1 has element type 'f16' but operand #0 has 'f32' (activations share one element type; tp.convert changes it)}}
  %0 = tp.matmul %a, %b : (tensor<8x16xf32>, tensor<16x32xf16>) -> tensor<8x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

func.func @add_no_broadcast(%a: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{lhs 'tensor<8x16xf32>' and rhs 'tensor<8xf32>' do not broadcast}}
  %0 = tp.add %a, %b : (tensor<8x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @mul_result(%a: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{result 'tensor<16xf32>' should have shape [8, 16] (the broadcast of lhs and rhs)}}
  %0 = tp.mul %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @scale_types(%a: tensor<8x16xf32>) {
  // expected-error @+1 {{all of {input, result} have same type}}
  %0 = "tp.scale"(%a) {factor = 2.0 : f64} : (tensor<8x16xf32>) -> tensor<8x16xf16>
  return
}

// -----

func.func @gelu_grad_shape(%dy: tensor<8x8xf32>, %x: tensor<8x16xf32>) {
  // expected-error @+1 {{result_grad 'tensor<8x8xf32>' should have shape [8, 16] (the shape of input)}}
  %0 = tp.gelu_grad %dy, %x : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @silu_grad_result(%dy: tensor<8x16xf32>, %x: tensor<8x16xf32>) {
  // expected-error @+1 {{input_grad 'tensor<16x8xf32>' should have shape [8, 16] (the shape of input)}}
  %0 = tp.silu_grad %dy, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x8xf32>
  return
}

// -----

func.func @relu_grad_types(%dy: tensor<8x16xbf16>, %x: tensor<8x16xf32>) {
  // expected-error @+1 {{operand #1 has element type 'f32' but operand #0 has 'bf16'}}
  %0 = tp.relu_grad %dy, %x : (tensor<8x16xbf16>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

// -----

func.func @layer_norm_gamma(%x: tensor<2x8x16xf32>, %g: tensor<8xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{gamma 'tensor<8xf32>' should have shape [16] (input's last dimension)}}
  %0 = tp.layer_norm %x, %g, %b : (tensor<2x8x16xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{epsilon must be positive, got 0.000000e+00}}
  %0 = tp.layer_norm %x, %g, %b {epsilon = 0.0 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @layer_norm_rank(%x: tensor<f32>, %g: tensor<16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{input 'tensor<f32>' must have rank >= 1 (normalised over its last dim)}}
  %0 = tp.layer_norm %x, %g, %b : (tensor<f32>, tensor<16xf32>, tensor<16xf32>) -> tensor<f32>
  return
}

// -----

func.func @layer_norm_grad_beta(%dy: tensor<2x8x16xf32>, %x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{beta_grad 'tensor<2x16xf32>' should have shape [16] (input's last dimension)}}
  %0:3 = tp.layer_norm_grad %dy, %x, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x16xf32>)
  return
}

// -----

func.func @rms_norm_result(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{result 'tensor<2x16xf32>' should have shape [2, 8, 16] (the shape of input)}}
  %0 = tp.rms_norm %x, %g : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @rms_norm_grad_element_type(%dy: tensor<2x8x16xbf16>, %x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{operand #1 has element type 'f32' but operand #0 has 'bf16'}}
  %0:2 = tp.rms_norm_grad %dy, %x, %g : (tensor<2x8x16xbf16>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  return
}

//===----------------------------------------------------------------------===//
// Softmax and rotary
//===----------------------------------------------------------------------===//

// -----

func.func @causal_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{input 'tensor<8xf32>' must have rank >= 2 with causal (its last two dims are [queries, keys])}}
  %0 = tp.softmax %x {causal} : tensor<8xf32>
  return
}

// -----

func.func @causal_square(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{causal softmax needs as many queries as keys, but input 'tensor<2x4x8xf32>' has 4 queries and 8 keys}}
  %0 = tp.softmax %x {causal} : tensor<2x4x8xf32>
  return
}

// -----

func.func @softmax_rank(%x: tensor<f32>) {
  // expected-error @+1 {{input 'tensor<f32>' must have rank >= 1 (softmax over its last dim)}}
  %0 = tp.softmax %x : tensor<f32>
  return
}

// -----

func.func @softmax_grad_shape(%dy: tensor<4x8xf32>, %y: tensor<4x4xf32>) {
  // expected-error @+1 {{result_grad 'tensor<4x8xf32>' should have shape [4, 4] (the shape of result)}}
  %0 = tp.softmax_grad %dy, %y : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Result types written against what the op infers from its operands.
func.func @softmax_grad_result(%dy: tensor<4x4xf32>, %y: tensor<4x4xf32>) {
  // expected-error @+1 {{input_grad 'tensor<4x8xf32>' should have shape [4, 4] (the shape of result)}}
  %0 = tp.softmax_grad %dy, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_grad_gamma_grad(%dy: tensor<2x8x16xf32>, %x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{gamma_grad 'tensor<8xf32>' should have shape [16] (input's last dimension)}}
  %0:2 = tp.rms_norm_grad %dy, %x, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<8xf32>)
  return
}

// -----

func.func @norm_squared_result(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %0 = tp.norm_squared %x : (tensor<4x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @transpose_result_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result has element type 'f16' but input has 'f32'}}
  %0 = tp.transpose %x {permutation = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf16>
  return
}

// -----

func.func @rotary_odd(%x: tensor<2x8x15xf32>) {
  // expected-error @+1 {{input 'tensor<2x8x15xf32>' needs an even head dimension to rotate pairs}}
  %0 = tp.rotary %x : tensor<2x8x15xf32>
  return
}

// -----

func.func @rotary_rank(%x: tensor<16xf32>) {
  // expected-error @+1 {{input 'tensor<16xf32>' must have rank >= 2 (its last two dims are [seq, head_dim])}}
  %0 = tp.rotary %x : tensor<16xf32>
  return
}

// -----

func.func @rotary_theta(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{theta must be positive, got -1.000000e+00}}
  %0 = tp.rotary %x {theta = -1.0 : f64} : tensor<2x8x16xf32>
  return
}

// -----

func.func @rotary_positions(%x: tensor<2x4x8x16xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{positions 'tensor<2x4xi32>' should have shape [2, 8] (first dim, sequence)}}
  %0 = tp.rotary %x at %p : tensor<2x4xi32> : tensor<2x4x8x16xf32>
  return
}

// -----

func.func @cache_write_update(%c: tensor<2x4x16x8xf32>, %k: tensor<2x4x1x4xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{update 'tensor<2x4x1x4xf32>' should have shape [2, 4, 1, 8] (the cache's but for the sequence dim)}}
  %0 = tp.cache_write %c, %k, %p : (tensor<2x4x16x8xf32>, tensor<2x4x1x4xf32>, tensor<2x1xi32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @cache_write_positions(%c: tensor<2x4x16x8xf32>, %k: tensor<2x4x3x8xf32>, %p: tensor<2x1xi32>) {
  // expected-error @+1 {{positions 'tensor<2x1xi32>' should have shape [2, 3] (first dim, sequence)}}
  %0 = tp.cache_write %c, %k, %p : (tensor<2x4x16x8xf32>, tensor<2x4x3x8xf32>, tensor<2x1xi32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_causal_positions(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %p: tensor<2x16xi32>) {
  // expected-error @+1 {{takes either causal or positions, not both}}
  %0:2 = tp.attention %q, %k, %k, %p {causal} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x16xi32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
  return
}

//===----------------------------------------------------------------------===//
// Shapes and reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reshape_elements(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{input 'tensor<2x8x16xf32>' has 256 elements but result 'tensor<16x15xf32>' has 240}}
  %0 = tp.reshape %x : (tensor<2x8x16xf32>) -> tensor<16x15xf32>
  return
}

// -----

func.func @transpose_length(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{permutation has 2 entries but input 'tensor<2x8x16xf32>' has rank 3}}
  %0 = tp.transpose %x {permutation = array<i64: 1, 0>} : (tensor<2x8x16xf32>) -> tensor<8x2x16xf32>
  return
}

// -----

func.func @transpose_not_permutation(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{permutation is not a permutation of [0, 3)}}
  %0 = tp.transpose %x {permutation = array<i64: 0, 0, 2>} : (tensor<2x8x16xf32>) -> tensor<2x2x16xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{result 'tensor<2x8x16xf32>' should have shape [8, 2, 16] (input dims in permutation order)}}
  %0 = tp.transpose %x {permutation = array<i64: 1, 0, 2>} : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @slice_rank(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{input 'tensor<2x8x16xf32>', result 'tensor<2x8xf32>' and 2 offsets must have the same rank}}
  %0 = tp.slice %x {offsets = array<i64: 0, 0>} : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @slice_bounds(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{window [6, 10) of dimension 1 is outside 'tensor<2x8x16xf32>'}}
  %0 = tp.slice %x {offsets = array<i64: 0, 6, 0>} : (tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @pad_bounds(%x: tensor<2x4x16xf32>) {
  // expected-error @+1 {{window [6, 10) of dimension 1 is outside 'tensor<2x8x16xf32>'}}
  %0 = tp.pad %x {offsets = array<i64: 0, 6, 0>} : (tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @reduce_range(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{reduced dimension 3 is out of range for input 'tensor<2x8x16xf32>'}}
  %0 = tp.reduce_sum %x {dims = array<i64: 3>} : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @reduce_order(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{reduced dimensions must be strictly increasing}}
  %0 = tp.reduce_mean %x {dims = array<i64: 1, 0>} : (tensor<2x8x16xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @reduce_result(%x: tensor<2x8x16xf32>) {
  // expected-error @+1 {{result 'tensor<2x16xf32>' should have shape [2, 8] (input without the reduced dims)}}
  %0 = tp.reduce_sum %x {dims = array<i64: 2>} : (tensor<2x8x16xf32>) -> tensor<2x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

// -----

func.func @cross_entropy_targets(%l: tensor<2x8x50xf32>, %t: tensor<2x50xi32>) {
  // expected-error @+1 {{targets 'tensor<2x50xi32>' should have shape [2, 8] (logits without the vocabulary dim)}}
  %0 = tp.cross_entropy %l, %t : (tensor<2x8x50xf32>, tensor<2x50xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_rank(%l: tensor<f32>, %t: tensor<i32>) {
  // expected-error @+1 {{logits 'tensor<f32>' must have rank >= 1 (its last dim is the vocabulary)}}
  %0 = tp.cross_entropy %l, %t : (tensor<f32>, tensor<i32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_loss_type(%l: tensor<8x50xf32>, %t: tensor<8xi32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %0 = tp.cross_entropy %l, %t : (tensor<8x50xf32>, tensor<8xi32>) -> tensor<8xf32>
  return
}

// -----

func.func @cross_entropy_grad_type(%l: tensor<8x50xf32>, %t: tensor<8xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{logits_grad 'tensor<8x50xbf16>' must have the type of logits 'tensor<8x50xf32>'}}
  %0 = tp.cross_entropy_grad %l, %t, %d : (tensor<8x50xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x50xbf16>
  return
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

// -----

func.func @adamw_grad_shape(%p: tensor<16xf32>, %g: tensor<8xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{grad 'tensor<8xf32>' should have shape [16] (the shape of param)}}
  %0:3 = tp.adamw %p, %g, %p, %p, %lr, %s, %lr : (tensor<16xf32>, tensor<8xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_grad_element_type(%p: tensor<16xf32>, %g: tensor<16xbf16>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{grad has element type 'bf16' but param has 'f32'}}
  %0:3 = tp.adamw %p, %g, %p, %p, %lr, %s, %lr : (tensor<16xf32>, tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_result_type(%p: tensor<16xbf16>, %m: tensor<16xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{new_exp_avg 'tensor<16xbf16>' must have the type of its input 'tensor<16xf32>'}}
  %0:3 = tp.adamw %p, %p, %m, %m, %lr, %s, %lr : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xbf16>, tensor<16xbf16>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_beta(%p: tensor<16xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{beta2 must be in [0, 1), got 1.000000e+00}}
  %0:3 = tp.adamw %p, %p, %p, %p, %lr, %s, %lr {beta2 = 1.0 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_weight_decay(%p: tensor<16xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{weight_decay must be >= 0, got -5.000000e-01}}
  %0:3 = tp.adamw %p, %p, %p, %p, %lr, %s, %lr {weight_decay = -0.5 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_epsilon(%p: tensor<16xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{epsilon must be positive, got -1.000000e+00}}
  %0:3 = tp.adamw %p, %p, %p, %p, %lr, %s, %lr {epsilon = -1.0 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_step_type(%p: tensor<16xf32>, %lr: tensor<f32>, %s: tensor<f32>) {
  // expected-error @+1 {{operand #5 must be 0D tensor of 64-bit signless integer values}}
  %0:3 = tp.adamw %p, %p, %p, %p, %lr, %s, %lr : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

//===----------------------------------------------------------------------===//
// Redistribute
//===----------------------------------------------------------------------===//

// -----

tp.grid @g [2]
func.func @redistribute_shape(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{changes only the layout: input 'tensor<8x16xf32>' and result 'tensor<16x8xf32, #tp.dist<@g, [[0], []]>>' must have the same shape and element type}}
  %0 = tp.redistribute %x : tensor<8x16xf32> -> tensor<16x8xf32, #tp.dist<@g, [[0], []]>>
  return
}

//===----------------------------------------------------------------------===//
// Optimizer scalars
//===----------------------------------------------------------------------===//

// -----

func.func @hyperparameters(%step: tensor<i64>, %hp: tensor<4xf32>) {
  // expected-error @+1 {{hyperparameters 'tensor<4xf32>' must be [peak_lr, min_lr, warmup_steps, decay_steps, max_grad_norm]}}
  %0 = tp.lr_schedule %step, %hp : (tensor<i64>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @clip_scale_type(%s: tensor<f32>, %hp: tensor<5xf32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %0 = tp.clip_scale %s, %hp : (tensor<f32>, tensor<5xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @norm_squared_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %0 = tp.norm_squared %x : (tensor<4xf32>) -> tensor<bf16>
  return
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// -----

tp.grid @g [2, 2]
func.func @all_reduce_not_partial(%x: tensor<8xf32, #tp.dist<@g, [[0]]>>) {
  // expected-error @+1 {{input is not a partial sum over grid axis 1}}
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 1>} : tensor<8xf32, #tp.dist<@g, [[0]]>> -> tensor<8xf32, #tp.dist<@g, [[0]]>>
  return
}

// -----

tp.grid @g [2, 2]
func.func @all_gather_not_minor(%x: tensor<8xf32, #tp.dist<@g, [[0, 1]]>>) {
  // expected-error @+1 {{grid axes [0] are not the minor end of the axes splitting dimension 0}}
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8xf32, #tp.dist<@g, [[0, 1]]>> -> tensor<8xf32, #tp.dist<@g, [[1]]>>
  return
}

// -----

tp.grid @g [2, 2]
func.func @wrong_result_layout(%x: tensor<8x4xf32, #tp.dist<@g, [[], []], partial = [0]>>) {
  // expected-error @+1 {{result layout of 'tensor<8x4xf32, #tp.dist<@g, [[0], []]>>' is not what this collective makes of 'tensor<8x4xf32, #tp.dist<@g, [[], []], partial = [0]>>'}}
  %0 = tp.reduce_scatter %x over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x4xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x4xf32, #tp.dist<@g, [[0], []]>>
  return
}

// -----

tp.grid @g [2, 2]
func.func @all_to_all_same_dim(%x: tensor<8x4xf32, #tp.dist<@g, [[0], []]>>) {
  // expected-error @+1 {{source and target dimensions are the same}}
  %0 = tp.all_to_all %x over @g {source_dim = 0 : i64, target_dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x4xf32, #tp.dist<@g, [[0], []]>> -> tensor<8x4xf32, #tp.dist<@g, [[0], []]>>
  return
}

// -----

tp.grid @g [2, 2]
func.func @collective_dim_range(%x: tensor<8xf32, #tp.dist<@g, [[0]]>>) {
  // expected-error @+1 {{dimension 3 is out of range for 'tensor<8xf32, #tp.dist<@g, [[0]]>>'}}
  %0 = tp.all_gather %x over @g {dim = 3 : i64, grid_axes = array<i64: 0>} : tensor<8xf32, #tp.dist<@g, [[0]]>> -> tensor<8xf32>
  return
}

// -----

tp.grid @g [2, 2]
func.func @collective_uneven(%x: tensor<8xf32, #tp.dist<@g, [[0]], sizes = [[3, 5]]>>) {
  // expected-error @+1 {{collectives need even splits}}
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8xf32, #tp.dist<@g, [[0]], sizes = [[3, 5]]>> -> tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Tensor sizes (every tp op): positive, at most 2^40 elements
//===----------------------------------------------------------------------===//

// A zero-size reshape used to crash the sharding rule's factorisation.
func.func @zero_size_reshape(%x: tensor<0x4xf32>) -> tensor<4x0xf32> {
  // expected-error @+1 {{'tp.reshape' op operand #0 of type 'tensor<0x4xf32>' has a size that is not positive}}
  %0 = tp.reshape %x : (tensor<0x4xf32>) -> tensor<4x0xf32>
  return %0 : tensor<4x0xf32>
}

// -----

func.func @zero_size_result(%x: tensor<4xf32>) -> tensor<0xf32> {
  // expected-error @+1 {{'tp.slice' op result #0 of type 'tensor<0xf32>' has a size that is not positive}}
  %0 = tp.slice %x {offsets = array<i64: 0>} : (tensor<4xf32>) -> tensor<0xf32>
  return %0 : tensor<0xf32>
}

// -----

// 2^21 x 2^20 = 2^41 elements.
func.func @too_many_elements(%x: tensor<2097152x1048576xf32>) -> tensor<2097152x1048576xf32> {
  // expected-error @+1 {{'tp.gelu' op operand #0 of type 'tensor<2097152x1048576xf32>' has more than 2^40 = 1099511627776 elements, the limit of one tensor}}
  %0 = tp.gelu %x : tensor<2097152x1048576xf32>
  return %0 : tensor<2097152x1048576xf32>
}

// -----

// Sizes whose product overflows int64_t.
func.func @overflowing_sizes(%x: tensor<4294967296x4294967296xf32>) -> tensor<4294967296x4294967296xf32> {
  // expected-error @+1 {{'tp.gelu' op operand #0 of type 'tensor<4294967296x4294967296xf32>' has more than 2^40 = 1099511627776 elements, the limit of one tensor}}
  %0 = tp.gelu %x : tensor<4294967296x4294967296xf32>
  return %0 : tensor<4294967296x4294967296xf32>
}

// -----

// Exactly 2^40 elements is within the limit.
func.func @at_the_limit(%x: tensor<1048576x1048576xf32>) -> tensor<1048576x1048576xf32> {
  %0 = tp.gelu %x : tensor<1048576x1048576xf32>
  return %0 : tensor<1048576x1048576xf32>
}

// -----

// Collectives name the grid they run over: it must exist, be a tp.grid,
// and be the grid of their layouts.
func.func @collective_unknown_grid(%x: tensor<8xf32>) {
  // expected-error @+1 {{@nope does not name a tp.grid}}
  %0 = tp.all_reduce %x over @nope {grid_axes = array<i64: 0>} : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

tp.grid @g [2]
tp.grid @h [2]
func.func @collective_other_grid(%x: tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>>) {
  // expected-error @+1 {{runs over @h but a layout is on @g}}
  %0 = tp.all_reduce %x over @h {grid_axes = array<i64: 0>} : tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>> -> tensor<8xf32, #tp.dist<@g, [[]]>>
  return
}

// -----

// The per-rank view (no layouts): the grid's shape sizes the group.
tp.grid @g [4]
func.func @local_gather_shape(%x: tensor<2xf32>) {
  // expected-error @+1 {{local result 'tensor<4xf32>' does not match the local input 'tensor<2xf32>' over 4 ranks}}
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<2xf32> -> tensor<4xf32>
  return
}

// -----

tp.grid @g [4]
func.func @local_axis_range(%x: tensor<2xf32>) {
  // expected-error @+1 {{grid axis 1 is out of range or repeated for @g of rank 1}}
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 1>} : tensor<2xf32> -> tensor<2xf32>
  return
}

// -----

// The dialect's discardable attributes (TPBase.td) are checked for place
// and kind; a misspelt name is an error, not silently ignored.
// expected-error @+1 {{'func.func' op unknown tp attribute 'tp.prams'}}
func.func @misspelt_attribute(%w: tensor<4xf32> {tp.prams = "w"}) {
  return
}

// -----

// expected-error @+1 {{'tp.param' must be a string, got 3 : i64}}
func.func @param_not_a_string(%w: tensor<4xf32> {tp.param = 3}) {
  return
}

// -----

// expected-error @+1 {{'tp.output' belongs on a function result, not on a function argument}}
func.func @output_on_argument(%w: tensor<4xf32> {tp.output = "loss"}) {
  return
}

// -----

func.func @layer_not_an_integer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tp.layer' must be an i64, got "0"}}
  %0 = tp.gelu %x {tp.layer = "0"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'builtin.module' op 'tp.layer' belongs on an operation, not on the module}}
module attributes {tp.layer = 0} {
}

// -----

tp.grid @g [4]
func.func @shift_never_waited(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tp.ring_shift_start' op must have exactly one use, as the received block of a tp.ring_shift_wait}}
  %0 = tp.ring_shift_start %x over @g {grid_axes = array<i64: 0>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

tp.grid @g [4]
func.func @wait_for_another_block(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tp.ring_shift_start %x over @g {grid_axes = array<i64: 0>} : tensor<4xf32>
  // expected-error @+1 {{'tp.ring_shift_wait' op must wait for a tp.ring_shift_start of its second operand}}
  %1 = tp.ring_shift_wait %0, %y : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

tp.grid @g [4]
func.func @insert_not_in_place(%x: tensor<2xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = tp.constant 0.0 : tensor<8xf32>
  // expected-error @+1 {{'tp.ring_insert' op updates its destination in place, which may have no other use}}
  %1 = tp.ring_insert %x into %0 over @g {dim = 0 : i64, grid_axes = array<i64: 0>, ring_step = 0 : i64} : tensor<2xf32> -> tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

tp.grid @g [4]
func.func @insert_wrong_block(%x: tensor<4xf32>) -> tensor<8xf32> {
  %0 = tp.constant 0.0 : tensor<8xf32>
  // expected-error @+1 {{'tp.ring_insert' op block 'tensor<4xf32>' is not one of the equal blocks of dimension 0 of 'tensor<8xf32>'}}
  %1 = tp.ring_insert %x into %0 over @g {dim = 0 : i64, grid_axes = array<i64: 0>, ring_step = 0 : i64} : tensor<4xf32> -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

// -----

tp.grid @g [4]
func.func @slice_not_a_block(%x: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'tp.ring_slice' op local result 'tensor<4xf32>' does not match the local input 'tensor<8xf32>' over 4 ranks}}
  %0 = tp.ring_slice %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>, ring_step = 1 : i64} : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

tp.grid @g [4]
func.func @ring_in_the_global_view(%x: tensor<8xf32, #tp.dist<@g, [[0]]>>) -> tensor<2xf32> {
  // expected-error @+1 {{'tp.ring_slice' op belongs to the per-rank program;}}
  %0 = tp.ring_slice %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>, ring_step = 1 : i64} : tensor<8xf32, #tp.dist<@g, [[0]]>> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

//===----------------------------------------------------------------------===//
// Rebalance points
//===----------------------------------------------------------------------===//

// -----

tp.grid @g [4]
// expected-error @+1 {{'tp.rebalance_point' op 6 blocks do not divide evenly over 4 ranks}}
tp.rebalance_point @p over @g axis 0 blocks 6 capacity 2

// -----

tp.grid @g [4]
// expected-error @+1 {{'tp.rebalance_point' op capacity 1 must lie between the blocks per rank (2) and all blocks (8)}}
tp.rebalance_point @p over @g axis 0 blocks 8 capacity 1

// -----

tp.grid @g [4]
// expected-error @+1 {{'tp.rebalance_point' op axis 1 is not an axis of grid @g}}
tp.rebalance_point @p over @g axis 1 blocks 8 capacity 3

// -----

// expected-error @+1 {{'tp.rebalance_point' op names @nogrid, which is no tp.grid}}
tp.rebalance_point @p over @nogrid axis 0 blocks 8 capacity 3

// -----

// expected-error @+1 {{'tp.rebalance_dims' must be an array per result of point symbols or unit, one per dimension}}
%0 = "tp.constant"() {value = 0.0 : f64, tp.rebalance_dims = [@p]} : () -> tensor<4xf32>

// -----

// expected-error @+1 {{'tp.rebalance_dims' must be an array of point symbols or unit, one per dimension}}
func.func @bad_arg_tag(%x: tensor<4xf32> {tp.rebalance_dims = [1]}) {
  return
}

// -----

//===----------------------------------------------------------------------===//
// Fused attention
//===----------------------------------------------------------------------===//

func.func @attention_rank(%q: tensor<2x8x16xf32>, %k: tensor<8x16xf32>) {
  // expected-error @+1 {{query 'tensor<2x8x16xf32>', key 'tensor<8x16xf32>' and value 'tensor<8x16xf32>' need the same rank}}
  %0:2 = "tp.attention"(%q, %k, %k) : (tensor<2x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return
}

// -----

func.func @attention_key_batch(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>) {
  // expected-error @+1 {{key 'tensor<2x8x16xf32>' batch dim 0 must be query's (4) or 1}}
  %0:2 = "tp.attention"(%q, %k, %k) : (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_value(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>, %v: tensor<4x6x16xf32>) {
  // expected-error @+1 {{value 'tensor<4x6x16xf32>' must have key's 'tensor<4x8x16xf32>' batch and sequence dims}}
  %0:2 = "tp.attention"(%q, %k, %v) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x6x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_features(%q: tensor<4x8x16xf32>, %k: tensor<4x8x12xf32>) {
  // expected-error @+1 {{query 'tensor<4x8x16xf32>' and key 'tensor<4x8x12xf32>' differ in the last dim}}
  %0:2 = "tp.attention"(%q, %k, %k) : (tensor<4x8x16xf32>, tensor<4x8x12xf32>, tensor<4x8x12xf32>) -> (tensor<4x8x12xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_causal(%q: tensor<4x8x16xf32>, %k: tensor<4x6x16xf32>) {
  // expected-error @+1 {{causal attention needs as many queries as keys, got 8 and 6}}
  %0:2 = tp.attention %q, %k, %k {causal} : (tensor<4x8x16xf32>, tensor<4x6x16xf32>, tensor<4x6x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_logsumexp(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{logsumexp 'tensor<4x16xf32>' should have shape [4, 8] (batch..., queries)}}
  %0:2 = tp.attention %q, %q, %q : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x16xf32>)
  return
}

// -----

func.func @attention_precision(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{attribute 'precision' failed to satisfy constraint}}
  %0:2 = tp.attention %q, %q, %q {precision = f16} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_grad_key(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>, %l: tensor<4x8xf32>) {
  // expected-error @+1 {{key_grad 'tensor<4x8x8xf32>' should have shape [4, 8, 16] (the shape of key)}}
  %0:3 = "tp.attention_grad"(%q, %q, %k, %k, %q, %l) : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8xf32>) -> (tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x16xf32>)
  return
}

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

// -----

func.func @convert_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result 'tensor<8x4xbf16>' should have shape [4, 8] (the shape of input)}}
  %0 = tp.convert %x : tensor<4x8xf32> -> tensor<8x4xbf16>
  return
}

// -----

func.func @gelu_follows_input(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{all of {input, result} have same type}}
  %0 = "tp.gelu"(%x) : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @attention_logsumexp_f32(%q: tensor<2x8x16xbf16>) {
  // expected-error @+1 {{logsumexp must be f32, got 'bf16'}}
  %0:2 = tp.attention %q, %q, %q {causal} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8xbf16>)
  return
}

// -----

func.func @layer_norm_grad_gain_types(%dy: tensor<2x16xbf16>, %x: tensor<2x16xbf16>, %g: tensor<16xf32>) {
  // expected-error @+1 {{gamma_grad has element type 'bf16' but gamma has 'f32'}}
  %0:3 = tp.layer_norm_grad %dy, %x, %g : (tensor<2x16xbf16>, tensor<2x16xbf16>, tensor<16xf32>) -> (tensor<2x16xbf16>, tensor<16xbf16>, tensor<16xf32>)
  return
}

// -----

func.func @adamw_bf16_grad(%p: tensor<16xf32>, %dp: tensor<16xbf16>, %lr: tensor<f32>, %step: tensor<i64>) {
  // The optimizer reads f32 masters and f32 gradients.
  // expected-error @+1 {{grad has element type 'bf16' but param has 'f32'}}
  %0:3 = tp.adamw %p, %dp, %p, %p, %lr, %step, %lr : (tensor<16xf32>, tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @swiglu_shapes(%g: tensor<4x8xf32>, %u: tensor<8xf32>) {
  // SwiGLU does not broadcast.
  // expected-error @+1 {{up 'tensor<8xf32>' should have shape [4, 8] (the shape of gate)}}
  %0 = "tp.swiglu"(%g, %u) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @add_norm_residual_shape(%x: tensor<4x8xf32>, %r: tensor<1x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{residual 'tensor<1x8xf32>' should have shape [4, 8] (the shape of input)}}
  %0:2 = "tp.add_rms_norm"(%x, %r, %g) : (tensor<4x8xf32>, tensor<1x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @norm_grad_residual_shape(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %g: tensor<8xf32>, %r: tensor<8xf32>) {
  // expected-error @+1 {{residual_grad 'tensor<8xf32>' should have shape [4, 8] (the shape of input)}}
  %0:2 = "tp.rms_norm_grad"(%dy, %x, %g, %r) : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @linear_gelu_preactivation(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{has a preactivation result only when it applies gelu}}
  %0:2 = "tp.linear"(%x, %w, %b) : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  return
}

// -----

func.func @linear_bias(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{bias 'tensor<8xf32>' should have shape [16] (the output features)}}
  %0 = "tp.linear"(%x, %w, %b) : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_contraction(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{contraction sizes differ: input 'tensor<4x8xf32>' and weight 'tensor<8x16xf32>'}}
  %0 = "tp.linear"(%x, %w, %b) {transpose_rhs} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @head_chunk(%h: tensor<4x8xf32>, %w: tensor<8x16xf32>, %t: tensor<4xi32>) {
  // expected-error @+1 {{chunk must be positive, got 0}}
  %0 = tp.linear_cross_entropy %h, %w, %t {chunk = 0 : i64} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4xi32>) -> tensor<f32>
  return
}

// -----

func.func @head_targets(%h: tensor<4x8xf32>, %w: tensor<8x16xf32>, %t: tensor<5xi32>) {
  // expected-error @+1 {{targets 'tensor<5xi32>' should have shape [4] (input without the hidden dim)}}
  %0 = tp.linear_cross_entropy %h, %w, %t {chunk = 8 : i64} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<5xi32>) -> tensor<f32>
  return
}

// -----

func.func @linear_cross_entropy_grad_weight(%h: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %t: tensor<4xi32>, %dl: tensor<f32>) {
  // expected-error @+1 {{input_grad must have the type of input and weight_grad the shape of weight}}
  %0:2 = "tp.linear_cross_entropy_grad"(%h, %w, %t, %dl) {chunk = 8 : i64} : (tensor<4x8xbf16>, tensor<8x16xbf16>, tensor<4xi32>, tensor<f32>) -> (tensor<4x8xbf16>, tensor<16x8xf32>)
  return
}

// -----

//===----------------------------------------------------------------------===//
// Pipeline transfers
//===----------------------------------------------------------------------===//

tp.grid @g [2, 2]
func.func @send_never_waited(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tp.send_start' op needs a later tp.send_wait of the same value, peer and tag}}
  tp.send_start %x over @g to 1 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  return
}

// -----

tp.grid @g [2, 2]
func.func @wait_for_another_tag(%x: tensor<4xf32>) {
  tp.send_start %x over @g to 1 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  tp.send_wait %x over @g to 1 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{'tp.send_wait' op must wait for a tp.send_start of the same value, peer and tag}}
  tp.send_wait %x over @g to 1 tag 1 {grid_axis = 0 : i64} : tensor<4xf32>
  return
}

// -----

tp.grid @g [2, 2]
func.func @peer_outside_the_axis(%x: tensor<4xf32>) {
  // expected-error @+1 {{'tp.send_start' op peer 2 is out of range for grid axis 0 of size 2}}
  tp.send_start %x over @g to 2 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  tp.send_wait %x over @g to 2 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  return
}

// -----

tp.grid @g [2, 2]
func.func @recv_never_waited() -> tensor<4xf32> {
  // expected-error @+1 {{'tp.recv_start' op must have exactly one use, a tp.recv_wait}}
  %0 = tp.recv_start over @g from 1 tag 0 {grid_axis = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

tp.grid @g [2, 2]
func.func @recv_on_a_missing_axis() -> tensor<4xf32> {
  // expected-error @+1 {{'tp.recv_start' op grid axis 2 is out of range for @g of rank 2}}
  %0 = tp.recv_start over @g from 1 tag 0 {grid_axis = 2 : i64} : tensor<4xf32>
  %1 = tp.recv_wait %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
