// The VJPs of the fused products, for a program that holds them before
// differentiation: tp.linear's GELU gradient reads its preactivation, its
// bias gradient sums the rows, and tp.linear_cross_entropy differentiates
// into tp.linear_cross_entropy_grad (the logits recomputed, never stored).
// RUN: tpc-opt %s --split-input-file --tp-autodiff --canonicalize | FileCheck %s

// CHECK-LABEL: func.func @gradients
// CHECK: %[[Y:.*]], %[[PRE:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu}
// CHECK: %[[L:.*]] = tp.linear_cross_entropy %[[Y]], %arg3, %arg4 {chunk = 8 : i64, transpose_rhs}
// CHECK: %[[DY:.*]], %[[DW:.*]] = tp.linear_cross_entropy_grad %[[Y]], %arg3, %arg4, %{{.*}} {chunk = 8 : i64, transpose_rhs}
// CHECK: %[[DZ:.*]] = tp.gelu_grad %[[DY]], %[[PRE]]
// CHECK: %[[DB:.*]] = tp.reduce_sum %[[DZ]] {dims = array<i64: 0, 1>}
// CHECK: tp.matmul %[[DZ]], %arg1 {transpose_rhs}
// CHECK: return %[[L]], %{{.*}}, %{{.*}}, %[[DB]], %[[DW]]
func.func @loss(%x: tensor<2x4x8xf32> {tp.param = "x"}, %w: tensor<8x16xf32> {tp.param = "w"},
                %b: tensor<16xf32> {tp.param = "b"}, %head: tensor<32x16xf32> {tp.param = "head"},
                %t: tensor<2x4xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
  %y:2 = tp.linear %x, %w, %b {gelu} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  %l = tp.linear_cross_entropy %y#0, %head, %t {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A GELU linear without its preactivation result: the backward recomputes
// the preactivation (a linear without GELU) for the GELU gradient.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[Y:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[PRE:.*]] = tp.linear %arg0, %arg1, %arg2 : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK: tp.gelu_grad %{{.*}}, %[[PRE]]
func.func @loss(%x: tensor<2x4x8xf32> {tp.param = "x"}, %w: tensor<8x16xf32> {tp.param = "w"},
                %b: tensor<16xf32> {tp.param = "b"}, %head: tensor<32x16xf32> {tp.param = "head"},
                %t: tensor<2x4xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
  %y = tp.linear %x, %w, %b {gelu} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %l = tp.linear_cross_entropy %y, %head, %t {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
