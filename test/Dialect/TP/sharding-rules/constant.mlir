// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @constant() {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: () -> ([i, j]) {i=4, j=8}
  %0 = tp.constant 0.0 : tensor<4x8xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: () -> ([]) {}
  %1 = tp.constant 1.0 : tensor<f32>
  return
}
