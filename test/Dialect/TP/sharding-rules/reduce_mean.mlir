// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @reduce_mean(%x: tensor<2x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([i, j]) {i=2, j=8, k=16} reduction={k}
  %0 = tp.reduce_mean %x {dims = array<i64: 2>} : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  return
}
