// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @scale(%x: tensor<2x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.scale %x, 0.5 : tensor<2x8x16xf32>
  return
}
