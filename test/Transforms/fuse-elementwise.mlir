// tp-fuse-elementwise: silu(gate) * up becomes tp.swiglu when nothing else
// reads silu(gate); a norm of a residual add (two tensors of one shape)
// becomes tp.add_layer_norm / tp.add_rms_norm, whose sum serves the add's
// other uses. tp-autodiff then differentiates them with tp.swiglu_grad and
// one norm gradient that adds the residual stream's gradient.
// RUN: tpc-opt %s --split-input-file --tp-fuse-elementwise | FileCheck %s
// RUN: sed '/^\/\/ -----/,$d' %s | tpc-opt --tp-fuse-elementwise --tp-autodiff --canonicalize | FileCheck %s --check-prefix=GRAD

// CHECK-LABEL: func.func @loss
// CHECK: %[[SUM:.*]], %[[N:.*]] = tp.add_rms_norm %arg3, %arg4, %arg2 {epsilon = 1.000000e-04 : f64, tp.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: %[[G:.*]] = tp.matmul %[[N]], %arg0
// CHECK: %[[U:.*]] = tp.matmul %[[N]], %arg1
// CHECK: %[[Y:.*]] = tp.swiglu %[[G]], %[[U]] {tp.layer = 1 : i64} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: tp.silu
// CHECK-NOT: tp.mul
// CHECK: tp.add %[[SUM]],
// GRAD-LABEL: func.func @train_step
// GRAD-NOT: tp.silu_grad
// GRAD: tp.swiglu_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
// The norm's gradient adds the residual stream's (the sum's other use).
// GRAD: %[[DX:.*]], %{{.*}} = tp.rms_norm_grad %{{.*}}, %{{.*}}, %arg2, %{{.*}} {epsilon = 1.000000e-04 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
// GRAD-NOT: tp.add %[[DX]]
// GRAD: tp.adamw %arg3, %[[DX]],
// GRAD: tp.adamw %arg4, %[[DX]],
func.func @loss(%wg: tensor<8x16xf32> {tp.param = "wg"}, %wu: tensor<8x16xf32> {tp.param = "wu"},
                %gain: tensor<8xf32> {tp.param = "gain"},
                %x: tensor<2x4x8xf32> {tp.param = "x"}, %r: tensor<2x4x8xf32> {tp.param = "r"},
                %wd: tensor<16x8xf32> {tp.param = "wd"}) -> (tensor<f32> {tp.output = "loss"}) {
  %sum = tp.add %x, %r {tp.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %n = tp.rms_norm %sum, %gain {epsilon = 1.0e-4 : f64, tp.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %g = tp.matmul %n, %wg {tp.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %u = tp.matmul %n, %wu {tp.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %s = tp.silu %g {tp.layer = 1 : i64} : tensor<2x4x16xf32>
  %y = tp.mul %s, %u {tp.layer = 1 : i64} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %d = tp.matmul %y, %wd {tp.layer = 1 : i64} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %out = tp.add %sum, %d {tp.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = tp.reduce_sum %out {dims = array<i64: 0, 1, 2>} : (tensor<2x4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Layer norm, and the up operand first.
// CHECK-LABEL: func.func @layer_norm_and_order
// CHECK: %{{.*}}, %[[N:.*]] = tp.add_layer_norm %arg0, %arg1, %arg2, %arg3 {epsilon = 2.000000e-03 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: tp.swiglu %[[N]], %arg0
func.func @layer_norm_and_order(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %sum = tp.add %x, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = tp.layer_norm %sum, %g, %b {epsilon = 2.0e-3 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = tp.silu %n : tensor<4x8xf32>
  %y = tp.mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Not fused: silu(gate) read elsewhere, a broadcast product, a norm of a
// broadcast add (a bias or position table).
// CHECK-LABEL: func.func @unfused
// CHECK-NOT: tp.swiglu
// CHECK-NOT: tp.add_layer_norm
// CHECK: tp.layer_norm
func.func @unfused(%x: tensor<4x8xf32>, %bias: tensor<8xf32>, %g: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = tp.silu %x : tensor<4x8xf32>
  %y = tp.mul %s, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s2 = tp.silu %x : tensor<4x8xf32>
  %y2 = tp.mul %s2, %bias : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %sum = tp.add %x, %bias : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %n = tp.layer_norm %sum, %g, %g : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y, %s, %y2, %n : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
