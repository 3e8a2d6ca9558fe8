// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Elementwise: every dim splits alike, whatever the element types.
func.func @convert(%x: tensor<2x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}
  %0 = tp.convert %x : tensor<2x8x16xf32> -> tensor<2x8x16xbf16>
  return
}
