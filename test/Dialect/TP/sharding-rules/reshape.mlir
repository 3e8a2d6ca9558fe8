// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Reshapes share factors wherever the two shapes factor compatibly.
func.func @reshape(%x: tensor<2x8x16xf32>, %y: tensor<6x4xf32>, %z: tensor<2x1x8xf32>, %w: tensor<2x2x16xf32>) {
  // Merging tokens: [B, S, H] -> [B*S, H].
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k]) -> ([ij, k]) {i=2, j=8, k=16}
  %0 = tp.reshape %x : (tensor<2x8x16xf32>) -> tensor<16x16xf32>
  // Splitting heads: [B, S, H] -> [B, S, heads, head_dim].
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, kl]) -> ([i, j, k, l]) {i=2, j=8, k=4, l=4}
  %1 = tp.reshape %x : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  // Overlapping groups refine to common factors.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, kl]) -> ([ij, k, l]) {i=2, j=2, k=4, l=4}
  %2 = tp.reshape %w : (tensor<2x2x16xf32>) -> tensor<4x4x4xf32>
  // 6x4 -> 4x6 has no common factorisation: nothing can be split.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([_, _]) -> ([_, _]) {}
  %3 = tp.reshape %y : (tensor<6x4xf32>) -> tensor<4x6xf32>
  // Size-1 dims carry no factor.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, _, j]) -> ([ij]) {i=2, j=8}
  %4 = tp.reshape %z : (tensor<2x1x8xf32>) -> tensor<16xf32>
  return
}
