// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Vocabulary-parallel lookup: splitting the vocabulary factor leaves the
// result a partial sum (each rank contributes the rows it owns).
func.func @embedding(%table: tensor<50x16xf32>, %ids: tensor<2x8xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([k, l], [i, j]) -> ([i, j, l]) {i=2, j=8, k=50, l=16} reduction={k}
  %0 = tp.embedding %table, %ids : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
  return
}
