// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Vocabulary-parallel cross-entropy: the vocabulary is a statistics factor
// (max, sum-exp and target logit all-reduced), tokens are reductions of the
// mean loss.
func.func @cross_entropy(%l: tensor<2x8x50xf32>, %t: tensor<2x8xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j]) -> ([]) {i=2, j=8, k=50} reduction={i, j} stats={k}
  %0 = tp.cross_entropy %l, %t : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<f32>
  return
}
