// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A scalar divisor has no dimensions and so no factors.
func.func @div(%x: tensor<2x8x16xf32>, %s: tensor<f32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], []) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.div %x, %s : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  return
}
