// tp-fuse-products on a per-rank program: a product plus a bias (then GELU)
// becomes tp.linear, the GELU gradient of a product with its bias gradient
// tp.linear_gelu_grad, a cross-entropy of a product with its gradient's two
// products tp.linear_cross_entropy and its gradient. A product summed
// across ranks before its bias stays apart.
// RUN: tpc-opt %s --split-input-file --tp-fuse-products=vocab-chunk=32 | FileCheck %s
// RUN: not tpc-opt %s --split-input-file --tp-fuse-products=vocab-chunk=0 2>&1 | FileCheck %s --check-prefix=CHUNK
// CHUNK: tp-fuse-products: vocab-chunk must be positive, got 0

tp.grid @tp [2]

// CHECK-LABEL: func.func @mlp
// CHECK: %[[Y:.*]], %[[PRE:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu, tp.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
// CHECK: %[[O:.*]] = tp.matmul %[[Y]], %arg3
// CHECK: %[[R:.*]] = tp.all_reduce %[[O]]
// The row-parallel product's bias follows the all-reduce: not fused.
// CHECK: tp.add %[[R]], %arg4
// CHECK: %[[DZ:.*]], %[[DB:.*]] = tp.linear_gelu_grad %arg5, %arg3, %[[PRE]] {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<16xf32>)
// CHECK-NOT: tp.gelu_grad
// CHECK-NOT: tp.reduce_sum
// CHECK: return %{{.*}}, %[[DZ]], %[[DB]]
func.func @mlp(%x: tensor<2x4x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>,
               %w2: tensor<16x8xf32>, %b2: tensor<8xf32>, %dy: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<16xf32>) {
  %p = tp.matmul %x, %w1 {tp.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %z = tp.add %p, %b1 {tp.layer = 0 : i64} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %y = tp.gelu %z {tp.layer = 0 : i64} : tensor<2x4x16xf32>
  %o = tp.matmul %y, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %r = tp.all_reduce %o over @tp {grid_axes = array<i64: 0>} : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %out = tp.add %r, %b2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %t = tp.matmul %dy, %w2 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %dz = tp.gelu_grad %t, %z : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %db = tp.reduce_sum %dz {dims = array<i64: 0, 1>} : (tensor<2x4x16xf32>) -> tensor<16xf32>
  return %out, %dz, %db : tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<16xf32>
}

// -----

// A forward-only program reads the sum only through the GELU: no
// preactivation result, the GELU is applied in place.
// CHECK-LABEL: func.func @forward
// CHECK: %[[Y:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: tp.add
// CHECK: return %[[Y]]
func.func @forward(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %p = tp.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %z = tp.add %p, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %y = tp.gelu %z : tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// A linear without GELU (a bias first), with rebalance dims kept per result;
// a product read twice, a bias over the wrong dim, a scaled product and a
// GELU gradient without its bias gradient are not fused.
// CHECK-LABEL: func.func @others
// CHECK: %[[L:.*]] = tp.linear %arg0, %arg1, %arg2 {tp.rebalance_dims = {{\[\[}}unit, unit, @p]], transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: tp.linear
// CHECK-NOT: tp.linear_gelu_grad
func.func @others(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %b4: tensor<4xf32>)
    -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %p = tp.matmul %x, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %z = tp.add %b, %p {tp.rebalance_dims = [[unit, unit, @p]]} : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %q = tp.matmul %x, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %zq = tp.add %q, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %s = tp.matmul %x, %w {alpha = 2.0 : f64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %zs = tp.add %s, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %t = tp.matmul %x, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %dz = tp.gelu_grad %t, %z : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %z, %q, %zq, %zs, %dz, %s : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
}

// -----

tp.grid @tp [2]

// The vocabulary-parallel head of a 1D program: its cross-entropy and the
// gradient's products (the weight's through reshapes) fuse; the logits
// never exist.
// CHECK-LABEL: func.func @head
// CHECK: %[[L:.*]] = tp.linear_cross_entropy %arg0, %arg1, %arg2 {chunk = 32 : i64, tp.vocab_axes = array<i64: 0>, transpose_rhs} : (tensor<2x4x8xf32>, tensor<48x8xf32>, tensor<2x4xi32>) -> tensor<f32>
// CHECK: %[[DH:.*]], %[[DW:.*]] = tp.linear_cross_entropy_grad %arg0, %arg1, %arg2, %arg3 {chunk = 32 : i64, tp.vocab_axes = array<i64: 0>, transpose_rhs} : (tensor<2x4x8xf32>, tensor<48x8xf32>, tensor<2x4xi32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<48x8xf32>)
// CHECK-NOT: tp.matmul
// CHECK-NOT: tp.cross_entropy
// CHECK: return %[[L]], %[[DH]], %[[DW]]
func.func @head(%h: tensor<2x4x8xf32>, %w: tensor<48x8xf32>, %t: tensor<2x4xi32>, %dl: tensor<f32>)
    -> (tensor<f32>, tensor<2x4x8xf32>, tensor<48x8xf32>) {
  %logits = tp.matmul %h, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<48x8xf32>) -> tensor<2x4x48xf32>
  %loss = tp.cross_entropy %logits, %t {tp.vocab_axes = array<i64: 0>} : (tensor<2x4x48xf32>, tensor<2x4xi32>) -> tensor<f32>
  %g = tp.cross_entropy_grad %logits, %t, %dl {tp.vocab_axes = array<i64: 0>} : (tensor<2x4x48xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x48xf32>
  %dh = tp.matmul %g, %w : (tensor<2x4x48xf32>, tensor<48x8xf32>) -> tensor<2x4x8xf32>
  %g2 = tp.reshape %g : (tensor<2x4x48xf32>) -> tensor<8x48xf32>
  %h2 = tp.reshape %h : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %dw = tp.matmul %g2, %h2 {transpose_lhs} : (tensor<8x48xf32>, tensor<8x8xf32>) -> tensor<48x8xf32>
  return %loss, %dh, %dw : tensor<f32>, tensor<2x4x8xf32>, tensor<48x8xf32>
}

// An untied [hidden, vocab] head in an evaluation (no gradient), and one
// whose logits are also returned, which stays unfused.

// -----

// bf16 storage: the weight's gradient accumulates in f32 (its product's
// type), the input's stays bf16.
// CHECK-LABEL: func.func @head_bf16
// CHECK: tp.linear_cross_entropy %arg0, %arg1, %arg2 {chunk = 32 : i64, transpose_rhs} : (tensor<2x4x8xbf16>, tensor<48x8xbf16>, tensor<2x4xi32>) -> tensor<f32>
// CHECK: tp.linear_cross_entropy_grad %arg0, %arg1, %arg2, %arg3 {chunk = 32 : i64, transpose_rhs} : (tensor<2x4x8xbf16>, tensor<48x8xbf16>, tensor<2x4xi32>, tensor<f32>) -> (tensor<2x4x8xbf16>, tensor<48x8xf32>)
// CHECK-NOT: tp.matmul
func.func @head_bf16(%h: tensor<2x4x8xbf16>, %w: tensor<48x8xbf16>, %t: tensor<2x4xi32>, %dl: tensor<f32>)
    -> (tensor<f32>, tensor<2x4x8xbf16>, tensor<48x8xf32>) {
  %logits = tp.matmul %h, %w {transpose_rhs} : (tensor<2x4x8xbf16>, tensor<48x8xbf16>) -> tensor<2x4x48xbf16>
  %loss = tp.cross_entropy %logits, %t : (tensor<2x4x48xbf16>, tensor<2x4xi32>) -> tensor<f32>
  %g = tp.cross_entropy_grad %logits, %t, %dl : (tensor<2x4x48xbf16>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x48xbf16>
  %dh = tp.matmul %g, %w : (tensor<2x4x48xbf16>, tensor<48x8xbf16>) -> tensor<2x4x8xbf16>
  %g2 = tp.reshape %g : (tensor<2x4x48xbf16>) -> tensor<8x48xbf16>
  %h2 = tp.reshape %h : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
  %dw = tp.matmul %g2, %h2 {transpose_lhs} : (tensor<8x48xbf16>, tensor<8x8xbf16>) -> tensor<48x8xf32>
  return %loss, %dh, %dw : tensor<f32>, tensor<2x4x8xbf16>, tensor<48x8xf32>
}

// -----

// CHECK-LABEL: func.func @heads
// CHECK: tp.linear_cross_entropy %arg0, %arg1, %arg2 {chunk = 16 : i64} : (tensor<8x8xf32>, tensor<8x16xf32>, tensor<8xi32>) -> tensor<f32>
// CHECK: tp.cross_entropy
func.func @heads(%h: tensor<8x8xf32>, %w: tensor<8x16xf32>, %t: tensor<8xi32>)
    -> (tensor<f32>, tensor<f32>, tensor<8x16xf32>) {
  %logits = tp.matmul %h, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %loss = tp.cross_entropy %logits, %t : (tensor<8x16xf32>, tensor<8xi32>) -> tensor<f32>
  %kept = tp.matmul %h, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %loss2 = tp.cross_entropy %kept, %t : (tensor<8x16xf32>, tensor<8xi32>) -> tensor<f32>
  return %loss, %loss2, %kept : tensor<f32>, tensor<f32>, tensor<8x16xf32>
}
