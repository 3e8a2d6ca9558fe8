// RUN: tpc-opt %s -split-input-file --tp-autodiff | FileCheck %s

// A linear layer into the loss. For Y = X W with W shared across the batch:
// dX = dY W^T, and dW = X^T dY with the batch folded into the rows (one
// product, no batch of products summed afterwards).
// CHECK-LABEL: func.func @gradients
// CHECK-SAME: (%[[W:.*]]: tensor<8x16xf32> {{{.*}}tp.param = "w"}, %[[X:.*]]: tensor<2x4x8xf32> {{{.*}}tp.param = "x"}, %{{.*}}: tensor<2x4xi32> {tp.input = "tokens"}, %[[T:.*]]: tensor<2x4xi32> {tp.input = "targets"})
// CHECK-SAME: -> (tensor<f32> {tp.output = "loss"}, tensor<8x16xf32> {tp.grad_of = "w"}, tensor<2x4x8xf32> {tp.grad_of = "x"})
// CHECK: %[[Y:.*]] = tp.matmul %[[X]], %[[W]]
// CHECK: %[[L:.*]] = tp.cross_entropy %[[Y]], %[[T]]
// CHECK: %[[ONE:.*]] = tp.constant 1.000000e+00 : tensor<f32>
// CHECK: %[[DY:.*]] = tp.cross_entropy_grad %[[Y]], %[[T]], %[[ONE]]
// CHECK: %[[DX:.*]] = tp.matmul %[[DY]], %[[W]] {transpose_rhs} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[X2:.*]] = tp.reshape %[[X]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[DY2:.*]] = tp.reshape %[[DY]] : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[DW:.*]] = tp.matmul %[[X2]], %[[DY2]] {transpose_lhs} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: return %[[L]], %[[DW]], %[[DX]]
func.func @loss(%w: tensor<8x16xf32> {tp.param = "w", tp.init = "normal", tp.init_std = 0.02 : f64},
                %x: tensor<2x4x8xf32> {tp.param = "x", tp.init = "zeros"},
                %tokens: tensor<2x4xi32> {tp.input = "tokens"},
                %targets: tensor<2x4xi32> {tp.input = "targets"}) -> tensor<f32> {
  %y = tp.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %l = tp.cross_entropy %y, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// The train step: global norm over every gradient, clipping factor and
// learning rate from the run-time hyperparameters, AdamW per parameter
// (weight decay on matrices only), each update marked for in-place writing.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {tp.param = "w", tp.state = "exp_avg"}
// CHECK-SAME: %{{.*}}: tensor<2x4x8xf32> {tp.param = "x", tp.state = "exp_avg"}
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {tp.param = "w", tp.state = "exp_avg_sq"}
// CHECK-SAME: %{{.*}}: tensor<2x4x8xf32> {tp.param = "x", tp.state = "exp_avg_sq"}
// CHECK-SAME: %[[STEP:arg[0-9]+]]: tensor<i64> {tp.input = "step"}, %[[HP:arg[0-9]+]]: tensor<5xf32> {tp.input = "hyperparameters"})
// CHECK-SAME: (tensor<f32> {tp.output = "loss"}, tensor<8x16xf32> {tp.updates = 0 : i64}, tensor<2x4x8xf32> {tp.updates = 1 : i64}, tensor<8x16xf32> {tp.updates = 2 : i64}
// CHECK: %[[N0:.*]] = tp.norm_squared %{{.*}} : (tensor<8x16xf32>) -> tensor<f32>
// CHECK: %[[N1:.*]] = tp.norm_squared %{{.*}} : (tensor<2x4x8xf32>) -> tensor<f32>
// CHECK: %[[N:.*]] = tp.add %[[N0]], %[[N1]]
// CHECK: %[[CLIP:.*]] = tp.clip_scale %[[N]], %[[HP]]
// CHECK: %[[LR:.*]] = tp.lr_schedule %[[STEP]], %[[HP]]
// CHECK: tp.adamw %arg0, %{{.*}}, %arg2, %arg4, %[[LR]], %[[STEP]], %[[CLIP]] : (tensor<8x16xf32>,
// CHECK: tp.adamw %arg1, %{{.*}}, %arg3, %arg5, %[[LR]], %[[STEP]], %[[CLIP]] : (tensor<2x4x8xf32>,
// CHECK: return

// -----

// Transposed weights (nn.Linear), a broadcast bias, GELU and layer norm.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[H:.*]] = tp.layer_norm %[[X:arg[0-9]+]], %[[G:arg[0-9]+]], %[[B:arg[0-9]+]]
// CHECK: %[[Y0:.*]] = tp.matmul %[[H]], %[[W:arg[0-9]+]] {transpose_rhs}
// CHECK: %[[Y1:.*]] = tp.add %[[Y0]], %[[BIAS:arg[0-9]+]]
// CHECK: %[[A:.*]] = tp.gelu %[[Y1]]
// CHECK: %[[DA:.*]] = tp.cross_entropy_grad %[[A]]
// CHECK: %[[DY1:.*]] = tp.gelu_grad %[[DA]], %[[Y1]]
// The bias gradient sums the broadcast dims away.
// CHECK: %[[DBIAS:.*]] = tp.reduce_sum %[[DY1]] {dims = array<i64: 0, 1>} : (tensor<2x4x16xf32>) -> tensor<16xf32>
// dH = dY W (W is [out, in]); dW = dY^T H with the batch folded.
// CHECK: %[[DH:.*]] = tp.matmul %[[DY1]], %[[W]] : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[H2:.*]] = tp.reshape %[[H]]
// CHECK: %[[DY2:.*]] = tp.reshape %[[DY1]]
// CHECK: %[[DW:.*]] = tp.matmul %[[DY2]], %[[H2]] {transpose_lhs} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = tp.layer_norm_grad %[[DH]], %[[X]], %[[G]]
// CHECK: return %{{.*}}, %[[DX]], %[[DG]], %[[DB]], %[[DW]], %[[DBIAS]]
// Vectors (norm weights, biases) get no weight decay; matrices the default.
// CHECK-LABEL: func.func @train_step
// CHECK: tp.adamw %arg0, {{.*}} : (tensor<2x4x8xf32>,
// CHECK: tp.adamw %arg1, {{.*}} {weight_decay = 0.000000e+00 : f64} : (tensor<8xf32>,
// CHECK: tp.adamw %arg2, {{.*}} {weight_decay = 0.000000e+00 : f64} : (tensor<8xf32>,
// CHECK: tp.adamw %arg3, {{.*}} : (tensor<16x8xf32>,
// CHECK: tp.adamw %arg4, {{.*}} {weight_decay = 0.000000e+00 : f64} : (tensor<16xf32>,
func.func @loss(%x: tensor<2x4x8xf32> {tp.param = "x", tp.init = "zeros"},
                %g: tensor<8xf32> {tp.param = "g", tp.init = "ones"},
                %b: tensor<8xf32> {tp.param = "b", tp.init = "zeros"},
                %w: tensor<16x8xf32> {tp.param = "w", tp.init = "zeros"},
                %bias: tensor<16xf32> {tp.param = "bias", tp.init = "zeros"},
                %targets: tensor<2x4xi32> {tp.input = "targets"}) -> tensor<f32> {
  %h = tp.layer_norm %x, %g, %b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %y0 = tp.matmul %h, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %y1 = tp.add %y0, %bias : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %a = tp.gelu %y1 : tensor<2x4x16xf32>
  %l = tp.cross_entropy %a, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Attention pieces: a causal softmax's gradient needs no mask (masked
// probabilities are 0), rotary's is the inverse rotation, a slice's is a
// pad, and a tied embedding sums its two uses.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[S:.*]] = tp.slice %[[QKV:arg[0-9]+]] {offsets = array<i64: 0, 0, 0>}
// CHECK: %[[Q:.*]] = tp.rotary %[[S]]
// CHECK: %[[P:.*]] = tp.softmax %{{.*}} {causal}
// CHECK: %[[DS:.*]] = tp.softmax_grad %{{.*}}, %[[P]]
// CHECK: tp.rotary %{{.*}} {inverse} : tensor<2x4x8xf32>
// CHECK: tp.pad %{{.*}} {offsets = array<i64: 0, 0, 0>} : (tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
func.func @loss(%qkv: tensor<2x4x16xf32> {tp.param = "qkv", tp.init = "zeros"},
                %targets: tensor<2x4xi32> {tp.input = "targets"}) -> tensor<f32> {
  %s = tp.slice %qkv {offsets = array<i64: 0, 0, 0>} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
  %q = tp.rotary %s : tensor<2x4x8xf32>
  %scores = tp.matmul %q, %q {transpose_rhs} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p = tp.softmax %scores {causal} : tensor<2x4x4xf32>
  %l = tp.cross_entropy %p, %targets : (tensor<2x4x4xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @gradients
// CHECK: %[[E:.*]] = tp.embedding_grad %{{.*}}, %[[IDS:arg[0-9]+]] : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x8xf32>
// CHECK: %[[SUM:.*]] = tp.add %{{.*}}, %[[E]] : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK: return %{{.*}}, %[[SUM]]
func.func @loss(%wte: tensor<16x8xf32> {tp.param = "wte", tp.init = "zeros"},
                %ids: tensor<2x4xi32> {tp.input = "tokens"},
                %targets: tensor<2x4xi32> {tp.input = "targets"}) -> tensor<f32> {
  %x = tp.embedding %wte, %ids : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %logits = tp.matmul %x, %wte {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = tp.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A sum pooling (a DLRM's embedding bags, [B, T, L, D] summed over L): its
// VJP broadcasts the cotangent back over L by a product with a fill of only
// the reduced dimension ([L, 1]: no batch dimension, so nothing of it is
// split or moved with the batch). reduce_mean's fill holds 1/count.
// CHECK-LABEL: func.func @gradients(%{{.*}}: tensor<2x3x5x4xf32>
// CHECK: %[[DP:.*]] = tp.cross_entropy_grad
// CHECK: %[[KEPT:.*]] = tp.reshape %[[DP]] : (tensor<2x3x4xf32>) -> tensor<2x3x1x4xf32>
// CHECK-NEXT: %[[FILL:.*]] = tp.constant 1.000000e+00 : tensor<5x1xf32>
// CHECK-NEXT: %[[DBAGS:.*]] = tp.mul %[[KEPT]], %[[FILL]] : (tensor<2x3x1x4xf32>, tensor<5x1xf32>) -> tensor<2x3x5x4xf32>
// CHECK: %[[QUARTER:.*]] = tp.constant 2.500000e-01 : tensor<4xf32>
// CHECK-NEXT: tp.mul %{{.*}}, %[[QUARTER]] : (tensor<2x3x5x1xf32>, tensor<4xf32>) -> tensor<2x3x5x4xf32>
func.func @loss(%x: tensor<2x3x5x4xf32> {tp.param = "x", tp.init = "zeros"},
                %tokens: tensor<2x3xi32> {tp.input = "tokens"},
                %targets: tensor<2x3xi32> {tp.input = "targets"}) -> tensor<f32> {
  %m = tp.reduce_mean %x {dims = array<i64: 3>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x5xf32>
  %r = tp.reshape %m : (tensor<2x3x5xf32>) -> tensor<2x3x5x1xf32>
  %b = tp.mul %x, %r : (tensor<2x3x5x4xf32>, tensor<2x3x5x1xf32>) -> tensor<2x3x5x4xf32>
  %p = tp.reduce_sum %b {dims = array<i64: 2>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x4xf32>
  %l = tp.cross_entropy %p, %targets : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
