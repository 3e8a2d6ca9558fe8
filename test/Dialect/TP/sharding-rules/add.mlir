// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A bias broadcast over the leading dims indexes only the last factor.
func.func @add(%x: tensor<2x8x16xf32>, %b: tensor<16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [k]) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.add %x, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}
