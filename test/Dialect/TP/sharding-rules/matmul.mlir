// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Factors are declared batch..., M, N, K; K is the reduction.
func.func @matmul(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %y: tensor<2x8x32xf32>,
                  %a: tensor<16x8xf32>, %b: tensor<16x32xf32>,
                  %q: tensor<4x16x8xf32>, %k: tensor<4x32x16xf32>, %m: tensor<8x16xf32>,
                  %bw: tensor<4x16x32xf32>, %gq: tensor<2x2x3x8x4xf32>, %gk: tensor<2x2x1x8x4xf32>) {
  // X * W with a weight shared across the batch.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, l], [l, k]) -> ([i, j, k]) {i=2, j=8, k=32, l=16} reduction={l}
  %0 = tp.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  // dY * W^T
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, l], [k, l]) -> ([i, j, k]) {i=2, j=8, k=16, l=32} reduction={l}
  %1 = tp.matmul %y, %w {transpose_rhs} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  // X^T * dY
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([k, i], [k, j]) -> ([i, j]) {i=8, j=32, k=16} reduction={k}
  %2 = tp.matmul %a, %b {transpose_lhs} : (tensor<16x8xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  // Both transposed, batched on both sides.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, l, j], [i, k, l]) -> ([i, j, k]) {i=4, j=8, k=32, l=16} reduction={l}
  %3 = tp.matmul %q, %k {transpose_lhs, transpose_rhs} : (tensor<4x16x8xf32>, tensor<4x32x16xf32>) -> tensor<4x8x32xf32>
  // Only the rhs is batched: the lhs is broadcast and lacks the batch factor.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([j, l], [i, l, k]) -> ([i, j, k]) {i=4, j=8, k=32, l=16} reduction={l}
  %4 = tp.matmul %m, %bw : (tensor<8x16xf32>, tensor<4x16x32xf32>) -> tensor<4x8x32xf32>
  // Grouped-query attention scores: one key head (size-1 batch dim, no
  // factor) serves a group of 3 query heads.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l, n], [i, j, _, m, n]) -> ([i, j, k, l, m]) {i=2, j=2, k=3, l=8, m=8, n=4} reduction={n}
  %5 = tp.matmul %gq, %gk {transpose_rhs} : (tensor<2x2x3x8x4xf32>, tensor<2x2x1x8x4xf32>) -> tensor<2x2x3x8x8xf32>
  return
}
