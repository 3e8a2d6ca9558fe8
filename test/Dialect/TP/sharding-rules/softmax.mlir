// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Keys are a statistics factor (max and sum all-reduced when split); with a
// causal mask the query factor stays parallel.
func.func @softmax(%s: tensor<2x4x8x8xf32>, %l: tensor<8x50xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=8} stats={l}
  %0 = tp.softmax %s {causal} : tensor<2x4x8x8xf32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j]) -> ([i, j]) {i=8, j=50} stats={j}
  %1 = tp.softmax %l : tensor<8x50xf32>
  return
}
