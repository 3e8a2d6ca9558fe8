// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Rotate-half pairs element i with i + D/2, so the head dim must stay whole;
// batch, heads and sequence split freely.
func.func @rotary(%q: tensor<2x4x8x16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16} replicated={l}
  %0 = tp.rotary %q : tensor<2x4x8x16xf32>
  return
}

// At a generation step's positions ([batch, seq]) the sequence splits too:
// each row carries its own position.
func.func @rotary_at(%q: tensor<2x4x8x16xf32>, %positions: tensor<2x8xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l], [i, k]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16} replicated={l}
  %0 = tp.rotary %q at %positions : tensor<2x8xi32> : tensor<2x4x8x16xf32>
  return
}
