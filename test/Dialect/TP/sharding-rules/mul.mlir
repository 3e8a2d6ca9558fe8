// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A broadcast size-1 dimension cannot be split (`_`); the broadcast can sit
// on either side.
func.func @mul(%x: tensor<2x8x16xf32>, %r: tensor<2x8x1xf32>, %c: tensor<1x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, _]) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([_, k], [i, j, _]) -> ([i, j, k]) {i=2, j=8, k=16}
  %1 = tp.mul %c, %r : (tensor<1x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  return
}
