// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// The gradient of slice: its rule mirrors slice's.
func.func @pad(%x: tensor<2x8x4xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([i, j, l]) {i=2, j=8, k=4, l=12} replicated={k, l}
  %0 = tp.pad %x {offsets = array<i64: 0, 0, 4>} : (tensor<2x8x4xf32>) -> tensor<2x8x12xf32>
  return
}
