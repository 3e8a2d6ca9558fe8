// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Elementwise on two tensors of one shape: every dim splits.
func.func @swiglu(%g: tensor<2x8x16xf32>, %u: tensor<2x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.swiglu %g, %u : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k], [i, j, k]) -> ([i, j, k], [i, j, k]) {i=2, j=8, k=16}
  %1:2 = tp.swiglu_grad %g, %g, %u : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}
