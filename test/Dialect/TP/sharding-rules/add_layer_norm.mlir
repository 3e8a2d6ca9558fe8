// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// The residual add shares the norm's rule: tokens parallel, the hidden
// factor a statistics factor (split features all-reduce the statistics).
func.func @add_layer_norm(%x: tensor<2x8x16xf32>, %r: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k], [k], [k]) -> ([i, j, k], [i, j, k]) {i=2, j=8, k=16} stats={k}
  %0:2 = tp.add_layer_norm %x, %r, %g, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k], [k]) -> ([i, j, k], [i, j, k]) {i=2, j=8, k=16} stats={k}
  %1:2 = tp.add_rms_norm %x, %r, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  // A residual gradient is row-shaped: reductions over the tokens for the
  // gain's gradient only.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k], [k], [i, j, k]) -> ([i, j, k], [k]) {i=2, j=8, k=16} reduction={i, j} stats={k}
  %2:2 = tp.rms_norm_grad %x, %x, %g, %r : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  return
}
