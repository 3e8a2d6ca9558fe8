// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A product's rule, the bias over its columns; the contraction is a
// reduction the kernel cannot split (its epilogue needs the whole sum).
func.func @linear(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %t: tensor<2x4xi32>, %dl: tensor<f32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, l], [k, l], [k]) -> ([i, j, k], [i, j, k]) {i=2, j=4, k=16, l=8} reduction={l}
  %0:2 = tp.linear %x, %w, %b {gelu, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  // The bias gradient sums the rows.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, l], [k, l], [i, j, k]) -> ([i, j, k], [k]) {i=2, j=4, k=16, l=8} reduction={i, j, l}
  %1:2 = tp.linear_gelu_grad %x, %w, %0#1 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<16xf32>)
  // The vocabulary is a statistics factor of the loss, a reduction of the
  // input gradient.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [l, k], [i, j]) -> ([]) {i=2, j=4, k=8, l=16} reduction={i, j, k} stats={l}
  %2 = tp.linear_cross_entropy %x, %w, %t {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [l, k], [i, j], []) -> ([i, j, k], [l, k]) {i=2, j=4, k=8, l=16} reduction={i, j, l}
  %3:2 = tp.linear_cross_entropy_grad %x, %w, %t, %dl {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  return
}
