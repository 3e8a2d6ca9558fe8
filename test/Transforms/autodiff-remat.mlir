// RUN: tpc-opt %s --tp-autodiff=remat=layer --canonicalize --cse | FileCheck %s
// RUN: tpc-opt %s --tp-autodiff=remat=none --canonicalize --cse | FileCheck %s --check-prefix=NONE

// With remat=layer each layer's forward is recomputed (tp.recomputed)
// right before its backward, which then reads the recomputed values; CSE
// must not fold them back into the originals.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[L0:.*]] = tp.gelu %arg0 {tp.layer = 0 : i64}
// CHECK: %[[L1:.*]] = tp.gelu %[[L0]] {tp.layer = 1 : i64}
// CHECK: tp.cross_entropy_grad
// Layer 1 first (the backward runs in reverse), from its saved input %L0;
// silu's gradient reads the recomputed gelu, not %L1. (Recomputations
// nothing reads, like layer 0's gelu here, are dead code and disappear.)
// CHECK: %[[R1:.*]] = tp.gelu %[[L0]] {tp.layer = 1 : i64, tp.recomputed}
// CHECK: tp.silu_grad %{{.*}}, %[[R1]]
// CHECK: tp.gelu_grad %{{.*}}, %[[L0]]
// CHECK: tp.gelu_grad %{{.*}}, %arg0
// NONE-LABEL: func.func @gradients
// NONE-NOT: tp.recomputed
func.func @loss(%x: tensor<4x8xf32> {tp.param = "x", tp.init = "zeros"},
                %targets: tensor<4xi32> {tp.input = "targets"}) -> tensor<f32> {
  %a = tp.gelu %x {tp.layer = 0 : i64} : tensor<4x8xf32>
  %b = tp.gelu %a {tp.layer = 1 : i64} : tensor<4x8xf32>
  %s = tp.silu %b {tp.layer = 1 : i64} : tensor<4x8xf32>
  %l = tp.cross_entropy %s, %targets : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
