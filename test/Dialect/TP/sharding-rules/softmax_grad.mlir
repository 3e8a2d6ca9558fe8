// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @softmax_grad(%dy: tensor<2x4x8x8xf32>, %y: tensor<2x4x8x8xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l], [i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=8} stats={l}
  %0 = tp.softmax_grad %dy, %y : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return
}
