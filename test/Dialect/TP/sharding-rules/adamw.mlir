// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// The optimiser is elementwise, so its state shards with its parameter.
func.func @adamw(%p: tensor<16x32xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j], [i, j], [i, j], [i, j], [], [], []) -> ([i, j], [i, j], [i, j]) {i=16, j=32}
  %0:3 = tp.adamw %p, %p, %p, %p, %lr, %s, %lr : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>)
  return
}
