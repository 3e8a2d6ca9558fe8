// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Whole dims share a factor; sliced dims get a replicated factor on each side.
func.func @slice(%x: tensor<2x8x12xf32>, %wpe: tensor<64x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([i, j, l]) {i=2, j=8, k=12, l=4} replicated={k, l}
  %0 = tp.slice %x {offsets = array<i64: 0, 0, 4>} : (tensor<2x8x12xf32>) -> tensor<2x8x4xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, k]) -> ([j, k]) {i=64, j=8, k=16} replicated={i, j}
  %1 = tp.slice %wpe {offsets = array<i64: 0, 0>} : (tensor<64x16xf32>) -> tensor<8x16xf32>
  return
}
