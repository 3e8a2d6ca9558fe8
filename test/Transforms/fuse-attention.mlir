// tp-fuse-attention turns q k^T -> causal softmax -> probs v into one
// tp.attention when nothing else reads the scores or the probabilities;
// tp-autodiff then differentiates it with one tp.attention_grad.
// RUN: tpc-opt %s --split-input-file --tp-fuse-attention | FileCheck %s
// RUN: sed '/^\/\/ -----/,$d' %s | tpc-opt --tp-pipeline="train=true" --mlir-print-ir-after=tp-autodiff -o /dev/null 2>&1 | FileCheck %s --check-prefix=GRAD

// CHECK-LABEL: func.func @loss
// CHECK-NOT: tp.softmax
// CHECK: %[[OUT:.*]], %{{.*}} = tp.attention %arg0, %arg1, %arg2 {alpha = 2.500000e-01 : f64, causal, tp.layer = 0 : i64} : (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x16xf32>) -> (tensor<2x4x3x8x16xf32>, tensor<2x4x3x8xf32>)
// CHECK-NOT: tp.matmul
// CHECK: tp.reduce_sum %[[OUT]]
// GRAD-LABEL: func.func @gradients
// GRAD-NOT: tp.softmax
// GRAD: %[[OUT:.*]], %[[LSE:.*]] = tp.attention %arg0, %arg1, %arg2
// GRAD-NOT: tp.softmax
// GRAD: tp.attention_grad %{{.*}}, %arg0, %arg1, %arg2, %[[OUT]], %[[LSE]] {alpha = 2.500000e-01 : f64, causal}
// GRAD-NOT: tp.softmax
// GRAD-LABEL: func.func @train_step
func.func @loss(%q: tensor<2x4x3x8x16xf32> {tp.param = "q"}, %k: tensor<2x4x1x8x16xf32> {tp.param = "k"}, %v: tensor<2x4x1x8x16xf32> {tp.param = "v"}) -> tensor<f32> {
  %s = tp.matmul %q, %k {alpha = 0.25 : f64, transpose_rhs, tp.layer = 0 : i64} : (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>) -> tensor<2x4x3x8x8xf32>
  %p = tp.softmax %s {causal, tp.layer = 0 : i64} : tensor<2x4x3x8x8xf32>
  %o = tp.matmul %p, %v {tp.layer = 0 : i64} : (tensor<2x4x3x8x8xf32>, tensor<2x4x1x8x16xf32>) -> tensor<2x4x3x8x16xf32>
  %l = tp.reduce_sum %o {dims = array<i64: 0, 1, 2, 3, 4>} : (tensor<2x4x3x8x16xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Not fused: an unmasked softmax, scores or probabilities read elsewhere,
// a scaled or transposed context product.
// CHECK-LABEL: func.func @unfused
// CHECK-NOT: tp.attention
// CHECK-COUNT-5: tp.softmax
func.func @unfused(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>, %v: tensor<4x8x16xf32>, %w: tensor<4x16x8xf32>) -> (tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) {
  %s0 = tp.matmul %q, %k {transpose_rhs} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %p0 = tp.softmax %s0 : tensor<4x8x8xf32>
  %o0 = tp.matmul %p0, %v : (tensor<4x8x8xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %s1 = tp.matmul %q, %k {transpose_rhs} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %p1 = tp.softmax %s1 {causal} : tensor<4x8x8xf32>
  %o1 = tp.matmul %p1, %v : (tensor<4x8x8xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %s2 = tp.matmul %q, %k {transpose_rhs} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %p2 = tp.softmax %s2 {causal} : tensor<4x8x8xf32>
  %o2 = tp.matmul %p2, %v : (tensor<4x8x8xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %s3 = tp.matmul %q, %k {transpose_rhs} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %p3 = tp.softmax %s3 {causal} : tensor<4x8x8xf32>
  %o3 = tp.matmul %p3, %v {alpha = 2.0 : f64} : (tensor<4x8x8xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %s4 = tp.matmul %q, %k {transpose_rhs} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x8xf32>
  %p4 = tp.softmax %s4 {causal} : tensor<4x8x8xf32>
  %o4 = tp.matmul %p4, %w {transpose_rhs} : (tensor<4x8x8xf32>, tensor<4x16x8xf32>) -> tensor<4x8x16xf32>
  return %o0, %s1, %o1, %p2, %o2, %o3, %o4 : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
}
