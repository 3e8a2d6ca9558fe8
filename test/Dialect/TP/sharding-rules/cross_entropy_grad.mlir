// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @cross_entropy_grad(%l: tensor<2x8x50xf32>, %t: tensor<2x8xi32>, %d: tensor<f32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j], []) -> ([i, j, k]) {i=2, j=8, k=50} stats={k}
  %0 = tp.cross_entropy_grad %l, %t, %d : (tensor<2x8x50xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x50xf32>
  return
}
