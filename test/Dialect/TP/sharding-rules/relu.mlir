// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @relu(%x: tensor<4x26xf32>, %dy: tensor<4x26xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j]) -> ([i, j]) {i=4, j=26}
  %0 = tp.relu %x : tensor<4x26xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j], [i, j]) -> ([i, j]) {i=4, j=26}
  %1 = tp.relu_grad %dy, %x : (tensor<4x26xf32>, tensor<4x26xf32>) -> tensor<4x26xf32>
  return
}
