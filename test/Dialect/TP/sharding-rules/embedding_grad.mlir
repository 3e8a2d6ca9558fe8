// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// The scatter-add sums over tokens: token factors are reductions.
func.func @embedding_grad(%dy: tensor<2x8x16xf32>, %ids: tensor<2x8xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, l], [i, j]) -> ([k, l]) {i=2, j=8, k=50, l=16} reduction={i, j}
  %0 = tp.embedding_grad %dy, %ids : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<50x16xf32>
  return
}
