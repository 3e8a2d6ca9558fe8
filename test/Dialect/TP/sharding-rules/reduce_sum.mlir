// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Reduced dims are reduction factors: splitting them leaves a partial sum.
func.func @reduce_sum(%x: tensor<2x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([k]) {i=2, j=8, k=16} reduction={i, j}
  %0 = tp.reduce_sum %x {dims = array<i64: 0, 1>} : (tensor<2x8x16xf32>) -> tensor<16xf32>
  return
}
